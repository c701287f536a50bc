//! The single-GPU path from a scenario: check that the scenario is one GPU (pp = tp = dp = cp =
//! ep = 1, gradient accumulation over micro batches), generate its schedule with the same
//! generator the simulator uses, and set a measured run beside the simulator's prediction of
//! the same schedule (step time, busy time per kind of op, peak memory by category). Nothing
//! here needs a GPU, so the mapping and the comparison are tested everywhere.

use crate::backend::MemoryReport;
use crate::error::RuntimeError;
use crate::exec::{MemoryAccount, RankRun};
use serde::Serialize;
use std::collections::BTreeMap;
use twin_sim::report::MemoryBreakdown;
use twin_sim::scenario::Scenario;
use twin_sim::schedule::{MemCategory, Op, OpKind};
use twin_sim::{PredictOptions, Prediction, Staged};

/// Refuse a scenario that is not one GPU, naming the degrees that are not 1.
pub fn check_single_gpu(scenario: &Scenario) -> Result<(), RuntimeError> {
    let p = &scenario.parallel;
    let degrees = [
        ("tp", p.tp),
        ("pp", p.pp),
        ("dp", p.dp),
        ("cp", p.cp),
        ("ep", p.ep),
    ];
    let wide: Vec<String> = degrees
        .iter()
        .filter(|(_, d)| *d != 1)
        .map(|(n, d)| format!("{n} = {d}"))
        .collect();
    if scenario.cluster.gpus == 1 && wide.is_empty() {
        return Ok(());
    }
    let mut what = vec![format!("cluster.gpus = {}", scenario.cluster.gpus)];
    what.extend(wide);
    Err(RuntimeError::Unsupported(format!(
        "scenario {:?} is not a single-GPU scenario ({}); a single-GPU run needs cluster.gpus = 1 \
         and tp = pp = dp = cp = ep = 1 (gradient accumulation over micro batches instead); \
         multi-GPU runs need one process per GPU, started by the launcher",
        scenario.name,
        what.join(", ")
    )))
}

/// Plan, generate and validate the schedule of a single-GPU scenario: the schedule the
/// simulator predicts and the CUDA backend runs.
pub fn single_gpu_staged(scenario: &Scenario) -> Result<Staged, RuntimeError> {
    check_single_gpu(scenario)?;
    let bad = |e: twin_sim::PredictError| RuntimeError::Schedule {
        rank: 0,
        message: e.to_string(),
    };
    let staged = Staged::new(scenario).map_err(bad)?;
    staged.validate().map_err(bad)?;
    Ok(staged)
}

/// The simulator's prediction of the same scenario, with a trace (per-op times).
pub fn predict_single_gpu(scenario: &Scenario) -> Result<Prediction, RuntimeError> {
    check_single_gpu(scenario)?;
    let opts = PredictOptions {
        trace: true,
        reproducible: true,
        ..PredictOptions::default()
    };
    twin_sim::predict(scenario, &opts).map_err(|e| RuntimeError::Schedule {
        rank: 0,
        message: e.to_string(),
    })
}

/// What kind of work an op is, for per-kind totals: the compute phase (`fwd`, `bwd`,
/// `recompute`, `optimizer`, ...), the collective and its group (`all-reduce dp`), or the op
/// kind (`alloc`, `free`, `send`, `recv`, `checkpoint`).
pub fn op_kind(op: &Op) -> String {
    match &op.kind {
        OpKind::Compute(c) => c.phase.short().to_string(),
        OpKind::Collective { kind, group, .. } => {
            format!("{} {}", kind.name(), format!("{group:?}").to_lowercase())
        }
        OpKind::Send { .. } => "send".into(),
        OpKind::Recv { .. } => "recv".into(),
        OpKind::Alloc { .. } => "alloc".into(),
        OpKind::Free { .. } => "free".into(),
        OpKind::Checkpoint { .. } => "checkpoint".into(),
    }
}

/// Ops of one kind and the sum of their durations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KindTime {
    pub ops: u32,
    pub busy_ns: u64,
}

/// Sum op durations by [`op_kind`]. `spans` are (op index, start, end) in nanoseconds; an
/// index outside `ops` is an error, since it means the spans belong to another program.
pub fn time_by_kind(
    ops: &[Op],
    spans: impl IntoIterator<Item = (u32, u64, u64)>,
) -> Result<BTreeMap<String, KindTime>, RuntimeError> {
    let mut out: BTreeMap<String, KindTime> = BTreeMap::new();
    for (index, start_ns, end_ns) in spans {
        let op = ops.get(index as usize).ok_or_else(|| {
            RuntimeError::Unsupported(format!(
                "a time for op {index}, but the program has {} ops",
                ops.len()
            ))
        })?;
        let slot = out.entry(op_kind(op)).or_default();
        slot.ops += 1;
        slot.busy_ns = slot.busy_ns.saturating_add(end_ns.saturating_sub(start_ns));
    }
    Ok(out)
}

/// Measured and predicted busy time of one kind of op.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KindRow {
    pub kind: String,
    pub ops: u32,
    pub predicted_busy_ns: u64,
    pub measured_busy_ns: u64,
}

/// A measured single-GPU run next to the simulator's prediction of the same schedule.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    pub scenario: String,
    pub gpu: String,
    pub predicted_step_time_ns: u64,
    /// The last step run (the first warms cuBLAS and the allocator up).
    pub measured_step_time_ns: u64,
    pub measured_step_times_ns: Vec<u64>,
    pub predicted_mfu: f64,
    /// Model FLOPs of the schedule over the measured step time, against the GPU's peak in the
    /// scenario's precision (the simulator's definition of MFU).
    pub measured_mfu: f64,
    pub by_kind: Vec<KindRow>,
    /// The simulator's peak device memory of the rank and its breakdown.
    pub predicted_peak_memory_bytes: u64,
    pub predicted_memory: MemoryBreakdown,
    /// What the schedule's Alloc/Free ops held at most, counted by the runtime as it ran them.
    pub schedule_memory: MemoryAccount,
    /// What the device and its allocator say.
    pub device_memory: MemoryReport,
}

/// Set `run` (one rank of `prediction`'s schedule, run for real) beside the prediction.
pub fn compare(prediction: &Prediction, run: &RankRun) -> Result<Comparison, RuntimeError> {
    let schedule = &prediction.staged.schedule;
    let program = schedule
        .get_program(run.rank)
        .ok_or_else(|| RuntimeError::Unsupported(format!("no program for rank {}", run.rank)))?;
    let ops = &program.ops;
    let trace = prediction.result.trace.as_ref().ok_or_else(|| {
        RuntimeError::Unsupported("the prediction was made without a trace".into())
    })?;
    let predicted = time_by_kind(
        ops,
        trace
            .events
            .iter()
            .filter(|e| e.rank == run.rank)
            .map(|e| (e.op, e.start_ns, e.end_ns)),
    )?;
    let measured = time_by_kind(ops, run.events.iter().map(|e| (e.op, e.start_ns, e.end_ns)))?;
    let mut kinds: BTreeMap<String, KindRow> = BTreeMap::new();
    for (kind, t) in &predicted {
        kinds.insert(
            kind.clone(),
            KindRow {
                kind: kind.clone(),
                ops: t.ops,
                predicted_busy_ns: t.busy_ns,
                measured_busy_ns: 0,
            },
        );
    }
    for (kind, t) in &measured {
        let row = kinds.entry(kind.clone()).or_insert_with(|| KindRow {
            kind: kind.clone(),
            ops: t.ops,
            predicted_busy_ns: 0,
            measured_busy_ns: 0,
        });
        row.measured_busy_ns = t.busy_ns;
    }
    let stats = prediction
        .result
        .ranks
        .get(run.rank as usize)
        .ok_or_else(|| RuntimeError::Unsupported(format!("no prediction for rank {}", run.rank)))?;
    let scenario = &prediction.staged.scenario;
    let peak_flops_per_s =
        twin_sim::cost::peak_for(&scenario.cluster.gpu.peak, scenario.training.precision);
    let measured_mfu = if run.step_time_ns == 0 || peak_flops_per_s <= 0.0 {
        0.0
    } else {
        stats.model_flops as f64 / (run.step_time_ns as f64 * 1e-9) / peak_flops_per_s
    };
    let m = &stats.memory_at_peak;
    let at = |c: MemCategory| m.get(c as usize).copied().unwrap_or(0);
    Ok(Comparison {
        scenario: scenario.name.clone(),
        gpu: scenario.cluster.gpu.name.clone(),
        predicted_step_time_ns: prediction.result.step_time_ns,
        measured_step_time_ns: run.step_time_ns,
        measured_step_times_ns: run.step_times_ns.clone(),
        predicted_mfu: prediction.report.mfu,
        measured_mfu,
        by_kind: kinds.into_values().collect(),
        predicted_peak_memory_bytes: stats.peak_memory_bytes,
        predicted_memory: MemoryBreakdown {
            weights: at(MemCategory::Weights),
            grads: at(MemCategory::Grads),
            optimizer: at(MemCategory::Optimizer),
            activations: at(MemCategory::Activations),
            buffers: at(MemCategory::Buffers),
            reserved: at(MemCategory::Reserved),
        },
        schedule_memory: run.memory.clone(),
        device_memory: run.device_memory.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Backend, OpContext, OpTiming};
    use crate::exec::run_step;
    use twin_sim::schedule::Phase;

    fn bundled() -> Scenario {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../scenarios/gpu/llama3-8b-1gpu.toml");
        twin_sim::scenario::load(&path, &[]).unwrap()
    }

    /// Runs ops back to back on one timeline, op i taking (i % 7 + 1) microseconds, so
    /// per-kind sums can be checked by hand. Not a performance model.
    #[derive(Default)]
    struct Serial {
        issued: Vec<u32>,
    }

    fn fake_ns(index: u32) -> u64 {
        u64::from(index % 7 + 1) * 1000
    }

    impl Backend for Serial {
        fn name(&self) -> &'static str {
            "serial"
        }
        fn enqueue(&mut self, index: u32, _op: &Op, _ctx: &OpContext) -> Result<(), RuntimeError> {
            self.issued.push(index);
            Ok(())
        }
        fn finish_step(&mut self) -> Result<Vec<OpTiming>, RuntimeError> {
            let mut t = 0;
            Ok(self
                .issued
                .drain(..)
                .map(|index| {
                    let start_ns = t;
                    t += fake_ns(index);
                    OpTiming {
                        index,
                        start_ns,
                        end_ns: t,
                        issued_ns: None,
                        wait_ns: None,
                    }
                })
                .collect())
        }
        fn memory(&self) -> MemoryReport {
            MemoryReport::default()
        }
    }

    #[test]
    fn the_bundled_gpu_scenario_is_one_h100_that_fits() {
        let s = bundled();
        check_single_gpu(&s).unwrap();
        assert_eq!(s.cluster.gpu.name, "h100-sxm-80gb");
        let p = predict_single_gpu(&s).unwrap();
        assert!(p.report.fits, "{}", p.report.to_text());
        assert_eq!(p.staged.plan.world, 1);
        assert_eq!(p.staged.plan.microbatches, 4);
    }

    #[test]
    fn multi_gpu_scenarios_are_refused_naming_their_degrees() {
        let s = twin_sim::testing::small_scenario(2, 1, 4, 2);
        let e = single_gpu_staged(&s).err().unwrap().to_string();
        // Only the degrees that are not 1 are named.
        assert!(e.contains("(cluster.gpus = 8, tp = 2, dp = 4)"), "{e}");
        assert!(e.contains("launcher"), "{e}");
        // One GPU in the cluster but a degree that is not 1 is refused too.
        let mut one = twin_sim::testing::small_scenario(1, 1, 1, 2);
        one.parallel.cp = 2;
        let e = check_single_gpu(&one).unwrap_err().to_string();
        assert!(
            e.contains("cp = 2") && e.contains("cluster.gpus = 1"),
            "{e}"
        );
        assert!(predict_single_gpu(&s).is_err());
    }

    #[test]
    fn generated_single_gpu_schedule_accumulates_over_micro_batches() {
        let s = bundled();
        let staged = single_gpu_staged(&s).unwrap();
        assert_eq!(staged.schedule.world(), 1);
        let ops = &staged.schedule.program(0).ops;
        assert!(ops
            .iter()
            .all(|op| !matches!(op.kind, OpKind::Send { .. } | OpKind::Recv { .. })));
        let phase_count = |p: Phase| {
            ops.iter()
                .filter(|op| matches!(&op.kind, OpKind::Compute(c) if c.phase == p))
                .count()
        };
        // Every micro batch runs forward and backward over every layer; the optimizer runs
        // once per step, after the last micro batch.
        let fwd_layers: u32 = ops
            .iter()
            .filter(|op| matches!(&op.kind, OpKind::Compute(c) if c.phase == Phase::Forward))
            .map(|op| op.label.num_layers)
            .sum();
        assert!(fwd_layers >= 4 * s.model.layers, "{fwd_layers}");
        assert!(phase_count(Phase::Backward) >= 4);
        assert_eq!(phase_count(Phase::Optimizer), 1);
        let mbs: std::collections::BTreeSet<u32> =
            ops.iter().filter_map(|op| op.label.microbatch).collect();
        assert_eq!(mbs.into_iter().collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        // Real GEMMs of the planned shapes: the MLP's gate+up projection of 2048 tokens.
        let has_mlp = ops.iter().any(|op| match &op.kind {
            OpKind::Compute(c) => c
                .gemms
                .iter()
                .any(|g| g.m == 2048 && g.k == 4096 && g.n == 2 * 14336),
            _ => false,
        });
        assert!(has_mlp);
    }

    #[test]
    fn the_runtime_account_of_the_schedule_equals_the_simulated_peak() {
        let s = bundled();
        let p = predict_single_gpu(&s).unwrap();
        let mut backend = Serial::default();
        let run = run_step(&p.staged.plan, &p.staged.schedule, 0, &mut backend).unwrap();
        let c = compare(&p, &run).unwrap();
        // Same schedule, same Alloc/Free: the runtime's own account and the simulator's peak
        // agree byte for byte, by category.
        assert_eq!(c.schedule_memory.peak_bytes, c.predicted_peak_memory_bytes);
        let b = &c.schedule_memory.peak_breakdown;
        let pm = &c.predicted_memory;
        assert_eq!(
            [b.weights, b.grads, b.optimizer, b.activations, b.buffers],
            [
                pm.weights,
                pm.grads,
                pm.optimizer,
                pm.activations,
                pm.buffers
            ]
        );
        assert_eq!(c.schedule_memory.final_bytes, 0);
        assert!(c.predicted_peak_memory_bytes > 40_000_000_000);
        assert_eq!(c.predicted_step_time_ns, p.result.step_time_ns);
    }

    #[test]
    fn comparison_sums_measured_and_predicted_time_by_kind() {
        let s = bundled();
        let p = predict_single_gpu(&s).unwrap();
        let ops = p.staged.schedule.program(0).ops.clone();
        let run = run_step(
            &p.staged.plan,
            &p.staged.schedule,
            0,
            &mut Serial::default(),
        )
        .unwrap();
        let c = compare(&p, &run).unwrap();
        let total_ops: u32 = c.by_kind.iter().map(|r| r.ops).sum();
        assert_eq!(total_ops as usize, ops.len());
        for row in &c.by_kind {
            let want: u64 = (0..ops.len() as u32)
                .filter(|&i| op_kind(&ops[i as usize]) == row.kind)
                .map(fake_ns)
                .sum();
            assert_eq!(row.measured_busy_ns, want, "{}", row.kind);
        }
        let fwd = c.by_kind.iter().find(|r| r.kind == "fwd").unwrap();
        assert!(fwd.predicted_busy_ns > 0);
        let kinds: Vec<&str> = c.by_kind.iter().map(|r| r.kind.as_str()).collect();
        assert!(
            kinds.contains(&"alloc") && kinds.contains(&"optimizer"),
            "{kinds:?}"
        );
        assert_eq!(
            c.measured_step_time_ns,
            (0..ops.len() as u32).map(fake_ns).sum::<u64>()
        );
        assert!(c.measured_mfu > 0.0 && c.predicted_mfu > 0.0);
    }

    #[test]
    fn times_for_ops_outside_the_program_are_errors() {
        let s = bundled();
        let staged = single_gpu_staged(&s).unwrap();
        let ops = &staged.schedule.program(0).ops;
        let n = ops.len() as u32;
        let e = time_by_kind(ops, [(n, 0, 1)]).unwrap_err().to_string();
        assert!(e.contains(&format!("op {n}")), "{e}");
        let ok = time_by_kind(ops, [(0, 5, 3)]).unwrap();
        // A span that ends before it starts counts as zero, never wraps.
        assert_eq!(ok.values().map(|t| t.busy_ns).sum::<u64>(), 0);
    }
}
