//! Programs compiled for the engine: flat arrays the hot loop can read without chasing the
//! IR's nested vectors. Done once per program (role), shared by every rank that runs it. This
//! is also where malformed programs are rejected (deps that do not point backwards, frees
//! without an alloc), so the hot loop can trust its indices.

use super::SimError;
use crate::cost::{CostModel, HostWork};
use crate::plan::GroupKind;
use crate::schedule::{CollectiveKind, ComputeOp, OpKind, Peer, Program, Stream};
use std::cell::RefCell;
use std::collections::BTreeMap;

const NONE: u32 = u32::MAX;

/// Buffers of finished runs on this thread, which the next compiles reuse: a sweep compiles
/// thousands of programs of similar size one after another on each thread, and fresh vectors
/// every time cost allocation and page faults (the kernel zeroing pages that the allocator
/// had handed back). Every buffer is cleared before use, so results do not depend on what ran
/// before (a sweep test checks a layout simulated after another against a fresh thread).
#[derive(Default)]
struct Spare {
    programs: Vec<CProgram>,
    dense: Vec<u32>,
    below: Vec<u32>,
    pos_of: Vec<u32>,
    mem_at: Vec<u32>,
    frontier: Vec<Frontier>,
}

/// Compiled programs kept per thread at most (a few layouts' worth).
const MAX_SPARE_PROGRAMS: usize = 64;

thread_local! {
    static SPARE: RefCell<Spare> = RefCell::new(Spare::default());
}

/// Runs `f` on this thread's spare buffers; does nothing if they are unavailable (thread
/// teardown).
fn with_spare<T>(f: impl FnOnce(&mut Spare) -> T) -> Option<T> {
    SPARE
        .try_with(|s| s.try_borrow_mut().ok().map(|mut s| f(&mut s)))
        .ok()
        .flatten()
}

/// Empties a reused vector and makes room for `n` items. A vector too small is replaced, not
/// grown: growing reallocates and copies the whole old buffer, although nothing in it is
/// kept.
fn emptied<T>(v: &mut Vec<T>, n: usize) {
    v.clear();
    if v.capacity() < n {
        *v = Vec::with_capacity(n);
    }
}

/// Hands the compiled programs of a finished run back for reuse by later compiles on this
/// thread.
pub(crate) fn recycle(programs: Vec<CProgram>) {
    with_spare(|s| {
        let room = MAX_SPARE_PROGRAMS.saturating_sub(s.programs.len());
        s.programs.extend(programs.into_iter().take(room));
    });
}

/// The open (not yet freed) allocs of each tag, as one stack per tag threaded through the
/// ops: `top[tag]` is the latest open alloc and `below[op]` the one it was pushed over. Tags
/// are small dense integers in generated schedules, so `top` is an array indexed by tag;
/// larger tags (hand-written programs) go to a map.
struct OpenAllocs {
    dense: Vec<u32>,
    sparse: BTreeMap<u32, u32>,
    below: Vec<u32>,
    /// The position of each op (by IR index) in the compiled program, filled as ops are
    /// placed, or [`MEM_REF`] and its position in [`CProgram::mem_ops`] for a memory op the
    /// engine does not run; kept here with the other per-op scratch vectors.
    pos_of: Vec<u32>,
    /// The position in [`CProgram::mem_ops`] of each memory op (by IR index).
    mem_at: Vec<u32>,
    /// The [`Frontier`] of each memory op the engine does not run, by its position in
    /// [`CProgram::mem_ops`] (those it runs have none: an op waits on them directly). A
    /// priced op's entry is unused and `NO_FRONTIER`.
    frontier: Vec<Frontier>,
    /// Allocs pushed and not popped.
    open: usize,
}

impl OpenAllocs {
    /// For `ops` ops and tags below `max_dense_tag` in the array, in this thread's spare
    /// vectors when there are some.
    fn new(ops: usize, max_dense_tag: usize) -> OpenAllocs {
        let (mut dense, mut below, mut pos_of, mut mem_at, mut frontier) = with_spare(|s| {
            (
                std::mem::take(&mut s.dense),
                std::mem::take(&mut s.below),
                std::mem::take(&mut s.pos_of),
                std::mem::take(&mut s.mem_at),
                std::mem::take(&mut s.frontier),
            )
        })
        .unwrap_or_default();
        emptied(&mut dense, max_dense_tag);
        dense.resize(max_dense_tag, NONE);
        emptied(&mut below, ops);
        below.resize(ops, NONE);
        emptied(&mut pos_of, ops);
        pos_of.resize(ops, 0);
        emptied(&mut mem_at, ops);
        mem_at.resize(ops, 0);
        emptied(&mut frontier, ops / 2);
        OpenAllocs {
            dense,
            sparse: BTreeMap::new(),
            below,
            pos_of,
            mem_at,
            frontier,
            open: 0,
        }
    }

    /// Gives the vectors back for the next compile on this thread.
    fn recycle(self) {
        with_spare(|s| {
            s.dense = self.dense;
            s.below = self.below;
            s.pos_of = self.pos_of;
            s.mem_at = self.mem_at;
            s.frontier = self.frontier;
        });
    }

    /// The earliest alloc still open (the smallest op over every tag's stack), if any.
    fn earliest_open(&self) -> Option<u32> {
        let mut earliest: Option<u32> = None;
        for &top in self.dense.iter().chain(self.sparse.values()) {
            let mut op = top;
            // Every op is pushed at most once, so a stack is at most `below.len()` deep.
            for _ in 0..=self.below.len() {
                if op == NONE {
                    break;
                }
                earliest = Some(earliest.map_or(op, |e| e.min(op)));
                op = self.below.get(op as usize).copied().unwrap_or(NONE);
            }
        }
        earliest
    }

    fn top(&mut self, tag: u32) -> &mut u32 {
        match self.dense.get_mut(tag as usize) {
            Some(t) => t,
            None => self.sparse.entry(tag).or_insert(NONE),
        }
    }

    fn push(&mut self, tag: u32, op: u32) {
        let t = self.top(tag);
        let prev = std::mem::replace(t, op);
        if let Some(b) = self.below.get_mut(op as usize) {
            *b = prev;
        }
        self.open += 1;
    }

    fn pop(&mut self, tag: u32) -> Option<u32> {
        let op = *self.top(tag);
        if op == NONE {
            return None;
        }
        let prev = self.below.get(op as usize).copied().unwrap_or(NONE);
        *self.top(tag) = prev;
        self.open -= 1;
        Some(op)
    }
}

pub(crate) const GROUP_KINDS: usize = GroupKind::ALL.len();

/// Position of a group kind in [`GroupKind::ALL`].
pub(crate) fn group_kind_index(kind: GroupKind) -> usize {
    kind.index()
}

/// Position of a peer in the engine's per-rank peer table.
pub(crate) fn peer_index(peer: Peer) -> usize {
    match peer {
        Peer::PpNext => 0,
        Peer::PpPrev => 1,
        Peer::CpNext => 2,
        Peer::CpPrev => 3,
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum CKind {
    Compute {
        flops: u64,
        /// Its kernels, and the kernels of the program's compute ops before it in program
        /// order: what the host has issued when it begins to issue this op (host issue,
        /// [`crate::cost::CostModel::host_issue_ns`]).
        kernels: u32,
        issued_before: u32,
        /// Its host synchronisations ([`crate::ir::HostSyncs`]): how many, and the kernels
        /// issued after them.
        syncs: u16,
        sync_tail: u32,
    },
    /// An op of this rank alone whose time the cost model gives up front: a checkpoint
    /// write, a copy over the host link or the host's optimizer update. It runs beside the
    /// GPU's compute and counts as a transfer, except the host's update (`busy`), which is the
    /// rank's optimizer work and counts as busy time.
    Io {
        bytes: u64,
        busy: bool,
    },
    P2p {
        send: bool,
        peer: u8,
        tag: u32,
        bytes: u64,
    },
    Collective {
        group_kind: u8,
        /// This op's position among the program's collectives on the same group kind.
        seq: u32,
        kind: CollectiveKind,
        bytes: u64,
        calls: u32,
    },
    /// An alloc or free the cost model prices: it takes its time on its stream's thread, and
    /// its effect on memory is in [`CProgram::mem_ops`]. `bytes` is for the trace.
    Alloc {
        bytes: u64,
    },
    Free,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct COp {
    pub kind: CKind,
    pub stream: u8,
    /// The op's index in the IR program (what traces, reports and errors name). The engine
    /// itself names an op by its position in [`CProgram::ops`].
    pub index: u32,
    /// The op's deps are `dep_at[deps_start..deps_end]`.
    pub deps_start: u32,
    pub deps_end: u32,
    /// Duration of compute and checkpoint ops when it does not depend on the rank
    /// ([`NOT_CACHED`]: it does; read through [`COp::cached_ns`]). Not an `Option`, which would
    /// take 16 bytes and the op a cache line.
    cached: u64,
    /// Where the engine records when this op finished (an index into the rank's
    /// [`CProgram::recorded`] times), for the memory ops that wait on it; [`NOT_RECORDED`] when
    /// none does.
    pub record: u32,
}

/// [`COp::cached`] of an op whose duration depends on the rank.
const NOT_CACHED: u64 = u64::MAX;

/// [`COp::record`] of an op whose end no memory op waits on.
pub(crate) const NOT_RECORDED: u32 = u32::MAX;

/// An alloc or free of the program. The engine does not run those the cost model prices at
/// zero (every GPU profile's): they take no time and only move memory, so the ops after them
/// wait on what they waited on instead, and the memory timeline is replayed from the ends of
/// the ops they waited on once the step is simulated ([`super::memory::replay`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct MemOp {
    /// The op's index in the IR program.
    pub index: u32,
    pub stream: u8,
    pub effect: Effect,
    pub when: When,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Effect {
    Alloc {
        category: u8,
        gpu: bool,
        bytes: u64,
    },
    /// Releases the alloc at this position of [`CProgram::mem_ops`].
    Free {
        alloc: u32,
    },
}

impl Effect {
    /// Bytes the trace reports: an alloc's.
    pub fn trace_bytes(&self) -> u64 {
        match *self {
            Effect::Alloc { bytes, .. } => bytes,
            Effect::Free { .. } => 0,
        }
    }
}

/// When a memory op takes effect.
#[derive(Clone, Copy, Debug)]
pub(crate) enum When {
    /// When the engine finished it (a priced op, which runs as an op): its record slot.
    Ran(u32),
    /// At the latest end of what `mem_waits[start..end]` names (zero when it names nothing):
    /// the op before it on its stream and its deps, ops by record slot and memory ops by
    /// [`MEM_REF`] and position.
    After { start: u32, end: u32 },
}

impl COp {
    /// Its duration when that does not depend on the rank.
    #[inline]
    pub fn cached_ns(&self) -> Option<u64> {
        (self.cached != NOT_CACHED).then_some(self.cached)
    }

    /// Bytes the trace reports: moved over links, allocated, or written.
    pub fn trace_bytes(&self) -> u64 {
        match self.kind {
            CKind::Io { bytes, .. } | CKind::P2p { bytes, .. } | CKind::Alloc { bytes, .. } => {
                bytes
            }
            CKind::Collective { bytes, calls, .. } => bytes.saturating_mul(u64::from(calls)),
            CKind::Compute { .. } | CKind::Free => 0,
        }
    }
}

/// A compiled program, laid out in stream order: the ops of stream s, in program order, are
/// `ops[stream_start[s]..stream_start[s + 1]]`, so each stream walks its ops sequentially and
/// a stream's cursor is the position of its head op. The engine names ops by this position
/// (events, deps, rendezvous); [`COp::index`] maps back to the IR program.
pub(crate) struct CProgram {
    pub ops: Vec<COp>,
    /// Where each dep of each op sits (its stream and position): op `o`'s deps are
    /// `dep_at[o.deps_start..o.deps_end]`, in the IR's order, less those on its own stream
    /// (over by the time it heads it), then what the memory ops it waits on waited on.
    pub dep_at: Vec<DepAt>,
    pub stream_start: [u32; Stream::COUNT + 1],
    /// Collective ops (positions) per group kind, in program order: `coll_ops[kind][seq]`.
    pub coll_ops: [Vec<u32>; GROUP_KINDS],
    /// Every alloc and free, in program order ([`MemOp`]).
    pub mem_ops: Vec<MemOp>,
    /// What [`When::After`] ranges index: record slots, or [`MEM_REF`] and another memory
    /// op's position in `mem_ops`.
    pub mem_waits: Vec<u32>,
    /// How many ops record their end ([`COp::record`]).
    pub recorded: u32,
    /// The IR program's op count: the ops the engine runs and the memory ops it does not
    /// (what a trace of the rank holds).
    pub ir_ops: u32,
    /// FLOPs of all compute ops, and of those that count as model work.
    pub flops: u64,
    pub model_flops: u64,
    /// Of `model_flops`, the attention cores' full squares and their masked pairs
    /// ([`crate::schedule::ComputeOp::attention_model_flops`]).
    pub model_attention_flops: (u64, u64),
}

/// A dep: done exactly when the cursor of its stream has passed its position `slot`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DepAt {
    pub stream: u32,
    pub slot: u32,
}

impl CProgram {
    /// The deps of `op` (stream and position of each), in the IR's order.
    #[inline]
    pub fn dep_at_of(&self, op: &COp) -> &[DepAt] {
        self.dep_at
            .get(op.deps_start as usize..op.deps_end as usize)
            .unwrap_or(&[])
    }

    /// The IR index of the op at `pos` (`pos` itself if there is none).
    pub fn index_of(&self, pos: u32) -> u32 {
        self.ops.get(pos as usize).map_or(pos, |o| o.index)
    }
}

/// Durations of the last few distinct compute ops: a program repeats the same layer's ops for
/// every micro batch, and cost models are pure, so most lookups hit.
#[derive(Default)]
struct Recent<'p> {
    entries: Vec<(&'p ComputeOp, u64)>,
    next: usize,
}

impl<'p> Recent<'p> {
    const SIZE: usize = 16;

    fn get(&mut self, op: &'p ComputeOp, price: impl FnOnce() -> u64) -> u64 {
        if let Some(&(_, ns)) = self
            .entries
            .iter()
            .find(|(k, _)| k.flops == op.flops && *k == op)
        {
            return ns;
        }
        let ns = price();
        if self.entries.len() < Self::SIZE {
            self.entries.push((op, ns));
        } else if let Some(e) = self.entries.get_mut(self.next) {
            *e = (op, ns);
            self.next = (self.next + 1) % Self::SIZE;
        }
        ns
    }
}

/// A reference from a memory op's [`When::After`] to what it waits on: a record slot, or,
/// with this bit, another memory op's position in [`CProgram::mem_ops`].
pub(crate) const MEM_REF: u32 = 1 << 31;

/// Per stream, the latest position on it that an op must wait for ([`NONE`]: none). Waiting
/// for a position waits for every earlier one on its stream (a stream runs in order), so
/// what an unrun memory op waited on comes to one entry per stream, however many there were.
type Frontier = [u32; Stream::COUNT];

const NO_FRONTIER: Frontier = [NONE; Stream::COUNT];

/// `into` waits for `slot` of `stream` too.
fn raise(into: &mut Frontier, stream: usize, slot: u32) {
    if let Some(a) = into.get_mut(stream) {
        if slot != NONE && (*a == NONE || slot > *a) {
            *a = slot;
        }
    }
}

/// `into` waits for everything `from` does too.
fn merge(into: &mut Frontier, from: &Frontier) {
    for (s, &slot) in from.iter().enumerate() {
        raise(into, s, slot);
    }
}

/// Compile one program. `probe_rank` is the rank used to price compute when the cost model
/// says compute does not depend on the rank.
///
/// Allocs and frees that the cost model prices at zero are not compiled into ops
/// ([`MemOp`]): an op after one on its stream, or depending on one, waits instead on what the
/// memory op waited on (its [`Frontier`]), which gives every op the same start and end, and
/// the engine processes half the events on a generated schedule.
pub(crate) fn compile(
    index: u32,
    program: &Program,
    cost: &dyn CostModel,
    probe_rank: u32,
) -> Result<CProgram, SimError> {
    let n = program.ops.len();
    if n as u64 >= u64::from(super::run::STARTED) {
        return Err(SimError::ProgramTooLarge {
            program: index,
            ops: n as u64,
        });
    }
    let cache = cost.compute_is_rank_invariant();
    let free_ns = cost.free_ns();
    // The allocs' prices, and which ops the engine runs: all but the unpriced allocs and frees.
    let alloc_ns = |op: &OpKind| match op {
        OpKind::Alloc {
            category, bytes, ..
        } => cost.alloc_ns(*category, *bytes),
        _ => 0,
    };
    let runs = |op: &OpKind| match op {
        OpKind::Alloc { .. } => alloc_ns(op) > 0,
        OpKind::Free { .. } => free_ns > 0,
        _ => true,
    };
    let (mut ops, mut dep_at, mut coll_ops, mut mem_ops, mut mem_waits) =
        match with_spare(|s| s.programs.pop()).flatten() {
            Some(p) => (p.ops, p.dep_at, p.coll_ops, p.mem_ops, p.mem_waits),
            None => Default::default(),
        };
    // Each stream's ops go to a contiguous range, so count them per stream first.
    let mut per_stream = [0u32; Stream::COUNT];
    let mut memory_ops = 0;
    for op in &program.ops {
        if !runs(&op.kind) {
            memory_ops += 1;
            continue;
        }
        if let Some(c) = per_stream.get_mut(op.stream.index()) {
            *c += 1;
        }
    }
    let mut stream_start = [0u32; Stream::COUNT + 1];
    for s in 0..Stream::COUNT {
        stream_start[s + 1] = stream_start[s] + per_stream[s];
    }
    // The next free position of each stream.
    let mut next = [0u32; Stream::COUNT];
    next.copy_from_slice(&stream_start[..Stream::COUNT]);
    let placed = n - memory_ops;
    emptied(&mut ops, placed);
    ops.resize(placed, PLACEHOLDER);
    // Generated ops have about two deps each; the vector grows if a program has more.
    emptied(&mut dep_at, 2 * n);
    emptied(&mut mem_ops, memory_ops);
    emptied(&mut mem_waits, 2 * memory_ops);
    for list in &mut coll_ops {
        list.clear();
    }
    // Tags are handed out one per alloc, so generated programs use tags below `n`.
    let mut open = OpenAllocs::new(n, n + 64);
    let mut memo = Recent::default();
    let (mut flops, mut model_flops) = (0u64, 0u64);
    let mut model_attention_flops = (0u64, 0u64);
    let mut issued = 0u32;
    let mut recorded = 0u32;
    // Per stream: its last op (a position, or `MEM_REF` and a memory op's), and what an op
    // placed next on it waits on for the unrun memory ops before it.
    let mut last = [NONE; Stream::COUNT];
    let mut carry = [NO_FRONTIER; Stream::COUNT];
    for (i, op) in program.ops.iter().enumerate() {
        let i32_ = i as u32;
        let stream = op.stream.index();
        for &d in &op.deps {
            if d >= i32_ {
                return Err(SimError::BadDependency {
                    program: index,
                    op: i32_,
                    dep: d,
                });
            }
        }
        // What the op waits on for the unrun memory ops among its deps and before it.
        let mut frontier = carry.get(stream).copied().unwrap_or(NO_FRONTIER);
        for &d in &op.deps {
            let at = open.pos_of.get(d as usize).copied().unwrap_or(0);
            if at & MEM_REF != 0 {
                if let Some(f) = open.frontier.get((at & !MEM_REF) as usize) {
                    merge(&mut frontier, f);
                }
            }
        }
        if !runs(&op.kind) {
            let mem_pos = mem_ops.len() as u32;
            let start = mem_waits.len() as u32;
            // The replay waits on the op before it on its stream and on its deps; to an op
            // that runs, waiting for this one means waiting for those (as a frontier, with
            // what the memory ops among them waited on, merged above).
            for r in last
                .get(stream)
                .into_iter()
                .chain(op.deps.iter().filter_map(|&d| open.pos_of.get(d as usize)))
            {
                let r = *r;
                if r == NONE {
                    continue;
                }
                if r & MEM_REF != 0 {
                    mem_waits.push(r);
                } else {
                    mem_waits.push(record_slot(&mut ops, r, &mut recorded));
                    let s = ops.get(r as usize).map_or(0, |o| o.stream as usize);
                    raise(&mut frontier, s, r);
                }
            }
            let Some(effect) = effect_of(&op.kind, &mut open, index, i32_)? else {
                continue;
            };
            mem_ops.push(MemOp {
                index: i32_,
                stream: stream as u8,
                effect,
                when: When::After {
                    start,
                    end: mem_waits.len() as u32,
                },
            });
            open.frontier.push(frontier);
            if let Some(c) = carry.get_mut(stream) {
                *c = frontier;
            }
            if let Some(p) = open.pos_of.get_mut(i) {
                *p = MEM_REF | mem_pos;
            }
            if let Some(l) = last.get_mut(stream) {
                *l = MEM_REF | mem_pos;
            }
            if let Some(m) = open.mem_at.get_mut(i) {
                *m = mem_pos;
            }
            continue;
        }
        let pos = next.get_mut(stream).map_or(0, |c| {
            *c += 1;
            *c - 1
        });
        if let Some(p) = open.pos_of.get_mut(i) {
            *p = pos;
        }
        let deps_start = dep_at.len() as u32;
        for &d in &op.deps {
            let slot = open.pos_of.get(d as usize).copied().unwrap_or(0);
            if slot & MEM_REF != 0 {
                continue;
            }
            let dep_stream = ops.get(slot as usize).map_or(0, |o| u32::from(o.stream));
            // A dep earlier on the op's own stream has ended when the op heads the stream.
            if dep_stream as usize != stream {
                dep_at.push(DepAt {
                    stream: dep_stream,
                    slot,
                });
            }
        }
        // The waits of the unrun memory ops before it and among its deps; those on its own
        // stream are over when it heads the stream.
        for (s, &slot) in frontier.iter().enumerate() {
            if slot != NONE && s != stream {
                dep_at.push(DepAt {
                    stream: s as u32,
                    slot,
                });
            }
        }
        if let Some(c) = carry.get_mut(stream) {
            *c = NO_FRONTIER;
        }
        if let Some(l) = last.get_mut(stream) {
            *l = pos;
        }
        let mut cached_ns = None;
        let kind = match &op.kind {
            OpKind::Compute(c) => {
                if cache {
                    cached_ns = Some(memo.get(c, || cost.compute_ns(probe_rank, c)));
                }
                flops = flops.saturating_add(c.flops);
                if c.phase.is_model_work() {
                    model_flops = model_flops.saturating_add(c.flops);
                    let (full, masked) = c.attention_model_flops();
                    model_attention_flops.0 = model_attention_flops.0.saturating_add(full);
                    model_attention_flops.1 = model_attention_flops.1.saturating_add(masked);
                }
                let issued_before = issued;
                issued = issued.saturating_add(c.kernels);
                CKind::Compute {
                    flops: c.flops,
                    kernels: c.kernels,
                    issued_before,
                    syncs: u16::try_from(c.host_syncs.count).unwrap_or(u16::MAX),
                    sync_tail: c.host_syncs.tail_kernels.min(c.kernels),
                }
            }
            OpKind::Checkpoint { bytes } => {
                cached_ns = Some(cost.checkpoint_ns(*bytes));
                CKind::Io {
                    bytes: *bytes,
                    busy: false,
                }
            }
            OpKind::HostCopy { bytes, .. } => {
                cached_ns = Some(cost.host_ns(HostWork::Copy { bytes: *bytes }));
                CKind::Io {
                    bytes: *bytes,
                    busy: false,
                }
            }
            OpKind::HostUpdate { bytes } => {
                cached_ns = Some(cost.host_ns(HostWork::Update { bytes: *bytes }));
                CKind::Io {
                    bytes: *bytes,
                    busy: true,
                }
            }
            OpKind::Send { peer, bytes, tag } | OpKind::Recv { peer, bytes, tag } => CKind::P2p {
                send: matches!(op.kind, OpKind::Send { .. }),
                peer: peer_index(*peer) as u8,
                tag: *tag,
                bytes: *bytes,
            },
            OpKind::Collective {
                kind,
                group,
                bytes,
                calls,
            } => {
                let gk = group_kind_index(*group);
                let list = &mut coll_ops[gk];
                let seq = list.len() as u32;
                list.push(pos);
                CKind::Collective {
                    group_kind: gk as u8,
                    seq,
                    kind: *kind,
                    bytes: *bytes,
                    calls: *calls,
                }
            }
            // A priced alloc or free runs as an op; it moves memory when it ends (the
            // replay reads its end from its record slot).
            OpKind::Alloc { .. } | OpKind::Free { .. } => {
                let effect = effect_of(&op.kind, &mut open, index, i32_)?;
                if let Some(e) = effect {
                    push_ran(&mut mem_ops, &mut open, (i, stream), e, &mut recorded);
                }
                match effect {
                    Some(Effect::Alloc { bytes, .. }) => {
                        cached_ns = Some(alloc_ns(&op.kind));
                        CKind::Alloc { bytes }
                    }
                    _ => CKind::Free,
                }
            }
        };
        let record = match kind {
            CKind::Alloc { .. } | CKind::Free => recorded - 1,
            _ => NOT_RECORDED,
        };
        if let Some(o) = ops.get_mut(pos as usize) {
            *o = COp {
                kind,
                stream: stream as u8,
                index: i32_,
                deps_start,
                deps_end: dep_at.len() as u32,
                // A price of `NOT_CACHED` ns (585 years) is taken as one nanosecond less.
                cached: cached_ns.map_or(NOT_CACHED, |ns| ns.min(NOT_CACHED - 1)),
                record,
            };
        }
    }
    // Every allocation must be freed within the step, so that live memory returns to zero.
    // Report the earliest open alloc.
    if let Some(op) = (open.open > 0).then(|| open.earliest_open()).flatten() {
        let op = op as usize;
        let tag = match program.ops.get(op).map(|o| &o.kind) {
            Some(OpKind::Alloc { tag, .. }) => *tag,
            _ => 0,
        };
        return Err(SimError::UnfreedAlloc {
            program: index,
            op: op as u32,
            tag,
        });
    }
    open.recycle();
    Ok(CProgram {
        flops,
        model_flops,
        model_attention_flops,
        ops,
        dep_at,
        stream_start,
        coll_ops,
        mem_ops,
        mem_waits,
        recorded,
        ir_ops: n as u32,
    })
}

/// The record slot of the op at `pos`, given one if it has none.
fn record_slot(ops: &mut [COp], pos: u32, recorded: &mut u32) -> u32 {
    match ops.get_mut(pos as usize) {
        Some(o) if o.record == NOT_RECORDED => {
            o.record = *recorded;
            *recorded += 1;
            o.record
        }
        Some(o) => o.record,
        None => 0,
    }
}

/// A priced alloc or free (op `i`), which the engine runs: the replay takes its effect at its
/// end, from the next record slot.
fn push_ran(
    mem_ops: &mut Vec<MemOp>,
    open: &mut OpenAllocs,
    (i, stream): (usize, usize),
    effect: Effect,
    recorded: &mut u32,
) {
    if let Some(m) = open.mem_at.get_mut(i) {
        *m = mem_ops.len() as u32;
    }
    open.frontier.push(NO_FRONTIER);
    mem_ops.push(MemOp {
        index: i as u32,
        stream: stream as u8,
        effect,
        when: When::Ran(*recorded),
    });
    *recorded += 1;
}

/// What alloc or free `kind` (op `op` of `program`) does to memory, its alloc pushed on its
/// tag's stack or its free matched with the alloc on top; `None` for other ops.
fn effect_of(
    kind: &OpKind,
    open: &mut OpenAllocs,
    program: u32,
    op: u32,
) -> Result<Option<Effect>, SimError> {
    Ok(match kind {
        OpKind::Alloc {
            category,
            device,
            bytes,
            tag,
        } => {
            open.push(*tag, op);
            Some(Effect::Alloc {
                category: *category as u8,
                gpu: matches!(device, crate::schedule::Device::Gpu),
                bytes: *bytes,
            })
        }
        OpKind::Free { tag } => Some(Effect::Free {
            alloc: pop_alloc(open, program, op, *tag)?,
        }),
        _ => None,
    })
}

/// The position in [`CProgram::mem_ops`] of the alloc that free `op` (with `tag`) releases.
fn pop_alloc(open: &mut OpenAllocs, program: u32, op: u32, tag: u32) -> Result<u32, SimError> {
    // Lazily: an eagerly built error is dropped on every free (0.5% of a search).
    #[allow(clippy::unnecessary_lazy_evaluations)]
    let alloc = open
        .pop(tag)
        .ok_or_else(|| SimError::UnmatchedFree { program, op, tag })?;
    Ok(open.mem_at.get(alloc as usize).copied().unwrap_or(0))
}

/// What [`compile`] fills positions with before it writes each op there.
const PLACEHOLDER: COp = COp {
    kind: CKind::Free,
    stream: 0,
    index: 0,
    deps_start: 0,
    deps_end: 0,
    cached: NOT_CACHED,
    record: NOT_RECORDED,
};

#[cfg(test)]
#[path = "compile_tests.rs"]
mod tests;
