//! A quick look at whether this machine still runs as its profile says: `twin verify` times
//! the scenario's most frequent GEMM shapes through the host backend's kernel, before and after
//! its runs, and compares them with the profile's prediction of the same calls. A shared VM's
//! speed drifts by 10-30% between quarter hours; a step-time error of about the size this
//! check reports is the machine's speed now, not the schedule's model.

use crate::bench::compute::{compute_op, scenario_shape_counts, time_gemm, workspace_for};
use crate::bench::{Config, Mode};
use crate::sample::{median, Repeats};
use serde::Serialize;
use twin_sim::cost::Analytic;
use twin_sim::schedule::{ComputeOp, Gemm, Schedule};

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
    let error = if measured_s > 0.0 {
        (measured_s - predicted_s) / measured_s
    } else {
        0.0
    };
    GemmCheck {
        shapes: shapes.len() as u32,
        predicted_s,
        measured_s,
        error,
    }
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
    fn a_schedule_without_gemms_has_no_check() {
        let mut staged = tiny();
        for p in &mut staged.schedule.programs {
            p.ops
                .retain(|o| !matches!(o.kind, twin_sim::schedule::OpKind::Compute(_)));
        }
        assert!(gemm_check(&staged.schedule, &Analytic::new(&staged.scenario)).is_none());
    }
}
