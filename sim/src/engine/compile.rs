//! Programs compiled for the engine: flat arrays the hot loop can read without chasing the
//! IR's nested vectors. Done once per program (role), shared by every rank that runs it. This
//! is also where malformed programs are rejected (deps that do not point backwards, frees
//! without an alloc), so the hot loop can trust its indices.

use super::SimError;
use crate::cost::CostModel;
use crate::plan::GroupKind;
use crate::schedule::{CollectiveKind, ComputeOp, OpKind, Peer, Program, Stream};
use std::collections::BTreeMap;

const NONE: u32 = u32::MAX;

/// The open (not yet freed) allocs of each tag, as one stack per tag threaded through the
/// ops: `top[tag]` is the latest open alloc and `below[op]` the one it was pushed over. Tags
/// are small dense integers in generated schedules, so `top` is an array indexed by tag;
/// larger tags (hand-written programs) go to a map.
struct OpenAllocs {
    dense: Vec<u32>,
    sparse: BTreeMap<u32, u32>,
    below: Vec<u32>,
}

impl OpenAllocs {
    fn new(ops: usize, max_dense_tag: usize) -> OpenAllocs {
        OpenAllocs {
            dense: vec![NONE; max_dense_tag],
            sparse: BTreeMap::new(),
            below: vec![NONE; ops],
        }
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
    }

    fn pop(&mut self, tag: u32) -> Option<u32> {
        let op = *self.top(tag);
        if op == NONE {
            return None;
        }
        let prev = self.below.get(op as usize).copied().unwrap_or(NONE);
        *self.top(tag) = prev;
        Some(op)
    }
}

pub(crate) const GROUP_KINDS: usize = GroupKind::ALL.len();

/// Position of a group kind in [`GroupKind::ALL`].
pub(crate) fn group_kind_index(kind: GroupKind) -> usize {
    match kind {
        GroupKind::Tp => 0,
        GroupKind::Cp => 1,
        GroupKind::Ep => 2,
        GroupKind::Dp => 3,
        GroupKind::DenseDp => 4,
        GroupKind::ExpertDp => 5,
        GroupKind::Pp => 6,
        GroupKind::World => 7,
    }
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
        model_flops: u64,
    },
    Checkpoint {
        bytes: u64,
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
    /// Position in the program's `stream_ops`. Streams run in order, so the op is done
    /// exactly when its stream's cursor has moved past this slot.
    pub slot: u32,
    pub deps_start: u32,
    pub deps_end: u32,
    /// Duration of compute and checkpoint ops when it does not depend on the rank.
    pub cached_ns: Option<u64>,
}

impl COp {
    /// Bytes the trace reports: moved over links, allocated, or written.
    pub fn trace_bytes(&self) -> u64 {
        match self.kind {
            CKind::Checkpoint { bytes } | CKind::P2p { bytes, .. } | CKind::Alloc { bytes, .. } => {
                bytes
            }
            CKind::Collective { bytes, calls, .. } => bytes.saturating_mul(u64::from(calls)),
            CKind::Compute { .. } | CKind::Free { .. } => 0,
        }
    }
}

pub(crate) struct CProgram {
    pub ops: Vec<COp>,
    /// Deps of op i are `deps[ops[i].deps_start..ops[i].deps_end]`.
    pub deps: Vec<u32>,
    /// Where each entry of `deps` sits, (stream, slot), so that checking a dep reads this
    /// array in order instead of the dep's op record elsewhere in `ops`.
    pub dep_at: Vec<DepAt>,
    /// Ops of stream s in program order are `stream_ops[stream_start[s]..stream_start[s+1]]`.
    pub stream_ops: Vec<u32>,
    pub stream_start: [u32; Stream::COUNT + 1],
    /// Collective ops per group kind, in program order: `coll_ops[kind][seq]`.
    pub coll_ops: [Vec<u32>; GROUP_KINDS],
    /// FLOPs of all compute ops, and of those that count as model work.
    pub flops: u64,
    pub model_flops: u64,
}

/// A dep's position: done exactly when its stream's cursor has passed `slot`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DepAt {
    pub stream: u32,
    pub slot: u32,
}

impl CProgram {
    /// The (stream, slot) of each of `op`'s deps, in the order of [`CProgram::deps_of`].
    pub fn dep_at_of(&self, op: &COp) -> &[DepAt] {
        self.dep_at
            .get(op.deps_start as usize..op.deps_end as usize)
            .unwrap_or(&[])
    }

    pub fn deps_of(&self, op: &COp) -> &[u32] {
        self.deps
            .get(op.deps_start as usize..op.deps_end as usize)
            .unwrap_or(&[])
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
    let mut ops = Vec::with_capacity(n);
    let mut deps = Vec::with_capacity(program.ops.iter().map(|o| o.deps.len()).sum());
    let mut per_stream: [Vec<u32>; Stream::COUNT] = Default::default();
    let mut coll_ops: [Vec<u32>; GROUP_KINDS] = Default::default();
    let mut open = OpenAllocs::new(n, 2 * n + 64);
    let mut memo = Recent::default();
    // Whether each alloc op is still open, for the unfreed-alloc check.
    let mut unfreed = vec![false; n];
    for (i, op) in program.ops.iter().enumerate() {
        let i32_ = i as u32;
        let deps_start = deps.len() as u32;
        for &d in &op.deps {
            if d >= i32_ {
                return Err(SimError::BadDependency {
                    program: index,
                    op: i32_,
                    dep: d,
                });
            }
            deps.push(d);
        }
        let mut cached_ns = None;
        let kind = match &op.kind {
            OpKind::Compute(c) => {
                if cache {
                    cached_ns = Some(memo.get(c, || cost.compute_ns(probe_rank, c)));
                }
                CKind::Compute {
                    flops: c.flops,
                    model_flops: if c.phase.is_model_work() { c.flops } else { 0 },
                }
            }
            OpKind::Checkpoint { bytes } => {
                cached_ns = Some(cost.checkpoint_ns(*bytes));
                CKind::Checkpoint { bytes: *bytes }
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
                list.push(i32_);
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
                unfreed[i] = true;
                cached_ns = Some(cost.alloc_ns(*category, *bytes));
                CKind::Alloc {
                    category: *category as u8,
                    gpu: matches!(device, crate::schedule::Device::Gpu),
                    bytes: *bytes,
                }
            }
            OpKind::Free { tag } => {
                let alloc = open.pop(*tag).ok_or(SimError::UnmatchedFree {
                    program: index,
                    op: i32_,
                    tag: *tag,
                })?;
                unfreed[alloc as usize] = false;
                CKind::Free { alloc }
            }
        };
        per_stream[op.stream.index()].push(i32_);
        ops.push(COp {
            kind,
            stream: op.stream.index() as u8,
            slot: 0,
            deps_start,
            deps_end: deps.len() as u32,
            cached_ns,
        });
    }
    let mut stream_ops = Vec::with_capacity(n);
    let mut stream_start = [0u32; Stream::COUNT + 1];
    for (s, list) in per_stream.iter().enumerate() {
        stream_start[s] = stream_ops.len() as u32;
        for &op in list {
            if let Some(o) = ops.get_mut(op as usize) {
                o.slot = stream_ops.len() as u32;
            }
            stream_ops.push(op);
        }
    }
    stream_start[Stream::COUNT] = stream_ops.len() as u32;
    let dep_at = deps
        .iter()
        .map(|&d| {
            ops.get(d as usize)
                .map_or(DepAt::default(), |o: &COp| DepAt {
                    stream: u32::from(o.stream),
                    slot: o.slot,
                })
        })
        .collect();
    // Every allocation must be freed within the step, so that live memory returns to zero.
    // The earliest open alloc (the bottom of its tag's stack).
    if let Some(op) = unfreed.iter().position(|&u| u) {
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
    let (mut flops, mut model_flops) = (0u64, 0u64);
    for o in &ops {
        if let CKind::Compute {
            flops: f,
            model_flops: m,
        } = o.kind
        {
            flops = flops.saturating_add(f);
            model_flops = model_flops.saturating_add(m);
        }
    }
    Ok(CProgram {
        flops,
        model_flops,
        ops,
        deps,
        dep_at,
        stream_ops,
        stream_start,
        coll_ops,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_tables_match_declaration_order() {
        for (i, k) in GroupKind::ALL.iter().enumerate() {
            assert_eq!(group_kind_index(*k), i);
        }
    }
}
