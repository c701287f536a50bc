//! Per-op overhead of the host backend (the profile's `kernel.launch_ns`): a chain of empty
//! compute ops, each depending on the one before, run through `exec::run_step` on a one-rank
//! `HostBackend`, as a host run issues ops. The span from the first op's start to the last
//! op's end grows by the overhead per op (the span leaves out the fixed per-step setup:
//! stream threads starting).

use super::compute::{compute_op, op};
use super::{Config, Counter, SizedSamples};
use crate::sample::measured_ns;
use crate::CalibError;
use twin_runtime::backend::host::HostBackend;
use twin_sim::plan::Plan;
use twin_sim::schedule::{Program, Schedule};

/// The bundled one-rank host scenario: only its plan (one rank) is used.
const SINGLE_RANK_SCENARIO: &str = include_str!("../../../scenarios/host/single.toml");

/// A plan for one rank.
pub fn single_rank_plan() -> Result<Plan, CalibError> {
    let s = twin_sim::scenario::parse_str(SINGLE_RANK_SCENARIO, "scenarios/host/single.toml", &[])
        .map_err(|e| CalibError::Setup(format!("built-in one-rank scenario: {e}")))?;
    Plan::new(&s).map_err(|e| CalibError::Setup(format!("built-in one-rank plan: {e}")))
}

/// A one-rank schedule of `n` chained empty compute ops.
pub fn empty_chain(n: u32) -> Schedule {
    let ops = (0..n)
        .map(|i| {
            let deps = if i == 0 { Vec::new() } else { vec![i - 1] };
            op(compute_op(Vec::new(), 0), deps)
        })
        .collect();
    Schedule {
        programs: vec![Program { stage: 0, ops }],
        program_of: vec![0],
    }
}

/// First-start-to-last-end span of each chain length; `bytes` of each record is the op count.
pub fn launch(cfg: &Config, progress: &mut Counter) -> Result<Vec<SizedSamples>, CalibError> {
    let plan = single_rank_plan()?;
    let mut backend = HostBackend::single();
    let mut out = Vec::new();
    for &n in &cfg.launch_ops {
        let schedule = empty_chain(n);
        let k = measured_ns(cfg.launch, || {
            twin_runtime::run_step(&plan, &schedule, 0, &mut backend)
                .map(|r| {
                    let first = r.events.iter().map(|e| e.start_ns).min().unwrap_or(0);
                    let last = r.events.iter().map(|e| e.end_ns).max().unwrap_or(0);
                    last.saturating_sub(first) as f64
                })
                .map_err(|e| CalibError::Bench(format!("empty-op chain of {n}: {e}")))
        })?;
        out.push(SizedSamples::new(u64::from(n), k));
        progress.tick("op overhead");
    }
    Ok(out)
}
