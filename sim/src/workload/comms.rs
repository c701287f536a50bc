//! The collectives that tensor, context and expert parallelism add to a pass, per layer and
//! for the embedding and head, merged into one [`CommCall`] per (kind, group, buffer size).
//!
//! - Tensor parallel (Megatron, `t > 1`): per layer, two all-reduces of the hidden state
//!   (`b*s/c*h` elements) in the forward (after the attention output projection and after the
//!   MLP down projection) and two in the backward (their conjugates at the attention and MLP
//!   inputs). With sequence parallelism each all-reduce becomes an all-gather plus a
//!   reduce-scatter of the same full buffer. (Megatron's backward also re-gathers the
//!   sequence-parallel input for the weight gradient, overlapped with the dgrad; not modelled.)
//!   The vocab-parallel embedding ends in an all-reduce (a reduce-scatter with SP; its backward
//!   is an all-gather with SP, nothing without). The head all-gathers its input with SP (its
//!   backward reduce-scatters; without SP the backward all-reduces the input gradient), and
//!   the vocab-parallel cross entropy all-reduces three fp32 values per token (max, target
//!   logit, sum of exponentials).
//! - Context parallel (`c > 1`), by `cp_algorithm` (Transformer Engine's `cp_comm_type`,
//!   `transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py`):
//!   - all-gather: per layer, an all-gather of K and V (the gathered buffer is `2*b*s*kv/t`
//!     elements) in the forward; in the backward the same all-gather again (the forward saves
//!     only the rank's shard) and a reduce-scatter of their gradients
//!     (`AttnFuncWithCPAndKVAllGather.backward`: `gather_along_first_dim` of k and v, then
//!     `reduce_scatter_along_first_dim` of dk and dv).
//!     Under PyTorch's context parallelism (`attention.cp_merge = "eager-fp32"`) the
//!     gradients go around the ring in fp32 instead of a reduce-scatter; see
//!     `workload::cp_merge`.
//!   - ulysses: per layer, an all-to-all of Q, K and V from sequence to head sharding (send
//!     buffer `b*s/c*(h+2kv)/t` elements) and one of the output back (`b*s/c*h/t`) in the
//!     forward; in the backward the same two for the output's gradient and Q, K, V's
//!     (`AttnFuncWithCPAndQKVOA2A`, DeepSpeed-Ulysses, Jacobs et al. 2023).
//!   - ring: no collective; `cp-1` point-to-point steps per layer pass K and V blocks
//!     (`2*b*s/c*kv/t` elements) around the group in the forward, and K, V with their
//!     gradients (twice that) in the backward (`AttnFuncWithCPAndKVP2P`). See [`ring`].
//! - Expert parallel (`ep > 1`, MoE layers only): two all-to-alls (dispatch, combine) in the
//!   forward and two in the backward. One call's send buffer holds this rank's routed token
//!   copies: `b*s/c*top_k*h` elements, divided by `t` with sequence parallelism (each TP rank
//!   dispatches its own sequence shard).
//!
//! Buffers are in the activation dtype (bf16 for fp8 training).

use super::dims::{mul, prod, scale, to_u32, Dims};
use super::{CommCall, Ffn, LayerShape, RingPass};
use crate::ir::CollectiveKind;
use crate::plan::GroupKind;
use crate::scenario::CpAlgorithm;

/// Collectives of one block's forward and backward, one call each before merging.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct BlockComms {
    pub forward: Vec<CommCall>,
    pub backward: Vec<CommCall>,
}

impl BlockComms {
    pub fn add(&mut self, other: &BlockComms) {
        push_all(&mut self.forward, &other.forward);
        push_all(&mut self.backward, &other.backward);
    }

    pub fn repeat(&self, n: u64) -> BlockComms {
        BlockComms {
            forward: repeat(&self.forward, n),
            backward: repeat(&self.backward, n),
        }
    }
}

fn call(kind: CollectiveKind, group: GroupKind, bytes: u64) -> CommCall {
    CommCall {
        kind,
        group,
        bytes,
        calls: 1,
    }
}

/// Adds `c` to `list`, merging it into an existing entry of the same kind, group and size.
fn push(list: &mut Vec<CommCall>, c: CommCall) {
    if c.calls == 0 {
        return;
    }
    match list
        .iter_mut()
        .find(|x| (x.kind, x.group, x.bytes) == (c.kind, c.group, c.bytes))
    {
        Some(x) => x.calls = x.calls.saturating_add(c.calls),
        None => list.push(c),
    }
}

pub(crate) fn push_all(list: &mut Vec<CommCall>, other: &[CommCall]) {
    for c in other {
        push(list, c.clone());
    }
}

fn repeat(list: &[CommCall], n: u64) -> Vec<CommCall> {
    let n = to_u32(n);
    let mut out = Vec::with_capacity(list.len());
    for c in list {
        push(
            &mut out,
            CommCall {
                calls: c.calls.saturating_mul(n),
                ..c.clone()
            },
        );
    }
    out
}

/// One hidden-state buffer, full (before a sequence-parallel split).
fn hidden_bytes(d: &Dims) -> u64 {
    mul(d.hidden_elements(), d.act_bytes)
}

/// The two tensor-parallel reductions of a layer direction: all-reduces, or all-gather plus
/// reduce-scatter pairs with sequence parallelism. Under FP8 training the all-gathers carry the
/// GEMM inputs' FP8 casts (one byte per element): Transformer Engine quantizes before it
/// gathers, through NCCL or userbuffers (NVIDIA/TransformerEngine@d0067d0da6cb01811b8072a7d304f0e00344ce2b:
/// transformer_engine/pytorch/module/layernorm_linear.py, `gather_along_first_dim(ln_out,
/// tp_group, quantizer=quantizer)` after `ln_out = quantizer(ln_out)`), as torchao's
/// `Float8ColwiseParallel` does for torchtitan; the reduce-scatters reduce bf16 outputs.
fn tp_pairs(d: &Dims, pairs: u32, out: &mut Vec<CommCall>) {
    let bytes = hidden_bytes(d);
    let gathered = mul(d.hidden_elements(), d.gemm_in_bytes);
    for _ in 0..pairs {
        if d.sp {
            gather_scatter(out, GroupKind::Tp, gathered, bytes);
        } else {
            push(out, call(CollectiveKind::AllReduce, GroupKind::Tp, bytes));
        }
    }
}

/// An all-gather of `gathered` bytes and a reduce-scatter of `scattered` over `group`: the pair
/// around work split over a sequence-parallel group.
fn gather_scatter(out: &mut Vec<CommCall>, group: GroupKind, gathered: u64, scattered: u64) {
    push(out, call(CollectiveKind::AllGather, group, gathered));
    push(out, call(CollectiveKind::ReduceScatter, group, scattered));
}

/// Collectives of one layer of `shape` for one micro batch.
pub(crate) fn layer(d: &Dims, shape: LayerShape) -> BlockComms {
    let mut out = BlockComms::default();
    if d.t > 1 {
        // The attention's pair (or a Mamba mixer's), and the MLP's, except in an MoE layer
        // whose experts are whole on each rank (each rank routes its own sequence-parallel
        // tokens), where only shared experts (split over tp) need one.
        let mlp_pair = match (shape.mlp, d.moe) {
            (Ffn::None, _) => false,
            (Ffn::Moe, Some(m)) if d.experts_own_group() => m.shared_f > 0,
            _ => true,
        };
        let pairs = u32::from(shape.attention || shape.mamba) + u32::from(mlp_pair);
        tp_pairs(d, pairs, &mut out.forward);
        tp_pairs(d, pairs, &mut out.backward);
    }
    if !shape.attention {
        return moe_exchanges(d, shape, out);
    }
    if d.c > 1 {
        match d.cp_algorithm {
            CpAlgorithm::AllGather => {
                let kv = mul(
                    d.act_bytes,
                    mul(2, d.sharded(prod(&[d.b, d.s, d.kv_attention]))),
                );
                push(
                    &mut out.forward,
                    call(CollectiveKind::AllGather, GroupKind::Cp, kv),
                );
                // The backward gathers K and V again (the forward keeps only its shard).
                push(
                    &mut out.backward,
                    call(CollectiveKind::AllGather, GroupKind::Cp, kv),
                );
                if super::cp_merge::applies(d) {
                    // PyTorch passes the fp32 dK/dV around the ring instead; only the last
                    // transfer is waited for (`cp_merge`). `permute_tensor` is an all-to-all
                    // with one non-empty split: priced as the all-to-all whose per-rank
                    // traffic it is (a buffer of c/(c-1) times what one rank sends).
                    let sent = super::cp_merge::grad_pass_bytes(d);
                    let buffer = mul(sent, d.c) / (d.c - 1);
                    push(
                        &mut out.backward,
                        call(CollectiveKind::AllToAll, GroupKind::Cp, buffer),
                    );
                } else {
                    push(
                        &mut out.backward,
                        call(CollectiveKind::ReduceScatter, GroupKind::Cp, kv),
                    );
                }
            }
            CpAlgorithm::Ulysses => {
                let qkv = mul(
                    d.act_bytes,
                    d.sharded(mul(d.tokens, d.h.saturating_add(mul(2, d.kv_attention)))),
                );
                let o = mul(d.act_bytes, d.sharded(d.hidden_elements()));
                for list in [&mut out.forward, &mut out.backward] {
                    push(list, call(CollectiveKind::AllToAll, GroupKind::Cp, qkv));
                    push(list, call(CollectiveKind::AllToAll, GroupKind::Cp, o));
                }
            }
            CpAlgorithm::Ring => {}
        }
    }
    moe_exchanges(d, shape, out)
}

/// An MoE layer's expert-parallel all-to-alls and expert-tensor-parallel gathers, added to
/// `out`.
fn moe_exchanges(d: &Dims, shape: LayerShape, mut out: BlockComms) -> BlockComms {
    if let (Ffn::Moe, Some(m)) = (shape.mlp, d.moe) {
        // This rank's routed copies, in bytes; every member's call carries the busiest
        // member's (`workload::routing`).
        let own = mul(
            d.act_bytes,
            d.replicated(mul(scale(d.routed_tokens(), m.pace), d.h)),
        );
        if d.ep > 1 {
            for list in [&mut out.forward, &mut out.backward] {
                push(list, call(CollectiveKind::AllToAll, GroupKind::Ep, own));
                push(list, call(CollectiveKind::AllToAll, GroupKind::Ep, own));
            }
        }
        if d.experts_own_group() && d.et > 1 {
            // The expert-tensor-parallel group gathers the copies its members received before
            // the experts and reduce-scatters the experts' partial outputs after them
            // (Megatron-Core's `MoEAlltoAllTokenDispatcher`, megatron/core/transformer/moe/
            // token_dispatcher.py: `gather_from_sequence_parallel_region` over the expert tp
            // group after the all-to-all, `reduce_scatter_to_sequence_parallel_region` before
            // the combine, in the router probabilities' dtype, priced here in the activations');
            // the backward runs the same pair. Sized as the gathered buffer: `etp` members'
            // copies.
            let gathered = mul(own, d.et);
            for list in [&mut out.forward, &mut out.backward] {
                gather_scatter(list, GroupKind::Etp, gathered, gathered);
            }
        }
    }
    out
}

/// Ring context parallelism's K/V exchange for `layers` layers of one micro batch: `None`
/// unless the algorithm is ring over more than one rank. Forward: `cp-1` steps each passing
/// one rank's K and V block; backward: the same steps carrying K, V and their gradients.
pub(crate) fn ring(d: &Dims, layers: u64) -> Option<(RingPass, RingPass)> {
    if d.c <= 1 || d.cp_algorithm != CpAlgorithm::Ring || layers == 0 {
        return None;
    }
    let block = mul(
        d.act_bytes,
        mul(2, d.sharded(mul(d.tokens, d.kv_attention))),
    );
    let steps = to_u32(d.c - 1);
    Some((
        RingPass {
            steps,
            bytes: mul(block, layers),
        },
        RingPass {
            steps,
            bytes: mul(mul(2, block), layers),
        },
    ))
}

/// Collectives of the vocab-parallel input embedding.
pub(crate) fn embedding(d: &Dims) -> BlockComms {
    let mut out = BlockComms::default();
    if d.t > 1 {
        let bytes = hidden_bytes(d);
        if d.sp {
            push(
                &mut out.forward,
                call(CollectiveKind::ReduceScatter, GroupKind::Tp, bytes),
            );
            push(
                &mut out.backward,
                call(CollectiveKind::AllGather, GroupKind::Tp, bytes),
            );
        } else {
            push(
                &mut out.forward,
                call(CollectiveKind::AllReduce, GroupKind::Tp, bytes),
            );
        }
    }
    out
}

/// Collectives of the output head and the vocab-parallel cross entropy.
pub(crate) fn head(d: &Dims) -> BlockComms {
    let mut out = BlockComms::default();
    if d.t > 1 {
        let bytes = hidden_bytes(d);
        if d.sp {
            push(
                &mut out.forward,
                call(CollectiveKind::AllGather, GroupKind::Tp, bytes),
            );
            push(
                &mut out.backward,
                call(CollectiveKind::ReduceScatter, GroupKind::Tp, bytes),
            );
        } else {
            push(
                &mut out.backward,
                call(CollectiveKind::AllReduce, GroupKind::Tp, bytes),
            );
        }
        let stats = mul(4, d.tokens);
        for _ in 0..3 {
            push(
                &mut out.forward,
                call(CollectiveKind::AllReduce, GroupKind::Tp, stats),
            );
        }
    }
    out
}
