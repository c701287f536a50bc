//! The work inside one micro batch's pass through a chunk of layers: its GEMM shapes, FLOPs,
//! memory-bound bytes, the collectives tensor/context/expert parallelism adds, the activation
//! bytes it saves for backward, and the per-rank size of weights, gradients and optimizer
//! state. The schedule generators place this work in time; this module only sizes it.
//!
//! Formulas follow Megatron-LM (Narayanan et al. 2021) for FLOPs and Korthikanti et al. 2022
//! for activation memory; see docs/memory.md. `ComputeOp::flops` counts GEMM FLOPs only, as
//! Megatron does; softmax, norms and other elementwise work are memory-bound and appear in
//! `memory_bytes`. Sub-modules: `compute` (GEMMs, bytes, kernels), `comms` (TP/CP/EP
//! collectives), `activations` (saved bytes), `params` (parameters and model state),
//! `deepspeed` (model state as DeepSpeed counts it, `[memory] accounting = "deepspeed"`).

mod activations;
mod comms;
mod compute;
mod cp_merge;
mod deepspeed;
mod dims;
mod dispatch_buffers;
mod optimizer;
mod params;
pub mod routing;
mod shape;

use crate::ir::{CollectiveKind, ComputeOp, Phase};
use crate::plan::{ChunkLayout, GroupKind, Plan};
use crate::scenario::framework::SelectiveRecompute;
use crate::scenario::{MemoryAccounting, Recompute, Scenario};
use comms::BlockComms;
use compute::BlockParts;
use dims::{mul, prod, Dims};
pub use dispatch_buffers::{deepep_buffer_bytes, dispatch_buffer_bytes, held_for_the_run_bytes};
pub use optimizer::{optimizer_bytes_per_param, optimizer_passes, OptimizerPass};
pub use params::{
    activated_params, model_params, model_state_bytes, state_coefficients, StateCoefficients,
};
pub use shape::LayerCounts;
pub(crate) use shape::{Ffn, LayerShape};

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

/// Whether a backward collective can run beside the backward's weight-gradient half, as
/// Megatron-LM's asynchronous tensor-parallel communication does: the reduction of a column-
/// parallel layer's input gradient (an all-reduce, or a reduce-scatter with sequence
/// parallelism) is launched after its input-gradient GEMM and waited for after its
/// weight-gradient GEMM. A backward all-gather (the conjugate of a forward reduce-scatter)
/// brings the gradient the input-gradient GEMM needs and stays on the critical path.
pub fn overlaps_wgrad(c: &CommCall) -> bool {
    c.group == GroupKind::Tp
        && matches!(
            c.kind,
            CollectiveKind::AllReduce | CollectiveKind::ReduceScatter
        )
}

/// Whether a backward is split into its input- and weight-gradient halves with
/// [`overlaps_wgrad`] collectives beside the second: some collective overlaps, and every
/// collective is tensor-parallel (context- and expert-parallel exchanges sit inside the
/// backward). The schedule generator and the per-layer fit both ask this, so they model the
/// same overlap.
pub fn backward_comms_overlap_wgrad(comms: &[CommCall]) -> bool {
    comms.iter().any(overlaps_wgrad) && comms.iter().all(|c| c.group == GroupKind::Tp)
}

/// Ring context parallelism's exchange inside one pass: `steps` transfers of `bytes` (the
/// blocks of all the pass's layers) to the next rank of the cp group and as many from the
/// previous, each overlapped with the attention of the block already held. The schedule
/// splits the pass's attention kernel into `steps + 1` blocks around them
/// (`schedule::emit::compute`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingPass {
    pub steps: u32,
    pub bytes: u64,
}

/// One pass (forward, backward, ...) of one micro batch through some layers.
#[derive(Clone, Debug, PartialEq)]
pub struct PassWork {
    pub compute: ComputeOp,
    /// Collectives that the pass needs; on the critical path after `compute`. One entry per
    /// (kind, group, buffer size), in first-use order; layers' calls are merged into `calls`.
    pub comms: Vec<CommCall>,
    /// Ring context parallelism's K/V exchange, overlapped with the attention; `None` for
    /// other algorithms, without context parallelism, and for passes without attention.
    pub ring: Option<RingPass>,
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
    /// Activation bytes a recompute re-creates on top of the saved ones, live from the
    /// recompute until the backward after it ends: one layer's worth (the largest layer of the
    /// range), since Megatron recomputes and back-propagates layer by layer. 0 without
    /// recompute.
    pub recompute_bytes: u64,
    /// Bytes of the activation sent to the next virtual stage (the gradient coming back has
    /// the same size).
    pub boundary_bytes: u64,
    /// Parameters of the largest module of the range (per rank): what DeepSpeed's ZeRO-3
    /// holds gathered at a time (`[memory] accounting = "deepspeed"`).
    pub largest_module_params: u64,
    /// Adding this pass's weight gradients into the gradients of the micro batches before it,
    /// where the framework keeps per-parameter gradients (`memory.contiguous_grad_buffer =
    /// false`: PyTorch's `AccumulateGrad`, one in-place add per parameter, reading both and
    /// writing one); run after every backward of a chunk but its first. `None` where the
    /// weight-gradient GEMMs accumulate in place (Megatron-Core's fused accumulation into
    /// its main-gradient buffer).
    pub grad_accumulate: Option<ComputeOp>,
    /// Bytes a forward (or recompute) pass holds from its start to its end beyond the saved
    /// activations: an MoE layer's dispatch and combine buffers (one layer at a time); 0 for
    /// dense ranges.
    pub forward_transient_bytes: u64,
    /// Bytes the backward holds from its start to its end beyond the saved activations: the
    /// larger of the loss's gradients and casts of the logits on the head's chunk (the
    /// framework's `memory.loss_backward_bytes` per logit element) and an MoE layer's
    /// dispatch and combine buffers of the gradients.
    pub backward_transient_bytes: u64,
}

/// Parameters held by one rank for some layers, after tp/ep sharding and before ZeRO.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ParamCount {
    pub dense: u64,
    pub expert: u64,
}

impl ParamCount {
    /// Both counts added.
    pub fn plus(self, other: ParamCount) -> ParamCount {
        ParamCount {
            dense: self.dense.saturating_add(other.dense),
            expert: self.expert.saturating_add(other.expert),
        }
    }
}

/// Per-rank bytes of model state after ZeRO/FSDP sharding and offload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateBytes {
    pub weights_bytes: u64,
    pub grads_bytes: u64,
    pub optimizer_bytes: u64,
    /// State moved to host memory by offload (not counted above).
    pub host_bytes: u64,
    /// Host memory that building the model needs before the step's state exists (DeepSpeed
    /// accounting only: its fp32 model on the host); 0 under Megatron accounting.
    pub host_init_bytes: u64,
}

/// How many of layers `first_layer .. first_layer + num_layers` of `layout` recompute, counted
/// from the first of the range: all of them under a recompute policy, none without, and with
/// `recompute_layers = N` (full recompute) those among the first N layers of the chunk, as
/// Megatron-Core's block method recomputes the first `recompute_num_layers` layers of each
/// model chunk (NVIDIA/Megatron-LM `megatron/core/transformer/transformer_block.py`,
/// `_checkpointed_forward`, `recompute_method == 'block'`).
pub fn recomputed_layers(
    s: &Scenario,
    layout: &ChunkLayout,
    first_layer: u32,
    num_layers: u32,
) -> u32 {
    match (s.training.recompute, s.training.recompute_layers) {
        (Recompute::None, _) => 0,
        (Recompute::Full, Some(limit)) => layout
            .first_layer
            .saturating_add(limit)
            .saturating_sub(first_layer)
            .min(num_layers),
        _ => num_layers,
    }
}

/// Work for layers `first_layer .. first_layer + num_layers` of `layout`, plus the embedding
/// and/or head when asked. Used whole for chunk granularity, per layer for layer granularity
/// and for splitting the last backward into gradient buckets.
///
/// All sizes are per rank and per micro batch. `recompute` is `None` when the policy is
/// "none" or the range holds no layers (the embedding and head are never recomputed).
pub fn layers_work(
    s: &Scenario,
    plan: &Plan,
    layout: &ChunkLayout,
    first_layer: u32,
    num_layers: u32,
    embedding: bool,
    head: bool,
) -> ChunkWork {
    let load = routing::LoadClasses::new(s).busiest();
    layers_work_at(
        s,
        plan,
        layout,
        (first_layer, num_layers),
        (embedding, head),
        load,
    )
}

/// What the work of a layer range depends on besides the scenario: how many of its layers
/// are dense and how many MoE, how many of each recompute (the first of the range), how many
/// of it and of its recomputed part use a sliding window, whether it carries the embedding
/// and the head, and the routing load of its rank. Not where it starts: two ranges with equal
/// keys have equal work ([`range_work`] reads nothing else), so a cache of work can be keyed
/// by it and one layer's answer serves every layer like it.
#[derive(Clone, Copy, Debug)]
pub struct RangeKey {
    pub layers: LayerCounts,
    pub recomputed: LayerCounts,
    pub windowed: u64,
    pub recomputed_windowed: u64,
    pub embedding: bool,
    pub head: bool,
    pub load: routing::ExpertLoad,
}

impl RangeKey {
    /// Layers `first_layer .. first_layer + num_layers` of `layout`, with the embedding and
    /// head as asked, on a rank whose routed experts carry `load`.
    pub fn of(
        s: &Scenario,
        layout: &ChunkLayout,
        (first_layer, num_layers): (u32, u32),
        (embedding, head): (bool, bool),
        load: routing::ExpertLoad,
    ) -> RangeKey {
        let first = u64::from(first_layer);
        // The layers that recompute are the first `r` of the range (module doc of
        // `recomputed_layers`); the rest keep every activation.
        let r = u64::from(recomputed_layers(s, layout, first_layer, num_layers));
        let windowed = |n: u64| {
            s.model
                .sliding_window
                .map_or(0, |w| w.windowed_layers_in(first, n))
        };
        RangeKey {
            layers: LayerCounts::of(&s.model, first, u64::from(num_layers)),
            recomputed: LayerCounts::of(&s.model, first, r),
            windowed: windowed(u64::from(num_layers)),
            recomputed_windowed: windowed(r),
            embedding,
            head,
            load,
        }
    }

    /// Every field, the load by its bits: equal tuples, equal keys.
    #[allow(clippy::type_complexity)]
    fn fields(&self) -> (LayerCounts, LayerCounts, u64, u64, bool, bool, (u64, u64)) {
        (
            self.layers,
            self.recomputed,
            self.windowed,
            self.recomputed_windowed,
            self.embedding,
            self.head,
            self.load.key(),
        )
    }
}

impl PartialEq for RangeKey {
    fn eq(&self, other: &Self) -> bool {
        self.fields() == other.fields()
    }
}

impl Eq for RangeKey {}

impl PartialOrd for RangeKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for RangeKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.fields().cmp(&other.fields())
    }
}

/// [`layers_work`] on a rank whose routed experts carry `load` (see [`routing`]);
/// `layers_work` sizes the busiest rank.
pub fn layers_work_at(
    s: &Scenario,
    _plan: &Plan,
    layout: &ChunkLayout,
    range: (u32, u32),
    ends: (bool, bool),
    load: routing::ExpertLoad,
) -> ChunkWork {
    range_work(s, &RangeKey::of(s, layout, range, ends, load))
}

/// The work of a layer range of `s` with key `key`.
pub fn range_work(s: &Scenario, key: &RangeKey) -> ChunkWork {
    let d = Dims::new(s).with_load(key.load);
    let dtype = s.training.precision;
    let recompute = s.training.recompute;
    let (embedding, head) = (key.embedding, key.head);
    let (n, r) = (key.layers.all(), key.recomputed.all());
    let n_moe = key.layers.moe_layers();
    let (mut layers, layer_comms) = sum_layers(&d, key.layers);
    layers.window_layers(key.windowed);
    let layer_activations = key
        .layers
        .shapes()
        .zip(key.recomputed.shapes())
        .filter(|&((_, count), _)| count > 0)
        .fold(0u64, |acc, ((shape, count), (_, recomputed))| {
            acc.saturating_add(mul(activations::layer(&d, recompute, shape), recomputed))
                .saturating_add(mul(
                    activations::layer(&d, Recompute::None, shape),
                    count - recomputed,
                ))
        });

    let mut all = BlockParts::default();
    let mut all_comms = BlockComms::default();
    let mut activation_bytes = layer_activations;
    if embedding {
        let grad_bytes = params::state_coefficients(&s.training).grad_bytes;
        all.add(&compute::embedding(&d, grad_bytes));
        all_comms.add(&comms::embedding(&d));
        activation_bytes = activation_bytes.saturating_add(activations::embedding(&d));
    }
    all.add(&layers);
    all_comms.add(&layer_comms);
    if head {
        all.add(&compute::head(&d));
        all_comms.add(&comms::head(&d));
        let loss_logits_bytes = s.training.framework.memory.loss_logits_bytes;
        activation_bytes =
            activation_bytes.saturating_add(activations::head(&d, loss_logits_bytes));
        // Multi-token prediction after the head: per module the embedding of the shifted
        // tokens, two norms, the `2h x h` projection, one layer (MoE when the model has
        // experts) and the head and loss again. The module's layer keeps its activations (it
        // is not recomputed).
        let mtp = u64::from(s.model.mtp_layers);
        if mtp > 0 {
            let moe = s.model.moe.is_some();
            let grad_bytes = params::state_coefficients(&s.training).grad_bytes;
            let mut module = compute::embedding(&d, grad_bytes);
            module.add(&compute::mtp_projection(&d));
            module.add(&compute::layer(&d, LayerShape::transformer(moe)));
            module.add(&compute::head(&d));
            all.add(&module.repeat(mtp));
            let mut module_comms = comms::embedding(&d);
            module_comms.add(&comms::layer(&d, LayerShape::transformer(moe)));
            module_comms.add(&comms::head(&d));
            all_comms.add(&module_comms.repeat(mtp));
            let saved = activations::embedding(&d)
                .saturating_add(activations::mtp_projection(&d))
                .saturating_add(activations::layer(
                    &d,
                    Recompute::None,
                    LayerShape::transformer(moe),
                ))
                .saturating_add(activations::head(&d, loss_logits_bytes));
            activation_bytes = activation_bytes.saturating_add(mul(mtp, saved));
        }
    }

    let recompute_bytes = match (recompute, r) {
        (Recompute::None, _) | (_, 0) => 0,
        _ => key
            .recomputed
            .shapes()
            .filter(|&(_, count)| count > 0)
            .map(|(shape, _)| {
                activations::layer(&d, Recompute::None, shape)
                    .saturating_sub(activations::layer(&d, recompute, shape))
            })
            .max()
            .unwrap_or(0),
    };
    // Only a fused attention kernel is split into ring blocks; unfused attention runs the
    // gathered form.
    let (ring_fwd, ring_bwd) = match comms::ring(&d, key.layers.attention_layers()) {
        Some((f, b)) if d.flash => (Some(f), Some(b)),
        _ => (None, None),
    };
    let mut backward = all.backward_input.clone();
    backward.add(&all.backward_weight);
    let recompute = match (recompute, r) {
        (Recompute::None, _) | (_, 0) => None,
        (Recompute::Selective, _) => Some(PassWork {
            // Only the attention-core policy runs the attention (and its ring) again, when
            // `recompute_modules` has it; an MoE block that recomputes whole runs its
            // collectives again too.
            ring: match d.selective {
                SelectiveRecompute::AttentionCore if d.modules.core_attn => ring_fwd,
                _ => None,
            },
            compute: layers.selective.into_op(Phase::Recompute, dtype),
            comms: match (d.selective, d.modules.moe) {
                (SelectiveRecompute::AttentionCore, true) => {
                    comms::layer(&d, LayerShape::block(crate::scenario::Block::Moe))
                        .repeat(key.recomputed.moe_layers())
                        .forward
                }
                _ => Vec::new(),
            },
        }),
        (Recompute::Full, _) if r == n => Some(PassWork {
            compute: layers.forward.into_op(Phase::Recompute, dtype),
            comms: layer_comms.forward,
            ring: ring_fwd,
        }),
        (Recompute::Full, _) => {
            // Block recompute: only the first `r` layers of the range run again.
            let (mut part, part_comms) = sum_layers(&d, key.recomputed);
            part.window_layers(key.recomputed_windowed);
            Some(PassWork {
                compute: part.forward.into_op(Phase::Recompute, dtype),
                comms: part_comms.forward,
                ring: match comms::ring(&d, key.recomputed.attention_layers()) {
                    Some((f, _)) if d.flash => Some(f),
                    _ => None,
                },
            })
        }
    };
    ChunkWork {
        forward: PassWork {
            compute: all.forward.into_op(Phase::Forward, dtype),
            comms: all_comms.forward,
            ring: ring_fwd,
        },
        backward: PassWork {
            compute: backward.into_op(Phase::Backward, dtype),
            comms: all_comms.backward.clone(),
            ring: ring_bwd,
        },
        backward_input: PassWork {
            compute: all.backward_input.into_op(Phase::BackwardInput, dtype),
            comms: all_comms.backward,
            ring: ring_bwd,
        },
        backward_weight: all.backward_weight.into_op(Phase::BackwardWeight, dtype),
        recompute,
        activation_bytes,
        recompute_bytes,
        boundary_bytes: activations::boundary(&d),
        largest_module_params: params::range_largest_module(s, key.layers, embedding, head),
        grad_accumulate: grad_accumulate(s, &d, key.layers, (embedding, head)),
        forward_transient_bytes: if n_moe > 0 {
            activations::moe_buffers(&d)
        } else {
            0
        }
        .max(cp_merge::transient_bytes(&d).0),
        backward_transient_bytes: {
            let loss = if head {
                activations::loss_backward(&d, s.training.framework.memory.loss_backward_bytes)
            } else {
                0
            };
            let moe = if n_moe > 0 {
                activations::moe_buffers(&d)
            } else {
                0
            };
            loss.max(moe).max(cp_merge::transient_bytes(&d).1)
        },
    }
}

/// The compute and collectives of `counts` layers: the transformer layers' always (none of a
/// kind adds its empty work), a hybrid model's blocks where the range has them.
fn sum_layers(d: &Dims, counts: LayerCounts) -> (BlockParts, BlockComms) {
    let (mut parts, mut comms) = (BlockParts::default(), BlockComms::default());
    for (shape, count) in counts.shapes() {
        if count == 0 && !shape.is_transformer() {
            continue;
        }
        parts.add(&compute::layer(d, shape).repeat(count));
        comms.add(&comms::layer(d, shape).repeat(count));
    }
    (parts, comms)
}

/// [`ChunkWork::grad_accumulate`] for a layer range: one add kernel per parameter tensor
/// (each linear weight, two norms per layer, the embedding, the head and the final norm), over
/// the range's parameters on this rank in the gradient dtype (read twice, written once).
fn grad_accumulate(
    s: &Scenario,
    d: &Dims,
    layers: LayerCounts,
    (embedding, head): (bool, bool),
) -> Option<ComputeOp> {
    if s.training.framework.memory.contiguous_grad_buffer {
        return None;
    }
    let p = params::counted_range_params(s, layers, embedding, head);
    let elements = p.dense.saturating_add(p.expert);
    if elements == 0 {
        return None;
    }
    let grad_bytes = params::state_coefficients(&s.training).grad_bytes;
    // Each layer's weight tensors and its norms (one per block).
    let kernels = layers
        .shapes()
        .filter(|&(_, count)| count > 0)
        .fold(0u64, |acc, (shape, count)| {
            let tensors = compute::layer_weight_tensors(d, shape).saturating_add(shape.sublayers());
            acc.saturating_add(mul(count, tensors))
        })
        .saturating_add(u64::from(embedding))
        .saturating_add(2 * u64::from(head));
    Some(ComputeOp {
        phase: Phase::Backward,
        dtype: s.training.precision,
        gemms: Vec::new().into(),
        attention: None,
        flops: 0,
        memory_bytes: prod(&[3, grad_bytes, elements]),
        kernels: dims::to_u32(kernels),
        sms_reserved: 0,
        host_syncs: Default::default(),
    })
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
/// With tied embeddings the head's chunk holds its own copy unless it also holds the
/// embedding (see [`params`]).
pub fn chunk_params(s: &Scenario, _plan: &Plan, layout: &ChunkLayout) -> ParamCount {
    params::range_params(
        s,
        u64::from(layout.first_layer),
        u64::from(layout.num_layers),
        layout.has_embedding,
        layout.has_head,
    )
}

/// The parameters one rank holds for a layer range of `layers` (and the embedding and head
/// as asked): [`chunk_params`] by what the range holds, not where it starts.
pub fn counted_params(
    s: &Scenario,
    layers: LayerCounts,
    embedding: bool,
    head: bool,
) -> ParamCount {
    params::counted_range_params(s, layers, embedding, head)
}

/// Parameters one rank of `stage` holds (all its chunks); zero for a stage the plan lacks.
pub fn stage_params(s: &Scenario, plan: &Plan, stage: u32) -> ParamCount {
    stage_params_by(plan, stage, |layout| chunk_params(s, plan, layout))
}

/// [`stage_params`] with each chunk's parameters from `chunk` (a caller that remembers them).
pub fn stage_params_by(
    plan: &Plan,
    stage: u32,
    chunk: impl Fn(&ChunkLayout) -> ParamCount,
) -> ParamCount {
    plan.chunks
        .get(stage as usize)
        .into_iter()
        .flatten()
        .map(chunk)
        .fold(ParamCount::default(), ParamCount::plus)
}

/// Model state one rank of `stage` holds, after sharding and offload, and under DeepSpeed
/// accounting the host memory its initialisation needs.
pub fn state_bytes(s: &Scenario, plan: &Plan, stage: u32) -> StateBytes {
    state_bytes_of(s, plan, stage, stage_params(s, plan, stage))
}

/// [`state_bytes`] of a stage whose rank holds `params` ([`stage_params`]), for a caller that
/// has them already.
pub fn state_bytes_of(s: &Scenario, plan: &Plan, stage: u32, params: ParamCount) -> StateBytes {
    let (dense_dp, expert_dp) = params::dp_sizes(s);
    let mut out = model_state_bytes(s, params, dense_dp, expert_dp);
    if s.memory.accounting == MemoryAccounting::Deepspeed {
        let largest = plan
            .chunks
            .get(stage as usize)
            .into_iter()
            .flatten()
            .map(|c| {
                let layers =
                    LayerCounts::of(&s.model, u64::from(c.first_layer), u64::from(c.num_layers));
                params::range_largest_module(s, layers, c.has_embedding, c.has_head)
            })
            .max()
            .unwrap_or(0);
        out.host_init_bytes = deepspeed::init_host_bytes(s, params, largest);
    }
    out
}

/// Fraction of every host allocation held on top of it: DeepSpeed's estimator's 1.5 buffer
/// factor under DeepSpeed accounting, none under Megatron accounting.
pub fn host_slack_fraction(s: &Scenario) -> f64 {
    match s.memory.accounting {
        MemoryAccounting::Megatron => 0.0,
        MemoryAccounting::Deepspeed => deepspeed::HOST_SLACK_FRACTION,
    }
}

/// The parameters whose optimizer state one rank of `stage` updates: its ZeRO shard.
fn optimizer_shard_of(s: &Scenario, plan: &Plan, stage: u32) -> u64 {
    let (dense_dp, expert_dp) = params::dp_sizes(s);
    params::optimizer_shard(s, stage_params(s, plan, stage), dense_dp, expert_dp)
}

/// The optimizer step of one rank of `stage` on its GPU (memory-bound; offloaded, the host
/// runs it instead: [`offloaded_step`]). It updates this rank's ZeRO shard; the bytes per
/// parameter are the sum of the step's memory passes ([`optimizer_passes`]: for fp16, Megatron's
/// grad copy, unscale, norm, Adam and copy back). A fused update is one multi-tensor kernel
/// per layer plus the norm and the update's setup; an unfused one (`foreach`, `for-loop`) a
/// kernel per pass and layer.
pub fn optimizer_step(s: &Scenario, plan: &Plan, stage: u32) -> ComputeOp {
    let shard = optimizer_shard_of(s, plan, stage);
    let passes = optimizer_passes(&s.training, &state_coefficients(&s.training));
    let per_param = optimizer::passes_bytes(&passes);
    let layers = plan
        .chunks
        .get(stage as usize)
        .into_iter()
        .flatten()
        .fold(0u32, |acc, c| acc.saturating_add(c.num_layers));
    ComputeOp {
        attention: None,
        phase: Phase::Optimizer,
        dtype: s.training.precision,
        gemms: Vec::new().into(),
        flops: 0,
        memory_bytes: mul(shard, per_param),
        kernels: if s.training.optimizer_kernel().fuses_update() {
            layers.saturating_add(2)
        } else {
            u32::try_from(passes.len())
                .unwrap_or(u32::MAX)
                .saturating_mul(layers.max(1))
        },
        sms_reserved: 0,
        host_syncs: Default::default(),
    }
}

/// The optimizer step of one rank of `stage` run by the host (`training.offload`, as
/// ZeRO-Offload runs it: Ren et al. 2021, arXiv 2101.06840, section 4.1: the 16-bit gradients
/// go to the host, the CPU updates the fp32 state there, the 16-bit parameters come back).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffloadedStep {
    /// Host memory the update reads and writes: the optimizer state (fp32 master and
    /// moments) read and written back, the gradients read and the updated parameters written
    /// in the weight dtype.
    pub update_bytes: u64,
    /// The updated parameters copied back to the GPU (this rank's ZeRO shard); 0 when the
    /// parameters are offloaded too (they stay on the host, and each gather fetches them).
    pub params_bytes: u64,
}

/// [`OffloadedStep`] of one rank of `stage`; `None` when the optimizer runs on the GPU.
pub fn offloaded_step(s: &Scenario, plan: &Plan, stage: u32) -> Option<OffloadedStep> {
    if s.training.offload == crate::scenario::Offload::None {
        return None;
    }
    let shard = optimizer_shard_of(s, plan, stage);
    let k = state_coefficients(&s.training);
    let per_param = k
        .optimizer_bytes
        .saturating_mul(2)
        .saturating_add(k.weight_bytes.saturating_mul(2));
    let params_stay = s.training.offload == crate::scenario::Offload::Params;
    Some(OffloadedStep {
        update_bytes: mul(shard, per_param),
        params_bytes: if params_stay {
            0
        } else {
            mul(shard, k.weight_bytes)
        },
    })
}

#[cfg(test)]
mod tests;
