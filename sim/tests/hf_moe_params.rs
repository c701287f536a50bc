//! Parameter counts of current architectures imported from their Hugging Face `config.json`,
//! against the model cards.
//!
//! The configs under `tests/data/hf/` are written by hand from the published files:
//! - `deepseek-v3.json`: huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json
//! - `qwen3-30b-a3b.json`: huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json
//! - `qwen3-235b-a22b.json`: huggingface.co/Qwen/Qwen3-235B-A22B/blob/main/config.json
//! - `qwen3-8b.json`: huggingface.co/Qwen/Qwen3-8B/blob/main/config.json
//! - `gpt-oss-120b.json`: huggingface.co/openai/gpt-oss-120b/blob/main/config.json
//! - `mixtral-8x7b.json`: huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json
//! - `nemotron-3-nano-30b-a3b.json`: the keys of
//!   huggingface.co/nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16/blob/main/config.json that
//!   Megatron-Bridge's `NemotronHBridge` maps (NVIDIA-NeMo/Megatron-Bridge@21d102f5e
//!   src/megatron/bridge/models/nemotronh/nemotron_h_bridge.py), with the values of its
//!   Nemotron 3 Nano recipe (src/megatron/bridge/recipes/nemotronh/nemotron_3_nano.py)
//!
//! Each test checks three things: that the import reads the shape the config gives; that
//! `model_params` equals a count written out here matrix by matrix from the transformers
//! modules (so a wrong key mapping or a wrong count fails); and that it is within 0.5% of
//! the card's total. Activated parameters are checked against the card's figure under the
//! convention that card uses, which each test's doc comment names.
//!
//! Model cards differ on the input embedding. Its rows are looked up, not multiplied, so some
//! leave it out of the activated count (GPT-OSS says so; DeepSeek-V3's figure only fits that
//! way), others count every dense parameter (Mixtral). `activated_params` counts every dense
//! parameter, both embedding matrices included; the tests subtract the input embedding where
//! the card's convention leaves it out.
#![allow(clippy::result_large_err)]
#![cfg(test)]

use twin_sim::scenario::{Mla, Model, Scenario};
use twin_sim::setup::{parse_str, ParsedSource};
use twin_sim::workload::{activated_params, model_params};

/// A scenario importing `tests/data/hf/{file}`, resolved from an origin inside `sim/tests`.
fn scenario(file: &str) -> (Scenario, Vec<String>) {
    let text = format!(
        "[model]\nhf_config = \"data/hf/{file}\"\n[cluster]\ngpu = \"h100-sxm-80gb\"\n\
         gpus = 8\nnode = \"dgx-h100\"\n[training]\nglobal_batch = 8\n"
    );
    let origin = format!("{}/tests/inline.toml", env!("CARGO_MANIFEST_DIR"));
    let s = parse_str(&text, &origin, &[]).unwrap_or_else(|e| panic!("{e}"));
    let unmodelled = ParsedSource::parse(&text, &origin)
        .unwrap()
        .hf_unmodelled(&[])
        .unwrap();
    (s, unmodelled)
}

fn total(m: &Model) -> u64 {
    let p = model_params(m);
    p.dense + p.expert
}

/// One embedding matrix, `vocab x hidden`.
fn embedding(m: &Model) -> u64 {
    m.vocab * m.hidden
}

/// `x` is within `pct` percent of `card`.
fn within(x: u64, card: f64, pct: f64) -> bool {
    ((x as f64 - card) / card).abs() <= pct / 100.0
}

/// Whether `x` rounds to `card` when the card gives `digits` significant digits.
fn rounds_to(x: u64, card: f64, digits: i32) -> bool {
    let unit = 10f64.powi(card.log10().floor() as i32 + 1 - digits);
    ((x as f64) / unit).round() * unit == card
}

/// The first word of each unmodelled note: the key it names.
fn keys(notes: &[String]) -> Vec<&str> {
    notes
        .iter()
        .map(|n| n.split(' ').next().unwrap_or(""))
        .collect()
}

/// DeepSeek-V3. Card (huggingface.co/deepseek-ai/DeepSeek-V3, README): "671B total parameters
/// with 37B activated for each token"; the 685B checkpoint is "671B of the Main Model weights
/// and 14B of the Multi-Token Prediction (MTP) Module weights". The import reads the MTP
/// module (`num_nextn_predict_layers = 1`); the card's 671B and 37B are the main model's, so
/// they are checked with `mtp_layers = 0`.
///
/// twin, main model: 671,026,404,352 in total. Activated: 37,552,282,624 counting both
/// embedding matrices, which rounds to 38B; 36,625,603,584 without the input embedding, which
/// rounds to the card's 37B. The card's figure fits only with the input embedding left out,
/// and that is what is asserted. The MTP module adds one MoE layer, three norms and the
/// `2h x h` projection (11.6B); the checkpoint's 14B also holds the module's own copies of the
/// embedding and output matrices, which twin counts once as they are shared.
#[test]
fn deepseek_v3() {
    let (s, notes) = scenario("deepseek-v3.json");
    assert_eq!(s.model.mtp_layers, 1);
    let mut main = s.model.clone();
    main.mtp_layers = 0;
    let m = &main;
    let moe = m.moe.as_ref().expect("DeepSeek-V3 imports as MoE");
    assert_eq!(
        (m.layers, m.hidden, m.heads, m.ffn_hidden),
        (61, 7168, 128, 18432)
    );
    assert_eq!((moe.experts, moe.top_k, moe.moe_every), (256, 8, 1));
    assert_eq!(
        (moe.ffn_hidden, moe.dense_layers, moe.dense_ffn_hidden),
        (2048, 3, 18432)
    );
    assert_eq!((moe.shared_experts, moe.shared_ffn_hidden), (1, 2048));
    assert_eq!(
        m.mla,
        Some(Mla {
            q_lora_rank: 1536,
            kv_lora_rank: 512,
            qk_nope_head_dim: 128,
            qk_rope_head_dim: 64,
            v_head_dim: 128,
        })
    );
    assert!(!m.qkv_bias && !m.tied_embeddings && m.gated_mlp);

    // DeepseekV3Attention: q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa,
    // kv_a_layernorm, kv_b_proj, o_proj.
    let (h, a) = (7168u64, 128u64);
    let attention = h * 1536
        + 1536
        + 1536 * a * (128 + 64)
        + h * (512 + 64)
        + 512
        + 512 * a * (128 + 128)
        + a * 128 * h;
    let norms = 2 * h;
    let mlp = |f: u64| 3 * h * f;
    let dense_layer = attention + norms + mlp(18432);
    // The router's weight (`256 x h`), 256 routed experts and one shared expert. The router's
    // 256-wide score-correction bias is not counted.
    let moe_layer = attention + norms + 256 * h + 256 * mlp(2048) + mlp(2048);
    let words = 129_280 * h;
    let want = 3 * dense_layer + 58 * moe_layer + 2 * words + h;
    assert_eq!(total(m), want);
    assert!(within(total(m), 671e9, 0.5), "{}", total(m));

    let active = activated_params(m);
    assert_eq!(active, want - 58 * (256 - 8) * mlp(2048));
    assert!(!rounds_to(active, 37e9, 2), "{active}");
    assert!(rounds_to(active - embedding(m), 37e9, 2), "{active}");

    // With the MTP module: one more MoE layer, its three norms and its projection.
    assert_eq!(total(&s.model), want + moe_layer + 3 * h + 2 * h * h);
    let k = keys(&notes);
    for key in [
        "rope_scaling",
        "topk_method",
        "routed_scaling_factor",
        "quantization_config",
    ] {
        assert!(k.contains(&key), "{key} missing from {notes:?}");
    }
    // Node-limited routing: 4 of 8 groups.
    assert_eq!(s.model.moe.as_ref().unwrap().router_groups, (8, 4));
    for key in [
        "n_group",
        "topk_group",
        "n_routed_experts",
        "kv_lora_rank",
        "first_k_dense_replace",
        "num_nextn_predict_layers",
    ] {
        assert!(!k.contains(&key), "{key} is modelled: {notes:?}");
    }
}

/// The attention, norms and router of a Qwen3-MoE layer (Qwen3MoeAttention without bias,
/// two RMSNorms, the `experts x h` gate); the per-head q/k RMSNorm (256 weights) is not
/// counted.
fn qwen3_moe_dense_layer(h: u64, heads: u64, kv_heads: u64, experts: u64) -> u64 {
    let (q, kv) = (heads * 128, kv_heads * 128);
    h * (q + 2 * kv) + q * h + 2 * h + experts * h
}

/// Qwen3-30B-A3B. Card (huggingface.co/Qwen/Qwen3-30B-A3B): "30.5B in total and 3.3B
/// activated", "Number of Paramaters (Non-Embedding): 29.9B".
///
/// twin: 30,532,110,336 in total; 29,909,780,480 without either embedding matrix, which is
/// the card's non-embedding 29.9B. Activated: 3,353,020,416 with both embedding matrices,
/// 3,041,855,488 without the input one, 2,730,690,560 without either. None of them rounds to
/// 3.3B: the card's figure is twin's count cut (not rounded) to two digits, so the assertion is
/// that it lies in [3.3B, 3.4B). The q/k norms (12,288 weights) change none of this.
#[test]
fn qwen3_30b_a3b() {
    let (s, notes) = scenario("qwen3-30b-a3b.json");
    let m = &s.model;
    let moe = m.moe.as_ref().expect("MoE");
    assert_eq!(
        (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim),
        (48, 2048, 32, 4, Some(128))
    );
    assert_eq!(
        (moe.experts, moe.top_k, moe.moe_every, moe.ffn_hidden),
        (128, 8, 1, 768)
    );
    assert_eq!((moe.shared_experts, moe.dense_layers), (0, 0));
    assert!(m.mla.is_none() && !m.qkv_bias);

    let h = 2048;
    let expert = 3 * h * 768;
    let dense = 48 * qwen3_moe_dense_layer(h, 32, 4, 128) + 2 * 151_936 * h + h;
    let want = dense + 48 * 128 * expert;
    assert_eq!(total(m), want);
    assert!(within(total(m), 30.5e9, 0.5), "{}", total(m));
    assert!(rounds_to(total(m) - 2 * embedding(m), 29.9e9, 3));

    let active = activated_params(m);
    assert_eq!(active, dense + 48 * 8 * expert);
    assert!((3_300_000_000..3_400_000_000).contains(&active), "{active}");
    assert!(!rounds_to(active, 3.3e9, 2), "{active}");
    // Nothing in this config goes unmodelled.
    assert!(notes.is_empty(), "{notes:?}");
}

/// Qwen3-235B-A22B. Card (huggingface.co/Qwen/Qwen3-235B-A22B): "235B in total and 22B
/// activated", "Number of Paramaters (Non-Embedding): 234B".
///
/// twin: 235,093,610,496 in total; 233,848,950,784 without either embedding (234B).
/// Activated: 22,190,739,456 with both embeddings and 21,568,409,600 without the input one;
/// both round to the card's 22B, asserted for the count with both.
#[test]
fn qwen3_235b_a22b() {
    let (s, _) = scenario("qwen3-235b-a22b.json");
    let m = &s.model;
    let moe = m.moe.as_ref().expect("MoE");
    assert_eq!((m.layers, m.hidden, m.heads, m.kv_heads), (94, 4096, 64, 4));
    assert_eq!((moe.experts, moe.top_k, moe.ffn_hidden), (128, 8, 1536));

    let h = 4096;
    let expert = 3 * h * 1536;
    let dense = 94 * qwen3_moe_dense_layer(h, 64, 4, 128) + 2 * 151_936 * h + h;
    assert_eq!(total(m), dense + 94 * 128 * expert);
    assert!(within(total(m), 235e9, 0.5), "{}", total(m));
    assert!(rounds_to(total(m) - 2 * embedding(m), 234e9, 3));

    let active = activated_params(m);
    assert_eq!(active, dense + 94 * 8 * expert);
    assert!(rounds_to(active, 22e9, 2), "{active}");
}

/// GPT-OSS-120B. Card (huggingface.co/openai/gpt-oss-120b): "117B parameters with 5.1B
/// active"; the gpt-oss model card (arXiv 2508.10925, Table 1) gives 116.83B in total and
/// 5.13B active, with embedding and unembedding listed apart (1.16B together).
///
/// twin: 116,789,235,264 in total, the attention sinks (one logit per head and layer, 36 x
/// 64 = 2,304) included. What it does not count is listed as unmodelled: the experts' biases
/// (36 x 128 x (2 x 2880 + 2880) = 39,813,120), the output projection's biases (103,680) and
/// the router's biases (4,608), with which the count would be 116,829,156,672, Table 1's
/// 116.83B. Activated: 5,710,630,464 with both embeddings, 5,131,497,024 without the input
/// one: Table 1's 5.13B leaves the input embedding out, and that is asserted (within 0.5% of
/// 5.13B and rounding to the card's 5.1B). The sliding window (128 keys on the even layers,
/// as `layer_types` alternates) and the sinks are read as `sliding_window`,
/// `sliding_window_every = 2` and `attention_sinks`.
#[test]
fn gpt_oss_120b() {
    let (s, notes) = scenario("gpt-oss-120b.json");
    let m = &s.model;
    let moe = m.moe.as_ref().expect("MoE");
    assert_eq!(
        (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim),
        (36, 2880, 64, 8, Some(64))
    );
    assert_eq!(
        (moe.experts, moe.top_k, moe.moe_every, moe.ffn_hidden),
        (128, 4, 1, 2880)
    );
    assert_eq!((moe.shared_experts, moe.dense_layers), (0, 0));
    assert!(m.qkv_bias && !m.tied_embeddings);
    let window = m.sliding_window.expect("sliding window");
    assert_eq!((window.tokens, window.every), (128, 2));
    assert!(m.attention_sinks);

    let h = 2880;
    let (q, kv) = (64 * 64, 8 * 64);
    // q, k, v with biases; o_proj without its bias; one sink logit per head.
    let attention = h * (q + 2 * kv) + (q + 2 * kv) + q * h + 64;
    let expert = 3 * h * 2880;
    let dense = 36 * (attention + 2 * h + 128 * h) + 2 * 201_088 * h + h;
    let want = dense + 36 * 128 * expert;
    assert_eq!(total(m), want);
    assert!(within(total(m), 116.8e9, 0.5), "{}", total(m));
    let uncounted = 36 * (128 * (2 * 2880 + 2880) + h + 128);
    assert!(rounds_to(total(m) + uncounted, 116.83e9, 5));

    let active = activated_params(m);
    assert_eq!(active, dense + 36 * 4 * expert);
    let without_input = active - embedding(m);
    assert!(within(without_input, 5.13e9, 0.5), "{without_input}");
    assert!(rounds_to(without_input, 5.1e9, 2), "{without_input}");
    assert!(!rounds_to(active, 5.1e9, 2), "{active}");

    let k = keys(&notes);
    for key in ["sliding_window", "layer_types"] {
        assert!(!k.contains(&key), "{key} is modelled: {notes:?}");
    }
    for key in [
        "attention_bias",
        "rope_scaling",
        "quantization_config",
        "model_type",
    ] {
        assert!(k.contains(&key), "{key} missing from {notes:?}");
    }
}

/// Mixtral 8x7B. Card (mistral.ai/news/mixtral-of-experts): "46.7B total parameters but only
/// uses 12.9B parameters per token".
///
/// twin: 46,702,792,704 in total; activated 12,879,925,248 counting both embedding matrices,
/// which rounds to 12.9B; without the input embedding, 12,748,853,248 would not. The card
/// counts every dense parameter, and that is asserted.
#[test]
fn mixtral_8x7b() {
    let (s, notes) = scenario("mixtral-8x7b.json");
    let m = &s.model;
    let moe = m.moe.as_ref().expect("MoE");
    assert_eq!(
        (moe.experts, moe.top_k, moe.ffn_hidden, moe.shared_experts),
        (8, 2, 14336, 0)
    );

    let h = 4096;
    let attention = h * (h + 2 * 1024) + h * h;
    let expert = 3 * h * 14336;
    let dense = 32 * (attention + 2 * h + 8 * h) + 2 * 32_000 * h + h;
    assert_eq!(total(m), dense + 32 * 8 * expert);
    assert!(within(total(m), 46.7e9, 0.5), "{}", total(m));

    let active = activated_params(m);
    assert_eq!(active, dense + 32 * 2 * expert);
    assert!(rounds_to(active, 12.9e9, 3), "{active}");
    assert!(!rounds_to(active - embedding(m), 12.9e9, 3), "{active}");
    assert!(notes.is_empty(), "{notes:?}");
}

/// Qwen3-8B, dense. Card (huggingface.co/Qwen/Qwen3-8B): "Number of Parameters: 8.2B",
/// "Number of Paramaters (Non-Embedding): 6.95B".
///
/// twin: 8,190,726,144 in total, 6,946,066,432 without either embedding matrix; the q/k
/// norms (9,216 weights) are not counted.
#[test]
fn qwen3_8b_dense() {
    let (s, notes) = scenario("qwen3-8b.json");
    let m = &s.model;
    assert!(m.moe.is_none() && m.mla.is_none() && !m.qkv_bias);
    assert_eq!(
        (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim),
        (36, 4096, 32, 8, Some(128))
    );

    let h = 4096;
    let layer = h * (4096 + 2 * 1024) + 4096 * h + 3 * h * 12288 + 2 * h;
    let want = 36 * layer + 2 * 151_936 * h + h;
    assert_eq!(total(m), want);
    assert_eq!(activated_params(m), want);
    assert!(within(total(m), 8.2e9, 0.5), "{}", total(m));
    assert!(rounds_to(total(m) - 2 * embedding(m), 6.95e9, 3));
    assert!(notes.is_empty(), "{notes:?}");
}

/// The bundled mixture-of-experts scenarios write their models out key by key (the Megatron
/// recipes' shapes); each holds the model its Hugging Face config imports as, down to the
/// parameter count (total, activated, multi-token prediction included) and the routing shape.
#[test]
fn the_bundled_moe_scenarios_hold_their_configs_models() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (bundled, config) in [
        (
            "scenarios/moe/deepseek-v3-1024xH100.toml",
            "deepseek-v3.json",
        ),
        (
            "scenarios/moe/qwen3-30b-a3b-16xH100.toml",
            "qwen3-30b-a3b.json",
        ),
    ] {
        let b = twin_sim::setup::load(&repo.join(bundled), &[]).unwrap_or_else(|e| panic!("{e}"));
        let (hf, _) = scenario(config);
        let (b, hf) = (&b.model, &hf.model);
        assert_eq!(model_params(b), model_params(hf), "{bundled}");
        assert_eq!(activated_params(b), activated_params(hf), "{bundled}");
        assert_eq!(b.mtp_layers, hf.mtp_layers, "{bundled}");
        assert_eq!(b.moe, hf.moe, "{bundled}");
        assert_eq!(
            (b.heads, b.kv_heads, b.head_dim),
            (hf.heads, hf.kv_heads, hf.head_dim)
        );
    }
}

/// Nemotron 3 Nano 30B-A3B (`nemotron_h`). Card (huggingface.co/nvidia/
/// NVIDIA-Nemotron-3-Nano-30B-A3B-BF16): 31.6B in all, 3.2B activated, 3.6B with the
/// embeddings. The import reads the hybrid pattern, the Mamba mixer and the experts; the
/// matrix-by-matrix count is `sim/tests/hybrid.rs`'s, and `routed_scaling_factor` is the only
/// key listed as unmodelled.
#[test]
fn nemotron_3_nano() {
    let (s, notes) = scenario("nemotron-3-nano-30b-a3b.json");
    let m = &s.model;
    let h = m.hybrid.as_ref().expect("hybrid");
    assert_eq!(
        h.pattern,
        "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
    );
    let mamba = h.mamba.expect("Mamba mixer");
    assert_eq!(
        (mamba.heads, mamba.head_dim, mamba.state, mamba.groups),
        (64, 64, 128, 8)
    );
    assert_eq!((mamba.conv_kernel, mamba.chunk), (4, 128));
    assert!(!m.gated_mlp && !m.tied_embeddings);
    let moe = m.moe.as_ref().expect("MoE");
    assert_eq!((moe.experts, moe.top_k, moe.ffn_hidden), (128, 6, 1856));
    assert_eq!((moe.shared_experts, moe.shared_ffn_hidden), (1, 3712));
    assert_eq!(total(m), 31_577_937_344);
    assert!(within(total(m), 31.6e9, 0.5));
    let active = activated_params(m);
    assert!(rounds_to(active, 3.6e9, 2), "{active}");
    assert!(rounds_to(active - embedding(m), 3.2e9, 2), "{active}");
    assert_eq!(keys(&notes), ["routed_scaling_factor"]);
}
