//! The part of a rank's life that every backend's worker shares: serve the store (rank 0),
//! check that every rank planned the same schedule, align the clock to rank 0's, watch for
//! another rank's failure, and at the end hand this rank's measurement to rank 0, which
//! returns all of them. The host worker (`worker`) and the CUDA worker
//! (`backend::cuda::worker`) differ only in what runs between `open` and `finish`.

use super::env::RankEnv;
use super::measure::RankMeasure;
use crate::error::RuntimeError;
use crate::transport::frame::checksum;
use crate::transport::store::{Clock, StoreClient, StoreServer};
use std::time::Duration;
use twin_sim::plan::Plan;
use twin_sim::schedule::Schedule;

/// Set once per run: empty by rank 0 when every result is in, or to the first failure.
const END_KEY: &str = "end";
const CLOCK_ROUNDS: u32 = 32;

/// A bootstrapped rank: its store connection and aligned clock.
pub struct Session {
    pub rank: u32,
    pub world: u32,
    pub store: StoreClient,
    /// This process's clock, aligned to rank 0's.
    pub clock: Clock,
    pub clock_offset_ns: i64,
    /// Half the best ping-pong round trip: how far the alignment can be off.
    pub clock_residual_ns: u64,
    /// Checksum of the schedule every rank agreed on.
    pub schedule_sum: u64,
    pub timeout: Duration,
    master_addr: String,
    master_port: u16,
    server: Option<StoreServer>,
}

impl Session {
    /// Bootstrap this rank of `env` for `schedule` (rank 0 starts the store first).
    pub fn open(
        env: &RankEnv,
        plan: &Plan,
        schedule: &Schedule,
        timeout: Duration,
    ) -> Result<Session, RuntimeError> {
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
        let mut store = StoreClient::connect(&env.master_addr, env.master_port, timeout)?;
        store.set_timeout(Some(timeout));
        let schedule_sum = check_same_schedule(&mut store, rank, env.world, schedule)?;
        let (offset, residual) = store.clock_offset(&clock, CLOCK_ROUNDS)?;
        clock.offset_ns = offset;
        Ok(Session {
            rank,
            world: env.world,
            store,
            clock,
            clock_offset_ns: offset,
            clock_residual_ns: residual,
            schedule_sum,
            timeout,
            master_addr: env.master_addr.clone(),
            master_port: env.master_port,
            server,
        })
    }

    /// Another connection to the store (for a thread of this rank), with the session timeout.
    pub fn connect(&self) -> Result<StoreClient, RuntimeError> {
        let c = StoreClient::connect(&self.master_addr, self.master_port, self.timeout)?;
        c.set_timeout(Some(self.timeout));
        Ok(c)
    }

    /// Start a thread that calls `on_failure` with the reason when another rank publishes a
    /// failure (or the store vanishes), and returns quietly when the run ends normally.
    pub fn watch_for_failure(
        &self,
        on_failure: impl FnOnce(String) + Send + 'static,
    ) -> Result<(), RuntimeError> {
        let mut watcher = StoreClient::connect(&self.master_addr, self.master_port, self.timeout)?;
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
                on_failure(reason);
            })
            .map_err(|e| RuntimeError::Rendezvous(format!("abort watcher: {e}")))?;
        Ok(())
    }

    /// Tell every other rank that this one failed, so they stop now instead of timing out.
    pub fn publish_failure(&mut self, e: &RuntimeError) {
        let _ = self.store.set(
            END_KEY,
            format!("rank {} failed: {e}", self.rank).as_bytes(),
        );
    }

    /// Hand `measure` to rank 0. Rank 0 returns every rank's measurement (indexed by rank)
    /// after the others have had their replies; other ranks return `None`.
    pub fn finish(
        mut self,
        measure: &RankMeasure,
    ) -> Result<Option<Vec<RankMeasure>>, RuntimeError> {
        let json = serde_json::to_vec(measure)
            .map_err(|e| RuntimeError::Rendezvous(format!("cannot encode results: {e}")))?;
        self.store.set(&format!("result/{}", self.rank), &json)?;
        if self.rank != 0 {
            return Ok(None);
        }
        let mut all = Vec::with_capacity(self.world as usize);
        for r in 0..self.world {
            let bytes = self.store.get(&format!("result/{r}"))?;
            let m: RankMeasure = serde_json::from_slice(&bytes)
                .map_err(|e| RuntimeError::Rendezvous(format!("results of rank {r}: {e}")))?;
            all.push(m);
        }
        // Release every rank's abort watcher, then stay until the other ranks have had the
        // replies to their last requests and left (rank 0's own main connection remains).
        self.store.set(END_KEY, &[])?;
        if let Some(server) = &self.server {
            server.wait_for_clients(1, self.timeout);
        }
        Ok(Some(all))
    }
}

/// Every rank must run the same schedule (same scenario, overrides and scale). Returns the
/// schedule's checksum.
fn check_same_schedule(
    store: &mut StoreClient,
    rank: u32,
    world: u32,
    schedule: &Schedule,
) -> Result<u64, RuntimeError> {
    let encoded = serde_json::to_vec(schedule)
        .map_err(|e| RuntimeError::Rendezvous(format!("cannot encode the schedule: {e}")))?;
    let sum = checksum(&encoded);
    let mine = sum.to_le_bytes();
    store.set(&format!("schedule/{rank}"), &mine)?;
    let theirs = store.get("schedule/0")?;
    if theirs != mine {
        return Err(RuntimeError::Rendezvous(format!(
            "rank {rank} of {world} planned a different schedule than rank 0: start every rank with the same scenario, --set and --scale"
        )));
    }
    Ok(sum)
}

/// VmHWM of this process, from /proc (Linux); `None` elsewhere.
pub fn rss_peak_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
