//! One rank's life in a host run: serve the store (rank 0), check that every rank planned the
//! same schedule, align clocks, connect the mesh, run the steps (a barrier before each), and
//! hand the measurements to rank 0, which returns all of them. A failure is published to the
//! store so that every other rank stops at once instead of waiting for a timeout.

use super::env::RankEnv;
use super::measure::RankMeasure;
use super::progress::Progress;
use crate::backend::host::{AbortSignal, Fault, HostBackend};
use crate::error::RuntimeError;
use crate::exec::run_step;
use crate::transport::frame::checksum;
use crate::transport::mesh::Mesh;
use crate::transport::store::{Clock, StoreClient, StoreServer};
use std::sync::Arc;
use std::time::Duration;
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
}

/// Set once per run: empty by rank 0 when every result is in, or to the first failure.
const END_KEY: &str = "end";
const CLOCK_ROUNDS: u32 = 32;

/// Run this rank. Rank 0 returns every rank's measurement (indexed by rank); others `None`.
pub fn run_worker(
    env: &RankEnv,
    plan: &Plan,
    schedule: &Schedule,
    opts: &WorkerOptions,
) -> Result<Option<Vec<RankMeasure>>, RuntimeError> {
    let rank = env.rank;
    if env.world != plan.world {
        return Err(RuntimeError::Env {
            var: "WORLD_SIZE",
            message: format!(
                "is {} but the scenario plans {} ranks (tp*pp*dp*cp)",
                env.world, plan.world
            ),
        });
    }
    let mut clock = Clock::new();
    let server = match rank {
        0 => Some(StoreServer::start(
            &env.master_addr,
            env.master_port,
            clock,
        )?),
        _ => None,
    };
    let mut store = StoreClient::connect(&env.master_addr, env.master_port, opts.timeout)?;
    store.set_timeout(Some(opts.timeout));
    check_same_schedule(&mut store, rank, env.world, schedule)?;
    let (offset, residual) = store.clock_offset(&clock, CLOCK_ROUNDS)?;
    clock.offset_ns = offset;
    let mesh = Arc::new(Mesh::connect(&mut store, rank, env.world, opts.timeout)?);
    let abort = Arc::new(AbortSignal::default());
    watch_for_abort(env, opts.timeout, Arc::clone(&abort), Arc::clone(&mesh))?;
    let mut backend = HostBackend::new(Arc::clone(&mesh), clock, Arc::clone(&abort), opts.fault)
        .with_progress(Progress::from_env(rank));
    let mut spans = Vec::new();
    let mut last = None;
    for step in 0..opts.steps.max(1) {
        let outcome = store
            .barrier(&format!("step{step}"), rank, env.world)
            .and_then(|()| run_step(plan, schedule, rank, &mut backend));
        match outcome {
            Ok(run) => {
                // Back onto the aligned clock, so ranks compare.
                let origin = backend.step_origin_ns();
                let lo = run.events.iter().map(|e| e.start_ns).min().unwrap_or(0);
                let hi = run.events.iter().map(|e| e.end_ns).max().unwrap_or(lo);
                spans.push([origin + lo, origin + hi]);
                last = Some((run, origin));
            }
            Err(e) => {
                let _ = store.set(END_KEY, format!("rank {rank} failed: {e}").as_bytes());
                return Err(e);
            }
        }
    }
    let (run, origin) = last.ok_or_else(|| RuntimeError::Aborted("no step ran".into()))?;
    let mut peak = backend.last_peak();
    peak.peak_time_ns += origin;
    let measure = RankMeasure {
        rank,
        op_times_ns: run
            .events
            .iter()
            .map(|e| [origin + e.start_ns, origin + e.end_ns])
            .collect(),
        step_spans_ns: spans,
        peak,
        clock_offset_ns: offset,
        clock_residual_ns: residual,
        rss_peak_bytes: rss_peak_bytes(),
        workspace_bytes: run.device_memory.workspace_bytes,
    };
    let json = serde_json::to_vec(&measure)
        .map_err(|e| RuntimeError::Rendezvous(format!("cannot encode results: {e}")))?;
    store.set(&format!("result/{rank}"), &json)?;
    if rank != 0 {
        return Ok(None);
    }
    let mut all = Vec::with_capacity(env.world as usize);
    for r in 0..env.world {
        let bytes = store.get(&format!("result/{r}"))?;
        let m: RankMeasure = serde_json::from_slice(&bytes)
            .map_err(|e| RuntimeError::Rendezvous(format!("results of rank {r}: {e}")))?;
        all.push(m);
    }
    // Release every rank's abort watcher, then stay until the other ranks have had the
    // replies to their last requests and left (rank 0's own main connection remains).
    store.set(END_KEY, &[])?;
    if let Some(server) = &server {
        server.wait_for_clients(1, opts.timeout);
    }
    Ok(Some(all))
}

/// Every rank must run the same schedule (same scenario, overrides and scale).
fn check_same_schedule(
    store: &mut StoreClient,
    rank: u32,
    world: u32,
    schedule: &Schedule,
) -> Result<(), RuntimeError> {
    let encoded = serde_json::to_vec(schedule)
        .map_err(|e| RuntimeError::Rendezvous(format!("cannot encode the schedule: {e}")))?;
    let mine = checksum(&encoded).to_le_bytes();
    store.set(&format!("schedule/{rank}"), &mine)?;
    let theirs = store.get("schedule/0")?;
    if theirs != mine {
        return Err(RuntimeError::Rendezvous(format!(
            "rank {rank} of {world} planned a different schedule than rank 0: start every rank with the same scenario, --set and --scale"
        )));
    }
    Ok(())
}

/// A thread that waits for another rank's failure (or for the store to vanish) and stops
/// this rank's step by closing its sockets.
fn watch_for_abort(
    env: &RankEnv,
    timeout: Duration,
    abort: Arc<AbortSignal>,
    mesh: Arc<Mesh>,
) -> Result<(), RuntimeError> {
    let mut watcher = StoreClient::connect(&env.master_addr, env.master_port, timeout)?;
    watcher.set_timeout(None);
    std::thread::Builder::new()
        .name("twin-abort-watch".into())
        .spawn(move || {
            let reason = match watcher.get(END_KEY) {
                // The run ended normally.
                Ok(r) if r.is_empty() => return,
                Ok(r) => String::from_utf8_lossy(&r).into_owned(),
                Err(e) => format!("lost the store: {e}"),
            };
            abort.raise(reason);
            mesh.shutdown_all();
        })
        .map_err(|e| RuntimeError::Rendezvous(format!("abort watcher: {e}")))?;
    Ok(())
}

/// VmHWM of this process, from /proc (Linux); `None` elsewhere.
pub fn rss_peak_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
