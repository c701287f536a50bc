//! Per-op overhead of the host backend (the profile's `kernel.launch_ns` and
//! `kernel.op_overhead_ns`): a chain of empty compute ops, each depending on the one before,
//! run through `exec::run_step` on a one-rank `HostBackend` with a progress file, as a launched
//! worker runs its ops. The span from the first op's start to the last op's end grows by the
//! overhead per op (the span leaves out the fixed per-step setup: stream threads starting).
//! The same chain alternating between two streams times the hand-off between streams
//! (reported): each op then waits for an op of another stream, whose thread must wake this
//! one. Both run on one pinned core, as a rank's threads do in a host run
//! (`launch::affinity`).

use super::compute::{compute_op, op};
use super::{Config, Counter, SizedSamples};
use crate::sample::measured_ns;
use crate::CalibError;
use twin_runtime::backend::host::HostBackend;
use twin_runtime::launch::affinity::pin_rank;
use twin_runtime::launch::progress::Progress;
use twin_sim::plan::Plan;
use twin_sim::schedule::{Program, Schedule, Stream};

/// The bundled one-rank host scenario: only its plan (one rank) is used.
const SINGLE_RANK_SCENARIO: &str = include_str!("../../../scenarios/host/single.toml");

/// A plan for one rank.
pub fn single_rank_plan() -> Result<Plan, CalibError> {
    let s = twin_sim::scenario::parse_str(SINGLE_RANK_SCENARIO, "scenarios/host/single.toml", &[])
        .map_err(|e| CalibError::Setup(format!("built-in one-rank scenario: {e}")))?;
    Plan::new(&s).map_err(|e| CalibError::Setup(format!("built-in one-rank plan: {e}")))
}

/// A one-rank schedule of `n` chained empty compute ops, on the compute stream or (`alternate`)
/// on the compute and the pp-send stream in turn.
pub fn empty_chain(n: u32, alternate: bool) -> Schedule {
    let ops = (0..n)
        .map(|i| {
            let deps = if i == 0 { Vec::new() } else { vec![i - 1] };
            let mut o = op(compute_op(Vec::new(), 0), deps);
            if alternate && i % 2 == 1 {
                o.stream = Stream::PpSend;
            }
            o
        })
        .collect();
    Schedule {
        programs: vec![Program { stage: 0, ops }],
        program_of: vec![0],
    }
}

/// First-start-to-last-end span of each chain length, one stream (`launch`) and alternating
/// (`handoff`); `bytes` of each record is the op count.
pub fn launch(
    cfg: &Config,
    progress: &mut Counter,
) -> Result<(Vec<SizedSamples>, Vec<SizedSamples>), CalibError> {
    let plan = single_rank_plan()?;
    let (tx, rx) = std::sync::mpsc::channel();
    // On a thread of its own, pinned as a rank is; the calling thread keeps its placement.
    let result = std::thread::scope(|s| {
        let h = s.spawn(move || {
            pin_rank(0);
            // With a progress file, as the launcher's workers run: its two writes per op are
            // part of every op's overhead in a launched run.
            let dir = std::env::temp_dir()
                .join(format!("twin-calibrate-progress-{}", std::process::id()));
            let progress_file = std::fs::create_dir_all(&dir)
                .ok()
                .and_then(|()| Progress::create(&dir, 0));
            let mut backend = HostBackend::single().with_progress(progress_file);
            let mut out = (Vec::new(), Vec::new());
            for alternate in [false, true] {
                for &n in &cfg.launch_ops {
                    let schedule = empty_chain(n, alternate);
                    let k = measured_ns(cfg.launch, || {
                        twin_runtime::run_step(&plan, &schedule, 0, &mut backend)
                            .map(|r| {
                                let first = r.events.iter().map(|e| e.start_ns).min();
                                let last = r.events.iter().map(|e| e.end_ns).max();
                                last.unwrap_or(0).saturating_sub(first.unwrap_or(0)) as f64
                            })
                            .map_err(|e| CalibError::Bench(format!("empty-op chain of {n}: {e}")))
                    })?;
                    let sample = SizedSamples::new(u64::from(n), k);
                    if alternate { &mut out.1 } else { &mut out.0 }.push(sample);
                    let _ = tx.send(if alternate {
                        "stream hand-off"
                    } else {
                        "op overhead"
                    });
                }
            }
            drop(backend);
            let _ = std::fs::remove_dir_all(&dir);
            Ok::<_, CalibError>(out)
        });
        for name in rx {
            progress.tick(name);
        }
        h.join()
            .unwrap_or_else(|_| Err(CalibError::Bench("the op-chain thread panicked".into())))
    });
    result
}
