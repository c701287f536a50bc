//! Tests of the workload model against published closed forms and parameter counts. Shared
//! helpers build scenarios by hand so that the published shapes are explicit in each test.

mod activation_memory;
mod autocast;
mod comm_calls;
mod flops;
mod fp8;
mod fusions;
mod model_state;
mod moe_shape;
mod properties;
mod selective;
mod window;
mod worked_example;

use crate::plan::Plan;
use crate::scenario::*;
use crate::testing::small_scenario;

/// A dense GPT-style transformer (f = 4h, g = a, untied, no flash attention) on a
/// `tp x pp x dp` mesh with `microbatches` micro batches of `b` sequences.
#[allow(clippy::too_many_arguments)]
pub(super) fn gpt(
    layers: u32,
    hidden: u64,
    heads: u32,
    seq_len: u64,
    vocab: u64,
    (tp, pp, dp): (u32, u32, u32),
    b: u64,
    microbatches: u64,
) -> Scenario {
    let mut s = small_scenario(tp, pp, dp, microbatches);
    s.model = Model {
        name: "gpt".into(),
        layers,
        hidden,
        heads,
        kv_heads: heads,
        head_dim: None,
        ffn_hidden: 4 * hidden,
        seq_len,
        vocab,
        gated_mlp: false,
        tied_embeddings: false,
        qkv_bias: false,
        mla: None,
        mtp_layers: 0,
        sliding_window: None,
        attention_sinks: false,
        moe: None,
        hybrid: None,
    };
    s.training.micro_batch = b;
    s.training.global_batch = microbatches * b * u64::from(dp);
    s.training.flash_attention = false;
    s.parallel.sequence_parallel = false;
    s
}

/// A Llama-style model (gated MLP, GQA, untied) on one GPU.
pub(super) fn llama(
    layers: u32,
    hidden: u64,
    heads: u32,
    kv_heads: u32,
    ffn_hidden: u64,
    vocab: u64,
) -> Model {
    Model {
        name: "llama".into(),
        layers,
        hidden,
        heads,
        kv_heads,
        head_dim: None,
        ffn_hidden,
        seq_len: 4096,
        vocab,
        gated_mlp: true,
        tied_embeddings: false,
        qkv_bias: false,
        mla: None,
        mtp_layers: 0,
        sliding_window: None,
        attention_sinks: false,
        moe: None,
        hybrid: None,
    }
}

pub(super) fn plan(s: &Scenario) -> Plan {
    match Plan::new(s) {
        Ok(p) => p,
        Err(e) => panic!("test scenario must plan: {e}"),
    }
}

/// Every chunk of every stage, in pipeline order of (stage, chunk).
pub(super) fn all_chunks(plan: &Plan) -> Vec<crate::plan::ChunkLayout> {
    plan.chunks.iter().flatten().cloned().collect()
}
