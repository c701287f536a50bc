//! The engine's state machine: per-rank state in flat arrays, the event loop, and what
//! happens when an op becomes ready, arrives at a rendezvous, and completes.
//!
//! An op is *ready* when it heads its stream, its stream is not running anything, and every
//! dep is done. Only stream heads can be ready, so a rank keeps a bitmask of streams whose
//! head has not started, and after each completion re-checks just those heads. Compute and
//! checkpoint ops finish after their cost; p2p and collectives first wait for their
//! counterparts, then run; ops of no duration finish at once (through the `instant` FIFO, so
//! there is no recursion and no heap traffic for them). Allocs and frees the cost model does
//! not price are no ops here at all (`compile` hands their waits on to the ops after them):
//! the memory timeline is replayed from the ops' ends after the step (`run/timeline.rs`).
//!
//! A little longer than the ~600-line guide on purpose: the event loop and its per-op handlers
//! share the hot state and are read together. The cold parts live in `compile`, `context`,
//! `deadlock`, `flow`, `memo` and `memory`; the transfers' rendezvous in `run/transfers.rs`,
//! the calls into the CPU host model in `run/cores.rs`, the memory replay in
//! `run/timeline.rs`, and building the state and reading the result out in `run/setup.rs`.

mod cores;
mod setup;
mod timeline;
mod transfers;

use cores::thread_weight;

use super::compile::{CKind, CProgram, DepAt, GROUP_KINDS, NOT_RECORDED};
pub(crate) use super::context::Ctx;
use super::flow::{Finished, Flows, FLOW_TAG};
use super::memo::{CollectiveMemo, P2pMemo};
use super::memory::RankMem;
use super::queue::EventQueue;
use super::{deadlock, RankStats, SimError, SimResult};
use crate::host_model::HostRun;
use crate::schedule::{CollectiveKind, OpKind, Stream};
use crate::trace::{Trace, TraceEvent};
use std::collections::VecDeque;

/// Marks an event payload as "collective (group, seq) finished" instead of "(rank, op)
/// finished". Ranks and group ids stay far below 2^29 (the plan caps the world at 2^20), so
/// the tags below never collide with a plain payload.
const COLL_BIT: u32 = 1 << 31;
/// Marks an event payload as "transfer of send (rank, op) finished": the send and its
/// matched receive (recorded in the sender's stream state) complete together, so one heap
/// entry serves both sides.
const P2P_BIT: u32 = 1 << 30;
/// Marks an event payload as "the hand-off to stream `b` of rank `a & !HANDOFF_BIT` is over":
/// its head, released by another stream's op, starts now (see `handoff_ns`).
const HANDOFF_BIT: u32 = 1 << 29;
/// Marks a [`HANDOFF_BIT`] event's stream (`b`) as "the compute op heading it was handed its
/// core's turn": it begins when the hand-off is over (see `State::pass_turn`).
const TURN_PASSED: u32 = 1 << 16;
/// The least weight compute work gets against a transfer on a shared core (see
/// `State::compute_weight`).
const MIN_COMPUTE_WEIGHT: f64 = 1e-3;
/// `StreamState::blocked_on` of a head released by another stream's op, waiting out the
/// hand-off (see `handoff_ns`).
pub(crate) const HANDED_OFF: u32 = u32::MAX - 2;
pub(crate) const STREAMS: usize = Stream::COUNT;
/// Heads with more deps than this remember where their dep scan stopped (`State::dep_scan`).
const SCAN_FROM_DEPS: usize = 16;
/// What the event loop's handlers return: the error boxed, so that the common `Ok` travels in
/// a register instead of through a result slot the size of [`SimError`] on every call.
type Step = Result<(), Box<SimError>>;
/// `StreamState::blocked_on` of a head that has not been checked yet.
pub(crate) const UNCHECKED: u32 = u32::MAX;
/// `StreamState::blocked_on` of a head that has started (running, or waiting at a
/// rendezvous). Programs have fewer ops than this (checked when compiling).
pub(crate) const STARTED: u32 = u32::MAX - 1;

/// One stream of one rank: 16 bytes, so a rank's nine streams take 144 bytes.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct StreamState {
    /// When the head started running (transfer start for communication).
    pub start_ns: u64,
    /// Position of the head op in the program's `ops` (which are in stream order); the stream
    /// is exhausted at `stream_start[s + 1]`.
    pub cursor: u32,
    /// [`STARTED`], [`UNCHECKED`], or the dep the head was last found waiting for. Done bits
    /// only ever get set, so a waiting head needs re-checking only when that dep completes.
    pub blocked_on: u32,
}

/// The hot state of one rank, in one place so that handling an event touches few cache lines:
/// 256 bytes (232 used), the streams in the first two and a quarter lines and the rest after
/// them (with eight streams it fit three; docs/journal/2026-11-30-sweep-defaults-ring-stream.md
/// has the benchmark pairs).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(64))]
pub(crate) struct RankState {
    pub streams: [StreamState; STREAMS],
    acct: Acct,
    /// Where the rank's host stands since its last synchronisation ([`host_issued_ns`]).
    host: HostClock,
    /// Per stream, the streams whose head waits for an op of it (`StreamState::blocked_on`):
    /// what an op's end may release, so that it looks at those heads alone.
    woken_by: [u16; STREAMS],
    /// Ops not yet completed.
    pub remaining: u32,
    /// Where this rank's record slots ([`super::compile::COp::record`]) start in
    /// [`State::ends`].
    record_base: u32,
    /// Streams whose head exists and has not started.
    waiting: u16,
}

/// Time accounting of one rank.
#[derive(Clone, Copy, Debug, Default)]
struct Acct {
    last_ns: u64,
    compute_ns: u64,
    comm_ns: u64,
    idle_ns: u64,
    running_compute: u32,
    running_comm: u32,
    finish_ns: u64,
}

impl Acct {
    #[inline]
    fn flush(&mut self, now: u64) {
        let dt = now - self.last_ns;
        if self.running_compute > 0 {
            self.compute_ns += dt;
        } else if self.running_comm > 0 {
            self.comm_ns += dt;
        } else {
            self.idle_ns += dt;
        }
        self.last_ns = now;
    }
}

/// A p2p op waiting for its counterpart; stored with the receiving rank.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pending {
    pub src: u32,
    pub tag: u32,
    /// A send (issued by `src`) or a receive (issued by the rank holding the mailbox).
    pub send: bool,
    /// Index of the op in its issuing rank's program.
    pub op: u32,
    pub bytes: u64,
}

/// A p2p mailbox: its first two entries in place.
pub(crate) type Mailbox = smallvec::SmallVec<[Pending; 2]>;
/// The collectives under way on one group: the first in place.
pub(crate) type Arrivals = smallvec::SmallVec<[Inst; 1]>;

/// A collective some members of a group have reached.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Inst {
    pub seq: u32,
    pub arrived: u32,
    pub first_rank: u32,
    pub first_op: u32,
    kind: CollectiveKind,
    bytes: u64,
    calls: u32,
}

/// How a run finds a rank's entry in its per-rank state: a full run indexes by rank, a
/// collapsed one by slot ([`Ctx::slot`]). A type parameter of [`State`], so that the full run
/// (millions of events at 16,384 GPUs) pays no lookup.
pub(crate) trait Slots {
    fn slot(ctx: &Ctx, rank: u32) -> usize;
}

/// Every rank is simulated: the slot is the rank.
pub(crate) struct ByRank;

impl Slots for ByRank {
    #[inline(always)]
    fn slot(_ctx: &Ctx, rank: u32) -> usize {
        rank as usize
    }
}

/// Collapsed: the representative's position in [`Ctx::active`].
pub(crate) struct BySlot;

impl Slots for BySlot {
    #[inline(always)]
    fn slot(ctx: &Ctx, rank: u32) -> usize {
        ctx.slot(rank)
    }
}

/// The run's mutable state. Per-rank vectors are indexed by slot ([`Ctx::slot`], found
/// through `S`): one entry per simulated rank.
pub(crate) struct State<S: Slots> {
    pub now: u64,
    events: u64,
    pub ranks: Vec<RankState>,
    /// For a running send on (slot, stream): the matched receive (rank, op).
    partner: Vec<(u32, u32)>,
    /// The ends of the ops whose ends the memory replay reads, by each rank's record slots
    /// from its `record_base`.
    ends: Vec<u64>,
    /// Each simulated rank's memory timeline, replayed after the step ([`timeline`]).
    mem: Vec<RankMem>,
    /// P2p mailboxes, by the receiving rank's slot. A mailbox holds its first entries in
    /// place, so that finding a counterpart reads one cache line, not a vector's header and
    /// then its items.
    pub pending: Vec<Mailbox>,
    /// Collectives under way, by (group kind, slot of the group's first simulated member):
    /// that pair names one concrete group.
    /// Like the mailboxes, with the first entry in place.
    pub rendezvous: Vec<Arrivals>,
    queue: EventQueue,
    instant: VecDeque<(u32, u32)>,
    trace: Option<Trace>,
    /// Per slot, whether the trace records the rank (`SimOptions::trace_ranks`); `None`:
    /// every slot is traced.
    traced: Option<Vec<bool>>,
    /// When each (slot, stream)'s head was issued (its deps done, its stream free), for the
    /// trace's `issued_ns`; kept only when tracing, out of the hot [`StreamState`].
    issued_ns: Option<Vec<u64>>,
    /// Per (slot, stream), for a head with more than [`SCAN_FROM_DEPS`] deps: its cursor and
    /// how many of its leading deps were already found done. Done bits only grow, so a head
    /// waiting on thousands of deps (an optimizer after every gradient bucket) resumes its
    /// scan there instead of rescanning from its first dep on every wake-up.
    dep_scan: Vec<(u32, u32)>,
    /// Flow state, when transfers or compute share resources (see `engine::flow`).
    flows: Option<Flows>,
    /// Durations of recent collectives and transfers (see [`CollectiveMemo`]).
    coll_memo: CollectiveMemo,
    p2p_memo: P2pMemo,
    /// What a `Free` takes (the cost model's `free_ns`; the engine runs no free when it is
    /// zero).
    free_ns: u64,
    /// The share of a shared core the compute thread's work takes against a transfer's (the
    /// cost model's `compute_weight`; see `thread_weight`).
    compute_weight: f64,
    /// The share of a p2p's time its ends work on their cores (the cost model's
    /// `p2p_cpu_share`; see `State::run_transfer`).
    p2p_cpu_share: f64,
    /// The CPU host model (see `host_model::run`): `None` for every GPU profile, whose runs
    /// never call into it.
    host: Option<HostRun>,
    /// Per-op compute noise ([`super::OpJitter`]), when asked for.
    op_noise: Option<OpNoise>,
    /// Whether the event loop prefetches the next event's rank state ([`State::prefetch`]):
    /// when per-op noise or per-rank compute factors draw the ranks' times apart, events
    /// visit ranks in random order and their state is rarely cached; without them the ranks
    /// of one instant come in order and the hardware prefetches them itself.
    prefetch: bool,
    slots: std::marker::PhantomData<S>,
}

impl<S: Slots> State<S> {
    /// Whether `op` of the rank in `slot` (running `prog`) has finished.
    #[inline]
    pub fn is_done(&self, prog: &CProgram, slot: usize, op: u32) -> bool {
        let o = &prog.ops[op as usize];
        op < self.ranks[slot].streams[o.stream as usize].cursor
    }

    #[inline]
    fn schedule(&mut self, dur_ns: u64, a: u32, b: u32) {
        if dur_ns == 0 {
            self.instant.push_back((a, b));
        } else {
            self.queue.push(self.now.saturating_add(dur_ns), a, b);
        }
    }

    fn dispatch(&mut self, ctx: &Ctx, a: u32, b: u32) -> Step {
        if a & FLOW_TAG == FLOW_TAG {
            let Some(f) = &mut self.flows else {
                return Ok(());
            };
            match f.finish(self.now, (a & !FLOW_TAG, b), &mut self.queue) {
                Finished::Nothing => Ok(()),
                Finished::Compute { rank, op, own_ns } => {
                    if let (Some(own), Some(sh)) = (own_ns, self.share_mut()) {
                        // A memory-bound op: what of its span was its own is known only now.
                        let s = ctx.prog(rank as usize).ops[op as usize].stream as usize;
                        sh.started(S::slot(ctx, rank), s, Some(own));
                    }
                    self.complete(ctx, rank, op)
                }
                Finished::Transfer { done, latency_ns } => {
                    self.schedule(latency_ns, done.0, done.1);
                    Ok(())
                }
            }
        } else if a & COLL_BIT != 0 {
            self.collective_done(ctx, a & !COLL_BIT, b)
        } else if a & HANDOFF_BIT != 0 {
            let rank = a & !HANDOFF_BIT;
            let r = S::slot(ctx, rank);
            if b & TURN_PASSED != 0 {
                self.begin_compute(ctx, rank, r, (b & !TURN_PASSED) as usize);
                return Ok(());
            }
            let s = b as usize;
            self.ranks[r].streams[s].blocked_on = UNCHECKED;
            self.try_start(ctx, rank, r, s)
        } else if a & P2P_BIT != 0 {
            let src = a & !P2P_BIT;
            let s = ctx.prog(src as usize).ops[b as usize].stream as usize;
            let (dst, recv_op) = self.partner[S::slot(ctx, src) * STREAMS + s];
            self.complete(ctx, src, b)?;
            self.complete(ctx, dst, recv_op)
        } else {
            self.complete(ctx, a, b)
        }
    }

    /// Start every waiting head of `rank` (in `slot`) that may have become ready because
    /// `completed` finished (or that was never checked).
    #[inline]
    fn try_start_heads(
        &mut self,
        ctx: &Ctx,
        rank: u32,
        slot: usize,
        (completed, stream): (u32, usize),
    ) -> Step {
        let r = slot;
        // Every waiting head at the start; after an op on `stream` ends, its stream's next head
        // and the heads waiting for an op of that stream.
        let mut mask = match self.ranks[r].woken_by.get(stream) {
            Some(&w) => self.ranks[r].waiting & (w | 1u16 << stream),
            None => self.ranks[r].waiting,
        };
        // The stream of `completed`, when heads it releases on other streams wait out a
        // hand-off (host profiles: another thread of the rank runs them).
        let handoff_ns = self.handoff_ns();
        let from_stream = if handoff_ns == 0 { usize::MAX } else { stream };
        while mask != 0 {
            let s = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            let b = self.ranks[r].streams[s].blocked_on;
            if b == completed {
                if let Some(w) = self.ranks[r].woken_by.get_mut(stream) {
                    *w &= !(1u16 << s);
                }
            }
            if b == completed && from_stream != usize::MAX && s != from_stream {
                self.ranks[r].streams[s].blocked_on = HANDED_OFF;
                self.queue.push(
                    self.now.saturating_add(handoff_ns),
                    HANDOFF_BIT | rank,
                    s as u32,
                );
            } else if b == UNCHECKED || b == completed {
                self.try_start(ctx, rank, r, s)?;
            }
        }
        Ok(())
    }

    /// Runs the compute op heading stream `s` of `rank` (in `slot`) from now: its stream was
    /// taken when it became ready, and, on shared cores, it now holds its core.
    fn begin_compute(&mut self, ctx: &Ctx, rank: u32, slot: usize, s: usize) {
        let r = slot;
        let prog = ctx.prog(rank as usize);
        let op_idx = self.ranks[r].streams[s].cursor;
        let op = &prog.ops[op_idx as usize];
        let now = self.now;
        self.ranks[r].streams[s].start_ns = now;
        let price_ns = match op.cached_ns() {
            Some(ns) => ns,
            None => compute_ns_uncached(ctx, rank, op.index),
        };
        let dur = match self.host {
            Some(_) => self.host_compute_ns(ctx, rank, op.index, price_ns),
            None => price_ns,
        };
        let dur = match ctx.opts.compute_factors.as_deref() {
            Some(f) => scaled_ns(dur, f.get(rank as usize).copied().unwrap_or(1.0)),
            None => dur,
        };
        let dur = match &self.op_noise {
            Some(n) => n.scale(dur, rank, op.index),
            None => dur,
        };
        let dur = match op.kind {
            CKind::Compute {
                kernels,
                issued_before,
                syncs,
                sync_tail,
                ..
            } => {
                let issue = Issue {
                    kernels,
                    issued_before,
                    syncs,
                    sync_tail,
                };
                let clock = self.ranks[r].host;
                let (dur, after) = host_issued_ns(now, dur, issue, clock, ctx.cost.host_issue_ns());
                if let Some(c) = after {
                    self.ranks[r].host = c;
                }
                dur
            }
            _ => dur,
        };
        let rs = &mut self.ranks[r];
        let a = &mut rs.acct;
        a.flush(now);
        a.running_compute += 1;
        let communicating = a.running_comm > 0;
        self.core_activity(ctx, rank, true);
        // A compute op without GEMMs streams memory: where the profile says how much of that
        // the machine serves at once, it shares the node's memory with the others running.
        let memory_bound = matches!(op.kind, CKind::Compute { flops: 0, .. })
            && self.flows.as_ref().is_some_and(|f| f.shares_memory());
        if let Some(sh) = self.share_mut() {
            // Its time beyond `dur` may be the memory's, which is work and not waiting for the
            // core: not counted as waiting.
            sh.started(r, s, (!memory_bound).then_some(dur));
        }
        match &mut self.flows {
            Some(f) if f.compute && dur > 0 => {
                let cpu = f.cpu_of(ctx.plan, rank);
                f.start_compute(
                    now,
                    (rank, op_idx, (r * STREAMS + s) as u32),
                    (cpu, thread_weight(s, self.compute_weight)),
                    (dur, memory_bound),
                    communicating,
                )
            }
            _ => self.schedule(dur, rank, op_idx),
        }
    }

    /// The head of stream `s` of the rank in slot `r` waits for op `slot` of stream `on`.
    #[inline]
    fn block(&mut self, r: usize, s: usize, slot: u32, on: usize) {
        let rs = &mut self.ranks[r];
        rs.streams[s].blocked_on = slot;
        if let Some(w) = rs.woken_by.get_mut(on) {
            *w |= 1u16 << s;
        }
    }

    /// For a head with more than [`SCAN_FROM_DEPS`] deps: whether one is not done yet,
    /// scanning from where its last scan stopped (`State::dep_scan`); records where it
    /// stopped and what it waits on.
    #[cold]
    fn blocked_in_scan(&mut self, r: usize, s: usize, op_idx: u32, deps: &[DepAt]) -> bool {
        let scan = r * STREAMS + s;
        let skip = match self.dep_scan.get(scan) {
            Some(&(cursor, done)) if cursor == op_idx => done,
            _ => 0,
        };
        let streams = &self.ranks[r].streams;
        let Some((k, d)) = deps.iter().enumerate().skip(skip as usize).find(|(_, d)| {
            streams
                .get(d.stream as usize)
                .is_none_or(|st| d.slot >= st.cursor)
        }) else {
            return false;
        };
        let (blocked_on, on) = (d.slot, d.stream as usize);
        self.block(r, s, blocked_on, on);
        if let Some(e) = self.dep_scan.get_mut(scan) {
            *e = (op_idx, k as u32);
        }
        true
    }

    fn try_start(&mut self, ctx: &Ctx, rank: u32, slot: usize, s: usize) -> Step {
        let r = slot;
        let prog = ctx.prog(rank as usize);
        let streams = &self.ranks[r].streams;
        let op_idx = streams[s].cursor;
        let op = &prog.ops[op_idx as usize];
        let deps = prog.dep_at_of(op);
        let waiting = |d: &DepAt| {
            streams
                .get(d.stream as usize)
                .is_none_or(|st| d.slot >= st.cursor)
        };
        if deps.len() <= SCAN_FROM_DEPS {
            if let Some(d) = deps.iter().find(|d| waiting(d)) {
                let (blocked_on, on) = (d.slot, d.stream as usize);
                self.block(r, s, blocked_on, on);
                return Ok(());
            }
        } else if self.blocked_in_scan(r, s, op_idx, deps) {
            return Ok(());
        }
        let now = self.now;
        if let Some(t) = self
            .issued_ns
            .as_mut()
            .and_then(|v| v.get_mut(r * STREAMS + s))
        {
            *t = now;
        }
        let rs = &mut self.ranks[r];
        debug_assert!(rs.streams[s].blocked_on != STARTED);
        rs.waiting &= !(1u16 << s);
        rs.streams[s].blocked_on = STARTED;
        rs.streams[s].start_ns = now;
        match op.kind {
            CKind::Compute { .. } => {
                if self.host.as_ref().is_some_and(|h| h.turns.is_some()) {
                    let core = self.core_of(ctx, rank);
                    if let Some(t) = self.host.as_mut().and_then(|h| h.turns.as_mut()) {
                        if !t.claim(core, (rank, r as u32, s as u8)) {
                            return Ok(());
                        }
                    }
                }
                self.begin_compute(ctx, rank, r, s);
            }
            CKind::Io { busy, .. } => {
                let a = &mut rs.acct;
                a.flush(self.now);
                if busy {
                    a.running_compute += 1;
                } else {
                    a.running_comm += 1;
                }
                let dur = op.cached_ns().unwrap_or(0);
                if let Some(sh) = self.share_mut() {
                    sh.started(r, s, Some(dur));
                }
                self.schedule(dur, rank, op_idx);
            }
            // An alloc takes the cost model's time (zero unless a host profile prices it),
            // counted as neither compute nor communication, as the runtime measures it.
            // On shared cores it is the work of its stream's thread (see `thread_weight`).
            CKind::Alloc { .. } => {
                let w = thread_weight(s, self.compute_weight);
                self.run_cpu_work(
                    ctx,
                    (rank, op_idx),
                    &[rank],
                    (op.cached_ns().unwrap_or(0), 0),
                    w,
                )
            }
            // Priced like an allocation: the runtime's own work for the op (a free the cost
            // model does not price is no op of the engine's: `compile`).
            CKind::Free => {
                let w = thread_weight(s, self.compute_weight);
                self.run_cpu_work(ctx, (rank, op_idx), &[rank], (self.free_ns, 0), w)
            }
            CKind::P2p {
                send,
                peer,
                tag,
                bytes,
            } => self.p2p_arrive(ctx, rank, op_idx, send, peer, tag, bytes)?,
            CKind::Collective {
                group_kind,
                seq,
                kind,
                bytes,
                calls,
            } => {
                let inst = Inst {
                    seq,
                    arrived: 1,
                    first_rank: rank,
                    first_op: op_idx,
                    kind,
                    bytes,
                    calls,
                };
                self.collective_arrive(ctx, group_kind as usize, inst)?
            }
        }
        Ok(())
    }

    fn complete(&mut self, ctx: &Ctx, rank: u32, op_idx: u32) -> Step {
        self.events += 1;
        if self.events > ctx.opts.max_events {
            return Err(Box::new(SimError::TooManyEvents {
                limit: ctx.opts.max_events,
            }));
        }
        let r = S::slot(ctx, rank);
        let prog = ctx.prog(rank as usize);
        let op = &prog.ops[op_idx as usize];
        let now = self.now;
        let s = op.stream as usize;
        let rs = &mut self.ranks[r];
        rs.remaining -= 1;
        let start_ns = rs.streams[s].start_ns;
        {
            let st = &mut rs.streams[s];
            debug_assert!(st.blocked_on == STARTED && st.cursor == op_idx);
            st.blocked_on = UNCHECKED;
            st.cursor += 1;
            if st.cursor < prog.stream_start[s + 1] {
                rs.waiting |= 1u16 << s;
            }
        }
        let a = &mut rs.acct;
        a.finish_ns = now;
        let mut flops = 0;
        match op.kind {
            CKind::Compute { flops: f, .. } => {
                flops = f;
                a.flush(now);
                debug_assert!(a.running_compute > 0);
                a.running_compute -= 1;
                if let Some(sh) = self.share_mut() {
                    sh.finished(r, s, now - start_ns, false);
                }
                self.core_activity(ctx, rank, false);
                self.pass_turn(ctx, rank);
            }
            CKind::Io { busy: true, .. } => {
                if let Some(sh) = self.share_mut() {
                    sh.finished(r, s, now - start_ns, true);
                }
                let a = &mut self.ranks[r].acct;
                a.flush(now);
                debug_assert!(a.running_compute > 0);
                a.running_compute -= 1;
            }
            CKind::Io { busy: false, .. } | CKind::P2p { .. } | CKind::Collective { .. } => {
                if let Some(sh) = self.share_mut() {
                    sh.finished(r, s, now - start_ns, true);
                }
                let a = &mut self.ranks[r].acct;
                a.flush(now);
                debug_assert!(a.running_comm > 0);
                a.running_comm -= 1;
                if a.running_comm == 0 {
                    if let Some(f) = &mut self.flows {
                        f.set_communicating(r * STREAMS..(r + 1) * STREAMS, false);
                    }
                }
            }
            // What a priced alloc or free does to memory is replayed after the step.
            CKind::Alloc { .. } | CKind::Free => {}
        }
        if op.record != NOT_RECORDED {
            let base = self.ranks[r].record_base as usize;
            if let Some(t) = self.ends.get_mut(base + op.record as usize) {
                *t = now;
            }
        }
        if let Some(t) = self
            .trace
            .as_mut()
            .filter(|_| Self::traces(&self.traced, r))
        {
            t.events.push(TraceEvent {
                rank,
                stream: Stream::ALL[s],
                op: op.index,
                start_ns,
                end_ns: now,
                bytes: op.trace_bytes(),
                flops,
                // Filled in with the memory timeline after the step.
                mem_bytes: 0,
                issued_ns: self
                    .issued_ns
                    .as_ref()
                    .and_then(|v| v.get(r * STREAMS + s).copied()),
                solo_ns: self
                    .host
                    .as_ref()
                    .and_then(|h| h.share.as_ref())
                    .and_then(|sh| sh.solo_below(r, s, now - start_ns)),
            });
        }
        self.try_start_heads(ctx, rank, r, (op_idx, s))
    }

    /// Whether the trace records `slot`'s rank.
    fn traces(traced: &Option<Vec<bool>>, slot: usize) -> bool {
        traced
            .as_ref()
            .is_none_or(|t| t.get(slot).copied().unwrap_or(false))
    }
}

impl<S: Slots> State<S> {
    /// Asks the cache for the per-rank state the event with payload `a` will read, while the
    /// event before it runs: when ranks come in random order (per-op noise), that state is
    /// rarely cached, and waiting for it is much of an event's time. Only a hint: it changes
    /// nothing but timing.
    #[inline(always)]
    fn prefetch(&self, ctx: &Ctx, a: u32) {
        if a & FLOW_TAG == FLOW_TAG || a & (COLL_BIT | HANDOFF_BIT) != 0 {
            return;
        }
        let rank = a & !P2P_BIT;
        let slot = S::slot(ctx, rank);
        if let Some(rs) = self.ranks.get(slot) {
            let p = (rs as *const RankState).cast::<u8>();
            for line in 0..std::mem::size_of::<RankState>() / 64 {
                prefetch_line(p.wrapping_add(line * 64));
            }
        }
    }
}

/// A prefetch of the cache line at `p` (a hint; nothing is read).
#[inline(always)]
fn prefetch_line(p: *const u8) {
    // SAFETY: a prefetch reads nothing and faults on no address, and SSE, which it needs, is
    // part of every x86_64 target.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The seed and lognormal parameters of [`super::OpJitter`].
pub(super) struct OpNoise {
    seed: u64,
    mu: f64,
    sigma: f64,
}

impl OpNoise {
    /// `None` when `cv` draws nothing (zero, negative or not finite).
    pub(super) fn new(j: super::OpJitter) -> Option<OpNoise> {
        if !(j.cv.is_finite() && j.cv > 0.0) {
            return None;
        }
        let sigma2 = (1.0 + j.cv * j.cv).ln();
        Some(OpNoise {
            seed: j.seed ^ 0x6f70_6a69_7474_6572,
            mu: -sigma2 / 2.0,
            sigma: sigma2.sqrt(),
        })
    }

    /// `ns` times the draw of op `op` (its IR index) of `rank`, rounded. Each op has its own
    /// generator, so what an op draws does not depend on the order the engine runs events in.
    fn scale(&self, ns: u64, rank: u32, op: u32) -> u64 {
        let mut rng = crate::rng::Rng::new(self.seed, (u64::from(rank) << 32) | u64::from(op));
        scaled_ns(ns, (self.mu + self.sigma * rng.standard_normal()).exp())
    }
}

/// `ns` times `factor`, rounded; `ns` itself when the product is no duration (a factor that
/// is negative, not finite, or overflows).
fn scaled_ns(ns: u64, factor: f64) -> u64 {
    let scaled = (ns as f64 * factor).round();
    if scaled.is_finite() && scaled >= 0.0 && scaled < u64::MAX as f64 {
        scaled as u64
    } else {
        ns
    }
}

/// Where a rank's host stands: it had issued `base_issued` kernels of its program at
/// `base_ns` (the step's start and none, until its first synchronisation), and issues each
/// later kernel `host_ns` after the one before.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HostClock {
    pub base_ns: u64,
    pub base_issued: u32,
}

impl HostClock {
    /// When the host has issued the first `issued` kernels of the program (for kernels
    /// issued before the last synchronisation: at the latest that).
    fn at(self, issued: u32, host_ns: u64) -> u64 {
        let since = |a: u32, b: u32| u64::from(a.saturating_sub(b)).saturating_mul(host_ns);
        if issued >= self.base_issued {
            self.base_ns.saturating_add(since(issued, self.base_issued))
        } else {
            self.base_ns.saturating_sub(since(self.base_issued, issued))
        }
    }
}

/// What host issue needs of a compute op: its kernels, the kernels of the program's compute
/// ops before it in program order, and its synchronisations ([`crate::ir::HostSyncs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Issue {
    pub kernels: u32,
    pub issued_before: u32,
    pub syncs: u16,
    pub sync_tail: u32,
}

/// Host issue: how long a compute op that the GPU could start at `now` and run in `dur_ns`
/// takes when an eager host issues each kernel in `host_ns` of CPU time, in program order,
/// and where the host stands after it when the op synchronises. The host runs ahead of the
/// GPU through the launch queue: from where `clock` puts it, it reaches this op at
/// `H = clock.at(issued_before)`. With the op's kernels of equal length `d = dur_ns / kernels`,
/// the first cannot start before it is issued and the last cannot end before it is issued
/// and has run: `end = max(max(now, H + h) + dur_ns, H + kernels h + d)`. Short kernels make
/// the host the floor (`kernels x h` per op), long ones hide it. The time the op waits for the
/// host counts as its own (the engine works per op, not per kernel).
///
/// An op with `syncs` synchronisations runs as that many rounds, each its share of the
/// kernels before a synchronisation, then its share of `sync_tail`: at each synchronisation
/// the host waits until the GPU has run what it issued (`H = max(H, end so far)`), so the
/// kernels after it start `h` later at the earliest and run at the host's pace when they are
/// shorter than `h`. The host stands at the last round's `H` afterwards (returned: the rank's
/// clock from then on).
#[inline]
pub(crate) fn host_issued_ns(
    now: u64,
    dur_ns: u64,
    op: Issue,
    clock: HostClock,
    host_ns: u64,
) -> (u64, Option<HostClock>) {
    if host_ns == 0 || op.kernels == 0 {
        return (dur_ns, None);
    }
    let k = u64::from(op.kernels);
    let d = dur_ns / k;
    let mut host = clock.at(op.issued_before, host_ns);
    // Issues `n` kernels from kernel `j` onwards on a GPU free from `gpu`: their end.
    let run = |gpu: u64, host: u64, j: u64, n: u64| -> u64 {
        let part = |a: u64| ((u128::from(dur_ns) * u128::from(a)) / u128::from(k)) as u64;
        let busy = part(j.saturating_add(n)).saturating_sub(part(j));
        gpu.max(host.saturating_add(host_ns))
            .saturating_add(busy)
            .max(
                host.saturating_add(n.saturating_mul(host_ns))
                    .saturating_add(d),
            )
    };
    if op.syncs == 0 {
        return (run(now, host, 0, k) - now, None);
    }
    // More rounds than kernels would only add empty ones.
    let rounds = u64::from(op.syncs).min(k);
    let tail = u64::from(op.sync_tail).min(k);
    let head = k - tail;
    let share = |total: u64, i: u64| total * (i + 1) / rounds - total * i / rounds;
    let (mut gpu, mut j) = (now, 0u64);
    for i in 0..rounds {
        for (n, synced) in [(share(head, i), false), (share(tail, i), true)] {
            if synced {
                host = host.max(gpu);
            }
            if n > 0 {
                gpu = run(gpu, host, j, n);
                host = host.saturating_add(n.saturating_mul(host_ns));
                j += n;
            }
        }
    }
    let after = HostClock {
        base_ns: host,
        base_issued: op.issued_before.saturating_add(op.kernels),
    };
    (gpu - now, Some(after))
}

fn compute_ns_uncached(ctx: &Ctx, rank: u32, op: u32) -> u64 {
    let p = ctx.prog_of[rank as usize] as usize;
    match ctx
        .schedule
        .programs
        .get(p)
        .and_then(|p| p.ops.get(op as usize))
        .map(|o| &o.kind)
    {
        Some(OpKind::Compute(c)) => ctx.cost.compute_ns(rank, c),
        _ => 0,
    }
}

pub(crate) fn run(ctx: &Ctx) -> Result<SimResult, SimError> {
    if ctx.collapse.is_some() {
        run_as::<BySlot>(ctx)
    } else {
        run_as::<ByRank>(ctx)
    }
}

fn run_as<S: Slots>(ctx: &Ctx) -> Result<SimResult, SimError> {
    let mut st = State::<S>::new(ctx);
    for (slot, &rank) in ctx.active.iter().enumerate() {
        st.try_start_heads(ctx, rank, slot, (UNCHECKED, usize::MAX))
            .map_err(|e| *e)?;
    }
    loop {
        while let Some((a, b)) = st.instant.pop_front() {
            st.dispatch(ctx, a, b).map_err(|e| *e)?;
        }
        if let Some(f) = &mut st.flows {
            if f.is_dirty() {
                f.resolve(st.now, &mut st.queue);
            }
        }
        let Some(ev) = st.queue.pop() else { break };
        if st.prefetch {
            if let Some((a, _)) = st.queue.peek_payload() {
                st.prefetch(ctx, a);
            }
        }
        debug_assert!(ev.time_ns >= st.now, "time went backwards");
        st.now = ev.time_ns;
        st.dispatch(ctx, ev.a, ev.b).map_err(|e| *e)?;
    }
    if st.ranks.iter().any(|r| r.remaining > 0) {
        return Err(SimError::Deadlock(Box::new(deadlock::diagnose(ctx, &st))));
    }
    st.replay_memory(ctx).map_err(|e| *e)?;
    Ok(st.finish(ctx))
}
