//! Activation memory: the bytes one micro batch leaves saved for its backward, per layer and
//! for the embedding and head, after the recompute policy; and the size of the activation that
//! crosses a pipeline boundary.
//!
//! Follows Korthikanti et al. 2022 (Table 2, section 4) tensor by tensor, so that with 16-bit
//! activations, `f = 4h` and `g = a` it reproduces `s*b*h*(34 + 5*a*s/h)` and its tensor /
//! sequence parallel and recompute variants exactly, and generalises to GQA, gated MLPs, other
//! dtypes, context parallelism and MoE. Per layer, with `T = b*s/c` tokens on this rank:
//!
//! | tensor | elements | split over t |
//! |---|---|---|
//! | layer norm 1 input, 2 input | `T*h` each | only with SP |
//! | QKV input, MLP input (GEMM inputs) | `T*h` each | only with SP |
//! | attention and MLP dropout masks (1 byte) | `T*h` each | only with SP |
//! | Q; K and V | `T*q`; `T*kv` each | yes |
//! | output-projection input (GEMM input) | `T*q` | yes |
//! | MLP up output (GeLU input) | `T*f` (`2*T*f` gated) | yes |
//! | MLP down input (GEMM input) | `T*f` | yes |
//!
//! Under multi-head latent attention Q is `T*heads*(nope+rope)`, K and V together
//! `T*heads*(nope+rope+v)`, the output-projection input `T*heads*v`, and the compressed query
//! and key/value (`T*(q_lora + kv_lora)`) are saved twice, as their norm's input and as their
//! up-projection's input, whole on every tensor-parallel rank.
//! | softmax output, dropout mask (1 byte), dropout output | `b*a*(s/c)*s` each | yes |
//!
//! `q = heads * head_dim` and `kv = kv_heads * head_dim` (`q = h` and `kv = h*g/a` when the
//! head width is `h / a`).
//!
//! Bytes per element: the activation dtype (2 for bf16/fp16, 4 for fp32, 2 for fp8 training:
//! norms, residuals and attention stay bf16), except GEMM inputs, which fp8 training keeps as
//! 1-byte fp8 casts (Transformer Engine), and dropout masks (1 byte).
//!
//! Flash attention saves no score matrices, only fp32 softmax statistics (`4*b*a/t*(s/c)`
//! bytes). Selective recompute saves nothing of the attention core. Full recompute saves only
//! the layer input (`T*h`, split over t with SP). Context parallelism divides the sequence of
//! every tensor; a rank's score matrices are `(s/c) x s`.
//!
//! Selective recompute that saves every second matmul (torchtitan's per-op policy, the
//! framework's `recompute.selective = "every-second-matmul"`) keeps the layer input (the
//! checkpoint region's input, `T*h`, split over t only with SP), the outputs of the saved
//! matmuls (the 1st, 3rd, ... of the layer's projections in forward order, in the activation
//! dtype), the attention kernel's output (`T*q`) and its fp32 softmax statistics, and, in MoE
//! layers, the router's fp32 probabilities. Everything else is recomputed.
//!
//! MoE layers (an estimate; Korthikanti covers dense layers only): the MLP rows apply to the
//! `T*top_k` routed token copies at the expert width, and once more to the `T` tokens at the
//! shared experts' summed width when the model has them; the experts' input copies are whole on
//! every TP rank, and the router keeps fp32 probabilities (`T*experts`).

use super::compute::{every_second_linear, mlps_of, router_of};
use super::dims::{div_ceil, mul, prod, Dims};
use super::{Ffn, LayerShape};
use crate::scenario::framework::SelectiveRecompute;
use crate::scenario::{Recompute, RecomputeModules};

/// Bytes one micro batch saves in one layer of `shape`.
pub(crate) fn layer(d: &Dims, recompute: Recompute, shape: LayerShape) -> u64 {
    let x = d.hidden_elements();
    let (act, gin) = (d.act_bytes, d.gemm_in_bytes);
    if recompute == Recompute::Full {
        return mul(act, d.replicated(x));
    }
    if recompute == Recompute::Selective && d.selective == SelectiveRecompute::EverySecondMatmul {
        return every_second_matmul_saved(d, shape);
    }
    // Under selective recompute (the attention-core policy) the modules it runs again keep
    // less (`recompute_modules`, module doc); without it every module keeps its own.
    let modules = match recompute {
        Recompute::Selective => d.modules,
        _ => RecomputeModules::default(),
    };
    // Replicated under plain TP, per norm-and-residual sublayer: the norm's input, the GEMM
    // input after it (QKV, a Mamba mixer's in_proj, the MLP or router), the residual's dropout
    // mask. A norm that is a module of its own and recomputes keeps no output.
    let per_token_rep = mul(shape.sublayers(), act.saturating_add(gin).saturating_add(1));
    let recomputed_norms = match modules.layernorm {
        true => u64::from(shape.mlp == Ffn::Moe) + u64::from(shape.attention && d.mla.is_some()),
        false => 0,
    };
    let mut bytes = mul(
        per_token_rep.saturating_sub(mul(recomputed_norms, gin)),
        d.replicated(x),
    );
    if shape.attention {
        // Attention: Q, K, V and the output-projection input.
        let q = d.q_elements();
        let qkv = mul(
            act,
            d.sharded(q)
                .saturating_add(mul(2, d.sharded(mul(d.tokens, d.kv_attention)))),
        );
        // Latent attention's up-projections, recomputed, keep no Q, K or V.
        let qkv = match (modules.mla_up_proj, d.mla) {
            (true, Some(_)) => 0,
            _ => qkv,
        };
        bytes = bytes
            .saturating_add(qkv)
            .saturating_add(mul(gin, d.sharded(mul(d.tokens, d.attn_out))));
        if let Some(mla) = d.mla {
            // The compressed query and key/value: each norm's input and each up-projection's
            // input, whole on every tensor-parallel rank.
            let latent = mul(d.tokens, mla.q_lora_rank.saturating_add(mla.kv_lora_rank));
            bytes = bytes.saturating_add(mul(act.saturating_add(gin), latent));
        }
        bytes = bytes.saturating_add(match (recompute, d.flash) {
            (Recompute::Selective, _) if modules.core_attn => 0,
            (_, true) => prod(&[4, d.head_batches(), d.s_local]),
            (_, false) => mul(d.score_elements(), mul(2, act).saturating_add(1)),
        });
    }
    if let (true, Some(mamba)) = (shape.mamba, d.mamba) {
        bytes = bytes.saturating_add(mamba_saved(d, &mamba));
    }
    // An MoE block that recomputes whole keeps its input (the norm's output) and nothing
    // inside it; a dense MLP that recomputes keeps nothing inside it.
    let whole_mlp = match shape.mlp {
        Ffn::Moe => modules.moe,
        Ffn::Dense => modules.mlp,
        Ffn::None => false,
    };
    if whole_mlp {
        if shape.mlp == Ffn::Moe {
            bytes = bytes
                .saturating_sub(mul(gin, d.replicated(x)))
                .saturating_add(mul(act, d.replicated(x)));
        }
        return bytes.saturating_add(weight_copies(
            d,
            super::compute::layer_weight_elements(d, shape),
        ));
    }
    // MLPs.
    if let (Ffn::Moe, Some(m)) = (shape.mlp, d.moe) {
        let router = prod(&[4, m.experts, d.replicated(d.tokens)]);
        let copies = prod(&[gin, d.expert_tokens(), d.h]);
        bytes = bytes.saturating_add(router).saturating_add(copies);
    }
    bytes = bytes.saturating_add(weight_copies(
        d,
        super::compute::layer_weight_elements(d, shape),
    ));
    // In an MoE layer the routed experts come first, the shared ones after: the routed
    // experts' recomputed activation keeps no down-projection input, recomputed shared
    // experts keep nothing.
    let moe = shape.mlp == Ffn::Moe;
    mlps_of(d, shape)
        .iter()
        .enumerate()
        .fold(bytes, |acc, (i, mlp)| match (moe, i) {
            (true, 1..) if modules.shared_experts => acc,
            (true, 0) if modules.moe_act => {
                acc.saturating_add(mul(act, mul(mlp.tokens, mlp.up(d.gated))))
            }
            _ => acc
                .saturating_add(mul(act, mul(mlp.tokens, mlp.up(d.gated))))
                .saturating_add(prod(&[gin, mlp.tokens, mlp.f])),
        })
}

/// What a Mamba mixer saves beyond its norm's and `in_proj`'s inputs: `in_proj`'s output (`z`,
/// `x`, `B`, `C`, `dt`), which the combined convolution-and-scan function keeps instead of the
/// convolution's output and the chunk states (it runs them again in the backward), the scan's
/// output (the gated norm's input) with the norm's fp32 reciprocal deviation per group, and
/// `out_proj`'s input (mamba_ssm's `MambaSplitConv1dScanCombinedFn`, which Megatron-Core's
/// `MambaMixer` trains with).
fn mamba_saved(d: &Dims, mamba: &crate::scenario::Mamba) -> u64 {
    let t = d.tokens;
    let inner = d.sharded(mul(t, mamba.inner()));
    mul(d.act_bytes, d.sharded(mul(t, mamba.in_proj_width())))
        .saturating_add(mul(d.act_bytes, inner))
        .saturating_add(prod(&[4, t, d.sharded(mamba.groups)]))
        .saturating_add(mul(d.gemm_in_bytes, inner))
}

/// What one layer saves under the every-second-matmul policy (module doc).
fn every_second_matmul_saved(d: &Dims, shape: LayerShape) -> u64 {
    let router = router_of(d, shape);
    let probs = match (router, d.moe) {
        (Some(_), Some(m)) => prod(&[4, m.experts, d.replicated(d.tokens)]),
        _ => 0,
    };
    let (saved, _) = every_second_linear(d, shape, router);
    let outputs = saved
        .iter()
        .fold(0u64, |acc, g| acc.saturating_add(mul(g.m, g.n)));
    let input = d.replicated(d.hidden_elements());
    let (attention_out, stats) = match shape.attention {
        true => (
            d.sharded(mul(d.tokens, d.attn_out)),
            prod(&[4, d.head_batches(), d.s_local]),
        ),
        false => (0, 0),
    };
    mul(
        d.act_bytes,
        input.saturating_add(outputs).saturating_add(attention_out),
    )
    .saturating_add(stats)
    .saturating_add(probs)
}

/// Bytes a multi-token prediction module saves besides its embedding, layer and head: the
/// two norms' inputs (activation dtype) and the projection's `2h`-wide input (GEMM input).
pub(crate) fn mtp_projection(d: &Dims) -> u64 {
    let x = d.replicated(d.hidden_elements());
    mul(
        x,
        mul(2, d.act_bytes).saturating_add(mul(2, d.gemm_in_bytes)),
    )
}

/// Extra bytes the input embedding saves: its dropout mask (Korthikanti section 4.3).
pub(crate) fn embedding(d: &Dims) -> u64 {
    d.replicated(d.hidden_elements())
}

/// Extra bytes the output head saves: the final layer norm's input, the output layer's input
/// and what the loss keeps of the logits, `loss_logits_bytes` per element (the framework
/// file's `memory.loss_logits_bytes`; 4 for the fp32 softmax, Korthikanti section 4.3:
/// `4*s*b*h/t*(1 + v/h)` with SP and 16-bit activations).
pub(crate) fn head(d: &Dims, loss_logits_bytes: u64) -> u64 {
    let x = d.replicated(d.hidden_elements());
    let norm_and_input = mul(x, d.act_bytes.saturating_add(d.gemm_in_bytes));
    let logits = prod(&[loss_logits_bytes, d.tokens, div_ceil(d.v, d.t)]);
    norm_and_input
        .saturating_add(logits)
        .saturating_add(weight_copies(d, super::compute::head_weight_elements(d)))
}

/// What an MoE layer's pass holds beyond what it saves, while its tokens travel: the send
/// buffer of the dispatch (the permuted copies) and of the combine (the experts' outputs), one
/// copy of the rank's routed tokens each in the activation dtype, capacity padding included
/// (Megatron-Core's `alltoall` dispatcher permutes into one buffer before the all-to-all and
/// the experts write another before the all-to-all back: NVIDIA/Megatron-LM@d98e8a64dd
/// megatron/core/transformer/moe/token_dispatcher.py `dispatch_preprocess`,
/// `combine_preprocess`). 0 without experts.
pub(crate) fn moe_buffers(d: &Dims) -> u64 {
    match d.moe {
        Some(_) => prod(&[2, d.act_bytes, d.expert_tokens(), d.h]),
        None => 0,
    }
}

/// What the loss's backward holds beyond the saved activations: `per_logit` bytes per logit
/// element of this rank (`tokens x vocab/t`).
pub(crate) fn loss_backward(d: &Dims, per_logit: u64) -> u64 {
    prod(&[per_logit, d.tokens, div_ceil(d.v, d.t)])
}

/// Under autocast over fp32 weights ([`Dims::autocast`]) each linear layer's backward needs
/// its weight in the compute dtype, so autograd saves the forward's cast copy until then:
/// `elements` weights in the activation dtype.
fn weight_copies(d: &Dims, elements: u64) -> u64 {
    if d.autocast {
        mul(d.act_bytes, elements)
    } else {
        0
    }
}

/// Bytes of the hidden state sent to the next virtual stage: `b*s/c*h` in the activation
/// dtype, split over t with SP.
pub(crate) fn boundary(d: &Dims) -> u64 {
    mul(d.act_bytes, d.replicated(d.hidden_elements()))
}
