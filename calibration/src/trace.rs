//! `twin calibrate trace`: a hardware profile fitted to what a framework's real step shows in
//! its PyTorch profiler trace, so that twin prices that framework's work on that GPU as it ran.
//!
//! Each fitted part comes from the trace's individual kernels, as a microbenchmark would time
//! them, not from the step as a whole:
//! - the GEMM curve ([`crate::fit::gemm`], as `twin calibrate cuda` fits it): every GEMM
//!   kernel whose launching op (`aten::mm`, `aten::addmm`, `aten::bmm`) recorded its shapes is
//!   one timed call of `m x n x k`;
//! - the memory-bound bandwidth: every copy or cast kernel (`aten::copy_`, whose shapes and
//!   types give the bytes it read and wrote exactly) is one point of
//!   `time = bytes / bandwidth + floor`, fitted by least squares;
//! - the per-kernel cost that remains: the scenario is simulated with the two fits, and what
//!   the measured step is longer than that prediction, spread over the kernels twin counts,
//!   becomes the profile's `kernel.launch_ns` (host dispatch, launch gaps, kernel floors: what
//!   an eager framework pays per kernel beyond its work).
//!
//! Everything else (attention curves, links, peaks) stays the base profile's. The result says
//! what it fitted from how many kernels, with intervals where the fits give them.

use crate::fit::gemm::{fit as fit_gemm, GemmFit, GemmPoint, Operands};
use crate::fit::linear::weighted_least_squares;
use crate::fit::Estimate;
use crate::microbench::HOPPER_TILES;
use crate::CalibError;
use serde::Serialize;
use twin_measured::kineto::{KernelClass, RankTrace};
use twin_sim::profile::{Param, Profile, Source};
use twin_sim::scenario::Scenario;

/// What `calibrate_trace` fitted and how the prediction moved.
#[derive(Clone, Debug, Serialize)]
pub struct TraceFit {
    pub gemm: GemmFit,
    /// GEMM kernels the curve was fitted to.
    pub gemm_kernels: usize,
    /// Bytes read and written per second by the copy and cast kernels.
    pub memory_bandwidth_bytes_per_s: Estimate,
    /// Their fixed time per kernel.
    pub memory_floor_ns: Estimate,
    pub memory_kernels: usize,
    /// The per-kernel cost left after the fits (the profile's `kernel.launch_ns`).
    pub launch_ns: f64,
    /// Kernels the trace's step ran, and kernels twin's schedule of the scenario counts on
    /// the rank.
    pub kernels_measured: u32,
    pub kernels_predicted: u64,
    /// The step the launch cost was fitted to (the trace's, or the one given unprofiled).
    pub step_measured_s: f64,
    /// The prediction with the base profile, with the fitted GEMM and memory terms but no
    /// per-kernel cost, and with the whole fitted profile.
    pub step_base_s: f64,
    pub step_without_launch_s: f64,
    pub step_fitted_s: f64,
}

/// The GEMM calls of a trace's step: each GEMM kernel whose launching op recorded its shapes,
/// in bf16 (what the profile's curve describes).
pub fn gemm_points(trace: &RankTrace, window: (u64, u64)) -> Vec<GemmPoint> {
    trace
        .kernels
        .iter()
        .filter(|k| k.class == KernelClass::Gemm && in_window(k.start_ns, window))
        .filter(|k| k.op_input_types.iter().any(|t| t == "c10::BFloat16"))
        .filter_map(|k| {
            let dims = &k.op_input_dims;
            let (m, kk, n, batch) = match k.op.as_deref()? {
                // [[m, k], [k, n]]
                "aten::mm" => {
                    let (a, b) = (dims.first()?, dims.get(1)?);
                    (*a.first()?, *a.get(1)?, *b.get(1)?, 1)
                }
                // [[n] or [m, n], [m, k], [k, n]]
                "aten::addmm" => {
                    let (a, b) = (dims.get(1)?, dims.get(2)?);
                    (*a.first()?, *a.get(1)?, *b.get(1)?, 1)
                }
                // [[b, m, k], [b, k, n]]
                "aten::bmm" => {
                    let (a, b) = (dims.first()?, dims.get(1)?);
                    (*a.get(1)?, *a.get(2)?, *b.get(2)?, *a.first()?)
                }
                _ => return None,
            };
            (m > 0 && n > 0 && kk > 0 && k.dur_ns > 0).then_some(GemmPoint {
                m,
                n,
                k: kk,
                batch,
                time_ns: k.dur_ns as f64,
                cold: false,
            })
        })
        .collect()
}

/// Bytes of one element of a PyTorch type name as the profiler records it.
fn type_bytes(t: &str) -> Option<u64> {
    match t {
        "float" | "int" | "unsigned int" => Some(4),
        "double" | "long int" | "long" => Some(8),
        "c10::BFloat16" | "c10::Half" | "short int" => Some(2),
        "bool" | "signed char" | "unsigned char" | "c10::Float8_e4m3fn" | "c10::Float8_e5m2" => {
            Some(1)
        }
        _ => None,
    }
}

/// The copy and cast kernels of a step, as (bytes read and written, ns): `aten::copy_`'s
/// destination and source (`[[dst], [src], []]`), each its shape times its type's size.
pub fn copy_points(trace: &RankTrace, window: (u64, u64)) -> Vec<(f64, f64)> {
    trace
        .kernels
        .iter()
        .filter(|k| k.op.as_deref() == Some("aten::copy_") && in_window(k.start_ns, window))
        .filter(|k| matches!(k.class, KernelClass::Elementwise | KernelClass::Other))
        .filter_map(|k| {
            let bytes = |i: usize| -> Option<u64> {
                let numel = k
                    .op_input_dims
                    .get(i)?
                    .iter()
                    .try_fold(1u64, |a, &d| a.checked_mul(d))?;
                numel.checked_mul(type_bytes(k.op_input_types.get(i)?)?)
            };
            let total = bytes(0)?.checked_add(bytes(1)?)?;
            (total > 0 && k.dur_ns > 0).then_some((total as f64, k.dur_ns as f64))
        })
        .collect()
}

fn in_window(t: u64, (lo, hi): (u64, u64)) -> bool {
    lo <= t && t < hi
}

/// Fits `time = bytes / bandwidth + floor` to copy kernels (weighted by 1/time^2: relative
/// errors, as every fit of the calibration): the bandwidth and the floor with intervals.
fn fit_copies(points: &[(f64, f64)]) -> Result<(Estimate, Estimate), CalibError> {
    let x: Vec<Vec<f64>> = points.iter().map(|&(b, _)| vec![b, 1.0]).collect();
    let y: Vec<f64> = points.iter().map(|&(_, t)| t).collect();
    let w: Vec<f64> = y.iter().map(|t| 1.0 / (t * t)).collect();
    let f = weighted_least_squares(&x, &y, &w)?;
    let ns_per_byte = f.coef.first().copied().unwrap_or(f64::NAN);
    if !(ns_per_byte.is_finite() && ns_per_byte > 0.0) {
        return Err(CalibError::Profile(format!(
            "the copy kernels give no positive time per byte ({ns_per_byte} ns/B over {} kernels)",
            points.len()
        )));
    }
    let bandwidth = Estimate::per_second(ns_per_byte, f.ci95(0));
    let floor = Estimate {
        value: f.coef.get(1).copied().unwrap_or(0.0).max(0.0),
        ci95: f.ci95(1),
    };
    Ok((bandwidth, floor))
}

/// The profile of `base` with the GEMM curve and the memory-bound bandwidth fitted to the
/// trace's step and the per-kernel cost fitted to `step_measured_s` (module doc). `rank` is
/// the scenario's rank the trace is of.
pub fn calibrate_trace(
    trace: &RankTrace,
    step: usize,
    scenario: &Scenario,
    base: &Profile,
    rank: u32,
    step_measured_s: Option<f64>,
) -> Result<(Profile, TraceFit), CalibError> {
    let span = trace.steps.get(step).ok_or_else(|| {
        CalibError::Profile(format!(
            "{}: no step {step} (the trace has {})",
            trace.path.display(),
            trace.steps.len()
        ))
    })?;
    let window = (span.start_ns, span.end_ns());
    let breakdown = twin_measured::kineto::breakdown(trace, step)
        .map_err(|e| CalibError::Profile(e.to_string()))?;
    let points = gemm_points(trace, window);
    if points.len() < 3 {
        return Err(CalibError::Profile(format!(
            "{}: {} bf16 GEMM kernels with recorded shapes in step {step}; the curve needs at \
             least 3 (record the trace with record_shapes=True)",
            trace.path.display(),
            points.len()
        )));
    }
    let gemm = fit_gemm(&points, &HOPPER_TILES, Operands::Free)?;
    let copies = copy_points(trace, window);
    if copies.len() < 3 {
        return Err(CalibError::Profile(format!(
            "{}: {} copy kernels with recorded shapes in step {step}; the bandwidth fit needs \
             at least 3",
            trace.path.display(),
            copies.len()
        )));
    }
    let (bandwidth, floor) = fit_copies(&copies)?;

    let origin = trace.path.display().to_string();
    let fitted = |e: Estimate, what: &str| Param {
        value: e.value,
        source: Source::Fitted,
        reference: format!("{what}; twin calibrate trace {origin}"),
        ci95: (e.ci95[0].is_finite() && e.ci95[1].is_finite()).then_some(e.ci95),
    };
    let mut p = base.clone();
    p.name = format!("{}-from-trace", base.gpu);
    p.description = format!(
        "{} with the GEMM curve, memory-bound bandwidth and per-kernel cost fitted to the \
         PyTorch trace {origin}",
        base.name
    );
    let rate = fitted(
        gemm.rate_flops_per_s.clamp(f64::MIN_POSITIVE, f64::MAX),
        &format!(
            "bf16 GEMM curve over {} GEMM kernels of the trace: sustained rate",
            points.len()
        ),
    );
    p.gemm_max_efficiency = Param {
        value: rate.value / p.peak_bf16_flops_per_s.value.max(f64::MIN_POSITIVE),
        source: Source::Fitted,
        reference: "gemm.bf16_flops_per_s / gpu.peak_flops_per_s.bf16".into(),
        ci95: None,
    };
    p.gemm_bf16_flops_per_s = Some(rate);
    p.gemm_k_half = fitted(gemm.k_half.clamp(0.0, f64::MAX), "bf16 GEMM curve");
    p.gemm_ramp_ns = fitted(gemm.ramp_ns.clamp(0.0, f64::MAX), "bf16 GEMM curve");
    p.gemm_tile_m.value = gemm.tile_m as f64;
    p.gemm_tile_n.value = gemm.tile_n as f64;
    let bw = fitted(
        bandwidth.clamp(f64::MIN_POSITIVE, f64::MAX),
        &format!(
            "copy and cast kernels of the trace ({}): bytes read + written per second",
            copies.len()
        ),
    );
    p.memory_efficiency = Param {
        value: bw.value / p.hbm_bandwidth_bytes_per_s.value.max(f64::MIN_POSITIVE),
        source: Source::Fitted,
        reference: "memory.bandwidth_bytes_per_s / gpu.hbm_bandwidth_bytes_per_s".into(),
        ci95: None,
    };
    p.memory_bandwidth_bytes_per_s = Some(bw);

    let simulate = |profile: &Profile| -> Result<(f64, u64), CalibError> {
        let staged = twin_sim::Staged::with_profile(scenario, Some(profile))
            .map_err(|e| CalibError::Profile(e.to_string()))?;
        let opts = twin_sim::engine::SimOptions {
            collapse: false,
            ..twin_sim::sim_options(scenario, &twin_sim::PredictOptions::default())
        };
        let r = staged
            .simulate(&opts)
            .map_err(|e| CalibError::Profile(e.to_string()))?;
        let kernels = staged.schedule.get_program(rank).map_or(0, |prog| {
            prog.ops
                .iter()
                .filter_map(|o| match &o.kind {
                    twin_sim::schedule::OpKind::Compute(c) => Some(u64::from(c.kernels)),
                    _ => None,
                })
                .sum()
        });
        Ok((r.step_time_ns as f64 * 1e-9, kernels))
    };
    let (step_base_s, _) = simulate(base)?;
    let mut no_launch = p.clone();
    no_launch.launch_ns.value = 0.0;
    let (step_without_launch_s, kernels_predicted) = simulate(&no_launch)?;
    let measured_s = step_measured_s.unwrap_or(breakdown.step_ns as f64 * 1e-9);
    let launch_ns = if kernels_predicted > 0 {
        ((measured_s - step_without_launch_s) * 1e9 / kernels_predicted as f64).max(0.0)
    } else {
        0.0
    };
    p.launch_ns = Param {
        value: launch_ns,
        source: Source::Fitted,
        reference: format!(
            "per-kernel cost: the measured step ({:.1} ms) beyond the prediction with the \
             fitted GEMM and memory terms ({:.1} ms), over the {kernels_predicted} kernels twin \
             counts on rank {rank}; twin calibrate trace {origin}",
            measured_s * 1e3,
            step_without_launch_s * 1e3
        ),
        ci95: None,
    };
    p.launch_per_op = false;
    let (step_fitted_s, _) = simulate(&p)?;
    let fit = TraceFit {
        gemm,
        gemm_kernels: points.len(),
        memory_bandwidth_bytes_per_s: bandwidth,
        memory_floor_ns: floor,
        memory_kernels: copies.len(),
        launch_ns,
        kernels_measured: breakdown.kernels,
        kernels_predicted,
        step_measured_s: measured_s,
        step_base_s,
        step_without_launch_s,
        step_fitted_s,
    };
    Ok((p, fit))
}

impl TraceFit {
    /// The fit for people.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let g = &self.gemm;
        let _ = writeln!(
            out,
            "gemm          {:.0} TFLOP/s sustained (95% {:.0}-{:.0}), k_half {:.0}, ramp {:.1} us, \
             tile {}x{}; {} kernels",
            g.rate_flops_per_s.value / 1e12,
            g.rate_flops_per_s.ci95[0] / 1e12,
            g.rate_flops_per_s.ci95[1] / 1e12,
            g.k_half.value,
            g.ramp_ns.value / 1e3,
            g.tile_m,
            g.tile_n,
            self.gemm_kernels
        );
        let _ = writeln!(
            out,
            "memory-bound  {:.2} TB/s (95% {:.2}-{:.2}), floor {:.1} us per kernel; {} copy kernels",
            self.memory_bandwidth_bytes_per_s.value / 1e12,
            self.memory_bandwidth_bytes_per_s.ci95[0] / 1e12,
            self.memory_bandwidth_bytes_per_s.ci95[1] / 1e12,
            self.memory_floor_ns.value / 1e3,
            self.memory_kernels
        );
        let _ = writeln!(
            out,
            "per kernel    {:.2} us beyond the fitted work ({} kernels measured, {} counted by twin)",
            self.launch_ns / 1e3,
            self.kernels_measured,
            self.kernels_predicted
        );
        let _ = writeln!(
            out,
            "step          measured {:.1} ms; predicted {:.1} ms with the base profile, {:.1} ms \
             fitted without the per-kernel cost, {:.1} ms fitted",
            self.step_measured_s * 1e3,
            self.step_base_s * 1e3,
            self.step_without_launch_s * 1e3,
            self.step_fitted_s * 1e3
        );
        out
    }
}
