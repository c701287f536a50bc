//! Per-op overhead of the host backend (the profile's `kernel.launch_ns` and
//! `kernel.op_overhead_ns`): a chain of empty compute ops, each depending on the one before,
//! run through `exec::run_step` on a one-rank `HostBackend` with a progress file, as a launched
//! worker runs its ops. The span from the first op's start to the last op's end grows by the
//! overhead per op (the span leaves out the fixed per-step setup: stream threads starting).
//!
//! The hand-off between a rank's threads (`[host] handoff_ns`): a chain of real compute ops
//! (the bundled one-rank scenario's first forward op) on the compute stream, each releasing an
//! allocation on the pp-send stream, as a compute op releases its send, while the compute
//! stream goes on to its next op. The gap from each compute op's end to the allocation's issue
//! (the trace's `issued_ns`) is the time the pp-send thread took to wake and get the core; the
//! backend runs with a progress file and turns at its core, as a launched rank does. A chain
//! of empty ops alternating between two streams, where the releasing thread goes idle at
//! once, measured 0.9 µs; ops after real work in `pp.toml`'s runs waited about 6 µs
//! (docs/journal/2026-11-validation-history.md, 2026-11-24). Everything runs on one pinned core, as
//! a rank's threads do in a host run (`launch::affinity`).

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
    let s = twin_sim::setup::parse_str(SINGLE_RANK_SCENARIO, "scenarios/host/single.toml", &[])
        .map_err(|e| CalibError::Setup(format!("built-in one-rank scenario: {e}")))?;
    Plan::new(&s).map_err(|e| CalibError::Setup(format!("built-in one-rank plan: {e}")))
}

/// A one-rank schedule of `n` chained empty compute ops on the compute stream.
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

/// Real ops in one hand-off chain (each releases one allocation on another stream).
pub const HANDOFF_LINKS: u32 = 24;

/// The hand-off chain: [`HANDOFF_LINKS`] copies of `real` on the compute stream, each
/// depending on the one before, and after each an allocation of 64 bytes on the pp-send stream
/// that depends on it (and its free). Op `2 i` is the i-th compute op, `2 i + 1` its allocation.
pub fn handoff_chain(real: &twin_sim::schedule::ComputeOp) -> Schedule {
    use twin_sim::schedule::{Device, MemCategory, Op, OpKind};
    let mut ops = Vec::with_capacity(3 * HANDOFF_LINKS as usize);
    for i in 0..HANDOFF_LINKS {
        let deps = if i == 0 { Vec::new() } else { vec![2 * i - 2] };
        ops.push(op(real.clone(), deps));
        ops.push(Op {
            stream: Stream::PpSend,
            kind: OpKind::Alloc {
                category: MemCategory::Buffers,
                device: Device::Gpu,
                bytes: 64,
                tag: i,
            },
            deps: vec![2 * i].into(),
            label: Default::default(),
        });
    }
    for i in 0..HANDOFF_LINKS {
        ops.push(Op {
            stream: Stream::PpSend,
            kind: OpKind::Free { tag: i },
            deps: vec![2 * i + 1].into(),
            label: Default::default(),
        });
    }
    Schedule {
        programs: vec![Program { stage: 0, ops }],
        program_of: vec![0],
    }
}

/// Mean gap, in ns, from each compute op's end to the issue of the allocation it releases, in
/// one run of [`handoff_chain`]; `None` when the backend recorded no issue times.
pub fn handoff_gap_ns(events: &[twin_runtime::TraceEvent]) -> Option<f64> {
    let mut by_op: Vec<Option<&twin_runtime::TraceEvent>> = vec![None; events.len()];
    for e in events {
        if let Some(slot) = by_op.get_mut(e.op as usize) {
            *slot = Some(e);
        }
    }
    let gaps: Vec<f64> = (0..HANDOFF_LINKS as usize)
        .filter_map(|i| {
            let (c, a) = (by_op.get(2 * i)?.as_ref()?, by_op.get(2 * i + 1)?.as_ref()?);
            Some(a.issued_ns?.saturating_sub(c.end_ns) as f64)
        })
        .collect();
    (!gaps.is_empty()).then(|| gaps.iter().sum::<f64>() / gaps.len() as f64)
}

/// The first compute op of the bundled one-rank scenario (a forward layer).
fn representative_op(plan: &Plan) -> Result<twin_sim::schedule::ComputeOp, CalibError> {
    let s = twin_sim::setup::parse_str(SINGLE_RANK_SCENARIO, "scenarios/host/single.toml", &[])
        .map_err(|e| CalibError::Setup(format!("built-in one-rank scenario: {e}")))?;
    let schedule = twin_sim::schedule::generate(&s, plan)
        .map_err(|e| CalibError::Setup(format!("built-in one-rank schedule: {e}")))?;
    schedule
        .programs
        .first()
        .and_then(|p| {
            p.ops.iter().find_map(|o| match &o.kind {
                twin_sim::schedule::OpKind::Compute(c) => Some(c.clone()),
                _ => None,
            })
        })
        .ok_or_else(|| CalibError::Setup("the built-in one-rank scenario has no compute op".into()))
}

/// First-start-to-last-end span of each chain length of empty ops (`launch`; `bytes` of each
/// record is the op count), and the hand-off chain's mean gap per run (`handoff`, one record,
/// `bytes` the links per run).
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
            for &n in &cfg.launch_ops {
                let schedule = empty_chain(n);
                let k = measured_ns(cfg.launch, || {
                    twin_runtime::run_step(&plan, &schedule, 0, &mut backend)
                        .map(|r| {
                            let first = r.events.iter().map(|e| e.start_ns).min();
                            let last = r.events.iter().map(|e| e.end_ns).max();
                            last.unwrap_or(0).saturating_sub(first.unwrap_or(0)) as f64
                        })
                        .map_err(|e| CalibError::Bench(format!("empty-op chain of {n}: {e}")))
                })?;
                out.0.push(SizedSamples::new(u64::from(n), k));
                let _ = tx.send("op overhead");
            }
            drop(backend);
            // The hand-off, with turns at the core as a launched rank has them.
            let real = representative_op(&plan)?;
            let schedule = handoff_chain(&real);
            let progress_file = Progress::create(&dir, 0);
            let mut backend = HostBackend::single()
                .with_progress(progress_file)
                .with_turns(twin_runtime::backend::host::turns::CoreTurns::private());
            let k = measured_ns(cfg.launch, || {
                let r = twin_runtime::run_step(&plan, &schedule, 0, &mut backend)
                    .map_err(|e| CalibError::Bench(format!("hand-off chain: {e}")))?;
                handoff_gap_ns(&r.events).ok_or_else(|| {
                    CalibError::Bench("hand-off chain: the backend recorded no issue times".into())
                })
            })?;
            out.1.push(SizedSamples::new(u64::from(HANDOFF_LINKS), k));
            let _ = tx.send("stream hand-off");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn event(
        op: u32,
        start_ns: u64,
        end_ns: u64,
        issued_ns: Option<u64>,
    ) -> twin_runtime::TraceEvent {
        twin_runtime::TraceEvent {
            rank: 0,
            stream: Stream::Compute,
            op,
            start_ns,
            end_ns,
            bytes: 0,
            flops: 0,
            issued_ns,
            wait_ns: None,
        }
    }

    #[test]
    fn the_gap_is_from_each_compute_ops_end_to_its_allocations_issue() {
        // Compute op 2i ends at 1000 (i + 1); its allocation is issued 100 (i + 1) ns later.
        let n = HANDOFF_LINKS;
        let mut ev: Vec<_> = (0..n)
            .flat_map(|i| {
                let end = 1000 * u64::from(i + 1);
                [
                    event(2 * i, end - 900, end, Some(end - 900)),
                    event(
                        2 * i + 1,
                        end + 200,
                        end + 201,
                        Some(end + 100 * u64::from(i + 1)),
                    ),
                ]
            })
            .collect();
        ev.push(event(2 * n, 0, 0, None));
        let mean = (1..=u64::from(n)).map(|k| 100.0 * k as f64).sum::<f64>() / f64::from(n);
        assert_eq!(handoff_gap_ns(&ev), Some(mean));
        // Without issue times there is nothing to measure.
        for e in &mut ev {
            e.issued_ns = None;
        }
        assert_eq!(handoff_gap_ns(&ev), None);
    }

    #[test]
    fn the_hand_off_chain_is_a_valid_schedule_that_frees_what_it_allocates() {
        let plan = single_rank_plan().unwrap();
        let real = representative_op(&plan).unwrap();
        assert!(!real.gemms.is_empty());
        let s = handoff_chain(&real);
        let ops = &s.programs[0].ops;
        assert_eq!(ops.len() as u32, 3 * HANDOFF_LINKS);
        s.validate(&plan).unwrap();
    }
}
