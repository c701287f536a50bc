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
    /// placed; kept here with the other per-op scratch vector.
    pos_of: Vec<u32>,
    /// Allocs pushed and not popped.
    open: usize,
}

impl OpenAllocs {
    /// For `ops` ops and tags below `max_dense_tag` in the array, in this thread's spare
    /// vectors when there are some.
    fn new(ops: usize, max_dense_tag: usize) -> OpenAllocs {
        let (mut dense, mut below, mut pos_of) = with_spare(|s| {
            (
                std::mem::take(&mut s.dense),
                std::mem::take(&mut s.below),
                std::mem::take(&mut s.pos_of),
            )
        })
        .unwrap_or_default();
        emptied(&mut dense, max_dense_tag);
        dense.resize(max_dense_tag, NONE);
        emptied(&mut below, ops);
        below.resize(ops, NONE);
        emptied(&mut pos_of, ops);
        pos_of.resize(ops, 0);
        OpenAllocs {
            dense,
            sparse: BTreeMap::new(),
            below,
            pos_of,
            open: 0,
        }
    }

    /// Gives the vectors back for the next compile on this thread.
    fn recycle(self) {
        with_spare(|s| {
            s.dense = self.dense;
            s.below = self.below;
            s.pos_of = self.pos_of;
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
        issued_before: u64,
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
    Alloc {
        category: u8,
        gpu: bool,
        bytes: u64,
    },
    Free {
        /// The alloc op this free releases.
        alloc: u32,
    },
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
    /// Duration of compute and checkpoint ops when it does not depend on the rank.
    pub cached_ns: Option<u64>,
}

impl COp {
    /// Bytes the trace reports: moved over links, allocated, or written.
    pub fn trace_bytes(&self) -> u64 {
        match self.kind {
            CKind::Io { bytes, .. } | CKind::P2p { bytes, .. } | CKind::Alloc { bytes, .. } => {
                bytes
            }
            CKind::Collective { bytes, calls, .. } => bytes.saturating_mul(u64::from(calls)),
            CKind::Compute { .. } | CKind::Free { .. } => 0,
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
    /// `dep_at[o.deps_start..o.deps_end]`, in the IR's order.
    pub dep_at: Vec<DepAt>,
    pub stream_start: [u32; Stream::COUNT + 1],
    /// Collective ops (positions) per group kind, in program order: `coll_ops[kind][seq]`.
    pub coll_ops: [Vec<u32>; GROUP_KINDS],
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

/// Compile one program. `probe_rank` is the rank used to price compute when the cost model
/// says compute does not depend on the rank.
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
    let (mut ops, mut dep_at, mut coll_ops) = match with_spare(|s| s.programs.pop()).flatten() {
        Some(p) => (p.ops, p.dep_at, p.coll_ops),
        None => Default::default(),
    };
    // Each stream's ops go to a contiguous range, so count them per stream first.
    let mut per_stream = [0u32; Stream::COUNT];
    for op in &program.ops {
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
    emptied(&mut ops, n);
    ops.resize(n, PLACEHOLDER);
    // Generated ops have about two deps each; the vector grows if a program has more.
    emptied(&mut dep_at, 2 * n);
    for list in &mut coll_ops {
        list.clear();
    }
    // Tags are handed out one per alloc, so generated programs use tags below `n`.
    let mut open = OpenAllocs::new(n, n + 64);
    let mut memo = Recent::default();
    let (mut flops, mut model_flops) = (0u64, 0u64);
    let mut model_attention_flops = (0u64, 0u64);
    let mut issued = 0u64;
    for (i, op) in program.ops.iter().enumerate() {
        let i32_ = i as u32;
        let stream = op.stream.index();
        let pos = next.get_mut(stream).map_or(0, |c| {
            *c += 1;
            *c - 1
        });
        if let Some(p) = open.pos_of.get_mut(i) {
            *p = pos;
        }
        let deps_start = dep_at.len() as u32;
        for &d in &op.deps {
            if d >= i32_ {
                return Err(SimError::BadDependency {
                    program: index,
                    op: i32_,
                    dep: d,
                });
            }
            let slot = open.pos_of.get(d as usize).copied().unwrap_or(0);
            let stream = ops.get(slot as usize).map_or(0, |o| u32::from(o.stream));
            dep_at.push(DepAt { stream, slot });
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
                issued = issued.saturating_add(u64::from(c.kernels));
                CKind::Compute {
                    flops: c.flops,
                    kernels: c.kernels,
                    issued_before,
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
            OpKind::Alloc {
                category,
                device,
                bytes,
                tag,
            } => {
                open.push(*tag, i32_);
                cached_ns = Some(cost.alloc_ns(*category, *bytes));
                CKind::Alloc {
                    category: *category as u8,
                    gpu: matches!(device, crate::schedule::Device::Gpu),
                    bytes: *bytes,
                }
            }
            OpKind::Free { tag } => {
                // Lazily: an eagerly built error is dropped on every free (0.5% of a search).
                #[allow(clippy::unnecessary_lazy_evaluations)]
                let alloc = open.pop(*tag).ok_or_else(|| SimError::UnmatchedFree {
                    program: index,
                    op: i32_,
                    tag: *tag,
                })?;
                CKind::Free {
                    alloc: open.pos_of.get(alloc as usize).copied().unwrap_or(0),
                }
            }
        };
        if let Some(o) = ops.get_mut(pos as usize) {
            *o = COp {
                kind,
                stream: stream as u8,
                index: i32_,
                deps_start,
                deps_end: dep_at.len() as u32,
                cached_ns,
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
    })
}

/// What [`compile`] fills positions with before it writes each op there.
const PLACEHOLDER: COp = COp {
    kind: CKind::Free { alloc: 0 },
    stream: 0,
    index: 0,
    deps_start: 0,
    deps_end: 0,
    cached_ns: None,
};

#[cfg(test)]
#[path = "compile_tests.rs"]
mod tests;
