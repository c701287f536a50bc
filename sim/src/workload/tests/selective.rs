//! What `recompute = "selective"` runs again and saves, per the framework's
//! `recompute.selective`: Megatron-Core's attention core, or torchtitan's per-op policy that
//! saves every second matmul.

use super::*;
use crate::scenario::framework::Bundled;
use crate::workload::{activations, dims::Dims, layers_work, LayerShape};

/// One Llama-style layer (GQA, gated MLP, flash attention), tp 1, no head or embedding.
fn llama_layer(framework: Bundled, recompute: Recompute) -> Scenario {
    let mut s = gpt(1, 1024, 16, 512, 4096, (1, 1, 1), 2, 1);
    s.model.kv_heads = 4;
    s.model.gated_mlp = true;
    s.model.ffn_hidden = 2816;
    s.training.framework = framework.framework().unwrap();
    s.training.recompute = recompute;
    s.training.flash_attention = true;
    s
}

fn work(s: &Scenario) -> crate::workload::ChunkWork {
    let plan = plan(s);
    let layout = plan.chunks[0][0].clone();
    layers_work(s, &plan, &layout, 0, 1, false, false)
}

/// torchtitan recomputes wk, wo and w3 (the 2nd, 4th and 6th of wq wk wv wo w1 w3 w2) and every
/// elementwise op of the forward, and not the attention kernel.
#[test]
fn every_second_matmul_recomputes_wk_wo_w3_and_the_elementwise_ops() {
    let (tokens, h, kv, f) = (2 * 512u64, 1024u64, 4 * 64u64, 2816u64);
    let s = llama_layer(Bundled::Torchtitan, Recompute::Selective);
    let w = work(&s);
    let pass = w.recompute.expect("selective recompute has a pass");
    assert!(pass.ring.is_none());
    let r = pass.compute;
    let want_flops = 2 * tokens * (h * kv + h * h + h * f);
    assert_eq!(r.flops, want_flops);
    let mut shapes: Vec<(u64, u64, u64)> = r.gemms.iter().map(|g| (g.m, g.k, g.n)).collect();
    shapes.sort_unstable();
    assert_eq!(
        shapes,
        vec![(tokens, h, kv), (tokens, h, h), (tokens, h, f)]
    );
    assert!(
        r.attention.is_none(),
        "the attention kernel's output is saved"
    );
    // The forward's elementwise bytes and kernels, plus one kernel per recomputed GEMM.
    let e = s.training.framework.fusions.eager;
    let elementwise = tokens * h * (u64::from(e.hidden_passes) * 2 + 2)
        + tokens * f * u64::from(e.ffn_passes) * 2;
    assert_eq!(r.memory_bytes, elementwise);
    assert_eq!(r.kernels, e.kernels + 3);
}

/// Megatron-Core's selective recompute runs the attention core only.
#[test]
fn attention_core_policy_recomputes_only_the_attention_kernel() {
    let s = llama_layer(Bundled::MegatronCore, Recompute::Selective);
    let r = work(&s).recompute.expect("a pass").compute;
    assert!(r.gemms.is_empty());
    assert_eq!(r.attention.map(|a| a.count), Some(1));
    assert_eq!(r.kernels, 1);
}

/// Saved under the every-second-matmul policy: the layer input, the outputs of wq, wv, w1 and
/// w2, the attention output and its fp32 statistics; bf16.
#[test]
fn every_second_matmul_saves_the_input_the_odd_matmuls_and_the_attention_output() {
    let (b, s_len, h, kv, f, heads) = (2u64, 512u64, 1024u64, 256u64, 2816u64, 16u64);
    let tokens = b * s_len;
    let s = llama_layer(Bundled::Torchtitan, Recompute::Selective);
    let d = Dims::new(&s);
    let saved = activations::layer(&d, Recompute::Selective, LayerShape::transformer(false));
    let outputs = tokens * (h + kv + f + h);
    let want = 2 * (tokens * h + outputs + tokens * h) + 4 * b * heads * s_len;
    assert_eq!(saved, want);
    // Less than keeping everything, more than full recompute.
    let none = activations::layer(&d, Recompute::None, LayerShape::transformer(false));
    let full = activations::layer(&d, Recompute::Full, LayerShape::transformer(false));
    assert!(full < saved && saved < none, "{full} < {saved} < {none}");
    // The chunk's activations and its recompute's transient bytes follow.
    let w = work(&s);
    assert_eq!(w.activation_bytes, saved);
    assert_eq!(w.recompute_bytes, none - saved);
}

/// A non-gated MLP has six matmuls: wk, wo and the down projection are recomputed.
#[test]
fn every_second_matmul_without_a_gate_recomputes_the_down_projection() {
    let (tokens, h, kv) = (2 * 512u64, 1024u64, 256u64);
    let mut s = llama_layer(Bundled::Torchtitan, Recompute::Selective);
    s.model.gated_mlp = false;
    s.model.ffn_hidden = 4096;
    let r = work(&s).recompute.expect("a pass").compute;
    assert_eq!(r.flops, 2 * tokens * (h * kv + h * h + 4096 * h));
}
