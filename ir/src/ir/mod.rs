//! The schedule IR: the one description of a training step that both executors run. The
//! simulator gives each op a modelled duration; the runtime does each op's work for real.
//! Nothing here knows about time or cost models: like the scenario and the plan it names, the
//! IR is shared vocabulary, below twin-sim's `workload` (which sizes its ops) and `schedule`
//! (which generates it and re-exports it). Its validator ([`Schedule::validate`]) proves that a
//! schedule can run, whoever generated it.
//!
//! A [`Schedule`] holds one [`Program`] per distinct role and maps every rank to its program.
//! Programs name peers and groups relative to the rank that runs them ("my next pipeline
//! stage", "my TP group"), and the [`crate::plan::Plan`] resolves those names per rank. So all
//! ranks of a pipeline stage share one program, and a 16,384-GPU schedule costs no more memory
//! than a 64-GPU one with the same pipeline. Executors still run every rank.
//!
//! Ordering rules, shared by both executors:
//! - Ops on one stream of one rank run one at a time, in program order (like a CUDA stream).
//! - An op may start only when every op in its `deps` has finished. Deps point to earlier ops
//!   of the same program, so a program is a DAG by construction; a cross-stream dependency is
//!   the IR's "wait".
//! - A `Send` and the matching `Recv` (same tag, peer of each other) run together: the
//!   transfer starts when both sides have reached them (rendezvous, as NCCL does).
//! - A `Collective` starts when every member of the resolved group has reached it; members
//!   issue their collectives on one group in the same order.
//! - `Alloc` and `Free` move the rank's memory counter. They take no time unless the cost model
//!   prices allocation (`CostModel::alloc_ns`: a host profile's `memory.alloc_bytes_per_s`).

mod attention;
mod deps;
mod gemms;
mod validate;

use crate::plan::GroupKind;
use crate::scenario::Precision;
pub use attention::Attention;
pub use deps::Deps;
pub use gemms::Gemms;
use serde::{Deserialize, Serialize};
pub use validate::{ValidationError, ValidationReport};

/// Execution queues of one rank. Ops on different streams may overlap in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[repr(u8)]
pub enum Stream {
    Compute = 0,
    /// Tensor/sequence parallel collectives.
    Tp = 1,
    /// Context parallel exchange: its collectives and the ring's sends.
    Cp = 2,
    /// Expert parallel all-to-all.
    Ep = 3,
    /// Data parallel: gradient reduction, ZeRO gathers.
    Dp = 4,
    PpSend = 5,
    PpRecv = 6,
    /// Checkpoint writes and host offload traffic.
    Io = 7,
    /// The context-parallel ring's receives: beside its sends (a send and a receive on one
    /// stream would wait for each other around the ring) and apart from the pipeline's (a
    /// pipeline receive queued behind a ring receive waits for the compute that ring feeds).
    CpRecv = 8,
}

impl Stream {
    pub const COUNT: usize = 9;
    pub const ALL: [Stream; Stream::COUNT] = [
        Stream::Compute,
        Stream::Tp,
        Stream::Cp,
        Stream::Ep,
        Stream::Dp,
        Stream::PpSend,
        Stream::PpRecv,
        Stream::Io,
        Stream::CpRecv,
    ];
    pub fn index(self) -> usize {
        self as usize
    }
    pub fn name(self) -> &'static str {
        match self {
            Stream::Compute => "compute",
            Stream::Tp => "tp-comm",
            Stream::Cp => "cp-comm",
            Stream::Ep => "ep-comm",
            Stream::Dp => "dp-comm",
            Stream::PpSend => "pp-send",
            Stream::PpRecv => "pp-recv",
            Stream::Io => "io",
            Stream::CpRecv => "cp-recv",
        }
    }
}

/// What a compute op does in the training step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    Forward,
    /// Full backward: input and weight gradients.
    Backward,
    /// Backward for the input gradient only (zero-bubble "B").
    BackwardInput,
    /// Backward for the weight gradient only (zero-bubble "W").
    BackwardWeight,
    /// Forward recomputation before a backward (activation checkpointing).
    Recompute,
    Optimizer,
    /// Gradient (de)quantisation or sparsification for compressed communication.
    Compress,
    /// A copy between a collective's buffer and the tensors it serves (FSDP2's copy-out of
    /// gathered parameters and copy-in of gradients to reduce).
    Copy,
}

impl Phase {
    pub fn short(self) -> &'static str {
        match self {
            Phase::Forward => "fwd",
            Phase::Backward => "bwd",
            Phase::BackwardInput => "bwd-in",
            Phase::BackwardWeight => "bwd-w",
            Phase::Recompute => "recompute",
            Phase::Optimizer => "optimizer",
            Phase::Compress => "compress",
            Phase::Copy => "copy",
        }
    }
    /// Counts toward model FLOPs (MFU). Recompute counts only toward hardware FLOPs (HFU).
    pub fn is_model_work(self) -> bool {
        !matches!(
            self,
            Phase::Recompute | Phase::Compress | Phase::Copy | Phase::Optimizer
        )
    }
}

/// One GEMM shape: C[m,n] = A[m,k] * B[k,n], repeated `count` times (batched or per layer).
///
/// `batch` is how many of the `count` products one kernel call computes: the per-head
/// attention GEMMs run as one strided-batched call per layer (`batch` = heads x micro batch),
/// while the linear layers of `n` folded layers are `n` separate calls (`batch` = 1). The
/// cost model pays a GEMM's fixed per-call time once per call, and the CUDA backend issues
/// the same calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Gemm {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub count: u32,
    /// Products per kernel call (1: each product is its own call).
    #[serde(default = "one_product")]
    pub batch: u32,
    /// The GEMM's own precision where it differs from its op's (FP8 training runs the
    /// attention core and the output layer in bf16); `None`: the op's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<crate::scenario::Precision>,
}

fn one_product() -> u32 {
    1
}

impl Gemm {
    /// `count` separate calls of one product each.
    pub fn single(m: u64, n: u64, k: u64, count: u32) -> Gemm {
        Gemm {
            dtype: None,
            m,
            n,
            k,
            count,
            batch: 1,
        }
    }

    /// Kernel calls: `count` products, `batch` per call (the last call may be partial).
    pub fn calls(&self) -> u32 {
        self.count.div_ceil(self.batch.max(1))
    }

    pub fn flops(&self) -> u64 {
        2u64.saturating_mul(self.m)
            .saturating_mul(self.n)
            .saturating_mul(self.k)
            .saturating_mul(u64::from(self.count))
    }

    /// Bytes of one product's A and B, what the host's sgemm reads and packs per call.
    pub fn operand_bytes(&self, elem_bytes: u64) -> u64 {
        self.m
            .saturating_mul(self.k)
            .saturating_add(self.k.saturating_mul(self.n))
            .saturating_mul(elem_bytes)
    }

    /// Bytes one product touches: A, B and C (what must fit the private cache for a call to
    /// find its operands where the last call of the same shape left them).
    pub fn working_set_bytes(&self, elem_bytes: u64) -> u64 {
        self.operand_bytes(elem_bytes)
            .saturating_add(self.m.saturating_mul(self.n).saturating_mul(elem_bytes))
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComputeOp {
    pub phase: Phase,
    pub dtype: Precision,
    /// The GEMMs this op contains, with their planned shapes (already divided by tp/cp).
    pub gemms: Gemms,
    /// The fused attention kernel of this op (flash attention), priced by its own curve;
    /// `None` when the op has none (or runs attention as the GEMMs above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention: Option<Attention>,
    /// Model FLOPs of the op in Megatron's counting: its GEMMs' and, for `attention`, the full
    /// `s*s` score and value products whatever the mask (Narayanan et al. 2021), so MFU compares
    /// with published figures; softmax, norms and other elementwise work are costed by
    /// `memory_bytes` instead. The cost model prices `attention` by its causal work.
    pub flops: u64,
    /// Bytes moved by memory-bound kernels (elementwise, norms, softmax, optimizer update).
    pub memory_bytes: u64,
    /// Kernel launches, for launch overhead.
    pub kernels: u32,
    /// SMs given to communication that overlaps this op's GEMMs (`tp_comm_overlap`): its
    /// GEMMs run on the GPU's other SMs. 0 for nearly every op.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sms_reserved: u32,
    /// Where the host stops to wait for this op's GPU work before it issues the rest of it
    /// (a dropless MoE layer's dispatch needs its token counts on the host). None for nearly
    /// every op.
    #[serde(default, skip_serializing_if = "HostSyncs::is_none")]
    pub host_syncs: HostSyncs,
}

fn is_zero(x: &u32) -> bool {
    *x == 0
}

/// The host synchronisations inside one compute op. Each of `count` rounds issues its share
/// of the op's kernels up to the synchronisation, waits until the GPU has run them, then
/// issues the round's `tail_kernels / count` kernels after it. Without host time per kernel
/// (`launch.host_per_kernel_ns` 0) a synchronisation costs nothing: the host is never behind.
///
/// A dropless MoE layer synchronises once in its forward, and again when it is recomputed:
/// the dispatcher needs how many tokens go to each expert and rank on the host, to size the
/// all-to-all and the grouped GEMMs. NVIDIA/Megatron-LM@d98e8a64dd
/// megatron/core/transformer/moe/token_dispatcher.py: `MoEAlltoAllTokenDispatcher.preprocess`
/// sets `cuda_sync_point` to `before_ep_alltoall` (or `before_finish` without expert
/// parallelism) unless `moe_pad_expert_input_to_capacity` fixes the sizes, and
/// `_maybe_dtoh_and_synchronize` waits on the device-to-host copy's event there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HostSyncs {
    pub count: u32,
    /// Kernels the op issues after its synchronisations, summed over them (each round's
    /// kernels from its synchronisation to the round's end).
    pub tail_kernels: u32,
}

impl HostSyncs {
    pub const NONE: HostSyncs = HostSyncs {
        count: 0,
        tail_kernels: 0,
    };

    pub fn is_none(&self) -> bool {
        self.count == 0
    }

    /// Both summed: the synchronisations of two ops' work run as one.
    pub fn plus(self, other: HostSyncs) -> HostSyncs {
        HostSyncs {
            count: self.count.saturating_add(other.count),
            tail_kernels: self.tail_kernels.saturating_add(other.tail_kernels),
        }
    }

    /// The same `n` times (n layers).
    pub fn repeat(self, n: u32) -> HostSyncs {
        HostSyncs {
            count: self.count.saturating_mul(n),
            tail_kernels: self.tail_kernels.saturating_mul(n),
        }
    }
}

impl ComputeOp {
    /// FLOPs of the op's GEMMs (without its attention kernel's).
    pub fn gemm_flops(&self) -> u64 {
        self.gemms
            .iter()
            .fold(0u64, |acc, g| acc.saturating_add(g.flops()))
    }

    /// The attention core's share of `flops` (Megatron's full square, what `flops` holds
    /// beyond the GEMMs of an op with an attention kernel) and the same products counted over
    /// the pairs the mask and window leave ([`Attention::masked_model_flops`]); `(0, 0)` for an
    /// op without an attention kernel. A framework's own FLOP count (its convention for the
    /// attention core) is `flops` with the first replaced by the second or by nothing.
    pub fn attention_model_flops(&self) -> (u64, u64) {
        match self.attention {
            Some(a) => (
                self.flops.saturating_sub(self.gemm_flops()),
                a.masked_model_flops(),
            ),
            None => (0, 0),
        }
    }

    /// The GEMMs a backend that runs attention as GEMMs executes: the op's own, then its
    /// attention kernel's equivalent ([`Attention::equivalent_gemm`]), one per kind of call
    /// (full and windowed, [`Attention::parts`]).
    pub fn executed_gemms(&self) -> impl Iterator<Item = Gemm> + '_ {
        self.gemms.iter().copied().chain(
            self.attention
                .into_iter()
                .flat_map(|a| a.parts())
                .map(|a| a.equivalent_gemm()),
        )
    }
}

/// A point-to-point peer, relative to the rank that runs the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Peer {
    /// Next pipeline stage (wraps from last to first).
    PpNext,
    /// Previous pipeline stage (wraps from first to last).
    PpPrev,
    /// Next member of this rank's CP group (ring).
    CpNext,
    /// Previous member of this rank's CP group (ring).
    CpPrev,
}

impl Peer {
    /// The rank this peer names for `rank`: the one resolution the validator, the engine and
    /// the runtime all use, so they pair the same sends and receives.
    pub fn rank_for(self, plan: &crate::plan::Plan, rank: u32) -> u32 {
        match self {
            Peer::PpNext => plan.pp_next(rank),
            Peer::PpPrev => plan.pp_prev(rank),
            Peer::CpNext | Peer::CpPrev => {
                let mut c = plan.coords(rank);
                let n = plan.sizes.cp.max(1);
                c.cp = if self == Peer::CpNext {
                    (c.cp + 1) % n
                } else {
                    (c.cp + n - 1) % n
                };
                plan.rank_of(c)
            }
        }
    }

    /// The group whose communicator carries transfers to this peer.
    pub fn group(self) -> GroupKind {
        match self {
            Peer::PpNext | Peer::PpPrev => GroupKind::Pp,
            Peer::CpNext | Peer::CpPrev => GroupKind::Cp,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CollectiveKind {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Broadcast,
}

impl CollectiveKind {
    pub fn name(self) -> &'static str {
        match self {
            CollectiveKind::AllReduce => "all-reduce",
            CollectiveKind::AllGather => "all-gather",
            CollectiveKind::ReduceScatter => "reduce-scatter",
            CollectiveKind::AllToAll => "all-to-all",
            CollectiveKind::Broadcast => "broadcast",
        }
    }
}

/// Memory categories of the per-rank breakdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(u8)]
pub enum MemCategory {
    Weights = 0,
    Grads = 1,
    Optimizer = 2,
    Activations = 3,
    /// Communication buffers: DDP buckets, ZeRO gather buffers, pipeline send/recv buffers.
    Buffers = 4,
    /// Framework reserve: CUDA context, allocator slack.
    Reserved = 5,
}

impl MemCategory {
    pub const COUNT: usize = 6;
    pub const ALL: [MemCategory; MemCategory::COUNT] = [
        MemCategory::Weights,
        MemCategory::Grads,
        MemCategory::Optimizer,
        MemCategory::Activations,
        MemCategory::Buffers,
        MemCategory::Reserved,
    ];
    pub fn name(self) -> &'static str {
        match self {
            MemCategory::Weights => "weights",
            MemCategory::Grads => "grads",
            MemCategory::Optimizer => "optimizer",
            MemCategory::Activations => "activations",
            MemCategory::Buffers => "buffers",
            MemCategory::Reserved => "reserved",
        }
    }
}

/// Where an allocation lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    Gpu,
    /// Host memory (optimizer / parameter offload).
    Host,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "op")]
pub enum OpKind {
    Compute(ComputeOp),
    Send {
        peer: Peer,
        bytes: u64,
        tag: u32,
    },
    Recv {
        peer: Peer,
        bytes: u64,
        tag: u32,
    },
    /// `bytes` is the full buffer in the nccl-tests sense: the all-reduce buffer; the gathered
    /// output of an all-gather; the input of a reduce-scatter; the whole send buffer of an
    /// all-to-all. `calls` > 1 when several same-size calls were merged into one op (chunk
    /// granularity): each call pays its own latency.
    Collective {
        kind: CollectiveKind,
        group: GroupKind,
        bytes: u64,
        calls: u32,
    },
    Alloc {
        category: MemCategory,
        device: Device,
        bytes: u64,
        /// Matches exactly one later `Free` of the same program.
        tag: u32,
    },
    Free {
        tag: u32,
    },
    /// Write `bytes` of this rank's state to checkpoint storage.
    Checkpoint {
        bytes: u64,
    },
    /// Copy `bytes` between this GPU and pinned host memory over the GPU's host link (PCIe,
    /// or NVLink-C2C on a Grace node): offloaded gradients to the host (`to_host`), updated
    /// parameters back.
    HostCopy {
        bytes: u64,
        to_host: bool,
    },
    /// The optimizer update of offloaded state, run by the host's CPUs on host memory:
    /// `bytes` of host memory read and written (a memory-bound pass, as DeepSpeed's CPU Adam).
    HostUpdate {
        bytes: u64,
    },
}

/// Offloaded work on the host side of one rank, as a cost model prices it: the measure of an
/// [`OpKind::HostCopy`] or [`OpKind::HostUpdate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostWork {
    /// `bytes` over the GPU's host link, either way.
    Copy { bytes: u64 },
    /// `bytes` of host memory read and written by the CPUs' optimizer update.
    Update { bytes: u64 },
}

impl HostWork {
    /// The bytes it moves.
    pub fn bytes(self) -> u64 {
        match self {
            HostWork::Copy { bytes } | HostWork::Update { bytes } => bytes,
        }
    }
}

/// Where in the model an op belongs, for traces, reports and matching sim ops to real ops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Label {
    pub microbatch: Option<u32>,
    pub chunk: u32,
    pub first_layer: u32,
    pub num_layers: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Op {
    pub stream: Stream,
    pub kind: OpKind,
    /// Indices of earlier ops of the same program that must finish first.
    pub deps: Deps,
    pub label: Label,
}

impl Op {
    /// A short human name: "fwd mb3 c0 L0-11", "all-reduce tp 48MiB x24".
    pub fn name(&self) -> String {
        let l = &self.label;
        let where_ = {
            let mut s = String::new();
            if let Some(mb) = l.microbatch {
                s.push_str(&format!(" mb{mb}"));
            }
            if l.num_layers > 0 {
                s.push_str(&format!(
                    " c{} L{}-{}",
                    l.chunk,
                    l.first_layer,
                    l.first_layer + l.num_layers - 1
                ));
            }
            s
        };
        match &self.kind {
            OpKind::Compute(c) => format!("{}{}", c.phase.short(), where_),
            OpKind::Send { peer, bytes, .. } => {
                format!("send {peer:?} {}{}", fmt_bytes(*bytes), where_)
            }
            OpKind::Recv { peer, bytes, .. } => {
                format!("recv {peer:?} {}{}", fmt_bytes(*bytes), where_)
            }
            OpKind::Collective {
                kind,
                group,
                bytes,
                calls,
            } => {
                let x = if *calls > 1 {
                    format!(" x{calls}")
                } else {
                    String::new()
                };
                format!(
                    "{} {group:?} {}{x}{}",
                    kind.name(),
                    fmt_bytes(*bytes),
                    where_
                )
            }
            OpKind::Alloc {
                category, bytes, ..
            } => format!("alloc {} {}{}", category.name(), fmt_bytes(*bytes), where_),
            OpKind::Free { tag } => format!("free #{tag}{where_}"),
            OpKind::Checkpoint { bytes } => format!("checkpoint {}", fmt_bytes(*bytes)),
            OpKind::HostCopy { bytes, to_host } => format!(
                "{} {}{}",
                if *to_host { "to-host" } else { "to-gpu" },
                fmt_bytes(*bytes),
                where_
            ),
            OpKind::HostUpdate { bytes } => format!("host-update {}", fmt_bytes(*bytes)),
        }
    }

    /// Bytes this op moves over a link, if it communicates.
    pub fn comm_bytes(&self) -> u64 {
        match &self.kind {
            OpKind::Send { bytes, .. } | OpKind::Recv { bytes, .. } => *bytes,
            OpKind::Collective { bytes, calls, .. } => bytes.saturating_mul(u64::from(*calls)),
            _ => 0,
        }
    }
}

/// Binary-prefixed size for names and reports: "48.0MiB".
pub fn fmt_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b}B")
    } else {
        format!("{v:.1}{}", UNITS[i])
    }
}

/// The ops of one role (a pipeline stage, normally), in program order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Program {
    pub stage: u32,
    pub ops: Vec<Op>,
}

/// One training step for every rank.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    pub programs: Vec<Program>,
    /// `program_of[rank]` indexes `programs`.
    pub program_of: Vec<u32>,
}

impl Schedule {
    pub fn world(&self) -> u32 {
        self.program_of.len() as u32
    }
    pub fn program(&self, rank: u32) -> &Program {
        &self.programs[self.program_of[rank as usize] as usize]
    }
    /// The program of `rank`, or `None` for a rank (or program index) out of range.
    pub fn get_program(&self, rank: u32) -> Option<&Program> {
        let p = *self.program_of.get(rank as usize)?;
        self.programs.get(p as usize)
    }
    /// Op `op` of `rank`'s program, or `None` when either is out of range.
    pub fn get_op(&self, rank: u32, op: u32) -> Option<&Op> {
        self.get_program(rank)?.ops.get(op as usize)
    }
    /// Ops summed over every rank.
    pub fn total_ops(&self) -> u64 {
        self.program_of
            .iter()
            .map(|&p| self.programs[p as usize].ops.len() as u64)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Plan;
    use crate::scenario::Axis;
    use crate::testing::small_scenario;

    /// A CP peer is the ring neighbour in the rank's CP group (what the runtime's
    /// communicators are built from), and a PP peer the next/previous stage, in any mesh order.
    #[test]
    fn peers_are_ring_neighbours_of_their_group() {
        let mut s = small_scenario(2, 2, 1, 4);
        s.parallel.cp = 3;
        s.cluster.gpus = 12;
        for order in [
            crate::scenario::Parallel::DEFAULT_ORDER,
            [Axis::Pp, Axis::Cp, Axis::Tp, Axis::Ep, Axis::Dp],
        ] {
            s.parallel.order = order;
            let plan = Plan::new(&s).unwrap();
            for rank in 0..plan.world {
                let members = &plan.group(plan.group_of(rank, GroupKind::Cp)).members;
                let n = members.len();
                let me = members.iter().position(|&m| m == rank).unwrap();
                assert_eq!(Peer::CpNext.rank_for(&plan, rank), members[(me + 1) % n]);
                assert_eq!(
                    Peer::CpPrev.rank_for(&plan, rank),
                    members[(me + n - 1) % n]
                );
                assert_eq!(Peer::PpNext.rank_for(&plan, rank), plan.pp_next(rank));
                assert_eq!(Peer::PpPrev.rank_for(&plan, rank), plan.pp_prev(rank));
            }
        }
        assert_eq!(Peer::CpPrev.group(), GroupKind::Cp);
        assert_eq!(Peer::PpNext.group(), GroupKind::Pp);
    }
}
