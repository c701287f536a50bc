//! The host backend: runs a rank's program for real on the CPU and over TCP. `enqueue` only
//! records ops; `finish_step` runs them on one long-lived thread per stream (`streams`), so
//! ops on different streams overlap for real while each stream stays FIFO; an op starts when its deps are done,
//! and p2p / collective rendezvous happens on the wire (a receive blocks until the peer
//! sends). Times are taken on the cluster-aligned clock. The first failure stops every
//! stream (sockets are shut down) and is returned naming the op.
//!
//! `run_op` (one match arm per op kind) is the backend's contract in one place; the stream
//! threads, compute, memory, model state and faults are their own files.

pub mod alloc;
mod compute;
mod data;
pub mod fault;
mod lineup;
mod memory;
pub mod pack;
pub mod priority;
pub mod state;
mod step;
mod streams;
pub mod turns;

pub use compute::Workspace;
pub use data::p2p_payload;
pub use fault::{Fault, FaultKind};
pub use memory::{fresh, Held, HeldPeak};
pub use state::ModelState;

use crate::backend::{Allocation, Backend, MemoryReport, OpContext, OpTiming};
use crate::error::RuntimeError;
use crate::launch::events::EventLog;
use crate::launch::inject::KillPoint;
use crate::launch::progress::Progress;
use crate::transport::collective::{self, Ring};
use crate::transport::mesh::{lane_of, Mesh};
use crate::transport::store::Clock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use step::StepState;
use twin_sim::plan::{Plan, RankId};
use twin_sim::scenario::Precision;
use twin_sim::schedule::{CollectiveKind, ComputeOp, Op, OpKind, Phase, Program, Stream};

/// Set from outside (another rank failed) to stop this rank's step.
#[derive(Default)]
pub struct AbortSignal {
    flag: AtomicBool,
    reason: Mutex<Option<String>>,
}

impl AbortSignal {
    pub fn raise(&self, reason: String) {
        if let Ok(mut r) = self.reason.lock() {
            r.get_or_insert(reason);
        }
        self.flag.store(true, Ordering::SeqCst);
    }
    pub fn raised(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }
    pub fn reason(&self) -> Option<String> {
        self.reason.lock().ok().and_then(|r| r.clone())
    }
}

struct Queued {
    index: u32,
    op: Op,
    peer: Option<RankId>,
    members: Vec<RankId>,
    freed: Option<Allocation>,
}

pub struct HostBackend {
    shared: Arc<Shared>,
    /// Steps run so far (faults fire in the first).
    steps: u32,
    /// The global step (counted across restarts) the next step runs.
    global_step: u64,
    queued: Vec<Queued>,
    last_peak: HeldPeak,
    /// When the last step began, on the aligned clock; timings are relative to it.
    step_origin_ns: u64,
    /// When the next step's stream threads start, on the aligned clock (`start_at`).
    start_at_ns: Option<u64>,
    streams: streams::Streams,
}

/// What the rank's stream threads share for the whole run.
struct Shared {
    mesh: Arc<Mesh>,
    clock: Clock,
    abort: Arc<AbortSignal>,
    fault: Option<Fault>,
    workspace: OnceLock<Mutex<Workspace>>,
    held: Mutex<Held>,
    /// The rank's weights and optimizer state, kept across steps.
    state: Mutex<ModelState>,
    /// Injected kills of this rank, and where to say that one fires.
    kills: Vec<KillPoint>,
    events: Option<Arc<EventLog>>,
    /// Transfer payloads and expected results, built once (see `data`).
    data: data::DataCache,
    /// This rank's core's turns, when ranks share cores (see `turns`).
    turns: Option<turns::CoreTurns>,
    progress: Option<Progress>,
}

/// One step, as every stream thread sees it.
struct Job {
    shared: Arc<Shared>,
    queued: Vec<Queued>,
    /// Each stream's ops, as indices into `queued`.
    by_stream: Vec<Vec<usize>>,
    st: StepState,
    /// Per stream: the ticket taken for its next compute op (`lineup`).
    lines: Vec<Mutex<lineup::Line>>,
    /// Per stream: a position in `by_stream` before which every op is done (`lineup`).
    scan_from: Vec<std::sync::atomic::AtomicUsize>,
    start_at_ns: Option<u64>,
    /// Whether this is the backend's first step (injected faults fire in it).
    first_step: bool,
    global_step: u64,
}

impl HostBackend {
    pub fn new(
        mesh: Arc<Mesh>,
        clock: Clock,
        abort: Arc<AbortSignal>,
        fault: Option<Fault>,
    ) -> HostBackend {
        HostBackend {
            shared: Arc::new(Shared {
                mesh,
                clock,
                abort,
                fault,
                workspace: OnceLock::new(),
                held: Mutex::new(Held::default()),
                state: Mutex::new(ModelState::new(0, 0)),
                kills: Vec::new(),
                events: None,
                data: data::DataCache::default(),
                turns: None,
                progress: None,
            }),
            steps: 0,
            global_step: 0,
            queued: Vec::new(),
            last_peak: HeldPeak::default(),
            step_origin_ns: 0,
            start_at_ns: None,
            streams: streams::Streams::default(),
        }
    }

    /// Change what the stream threads share. Between steps the backend holds the only
    /// reference to it (a stream thread lets go of a step before it replies), so the builders
    /// below, called before the first step, always apply.
    fn configure(mut self, f: impl FnOnce(&mut Shared)) -> HostBackend {
        match Arc::get_mut(&mut self.shared) {
            Some(shared) => f(shared),
            None => debug_assert!(false, "a host backend configured while a step runs"),
        }
        self
    }

    /// Take turns with the other ranks bound to this rank's core (see `turns`).
    pub fn with_turns(self, turns: Option<turns::CoreTurns>) -> HostBackend {
        self.configure(|s| s.turns = turns)
    }

    /// Seed the model state (a fresh state of this rank, from the scenario seed).
    pub fn with_seed(self, seed: u64) -> HostBackend {
        self.configure(|s| s.state = Mutex::new(ModelState::new(seed, s.mesh.rank)))
    }

    /// Kill this process (SIGKILL) at these points, recording each in `events` first.
    pub fn with_kills(self, kills: Vec<KillPoint>, events: Option<Arc<EventLog>>) -> Self {
        self.configure(|s| {
            let rank = s.mesh.rank;
            s.kills = kills.into_iter().filter(|k| k.rank == rank).collect();
            s.events = events;
        })
    }

    /// The global step the next step runs (the optimizer update and kills depend on it).
    pub fn set_global_step(&mut self, step: u64) {
        self.global_step = step;
    }

    /// The model state (to checkpoint, restore or digest it between steps).
    pub fn state(&self) -> Result<std::sync::MutexGuard<'_, ModelState>, RuntimeError> {
        self.shared.state()
    }

    /// When the last step began on the aligned (rank 0) clock: add it to the step's timings
    /// to compare them across ranks.
    pub fn step_origin_ns(&self) -> u64 {
        self.step_origin_ns
    }

    /// Start the next step's stream threads at `t_ns` on the aligned clock: each sleeps until
    /// then after it gets the step. Every rank's setup (queueing the ops, handing them to the
    /// threads) is then done before the step starts, and ranks that share a core start
    /// together. When the main thread waited for the start instead, the first rank on a core
    /// ran its setup and its first ops before the second got the core: on `dp-pp-zero.toml`
    /// (two ranks per core) ranks 2 and 3 started 1.4-1.7 ms after ranks 0 and 1 in every step.
    pub fn start_at(&mut self, t_ns: u64) {
        self.start_at_ns = Some(t_ns);
    }

    /// Record each op's start and end in a progress file (see [`crate::launch::progress`]).
    pub fn with_progress(self, progress: Option<Progress>) -> HostBackend {
        self.configure(|s| s.progress = progress)
    }

    /// A backend for a one-rank world (no peers), on a fresh clock.
    pub fn single() -> HostBackend {
        HostBackend::new(
            Arc::new(Mesh::single()),
            Clock::new(),
            Arc::new(AbortSignal::default()),
            None,
        )
    }

    /// Memory actually held during the last step.
    pub fn last_peak(&self) -> HeldPeak {
        self.last_peak
    }

    /// The queued ops, as one step for the stream threads.
    fn job(&mut self) -> Job {
        let n = self
            .queued
            .iter()
            .map(|q| q.index as usize + 1)
            .max()
            .unwrap_or(0);
        let queued = std::mem::take(&mut self.queued);
        let mut by_stream: Vec<Vec<usize>> = vec![Vec::new(); Stream::COUNT];
        for (i, q) in queued.iter().enumerate() {
            if let Some(s) = by_stream.get_mut(q.op.stream.index()) {
                s.push(i);
            }
        }
        Job {
            shared: Arc::clone(&self.shared),
            queued,
            by_stream,
            st: StepState::new(n),
            lines: (0..Stream::COUNT)
                .map(|_| Mutex::new(lineup::Line::new()))
                .collect(),
            scan_from: (0..Stream::COUNT)
                .map(|_| std::sync::atomic::AtomicUsize::new(0))
                .collect(),
            start_at_ns: self.start_at_ns.take(),
            first_step: self.steps == 0,
            global_step: self.global_step,
        }
    }
}

impl Shared {
    fn state(&self) -> Result<std::sync::MutexGuard<'_, ModelState>, RuntimeError> {
        self.state
            .lock()
            .map_err(|_| RuntimeError::Aborted("model state poisoned".into()))
    }
}

impl Job {
    fn fault_at(&self, index: u32) -> Option<FaultKind> {
        let s = &self.shared;
        s.fault
            .filter(|f| self.first_step && f.rank == s.mesh.rank && f.op == index)
            .map(|f| f.kind)
    }

    /// Carry out an injected kill due at op `index` of this step, if any.
    fn kill_if_due(&self, index: u32) {
        let s = &self.shared;
        crate::launch::inject::kill_if_due(&s.kills, self.global_step, index, s.events.as_deref());
    }

    /// The rank's compute workspace, locked (prepared before the first op).
    fn workspace(&self) -> Result<std::sync::MutexGuard<'_, compute::Workspace>, RuntimeError> {
        self.shared
            .workspace
            .get()
            .ok_or_else(|| RuntimeError::Unsupported("compute before prepare".into()))?
            .lock()
            .map_err(|_| RuntimeError::Aborted("compute workspace poisoned".into()))
    }

    /// The optimizer's update of the model state, `op` giving its planned memory traffic: the
    /// state update is part of it, and a scratch pass moves the rest, so the op does the
    /// planned work, not more.
    fn update_state(
        &self,
        ws: &mut compute::Workspace,
        mut op: ComputeOp,
    ) -> Result<(), RuntimeError> {
        let mut state = self.shared.state()?;
        op.memory_bytes = op.memory_bytes.saturating_sub(state.update_bytes());
        ws.run(&op);
        state.apply_optimizer(self.global_step);
        Ok(())
    }

    /// Run one op; returns its (start, end) on the aligned clock.
    fn run_op(&self, q: &Queued) -> Result<(u64, u64), RuntimeError> {
        self.kill_if_due(q.index);
        let fault = self.fault_at(q.index);
        if let Some(k) = fault {
            fault::trigger(k);
        }
        let corrupt = fault == Some(FaultKind::Corrupt);
        let lane = lane_of(q.op.stream);
        let me = self.shared.mesh.rank;
        let no_peer = || RuntimeError::Unsupported("p2p op without a resolved peer".into());
        match &q.op.kind {
            OpKind::Compute(c) => {
                let mut ws = self.workspace()?;
                let start = self.shared.clock.now_ns();
                if c.phase == Phase::Optimizer {
                    self.update_state(&mut ws, c.clone())?;
                } else {
                    ws.run(c);
                }
                Ok((start, self.shared.clock.now_ns()))
            }
            OpKind::HostUpdate { bytes } => {
                // Model state lives in host memory here already: the offloaded update is the
                // same real update as the optimizer op's, on the Io stream's thread.
                let mut ws = self.workspace()?;
                let start = self.shared.clock.now_ns();
                let op = ComputeOp {
                    phase: Phase::Optimizer,
                    dtype: Precision::Fp32,
                    gemms: Vec::new().into(),
                    attention: None,
                    flops: 0,
                    memory_bytes: *bytes,
                    kernels: 1,
                    sms_reserved: 0,
                    host_syncs: Default::default(),
                };
                self.update_state(&mut ws, op)?;
                Ok((start, self.shared.clock.now_ns()))
            }
            OpKind::HostCopy { bytes, .. } => {
                // Device and host memory are one memory here: the copy is a memory copy of
                // its bytes.
                let start = self.shared.clock.now_ns();
                copy_bytes(*bytes);
                Ok((start, self.shared.clock.now_ns()))
            }
            OpKind::Send { bytes, tag, .. } => {
                let peer = q.peer.ok_or_else(no_peer)?;
                let payload = self.shared.data.p2p(me, *tag, *bytes)?;
                let start = self.shared.clock.now_ns();
                self.shared.mesh.send_summed(
                    peer,
                    lane,
                    p2p_wire_tag(*tag),
                    &payload.bytes,
                    Some(payload.wire_sum),
                    corrupt,
                )?;
                Ok((start, self.shared.clock.now_ns()))
            }
            OpKind::Recv { bytes, tag, .. } => {
                let peer = q.peer.ok_or_else(no_peer)?;
                // The transfer starts when the sender's first bytes arrive (the IR's
                // rendezvous); waiting for them before is idle time, not communication.
                let issued = self.shared.clock.now_ns();
                let (got, arrived) =
                    self.shared
                        .mesh
                        .recv(peer, lane, p2p_wire_tag(*tag), *bytes)?;
                // The check of what arrived is the op's work too (the calibration times it
                // with the transfer): it ends after it.
                if got != self.shared.data.p2p(peer, *tag, *bytes)?.bytes {
                    return Err(RuntimeError::WrongResult(format!(
                        "the {bytes} bytes received from rank {peer} (tag {tag}) differ from what it sent"
                    )));
                }
                let end = self.shared.clock.now_ns();
                let start = self.shared.clock.at_ns(arrived).clamp(issued, end);
                Ok((start, end))
            }
            OpKind::Collective {
                kind, bytes, calls, ..
            } => self.collective(*kind, &q.members, lane, *bytes, *calls, corrupt),
            OpKind::Alloc {
                category,
                device,
                bytes,
                tag,
            } => {
                let start = self.shared.clock.now_ns();
                let a = Allocation {
                    tag: *tag,
                    category: *category,
                    device: *device,
                    bytes: *bytes,
                };
                let bad = |message| RuntimeError::Schedule { rank: me, message };
                let mut held = self
                    .shared
                    .held
                    .lock()
                    .map_err(|_| RuntimeError::Aborted("memory poisoned".into()))?;
                if state::is_state(*category, *device) {
                    // Model state: its real buffer persists across steps.
                    self.shared
                        .state()?
                        .ensure(*tag, *category, *device, *bytes)
                        .map_err(bad)?;
                    held.account(a, q.index, start).map_err(bad)?;
                } else {
                    held.alloc(a, q.index, start).map_err(bad)?;
                }
                Ok((start, self.shared.clock.now_ns()))
            }
            OpKind::Free { tag } => {
                let start = self.shared.clock.now_ns();
                let tag = q.freed.map_or(*tag, |a| a.tag);
                self.shared
                    .held
                    .lock()
                    .map_err(|_| RuntimeError::Aborted("memory poisoned".into()))?
                    .free(tag)
                    .map_err(|m| RuntimeError::Schedule {
                        rank: me,
                        message: m,
                    })?;
                Ok((start, self.shared.clock.now_ns()))
            }
            OpKind::Checkpoint { bytes } => {
                let start = self.shared.clock.now_ns();
                write_checkpoint(me, *bytes)?;
                Ok((start, self.shared.clock.now_ns()))
            }
        }
    }

    fn collective(
        &self,
        kind: CollectiveKind,
        members: &[RankId],
        lane: u8,
        bytes: u64,
        calls: u32,
        corrupt: bool,
    ) -> Result<(u64, u64), RuntimeError> {
        let mut rings = Vec::with_capacity(calls as usize);
        let mut data = Vec::with_capacity(calls as usize);
        let arrived = std::cell::Cell::new(None);
        for c in 0..calls.max(1) {
            let mut ring = Ring::new(
                &self.shared.mesh,
                members,
                lane,
                collective_tag(kind, bytes, c),
            )?;
            ring.corrupt = corrupt;
            ring.arrived = Some(&arrived);
            data.push(self.shared.data.call(kind, &ring, bytes, c)?);
            rings.push(ring);
        }
        let mut works: Vec<_> = data.iter().map(|d| d.take_work()).collect();
        let issued = self.shared.clock.now_ns();
        for ((ring, d), work) in rings.iter().zip(&data).zip(&mut works) {
            collective::execute_into(kind, ring, &d.input, work)?;
        }
        // The check of the result is the op's work too, before the op is done and its
        // dependents released (a 1.8 MiB all-gather's memcmp takes 60-140 µs here). Outside
        // the span it was an idle hole in the trace after every large collective, which the
        // model had no price for; the calibration times collectives with their check
        // (`bench::comm`), so the span and the price cover the same work.
        for ((ring, work), d) in rings.iter().zip(works).zip(&data) {
            collective::check(kind, ring, work.output(), &d.expected)?;
            d.keep_work(work);
        }
        let end = self.shared.clock.now_ns();
        // As for a receive: the collective starts when the first neighbour's data arrives
        // (for two members, when both have joined); a member that receives nothing (the
        // broadcast root) started when it issued.
        let start = arrived
            .get()
            .map_or(issued, |a| self.shared.clock.at_ns(a))
            .clamp(issued, end);
        Ok((start, end))
    }
}

/// Write `bytes` to a real file (in `TWIN_CHECKPOINT_DIR`, else the temp dir), flush it to
/// storage, and remove it: the I/O a checkpoint of this rank's state costs.
/// Copy `bytes` from one buffer to another, a MiB at a time, through this thread's pair of
/// buffers (allocated and touched once, so a copy pays for copying only).
fn copy_bytes(bytes: u64) {
    const CHUNK: usize = 1 << 20;
    thread_local! {
        static BUFFERS: std::cell::RefCell<(Vec<u8>, Vec<u8>)> =
            std::cell::RefCell::new((vec![0x5au8; CHUNK], vec![0u8; CHUNK]));
    }
    BUFFERS.with(|b| {
        let Ok(mut b) = b.try_borrow_mut() else {
            return;
        };
        let (src, dst) = &mut *b;
        let mut left = bytes;
        while left > 0 {
            let n = usize::try_from(left).unwrap_or(CHUNK).min(CHUNK);
            if let (Some(d), Some(s)) = (dst.get_mut(..n), src.get(..n)) {
                d.copy_from_slice(s);
            }
            std::hint::black_box(&*dst);
            left -= n as u64;
        }
    });
}

fn write_checkpoint(rank: RankId, bytes: u64) -> Result<(), RuntimeError> {
    use std::io::Write;
    let dir = std::env::var_os("TWIN_CHECKPOINT_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let path = dir.join(format!("twin-ckpt-{}-rank{rank}.bin", std::process::id()));
    let io = |e: std::io::Error| {
        RuntimeError::Unsupported(format!("checkpoint write to {}: {e}", path.display()))
    };
    let chunk = vec![0x5au8; 1 << 20];
    let mut f = std::fs::File::create(&path).map_err(io)?;
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(chunk.get(..n).unwrap_or_default())
            .map_err(io)?;
        left -= n as u64;
    }
    f.sync_data().map_err(io)?;
    drop(f);
    std::fs::remove_file(&path).map_err(io)
}

/// Wire tag of a p2p message: the IR tag in a namespace of its own.
fn p2p_wire_tag(tag: u32) -> u64 {
    (1u64 << 62) | u64::from(tag)
}

/// Wire tag of call `call` of a collective: kind, call and size, so members running
/// different ops on one lane are caught.
fn collective_tag(kind: CollectiveKind, bytes: u64, call: u32) -> u64 {
    ((kind as u64) << 56) | ((u64::from(call) & 0xff) << 40) | (bytes & 0xff_ffff_ffff)
}

impl Backend for HostBackend {
    fn name(&self) -> &'static str {
        "host"
    }

    fn prepare(
        &mut self,
        _plan: &Plan,
        _rank: RankId,
        program: &Program,
    ) -> Result<(), RuntimeError> {
        self.shared
            .workspace
            .get_or_init(|| Mutex::new(Workspace::for_program(program)));
        self.queued.clear();
        if let Ok(mut h) = self.shared.held.lock() {
            h.reset();
        }
        Ok(())
    }

    fn enqueue(&mut self, index: u32, op: &Op, ctx: &OpContext) -> Result<(), RuntimeError> {
        self.queued.push(Queued {
            index,
            op: op.clone(),
            peer: ctx.peer.map(|p| p.rank),
            members: ctx.group.map(|g| g.members.clone()).unwrap_or_default(),
            freed: ctx.freed,
        });
        Ok(())
    }

    fn finish_step(&mut self) -> Result<Vec<OpTiming>, RuntimeError> {
        let job = Arc::new(self.job());
        let origin = self.shared.clock.now_ns().max(job.start_at_ns.unwrap_or(0));
        let timings = self.streams.run(&job);
        if let Some(e) = job.st.error.lock().ok().and_then(|mut e| e.take()) {
            return Err(e);
        }
        if timings.len() != job.queued.len() {
            return Err(RuntimeError::Aborted(
                self.shared
                    .abort
                    .reason()
                    .unwrap_or_else(|| "a stream thread stopped early".into()),
            ));
        }
        drop(job);
        self.last_peak = self.shared.held.lock().map(|h| h.peak).unwrap_or_default();
        self.last_peak.peak_time_ns = self.last_peak.peak_time_ns.saturating_sub(origin);
        self.steps += 1;
        self.step_origin_ns = origin;
        Ok(timings
            .into_iter()
            .map(|t| OpTiming {
                index: t.index,
                start_ns: t.start_ns.saturating_sub(origin),
                end_ns: t.end_ns.saturating_sub(origin),
                issued_ns: t.issued_ns.map(|i| i.saturating_sub(origin)),
                wait_ns: t.wait_ns,
            })
            .collect())
    }

    fn memory(&self) -> MemoryReport {
        MemoryReport {
            workspace_bytes: self
                .shared
                .workspace
                .get()
                .and_then(|w| w.lock().ok().map(|w| w.bytes()))
                .unwrap_or(0),
            allocator_peak_bytes: Some(self.last_peak.peak_bytes),
            notes: vec![
                "host backend: every Alloc is a Vec<u8> with its pages touched; GEMMs in f32"
                    .into(),
            ],
            ..MemoryReport::default()
        }
    }
}

#[cfg(test)]
mod tests;
