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
//! - the attention kernel's efficiency: the calls of the backend the scenario's framework runs
//!   (cuDNN, flash; `aten::_cudnn_attention_*`, `aten::_flash_attention_*`,
//!   `aten::_scaled_dot_product_*` with `[b, heads, s, d]` shapes) against the base curve's
//!   price for the same shapes, causal, per direction: the curve's `max_efficiency` scaled by
//!   their ratio (its half points kept);
//! - the gap between dependent kernels (the profile's `kernel.launch_ns`): the median gap
//!   between consecutive kernels of the step. An eager host runs ahead of the GPU for most of
//!   a step, so most gaps are the GPU's own; the host-bound gaps are a minority the median
//!   leaves out;
//! - the host's time per kernel (the framework's `launch.host_per_kernel_ns`, or the variant
//!   the scenario's `compile` / `cuda_graphs` selects): the scenario is simulated with the
//!   fits above and the framework's kernel counts, and the host time is the one under which
//!   the simulated step equals the measured one (bisection: the step grows with it). The
//!   engine's host issue model (`twin_sim::cost::CostModel::host_issue_ns`) lets long kernels
//!   hide it and short ones expose it, so it carries to other shapes where an additive
//!   per-kernel cost would not. [`framework_toml`] writes it into a copy of the framework file.
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
    /// The attention curve's `max_efficiency` per direction, [forward, backward], as the base
    /// profile had it and as fitted, with the calls each is fitted to (`None`: no such calls).
    pub attention: [Option<AttentionFit>; 2],
    /// The median gap between consecutive kernels of the step (the profile's
    /// `kernel.launch_ns`).
    pub launch_ns: f64,
    /// The host's time per kernel the measured step asks for (the framework's
    /// `launch.host_per_kernel_ns` or its variant; [`TraceFit::host_key`]).
    pub host_per_kernel_ns: u64,
    /// The framework key it goes to.
    pub host_key: String,
    /// Whether the measured step is longer than the fitted work alone, so that the host time
    /// is fitted to it; false: the GPU bounds the step and the host time is an upper bound.
    pub host_bound: bool,
    /// The per-kernel cost that an additive model (no host issue, the framework's host time
    /// 0) needs for the same step: for comparison.
    pub additive_launch_ns: f64,
    /// Kernels the trace's step ran, and kernels twin's schedule of the scenario counts on
    /// the rank.
    pub kernels_measured: u32,
    pub kernels_predicted: u64,
    /// The step the launch cost was fitted to (the trace's, or the one given unprofiled).
    pub step_measured_s: f64,
    /// The prediction with the base profile, with the fitted GEMM and memory terms and the
    /// measured kernel gap but no host time, and with the fitted profile and host time.
    pub step_base_s: f64,
    pub step_without_launch_s: f64,
    pub step_fitted_s: f64,
}

/// One direction of the attention fit.
#[derive(Clone, Debug, Serialize)]
pub struct AttentionFit {
    pub calls: usize,
    pub measured_s: f64,
    pub base_s: f64,
    pub base_max_efficiency: f64,
    pub max_efficiency: f64,
}

/// Attention calls of a step, as (shape, measured ns): each op call of a fused attention
/// (its kernels summed), with `[b, heads, s, d]` query and `[b, kv_heads, s_kv, d]` key
/// shapes; causal, as a training step's attention is.
pub fn attention_calls(
    trace: &RankTrace,
    window: (u64, u64),
) -> Vec<(twin_sim::ir::Attention, f64)> {
    use std::collections::BTreeMap;
    let mut calls: BTreeMap<u64, (twin_sim::ir::Attention, f64)> = BTreeMap::new();
    for k in &trace.kernels {
        if k.class != KernelClass::Attention || !in_window(k.start_ns, window) {
            continue;
        }
        let (Some(op), Some(id)) = (k.op.as_deref(), k.op_id) else {
            continue;
        };
        let fused = [
            "_cudnn_attention",
            "_flash_attention",
            "_scaled_dot_product",
        ];
        if !fused.iter().any(|f| op.contains(f)) {
            continue;
        }
        let shape = || -> Option<twin_sim::ir::Attention> {
            let q = k.op_input_dims.first()?;
            let kv = k.op_input_dims.get(1)?;
            let (&b, &h, &s, &d) = (q.first()?, q.get(1)?, q.get(2)?, q.get(3)?);
            let skv = *kv.get(2)?;
            Some(twin_sim::ir::Attention {
                batch: u32::try_from(b).ok()?,
                heads: u32::try_from(h).ok()?,
                head_dim: d,
                q_len: s,
                kv_len: skv,
                causal: true,
                backward: op.contains("backward"),
                count: 1,
                window: 0,
                windowed: 0,
                sinks: false,
            })
        };
        let Some(a) = shape() else { continue };
        let entry = calls.entry(id).or_insert((a, 0.0));
        entry.1 += k.dur_ns as f64;
    }
    calls.into_values().collect()
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

/// How much longer than the fitted work alone a GPU-bound step may grow under the host time
/// `calibrate_trace` gives as an upper bound (0.5%).
pub const HOST_BOUND_SLACK: f64 = 0.005;

/// The gaps between consecutive kernels of a step on the trace's GPU, in ns (overlapping
/// kernels give none).
pub fn kernel_gaps(trace: &RankTrace, window: (u64, u64)) -> Vec<f64> {
    let mut spans: Vec<(u64, u64)> = trace
        .kernels
        .iter()
        .filter(|k| in_window(k.start_ns, window))
        .map(|k| (k.start_ns, k.end_ns()))
        .collect();
    spans.sort_unstable();
    let mut gaps = Vec::with_capacity(spans.len());
    let mut end = None;
    for (start, stop) in spans {
        if let Some(e) = end {
            if start >= e {
                gaps.push((start - e) as f64);
            }
        }
        end = Some(end.map_or(stop, |e: u64| e.max(stop)));
    }
    gaps
}

/// The median of `v` (the mean of the middle two of an even count); `None` when empty.
fn median(v: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => v.get(n / 2).copied(),
        _ => Some((v.get(n / 2 - 1)? + v.get(n / 2)?) / 2.0),
    }
}

/// The framework key of the host's time per kernel that the scenario uses (eager, compiled
/// or CUDA graphs: `twin_sim::cost::host_issue_ns`).
pub fn host_key(s: &Scenario) -> &'static str {
    if s.training.cuda_graphs {
        "cuda_graphs_host_per_kernel_ns"
    } else if s.training.compile {
        "compiled_host_per_kernel_ns"
    } else {
        "host_per_kernel_ns"
    }
}

fn host_issue_ns_of(s: &Scenario) -> u64 {
    twin_sim::cost::host_issue_ns(s)
}

/// Sets the host time per kernel the scenario uses ([`host_key`]).
fn set_host_ns(s: &mut Scenario, ns: u64) {
    let l = &mut s.training.framework.launch;
    if s.training.cuda_graphs {
        l.cuda_graphs_host_per_kernel_ns = ns;
    } else if s.training.compile {
        l.compiled_host_per_kernel_ns = ns;
    } else {
        l.host_per_kernel_ns = ns;
    }
}

/// The scenario's framework file (`text`) with `launch.<key> = { value = host_ns, ref =
/// reference }`, comments and every other value kept; an existing value of the key is
/// replaced.
pub fn framework_toml(
    text: &str,
    key: &str,
    host_ns: u64,
    reference: &str,
) -> Result<String, CalibError> {
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e| CalibError::Profile(format!("the framework file does not parse: {e}")))?;
    let launch = doc
        .entry("launch")
        .or_insert_with(|| toml_edit::Item::Table(toml_edit::Table::new()))
        .as_table_like_mut()
        .ok_or_else(|| CalibError::Profile("the framework file's launch is not a table".into()))?;
    let mut cited = toml_edit::InlineTable::new();
    cited.insert("value", i64::try_from(host_ns).unwrap_or(i64::MAX).into());
    cited.insert("ref", reference.into());
    launch.insert(
        key,
        toml_edit::Item::Value(toml_edit::Value::InlineTable(cited)),
    );
    Ok(doc.to_string())
}

impl TraceFit {
    /// The framework file's `ref` of the fitted host time, fitted from the trace `origin`.
    pub fn host_reference(&self, origin: &str) -> String {
        format!(
            "fitted by twin calibrate trace {origin}: {} ({} kernels on the rank), measured \
             {:.1} ms, with the gap between kernels {:.2} us",
            if self.host_bound {
                "the host time per kernel under which the simulated step is the measured one"
            } else {
                "an upper bound: the largest host time per kernel that lengthens the simulated \
                 step by at most 0.5% (the fitted work alone takes the measured step)"
            },
            self.kernels_predicted,
            self.step_measured_s * 1e3,
            self.launch_ns / 1e3
        )
    }
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
    let fitted =
        |e: Estimate, what: &str| e.fitted_param(format!("{what}; twin calibrate trace {origin}"));
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
    p.set_gemm_bf16_flops_per_s(rate);
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
    p.set_memory_bandwidth_bytes_per_s(bw);

    let attention = fit_attention(trace, window, scenario, &mut p);

    let gaps = kernel_gaps(trace, window);
    let launch_ns = median(&gaps).unwrap_or(base.launch_ns.value);
    p.launch_ns = Param {
        value: launch_ns,
        source: Source::Fitted,
        reference: format!(
            "gap between dependent kernels: the median of the {} gaps between consecutive \
             kernels of the step; twin calibrate trace {origin}",
            gaps.len()
        ),
        ci95: None,
    };
    p.launch_per_op = false;

    let simulate = |profile: &Profile, host_ns: u64| -> Result<(f64, u64), CalibError> {
        let mut s = scenario.clone();
        set_host_ns(&mut s, host_ns);
        let staged = twin_sim::Staged::with_profile(&s, Some(profile))
            .map_err(|e| CalibError::Profile(e.to_string()))?;
        let opts = twin_sim::engine::SimOptions {
            collapse: false,
            ..twin_sim::sim_options(&s, &twin_sim::PredictOptions::default())
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
    let (step_base_s, _) = simulate(base, host_issue_ns_of(scenario))?;
    let (step_without_launch_s, kernels_predicted) = simulate(&p, 0)?;
    let measured_s = step_measured_s.unwrap_or(breakdown.step_ns as f64 * 1e-9);
    // The host time per kernel whose simulated step is the measured one: the step does not
    // shrink as the host slows, so bisect on whole nanoseconds. Where the fitted work alone
    // already takes the measured step, the GPU bounds it and the step cannot tell the host's
    // time: the largest that lengthens the step by at most HOST_BOUND_SLACK is an upper bound.
    let host_bound = step_without_launch_s < measured_s;
    let target_ns = if host_bound {
        measured_s * 1e9
    } else {
        step_without_launch_s * 1e9 * (1.0 + HOST_BOUND_SLACK)
    };
    let mut host_ns = 0u64;
    if kernels_predicted > 0 {
        let (mut lo, mut hi) = (
            0u64,
            (target_ns / kernels_predicted as f64).ceil() as u64 + 1,
        );
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if simulate(&p, mid)?.0 * 1e9 <= target_ns {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        host_ns = lo;
    }
    let (step_fitted_s, _) = simulate(&p, host_ns)?;
    // The additive model: every kernel pays one cost beyond the fitted work.
    let additive_launch_ns = if kernels_predicted > 0 {
        launch_ns + ((measured_s - step_without_launch_s) * 1e9 / kernels_predicted as f64).max(0.0)
    } else {
        launch_ns
    };
    let fit = TraceFit {
        gemm,
        gemm_kernels: points.len(),
        memory_bandwidth_bytes_per_s: bandwidth,
        memory_floor_ns: floor,
        memory_kernels: copies.len(),
        attention,
        launch_ns,
        host_per_kernel_ns: host_ns,
        host_key: host_key(scenario).to_string(),
        host_bound,
        additive_launch_ns,
        kernels_measured: breakdown.kernels,
        kernels_predicted,
        step_measured_s: measured_s,
        step_base_s,
        step_without_launch_s,
        step_fitted_s,
    };
    Ok((p, fit))
}

/// Scales the profile's attention curve of the scenario's backend, per direction, by how the
/// trace's calls ran against the base curve's price for their shapes (module doc).
fn fit_attention(
    trace: &RankTrace,
    window: (u64, u64),
    scenario: &Scenario,
    p: &mut Profile,
) -> [Option<AttentionFit>; 2] {
    use twin_sim::cost::Analytic;
    use twin_sim::profile::AttentionCurveParams;
    use twin_sim::scenario::framework::AttentionBackend;
    let cost = Analytic::from_profile(scenario, p);
    let Some(model) = cost.attention.as_ref() else {
        return [None, None];
    };
    let peak = cost.peak_flops_per_s(twin_sim::scenario::Precision::Bf16);
    let calls = attention_calls(trace, window);
    let origin = trace.path.display().to_string();
    let mut out = [None, None];
    for (i, backward) in [false, true].into_iter().enumerate() {
        let mine: Vec<_> = calls
            .iter()
            .filter(|(a, _)| a.backward == backward)
            .collect();
        let measured_ns: f64 = mine.iter().map(|(_, t)| t).sum();
        let base_s: f64 = mine.iter().map(|(a, _)| model.attention_s(a, peak)).sum();
        if mine.is_empty() || !(measured_ns > 0.0 && base_s > 0.0) {
            continue;
        }
        let measured_s = measured_ns * 1e-9;
        let curve = model.curve(&mine[0].0);
        let max_efficiency = (curve.max_efficiency * base_s / measured_s).clamp(1e-3, 1.0);
        let param = |value: f64, what: String| Param {
            value,
            source: Source::Fitted,
            reference: what,
            ci95: None,
        };
        let kept = "kept from the base profile's curve (its default fit to H200 attention \
                    microbenchmarks where it gives none: sim/src/cost/attention.rs)"
            .to_string();
        let fitted = AttentionCurveParams {
            max_efficiency: param(
                max_efficiency,
                format!(
                    "{} calls of the trace ran {:.2} ms where the base curve priced {:.2} ms: \
                     its max_efficiency {:.4} scaled by their ratio; twin calibrate trace {origin}",
                    mine.len(),
                    measured_s * 1e3,
                    base_s * 1e3,
                    curve.max_efficiency
                ),
            ),
            keys_half: param(curve.keys_half, kept.clone()),
            head_dim_half: param(curve.head_dim_half, kept.clone()),
        };
        let att = p.attention.get_or_insert_with(Default::default);
        let slot = match (model.backend, backward) {
            (AttentionBackend::Flash, false) => &mut att.flash_forward,
            (AttentionBackend::Flash, true) => &mut att.flash_backward,
            (AttentionBackend::Cudnn, false) => &mut att.cudnn_forward,
            (AttentionBackend::Cudnn, true) => &mut att.cudnn_backward,
            (AttentionBackend::Triton, false) => &mut att.triton_forward,
            (AttentionBackend::Triton, true) => &mut att.triton_backward,
        };
        *slot = Some(fitted);
        out[i] = Some(AttentionFit {
            calls: mine.len(),
            measured_s,
            base_s,
            base_max_efficiency: curve.max_efficiency,
            max_efficiency,
        });
    }
    out
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
        for (dir, a) in ["forward", "backward"].iter().zip(&self.attention) {
            if let Some(a) = a {
                let _ = writeln!(
                    out,
                    "attention     {dir}: {} calls ran {:.2} ms, the base curve priced {:.2} ms: \
                     max efficiency {:.3} -> {:.3}",
                    a.calls,
                    a.measured_s * 1e3,
                    a.base_s * 1e3,
                    a.base_max_efficiency,
                    a.max_efficiency
                );
            }
        }
        let _ = writeln!(
            out,
            "kernel gap    {:.2} us (median between consecutive kernels; {} kernels measured, {} \
             counted by twin)",
            self.launch_ns / 1e3,
            self.kernels_measured,
            self.kernels_predicted
        );
        let _ = writeln!(
            out,
            "host          {}{:.2} us per kernel issued (framework launch.{}){}; an additive cost \
             would need {:.2} us per kernel",
            if self.host_bound { "" } else { "at most " },
            self.host_per_kernel_ns as f64 / 1e3,
            self.host_key,
            if self.host_bound {
                ""
            } else {
                ": the fitted work alone takes the step, which the GPU bounds"
            },
            self.additive_launch_ns / 1e3
        );
        let _ = writeln!(
            out,
            "step          measured {:.1} ms; predicted {:.1} ms with the base profile, {:.1} ms \
             fitted without host time, {:.1} ms fitted",
            self.step_measured_s * 1e3,
            self.step_base_s * 1e3,
            self.step_without_launch_s * 1e3,
            self.step_fitted_s * 1e3
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_framework_file_gets_the_host_time_and_keeps_the_rest() {
        let text = "# a comment\nname = \"x\"\n\n[launch]\n# gap\ncuda_graphs_kernel_gap_ns = \
                    { value = 500, ref = \"r\" }\nhost_per_kernel_ns = { value = 1, ref = \"old\" }\n";
        let out = framework_toml(text, "host_per_kernel_ns", 46_650, "fitted").unwrap();
        let v: toml_edit::DocumentMut = out.parse().unwrap();
        assert_eq!(
            v["launch"]["host_per_kernel_ns"]["value"].as_integer(),
            Some(46_650)
        );
        assert_eq!(
            v["launch"]["host_per_kernel_ns"]["ref"].as_str(),
            Some("fitted")
        );
        assert_eq!(
            v["launch"]["cuda_graphs_kernel_gap_ns"]["value"].as_integer(),
            Some(500)
        );
        assert!(
            out.contains("# a comment") && out.contains("# gap"),
            "{out}"
        );
        // Without a [launch] table one is made; a variant key goes beside the others.
        let out = framework_toml("name = \"x\"\n", "compiled_host_per_kernel_ns", 7, "f").unwrap();
        let v: toml_edit::DocumentMut = out.parse().unwrap();
        assert_eq!(
            v["launch"]["compiled_host_per_kernel_ns"]["value"].as_integer(),
            Some(7)
        );
        // Not TOML, or a launch that is not a table: errors, no panic.
        assert!(framework_toml("[launch", "host_per_kernel_ns", 1, "f").is_err());
        assert!(framework_toml("launch = 3\n", "host_per_kernel_ns", 1, "f").is_err());
    }

    #[test]
    fn gaps_and_medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
    }
}
