//! Mixture-of-experts widths (routed experts, shared experts, dense first layers) and
//! multi-head latent attention: exact FLOPs, saved bytes and parameter counts on small shapes.

use super::*;
use crate::workload::{activated_params, layers_work, model_params};

/// A GPT-style MoE model (GeLU MLP, MHA, one GPU): 8 experts of width `fe`, top 2, every
/// layer past the first dense (`dense_layers = 1`, width `fd`), two shared experts of width
/// `fs` each.
fn moe_model(h: u64, s: u64, b: u64, (fe, fs, fd): (u64, u64, u64)) -> Scenario {
    let mut sc = gpt(4, h, 16, s, 32000, (1, 1, 1), b, 1);
    sc.model.moe = Some(Moe {
        experts: 8,
        top_k: 2,
        moe_every: 1,
        ffn_hidden: fe,
        shared_experts: 2,
        shared_ffn_hidden: fs,
        dense_layers: 1,
        dense_ffn_hidden: fd,
        router_groups: (1, 1),
    });
    sc.training.flash_attention = true;
    sc
}

#[test]
fn expert_shared_and_dense_widths_set_the_mlp_gemms() {
    let (b, s, h) = (1u64, 512u64, 256u64);
    let (fe, fs, fd) = (96u64, 64u64, 1024u64);
    let sc = moe_model(h, s, b, (fe, fs, fd));
    let plan = Plan::new(&sc).unwrap();
    let layout = &plan.chunks[0][0];
    let dense = layers_work(&sc, &plan, layout, 0, 1, false, false);
    let moe = layers_work(&sc, &plan, layout, 1, 1, false, false);
    let tokens = b * s;
    // Attention: QKV 6*T*h^2, output projection 2*T*h^2, scores and context 4*b*s*s*h.
    let attention = 8 * tokens * h * h + 4 * b * s * s * h;
    // Layer 0 is dense: one GeLU MLP of width fd (2*T*h*fd up, 2*T*fd*h down).
    assert_eq!(dense.forward.compute.flops, attention + 4 * tokens * h * fd);
    // Layer 1: router 2*T*h*8, top-2 routed copies through experts of width fe, and every
    // token through the two shared experts (one MLP of 2*fs).
    assert_eq!(
        moe.forward.compute.flops,
        attention + 2 * tokens * h * 8 + 2 * 4 * tokens * h * fe + 4 * tokens * h * (2 * fs)
    );
    assert_eq!(moe.backward.compute.flops, 2 * moe.forward.compute.flops);
    // Layers 1-3 are MoE, layer 0 dense.
    let all = layers_work(&sc, &plan, layout, 0, 4, false, false);
    assert_eq!(
        all.forward.compute.flops,
        dense.forward.compute.flops + 3 * moe.forward.compute.flops
    );
}

/// Saved bytes: each MLP saves its up output (activation dtype) and its down input (GEMM
/// input), `4*T*f` in bf16 for a GeLU MLP; the shared experts add that at their summed width.
#[test]
fn shared_experts_save_their_mlp_activations() {
    let (b, s, h) = (1u64, 512u64, 256u64);
    let with = moe_model(h, s, b, (96, 64, 1024));
    let mut without = with.clone();
    if let Some(m) = without.model.moe.as_mut() {
        m.shared_experts = 0;
    }
    let plan = Plan::new(&with).unwrap();
    let layout = &plan.chunks[0][0];
    let a = layers_work(&with, &plan, layout, 1, 1, false, false);
    let z = layers_work(&without, &plan, layout, 1, 1, false, false);
    assert_eq!(a.activation_bytes - z.activation_bytes, 4 * b * s * 2 * 64);
    // The dense layer's MLP is fd wide whatever the experts are.
    let d = layers_work(&with, &plan, layout, 0, 1, false, false);
    let d0 = layers_work(&without, &plan, layout, 0, 1, false, false);
    assert_eq!(d.activation_bytes, d0.activation_bytes);
}

/// A small multi-head latent attention model, GeLU MLP of width 4h, on `tp` GPUs.
fn mla_model(tp: u32) -> Scenario {
    let (b, s, h) = (1u64, 256u64, 128u64);
    let mut sc = gpt(2, h, 4, s, 32000, (tp, 1, 1), b, 1);
    sc.model.mla = Some(Mla {
        q_lora_rank: 32,
        kv_lora_rank: 16,
        qk_nope_head_dim: 8,
        qk_rope_head_dim: 4,
        v_head_dim: 8,
    });
    sc.model.gated_mlp = true;
    sc.model.ffn_hidden = 2 * h;
    sc.training.flash_attention = true;
    sc
}

/// FLOPs of an MLA layer, forward: the query down (h -> 32) and up (32 -> 4*12)
/// projections, the key/value down projection with the rotary key (h -> 16 + 4) and up
/// projection (16 -> 4*(8+8)), scores over 12 and context over 8 per head, the output
/// projection (4*8 -> h) and the gated MLP. Under tp 2 the up-projections, the attention and
/// the output projection split, the down-projections do not.
#[test]
fn latent_attention_projections_and_core_flops() {
    for tp in [1u64, 2] {
        let sc = mla_model(tp as u32);
        let plan = Plan::new(&sc).unwrap();
        let layout = &plan.chunks[0][0];
        let w = layers_work(&sc, &plan, layout, 0, 1, false, false);
        let (b, s, h, heads) = (1u64, 256u64, 128u64, 4u64);
        let t = b * s;
        let down = 2 * t * (h * 32 + h * (16 + 4));
        let up = 2 * t * (32 * heads * 12 + 16 * heads * (8 + 8)) / tp;
        let core = 2 * b * heads * s * s * (12 + 8) / tp;
        let out = 2 * t * heads * 8 * h / tp;
        let mlp = 3 * 2 * t * h * (2 * h) / tp;
        assert_eq!(
            w.forward.compute.flops,
            down + up + core + out + mlp,
            "tp {tp}"
        );
    }
}

/// Saved bytes of an MLA layer in bf16 with flash attention, no recompute, one GPU: the
/// replicated tensors (two norm inputs, two GEMM inputs, two dropout masks: 10 bytes per
/// hidden element), Q (heads*12), K and V (heads*(12+8)), the output-projection input
/// (heads*8), the compressed query and key/value twice (norm input and up-projection input),
/// the fp32 softmax statistics, and the gated MLP's up output (2f) and down input (f).
#[test]
fn latent_attention_saved_bytes() {
    let sc = mla_model(1);
    let plan = Plan::new(&sc).unwrap();
    let layout = &plan.chunks[0][0];
    let w = layers_work(&sc, &plan, layout, 0, 1, false, false);
    let (b, s, h, heads, f) = (1u64, 256u64, 128u64, 4u64, 256u64);
    let t = b * s;
    let want = 10 * t * h
        + 2 * t * heads * 12
        + 2 * t * heads * (12 + 8)
        + 2 * t * heads * 8
        + 4 * t * (32 + 16)
        + 4 * b * heads * s
        + 2 * t * 2 * f
        + 2 * t * f;
    assert_eq!(w.activation_bytes, want);
}

/// Parameters of the MLA model: per layer the projections (h*32, 32 norm, 32*48, h*20, 16
/// norm, 16*64, 32*h), two norms, the gated MLP; embedding and head. Every parameter is
/// activated in a dense model.
#[test]
fn latent_attention_parameters() {
    let sc = mla_model(1);
    let h = 128u64;
    let attention = h * 32 + 32 + 32 * 48 + h * 20 + 16 + 16 * 64 + 32 * h;
    let layer = attention + 2 * h + 3 * h * 2 * h;
    let want = 2 * layer + 32000 * h + h + 32000 * h;
    let p = model_params(&sc.model);
    assert_eq!((p.dense, p.expert), (want, 0));
    assert_eq!(activated_params(&sc.model), want);
}

/// Activated parameters of the MoE model: everything dense (attention, norms, router, shared
/// experts, the dense layer's MLP, embeddings) plus top_k routed experts of each MoE layer.
#[test]
fn activated_parameters_count_top_k_experts() {
    let (h, fe, fs, fd) = (256u64, 96u64, 64u64, 1024u64);
    let sc = moe_model(h, 512, 1, (fe, fs, fd));
    let mlp = |f: u64| 2 * h * f + f + h; // GeLU MLP with biases (GPT-style)
    let p = model_params(&sc.model);
    assert_eq!(p.expert, 3 * 8 * mlp(fe));
    let attention = 4 * h * h + 4 * h; // QKV and output projection, with biases
    let norms = 2 * 2 * h;
    let dense_layer = attention + norms + mlp(fd);
    let moe_layer_dense = attention + norms + h * 8 + 2 * mlp(fs);
    let embeddings = 32000 * h + 512 * h + (2 * h + 32000 * h);
    assert_eq!(p.dense, dense_layer + 3 * moe_layer_dense + embeddings);
    assert_eq!(activated_params(&sc.model), p.dense + 3 * 2 * mlp(fe));
}

/// tp 2 with sequence parallelism, dp 4, ep 4, Mixtral-style experts of width `f` (8, top 2),
/// every layer MoE; `etp` as given.
fn refold(etp: Option<u32>) -> Scenario {
    let (b, s, h) = (1u64, 512u64, 256u64);
    let mut sc = gpt(2, h, 16, s, 32000, (2, 1, 4), b, 1);
    sc.model.moe = Some(Moe::uniform(8, 2, 1, 512));
    sc.parallel.ep = 4;
    sc.parallel.etp = etp;
    sc.parallel.sequence_parallel = true;
    sc.training.flash_attention = true;
    sc
}

/// With `etp = 1` under `tp = 2` each rank's experts are whole and see the routed copies of its
/// own sequence-parallel half of the tokens, so the per-rank expert FLOPs are those of
/// `etp = tp` (all tokens, half the width): the work moves, it does not grow. Against a
/// framework whose `etp = tp` MoE layer gathers the tokens like a dense MLP (torchtitan's), the
/// MLP's tensor-parallel all-gather and reduce-scatter go; the attention's stay; the
/// expert-parallel all-to-alls carry the same copies.
#[test]
fn experts_whole_on_each_rank_under_tensor_parallelism() {
    use crate::ir::CollectiveKind::{self, *};
    use crate::plan::GroupKind;
    use crate::scenario::framework::{Bundled, ExpertTpGather};
    let (b, s, h, f) = (1u64, 512u64, 256u64, 512u64);
    let mut split = refold(None);
    split.training.framework = Bundled::Torchtitan.framework().unwrap();
    assert_eq!(
        split.training.framework.expert_tp_gather,
        ExpertTpGather::Tokens
    );
    let whole = refold(Some(1));
    let plan_split = Plan::new(&split).unwrap();
    let plan_whole = Plan::new(&whole).unwrap();
    let ws = layers_work(
        &split,
        &plan_split,
        &plan_split.chunks[0][0],
        0,
        1,
        false,
        false,
    );
    let ww = layers_work(
        &whole,
        &plan_whole,
        &plan_whole.chunks[0][0],
        0,
        1,
        false,
        false,
    );
    let tokens = b * s;
    // Routed experts: top-2 copies, GeLU MLP 4*h*f FLOPs per copy.
    let experts_split = 2 * tokens * 4 * h * (f / 2);
    let experts_whole = 2 * (tokens / 2) * 4 * h * f;
    assert_eq!(experts_split, experts_whole);
    assert_eq!(ws.forward.compute.flops, ww.forward.compute.flops);
    let tp_calls = |w: &crate::workload::ChunkWork| -> Vec<(CollectiveKind, u64)> {
        w.forward
            .comms
            .iter()
            .filter(|c| c.group == GroupKind::Tp)
            .map(|c| (c.kind, u64::from(c.calls)))
            .collect()
    };
    assert_eq!(tp_calls(&ws), vec![(AllGather, 2), (ReduceScatter, 2)]);
    assert_eq!(tp_calls(&ww), vec![(AllGather, 1), (ReduceScatter, 1)]);
    let a2a = |w: &crate::workload::ChunkWork| -> Vec<(u64, u32)> {
        w.forward
            .comms
            .iter()
            .filter(|c| c.group == GroupKind::Ep)
            .map(|c| (c.bytes, c.calls))
            .collect()
    };
    // This rank's routed copies of its half of the tokens, bf16: dispatch and combine.
    assert_eq!(a2a(&ww), vec![(2 * (tokens / 2) * 2 * h, 2)]);
    assert_eq!(a2a(&ws), a2a(&ww));
}

/// The first chunk's work of one layer of `sc`.
fn first_layer(sc: &Scenario) -> crate::workload::ChunkWork {
    let plan = Plan::new(sc).unwrap();
    layers_work(sc, &plan, &plan.chunks[0][0], 0, 1, false, false)
}

/// The collectives of `comms` over `group`, as (kind, bytes, calls).
fn calls_over(
    comms: &[crate::workload::CommCall],
    group: crate::plan::GroupKind,
) -> Vec<(crate::ir::CollectiveKind, u64, u32)> {
    comms
        .iter()
        .filter(|c| c.group == group)
        .map(|c| (c.kind, c.bytes, c.calls))
        .collect()
}

/// Expert tensor parallelism between 1 and tp (tp 4 with sequence parallelism, etp 2, ep 4):
/// each rank dispatches the routed copies of its quarter of the tokens, the etp pair gathers
/// what its two members received before the experts (which split over 2) and reduce-scatters
/// after them. The per-rank expert FLOPs equal those of etp = tp and of etp = 1 (the work
/// moves), the all-to-all carries the same copies, the pair's all-gather and reduce-scatter
/// twice this rank's copies (four times under etp = tp = 4, Megatron-Core's dispatcher gathering
/// the copies there too), and the MLP's tensor-parallel pair goes as under etp = 1.
#[test]
fn experts_split_over_their_own_group_gather_what_it_received() {
    use crate::ir::CollectiveKind::{self, *};
    use crate::plan::GroupKind;
    let (b, s, h, f) = (1u64, 512u64, 256u64, 512u64);
    let scenario = |etp: Option<u32>, ep: u32| {
        let mut sc = gpt(2, h, 16, s, 32000, (4, 1, 2), b, 1);
        sc.model.moe = Some(Moe::uniform(8, 2, 1, f));
        sc.parallel.ep = ep;
        sc.parallel.etp = etp;
        sc.parallel.sequence_parallel = true;
        sc.training.flash_attention = true;
        sc
    };
    let split = first_layer(&scenario(None, 2));
    let pair = first_layer(&scenario(Some(2), 4));
    let whole = first_layer(&scenario(Some(1), 4));
    assert_eq!(pair.forward.compute.flops, split.forward.compute.flops);
    assert_eq!(pair.forward.compute.flops, whole.forward.compute.flops);
    let calls = |w: &crate::workload::ChunkWork, g: GroupKind| calls_over(&w.forward.comms, g);
    // This rank's routed copies of its quarter of the tokens, bf16.
    let own = 2 * (b * s / 4) * h * 2;
    assert_eq!(calls(&pair, GroupKind::Ep), vec![(AllToAll, own, 2)]);
    assert_eq!(
        calls(&pair, GroupKind::Etp),
        vec![(AllGather, 2 * own, 1), (ReduceScatter, 2 * own, 1)]
    );
    assert_eq!(
        calls(&pair, GroupKind::Etp),
        calls_over(&pair.backward.comms, GroupKind::Etp)
    );
    let tp = |w: &crate::workload::ChunkWork| -> Vec<CollectiveKind> {
        calls(w, GroupKind::Tp).into_iter().map(|c| c.0).collect()
    };
    assert_eq!(tp(&pair), vec![AllGather, ReduceScatter]);
    assert_eq!(tp(&pair), tp(&whole));
    assert!(calls(&whole, GroupKind::Etp).is_empty());
    // Under etp = tp = 4 Megatron-Core's dispatcher gathers the four members' copies.
    assert_eq!(
        calls(&split, GroupKind::Etp),
        vec![(AllGather, 4 * own, 1), (ReduceScatter, 4 * own, 1)]
    );
}

/// Megatron-Core's dispatcher under `etp = tp = 2` (`moe.expert_tp_gather = "routed-copies"`):
/// each rank dispatches the copies of its own sequence-parallel half of the tokens and the
/// tensor-parallel pair gathers what both received after the all-to-all (twice this rank's
/// copies, `top_k` times the tokens a dense MLP's gather moves) and reduce-scatters after the
/// experts; the MLP's token pair goes, the expert FLOPs stay those of the token-gathering
/// layer.
#[test]
fn megatron_core_gathers_the_routed_copies_over_expert_tensor_parallelism() {
    use crate::ir::CollectiveKind::{self, *};
    use crate::plan::GroupKind;
    use crate::scenario::framework::Bundled;
    let (b, s, h) = (1u64, 512u64, 256u64);
    let mut tokens = refold(None);
    tokens.training.framework = Bundled::Torchtitan.framework().unwrap();
    let mut copies = refold(None);
    copies.training.framework = Bundled::MegatronCore.framework().unwrap();
    let (wt, wc) = (first_layer(&tokens), first_layer(&copies));
    assert_eq!(wt.forward.compute.flops, wc.forward.compute.flops);
    let calls = |w: &crate::workload::ChunkWork, g: GroupKind| calls_over(&w.forward.comms, g);
    let own = 2 * (b * s / 2) * h * 2;
    assert_eq!(
        calls(&wc, GroupKind::Etp),
        vec![(AllGather, 2 * own, 1), (ReduceScatter, 2 * own, 1)]
    );
    let kinds = |w: &crate::workload::ChunkWork| -> Vec<(CollectiveKind, u32)> {
        calls(w, GroupKind::Tp)
            .into_iter()
            .map(|c| (c.0, c.2))
            .collect()
    };
    assert_eq!(kinds(&wc), vec![(AllGather, 1), (ReduceScatter, 1)]);
    assert_eq!(kinds(&wt), vec![(AllGather, 2), (ReduceScatter, 2)]);
    assert!(calls(&wt, GroupKind::Etp).is_empty());
}

/// Expert state under `etp = 1`: each rank holds `experts / ep` whole experts, and their state
/// shards over the `tp * dp / ep` expert data-parallel ranks (here 2).
#[test]
fn whole_experts_hold_and_shard_their_state_over_the_refolded_ranks() {
    let mut whole = refold(Some(1));
    whole.parallel.zero = 1;
    let plan = Plan::new(&whole).unwrap();
    let p = crate::workload::chunk_params(&whole, &plan, &plan.chunks[0][0]);
    let h = 256u64;
    let expert = 2 * h * 512 + 512 + h; // GeLU MLP with biases, whole
    assert_eq!(p.expert, 2 * 2 * expert); // 2 layers x 8/4 experts
    assert_eq!(whole.parallel.edp(), 2);
    let b = crate::workload::state_bytes(&whole, &plan, 0);
    assert_eq!(
        b.optimizer_bytes,
        (12 * p.dense).div_ceil(4) + (12 * p.expert).div_ceil(2)
    );
}

/// Under context parallelism the refolded expert layers take the context-parallel ranks too:
/// with tp 2 (`etp = 1`), cp 2 and dp 4, each rank dispatches the routed copies of its own
/// quarter of the sequence (its cp half, split again by sequence parallelism), and the
/// experts' state shards over the `tp * cp * dp / ep = 4` ranks that hold the same experts,
/// the dense state over the `cp * dp = 8`.
#[test]
fn refolded_experts_under_context_parallelism_take_the_context_parallel_ranks() {
    use crate::plan::GroupKind;
    let (s, h) = (512u64, 256u64);
    let mut sc = refold(Some(1));
    sc.parallel.cp = 2;
    sc.cluster.gpus *= 2;
    sc.parallel.zero = 1;
    let plan = Plan::new(&sc).unwrap();
    assert_eq!(sc.parallel.edp(), 4);
    let w = layers_work(&sc, &plan, &plan.chunks[0][0], 0, 1, false, false);
    let a2a: Vec<(u64, u32)> = w
        .forward
        .comms
        .iter()
        .filter(|c| c.group == GroupKind::Ep)
        .map(|c| (c.bytes, c.calls))
        .collect();
    assert_eq!(a2a, vec![(2 * (s / 4) * 2 * h, 2)]);
    let p = crate::workload::chunk_params(&sc, &plan, &plan.chunks[0][0]);
    let b = crate::workload::state_bytes(&sc, &plan, 0);
    assert_eq!(
        b.optimizer_bytes,
        (12 * p.dense).div_ceil(8) + (12 * p.expert).div_ceil(4)
    );
}

/// A multi-token prediction module on the head's chunk: the forward adds the projection of the
/// concatenated norms (`T x 2h x h`), one more layer and the output head again; the chunk holds
/// the module's layer, three norms and projection, and a copy of the word embeddings; the
/// module saves its embedding's mask, the norms' and projection's inputs, a layer's and the
/// head's activations.
#[test]
fn multi_token_prediction_runs_a_layer_and_the_head_again() {
    let (b, s, h, v) = (1u64, 512u64, 256u64, 32000u64);
    let mut sc = gpt(4, h, 16, s, v, (1, 2, 1), b, 2);
    sc.training.flash_attention = true;
    let plan = Plan::new(&sc).unwrap();
    let last = &plan.chunks[1][0];
    assert!(last.has_head && !last.has_embedding);
    let without = crate::workload::chunk_work(&sc, &plan, last);
    let params_without = crate::workload::chunk_params(&sc, &plan, last);
    sc.model.mtp_layers = 1;
    let with = crate::workload::chunk_work(&sc, &plan, last);
    let params_with = crate::workload::chunk_params(&sc, &plan, last);
    let tokens = b * s;
    let layer = 24 * tokens * h * h + 4 * b * s * s * h;
    let head = 2 * tokens * h * v;
    let projection = 2 * tokens * 2 * h * h;
    assert_eq!(
        with.forward.compute.flops - without.forward.compute.flops,
        projection + layer + head
    );
    // GPT-style: biased projection (2h x h + h), three LayerNorms (2h each), a layer of
    // 12h^2 + 13h, and the word embeddings' copy.
    let module = (2 * h * h + h) + 3 * 2 * h + (12 * h * h + 13 * h);
    assert_eq!(params_with.dense - params_without.dense, module + v * h);
    // bf16: embedding dropout mask (1 byte per element), two norm inputs and the 2h
    // projection input (2 bytes each), a layer without recompute, and the head.
    let x = tokens * h;
    let saved_layer =
        crate::workload::layers_work(&sc, &plan, last, 2, 1, false, false).activation_bytes;
    let saved_head = x * (2 + 2) + 4 * tokens * v;
    assert_eq!(
        with.activation_bytes - without.activation_bytes,
        x + 2 * 2 * x + 2 * 2 * x + saved_layer + saved_head
    );
}

/// An MoE layer's pass holds its dispatch and combine send buffers while its tokens travel:
/// one copy of the routed tokens each (top 2 of `T` tokens, bf16), padded to capacity under a
/// capacity factor; a dense range holds none, and the backward holds the same for the
/// gradients.
#[test]
fn moe_passes_hold_their_all_to_all_buffers() {
    let (b, s, h) = (1u64, 512u64, 256u64);
    let mut sc = moe_model(h, s, b, (96, 64, 1024));
    let plan = Plan::new(&sc).unwrap();
    let layout = &plan.chunks[0][0];
    let copies = 2 * b * s;
    let moe = layers_work(&sc, &plan, layout, 1, 1, false, false);
    assert_eq!(moe.forward_transient_bytes, 2 * 2 * copies * h);
    assert_eq!(moe.backward_transient_bytes, moe.forward_transient_bytes);
    let dense = layers_work(&sc, &plan, layout, 0, 1, false, false);
    assert_eq!(dense.forward_transient_bytes, 0);
    // Several MoE layers run one at a time: the same buffers, not more.
    let three = layers_work(&sc, &plan, layout, 1, 3, false, false);
    assert_eq!(three.forward_transient_bytes, moe.forward_transient_bytes);
    sc.training.moe_routing = MoeRouting::Capacity { factor: 1.5 };
    let padded = layers_work(&sc, &plan, layout, 1, 1, false, false);
    assert_eq!(padded.forward_transient_bytes, 2 * 2 * (copies * 3 / 2) * h);
}
