//! Transfers over the host runtime's own transport: ranks are threads of this process, each
//! with its own TCP mesh over loopback (`twin_runtime::microbench::local_meshes`), running the
//! runtime's collectives (`transport::collective`: ring all-reduce, reduce-scatter and
//! all-gather, pairwise all-to-all, chunked ring broadcast) and framed p2p messages, as a host
//! run does between rank processes. Every call starts after all ranks met at a barrier; its
//! sample is the slowest rank's time (a p2p sample: half a ping-pong round trip). Overlap:
//! one GEMM timed alone, then while two ranks run all-reduces back to back.

use super::compute::{compute_op, workspace_for};
use super::{CommSamples, Config, Counter, OverlapSamples};
use crate::sample::{reject_outliers, time_ns};
use crate::CalibError;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};
use twin_runtime::launch::affinity::pin_rank;
use twin_runtime::microbench::local_meshes;
use twin_runtime::transport::collective::{self, Ring, Work};
use twin_runtime::transport::mesh::Mesh;
use twin_sim::schedule::{CollectiveKind, Gemm};

/// Bound on mesh setup and on any single blocking transfer.
pub(super) const TIMEOUT: Duration = Duration::from_secs(60);
const COLLECTIVE_LANE: u8 = 1;
const P2P_LANE: u8 = 5;

/// Every collective the runtime implements.
pub const COLLECTIVES: [CollectiveKind; 5] = [
    CollectiveKind::AllReduce,
    CollectiveKind::ReduceScatter,
    CollectiveKind::AllGather,
    CollectiveKind::AllToAll,
    CollectiveKind::Broadcast,
];

/// What a rank released by a failing one reports ([`Barrier`]).
const PEER_FAILED: &str = "another rank failed";

/// A barrier that a failing rank can break, so the others return instead of waiting forever.
#[derive(Default)]
pub(super) struct Barrier {
    state: Mutex<(usize, u64, bool)>,
    cv: Condvar,
}

impl Barrier {
    pub(super) fn wait(&self, parties: usize) -> Result<(), CalibError> {
        let broken = || CalibError::Bench(PEER_FAILED.into());
        let mut s = self.state.lock().map_err(|_| broken())?;
        if s.2 {
            return Err(broken());
        }
        let generation = s.1;
        s.0 += 1;
        if s.0 >= parties {
            s.0 = 0;
            s.1 += 1;
            self.cv.notify_all();
            return Ok(());
        }
        while s.1 == generation && !s.2 {
            s = self.cv.wait(s).map_err(|_| broken())?;
        }
        if s.2 {
            Err(broken())
        } else {
            Ok(())
        }
    }
    pub(super) fn abort(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.2 = true;
        }
        self.cv.notify_all();
    }
}

/// One measurement of a world: p2p (`None`) or a collective, at `bytes`.
#[derive(Clone, Copy)]
pub(super) struct Task {
    pub(super) kind: Option<CollectiveKind>,
    pub(super) bytes: u64,
}

impl Task {
    fn name(&self) -> &'static str {
        self.kind.map_or("p2p", CollectiveKind::name)
    }
}

/// Tag bit of a call's untimed synchronising collective (call tags use the low 40 bits).
const SYNC_TAG: u64 = 1 << 41;

/// Ping-pong round trips per p2p sample (their mean is the sample).
const P2P_ROUNDS: u32 = 4;

/// When one rank's side of a call started and ended, in ns since the world's common origin.
/// A call's sample is the last end less the last start: a collective runs from when its last
/// member arrives, as the simulator starts it, and a run's trace does too (a measured
/// collective starts when the first data arrives). The slowest rank's own time would add how
/// much earlier the first member arrived.
pub(super) type Span = (f64, f64);

/// One call's sample from its members' spans: from the last start to the last end.
pub(super) fn sample_ns<'a>(spans: impl Iterator<Item = &'a Span>) -> f64 {
    let (start, end) = spans.fold((0.0f64, 0.0f64), |(s, e), &(a, b)| (s.max(a), e.max(b)));
    (end - start).max(0.0)
}

/// One ping-pong round trip of `payload` between ranks 0 and 1 on `lane` with `tag`, rank 0
/// sending first (`peer` is the other rank). Each received message is checked against what
/// was sent, as the runtime's receive checks it before its op is done.
pub(super) fn round_trip(
    mesh: &Mesh,
    peer: u32,
    (lane, tag): (u8, u64),
    payload: &[u8],
    sum: Option<u64>,
) -> Result<(), CalibError> {
    let fail = |e: twin_runtime::RuntimeError| CalibError::Bench(format!("p2p: {e}"));
    let bytes = payload.len() as u64;
    let receive = || -> Result<(), CalibError> {
        let (got, _) = mesh.recv(peer, lane, tag, bytes).map_err(fail)?;
        if got == payload {
            Ok(())
        } else {
            Err(CalibError::Bench(
                "p2p: the bytes received differ from those sent".into(),
            ))
        }
    };
    if mesh.rank == 0 {
        mesh.send_summed(peer, lane, tag, payload, sum, false)
            .map_err(fail)?;
        receive()
    } else {
        receive()?;
        mesh.send_summed(peer, lane, tag, payload, sum, false)
            .map_err(fail)
    }
}

/// Runs rank `me`'s side of one call (a p2p: `(0, half the mean round trip)` on rank 0,
/// `(0, 0)` elsewhere). A collective works in `work`, kept for the task's calls as a run
/// keeps a call's buffers (`backend::host::data`).
fn call(
    mesh: &Mesh,
    members: &[u32],
    task: Task,
    tag: u64,
    work: &mut Work,
    origin: Instant,
) -> Result<Span, CalibError> {
    let fail = |e: twin_runtime::RuntimeError| CalibError::Bench(format!("{}: {e}", task.name()));
    match task.kind {
        None => {
            let payload = vec![7u8; usize::try_from(task.bytes).unwrap_or(usize::MAX)];
            // Summed once, as the runtime keeps each p2p message's sum with its bytes.
            let sum = Some(twin_runtime::transport::frame::wire_sum(&payload));
            // One untimed exchange first, so the timed ones do not include the peer thread
            // waking from the barrier (a scheduler latency, not a transfer).
            for timed in [false, true] {
                let rounds = if timed { P2P_ROUNDS } else { 1 };
                let t = Instant::now();
                for _ in 0..rounds {
                    round_trip(mesh, 1 - mesh.rank, (P2P_LANE, tag), &payload, sum)?;
                }
                if timed && mesh.rank == 0 {
                    return Ok((
                        0.0,
                        t.elapsed().as_nanos() as f64 / (2.0 * f64::from(rounds)),
                    ));
                }
            }
            Ok((0.0, 0.0))
        }
        Some(kind) => {
            let elems = usize::try_from(task.bytes / 4).unwrap_or(usize::MAX);
            // One untimed call first (as for p2p): the ranks leave the barrier as the
            // scheduler wakes them, tens of microseconds apart on a loaded machine, and the
            // first would time the others' wake-up. Leaving a collective together is what a
            // run's ranks do (they meet at every collective), so the timed call starts there.
            // The input is built before the synchronising call: built between the two, its
            // cost (milliseconds at 16 MiB, more for a rank sharing its core) set the ranks
            // apart again before the timed call.
            // The result is checked inside the timed call, as the runtime checks it before
            // its op is done (`backend::host`).
            let (data, expected) = {
                let ring = Ring::new(mesh, members, COLLECTIVE_LANE, tag).map_err(fail)?;
                (
                    collective::input(kind, &ring, elems, tag),
                    collective::expected(kind, &ring, elems, tag),
                )
            };
            let mut span = (0.0, 0.0);
            for (timed, tag) in [(false, tag | SYNC_TAG), (true, tag)] {
                let ring = Ring::new(mesh, members, COLLECTIVE_LANE, tag).map_err(fail)?;
                let t = Instant::now();
                collective::execute_into(kind, &ring, &data, work).map_err(fail)?;
                collective::check(kind, &ring, work.output(), &expected).map_err(fail)?;
                if timed {
                    let since = |i: Instant| i.saturating_duration_since(origin).as_nanos() as f64;
                    span = (since(t), since(Instant::now()));
                }
                std::hint::black_box(work.output());
            }
            Ok(span)
        }
    }
}

/// Every call of every task on one rank: `[task][call]` spans, warm-up calls included.
/// The tasks are interleaved (call 0 of every task, then call 1 of every task, ...): this
/// machine's transfers have slow spells lasting many calls (a pinned rank's vCPU waking slowly),
/// and run one task after another, a spell made every sample of one size slow (all seven 2-rank
/// all-gathers of 1-16 KiB at ~800 µs in one calibration, against ~50 µs in the next).
/// Interleaved, a spell spreads over every size, and the per-size median outlives it.
fn run_rank(
    mesh: &Mesh,
    members: &[u32],
    tasks: &[Task],
    calls: u32,
    barrier: &Barrier,
    progress: Option<&Sender<&'static str>>,
    origin: Instant,
) -> Result<Vec<Vec<Span>>, CalibError> {
    // On its core, as the runtime pins a rank's process (`launch::affinity`): unpinned, the
    // scheduler can stack two ranks on one core while the other idles.
    pin_rank(mesh.rank);
    // A transfer thread, as the runtime's are: it preempts compute when it wakes.
    twin_runtime::backend::host::priority::prefer_wakeup();
    let mut out: Vec<Vec<Span>> = tasks
        .iter()
        .map(|_| Vec::with_capacity(calls as usize))
        .collect();
    let mut works: Vec<Work> = tasks.iter().map(|_| Work::default()).collect();
    for c in 0..calls {
        for (((i, task), times), work) in
            tasks.iter().enumerate().zip(out.iter_mut()).zip(&mut works)
        {
            barrier.wait(members.len())?;
            let tag = ((i as u64) << 24) | u64::from(c);
            match call(mesh, members, *task, tag, work, origin) {
                Ok(span) => times.push(span),
                Err(e) => {
                    barrier.abort();
                    mesh.shutdown_all();
                    return Err(e);
                }
            }
            if let Some(p) = progress {
                // The receiver is the calling thread; it outlives this one.
                let _ = p.send(task.name());
            }
        }
    }
    Ok(out)
}

/// Two ranks of this process connected over the runtime's mesh (`local_meshes`), for the
/// two-rank benchmarks.
pub(super) fn two_ranks() -> Result<Vec<Mesh>, CalibError> {
    local_meshes(2, TIMEOUT)
        .map_err(|e| CalibError::Bench(format!("connecting 2 local ranks: {e}")))
}

/// `reps.timed` two-rank calls of collective `kind` at `bytes` per call, after `reps.warmup`
/// untimed ones, timed as the calibration times them (each rank a pinned thread of this
/// process, a barrier before each call, last member's start to last end): the samples in ns.
/// `twin verify`'s transfer check (`check::transfer_check`).
pub fn time_two_rank(
    kind: CollectiveKind,
    bytes: u64,
    reps: crate::sample::Repeats,
) -> Result<Vec<f64>, CalibError> {
    let meshes = two_ranks()?;
    let members = [0u32, 1];
    let tasks = [Task {
        kind: Some(kind),
        bytes,
    }];
    let calls = reps.warmup + reps.timed.max(1);
    let per_rank = run_world(&meshes, &members, &tasks, calls, None)?;
    Ok(task_samples(&per_rank, 0, reps.warmup..calls).collect())
}

/// Task `task`'s sample for each call in `calls` from the ranks' `[task][call]` spans
/// ([`run_world`]; [`sample_ns`]).
pub(super) fn task_samples(
    per_rank: &[Vec<Vec<Span>>],
    task: usize,
    calls: std::ops::Range<u32>,
) -> impl Iterator<Item = f64> + '_ {
    calls.map(move |c| {
        sample_ns(
            per_rank
                .iter()
                .filter_map(|r| r.get(task).and_then(|t| t.get(c as usize))),
        )
    })
}

/// The tasks measured in a world of `n` ranks.
fn tasks_for(cfg: &Config, n: u32) -> Vec<Task> {
    let mut tasks = Vec::new();
    if n == 2 {
        tasks.extend(
            cfg.comm_bytes
                .iter()
                .map(|&bytes| Task { kind: None, bytes }),
        );
    }
    for kind in COLLECTIVES {
        for &bytes in &cfg.comm_bytes {
            tasks.push(Task {
                kind: Some(kind),
                bytes,
            });
        }
    }
    tasks
}

/// How many measurements [`comm`] reports to the progress counter (every call of every task,
/// then the overlap measurement).
pub fn measurement_count(cfg: &Config) -> usize {
    let calls = (cfg.comm.warmup + cfg.comm.timed.max(1)) as usize;
    (2..=cfg.max_group)
        .map(|n| tasks_for(cfg, n).len() * calls)
        .sum::<usize>()
        + 1
}

/// Every rank of `meshes` on a thread of its own (pinned there, `run_rank`) running every call
/// of `tasks`, rank 0 reporting each call to `progress` through this thread; the ranks'
/// `[task][call]` spans, or an error ([`join_ranks`]).
pub(super) fn run_world(
    meshes: &[Mesh],
    members: &[u32],
    tasks: &[Task],
    calls: u32,
    mut progress: Option<&mut Counter>,
) -> Result<Vec<Vec<Vec<Span>>>, CalibError> {
    let barrier = Barrier::default();
    let (tx, rx) = channel();
    let origin = Instant::now();
    std::thread::scope(|s| {
        let handles: Vec<_> = meshes
            .iter()
            .map(|m| {
                let tx = (m.rank == 0).then(|| tx.clone());
                let barrier = &barrier;
                s.spawn(move || run_rank(m, members, tasks, calls, barrier, tx.as_ref(), origin))
            })
            .collect();
        drop(tx);
        for name in rx {
            if let Some(p) = progress.as_deref_mut() {
                p.tick(name);
            }
        }
        join_ranks(handles)
    })
}

/// The rank threads' results: every rank's value, or an error. A rank that fails releases the
/// others (`Barrier::abort`, `Mesh::shutdown_all`), whose errors then only say so
/// ([`PEER_FAILED`]): the error returned is the first that is a rank's own (a panic counts as
/// one).
pub(super) fn join_ranks<T>(
    handles: Vec<std::thread::ScopedJoinHandle<'_, Result<T, CalibError>>>,
) -> Result<Vec<T>, CalibError> {
    let released = |e: &CalibError| matches!(e, CalibError::Bench(m) if m == PEER_FAILED);
    let (mut values, mut error) = (Vec::with_capacity(handles.len()), None);
    for h in handles {
        match h
            .join()
            .unwrap_or_else(|_| Err(CalibError::Bench("a rank thread panicked".into())))
        {
            Ok(v) => values.push(v),
            Err(e) => {
                if error.as_ref().is_none_or(|f| released(f) && !released(&e)) {
                    error = Some(e);
                }
            }
        }
    }
    error.map_or(Ok(values), Err)
}

/// p2p and every collective over group sizes 2..=max_group, then the overlap measurement.
pub fn comm(
    cfg: &Config,
    progress: &mut Counter,
) -> Result<(Vec<CommSamples>, OverlapSamples), CalibError> {
    let mut out = Vec::new();
    let mut overlap = None;
    let calls = cfg.comm.warmup + cfg.comm.timed.max(1);
    for n in 2..=cfg.max_group {
        let meshes = local_meshes(n, TIMEOUT)
            .map_err(|e| CalibError::Bench(format!("connecting {n} local ranks: {e}")))?;
        let members: Vec<u32> = (0..n).collect();
        let tasks = tasks_for(cfg, n);
        let per_rank = run_world(&meshes, &members, &tasks, calls, Some(progress))?;
        for (i, task) in tasks.iter().enumerate() {
            let samples: Vec<f64> = task_samples(&per_rank, i, cfg.comm.warmup..calls).collect();
            let k = reject_outliers(&samples);
            out.push(CommSamples {
                kind: task.name().to_string(),
                ranks: n,
                bytes: task.bytes,
                kept_ns: k.kept,
                dropped_ns: k.dropped,
            });
        }
        if n == 2 {
            overlap = Some(measure_overlap(cfg, &meshes, progress)?);
        }
    }
    let overlap =
        overlap.ok_or_else(|| CalibError::Bench("no two-rank world was measured".into()))?;
    Ok((out, overlap))
}

/// The GEMM of the overlap measurement.
const OVERLAP_GEMM: Gemm = Gemm {
    dtype: None,
    m: 256,
    n: 256,
    k: 384,
    count: 1,
    batch: 1,
};

/// Message of the background all-reduces.
const OVERLAP_BYTES: u64 = 4 << 20;

/// All-reduces back to back on a two-rank world until rank 0 is asked to stop; the stop flag
/// rides in element 0 of the reduced buffer so both ranks stop after the same call.
fn background(mesh: &Mesh, stop: &std::sync::atomic::AtomicBool) -> Result<(), CalibError> {
    let members = [0u32, 1];
    let elems = (OVERLAP_BYTES / 4) as usize;
    let mut data = vec![0.0f32; elems];
    let mut work = Work::default();
    for i in 0u64.. {
        let ring = Ring::new(mesh, &members, COLLECTIVE_LANE, (1 << 40) | i)
            .map_err(|e| CalibError::Bench(format!("overlap all-reduce: {e}")))?;
        if mesh.rank == 0 && stop.load(std::sync::atomic::Ordering::SeqCst) {
            if let Some(x) = data.first_mut() {
                *x = 1.0;
            }
        }
        let kind = CollectiveKind::AllReduce;
        if let Err(e) = collective::execute_into(kind, &ring, &data, &mut work) {
            // Wake the other rank, which would otherwise wait for this one until the timeout.
            mesh.shutdown_all();
            return Err(CalibError::Bench(format!("overlap all-reduce: {e}")));
        }
        if work.output().first().copied().unwrap_or(1.0) >= 1.0 {
            break;
        }
    }
    Ok(())
}

fn measure_overlap(
    cfg: &Config,
    meshes: &[Mesh],
    progress: &mut Counter,
) -> Result<OverlapSamples, CalibError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let op = compute_op(vec![OVERLAP_GEMM], 0);
    let mut ws = workspace_for(std::slice::from_ref(&op));
    let alone = time_ns(cfg.overlap, || ws.run_gemms(&op));
    let stop = AtomicBool::new(false);
    let overlapped = std::thread::scope(|s| {
        let comm: Vec<_> = meshes
            .iter()
            .take(2)
            .map(|m| s.spawn(|| background(m, &stop)))
            .collect();
        // Let the transfers get going before timing.
        std::thread::sleep(Duration::from_millis(20));
        let k = time_ns(cfg.overlap, || ws.run_gemms(&op));
        stop.store(true, Ordering::SeqCst);
        for h in comm {
            h.join()
                .unwrap_or_else(|_| Err(CalibError::Bench("overlap thread panicked".into())))?;
        }
        Ok::<_, CalibError>(k)
    })?;
    progress.tick("overlap");
    Ok(OverlapSamples {
        gemm: [OVERLAP_GEMM.m, OVERLAP_GEMM.n, OVERLAP_GEMM.k],
        collective: CollectiveKind::AllReduce.name().to_string(),
        collective_bytes: OVERLAP_BYTES,
        dropped: alone.dropped.len() + overlapped.dropped.len(),
        alone_ns: alone.kept,
        overlapped_ns: overlapped.kept,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_runs_from_its_last_member_start_to_its_last_end() {
        // Member 0 arrived 40 us early and waited: not part of the collective's time.
        let spans = [
            (1_000.0, 95_000.0),
            (41_000.0, 96_000.0),
            (40_000.0, 94_000.0),
        ];
        assert_eq!(sample_ns(spans.iter()), 55_000.0);
        // A p2p: rank 0 reports (0, half the round trip), the other (0, 0).
        assert_eq!(sample_ns([(0.0, 30_000.0), (0.0, 0.0)].iter()), 30_000.0);
        assert_eq!(sample_ns(std::iter::empty()), 0.0);
    }

    /// The rank threads' results, each returned by a scoped thread, through `join_ranks`.
    fn joined(results: Vec<Result<u32, &'static str>>) -> Result<Vec<u32>, String> {
        std::thread::scope(|s| {
            let hs = results
                .into_iter()
                .map(|r| s.spawn(move || r.map_err(|m| CalibError::Bench(m.into()))))
                .collect();
            join_ranks(hs)
        })
        .map_err(|e| e.to_string())
    }

    #[test]
    fn the_ranks_values_come_in_order_and_a_failing_ranks_own_error_wins() {
        assert_eq!(joined(vec![Ok(3), Ok(1)]), Ok(vec![3, 1]));
        // Rank 0 was released by rank 1's failure: rank 1's error is reported.
        let e = joined(vec![Err(PEER_FAILED), Err("p2p: connection reset"), Ok(2)]).unwrap_err();
        assert!(e.contains("connection reset"), "{e}");
        // The first own error of several; only released ranks: their error.
        let e = joined(vec![Err("first"), Err(PEER_FAILED), Err("second")]).unwrap_err();
        assert!(e.contains("first"), "{e}");
        let e = joined(vec![Err(PEER_FAILED), Err(PEER_FAILED)]).unwrap_err();
        assert!(e.contains(PEER_FAILED), "{e}");
    }
}
