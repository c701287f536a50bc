//! PyTorch's context-parallel attention (`attention.cp_merge = "eager-fp32"`): the work its
//! `_templated_ring_attention` and `_templated_ring_attention_backward` do beyond the attention
//! kernels and the K/V exchange (pytorch/pytorch@0123248a484ffe531edb5098b986c1bac08cd296:
//! torch/distributed/tensor/experimental/_attention.py, the code of torchtitan's December 2024
//! runs):
//!
//! - Forward, per layer and micro batch, over `c` steps: K and V made contiguous once
//!   (`key.contiguous()`: the model passes them transposed), concatenated into the buffer
//!   passed on at each of the first `c - 1` steps (`torch.cat([key.flatten(),
//!   value.flatten()])`), each step's output and log-sum-exp upcast to fp32
//!   (`_SDPAMerger.step`, `convert_to_f32`), and from the second step on merged into the fp32
//!   accumulators by eager kernels: `out - sigmoid(block_lse - lse) * (out - block_out)` (five
//!   kernels: the difference of the statistics, the sigmoid, the difference of the outputs, the
//!   product, the update) and `lse - logsigmoid(lse - block_lse)` (three); at the end the
//!   output cast back (`results`).
//! - Backward: fp32 zeros for dQ, dK, dV, K and V made contiguous and concatenated per step as
//!   in the forward; each step's bf16 gradients added into fp32 accumulators (dQ every step;
//!   dK and dV at the first step, then, received from the previous rank, into their first
//!   half: `_partial_update`'s in-place add and `torch.cat`); after every step dK and dV are
//!   concatenated in fp32 and sent to the next rank (`permute_tensor`, an all-to-all with one
//!   non-empty split); the gradients cast back at the end.
//!
//! The ranks of the group do different merges (with causal load balancing, rank `r` merges
//! its whole output at `r` steps and half of it at the others); every step waits for the
//! group's exchange, so the busiest rank, the last (`c - 1` whole merges and `_partial_update`
//! every step), sets the pace and is what is priced. Bytes: each kernel reads its inputs and
//! writes its output once; `E_o` output elements, `E_kv` elements of each of K and V (at the
//! width the kernel sees), `L` log-sum-exp values, per rank:
//!
//! - forward: `8 c E_kv + (38 c - 26) E_o + 48 (c - 1) L` bytes in `10 c - 6` kernels;
//! - backward: `(10 c + 10) E_o + (50 c + 14) E_kv` bytes in `7 c + 4` kernels.
//!
//! Of the backward's `c` fp32 dK/dV transfers, the first `c - 1` run while the next step's
//! attention backward computes (a block of `E_kv` keys against the local queries takes far
//! longer than sending `8 E_kv` bytes to a neighbour); the last is waited for at the end
//! ([`grad_pass_bytes`]).

use super::dims::{mul, prod, Dims};

/// Output, K/V and log-sum-exp elements of one layer and micro batch on one rank:
/// `(E_o, E_kv, L)`.
fn elements(d: &Dims) -> (u64, u64, u64) {
    (
        d.sharded(mul(d.tokens, d.attn_out)),
        d.sharded(mul(d.tokens, d.kv_attention)),
        mul(d.head_batches(), d.s_local),
    )
}

/// Whether the merges run: more than one context-parallel rank under a framework that merges
/// in fp32 eagerly.
pub(crate) fn applies(d: &Dims) -> bool {
    d.c > 1 && d.cp_merge == crate::scenario::framework::CpMerge::EagerFp32
}

/// `(bytes, kernels)` of one layer's forward merges for one micro batch.
pub(crate) fn forward(d: &Dims) -> (u64, u32) {
    if !applies(d) {
        return (0, 0);
    }
    let (o, kv, l) = elements(d);
    let c = d.c;
    let bytes = prod(&[8, c, kv])
        .saturating_add(mul((38 * c).saturating_sub(26), o))
        .saturating_add(prod(&[48, c - 1, l]));
    (bytes, to_u32((10 * c).saturating_sub(6)))
}

/// `(bytes, kernels)` of one layer's backward accumulation for one micro batch.
pub(crate) fn backward(d: &Dims) -> (u64, u32) {
    if !applies(d) {
        return (0, 0);
    }
    let (o, kv, _) = elements(d);
    let c = d.c;
    let bytes = mul(10 * c + 10, o).saturating_add(mul(50 * c + 14, kv));
    (bytes, to_u32(7 * c + 4))
}

/// Bytes of the fp32 dK and dV one rank sends to the next per transfer.
pub(crate) fn grad_pass_bytes(d: &Dims) -> u64 {
    let (_, kv, _) = elements(d);
    prod(&[2, 4, kv])
}

/// What the merges hold while a layer's pass runs, beyond the attention's own tensors:
/// forward, the fp32 output accumulator, the step's output upcast and the two fp32
/// intermediates of the update (`4 x 4 E_o`); backward, fp32 dQ, the fp32 dK/dV accumulators,
/// the buffer received and the one concatenated to send (`4 E_o + 3 x 8 E_kv`).
pub(crate) fn transient_bytes(d: &Dims) -> (u64, u64) {
    if !applies(d) {
        return (0, 0);
    }
    let (o, kv, _) = elements(d);
    (mul(16, o), mul(4, o).saturating_add(mul(24, kv)))
}

fn to_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}
