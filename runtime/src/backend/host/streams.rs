//! A rank's stream threads, spawned once and kept for the run, as a GPU's streams are. Each
//! step hands every stream that has ops a share of the step (a [`Job`]) over a channel; the
//! thread runs its ops in order and leaves their timings in the step's [`Gather`]; the last
//! thread to finish wakes the backend, once.
//!
//! Stream threads live as long as the backend, not one step. A fresh thread per stream and
//! step would be an artifact no GPU has: the spawn itself (about 50 µs on the development VM), a
//! first op that ran cold, and a fresh place in the scheduler for each of up to twenty threads
//! on two cores (`dp-pp-zero.toml`) at every step start
//! (docs/journal/2026-11-validation-history.md, 2026-11-23).

use super::step::NONE;
use super::{priority, Job};
use crate::backend::OpTiming;
use crate::error::RuntimeError;
use crate::transport::store::sleep_until;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use twin_sim::schedule::{OpKind, Stream};

/// One stream's share of a step. Fields drop in order, so a thread that panics drops its hold
/// on the job before its reply channel: the backend, seeing every reply channel closed, holds
/// the only reference to the job's shared state again.
struct Task {
    job: Arc<Job>,
    stream: usize,
    gather: Arc<Gather>,
    reply: mpsc::Sender<()>,
}

/// Where a step's stream threads leave their timings. Only the last thread to finish wakes
/// the backend's thread: a reply per stream woke it mid-step, and on a core shared with the
/// compute thread each wake-up took that core for 8-10 µs, two to three times a step
/// (`perf sched` of `pp.toml`, docs/journal/2026-11-validation-history.md, 2026-11-24).
#[derive(Default)]
struct Gather {
    timings: Mutex<Vec<OpTiming>>,
    /// Threads still running their share.
    left: AtomicUsize,
}

impl Gather {
    /// Leave one thread's timings; true for the last thread to finish.
    fn leave(&self, mut out: Vec<OpTiming>) -> bool {
        if let Ok(mut t) = self.timings.lock() {
            t.append(&mut out);
        }
        self.left.fetch_sub(1, Ordering::AcqRel) == 1
    }
}

struct Worker {
    tasks: mpsc::Sender<Task>,
    handle: JoinHandle<()>,
}

/// The stream threads of one rank, indexed by stream; each is spawned when a step first has
/// ops on its stream.
#[derive(Default)]
pub(super) struct Streams {
    workers: Vec<Option<Worker>>,
    /// Threads spawned so far (one per stream used, unless one died).
    spawned: u32,
}

impl Streams {
    /// Run `job` on the stream threads and return every op's timing, once each thread has
    /// finished (or died: its ops are then missing from the result). A stream whose thread
    /// cannot be started fails the step as a failed op does (the job's error), so the threads
    /// already running stop and finish.
    pub(super) fn run(&mut self, job: &Arc<Job>) -> Vec<OpTiming> {
        if self.workers.len() < Stream::COUNT {
            self.workers.resize_with(Stream::COUNT, || None);
        }
        let (reply, replies) = mpsc::channel();
        let used = job.by_stream.iter().filter(|ops| !ops.is_empty()).count();
        let gather = Arc::new(Gather {
            left: AtomicUsize::new(used),
            ..Gather::default()
        });
        for (stream, ops) in job.by_stream.iter().enumerate() {
            if ops.is_empty() {
                continue;
            }
            let task = Task {
                job: Arc::clone(job),
                stream,
                gather: Arc::clone(&gather),
                reply: reply.clone(),
            };
            if let Err(e) = self.dispatch(task) {
                job.fail(e);
                break;
            }
        }
        drop(reply);
        // Woken by the last thread to finish, or, when a thread died or was never started,
        // by the channel closing once every task is gone.
        let _ = replies.recv();
        match Arc::try_unwrap(gather) {
            Ok(g) => g.timings.into_inner().unwrap_or_default(),
            // A thread that finished may still be dropping its task.
            Err(g) => g
                .timings
                .lock()
                .map(|mut t| std::mem::take(&mut *t))
                .unwrap_or_default(),
        }
    }

    #[cfg(test)]
    pub(super) fn spawned(&self) -> u32 {
        self.spawned
    }

    /// Hand `task` to its stream's thread, spawning the thread if there is none or the last
    /// one died (a panic in an op).
    fn dispatch(&mut self, task: Task) -> Result<(), RuntimeError> {
        let stream = task.stream;
        let slot = self
            .workers
            .get_mut(stream)
            .ok_or_else(|| RuntimeError::Unsupported(format!("no stream {stream}")))?;
        let task = match slot {
            Some(w) => match w.tasks.send(task) {
                Ok(()) => return Ok(()),
                Err(mpsc::SendError(task)) => {
                    if let Some(dead) = slot.take() {
                        let _ = dead.handle.join();
                    }
                    task
                }
            },
            None => task,
        };
        let worker = spawn(stream)?;
        self.spawned += 1;
        worker
            .tasks
            .send(task)
            .map_err(|_| RuntimeError::Aborted(format!("stream thread {stream} died")))?;
        *slot = Some(worker);
        Ok(())
    }
}

impl Drop for Streams {
    fn drop(&mut self) {
        // Close every channel first, so all threads leave their loops, then wait for them.
        let handles: Vec<JoinHandle<()>> = self
            .workers
            .drain(..)
            .flatten()
            .map(|w| {
                drop(w.tasks);
                w.handle
            })
            .collect();
        for h in handles {
            let _ = h.join();
        }
    }
}

fn spawn(stream: usize) -> Result<Worker, RuntimeError> {
    let (tasks, inbox) = mpsc::channel::<Task>();
    let handle = std::thread::Builder::new()
        .name(format!("twin-stream-{stream}"))
        .spawn(move || {
            if stream == Stream::Compute.index() {
                priority::lower_priority(priority::COMPUTE_NICE);
            } else {
                priority::prefer_wakeup();
            }
            for task in inbox {
                let out = task.job.run_stream(task.stream);
                let Task {
                    job, gather, reply, ..
                } = task;
                drop(job);
                if gather.leave(out) {
                    let _ = reply.send(());
                }
            }
        })
        .map_err(|e| RuntimeError::Unsupported(format!("cannot start a stream thread: {e}")))?;
    Ok(Worker { tasks, handle })
}

impl Job {
    /// Run this stream's ops, in order, from the step's start.
    fn run_stream(&self, stream: usize) -> Vec<OpTiming> {
        if let Some(t) = self.start_at_ns {
            sleep_until(&self.shared.clock, t);
        }
        let ops = self.by_stream.get(stream).map_or(&[][..], |o| &o[..]);
        let st = &self.st;
        let mut out = Vec::with_capacity(ops.len());
        for (n, &i) in ops.iter().enumerate() {
            let Some(q) = self.queued.get(i) else {
                continue;
            };
            if self.wait_deps(q.op.stream, &q.op.deps).is_err() {
                return out;
            }
            // Issued: its deps are done and this thread knows it. A compute op may still wait
            // for its core's turn, a transfer for its peers.
            let issued_ns = self.shared.clock.now_ns();
            // A compute op runs in its core's turn (see `turns`), in line from when its deps
            // were done (`lineup`).
            let turn = match (&self.shared.turns, &q.op.kind) {
                (Some(t), OpKind::Compute(_)) => {
                    match self.ticket_at(t, stream, n).wait(|| self.stopped()) {
                        Some(turn) => Some(turn),
                        None => return out,
                    }
                }
                _ => None,
            };
            if let Some(p) = &self.shared.progress {
                p.started(q.op.stream, q.index);
            }
            // How long the thread waits for its core during a compute op or a transfer
            // (`OpTiming::wait_ns`; the merge counts no other op's): two reads of its
            // scheduler statistics, 0.26 µs each.
            let timed = !matches!(
                q.op.kind,
                OpKind::Alloc { .. } | OpKind::Free { .. } | OpKind::Checkpoint { .. }
            );
            let delay_at = timed.then(run_delay_ns).flatten();
            let result = self.run_op(q);
            let wait_ns = delay_at.and_then(|a| Some(run_delay_ns()?.saturating_sub(a)));
            // Every compute op this op's end makes ready, on any stream of the rank, gets in
            // line now, before the end wakes anyone and before this op's turn passes on: the
            // woken threads (a send, another rank's receive and then its compute thread) took
            // the core first, and another rank's op that became ready later took its ticket
            // first and ran ahead (docs/journal/2026-11-validation-history.md, 2026-11-23 and
            // 2026-11-24). Released first, the turn woke the other rank's compute thread, which
            // kept the core for its whole op while this thread still had its next ticket to take
            // (`perf sched` of `pp.toml`, same journal, 2026-11-24).
            if let (Ok(_), Some(t)) = (&result, &self.shared.turns) {
                self.line_up(t, q.index);
            }
            drop(turn);
            match result {
                Ok((start_ns, end_ns)) => {
                    if let Some(p) = &self.shared.progress {
                        p.finished(q.op.stream, q.index);
                    }
                    out.push(OpTiming {
                        index: q.index,
                        start_ns,
                        end_ns,
                        issued_ns: Some(issued_ns),
                        wait_ns,
                    });
                    st.complete(q.index);
                    if self.bookkeeping_ready(ops.get(n + 1)) {
                        continue;
                    }
                    // Let whatever this op made runnable on this core (the stream thread of a
                    // dependent op, a receiver whose data arrived meanwhile) run now, as a
                    // GPU's streams run side by side: a busy compute thread would otherwise keep
                    // the core until it blocks, and a send would wait for the ops after the
                    // one it depends on (docs/journal/2026-11-validation-history.md, 2026-11-23).
                    std::thread::yield_now();
                }
                Err(e) => {
                    let e = match self.shared.abort.reason() {
                        Some(r) => RuntimeError::Aborted(r),
                        None => e,
                    };
                    self.fail(e.at_op(self.shared.mesh.rank, q.index, q.op.name()));
                    return out;
                }
            }
        }
        out
    }

    /// Whether the step failed here or another rank asked to stop.
    fn stopped(&self) -> bool {
        self.st.failed.load(Ordering::SeqCst) || self.shared.abort.raised()
    }

    fn wait_deps(&self, stream: Stream, deps: &[u32]) -> Result<(), ()> {
        let st = &self.st;
        let w = st.waiters.get(stream.index()).ok_or(())?;
        let mut g = w.lock.lock().map_err(|_| ())?;
        loop {
            let Some(&missing) = deps.iter().find(|&&d| !st.is_done(d)) else {
                *g = NONE;
                return Ok(());
            };
            if self.stopped() {
                *g = NONE;
                return Err(());
            }
            *g = missing;
            // The timeout only bounds how long an abort from another rank goes unseen.
            g =
                w.cv.wait_timeout(g, Duration::from_millis(50))
                    .map_err(|_| ())?
                    .0;
        }
    }

    /// Whether the stream's next op (`next`, an index into `queued`) is an allocation or a
    /// free whose deps are all done. Such an op runs at once, before the stream thread yields:
    /// it is microseconds of bookkeeping, as on a GPU stream, where the next queued op starts
    /// when the last ends. Yielding first put it behind whatever other rank's op held the
    /// core, up to a GEMM's length, and a free or an allocation waited milliseconds for no work.
    pub(super) fn bookkeeping_ready(&self, next: Option<&usize>) -> bool {
        next.and_then(|&i| self.queued.get(i)).is_some_and(|q| {
            matches!(q.op.kind, OpKind::Alloc { .. } | OpKind::Free { .. })
                && q.op.deps.iter().all(|&d| self.st.is_done(d))
        })
    }

    fn fail(&self, e: RuntimeError) {
        if let Ok(mut slot) = self.st.error.lock() {
            slot.get_or_insert(e);
        }
        self.st.failed.store(true, Ordering::SeqCst);
        self.shared.mesh.shutdown_all();
        self.st.wake_all();
    }
}

/// The calling thread's run delay so far, in nanoseconds: how long it was runnable without a
/// core (`/proc/thread-self/schedstat`, its second field). Each thread keeps the file open;
/// `None` where it cannot be read.
fn run_delay_ns() -> Option<u64> {
    use std::os::unix::fs::FileExt;
    thread_local! {
        static STAT: Option<std::fs::File> = std::fs::File::open("/proc/thread-self/schedstat").ok();
    }
    STAT.with(|f| {
        let f = f.as_ref()?;
        let mut buf = [0u8; 96];
        let n = f.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(buf.get(..n)?).ok()?;
        text.split_whitespace().nth(1)?.parse().ok()
    })
}
