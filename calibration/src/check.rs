//! A quick look at whether this machine still runs as its profile says: `twin verify` times
//! the scenario's most frequent GEMM shapes through the host backend's kernel, before and after
//! its runs, and compares them with the profile's prediction of the same calls. A shared VM's
//! speed drifts by 10-30% between quarter hours; a step-time error of about the size this
//! check reports is the machine's speed now, not the schedule's model. With a profile that
//! prices the optimizer by its state's cache residency (`memory.state_*`), [`state_check`] does
//! the same for the scenario's largest optimizer update: the last-level cache a VM gets drifts
//! within minutes (docs/journal/2026-11-validation-history.md, 2026-11-24). [`transfer_check`]
//! times a two-rank collective of the scenario's most frequent size against the profile's price:
//! the AMD development VM's transfers ran at two speeds, about 10 and about 15 µs for a 16 KiB
//! all-gather, switching within minutes (docs/journal/2026-11-validation-history.md, 2026-11-24).

use crate::bench::compute::{compute_op, scenario_shape_counts, time_gemm, workspace_for};
use crate::bench::{Config, Mode};
use crate::sample::{median, Repeats};
use serde::Serialize;
use twin_sim::cost::Analytic;
use twin_sim::schedule::{CollectiveKind, ComputeOp, Gemm, Schedule};

/// Shapes timed: the schedule's most frequent (they carry almost all of its GEMM time).
pub const MAX_SHAPES: usize = 8;
const REPEATS: Repeats = Repeats {
    warmup: 2,
    timed: 9,
};

/// One check: the schedule's GEMM calls of the timed shapes, weighted by how often the
/// schedule makes each, predicted and measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GemmCheck {
    /// Distinct shapes timed.
    pub shapes: u32,
    /// Sum over the timed shapes of calls x the profile's time for one call.
    pub predicted_s: f64,
    /// The same sum with each shape's median measured time.
    pub measured_s: f64,
    /// (measured - predicted) / measured, as `twin verify`'s errors: positive means this
    /// machine runs the scenario's GEMMs slower than the profile predicts.
    pub error: f64,
}

/// A two-rank collective timed now against the profile's price of it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TransferCheck {
    /// The collective (`all-gather`, ...) and its bytes per call.
    pub kind: String,
    pub bytes: u64,
    /// The profile's time for one call (without the runtime's per-op overhead).
    pub predicted_s: f64,
    /// The median call.
    pub measured_s: f64,
    /// (measured - predicted) / measured.
    pub error: f64,
}

/// The collective a transfer check times: the schedule's most frequent ring collective (kind
/// and bytes per call, by calls), else a 32 KiB all-gather (a host scenario's tensor-parallel
/// size).
pub fn transfer_probe(schedule: &Schedule) -> (CollectiveKind, u64) {
    use std::collections::BTreeMap;
    use twin_sim::schedule::OpKind;
    let mut calls: BTreeMap<(&'static str, u64), (CollectiveKind, u64)> = BTreeMap::new();
    for op in schedule.programs.iter().flat_map(|p| &p.ops) {
        if let OpKind::Collective {
            kind,
            bytes,
            calls: n,
            ..
        } = op.kind
        {
            if crate::host::RING_KINDS.contains(&kind.name()) && bytes > 0 {
                let e = calls.entry((kind.name(), bytes)).or_insert((kind, 0));
                e.1 += u64::from(n);
            }
        }
    }
    calls
        .into_iter()
        .max_by_key(|(_, (_, n))| *n)
        .map(|((_, bytes), (kind, _))| (kind, bytes))
        .unwrap_or((CollectiveKind::AllGather, 32 << 10))
}

/// Times [`transfer_probe`]'s collective between two ranks on their own cores (as the
/// calibration does) and prices it with `model` for a two-rank group on one node. `None` on
/// fewer than two cores (the two ranks would share one) or when the transfers fail.
pub fn transfer_check(schedule: &Schedule, model: &Analytic) -> Option<TransferCheck> {
    if crate::provenance::cores() < 2 {
        return None;
    }
    let (kind, bytes) = transfer_probe(schedule);
    let samples = crate::bench::comm::time_two_rank(kind, bytes, REPEATS).ok()?;
    let kept = crate::sample::reject_outliers(&samples);
    let measured_s = median(&kept.kept)? * 1e-9;
    let two_ranks = twin_sim::cost::GroupShape {
        ranks: 2,
        nodes: 1,
        max_per_node: 2,
    };
    let predicted_s = model.links.estimate(kind, two_ranks, bytes).time_ns as f64 * 1e-9;
    Some(TransferCheck {
        kind: kind.name().to_string(),
        bytes,
        predicted_s,
        measured_s,
        error: error(predicted_s, measured_s),
    })
}

/// The profile's price of the scenario's largest optimizer update against the update timed
/// now, at the distance the model gives it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StateCheck {
    /// Bytes of state the update touches (half the bytes it moves).
    pub state_bytes: u64,
    /// Other bytes written before each timed update: the node's step footprint less the state.
    pub other_bytes: u64,
    /// Median time from the end of one update to the start of the next (the writes).
    pub elapsed_ns: u64,
    pub predicted_s: f64,
    pub measured_s: f64,
    /// (measured - predicted) / measured.
    pub error: f64,
}

/// Times the host backend's state update (`ModelState::apply_optimizer`) over the state of the
/// schedule's largest optimizer op, after writing the other bytes the model places between two
/// updates, and prices it with `model`. `None` without a state cache in the model, without its
/// node footprint, or without an optimizer op.
pub fn state_check(schedule: &Schedule, model: &Analytic) -> Option<StateCheck> {
    use twin_sim::schedule::{Device, MemCategory, OpKind, Phase};
    model.state_cache?;
    let footprint = model.node_step_bytes?;
    let moved = schedule
        .programs
        .iter()
        .flat_map(|p| &p.ops)
        .filter_map(|o| match &o.kind {
            OpKind::Compute(c) if c.phase == Phase::Optimizer => Some(c.memory_bytes),
            _ => None,
        })
        .max()
        .filter(|&b| b > 0)?;
    let state_bytes = moved / 2;
    let other_bytes = footprint.saturating_sub(state_bytes);
    let mut state = twin_runtime::backend::host::ModelState::new(1, 0);
    state
        .ensure(0, MemCategory::Optimizer, Device::Gpu, state_bytes)
        .ok()?;
    let mut evict = vec![0u8; usize::try_from(other_bytes).ok()?];
    let timed = crate::bench::memory::time_state_update(&mut state, REPEATS, &mut evict, 0, &mut 0);
    let measured_s = median(&timed.kept.kept)? * 1e-9;
    // Priced at the time the writes took since the update before (`memory.state_lifetime_ns`).
    let elapsed_ns = if timed.elapsed_ns.is_finite() {
        timed.elapsed_ns as u64
    } else {
        0
    };
    let predicted_s = model.state_update_s(state.update_bytes(), elapsed_ns)?;
    Some(StateCheck {
        state_bytes,
        other_bytes,
        elapsed_ns,
        predicted_s,
        measured_s,
        error: error(predicted_s, measured_s),
    })
}

/// Times the most frequent GEMM shapes of `schedule` (one thread, operands evicted from the
/// private cache first, as the calibration's GEMM benchmark does) and prices them with
/// `model`, as calls that load their operands (`Analytic::compute_evicted_ns`). `None` when
/// the schedule has no GEMMs.
pub fn gemm_check(schedule: &Schedule, model: &Analytic) -> Option<GemmCheck> {
    let shapes = scenario_shape_counts(schedule, MAX_SHAPES);
    if shapes.is_empty() {
        return None;
    }
    let ops: Vec<ComputeOp> = shapes
        .iter()
        .map(|(g, _)| {
            let mut c = compute_op(vec![*g], 0);
            // The kernel's own time: the host backend's per-op overhead is not part of it.
            c.kernels = 0;
            c
        })
        .collect();
    let mut ws = workspace_for(&ops);
    let evict_bytes = Config::new(Mode::Quick, 1).gemm_evict_bytes;
    let mut evict = vec![0u8; usize::try_from(evict_bytes).unwrap_or(0)];
    let mut measured_one_s = Vec::with_capacity(ops.len());
    for c in &ops {
        let kept = time_gemm(&mut ws, c, &mut evict, REPEATS);
        measured_one_s.push(median(&kept.kept)? * 1e-9);
    }
    Some(summarize(&shapes, &ops, &measured_one_s, model))
}

/// The check from each shape's calls, its op, and its measured time for one call.
fn summarize(
    shapes: &[(Gemm, u64)],
    ops: &[ComputeOp],
    measured_one_s: &[f64],
    model: &Analytic,
) -> GemmCheck {
    let (mut predicted_s, mut measured_s) = (0.0, 0.0);
    for (((_, calls), c), one_s) in shapes.iter().zip(ops).zip(measured_one_s) {
        let calls = *calls as f64;
        measured_s += calls * one_s;
        predicted_s += calls * model.compute_evicted_ns(c) as f64 * 1e-9;
    }
    GemmCheck {
        shapes: shapes.len() as u32,
        predicted_s,
        measured_s,
        error: error(predicted_s, measured_s),
    }
}

/// `(measured - predicted) / measured`, as `twin verify`'s errors; 0 when nothing was measured.
fn error(predicted_s: f64, measured_s: f64) -> f64 {
    twin_sim::verify::relative_error(predicted_s, measured_s).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use twin_sim::cost::Analytic;

    fn tiny() -> twin_sim::Staged {
        // A CPU-sized model: a check times every shape 11 times.
        twin_sim::Staged::new(&twin_sim::testing::cpu_sized_scenario(1, 1, 1, 2)).unwrap()
    }

    #[test]
    fn the_check_weights_each_shape_by_its_calls() {
        let staged = tiny();
        let model = Analytic::new(&staged.scenario);
        let shapes = vec![
            (Gemm::single(64, 64, 64, 1), 3),
            (Gemm::single(32, 256, 64, 1), 1),
        ];
        let ops: Vec<ComputeOp> = shapes
            .iter()
            .map(|(g, _)| compute_op(vec![*g], 0))
            .collect();
        let one_ns: Vec<f64> = ops
            .iter()
            .map(|c| model.compute_evicted_ns(c) as f64)
            .collect();
        // Measured exactly as predicted: no error.
        let exact: Vec<f64> = one_ns.iter().map(|n| n * 1e-9).collect();
        let c = summarize(&shapes, &ops, &exact, &model);
        assert_eq!(c.shapes, 2);
        assert!((c.predicted_s - (3.0 * one_ns[0] + one_ns[1]) * 1e-9).abs() < 1e-15);
        assert!(c.error.abs() < 1e-12, "{c:?}");
        // The frequent shape measured twice as slow: error = 3a / (6a + b).
        let slow = [2.0 * exact[0], exact[1]];
        let c = summarize(&shapes, &ops, &slow, &model);
        let want = 3.0 * one_ns[0] / (6.0 * one_ns[0] + one_ns[1]);
        assert!((c.error - want).abs() < 1e-12, "{c:?} {want}");
        // Faster than predicted: a negative error.
        let fast = [exact[0] / 2.0, exact[1] / 2.0];
        assert!((summarize(&shapes, &ops, &fast, &model).error + 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_check_times_the_schedules_frequent_shapes() {
        let staged = tiny();
        let c = gemm_check(&staged.schedule, &Analytic::new(&staged.scenario))
            .expect("the scenario has GEMMs");
        assert!(c.shapes >= 1 && c.shapes as usize <= MAX_SHAPES, "{c:?}");
        assert!(c.measured_s > 0.0 && c.predicted_s > 0.0, "{c:?}");
        assert!(
            (c.error - (c.measured_s - c.predicted_s) / c.measured_s).abs() < 1e-12,
            "{c:?}"
        );
    }

    #[test]
    fn the_state_check_needs_a_state_cache_and_times_the_largest_update() {
        let staged = tiny();
        let mut model = Analytic::new(&staged.scenario);
        assert!(
            state_check(&staged.schedule, &model).is_none(),
            "no state cache"
        );
        model.state_cache = Some(twin_sim::cost::StateCache {
            state_weight: 1.0,
            resident_bytes: 8 << 20,
            evicted_bytes: 64 << 20,
            resident_efficiency: 0.5,
            evicted_efficiency: 0.2,
            decay: Some(twin_sim::cost::StateDecay {
                after_ns: 0,
                lifetime_ns: 1_000_000,
            }),
        });
        assert!(
            state_check(&staged.schedule, &model).is_none(),
            "no footprint"
        );
        model.node_step_bytes = Some(twin_sim::cost::footprint::node_step_bytes(
            &staged.schedule,
            &staged.plan,
        ));
        let c = state_check(&staged.schedule, &model).expect("the scenario has an optimizer");
        assert!(
            c.state_bytes > 0 && c.measured_s > 0.0 && c.predicted_s > 0.0,
            "{c:?}"
        );
        assert_eq!(
            c.other_bytes,
            model.node_step_bytes.unwrap().saturating_sub(c.state_bytes)
        );
        assert!(
            (c.error - (c.measured_s - c.predicted_s) / c.measured_s).abs() < 1e-12,
            "{c:?}"
        );
        // Priced at the time the writes took: the decay counts.
        let at = model
            .state_update_s(2 * c.state_bytes, c.elapsed_ns)
            .unwrap();
        assert!((c.predicted_s / at - 1.0).abs() < 1e-6, "{c:?} {at}");
        assert!(c.elapsed_ns > 0, "{c:?}");
    }

    #[test]
    fn the_transfer_check_times_the_schedules_most_frequent_collective() {
        // Data parallel over two ranks: the gradients' all-reduce is the only ring collective.
        let staged =
            twin_sim::Staged::new(&twin_sim::testing::cpu_sized_scenario(1, 1, 2, 2)).unwrap();
        let (kind, bytes) = transfer_probe(&staged.schedule);
        assert_eq!(kind, CollectiveKind::AllReduce);
        assert!(bytes > 0);
        // Without collectives: a 32 KiB all-gather.
        assert_eq!(
            transfer_probe(&tiny().schedule),
            (CollectiveKind::AllGather, 32 << 10)
        );
        let model = Analytic::new(&staged.scenario);
        if crate::provenance::cores() < 2 {
            assert!(transfer_check(&staged.schedule, &model).is_none());
            return;
        }
        let c = transfer_check(&staged.schedule, &model).expect("two cores");
        assert_eq!((c.kind.as_str(), c.bytes), ("all-reduce", bytes));
        assert!(c.measured_s > 0.0 && c.predicted_s > 0.0, "{c:?}");
        assert!(
            (c.error - (c.measured_s - c.predicted_s) / c.measured_s).abs() < 1e-12,
            "{c:?}"
        );
    }

    #[test]
    fn a_schedule_without_gemms_has_no_check() {
        let mut staged = tiny();
        for p in &mut staged.schedule.programs {
            p.ops
                .retain(|o| !matches!(o.kind, twin_sim::schedule::OpKind::Compute(_)));
        }
        assert!(gemm_check(&staged.schedule, &Analytic::new(&staged.scenario)).is_none());
    }
}
