//! Fits the host microbenchmarks: each benchmark's model, with 95% intervals and a note
//! wherever a fit fell back to a simpler model. `host_profile` maps the fits to profile keys.

mod gemm_curve;

use crate::bench::{CommSamples, Samples, SizedSamples};
use crate::fit::alpha_beta::{self, AlphaBeta, Point};
use crate::fit::gemm::{self, GemmFit};
use crate::fit::{ratio, Estimate, FitError};
use crate::nccl_tests::Test;
use gemm_curve::holdout_rms;
pub(crate) use gemm_curve::{gemm_points, holdout_errors};
pub use gemm_curve::{gemm_predict_ns, shape_factors};
use serde::Serialize;
use twin_sim::cost::shape_factors::ShapeFactor;

/// The collectives the host runs as rings (the simulator's ring algorithm).
pub const RING_KINDS: [&str; 3] = ["all-reduce", "reduce-scatter", "all-gather"];

/// Tile sides tried for the GEMM curve.
pub const TILE_CANDIDATES: [u64; 7] = [1, 2, 4, 8, 16, 32, 64];

/// The alpha-beta fit of one collective kind (reported; the profile uses the joint fit). A
/// kind whose samples cannot be fitted (too noisy at the sizes measured) says why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NamedFit {
    pub name: String,
    pub fit: Option<AlphaBeta>,
    pub error: Option<String>,
}

/// Every fit of a host calibration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostFits {
    pub gemm: GemmFit,
    pub gemm_best_observed_flops_per_s: f64,
    pub gemm_holdout_samples: usize,
    pub gemm_holdout_max_relative_error: f64,
    /// The curve's measured ratio per timed (not held-out) shape, back to back: the
    /// profile's `gemm.shape_factors`.
    pub gemm_shape_factors: Vec<ShapeFactor>,
    /// RMS relative error of the back-to-back calls of the held-out shapes, by the curve
    /// alone and by the curve with the factors interpolated from the other shapes: what the
    /// factors do for a shape the calibration did not time.
    pub gemm_holdout_rms_error: f64,
    pub gemm_holdout_rms_error_with_factors: f64,
    pub memory_pass: AlphaBeta,
    /// The memory pass over every size, small and large, with a knee where it outgrows the
    /// caches; `None` when no knee could be fitted (a note says why).
    pub memory_spill: Option<crate::fit::spill::SpillFit>,
    /// The pass after a step's traffic (`bench::memory::memory_pass` with
    /// `Config::step_evict_bytes`); `None` without samples.
    pub memory_cold: Option<AlphaBeta>,
    /// The optimizer's update by distinct bytes touched since its state was
    /// (`bench::memory::state_update`); `None` without samples or when no ramp fits (a note
    /// says why).
    pub memory_state: Option<crate::fit::state::StateFit>,
    pub memcpy: AlphaBeta,
    /// The host backend's Alloc (a reuse of a kept buffer): a fixed cost per call.
    pub alloc: crate::fit::Constant,
    /// `bandwidth` in ops per second; its inverse is the per-op overhead.
    pub launch: AlphaBeta,
    pub launch_ns: Estimate,
    /// How long after a compute op's end an op it releases on another stream is issued (that
    /// stream's thread waking and getting the core): `bench::launch`'s hand-off chains, the
    /// profile's `[host] handoff_ns`; `None` when it was not measured.
    pub handoff_ns: Option<Estimate>,
    pub collectives: Vec<NamedFit>,
    pub p2p: AlphaBeta,
    /// One fit over the ring collectives (all-reduce, reduce-scatter, all-gather): the
    /// algorithm `network.algorithm = "ring"` names; the profile's tier comes from it.
    pub ring: AlphaBeta,
    pub overlap_slowdown: Estimate,
    /// The share of a core a compute thread takes against a transfer beside it
    /// (`bench::comm_busy`, the profile's `[host] compute_weight`); `None` when not measured
    /// or not fitted (a note says why).
    pub compute_weight: Option<Estimate>,
    /// The share of a p2p message's time each end's thread is on its CPU (`bench::p2p_cpu`,
    /// the profile's `[host] p2p_cpu_share`); `None` when not measured or not fitted (a note
    /// says why).
    pub p2p_cpu_share: Option<Estimate>,
    /// Cores' worth of memory-bound work the machine serves at once (`bench::memory_pair`,
    /// the profile's `[host] memory_cores`); `None` when not measured or not fitted (a note
    /// says why).
    pub memory_cores: Option<Estimate>,
    /// Whether the transfer fits left out the groups with more ranks than cores: they do
    /// when `compute_weight` was measured, which prices sharing a core where the run shares
    /// it (see [`fit_all`]).
    pub transfers_within_cores: bool,
    pub checkpoint: AlphaBeta,
    /// Interruptions of running compute per second of busy time, and their mean length
    /// (`bench::interrupt`); `None` when not measured.
    pub interruptions: Option<(Estimate, Estimate)>,
    /// A transfer's extra time once its receiver idled: (the jump over the back-to-back
    /// latency, ns; the growth per idle ns), from `bench::wake`; `None` when not measured.
    pub wake: Option<(Estimate, Estimate)>,
    pub cores: u32,
    /// Samples dropped by the outlier rule, over every benchmark.
    pub dropped_samples: usize,
    /// Fits that fell back to a simpler model, and why.
    pub notes: Vec<String>,
}

/// The state-update fit, or `None` with a note (no samples: none).
fn state_fit(s: &Samples, notes: &mut Vec<String>) -> Option<crate::fit::state::StateFit> {
    use crate::fit::state::{self, StatePoint};
    if s.state_update.is_empty() {
        return None;
    }
    let points: Vec<StatePoint> = s
        .state_update
        .iter()
        .flat_map(|x| {
            x.kept_ns.iter().map(move |&t| StatePoint {
                other_bytes: x.evict_bytes as f64,
                state_bytes: x.state_bytes as f64,
                moved_bytes: x.moved_bytes as f64,
                elapsed_ns: x.elapsed_ns,
                time_ns: t,
            })
        })
        .collect();
    match state::fit(&points, &state::grid(&points), &state::WEIGHTS) {
        Ok(f) => Some(f),
        Err(e) => {
            notes.push(format!(
                "optimizer state update: no cache ramp fitted ({e}); the profile prices the \
                 optimizer by the cold pass"
            ));
            None
        }
    }
}

pub(crate) fn sized_points(s: &[SizedSamples]) -> Vec<Point> {
    s.iter()
        .flat_map(|x| {
            x.kept_ns.iter().map(move |&t| Point {
                steps: 1.0,
                bytes: x.bytes as f64,
                time_ns: t,
            })
        })
        .collect()
}

/// The nccl-tests model of a host collective kind (the host runs the same ring algorithms).
fn test_of(kind: &str) -> Option<Test> {
    Some(match kind {
        "p2p" => Test::SendRecv,
        "all-reduce" => Test::AllReduce,
        "all-gather" => Test::AllGather,
        "reduce-scatter" => Test::ReduceScatter,
        "all-to-all" => Test::AllToAll,
        "broadcast" => Test::Broadcast,
        _ => return None,
    })
}

/// The samples as alpha-beta points of one member's solo time. On the host a transfer is CPU
/// work of every member (loopback copies, payload and checksum passes), and the simulator runs
/// it on the node's shared cores (`engine::flow`, `start_cpu_work`); a benchmark of `ranks`
/// members on `cores` cores, each member busy for the whole call, ran at `cores / ranks` of
/// solo speed when `ranks > cores`, so its time is scaled by that share to the solo time the
/// simulator expects.
fn comm_points<'a>(
    s: impl Iterator<Item = &'a CommSamples>,
    cores: u32,
    within_cores: bool,
) -> Vec<Point> {
    s.filter(|c| !within_cores || c.ranks <= cores)
        .filter_map(|c| test_of(&c.kind).map(|t| (c, t)))
        .flat_map(|(c, t)| {
            let (steps, bytes) = t.steps_and_bytes(c.ranks, c.bytes as f64);
            let share = solo_share(c.ranks, cores);
            c.kept_ns.iter().map(move |&time_ns| Point {
                steps,
                bytes,
                time_ns: time_ns * share,
            })
        })
        .collect()
}

/// The share of solo speed each of `ranks` CPU-bound members gets on `cores` cores.
pub fn solo_share(ranks: u32, cores: u32) -> f64 {
    if ranks > cores && ranks > 0 {
        f64::from(cores.max(1)) / f64::from(ranks)
    } else {
        1.0
    }
}

/// [`alpha_beta::fit_or_rate`] with the benchmark's name in errors and notes.
/// The wake-up fit: alpha-beta over the samples after an idle gap (x = the gap), less the
/// median back-to-back time; `None` (with a note) when it cannot be fitted.
fn wake_fit(s: &[SizedSamples], notes: &mut Vec<String>) -> Option<(Estimate, Estimate)> {
    let back_to_back: Vec<f64> = s
        .iter()
        .filter(|x| x.bytes == 0)
        .flat_map(|x| x.kept_ns.iter().copied())
        .collect();
    let base = crate::sample::median(&back_to_back)?;
    let idle: Vec<SizedSamples> = s.iter().filter(|x| x.bytes > 0).cloned().collect();
    let f = match alpha_beta::fit(&sized_points(&idle)) {
        Ok(f) => f,
        Err(e) => {
            notes.push(format!("wake-up after idle: not fitted ({e})"));
            return None;
        }
    };
    let jump = Estimate {
        value: f.latency_ns.value - base,
        ci95: [f.latency_ns.ci95[0] - base, f.latency_ns.ci95[1] - base],
    }
    .clamp(0.0, f64::MAX);
    let per_idle = f
        .bandwidth_bytes_per_s
        .map_monotone(|b| if b > 0.0 { 1e9 / b } else { 0.0 })
        .clamp(0.0, 1.0);
    Some((jump, per_idle))
}

/// The one fit over the ring collectives of `comm` (groups within the cores where `within`).
fn ring_fit(
    comm: &[CommSamples],
    cores: u32,
    within: bool,
    notes: &mut Vec<String>,
) -> Result<AlphaBeta, FitError> {
    let rings = comm
        .iter()
        .filter(|c| RING_KINDS.contains(&c.kind.as_str()));
    named(
        "ring collectives",
        &comm_points(rings, cores, within),
        notes,
    )
}

/// The ring latency per step (ns) that [`fit_all`] would fit from the transfers `comm` with
/// the rest of `s` (`rounds` keeps the round with the lowest); `None` when it cannot be
/// fitted.
pub fn ring_latency_ns(s: &Samples, comm: &[CommSamples], cores: u32) -> Option<f64> {
    let within = compute_weight_fit(&s.comm_busy, &mut Vec::new()).is_some();
    ring_fit(comm, cores, within, &mut Vec::new())
        .ok()
        .map(|f| f.latency_ns.value)
}

pub(crate) fn named(
    what: &str,
    points: &[Point],
    notes: &mut Vec<String>,
) -> Result<AlphaBeta, FitError> {
    let (f, note) = alpha_beta::fit_or_rate(points)
        .map_err(|e| FitError::Degenerate(format!("{what}: {e}")))?;
    if let Some(n) = note {
        notes.push(format!("{what}: {n}"));
    }
    Ok(f)
}

/// The knee model over every memory-pass sample (the knee a grid over the sizes from 1 MiB up).
fn spill(s: &Samples, notes: &mut Vec<String>) -> Option<crate::fit::spill::SpillFit> {
    use crate::fit::spill::{self, PassPoint};
    let all: Vec<&SizedSamples> = s.memory_pass.iter().chain(&s.memory_pass_large).collect();
    let points: Vec<PassPoint> = all
        .iter()
        .flat_map(|x| {
            x.kept_ns.iter().map(move |&t| PassPoint {
                bytes: x.bytes as f64,
                time_ns: t,
            })
        })
        .collect();
    let mut knees: Vec<u64> = all
        .iter()
        .map(|x| x.bytes)
        .filter(|&b| b >= 1 << 20)
        .collect();
    knees.sort_unstable();
    knees.dedup();
    match spill::fit(&points, &knees) {
        Ok(f) => Some(f),
        Err(e) => {
            notes.push(format!(
                "memory pass: no cache knee fitted ({e}); one bandwidth for every size"
            ));
            None
        }
    }
}

/// One constant over every record's kept samples, its errors named `what`: the allocation's
/// fixed cost (over every size) and the hand-off between a rank's threads (the hand-off
/// chains' mean gaps, `bench::launch::handoff_chain`).
fn constant_fit(what: &str, s: &[SizedSamples]) -> Result<crate::fit::Constant, FitError> {
    let all: Vec<f64> = s.iter().flat_map(|x| x.kept_ns.iter().copied()).collect();
    crate::fit::constant(&all).map_err(|e| match e {
        FitError::Degenerate(why) => FitError::Degenerate(format!("{what}: {why}")),
        e => e,
    })
}

/// Below this R², a transfer fit's samples disagree with the alpha-beta model more than a
/// quiet machine's do (quiet calibrations of the development VM reach 0.75-0.93 for the ring
/// collectives and 0.9-0.98 for p2p; a busy spell gave 0.22 and a 239 µs ring latency, and
/// that profile predicted a tensor-parallel run at half its time).
pub(crate) const POOR_TRANSFER_R2: f64 = 0.5;

impl HostFits {
    /// The worse R² of the two transfer fits the profile's network keys come from (p2p and
    /// the ring collectives).
    pub fn transfer_r2(&self) -> f64 {
        self.p2p.quality.r2.min(self.ring.quality.r2)
    }
}

/// A note for a transfer fit too poor to trust, saying what to do about it.
fn poor_transfer_fit(what: &str, f: &AlphaBeta) -> Option<String> {
    (f.quality.r2 < POOR_TRANSFER_R2).then(|| {
        format!(
            "{what}: R\u{b2} {:.2} (below {POOR_TRANSFER_R2}): the samples do not follow latency + bytes / bandwidth, which usually means other work shared the cores while they were taken; the fitted latency ({:.1} us per step) may be far off. Calibrate again on an idle machine, and compare the two profiles",
            f.quality.r2,
            f.latency_ns.value / 1e3
        )
    })
}

/// The compute thread's weight against a transfer on a shared core (`bench::comm_busy`), or
/// `None`: not measured, or not fitted (with a note).
fn compute_weight_fit(
    s: &[crate::bench::CommBusySamples],
    notes: &mut Vec<String>,
) -> Option<Estimate> {
    if s.is_empty() {
        return None;
    }
    let rows: Vec<(&[f64], &[f64])> = s.iter().map(|r| (&r.idle_ns[..], &r.busy_ns[..])).collect();
    match ratio::sharing_weight(&rows) {
        Ok(w) => Some(w),
        Err(e) => {
            notes.push(format!(
                "transfers beside compute: no weight fitted ({e}); the kernel's weight for the compute thread's nice level stands"
            ));
            None
        }
    }
}

/// The share of a p2p message's time its threads spend on the CPU (`bench::p2p_cpu`), every
/// size and both ranks pooled, or `None`: not measured, or not fitted (with a note).
fn p2p_cpu_share_fit(
    s: &[crate::bench::p2p_cpu::P2pCpuSamples],
    notes: &mut Vec<String>,
) -> Option<Estimate> {
    if s.is_empty() {
        return None;
    }
    let wall: Vec<f64> = s.iter().flat_map(|r| r.wall_ns.iter().copied()).collect();
    let cpu: Vec<f64> = s.iter().flat_map(|r| r.cpu_ns.iter().copied()).collect();
    match ratio::busy_share(&wall, &cpu) {
        Ok(e) => Some(e),
        Err(e) => {
            notes.push(format!(
                "p2p CPU share: not fitted ({e}); the simulator runs a host p2p as CPU work for its whole time"
            ));
            None
        }
    }
}

/// The cores' worth of memory-bound work the machine serves at once (`bench::memory_pair`),
/// or `None`: not measured, or not fitted (with a note).
fn memory_cores_fit(
    s: Option<&crate::bench::memory_pair::MemoryPairSamples>,
    notes: &mut Vec<String>,
) -> Option<Estimate> {
    let s = s?;
    match ratio::memory_cores(&s.alone_ns, &s.pair_ns) {
        Ok(e) => Some(e),
        Err(e) => {
            notes.push(format!(
                "memory on two cores: not fitted ({e}); the simulator gives each core its own"
            ));
            None
        }
    }
}

/// Fits every benchmark of `s`.
pub fn fit_all(s: &Samples, cores: u32) -> Result<HostFits, FitError> {
    let fit_pts = gemm_points(&s.gemm, false, s.private_cache_bytes);
    let mut notes = Vec::new();
    // The host's sgemm packs A and B from beyond the private cache: the curve with the
    // operand term, or without it (and a note) when that cannot be fitted.
    let g = match gemm::fit(&fit_pts, &TILE_CANDIDATES, gemm::Operands::Loaded) {
        Ok(g) => g,
        Err(e) => {
            notes.push(format!(
                "GEMM curve: no operand-loading term ({e}); FLOPs, short-k and ramp only"
            ));
            gemm::fit(&fit_pts, &TILE_CANDIDATES, gemm::Operands::Free)
                .map_err(|e| FitError::Degenerate(format!("GEMM curve: {e}")))?
        }
    };
    let best = s
        .gemm
        .iter()
        .flat_map(|x| {
            let flops = 2.0 * x.m as f64 * x.n as f64 * x.k as f64;
            x.kept_ns.iter().map(move |t| flops / t * 1e9)
        })
        .fold(0.0f64, f64::max);
    let holdout = holdout_errors(&g, &s.gemm, s.private_cache_bytes);
    let factors = shape_factors(&g, &s.gemm, s.private_cache_bytes);
    let (held_plain, held_factored) = holdout_rms(&g, &s.gemm, s.private_cache_bytes, &factors);
    let launch = named("op overhead", &sized_points(&s.launch), &mut notes)?;
    let launch_ns = launch.bandwidth_bytes_per_s.map_monotone(|ops| 1e9 / ops);
    let handoff_ns = (!s.handoff_gap.is_empty())
        .then(|| constant_fit("stream hand-off", &s.handoff_gap).map(|c| c.value))
        .transpose()?;
    // A group with more ranks than cores shares cores among its own members, and its calls
    // pay for that (1.4x a two-rank call's time per ring step, after the share, on both
    // development VMs; docs/journal/2026-11-validation-history.md, 2026-11-24), which the simulator
    // does not model inside a collective. Fitted with the others, those groups raised every call's
    // latency, which stood in for what sharing a core with another rank's compute costs a run's
    // transfers. Where that cost was measured (`compute_weight`), the fits take only the groups
    // that fit on the cores; samples without it are fitted as before.
    let compute_weight = compute_weight_fit(&s.comm_busy, &mut notes);
    let within = compute_weight.is_some();
    let kinds: std::collections::BTreeSet<&str> = s.comm.iter().map(|c| c.kind.as_str()).collect();
    let mut collectives = Vec::new();
    for k in kinds.iter().filter(|k| **k != "p2p") {
        let pts = comm_points(s.comm.iter().filter(|c| c.kind == *k), cores, within);
        let r = alpha_beta::fit(&pts);
        collectives.push(NamedFit {
            name: k.to_string(),
            error: r.as_ref().err().map(ToString::to_string),
            fit: r.ok(),
        });
    }
    let p2p = named(
        "p2p",
        &comm_points(s.comm.iter().filter(|c| c.kind == "p2p"), cores, within),
        &mut notes,
    )?;
    let ring = ring_fit(&s.comm, cores, within, &mut notes)?;
    for (what, f) in [("p2p", &p2p), ("ring collectives", &ring)] {
        if let Some(n) = poor_transfer_fit(what, f) {
            notes.push(n);
        }
    }
    let overlap = s
        .overlap
        .as_ref()
        .ok_or_else(|| FitError::Degenerate("no overlap samples".into()))?;
    let dropped = s.gemm.iter().map(|x| x.dropped_ns.len()).sum::<usize>()
        + [
            &s.memory_pass,
            &s.memory_pass_large,
            &s.memory_pass_cold,
            &s.memcpy,
            &s.alloc,
            &s.launch,
            &s.checkpoint,
        ]
        .iter()
        .flat_map(|v| v.iter())
        .map(|x| x.dropped_ns.len())
        .sum::<usize>()
        + s.comm.iter().map(|x| x.dropped_ns.len()).sum::<usize>()
        + overlap.dropped;
    Ok(HostFits {
        gemm_best_observed_flops_per_s: best,
        gemm_holdout_samples: holdout.len(),
        gemm_holdout_max_relative_error: holdout.iter().fold(0.0, |a: f64, b| a.max(*b)),
        gemm_holdout_rms_error: held_plain,
        gemm_holdout_rms_error_with_factors: held_factored,
        gemm_shape_factors: factors,
        gemm: g,
        memory_pass: named("memory pass", &sized_points(&s.memory_pass), &mut notes)?,
        memory_spill: spill(s, &mut notes),
        memory_cold: if s.memory_pass_cold.is_empty() {
            None
        } else {
            Some(named(
                "cold memory pass",
                &sized_points(&s.memory_pass_cold),
                &mut notes,
            )?)
        },
        memory_state: state_fit(s, &mut notes),
        memcpy: named("memcpy", &sized_points(&s.memcpy), &mut notes)?,
        alloc: constant_fit("alloc", &s.alloc)?,
        launch,
        launch_ns,
        handoff_ns,
        collectives,
        p2p,
        ring,
        overlap_slowdown: ratio::slowdown(&overlap.alone_ns, &overlap.overlapped_ns)?,
        compute_weight,
        p2p_cpu_share: p2p_cpu_share_fit(&s.p2p_cpu, &mut notes),
        memory_cores: memory_cores_fit(s.memory_pair.as_ref(), &mut notes),
        transfers_within_cores: within,
        checkpoint: named("checkpoint", &sized_points(&s.checkpoint), &mut notes)?,
        interruptions: s
            .interruptions
            .as_ref()
            .filter(|i| i.calls > 0)
            .map(crate::fit::interrupt::fit),
        wake: wake_fit(&s.wake, &mut notes),
        cores,
        dropped_samples: dropped,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_fit_recovers_the_jump_and_the_growth_per_idle_ns() {
        // Back to back 40 us; after idling t: 40 + 15 + 0.02 t us, +-1% alternating noise.
        let samples: Vec<SizedSamples> = [0u64, 50_000, 200_000, 1_000_000, 5_000_000]
            .iter()
            .map(|&idle| {
                let base = if idle == 0 {
                    40_000.0
                } else {
                    55_000.0 + 0.02 * idle as f64
                };
                SizedSamples {
                    bytes: idle,
                    kept_ns: (0..20)
                        .map(|i| base * if i % 2 == 0 { 1.01 } else { 0.99 })
                        .collect(),
                    dropped_ns: Vec::new(),
                }
            })
            .collect();
        let mut notes = Vec::new();
        let (jump, per_idle) = wake_fit(&samples, &mut notes).expect("fitted");
        assert!(jump.covers(15_000.0), "{jump:?}");
        assert!(per_idle.covers(0.02), "{per_idle:?}");
        // No back-to-back samples: nothing to measure the jump against.
        assert!(wake_fit(&samples[1..], &mut notes).is_none());
    }

    #[test]
    fn the_handoff_is_the_mean_gap_with_an_interval_that_covers_it() {
        // Chains' mean gaps scattered +-10% around 3.6 us.
        let kept_ns: Vec<f64> = (0..9)
            .map(|i| 3_600.0 * (1.0 + 0.1 * ((i % 3) as f64 - 1.0)))
            .collect();
        let s = [SizedSamples {
            bytes: 24,
            kept_ns,
            dropped_ns: vec![],
        }];
        let h = constant_fit("stream hand-off", &s).unwrap().value;
        assert!((h.value - 3_600.0).abs() < 60.0, "{h:?}");
        assert!(
            h.covers(3_600.0) && h.ci95[1] - h.ci95[0] < 1_000.0,
            "{h:?}"
        );
        assert!(constant_fit("stream hand-off", &[]).is_err());
    }

    #[test]
    fn a_transfer_fit_that_does_not_follow_alpha_beta_gets_a_note() {
        let point = |steps: f64, bytes: f64, time_ns: f64| Point {
            steps,
            bytes,
            time_ns,
        };
        // 20 us per step + 1 GB/s: a clean fit, no note.
        let clean: Vec<Point> = [1e3, 1e4, 1e5, 1e6, 4e6]
            .iter()
            .flat_map(|&b| [1.0, 3.0].map(|st| point(st, b, 20e3 * st + b)))
            .collect();
        let f = alpha_beta::fit(&clean).unwrap();
        assert!(f.quality.r2 > 0.99 && poor_transfer_fit("p2p", &f).is_none());
        // Small messages stalled at ~800 us regardless of size (a busy spell): a note that
        // names the fit and says what to do.
        let stalled: Vec<Point> = clean
            .iter()
            .map(|p| {
                point(
                    p.steps,
                    p.bytes,
                    if p.bytes < 2e5 { 8e5 } else { p.time_ns },
                )
            })
            .collect();
        let f = alpha_beta::fit(&stalled).unwrap();
        let note = poor_transfer_fit("ring collectives", &f).expect("a note");
        assert!(note.starts_with("ring collectives: R"), "{note}");
        assert!(note.contains("idle machine"), "{note}");
    }
}
