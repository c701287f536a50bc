//! One rank of a run on an asynchronous device backend (CUDA, or the dummy device that stands
//! in for it in tests), started by the launcher exactly as a host rank is: the shared
//! [`Session`] bootstrap, the steps, and the measurements handed to rank 0. With a
//! [`Durability`] it restores the newest complete checkpoint when resuming, writes checkpoints
//! after every K steps and carries out injected kills, through the same code as the host
//! worker (`worker::first_step`, `worker::checkpoint_if_due`, `inject::kill_if_due`): the
//! backend only hands out and takes back its state buffers ([`StateBuffers`]). A rank that
//! fails publishes its failure; every other rank then exits at once, because its device
//! collectives would otherwise wait forever for the dead peer.

use super::events::{unix_ns, Event, EventLog};
use super::inject::KillPoint;
use super::progress::Progress;
use super::session::rss_peak_bytes;
use super::worker::{checkpoint_if_due, first_step, identity, Durability};
use super::{RankEnv, RankMeasure, Session};
use crate::backend::{Backend, MemoryReport, OpContext, OpTiming};
use crate::checkpoint::{StateBuffers, Writer};
use crate::error::RuntimeError;
use crate::exec::run_step;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use twin_sim::plan::{Plan, RankId};
use twin_sim::schedule::{Op, Program, Schedule};

/// A device backend a launched rank can run: it executes ops, keeps its model state in
/// buffers checkpoints can copy, and says when each step began.
pub trait DeviceBackend: Backend + StateBuffers {
    /// When the current (or last) step began on the host's monotonic clock; op times of
    /// [`Backend::finish_step`] count from here.
    fn step_origin(&self) -> Option<Instant>;
    /// The global step (counted across restarts) the next step runs.
    fn set_global_step(&mut self, _step: u64) {}
    /// A digest of the model state for the report, where taking one is cheap.
    fn state_digest(&self) -> Result<Option<u64>, RuntimeError> {
        Ok(None)
    }
}

/// How a device rank runs.
#[derive(Clone, Debug)]
pub struct DeviceWorkerOptions {
    pub steps: u32,
    /// Longest wait for a peer or the store before the rank gives up.
    pub timeout: Duration,
    pub durable: Durability,
}

/// Run this rank on the backend `open` makes (after the bootstrap, with the session at hand
/// for rendezvous). Rank 0 returns every rank's measurement (indexed by rank); others `None`.
pub fn run_device_worker<B: DeviceBackend>(
    env: &RankEnv,
    plan: &Plan,
    schedule: &Schedule,
    opts: &DeviceWorkerOptions,
    open: impl FnOnce(&Session) -> Result<B, RuntimeError>,
) -> Result<Option<Vec<RankMeasure>>, RuntimeError> {
    let mut session = Session::open(env, plan, schedule, opts.timeout)?;
    let rank = session.rank;
    // Set before this rank publishes its own failure, which it reports itself.
    let failed_here = Arc::new(AtomicBool::new(false));
    let quiet = Arc::clone(&failed_here);
    session.watch_for_failure(move |reason| {
        if !quiet.load(Ordering::SeqCst) {
            eprintln!("rank {rank} stops: {reason}");
            std::process::exit(1);
        }
    })?;
    let d = &opts.durable;
    let events = EventLog::from_env(rank).map(Arc::new);
    let record = |e: Event| {
        if let Some(ev) = &events {
            ev.record(&e);
        }
    };
    let mut ckpt_store = match &d.checkpoint {
        Some(_) => Some(Arc::new(Mutex::new(session.connect()?))),
        None => None,
    };
    let outcome = (|| {
        let mut backend = open(&session)?;
        record(Event::Ready { t_ns: unix_ns() });
        let me = identity(rank, session.world, session.schedule_sum, d.seed);
        let total = u64::from(opts.steps.max(1));
        let first = first_step(&mut session.store, d, me, total, &mut backend, &record)?;
        let mut writer = Writer::new(d.checkpoint.as_ref().is_some_and(|c| c.asynchronous));
        let progress = Progress::from_env(rank);
        let mut spans = Vec::new();
        let mut last = None;
        for step in first..total {
            session.store.start_together(
                &format!("step{step}"),
                rank,
                session.world,
                &session.clock,
                super::STEP_START_MARGIN,
            )?;
            backend.set_global_step(step);
            let mut watched = Watched {
                inner: &mut backend,
                kills: &d.kills,
                step,
                events: events.as_deref(),
                progress: progress.as_ref(),
                issued: Vec::new(),
            };
            let run = run_step(plan, schedule, rank, &mut watched)?;
            record(Event::Step {
                t_ns: unix_ns(),
                step,
            });
            // Event times count from the step's device origin; put them on the aligned clock.
            let origin = backend.step_origin().map_or(0, |t| session.clock.at_ns(t));
            let lo = run.events.iter().map(|e| e.start_ns).min().unwrap_or(0);
            let hi = run.events.iter().map(|e| e.end_ns).max().unwrap_or(lo);
            spans.push([origin + lo, origin + hi]);
            last = Some((run, origin));
            checkpoint_if_due(
                &mut writer,
                d,
                &ckpt_store,
                me,
                step,
                total,
                &backend,
                &events,
            )?;
        }
        writer.wait()?;
        let (run, origin) = last.ok_or_else(|| RuntimeError::Aborted("no step ran".into()))?;
        let mut m = aligned_measure(&run, origin, spans, &session);
        m.final_weights_digest = backend.state_digest()?.map(|h| format!("{h:016x}"));
        Ok(m)
    })();
    ckpt_store.take();
    match outcome {
        Ok(measure) => session.finish(&measure),
        Err(e) => {
            failed_here.store(true, Ordering::SeqCst);
            session.publish_failure(&e);
            Err(e)
        }
    }
}

/// The rank's measurement with its last step's op times moved onto the aligned clock.
fn aligned_measure(
    run: &crate::exec::RankRun,
    origin_ns: u64,
    step_spans_ns: Vec<[u64; 2]>,
    session: &Session,
) -> RankMeasure {
    let mut m = RankMeasure::from_rank_run(run);
    for t in &mut m.op_times_ns {
        t[0] += origin_ns;
        t[1] += origin_ns;
    }
    for t in m.op_issued_ns.iter_mut().flatten() {
        *t += origin_ns;
    }
    m.step_spans_ns = step_spans_ns;
    m.clock_offset_ns = session.clock_offset_ns;
    m.clock_residual_ns = session.clock_residual_ns;
    m.rss_peak_bytes = rss_peak_bytes();
    m
}

/// A device backend seen through the launcher's eyes for one step: an injected kill fires
/// when the host reaches its op (the ops before it may still run on the device), and each op
/// is recorded as started when issued and as finished when the step is, so the launcher sees
/// progress.
struct Watched<'a> {
    inner: &'a mut dyn Backend,
    kills: &'a [KillPoint],
    step: u64,
    events: Option<&'a EventLog>,
    progress: Option<&'a Progress>,
    /// (stream, op) of every op issued this step.
    issued: Vec<(twin_sim::schedule::Stream, u32)>,
}

impl Backend for Watched<'_> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn prepare(
        &mut self,
        plan: &Plan,
        rank: RankId,
        program: &Program,
    ) -> Result<(), RuntimeError> {
        self.inner.prepare(plan, rank, program)
    }

    fn enqueue(&mut self, index: u32, op: &Op, ctx: &OpContext) -> Result<(), RuntimeError> {
        super::inject::kill_if_due(self.kills, self.step, index, self.events);
        if let Some(p) = self.progress {
            p.started(op.stream, index);
        }
        self.issued.push((op.stream, index));
        self.inner.enqueue(index, op, ctx)
    }

    fn finish_step(&mut self) -> Result<Vec<OpTiming>, RuntimeError> {
        let out = self.inner.finish_step()?;
        if let Some(p) = self.progress {
            for &(stream, index) in &self.issued {
                p.finished(stream, index);
            }
        }
        Ok(out)
    }

    fn memory(&self) -> MemoryReport {
        self.inner.memory()
    }
}
