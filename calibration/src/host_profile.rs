//! Maps a host calibration's fits to profile keys (docs/calibration.md has the table):
//! - `gemm.*` from the GEMM curve; the fp32 peak is a normalisation (the larger of the
//!   highest observed rate and the upper bound of the fitted sustained rate), so
//!   `max_efficiency = rate / peak` carries the fit; every dtype runs at the f32 rate (the
//!   host computes f32);
//!   with the operand term, `gemm.operand_bytes_per_s` and `gemm.operand_cache_bytes` (sysfs
//!   L2, not fitted);
//! - `gpu.hbm_bandwidth_bytes_per_s`: the larger of the memcpy and memory-pass bandwidths;
//!   `memory.efficiency`: memory-pass bandwidth / that; `memory.spill_*` from the knee fit and
//!   `memory.cold_efficiency` from the cold pass, over the same bandwidth;
//! - `kernel.launch_ns`: slope of step time over a chain of empty ops;
//! - `network.intra`: latency and effective bandwidth of one alpha-beta fit over the ring
//!   collectives (the simulator uses one pair per tier, and `network.algorithm = "ring"`);
//!   `bandwidth_bytes_per_s` is the larger of the p2p and ring bandwidths and `efficiency` the
//!   ring bandwidth over it. p2p, all-to-all and broadcast fits are reported beside. One machine
//!   has no inter-node link: `network.inter` repeats the intra values and says so;
//! - `overlap.compute_slowdown`, `checkpoint.bandwidth_bytes_per_s`,
//!   `memory.alloc_fixed_ns` from their fits; `[host] cores` = nproc.
//!
//! Split from `host`, which does the fitting.

use crate::fit::Estimate;
use crate::host::HostFits;
use crate::write::HostKeys;
use twin_sim::cost::shape_factors::ShapeFactor;
use twin_sim::cost::Algorithm;
use twin_sim::profile::{FitQuality, LinkParams, Param, Profile, Source, StateParams};
use twin_sim::schedule::Gemm;

fn fitted(e: Estimate, reference: String) -> Param {
    e.fitted_param(reference)
}

/// Scale an estimate (value and interval) by `1/d`.
fn over(e: Estimate, d: f64) -> Estimate {
    e.map_monotone(|x| x / d)
}

/// The largest finite lifetime the state fit tries (`fit::state`): the cap of an interval
/// that includes no decay at all.
const MAX_LIFETIME_NS: f64 = 500e6;

/// Profile values must be finite: an unbounded upper limit becomes `cap`.
fn cap_hi(e: Estimate, cap: f64) -> Estimate {
    Estimate {
        value: e.value,
        ci95: [
            e.ci95[0],
            if e.ci95[1].is_finite() {
                e.ci95[1]
            } else {
                cap
            },
        ],
    }
}

/// The profile (and the host keys) of `f`; `run` names the calibration run in every `ref`.
/// `private_cache_bytes` is the core's private cache (`gemm.operand_cache_bytes`).
pub fn to_profile(
    f: &HostFits,
    gpu_name: &str,
    run: &str,
    private_cache_bytes: u64,
) -> (Profile, HostKeys) {
    let r = |what: &str| reference(run, what);
    let rate = f.gemm.rate_flops_per_s;
    let peak = f
        .gemm_best_observed_flops_per_s
        .max(if rate.ci95[1].is_finite() {
            rate.ci95[1]
        } else {
            rate.value
        });
    let peak_param = |dtype: &str| {
        Param {
        value: peak,
        source: Source::Fitted,
        reference: r(&format!(
            "{dtype}: normalisation, max(highest observed f32 GEMM rate, upper 95% bound of the fitted sustained rate); the host computes every dtype in f32"
        )),
        ci95: None,
    }
    };
    let hbm = f
        .memcpy
        .bandwidth_bytes_per_s
        .value
        .max(f.memory_pass.bandwidth_bytes_per_s.value);
    let (intra, inter) = links(f, run);
    let count = |v: u64, ci: [u64; 2], what: &str| Param {
        value: v as f64,
        source: Source::Fitted,
        reference: r(what),
        ci95: Some([ci[0] as f64, ci[1] as f64]),
    };
    let host = host_keys(f, run);
    let profile = Profile {
        name: format!("{gpu_name}-calibrated"),
        bundled: None,
        description: format!("twin calibrate host on this machine ({run})"),
        gpu: gpu_name.to_string(),
        sm_count: Param {
            value: 1.0,
            source: Source::Datasheet,
            reference: "one CPU core per rank: the host backend runs a rank's GEMMs on one thread"
                .into(),
            ci95: None,
        },
        peak_fp32_flops_per_s: peak_param("fp32"),
        peak_tf32_flops_per_s: peak_param("tf32"),
        peak_fp16_flops_per_s: peak_param("fp16"),
        peak_bf16_flops_per_s: peak_param("bf16"),
        peak_fp8_flops_per_s: peak_param("fp8"),
        hbm_bandwidth_bytes_per_s: Param {
            value: hbm,
            source: Source::Fitted,
            reference: r("max(memcpy, memory-pass) fitted bandwidth (bytes moved: read + write)"),
            ci95: None,
        },
        gemm_max_efficiency: fitted(
            over(cap_hi(rate, peak), peak).clamp(1e-6, 1.0),
            r("GEMM curve fit: sustained rate / gpu.peak_flops_per_s.fp32"),
        ),
        gemm_bf16_flops_per_s: None,
        gemm_k_half: fitted(
            f.gemm.k_half.clamp(0.0, f64::MAX),
            r("GEMM curve fit (delta-method interval)"),
        ),
        gemm_tile_m: count(
            f.gemm.tile_m,
            f.gemm.tile_m_ci95,
            "GEMM curve fit, grid over tiles (interval: tiles an F-test does not reject)",
        ),
        gemm_tile_n: count(
            f.gemm.tile_n,
            f.gemm.tile_n_ci95,
            "GEMM curve fit, grid over tiles (interval: tiles an F-test does not reject)",
        ),
        gemm_ramp_ns: fitted(
            f.gemm.ramp_ns.clamp(0.0, f64::MAX),
            r("GEMM curve fit: fixed time per call"),
        ),
        // The host backend runs a batched GEMM's products as separate sgemm calls.
        gemm_ramp_per_product: true,
        // The host backend runs a compute op as one call, whatever its kernel count.
        launch_per_op: true,
        gemm_operand_bytes_per_s: f.gemm.operand_bytes_per_s.map(|b| {
            fitted(
                b,
                r("GEMM curve fit: A and B bytes (f32) a call whose operands were evicted from the private cache loads, over this rate, beyond packing them"),
            )
        }),
        gemm_pack_bytes_per_s: f.gemm.pack_bytes_per_s.map(|b| {
            fitted(
                b,
                r("GEMM curve fit: A and B bytes (f32) every product packs, over this rate (calls back to back and after an eviction)"),
            )
        }),
        gemm_cold_ramp_ns: f.gemm.cold_ramp_ns.map(|c| {
            fitted(
                c.clamp(0.0, f64::MAX),
                r("GEMM curve fit: fixed time a call whose operands were evicted pays beyond gemm.ramp_ns"),
            )
        }),
        gemm_operand_cache_bytes: f.gemm.operand_bytes_per_s.map(|_| Param {
            value: private_cache_bytes as f64,
            source: Source::Datasheet,
            reference: r("the core's private cache: sysfs cpu0 cache index2 size (1 MiB when it reports none)"),
            ci95: None,
        }),
        memory_efficiency: match &f.memory_spill {
            Some(sp) => fitted(
                over(sp.bandwidth_bytes_per_s, hbm).clamp(1e-6, 1.0),
                r("memory-pass (axpy, 12 bytes per element) bandwidth below the cache knee (knee model over every pass size) / gpu.hbm_bandwidth_bytes_per_s"),
            ),
            None => fitted(
                over(f.memory_pass.bandwidth_bytes_per_s, hbm).clamp(1e-6, 1.0),
                r("memory-pass (axpy, 12 bytes per element) bandwidth / gpu.hbm_bandwidth_bytes_per_s"),
            ),
        },
        memory_bandwidth_bytes_per_s: None,
        memory_spill_bytes: f.memory_spill.as_ref().map(|sp| Param {
            value: sp.knee_bytes as f64,
            source: Source::Fitted,
            reference: r("memory-pass knee: grid over the measured pass sizes, the smallest residual"),
            ci95: None,
        }),
        memory_spill_efficiency: f.memory_spill.as_ref().map(|sp| {
            fitted(
                over(sp.spill_bandwidth_bytes_per_s, hbm).clamp(1e-6, 1.0),
                r("memory-pass bandwidth beyond the cache knee / gpu.hbm_bandwidth_bytes_per_s"),
            )
        }),
        memory_cold_efficiency: f.memory_cold.as_ref().map(|c| {
            fitted(
                over(c.bandwidth_bytes_per_s, hbm).clamp(1e-6, 1.0),
                r("memory pass after a step's traffic (the optimizer's cold state) bandwidth / gpu.hbm_bandwidth_bytes_per_s"),
            )
        }),
        memory_state: f.memory_state.as_ref().map(|s| StateParams {
            weight: Some(fitted(
                s.state_weight,
                r("what each byte of the optimizer's own state counts for against the last-level cache beside other bytes (the same fit, grid over weights; interval: weights an F-test does not reject)"),
            )),
            resident_bytes: fitted(
                s.resident_bytes,
                r("distance (other bytes touched since + state_weight x the state's bytes) up to which the optimizer's state stays in the last-level cache: the state update (ModelState::apply_optimizer) after other writes, ramp model, grid in 8 MiB steps (interval: sizes an F-test does not reject)"),
            ),
            evicted_bytes: fitted(
                s.evicted_bytes,
                r("distance from which none of the optimizer's state is left in the last-level cache (the same fit)"),
            ),
            resident_efficiency: fitted(
                over(s.resident_bandwidth_bytes_per_s, hbm),
                r("the state update's bandwidth (bytes moved: each state byte read and written) with its state resident / gpu.hbm_bandwidth_bytes_per_s"),
            ),
            evicted_efficiency: fitted(
                over(s.evicted_bandwidth_bytes_per_s, hbm),
                r("the state update's bandwidth with its state evicted / gpu.hbm_bandwidth_bytes_per_s"),
            ),
            decay_after_ns: s.decay.map(|(after, _)| fitted(
                after,
                r("time after the last update from which the state leaves the last-level cache with nothing else written (the machine's other tenants): the state update after idle gaps and after writes, the same fit, grid over delays (interval: delays an F-test does not reject)"),
            )),
            lifetime_ns: s.decay.map(|(_, lifetime)| fitted(
                cap_hi(lifetime, MAX_LIFETIME_NS),
                r("mean time the state's lines then stay in the last-level cache (survival exp(-(t - state_decay_after_ns) / this)), the same fit, grid over lifetimes (interval: lifetimes an F-test does not reject; 500 ms where it is open above)"),
            )),
        }),
        launch_ns: fitted(
            f.launch_ns.clamp(0.0, f64::MAX),
            r("slope of step time over chains of empty ops through the host backend"),
        ),
        intra,
        inter,
        nvls_efficiency: None,
        nvls_min_bytes: None,
        algorithm: Some(Algorithm::Ring),
        overlap_compute_slowdown: Some(fitted(
            f.overlap_slowdown.clamp(0.0, 0.999),
            r("GEMM alone vs while two ranks all-reduce (delta method, Welch dof)"),
        )),
        checkpoint_bandwidth_bytes_per_s: Some(fitted(
            cap_hi(
                f.checkpoint.bandwidth_bytes_per_s,
                f.checkpoint.bandwidth_bytes_per_s.value * 1e3,
            ),
            r("write + fsync of a file, fixed cost + bytes / bandwidth"),
        )),
        fit: Some(fit_quality(f, run)),
        // The allocator hands a step the buffers it kept: the cost does not grow with bytes.
        memory_alloc_bytes_per_s: None,
        memory_alloc_fixed_ns: Some(fitted(
            f.alloc.value.clamp(0.0, f64::MAX),
            r("an Alloc through the host backend's allocator, reusing a buffer it kept (as a step after the first): a fixed cost per call, the relative-error mean over every size"),
        )),
        op_overhead_ns: Some(fitted(
            f.launch_ns.clamp(0.0, f64::MAX),
            r("the op-overhead fit (as kernel.launch_ns): every op of the host backend, whatever its kind, goes through the same stream loop"),
        )),
        host_cores: Some(host.cores.clone()),
        host_interruptions_per_s: f.interruptions.map(|(rate, _)| {
            fitted(
                rate,
                r("GEMM calls back to back on a pinned core that the outlier rule drops (over median + 3 x 1.4826 MAD), per second of busy time"),
            )
        }),
        host_interruption_mean_ns: f.interruptions.map(|(_, m)| {
            fitted(
                cap_hi(m, m.value * 1e3),
                r("mean excess of the dropped calls over the mean kept call (what the other benchmarks price)"),
            )
        }),
        host_wake_ns: f.wake.map(|(jump, _)| {
            fitted(
                jump,
                r("one-way 4 KiB transfer after both ranks idled, alpha-beta over the idle gap: intercept less the back-to-back median"),
            )
        }),
        host_wake_per_idle: f.wake.map(|(_, per)| {
            fitted(
                per,
                r("the same fit: extra transfer time per ns the receiving core idled"),
            )
        }),
        host_handoff_ns: f.handoff_ns.map(|h| {
            fitted(
                h.map_monotone(|x| x.max(0.0)),
                r("mean gap from a forward op's end to the issue of the op it releases on another stream, chains of real ops through the host backend with turns and a progress file"),
            )
        }),
        host_compute_weight: f.compute_weight.map(|w| {
            fitted(
                w.map_monotone(|x| x.max(0.0)),
                r("two-rank all-gathers and reduce-scatters (16 and 64 KiB) with their cores otherwise idle and beside a compute thread on each (nice 5, a GEMM op at a time): mean(beside) / mean(idle) - 1, sizes pooled, delta-method interval"),
            )
        }),
        host_p2p_cpu_share: f.p2p_cpu_share.map(|s| {
            fitted(
                s,
                r("ping-pongs of 4, 16 and 64 KiB between two rank threads on their own cores: each thread's CPU clock over the wall clock, mean of the per-sample ratios, Student-t interval"),
            )
        }),
        attention: None,
        host_memory_cores: f.memory_cores.map(|m| {
            fitted(
                m,
                r("the optimizer's update of 4 MiB of state after a step's other writes, on one pinned core with the other idle and on both at once: 2 x mean(alone) / mean(pair), delta-method interval, within [1, 2]"),
            )
        }),
        provenance: Default::default(),
        gemm_shape_factors: Vec::new(),
        gemm_fp8: None,
        gemm_fp8_rowwise: None,
        gemm_fp8_blockwise: None,
        gemm_fp8_fast_accum: None,
    };
    let mut profile = profile;
    profile.gemm_shape_factors = sim_shape_factors(f, &profile);
    (profile, host)
}

/// `f`'s shape factors (measured back-to-back time over the fit's price) restated over the
/// price the simulator gives the same call with `profile`'s curve, whose `k_half` and ramp
/// are whole numbers: the factor times the curve is then the measured time.
fn sim_shape_factors(f: &HostFits, profile: &Profile) -> Vec<ShapeFactor> {
    let mut curve = profile.gemm_curve();
    curve.shape_factors.clear();
    let peak = profile.peak_fp32_flops_per_s.value;
    let hbm = profile.hbm_bandwidth_bytes_per_s.value * profile.memory_efficiency.value;
    let cache = curve.operands.map_or(0, |o| o.cache_bytes);
    f.gemm_shape_factors
        .iter()
        .filter_map(|sf| {
            let g = Gemm::single(sf.m, sf.n, sf.k, 1);
            let cold = cache > 0 && g.working_set_bytes(4) > cache;
            let fit_ns = crate::host::gemm_predict_ns(&f.gemm, sf.m, sf.n, sf.k, 1, cold);
            let load_s = if cold {
                curve.cold_s(g.operand_bytes(4))
            } else {
                0.0
            };
            let sim_ns = (curve.gemm_s(&g, 4, peak, hbm) + load_s) * 1e9;
            (sim_ns > 0.0 && fit_ns > 0.0).then(|| ShapeFactor {
                factor: sf.factor * fit_ns / sim_ns,
                ..*sf
            })
        })
        .collect()
}

/// `what; run`: every key's reference names the calibration run it came from.
fn reference(run: &str, what: &str) -> String {
    format!("{what}; {run}")
}

/// `network.intra` from the p2p and ring-collective fits, and `network.inter`: a copy that
/// says one machine has no inter-node link.
fn links(f: &HostFits, run: &str) -> (LinkParams, LinkParams) {
    let r = |what: &str| reference(run, what);
    let joint_bw = f.ring.bandwidth_bytes_per_s;
    let link_bw = f.p2p.bandwidth_bytes_per_s.value.max(joint_bw.value);
    let link_bw_est = if f.p2p.bandwidth_bytes_per_s.value >= joint_bw.value {
        f.p2p.bandwidth_bytes_per_s
    } else {
        joint_bw
    };
    let intra = LinkParams {
        bandwidth_bytes_per_s: fitted(
            cap_hi(link_bw_est, link_bw * 1e3),
            r("max(p2p ping-pong, ring-collective alpha-beta) bandwidth over the host TCP transport (loopback)"),
        ),
        latency_ns: fitted(
            f.ring.latency_ns.clamp(0.0, f64::MAX),
            r("alpha-beta fit over the ring collectives (all-reduce, reduce-scatter, all-gather), ring step counts"),
        ),
        efficiency: fitted(
            over(joint_bw, link_bw).clamp(1e-6, 1.0),
            r("ring-collective alpha-beta bandwidth / network.intra.bandwidth_bytes_per_s"),
        ),
        p2p_latency_ns: Some(fitted(
            f.p2p.latency_ns.clamp(0.0, f64::MAX),
            r("alpha-beta fit over p2p ping-pong (one way): a send is one message, not a ring step"),
        )),
        p2p_bandwidth_bytes_per_s: Some(fitted(
            cap_hi(f.p2p.bandwidth_bytes_per_s, link_bw * 1e3),
            r("alpha-beta fit over p2p ping-pong (one way): a send is one socket write, not a ring step"),
        )),
    };
    let mut inter = intra.clone();
    for p in [
        &mut inter.bandwidth_bytes_per_s,
        &mut inter.latency_ns,
        &mut inter.efficiency,
    ]
    .into_iter()
    .chain(inter.p2p_latency_ns.as_mut())
    .chain(inter.p2p_bandwidth_bytes_per_s.as_mut())
    {
        p.reference = format!(
            "one machine has no inter-node link: copied from network.intra ({})",
            p.reference
        );
    }
    (intra, inter)
}

/// The fit quality over the benchmarks the profile's keys come from: samples, rms and largest
/// relative error, and the GEMM curve's held-out shapes.
fn fit_quality(f: &HostFits, run: &str) -> FitQuality {
    let total_samples: usize = [
        f.gemm.quality.samples,
        f.memory_pass.quality.samples,
        f.memcpy.quality.samples,
        f.alloc.quality.samples,
        f.launch.quality.samples,
        f.ring.quality.samples,
        f.checkpoint.quality.samples,
    ]
    .iter()
    .sum();
    let qualities = [
        f.gemm.quality,
        f.memory_pass.quality,
        f.memcpy.quality,
        f.alloc.quality,
        f.launch.quality,
        f.ring.quality,
        f.checkpoint.quality,
    ];
    let rms = (qualities
        .iter()
        .map(|q| q.rms_relative_error.powi(2) * q.samples as f64)
        .sum::<f64>()
        / total_samples.max(1) as f64)
        .sqrt();
    let max = qualities
        .iter()
        .fold(0.0f64, |a, q| a.max(q.max_relative_error));
    FitQuality {
        method: "relative-error least squares (weights 1/predicted^2, reweighted 3x); alpha-beta per benchmark; GEMM curve linear per tile, grid over tiles; 95% intervals from Student t (statrs) and the delta method".into(),
        data: format!("host microbenchmarks ({run}); raw samples beside the profile"),
        samples: total_samples as u64,
        rms_relative_error: rms,
        max_relative_error: max,
        holdout_samples: f.gemm_holdout_samples as u64,
        holdout_max_relative_error: f.gemm_holdout_max_relative_error,
    }
}

/// The `[host]` keys: the cores the ranks share.
fn host_keys(f: &HostFits, run: &str) -> HostKeys {
    let r = |what: &str| reference(run, what);
    HostKeys {
        cores: Param {
            value: f64::from(f.cores.max(1)),
            source: Source::Fitted,
            reference: r("CPU cores available to this process (nproc)"),
            ci95: None,
        },
    }
}
