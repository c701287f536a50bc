//! The single-GPU path from a scenario: check that the scenario is one GPU (pp = tp = dp = cp =
//! ep = 1, gradient accumulation over micro batches), generate its schedule with the same
//! generator the simulator uses, and set a measured run beside the simulator's prediction of
//! the same schedule (step time, busy time per kind of op, peak memory by category). The
//! caller makes the prediction ([`Predicted`]): the runtime executes schedules and models
//! nothing. Nothing here needs a GPU, so the mapping and the comparison are tested everywhere.

use crate::backend::MemoryReport;
use crate::error::RuntimeError;
use crate::exec::{MemoryAccount, RankRun};
use serde::Serialize;
use std::collections::BTreeMap;
use twin_sim::outcome::SimResult;
use twin_sim::plan::Plan;
use twin_sim::report::{MemoryBreakdown, Report};
use twin_sim::scenario::Scenario;
use twin_sim::schedule::{generate, MemCategory, Op, OpKind, Schedule};

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
pub fn single_gpu_schedule(scenario: &Scenario) -> Result<(Plan, Schedule), RuntimeError> {
    check_single_gpu(scenario)?;
    let bad = |message: String| RuntimeError::Schedule { rank: 0, message };
    let plan = Plan::new(scenario).map_err(|e| bad(format!("planning failed: {e}")))?;
    let schedule =
        generate(scenario, &plan).map_err(|e| bad(format!("schedule generation failed: {e}")))?;
    schedule
        .validate(&plan)
        .map_err(|e| bad(format!("the generated schedule is not executable: {e}")))?;
    Ok((plan, schedule))
}

/// The simulator's prediction of a single-GPU scenario's step, which the caller makes (for
/// example `twin_sim::predict` with a trace): what [`compare`] sets a measured run beside.
#[derive(Clone, Copy)]
pub struct Predicted<'a> {
    /// The scenario as predicted.
    pub scenario: &'a Scenario,
    pub plan: &'a Plan,
    /// The schedule the simulator ran, and the runtime runs.
    pub schedule: &'a Schedule,
    /// The simulated step; [`compare`] needs its trace (per-op times).
    pub result: &'a SimResult,
    /// The simulator's report of the step (its MFU).
    pub report: &'a Report,
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
        OpKind::HostCopy { to_host: true, .. } => "to-host".into(),
        OpKind::HostCopy { to_host: false, .. } => "to-gpu".into(),
        OpKind::HostUpdate { .. } => "host-update".into(),
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
pub fn compare(prediction: &Predicted<'_>, run: &RankRun) -> Result<Comparison, RuntimeError> {
    let schedule = prediction.schedule;
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
    let scenario = prediction.scenario;
    let peak_flops_per_s = scenario
        .cluster
        .gpu
        .peak
        .for_precision(scenario.training.precision);
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
    use twin_sim::schedule::Phase;

    fn bundled() -> Scenario {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../scenarios/gpu/llama3-8b-1gpu.toml");
        twin_sim::setup::load(&path, &[]).unwrap()
    }

    #[test]
    fn multi_gpu_scenarios_are_refused_naming_their_degrees() {
        let s = twin_sim::testing::small_scenario(2, 1, 4, 2);
        let e = single_gpu_schedule(&s).err().unwrap().to_string();
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
    }

    #[test]
    fn generated_single_gpu_schedule_accumulates_over_micro_batches() {
        let s = bundled();
        let (_, schedule) = single_gpu_schedule(&s).unwrap();
        assert_eq!(schedule.world(), 1);
        let ops = &schedule.program(0).ops;
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
    fn times_for_ops_outside_the_program_are_errors() {
        let s = bundled();
        let (_, schedule) = single_gpu_schedule(&s).unwrap();
        let ops = &schedule.program(0).ops;
        let n = ops.len() as u32;
        let e = time_by_kind(ops, [(n, 0, 1)]).unwrap_err().to_string();
        assert!(e.contains(&format!("op {n}")), "{e}");
        let ok = time_by_kind(ops, [(0, 5, 3)]).unwrap();
        // A span that ends before it starts counts as zero, never wraps.
        assert_eq!(ok.values().map(|t| t.busy_ns).sum::<u64>(), 0);
    }
}
