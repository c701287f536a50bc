//! The discrete-event engine: executes a [`Schedule`] for every rank over a [`CostModel`] and
//! measures what happened (step time, busy/exposed/idle time, FLOPs, memory, an optional
//! trace). It implements exactly the ordering rules of the IR (see `schedule::ir`): FIFO
//! streams, explicit deps, p2p rendezvous by (sender, receiver, tag), collectives that start
//! when every member of the concrete group has arrived, instant alloc/free.
//!
//! Layout for speed: programs are compiled once per role ([`compile`]); per-rank state is one
//! 192-byte cache-aligned record (stream cursors, which also tell which ops are done since
//! streams run in order; a waiting-streams mask; time accounting); the queue is a 4-ary heap;
//! a waiting stream head is re-checked only when the dep it waits for completes; and the hot
//! loop allocates nothing per event. Collective rendezvous is keyed by (concrete group,
//! per-rank sequence number on that group); p2p mailboxes live on the receiving rank and hold
//! at most a few entries (one per blocked stream); a p2p transfer is one heap entry.
//!
//! The CPU host model (`crate::host_model`: shared cores, turns, wake-ups, caches,
//! interruptions) is one `Option` in the run's state, `None` unless the cost model switches a
//! part of it on (a host profile); a GPU scenario never calls it.

mod collapse;
mod compile;
mod context;
#[cfg(test)]
mod cpu_tests;
mod deadlock;
mod flow;
#[cfg(test)]
mod flow_tests;
#[cfg(test)]
mod host_issue_tests;
mod memo;
mod memory;
#[cfg(test)]
mod memory_share_tests;
#[cfg(test)]
mod proptests;
mod queue;
#[cfg(test)]
mod residency_tests;
mod run;
#[cfg(test)]
pub(crate) mod testkit;
#[cfg(test)]
mod tests;

pub(crate) use crate::limits::TRACE_BYTES_PER_EVENT;
pub use crate::outcome::{RankStats, SimResult};
pub use deadlock::{BlockedHead, BlockedRank, Deadlock};

use crate::cost::CostModel;
use crate::plan::{GroupKind, Plan};
use crate::schedule::{Program, Schedule};
use crate::topology::Network;

/// How to run a simulation.
#[derive(Clone, Debug, PartialEq)]
pub struct SimOptions {
    /// Record a [`crate::trace::Trace`] (one event per op and memory samples).
    pub trace: bool,
    /// With `trace`: the ranks whose ops and memory the trace records (ascending); `None`:
    /// every simulated rank. A listed rank that the run does not simulate (a collapsed run
    /// simulates representatives only) records nothing.
    pub trace_ranks: Option<Vec<u32>>,
    /// Upper bound on processed events (completions of the ops the engine runs), checked
    /// against the simulated ranks' op count before the run starts
    /// ([`SimError::WorkTooLarge`]).
    pub max_events: u64,
    /// Upper bound on the bytes of a recorded trace's Chrome JSON, estimated before the run
    /// starts at `limits::TRACE_BYTES_PER_EVENT` per traced op ([`SimError::TraceTooLarge`]).
    pub max_trace_bytes: u64,
    /// Device memory per rank (the GPU's HBM): the engine notes the first alloc at which live
    /// memory exceeds it ([`RankStats::over_capacity_op`]). `u64::MAX`: no limit.
    pub memory_capacity_bytes: u64,
    /// Simulate representative ranks (one per pipeline stage; with the flow network, the
    /// widest collapse `engine::flow::symmetry` proves exact) when that gives exactly the full
    /// result (see `engine::collapse`); otherwise every rank is simulated regardless.
    /// [`SimResult::collapsed`] tells which happened.
    pub collapse: bool,
    /// Draw interruptions of compute (the cost model's [`CostModel::interruptions`]) from this
    /// seed; `None`: every op takes its undisturbed time. Ranks are then no longer symmetric,
    /// so a run with interruptions simulates every rank.
    pub jitter_seed: Option<u64>,
    /// Scale every compute op's duration by its own lognormal draw of mean 1 (`[variability]
    /// step_jitter_cv`); `None`: every op takes its priced time. Ranks are then no longer
    /// symmetric, so such a run simulates every rank.
    pub op_jitter: Option<OpJitter>,
    /// Per-rank factors on every compute op's priced time (a GPU's speed under
    /// `[variability]`: 1.25 takes a quarter longer), indexed by rank; `None`: 1 everywhere.
    /// Ranks are then no longer symmetric, so such a run simulates every rank.
    pub compute_factors: Option<std::sync::Arc<[f64]>>,
    /// Replay each simulated rank's memory timeline after the step (`false`: every memory
    /// figure of the result is zero; a variability sample needs only the ranks' times).
    pub memory: bool,
}

/// Per-op noise on compute: each compute op's duration is multiplied by a lognormal draw of
/// mean 1 and coefficient of variation `cv`, drawn for each (rank, op) from `seed`, so the same
/// run draws the same noise whatever order the engine processes its events in.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OpJitter {
    pub seed: u64,
    pub cv: f64,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            trace: false,
            trace_ranks: None,
            max_events: crate::limits::SIMULATED_EVENTS,
            max_trace_bytes: crate::limits::TRACE_BYTES,
            memory_capacity_bytes: u64::MAX,
            collapse: false,
            jitter_seed: None,
            op_jitter: None,
            compute_factors: None,
            memory: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    #[error("the schedule has programs for {schedule} ranks but the plan has {plan}")]
    WorldMismatch { schedule: u32, plan: u32 },
    #[error("rank {rank} runs program {program}, but the schedule has only {programs} programs")]
    NoSuchProgram {
        rank: u32,
        program: u32,
        programs: u32,
    },
    #[error("program {program} has {ops} ops; the engine handles fewer than 2^32 - 2")]
    ProgramTooLarge { program: u32, ops: u64 },
    #[error("program {program} op {op} depends on op {dep}, which is not an earlier op")]
    BadDependency { program: u32, op: u32, dep: u32 },
    #[error("program {program} op {op} frees tag {tag}, which has no earlier unfreed alloc")]
    UnmatchedFree { program: u32, op: u32, tag: u32 },
    #[error("program {program} op {op} allocates tag {tag}, which is never freed in the step")]
    UnfreedAlloc { program: u32, op: u32, tag: u32 },
    #[error(
        "rank {rank} op {op} ({name}) frees memory whose alloc (op {alloc}) has not run yet: \
         live memory would go negative"
    )]
    FreeBeforeAlloc {
        rank: u32,
        op: u32,
        alloc: u32,
        name: String,
    },
    #[error(
        "send from rank {src} to rank {dst} with tag {tag} carries {send_bytes} bytes but the \
         matching receive expects {recv_bytes}"
    )]
    P2pMismatch {
        src: u32,
        dst: u32,
        tag: u32,
        send_bytes: u64,
        recv_bytes: u64,
    },
    #[error(
        "collective #{seq} on {kind:?} group {group}: rank {rank} issued op {op} ({name}) but \
         rank {first_rank} issued {first_name}"
    )]
    CollectiveMismatch {
        kind: GroupKind,
        group: u32,
        seq: u32,
        rank: u32,
        op: u32,
        name: String,
        first_rank: u32,
        first_name: String,
    },
    #[error("{0}")]
    Deadlock(Box<Deadlock>),
    #[error("the simulation exceeded its bound of {limit} events")]
    TooManyEvents { limit: u64 },
    /// Found before anything runs: the simulated ranks' programs hold more ops than
    /// [`SimOptions::max_events`] (or a check that runs every rank would process more).
    #[error(
        "the step would process {events} op events on {ranks} simulated rank(s), over the \
         limit of {limit} (about 10 s of simulation); the work grows with the ranks simulated \
         (cluster.gpus and parallel.tp/cp/ep/dp; without --full or a --trace-ranks beyond \
         one rank per stage, symmetric ranks collapse to one per pipeline stage) and with each rank's ops \
         (training.global_batch / (micro_batch * dp) micro batches, model.layers at \
         run.granularity); simulate fewer GPUs or fewer micro batches, or use \
         run.granularity = \"chunk\""
    )]
    WorkTooLarge { events: u64, ranks: u32, limit: u64 },
    /// Found before anything runs: a trace of the traced ranks would exceed
    /// [`SimOptions::max_trace_bytes`].
    #[error(
        "a trace of {ranks} rank(s) would hold {events} op events, about {estimate_bytes} \
         bytes of JSON ({}), over the limit of {limit_bytes} bytes ({}); trace fewer ranks \
         (twin simulate --trace-ranks 0-63, or --trace alone: one rank per pipeline stage), \
         or simulate fewer GPUs or micro batches",
        crate::schedule::fmt_bytes(*estimate_bytes),
        crate::schedule::fmt_bytes(*limit_bytes)
    )]
    TraceTooLarge {
        events: u64,
        ranks: u32,
        estimate_bytes: u64,
        limit_bytes: u64,
    },
}

/// Run one step of `schedule` on every rank of `plan`, with durations from `cost`.
pub fn simulate(
    plan: &Plan,
    schedule: &Schedule,
    cost: &dyn CostModel,
    opts: &SimOptions,
) -> Result<SimResult, SimError> {
    simulate_on(plan, schedule, cost, None, opts)
}

/// Programs compiled one by one as they are generated, for [`simulate_compiled`]: a sweep
/// compiles each stage's program right after generating it, while its ops are still in
/// cache, and builds the next program in the same op vector, instead of generating the
/// whole schedule first. Only for cost models that price compute the same on every rank
/// (compiling prices compute once per program then; otherwise the engine needs the IR).
pub struct Compiled {
    progs: Vec<compile::CProgram>,
    probe: Vec<u32>,
}

impl Compiled {
    /// For a schedule of `programs` programs whose ranks run `program_of`; `None` when
    /// `cost` prices compute per rank or `program_of` does not fit `plan` (the caller then
    /// generates the schedule and calls [`simulate_on`], which says what is wrong).
    pub fn new(
        plan: &Plan,
        program_of: &[u32],
        programs: usize,
        cost: &dyn CostModel,
    ) -> Option<Compiled> {
        if !cost.compute_is_rank_invariant() {
            return None;
        }
        let probe = context::probe_ranks(plan, program_of, programs).ok()?;
        Some(Compiled {
            progs: Vec::with_capacity(programs),
            probe,
        })
    }

    /// Compiles the next program (they come in order).
    pub fn add(&mut self, program: &Program, cost: &dyn CostModel) -> Result<(), SimError> {
        let index = self.progs.len();
        let programs = self.probe.len() as u32;
        let Some(&rank) = self.probe.get(index) else {
            return Err(SimError::NoSuchProgram {
                rank: 0,
                program: index as u32,
                programs,
            });
        };
        self.progs
            .push(compile::compile(index as u32, program, cost, rank)?);
        Ok(())
    }
}

impl Drop for Compiled {
    /// Unused programs' buffers go back to this thread's spares.
    fn drop(&mut self) {
        compile::recycle(std::mem::take(&mut self.progs));
    }
}

/// [`simulate_on`] for programs compiled already: `schedule` gives the rank-to-program map
/// (its `programs` may be empty: errors then name ops by index only). Gives exactly
/// [`simulate_on`]'s result for the schedule the programs were compiled from.
pub fn simulate_compiled(
    plan: &Plan,
    schedule: &Schedule,
    mut compiled: Compiled,
    cost: &dyn CostModel,
    network: Option<&Network>,
    opts: &SimOptions,
) -> Result<SimResult, SimError> {
    let progs = std::mem::take(&mut compiled.progs);
    let ctx = run::Ctx::with_programs(plan, schedule, progs, cost, network, opts)?;
    run::run(&ctx)
}

/// [`simulate`] with transfers as flows over `network` (max-min shared links) when given;
/// `None` prices each transfer alone with the cost model (alpha-beta).
pub fn simulate_on(
    plan: &Plan,
    schedule: &Schedule,
    cost: &dyn CostModel,
    network: Option<&Network>,
    opts: &SimOptions,
) -> Result<SimResult, SimError> {
    let ctx = run::Ctx::new(plan, schedule, cost, network, opts)?;
    run::run(&ctx)
}
