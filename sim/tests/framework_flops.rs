//! A step's model FLOPs as each framework's own log counts them (`report.framework_flops`,
//! the framework file's `report.attention_flops`): twin's count (Megatron's, every attention
//! core's full square) with the attention core counted the framework's way. Checked against
//! the frameworks' published formulas on Llama 3 8B at 8,192 tokens, where the two conventions
//! are the two figures NVIDIA's tables print for the same model: NeMo 24.07's 711 TFLOP/s at
//! 12,273 tokens/s per GPU (57.9 GFLOP a token, the full square) and Megatron-Bridge 25.11's
//! 744 at 14,451 (51.5, causal).
#![cfg(test)]

use twin_sim::scenario::framework::AttentionFlops;
use twin_sim::setup::parse_str;
use twin_sim::{predict, PredictOptions};

const LLAMA3_8B: &str = r#"
name = "llama3-8b-8k"

[model]
preset = "llama3-8b"
seq_len = 8192

[cluster]
gpu = "h100-sxm-80gb"
gpus = 8
node = "dgx-h100"

[parallel]
tp = 1
pp = 1
dp = 8
zero = 3

[training]
global_batch = 16
micro_batch = 1
precision = "bf16"
"#;

/// Model FLOPs per token of Llama 3 8B (h 4096, 32 layers, 32 heads and 8 KV heads of 128,
/// SwiGLU 14,336, vocab 128,256) at `s` tokens by Megatron-LM's `num_floating_point_operations`
/// (NVIDIA/Megatron-LM@8873b55d6aad08f0f535174746d2836df3dfa93b:megatron/training/training.py): `12 L h^2 (1 + g/n + s/h k)`
/// for attention with `k` = 1 before that commit and 1/2 from it on, `12 L h f 3/2` for the
/// MLP, `6 h V` for the logits.
fn megatron_lm_per_token(s: f64, causal: bool) -> f64 {
    let (h, l, f, v, g, n) = (4096.0, 32.0, 14336.0, 128256.0, 8.0, 32.0);
    let k = if causal { 0.5 } else { 1.0 };
    12.0 * l * h * h * (1.0 + g / n + s / h * k) + 12.0 * l * h * f * 1.5 + 6.0 * h * v
}

/// FLOPs per token of a report's `tflops_per_gpu` figure.
fn per_token(tflops_per_gpu: f64, tokens_per_s_per_gpu: f64) -> f64 {
    tflops_per_gpu * 1e12 / tokens_per_s_per_gpu
}

fn report(framework: &str) -> twin_sim::report::Report {
    let overrides = [format!("training.framework=\"{framework}\"")];
    let s = parse_str(LLAMA3_8B, "llama3-8b-8k.toml", &overrides).unwrap();
    predict(&s, &PredictOptions::default()).unwrap().report
}

#[test]
fn megatron_core_counts_the_causal_pairs_as_megatron_lm_does() {
    let r = report("megatron-core");
    let f = &r.framework_flops;
    assert_eq!(f.framework, "megatron-core");
    assert_eq!(f.attention, AttentionFlops::Causal);
    // twin's model FLOPs are Megatron-LM's count before the change: the full square.
    let full = per_token(r.model_tflops_per_gpu, r.tokens_per_s_per_gpu);
    let want_full = megatron_lm_per_token(8192.0, false);
    assert!(
        (full / want_full - 1.0).abs() < 1e-9,
        "{full} vs {want_full}"
    );
    assert!((want_full / 1e9 - 57.913).abs() < 1e-3);
    // The framework's count: the causal pairs, s (s + 1) / 2 of them against Megatron-LM's
    // s^2 / 2, so half a key more per query: 12 L h / 2 FLOPs a token (786,432 of 51.5 G).
    let causal = per_token(f.tflops_per_gpu, r.tokens_per_s_per_gpu);
    let want_causal = megatron_lm_per_token(8192.0, true);
    let half_key = 12.0 * 32.0 * 4096.0 / 2.0;
    assert!(
        (causal - want_causal - half_key).abs() < 1.0,
        "{causal} vs {want_causal}"
    );
    assert!((want_causal / 1e9 - 51.470).abs() < 1e-3);
    // MFU follows the count at the same step time and peak.
    assert!((f.mfu / r.mfu - causal / full).abs() < 1e-12);
}

#[test]
fn torchtitan_llm_foundry_and_deepspeed_count_the_full_square_hf_no_attention() {
    for fw in ["torchtitan", "llm-foundry", "deepspeed"] {
        let r = report(fw);
        assert_eq!(r.framework_flops.attention, AttentionFlops::Full, "{fw}");
        assert_eq!(
            r.framework_flops.tflops_per_gpu, r.model_tflops_per_gpu,
            "{fw}"
        );
        assert_eq!(r.framework_flops.mfu, r.mfu, "{fw}");
    }
    // The Trainer's 6 x parameters per token: twin's count less the attention core's
    // 12 L s n d = 12.9 GFLOP a token.
    let r = report("hf");
    assert_eq!(r.framework_flops.attention, AttentionFlops::None);
    let none = per_token(r.framework_flops.tflops_per_gpu, r.tokens_per_s_per_gpu);
    let want = megatron_lm_per_token(8192.0, false) - 12.0 * 32.0 * 8192.0 * 4096.0;
    assert!((none / want - 1.0).abs() < 1e-9, "{none} vs {want}");
}

/// Windowed layers count their window's pairs (Megatron-Bridge's average causal window
/// context, `w - w (w - 1) / 2s`), so a sliding window lowers the framework's count and not
/// twin's full-square one.
#[test]
fn a_sliding_window_counts_its_pairs() {
    let base = parse_str(
        LLAMA3_8B,
        "llama3-8b-8k.toml",
        &["training.framework=\"megatron-core\"".to_string()],
    )
    .unwrap();
    let windowed = parse_str(
        LLAMA3_8B,
        "llama3-8b-8k.toml",
        &[
            "training.framework=\"megatron-core\"".to_string(),
            "model.sliding_window=128".to_string(),
            "model.sliding_window_every=1".to_string(),
        ],
    )
    .unwrap();
    let opts = PredictOptions::default();
    let a = predict(&base, &opts).unwrap().report;
    let b = predict(&windowed, &opts).unwrap().report;
    let tokens = |r: &twin_sim::report::Report| r.tokens_per_s_per_gpu;
    let full = |r: &twin_sim::report::Report| per_token(r.model_tflops_per_gpu, tokens(r));
    let counted =
        |r: &twin_sim::report::Report| per_token(r.framework_flops.tflops_per_gpu, tokens(r));
    assert!((full(&a) / full(&b) - 1.0).abs() < 1e-9);
    // Attention per token, causal: 12 L n d x context, context (s + 1) / 2 unwindowed and
    // w - w (w - 1) / 2s with a window of 128.
    let (s, w) = (8192.0, 128.0);
    let per_key = 12.0 * 32.0 * 4096.0;
    let want = counted(&a) - per_key * (s + 1.0) / 2.0 + per_key * (w - w * (w - 1.0) / (2.0 * s));
    assert!(
        (counted(&b) / want - 1.0).abs() < 1e-9,
        "{} vs {want}",
        counted(&b)
    );
}
