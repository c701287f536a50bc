//! One rank's life in a host run: serve the store (rank 0), check that every rank planned the
//! same schedule, align clocks, connect the mesh, restore the newest complete checkpoint when
//! resuming (every rank agrees on which), run the steps (a barrier before each, a checkpoint
//! after every K), and hand the measurements to rank 0, which returns all of them. A failure
//! is published to the store so that every other rank stops at once instead of waiting for a
//! timeout.

use super::env::RankEnv;
use super::events::{unix_ns, Event, EventLog};
use super::inject::KillPoint;
use super::measure::RankMeasure;
use super::progress::Progress;
use super::session::{rss_peak_bytes, Session};
use crate::backend::host::{AbortSignal, Fault, HostBackend};
use crate::checkpoint::{self, dir, CheckpointOptions, Header, StateBuffers, Writer};
use crate::error::RuntimeError;
use crate::exec::run_step;
use crate::transport::frame::checksum;
use crate::transport::mesh::Mesh;
use crate::transport::store::{le_u64, StoreClient};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use twin_sim::plan::Plan;
use twin_sim::schedule::Schedule;

/// How a worker runs.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// Steps to run; the last one is reported, the earlier ones warm up.
    pub steps: u32,
    /// Longest wait for a peer, the store or a connection before the rank gives up.
    pub timeout: Duration,
    pub fault: Option<Fault>,
    /// Model state seed, checkpoints and injected kills.
    pub durable: Durability,
}

/// What makes a run's model state real and recoverable.
#[derive(Clone, Debug, Default)]
pub struct Durability {
    /// Seeds every rank's weights and optimizer state (the scenario's `run.seed`).
    pub seed: u64,
    pub checkpoint: Option<CheckpointOptions>,
    /// Injected kills (each rank keeps its own).
    pub kills: Vec<KillPoint>,
}

/// Run this rank. Rank 0 returns every rank's measurement (indexed by rank); others `None`.
pub fn run_worker(
    env: &RankEnv,
    plan: &Plan,
    schedule: &Schedule,
    opts: &WorkerOptions,
) -> Result<Option<Vec<RankMeasure>>, RuntimeError> {
    let slot = super::affinity::core_slot(env.local_rank);
    // Rank 0 serves the store from threads of its own, started here before the pinning: they
    // keep every core the process may use, so the scheduler puts them where a core idles.
    let mut session = Session::open(env, plan, schedule, opts.timeout)?;
    // Before any of this rank's own threads start, so they all inherit the core (see
    // `affinity`).
    let pinned = super::affinity::pin_rank(env.local_rank);
    // Ranks bound to one core take turns at it (see `backend::host::turns`).
    let turns = slot
        .filter(|_| pinned.is_some())
        .and_then(crate::backend::host::turns::CoreTurns::from_env);
    let rank = session.rank;
    let clock = session.clock;
    let schedule_sum = session.schedule_sum;
    let mesh = Arc::new(Mesh::connect(
        &mut session.store,
        rank,
        env.world,
        opts.timeout,
    )?);
    let abort = Arc::new(AbortSignal::default());
    {
        let (abort, mesh) = (Arc::clone(&abort), Arc::clone(&mesh));
        session.watch_for_failure(move |reason| {
            abort.raise(reason);
            mesh.shutdown_all();
        })?;
    }
    let mut ckpt_client = match &opts.durable.checkpoint {
        Some(_) => Some(session.connect()?),
        None => None,
    };
    let store = &mut session.store;
    let events = EventLog::from_env(rank).map(Arc::new);
    let record = |e: Event| {
        if let Some(ev) = &events {
            ev.record(&e);
        }
    };
    record(Event::Ready { t_ns: unix_ns() });
    let d = &opts.durable;
    let mut backend = HostBackend::new(Arc::clone(&mesh), clock, Arc::clone(&abort), opts.fault)
        .with_progress(Progress::from_env(rank))
        .with_seed(d.seed)
        .with_kills(d.kills.clone(), events.clone())
        .with_turns(turns);
    let me = identity(rank, env.world, schedule_sum, d.seed);
    let total = u64::from(opts.steps.max(1));
    let mut spans = Vec::new();
    let mut recent: std::collections::VecDeque<Vec<[u64; 2]>> = Default::default();
    let mut recent_issued: std::collections::VecDeque<Vec<Option<u64>>> = Default::default();
    let mut recent_wait: std::collections::VecDeque<Vec<Option<u64>>> = Default::default();
    let mut last = None;
    let outcome = (|| -> Result<(), RuntimeError> {
        let first = first_step(store, d, me, total, &mut *backend.state()?, &record)?;
        let ckpt_store = match &d.checkpoint {
            Some(_) => ckpt_client.take().map(|c| Arc::new(Mutex::new(c))),
            None => None,
        };
        let mut writer = Writer::new(d.checkpoint.as_ref().is_some_and(|c| c.asynchronous));
        for step in first..total {
            backend.set_global_step(step);
            let start_ns = store.agree_start(
                &format!("step{step}"),
                rank,
                env.world,
                &clock,
                super::STEP_START_MARGIN,
            )?;
            backend.start_at(start_ns);
            let run = run_step(plan, schedule, rank, &mut backend)?;
            record(Event::Step {
                t_ns: unix_ns(),
                step,
            });
            // Back onto the aligned clock, so ranks compare.
            let origin = backend.step_origin_ns();
            let lo = run.events.iter().map(|e| e.start_ns).min().unwrap_or(0);
            let hi = run.events.iter().map(|e| e.end_ns).max().unwrap_or(lo);
            spans.push([origin + lo, origin + hi]);
            if recent.len() == super::measure::KEPT_STEPS {
                recent.pop_front();
                recent_issued.pop_front();
                recent_wait.pop_front();
            }
            recent.push_back(
                run.events
                    .iter()
                    .map(|e| [origin + e.start_ns, origin + e.end_ns])
                    .collect::<Vec<_>>(),
            );
            recent_issued.push_back(
                run.events
                    .iter()
                    .map(|e| e.issued_ns.map(|t| origin + t))
                    .collect::<Vec<_>>(),
            );
            recent_wait.push_back(run.events.iter().map(|e| e.wait_ns).collect::<Vec<_>>());
            last = Some((run, origin));
            let state = backend.state()?;
            checkpoint_if_due(
                &mut writer,
                d,
                &ckpt_store,
                me,
                step,
                total,
                &*state,
                &events,
            )?;
        }
        writer.wait()?;
        // Nothing heavier than waiting until every rank has finished its last step: a rank
        // that went on to digest its state and report while another still ran would take
        // that rank's core (ranks share cores on the host), and the last measured step ran
        // 25-40% slower than the others on the 4-rank scenarios.
        store.barrier("end", rank, env.world)
    })();
    if let Err(e) = outcome {
        session.publish_failure(&e);
        return Err(e);
    }
    let (run, origin) = last.ok_or_else(|| RuntimeError::Aborted("no step ran".into()))?;
    let mut peak = backend.last_peak();
    peak.peak_time_ns += origin;
    let measure = RankMeasure {
        rank,
        op_times_ns: recent.back().cloned().unwrap_or_default(),
        recent_op_times_ns: recent.into(),
        op_issued_ns: recent_issued.back().cloned().unwrap_or_default(),
        recent_op_issued_ns: recent_issued.into(),
        op_wait_ns: recent_wait.back().cloned().unwrap_or_default(),
        recent_op_wait_ns: recent_wait.into(),
        step_spans_ns: spans,
        peak,
        clock_offset_ns: session.clock_offset_ns,
        clock_residual_ns: session.clock_residual_ns,
        rss_peak_bytes: rss_peak_bytes(),
        workspace_bytes: run.device_memory.workspace_bytes,
        final_weights_digest: Some(format!("{:016x}", backend.state()?.digest()?)),
        notes: run.device_memory.notes.clone(),
    };
    session.finish(&measure)
}

/// Who this rank's checkpoint files belong to: its rank and world, and a fingerprint of the
/// planned schedule and the seed (a checkpoint of another scenario is never loaded).
pub(crate) fn identity(rank: u32, world: u32, schedule_sum: u64, seed: u64) -> Header {
    Header {
        rank,
        world,
        fingerprint: checksum(&[schedule_sum.to_le_bytes(), seed.to_le_bytes()].concat()),
        step: 0,
        payload_bytes: 0,
    }
}

/// The global step a worker starts at: after the checkpoint every rank restores into `state`
/// when resuming, else 0 (recorded as loaded either way). Refuses a run with no step left.
pub(crate) fn first_step(
    store: &mut StoreClient,
    d: &Durability,
    me: Header,
    total: u64,
    state: &mut dyn StateBuffers,
    record: &dyn Fn(Event),
) -> Result<u64, RuntimeError> {
    let first = match &d.checkpoint {
        Some(c) if c.resume => restore(store, &c.dir, me, state, record)?,
        _ => {
            record(Event::Loaded {
                t_ns: unix_ns(),
                step: 0,
                read_s: 0.0,
                bytes: 0,
                rejected: Vec::new(),
            });
            0
        }
    };
    if first >= total {
        return Err(RuntimeError::Unsupported(format!(
            "the checkpoint restored has {first} steps done, --steps {total} asks for no more"
        )));
    }
    Ok(first)
}

/// After global step `step` of `total`: write checkpoint `step + 1` of `state` when one is
/// due (`store` is the connection the checkpoint's completion travels over).
#[allow(clippy::too_many_arguments)]
pub(crate) fn checkpoint_if_due(
    writer: &mut Writer,
    d: &Durability,
    store: &Option<Arc<Mutex<StoreClient>>>,
    me: Header,
    step: u64,
    total: u64,
    state: &dyn StateBuffers,
    events: &Option<Arc<EventLog>>,
) -> Result<(), RuntimeError> {
    if let (Some(c), Some(cs)) = (&d.checkpoint, store) {
        if c.due(step + 1, total) {
            let h = Header {
                step: step + 1,
                ..me
            };
            save(writer, state, c, h, Arc::clone(cs), events.clone())?;
        }
    }
    Ok(())
}

/// Restore the newest checkpoint that every rank can read and verify, or none (start from
/// scratch). Each round, every rank publishes the newest step it verified below the last
/// round's agreement; all read the same values and make the same decision. Returns the
/// number of steps the restored state has done.
fn restore(
    store: &mut StoreClient,
    root: &std::path::Path,
    me: Header,
    state: &mut dyn StateBuffers,
    record: &dyn Fn(Event),
) -> Result<u64, RuntimeError> {
    let started = Instant::now();
    let mut below = u64::MAX;
    let mut rejected = Vec::new();
    for round in 0u32.. {
        let (found, why) = checkpoint::load_newest(root, me, below);
        rejected.extend(why);
        let mine = found.as_ref().map_or(0, |(s, _)| *s);
        store.set(&format!("resume/{round}/{}", me.rank), &mine.to_le_bytes())?;
        let mut all = Vec::with_capacity(me.world as usize);
        for r in 0..me.world {
            all.push(le_u64(&store.get(&format!("resume/{round}/{r}"))?));
        }
        let agreed = all.iter().copied().min().unwrap_or(0);
        if agreed == 0 || all.iter().all(|&s| s == agreed) {
            let mut bytes = 0;
            if let (Some((_, payload)), true) = (found, agreed > 0) {
                bytes = payload.len() as u64;
                checkpoint::state::restore(state, &payload)?;
            }
            record(Event::Loaded {
                t_ns: unix_ns(),
                step: agreed,
                read_s: started.elapsed().as_secs_f64(),
                bytes,
                rejected,
            });
            return Ok(agreed);
        }
        below = agreed + 1;
    }
    Err(RuntimeError::Aborted("no checkpoint agreement".into()))
}

/// Snapshot the model state and write it as this rank's file of checkpoint `h.step` (now, or
/// in the background); rank 0 then waits for every rank's file and writes the manifest.
fn save(
    writer: &mut Writer,
    state: &dyn StateBuffers,
    c: &CheckpointOptions,
    h: Header,
    store: Arc<Mutex<StoreClient>>,
    events: Option<Arc<EventLog>>,
) -> Result<(), RuntimeError> {
    let started = Instant::now();
    let payload = checkpoint::state::snapshot(state)?;
    let snapshot_s = started.elapsed().as_secs_f64();
    let root = c.dir.clone();
    let asynchronous = c.asynchronous;
    writer.submit(Box::new(move || {
        let h = Header {
            payload_bytes: payload.len() as u64,
            ..h
        };
        let bytes = dir::write_rank(&root, &h, &payload)?;
        let write_s = started.elapsed().as_secs_f64();
        let mut st = store
            .lock()
            .map_err(|_| RuntimeError::Aborted("checkpoint store poisoned".into()))?;
        st.set(&format!("ckpt/{}/{}", h.step, h.rank), &[])?;
        if h.rank == 0 {
            for r in 0..h.world {
                st.get(&format!("ckpt/{}/{r}", h.step))?;
            }
            dir::mark_complete(&root, h.step, h.world, h.fingerprint)?;
        }
        if let Some(ev) = &events {
            ev.record(&Event::Checkpoint {
                t_ns: unix_ns(),
                step: h.step,
                write_s,
                stall_s: if asynchronous {
                    snapshot_s
                } else {
                    started.elapsed().as_secs_f64()
                },
                bytes,
            });
        }
        Ok(())
    }))
}
