//! The readable summaries `twin calibrate` prints: every fitted value with its interval, the
//! fits' quality and notes, and the files written.

use crate::fit::alpha_beta::AlphaBeta;
use crate::fit::Estimate;
use std::path::Path;

fn si(v: f64, unit: &str) -> String {
    let (d, p) = match v.abs() {
        x if x >= 1e12 => (1e12, "T"),
        x if x >= 1e9 => (1e9, "G"),
        x if x >= 1e6 => (1e6, "M"),
        x if x >= 1e3 => (1e3, "k"),
        _ => (1.0, ""),
    };
    format!("{:.3} {p}{unit}", v / d)
}

pub fn est(e: &Estimate, unit: &str) -> String {
    format!(
        "{} [{} .. {}]",
        si(e.value, unit),
        if e.ci95[0].is_finite() {
            si(e.ci95[0], unit)
        } else {
            "-inf".into()
        },
        if e.ci95[1].is_finite() {
            si(e.ci95[1], unit)
        } else {
            "inf".into()
        }
    )
}

pub fn ab_line(name: &str, f: &AlphaBeta, latency: &str) -> String {
    format!(
        "  {name:<16} {:<44} {latency} {:<36} R² {:.4}  rms {:.1}%  n {}\n",
        est(&f.bandwidth_bytes_per_s, "B/s"),
        est(&f.latency_ns, "ns"),
        f.quality.r2,
        f.quality.rms_relative_error * 100.0,
        f.quality.samples
    )
}

/// The files a calibration wrote, for its closing line.
pub fn wrote(profile: &Path, samples: &Path) -> String {
    format!("{} and {}", profile.display(), samples.display())
}

/// The notes, then "wrote `files`".
fn closing_lines(notes: &[String], files: &str) -> String {
    let mut o: String = notes.iter().map(|n| format!("note: {n}\n")).collect();
    o.push_str(&format!("\nwrote {files}\n"));
    o
}

/// The GEMM curve's two summary lines (quality, then the fitted values).
fn gemm_lines(
    title: &str,
    g: &crate::fit::gemm::GemmFit,
    holdout_samples: usize,
    holdout_max_relative_error: f64,
) -> String {
    let operands = g
        .operand_bytes_per_s
        .as_ref()
        .map(|b| format!("   operands {}", est(b, "B/s")))
        .unwrap_or_default();
    format!(
        "{title}: R² {:.4}, rms {:.1}%, max {:.1}%, n {}; held-out shapes: {} with max error {:.1}%\n  rate {}   k_half {}   ramp {}   tile {}x{} (not rejected: m {:?}, n {:?}){operands}\n\n",
        g.quality.r2,
        g.quality.rms_relative_error * 100.0,
        g.quality.max_relative_error * 100.0,
        g.quality.samples,
        holdout_samples,
        holdout_max_relative_error * 100.0,
        est(&g.rate_flops_per_s, "FLOP/s"),
        est(&g.k_half, ""),
        est(&g.ramp_ns, "ns"),
        g.tile_m,
        g.tile_n,
        g.tile_m_ci95,
        g.tile_n_ci95
    )
}

pub fn host_text(run: &crate::HostRun, files: &str) -> String {
    let f = &run.fits;
    let g = &f.gemm;
    let mut o = if run.refit_of.is_some() {
        format!(
            "fitted again: the samples taken on {} ({} cores, {}) at {}; values with 95% \
             confidence intervals\n\n",
            run.provenance.hostname, f.cores, run.provenance.cpu_model, run.provenance.date_utc
        )
    } else {
        format!(
            "calibrated {} ({} cores, {}) in {:.1} s; values with 95% confidence intervals\n\n",
            run.provenance.hostname, f.cores, run.provenance.cpu_model, run.elapsed_s
        )
    };
    o.push_str(&gemm_lines(
        "GEMM curve (f32, one thread)",
        g,
        f.gemm_holdout_samples,
        f.gemm_holdout_max_relative_error,
    ));
    if !f.gemm_shape_factors.is_empty() {
        let (lo, hi) = f
            .gemm_shape_factors
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(lo, hi), s| {
                (lo.min(s.factor), hi.max(s.factor))
            });
        o.push_str(&format!(
            "  shape factors    {} timed shapes run {:.2}x to {:.2}x the curve back to back; \
             held-out shapes: rms {:.1}% by the curve, {:.1}% with the factors interpolated\n",
            f.gemm_shape_factors.len(),
            lo,
            hi,
            f.gemm_holdout_rms_error * 100.0,
            f.gemm_holdout_rms_error_with_factors * 100.0
        ));
    }
    o.push_str("bandwidth + fixed cost per call (alpha-beta: per step for transfers)\n");
    o.push_str(&ab_line("memory pass", &f.memory_pass, "fixed"));
    if let Some(sp) = &f.memory_spill {
        o.push_str(&format!(
            "  pass beyond {:<5} {:<44} (below it {}; knee model R² {:.4}, rms {:.1}%, n {})\n",
            si(sp.knee_bytes as f64, "B"),
            est(&sp.spill_bandwidth_bytes_per_s, "B/s"),
            est(&sp.bandwidth_bytes_per_s, "B/s"),
            sp.quality.r2,
            sp.quality.rms_relative_error * 100.0,
            sp.quality.samples
        ));
    }
    if let Some(c) = &f.memory_cold {
        o.push_str(&ab_line("cold pass", c, "fixed"));
    }
    if let Some(s) = &f.memory_state {
        o.push_str(&format!(
            "  optimizer state  {} resident, {} evicted; resident up to a distance of {}, \
             none from {}, a state byte counting {} (R² {:.4}, rms {:.1}%, n {})\n",
            est(&s.resident_bandwidth_bytes_per_s, "B/s"),
            est(&s.evicted_bandwidth_bytes_per_s, "B/s"),
            est(&s.resident_bytes, "B"),
            est(&s.evicted_bytes, "B"),
            est(&s.state_weight, ""),
            s.quality.r2,
            s.quality.rms_relative_error * 100.0,
            s.quality.samples
        ));
        match &s.decay {
            Some((after, lifetime)) => o.push_str(&format!(
                "                   and with time: all of it kept for {}, then a lifetime of {} \
                 (the machine's other tenants)\n",
                est(&after.map_monotone(|ns| ns * 1e-6), "ms"),
                est(&lifetime.map_monotone(|ns| ns * 1e-6), "ms"),
            )),
            None => {
                o.push_str("                   and with time: no decay fits better than none\n")
            }
        }
    }
    o.push_str(&format!(
        "  (cold passes each after {} of other traffic: {})\n",
        si(run.config.step_evict_bytes as f64, "B"),
        match run.step_bytes {
            Some(b) if b <= run.config.step_evict_bytes =>
                "the bytes the scenario's busiest rank touches per step",
            Some(_) => "twice the last-level cache, below the scenario's step",
            None => "twice the last-level cache; --scenario bounds it by a step's traffic",
        }
    ));
    o.push_str(&ab_line("memcpy", &f.memcpy, "fixed"));
    o.push_str(&format!(
        "  {:<16} {:<44} fixed {:<36} rms {:.1}%  n {}  (a kept buffer reused: no cost per byte)\n",
        "alloc",
        "",
        est(&f.alloc.value, "ns"),
        f.alloc.quality.rms_relative_error * 100.0,
        f.alloc.quality.samples
    ));
    o.push_str(&ab_line("checkpoint", &f.checkpoint, "fixed"));
    o.push_str(&ab_line("p2p", &f.p2p, "step "));
    for c in &f.collectives {
        match (&c.fit, &c.error) {
            (Some(fit), _) => o.push_str(&ab_line(&c.name, fit, "step ")),
            (None, e) => o.push_str(&format!(
                "  {:<16} not fitted: {}\n",
                c.name,
                e.as_deref().unwrap_or("")
            )),
        }
    }
    o.push_str(&ab_line("ring (profile)", &f.ring, "step "));
    if f.transfers_within_cores {
        o.push_str(&format!(
            "  (transfer fits over groups of at most {} ranks, one per core; larger groups share cores among their own members)\n",
            f.cores
        ));
    }
    o.push_str(&format!(
        "\nop overhead {}{}   overlap compute slowdown {:.3} [{:.3} .. {:.3}]   outliers dropped {}\n",
        est(&f.launch_ns, "ns"),
        f.handoff_ns
            .as_ref()
            .map(|h| format!("   stream hand-off {}", est(h, "ns")))
            .unwrap_or_default(),
        f.overlap_slowdown.value,
        f.overlap_slowdown.ci95[0],
        f.overlap_slowdown.ci95[1],
        f.dropped_samples
    ));
    if let Some((rate, mean)) = &f.interruptions {
        o.push_str(&format!(
            "interruptions of running compute {:.0}/s [{:.0} .. {:.0}], {} each
",
            rate.value,
            rate.ci95[0],
            rate.ci95[1],
            est(mean, "ns")
        ));
    }
    if let Some(w) = &f.compute_weight {
        o.push_str(&format!(
            "a transfer beside a compute op on its core takes {:.3} [{:.3} .. {:.3}] x its time longer (the compute thread's weight against it; the kernel's nice weights would say {:.3})\n",
            w.value,
            w.ci95[0],
            w.ci95[1],
            twin_sim::cost::host_compute_weight()
        ));
    }
    if let Some(s) = &f.p2p_cpu_share {
        o.push_str(&format!(
            "a p2p message keeps each end's thread on its CPU {:.0}% [{:.0} .. {:.0}] of its time (the rest it sleeps in a blocking read)\n",
            100.0 * s.value,
            100.0 * s.ci95[0],
            100.0 * s.ci95[1]
        ));
    }
    if let Some(m) = &f.memory_cores {
        o.push_str(&format!(
            "memory-bound work (the optimizer's update) on two cores at once runs at {:.0}% [{:.0} .. {:.0}] of its speed alone: the machine serves {:.2} [{:.2} .. {:.2}] cores' worth\n",
            50.0 * m.value,
            50.0 * m.ci95[0],
            50.0 * m.ci95[1],
            m.value,
            m.ci95[0],
            m.ci95[1]
        ));
    }
    if let Some((jump, per_idle)) = &f.wake {
        o.push_str(&format!(
            "a transfer into a core that idled takes {} + {:.4} [{:.4} .. {:.4}] x the idle time longer\n",
            est(jump, "ns"),
            per_idle.value,
            per_idle.ci95[0],
            per_idle.ci95[1]
        ));
    }
    o.push_str(&closing_lines(&f.notes, files));
    o
}

pub fn cuda_text(
    run: &crate::CudaRun,
    start: &crate::gpu_base::Start,
    profile: &Path,
    samples: Option<&Path>,
) -> String {
    let f = &run.fits;
    let g = &f.gemm;
    let prov = &run.provenance;
    let versions = prov.cuda_version.as_deref().unwrap_or("versions unknown");
    let mut o = match &run.refit_of {
        None => format!(
            "calibrated GPU 0 of {} ({versions}) as '{}' in {:.1} s over {}; values with 95% confidence intervals\n\n",
            prov.hostname, start.gpu, run.elapsed_s, start.origin
        ),
        Some(file) => format!(
            "fitted again the GPU samples of {file} (GPU 0 of {} at {}, {versions}) as '{}' over {}; values with 95% confidence intervals\n\n",
            prov.hostname, prov.date_utc, start.gpu, start.origin
        ),
    };
    o.push_str(&gemm_lines(
        "cuBLAS bf16 GEMM curve",
        g,
        f.gemm_holdout_samples,
        f.gemm_holdout_max_relative_error,
    ));
    if let Some(f8) = &f.gemm_fp8 {
        o.push_str(&gemm_lines(
            "cuBLASLt FP8 GEMM curve (e4m3, tensorwise scales)",
            f8,
            f.gemm_fp8_holdout_samples,
            f.gemm_fp8_holdout_max_relative_error,
        ));
    }
    if let Some(f8) = &f.gemm_fp8_rowwise {
        o.push_str(&gemm_lines(
            "cuBLASLt FP8 GEMM curve (e4m3, rowwise scales)",
            f8,
            f.gemm_fp8_rowwise_holdout_samples,
            f.gemm_fp8_rowwise_holdout_max_relative_error,
        ));
    }
    if let Some(f8) = &f.gemm_fp8_blockwise {
        o.push_str(&gemm_lines(
            "cuBLASLt FP8 GEMM curve (e4m3, block scales)",
            f8,
            f.gemm_fp8_blockwise_holdout_samples,
            f.gemm_fp8_blockwise_holdout_max_relative_error,
        ));
    }
    for b in &f.sustained {
        o.push_str(&format!(
            "{} GEMM {}x{}x{} back to back ({} calls after {:.1} s idle): {:.1} TFLOP/s at first, {:.1} at the end ({:.3} of it){}\n",
            b.column,
            b.m,
            b.n,
            b.k,
            b.calls,
            b.idle_ns as f64 * 1e-9,
            b.early_flops_per_s / 1e12,
            b.late_flops_per_s / 1e12,
            b.late_fraction,
            match b.throttled_after_ns {
                Some(ns) => format!(", throttled after {:.0} ms", ns as f64 * 1e-6),
                None => String::new(),
            }
        ));
    }
    if !f.sustained.is_empty() {
        o.push('\n');
    }
    o.push_str("bandwidth + fixed cost per call\n");
    o.push_str(&ab_line("memory-bound", &f.memory_bound, "fixed"));
    o.push_str(&ab_line("host-to-device", &f.host_to_device, "fixed"));
    o.push_str(&ab_line("device-to-host", &f.device_to_host, "fixed"));
    let p = &run.profile;
    o.push_str(&format!(
        "\nbf16 GEMM {:.3} x the bf16 peak ({:.4e} FLOP/s), memory-bound {:.3} x the HBM bandwidth ({:.4e} B/s)\n",
        p.gemm_max_efficiency.value,
        p.peak_bf16_flops_per_s.value,
        p.memory_efficiency.value,
        p.hbm_bandwidth_bytes_per_s.value
    ));
    o.push_str(&format!(
        "launch {}   outliers dropped {}\n",
        est(&f.launch_ns, "ns"),
        f.dropped_samples
    ));
    let files = match samples {
        Some(samples) => wrote(profile, samples),
        None => profile.display().to_string(),
    };
    o.push_str(&closing_lines(&f.notes, &files));
    o
}

/// What `twin calibrate nccl-tests` prints: each log's fit, each tier's, and the file written.
pub fn import_text(out: &crate::NcclImport, origin: &str, output: &Path) -> String {
    let mut o = format!("nccl-tests import over {origin}; values with 95% confidence intervals\n");
    for f in &out.fits {
        o.push_str(&format!(
            "  {:<22} {:>3} ranks {} node(s) {:?}: {} per rank{}, latency {}, R² {:.4}, rms {:.1}%\n",
            f.test.binary(),
            f.ranks,
            f.nodes,
            f.tier,
            est(&f.link_bandwidth_bytes_per_s, "B/s"),
            if f.nodes > 1 { " (per rail)" } else { "" },
            est(&f.fit.latency_ns, "ns"),
            f.fit.quality.r2,
            f.fit.quality.rms_relative_error * 100.0
        ));
    }
    for (tier, f) in &out.tiers {
        o.push_str(&ab_line(&format!("{tier:?} tier"), f, "step "));
    }
    o.push_str(&format!("wrote {}\n", output.display()));
    o
}
