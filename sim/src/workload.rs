//! The work inside one micro batch's pass through a chunk of layers: its GEMM shapes, FLOPs,
//! memory-bound bytes, the collectives tensor/context/expert parallelism adds, the activation
//! bytes it saves for backward, and the per-rank size of weights, gradients and optimizer
//! state. The schedule generators place this work in time; this module only sizes it.
//!
//! Formulas follow Megatron-LM (Narayanan et al. 2021) for FLOPs and Korthikanti et al. 2022
//! for activation memory; see docs/memory.md.

use crate::plan::{ChunkLayout, GroupKind, Plan};
use crate::scenario::Scenario;
use crate::schedule::{CollectiveKind, ComputeOp};

/// A collective that follows a pass's compute on the tp / cp / ep stream.
#[derive(Clone, Debug, PartialEq)]
pub struct CommCall {
    pub kind: CollectiveKind,
    pub group: GroupKind,
    /// Full buffer per call, nccl-tests sense (see `OpKind::Collective`).
    pub bytes: u64,
    /// Number of same-size calls merged into this one.
    pub calls: u32,
}

/// One pass (forward, backward, ...) of one micro batch through some layers.
#[derive(Clone, Debug, PartialEq)]
pub struct PassWork {
    pub compute: ComputeOp,
    /// Collectives that the pass needs; on the critical path after `compute`.
    pub comms: Vec<CommCall>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ChunkWork {
    pub forward: PassWork,
    /// Full backward: input and weight gradients.
    pub backward: PassWork,
    /// Zero-bubble split: input-gradient half (carries the backward's collectives).
    pub backward_input: PassWork,
    /// Zero-bubble split: weight-gradient half (no collectives).
    pub backward_weight: ComputeOp,
    /// Forward recomputation run before the backward, when recompute is not "none".
    pub recompute: Option<PassWork>,
    /// Activation bytes saved for backward by one micro batch (after recompute policy).
    pub activation_bytes: u64,
    /// Bytes of the activation sent to the next virtual stage (the gradient coming back has
    /// the same size).
    pub boundary_bytes: u64,
}

/// Parameters held by one rank for some layers, after tp/ep sharding and before ZeRO.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ParamCount {
    pub dense: u64,
    pub expert: u64,
}

/// Per-rank bytes of model state after ZeRO/FSDP sharding and offload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateBytes {
    pub weights_bytes: u64,
    pub grads_bytes: u64,
    pub optimizer_bytes: u64,
    /// State moved to host memory by offload (not counted above).
    pub host_bytes: u64,
}

/// Work for layers `first_layer .. first_layer + num_layers` of `layout`, plus the embedding
/// and/or head when asked. Used whole for chunk granularity, per layer for layer granularity
/// and for splitting the last backward into gradient buckets.
pub fn layers_work(
    _s: &Scenario,
    _plan: &Plan,
    _layout: &ChunkLayout,
    _first_layer: u32,
    _num_layers: u32,
    _embedding: bool,
    _head: bool,
) -> ChunkWork {
    unimplemented!("workload helper")
}

/// Work for a whole chunk (all its layers, embedding and head).
pub fn chunk_work(s: &Scenario, plan: &Plan, layout: &ChunkLayout) -> ChunkWork {
    layers_work(
        s,
        plan,
        layout,
        layout.first_layer,
        layout.num_layers,
        layout.has_embedding,
        layout.has_head,
    )
}

/// Parameters one rank holds for a chunk (embedding/head included when the chunk has them).
pub fn chunk_params(_s: &Scenario, _plan: &Plan, _layout: &ChunkLayout) -> ParamCount {
    unimplemented!("workload helper")
}

/// Model state one rank of `stage` holds, after sharding and offload.
pub fn state_bytes(_s: &Scenario, _plan: &Plan, _stage: u32) -> StateBytes {
    unimplemented!("workload helper")
}

/// The optimizer step of one rank of `stage` (memory-bound; on the host when offloaded).
pub fn optimizer_step(_s: &Scenario, _plan: &Plan, _stage: u32) -> ComputeOp {
    unimplemented!("workload helper")
}
