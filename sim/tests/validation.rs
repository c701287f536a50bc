//! Whole published runs (data/validation/throughput.toml): the model, fitted only on
//! per-layer timings, predicts every published figure; these runs are held out of the fit.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use std::collections::BTreeSet;
use twin_sim::known_bias::{self, Direction};
use twin_sim::profile::bundled::Pricing;
use twin_sim::validate::{parse_table, row_cases, validate_table, Table, Validation};

const THROUGHPUT: &str = include_str!("../../data/validation/throughput.toml");

/// Issue 4's acceptance: median |error| <= 5% and max <= 12% over the published rows. The
/// current figures are in docs/accuracy.md.
#[test]
fn published_runs_are_predicted_within_the_recorded_accuracy() {
    let table = parse_table(THROUGHPUT, "throughput.toml").unwrap();
    let v = validate_table(&table, &[], &Pricing::Defaults).unwrap();
    println!("{}", v.to_text());
    assert_eq!(v.rows.len(), 9);
    assert_eq!(out_of_memory(&v), Vec::<&str>::new());
    assert_eq!(flops_mismatch(&v), Vec::<&str>::new());
    assert!(v.max_abs_error <= 0.12, "max {}", v.max_abs_error);
    assert!(v.median_abs_error <= 0.05, "median {}", v.median_abs_error);
}

/// Runs that are in neither the fit nor throughput.toml: the other rows of the same SC'21
/// table (sim/tests/data/megatron-sc21-holdout.toml). The current figures are in
/// docs/validation.md ("Held-out rows"); the bounds are the acceptance's.
#[test]
fn held_out_runs_are_predicted_as_well_as_the_published_ones() {
    let text = include_str!("data/megatron-sc21-holdout.toml");
    let table = parse_table(text, "megatron-sc21-holdout.toml").unwrap();
    let v = validate_table(&table, &[], &Pricing::Defaults).unwrap();
    println!("{}", v.to_text());
    assert_eq!(v.rows.len(), 4);
    assert_eq!(out_of_memory(&v), Vec::<&str>::new());
    assert!(v.max_abs_error <= 0.12, "max {}", v.max_abs_error);
    assert!(v.median_abs_error <= 0.05, "median {}", v.median_abs_error);
}

/// The bundled A100 profile predicts the same as the defaults it documents.
#[test]
fn a100_profile_predicts_like_the_defaults() {
    let table = parse_table(THROUGHPUT, "throughput.toml").unwrap();
    let mut small = table.clone();
    small.run.retain(|r| r.id == "korthikanti-t5-22b");
    let profile = twin_sim::profile::load(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scenarios/profiles/a100-dgx.toml"
    )))
    .unwrap();
    let with = validate_table(&small, std::slice::from_ref(&profile), &Pricing::Defaults).unwrap();
    let without = validate_table(&small, &[], &Pricing::Defaults).unwrap();
    for (a, b) in with.rows.iter().zip(&without.rows) {
        // Only the inter-node efficiency differs (0.96 vs 0.94) and a one-node run never uses it.
        assert_eq!(a.predicted, b.predicted, "{}", a.field);
    }
}

const MODERN: &str = include_str!("../../data/validation/throughput-modern.toml");

fn modern_validation() -> twin_sim::validate::Validation {
    let table = parse_table(MODERN, "throughput-modern.toml").unwrap();
    let profiles = [
        twin_sim::profile::parse_str(
            include_str!("../../scenarios/profiles/h100-dgx.toml"),
            "h100-dgx.toml",
        )
        .unwrap(),
        twin_sim::profile::parse_str(
            include_str!("../../scenarios/profiles/h100-grand-teton.toml"),
            "h100-grand-teton.toml",
        )
        .unwrap(),
    ];
    validate_table(&table, &profiles, &Pricing::Defaults).unwrap()
}

/// Every published run ran, so each should be predicted to fit in its GPUs' memory, and each
/// is. NeMo 24.07's Nemotron-340B on 128 GPUs (tp 8, pp 8, dp 2) was 8.7 GiB over on its first
/// stage with gradients and Adam's moments counted fp32; its launcher yaml keeps both in bf16
/// (`grad_sync_dtype: bf16`, `dtype: bf16`), and it fits with 13.1 GiB free.
const MODERN_OUT_OF_MEMORY: &[&str] = &[];

/// The modern rows whose published FLOPs per token (TFLOP/s over tokens/s) neither of twin's
/// counts of the row's model matches within 2%: DeepSeek-V3 (+2.4%, Megatron-Bridge's
/// conventions for latent attention and multi-token prediction), GPT-OSS-120B twice (+20%:
/// Megatron-Bridge's count takes a gated MLP as gated only under `F.silu`, and every layer's
/// attention over the whole causal sequence, where GPT-OSS has a clamped SwiGLU and a 128-token
/// window on half its layers), and 26.04.01's Llama 3 70B (+2.3%: its tokens/s and TFLOP/s
/// disagree with each other by that much, where every other release of the layout agrees
/// within 0.1%). docs/journal/2026-12-01-memory-verdicts-on-published-runs.md.
const MODERN_FLOPS_MISMATCH: &[&str] = &[
    "mb2509-deepseek-v3",
    "mb2511-gpt-oss-120b",
    "mb260401-llama3-70b",
    "mb260401-gpt-oss-120b",
];

/// The ids of the rows whose published FLOPs per token twin's counts do not match.
fn flops_mismatch(v: &Validation) -> Vec<&str> {
    v.rows
        .iter()
        .filter(|r| r.flops_mismatch())
        .map(|r| r.id.as_str())
        .collect()
}

/// The ids of the rows whose prediction puts them out of memory.
fn out_of_memory(v: &Validation) -> Vec<&str> {
    v.rows
        .iter()
        .filter(|r| !r.fits)
        .map(|r| r.id.as_str())
        .collect()
}

/// The modern table (data/validation/throughput-modern.toml, H100, 2024-26) with the bundled
/// H100 profiles (DGX H100, and Grand Teton for torchtitan's 500 W HBM2e parts): every dense
/// row, every mixture-of-experts row and the Mamba hybrid are simulated, and the errors stay
/// within today's figures
/// (docs/accuracy.md), per group as over the whole table. The bounds are what the model
/// achieves now, so a change that makes any group worse fails here.
#[test]
fn modern_runs_are_covered_and_predicted_within_the_recorded_accuracy() {
    let v = modern_validation();
    println!("{}", v.to_text());
    let table = parse_table(MODERN, "throughput-modern.toml").unwrap();
    let dense = table
        .run
        .iter()
        .filter(|r| r.arch.as_deref() == Some("dense"))
        .count();
    // Every row is simulated.
    assert_eq!(v.compared_rows(), dense + MODERN_MOE_SIMULATED);
    assert_eq!(v.rows.len(), v.compared_rows());
    assert_eq!(v.compared_rows(), table.run.len());
    assert!(v.uncovered.is_empty(), "{:?}", v.uncovered);
    assert_eq!(out_of_memory(&v), MODERN_OUT_OF_MEMORY);
    assert_eq!(flops_mismatch(&v), MODERN_FLOPS_MISMATCH);
    let bound = |group: &str| -> (f64, f64) {
        match group {
            "all" => MODERN_ALL,
            "dense" => MODERN_DENSE,
            "MoE" => MODERN_MOE,
            "FP8" => MODERN_FP8,
            "BF16" => MODERN_BF16,
            "megatron-core" => MODERN_MEGATRON,
            "torchtitan" => MODERN_TORCHTITAN,
            "llm-foundry" => MODERN_LLM_FOUNDRY,
            "long context" => MODERN_LONG_CONTEXT,
            other => panic!("unexpected group {other}"),
        }
    };
    let (median, max) = bound("all");
    assert!(
        v.median_abs_error <= median,
        "median {}",
        v.median_abs_error
    );
    assert!(v.max_abs_error <= max, "max {}", v.max_abs_error);
    // Every known bias is shown by some row here, and holds on every row it applies to.
    let seen = biases_hold(&table, &v);
    let all: BTreeSet<&str> = known_bias::ALL.iter().map(|b| b.id).collect();
    assert_eq!(seen, all, "a known bias no published row shows");
    assert_eq!(v.groups.len(), 8);
    for g in &v.groups {
        let (median, max) = bound(&g.group);
        assert!(
            g.median_abs_error <= median,
            "{}: median {}",
            g.group,
            g.median_abs_error
        );
        assert!(
            g.max_abs_error <= max,
            "{}: max {}",
            g.group,
            g.max_abs_error
        );
    }
}

/// (median, max) |step-time error| of the modern table today (docs/accuracy.md), over all rows
/// and per group, each rounded up by 0.2 points: a change that makes a group worse fails.
///
/// The GPU-timed Hopper GEMM curve (docs/journal/2026-11-30-gpu-timed-gemm-curve.md: the old
/// curve's ramp carried PyTorch's host dispatch) and the forward FP8 GEMMs' fast accumulation
/// (both measured on one H200, docs/measurements/2026-11-30-h200-moe-gemms.md) moved these
/// from: all 9.0%, dense 8.0%, FP8 6.7%, BF16 10.3%, Megatron-Core 4.7% (max 14.8%),
/// torchtitan 16.8%, llm-foundry 7.9%, long context 6.7%, mixture of experts 17.7% (max
/// 51.9%). The rows that got worse were already too fast, but llm-foundry's long-sequence
/// ones.
/// The parameter gathers in the dtype each row's recipe gathers (`fp8_param_gather`: FP8 for
/// Megatron-Bridge and torchtitan, 16-bit for NeMo 24.07 and llm-foundry) took all from 10.0% to
/// 9.7%, FP8 from 6.4% to 6.1%, Megatron-Core from 5.0% to 4.7%; the Mamba hybrid (-29.1%)
/// took all back to 10.0%.
const MODERN_ALL: (f64, f64) = (0.101, 0.549);
/// Each framework's optimizer step as it runs it (`optimizer.kernel`, `optimizer.clip_scale`:
/// llm-foundry's unfused AdamW, PyTorch's clipping on every step) took dense from 8.3% to
/// 8.0%, llm-foundry from 9.9% to 9.3%, BF16 from 11.9% to 11.8%, and FP8 from 6.1% to 6.3%
/// (llm-foundry's FP8 1B row, already too slow, +6.1% to +6.3%).
const MODERN_DENSE: (f64, f64) = (0.082, 0.357);
/// The mixture-of-experts rows: Qwen3-30B-A3B, GPT-OSS-120B, Qwen3-235B-A22B, DeepSeek-V3
/// (etp = 1; DeepSeek-V3 with multi-token prediction and its pipeline layout) and the Mamba
/// hybrid Nemotron 3 Nano.
const MODERN_MOE_SIMULATED: usize = 10;
/// The MoE rows today: 21.6% median, 54.8% max, every row too fast (docs/accuracy.md, Known
/// misses). How each mechanism moved them is in docs/journal/2026-11-validation-history.md and
/// docs/journal/2026-12-01-megatron-core-moe-report.md: the per-GPU dispatch of DeepEP and
/// HybridEP and the combined 1F1B's all-to-alls beside the whole next pass, both checked
/// against NVIDIA's published measurements, took the median from 18.7% to 21.6%.
const MODERN_MOE: (f64, f64) = (0.218, 0.549);
const MODERN_FP8: (f64, f64) = (0.065, 0.357);
const MODERN_BF16: (f64, f64) = (0.120, 0.258);
/// Megatron-Bridge's rows reduce gradients in bf16, as their recipes set
/// (`grad_reduce_dtype`): that took the Llama 3 8B row's +13.7% to +12.3%.
const MODERN_MEGATRON: (f64, f64) = (0.049, 0.125);
/// torchtitan: every row too fast; the same framework file predicts torchtitan's own A100 runs
/// at a 1.7% median (`torchtitan_runs_on_a100_are_predicted_within_the_recorded_accuracy`).
const MODERN_TORCHTITAN: (f64, f64) = (0.177, 0.357);
const MODERN_LLM_FOUNDRY: (f64, f64) = (0.095, 0.258);
/// The bf16 gradient reduction of Megatron-Bridge's rows moved the 405B rows (context
/// parallelism 2) by 0.2-0.6 points and the group's median from 5.9% to 6.2%.
const MODERN_LONG_CONTEXT: (f64, f64) = (0.063, 0.357);

/// The modern table's DeepSeek-V3 row (Megatron-Bridge, 1,024 H100s).
fn deepseek_v3_row() -> twin_sim::validate::RunRow {
    parse_table(MODERN, "throughput-modern.toml")
        .unwrap()
        .run
        .into_iter()
        .find(|r| r.id == "mb2509-deepseek-v3")
        .expect("the DeepSeek-V3 row")
}

/// DeepSeek-V3 at Megatron-Bridge's published layout (1,024 H100s, tp 2, pp 8, vpp 4, ep 64,
/// its pipeline layout and multi-token prediction) fits, as the run did: every stage's peak,
/// reported by category (which sum to it), stays under the usable HBM of an 80 GB H100.
#[test]
fn deepseek_v3_fits_at_its_published_layout() {
    let s = twin_sim::validate::modern::modern_scenario(&deepseek_v3_row()).unwrap();
    let opts = twin_sim::PredictOptions {
        collapse: true,
        ..Default::default()
    };
    let p = twin_sim::predict(&s, &opts).unwrap();
    let usable = s.cluster.gpu.usable_bytes();
    assert!(
        p.report.fits,
        "peak {} of {usable}",
        p.report.peak_memory_bytes
    );
    for r in &p.report.ranks {
        let m = &r.memory_breakdown;
        let sum = m.weights + m.grads + m.optimizer + m.activations + m.buffers + m.reserved;
        assert_eq!(sum, r.peak_memory_bytes, "rank {:?}", r.rank);
        assert!(r.peak_memory_bytes <= usable);
        // The recipe reduces gradients in bf16 (grad_reduce_in_fp32 = false): the gradient
        // buffer holds as many bytes as the bf16 weights.
        assert_eq!(m.grads, m.weights, "rank {:?}", r.rank);
    }
    // The busiest stage's peak as a share of usable HBM, today's with a margin: 63% with the
    // recipe's `recompute_modules = ["mla_up_proj", "mlp"]` (the latent attention's Q, K and V
    // and the dense layers' MLP insides recomputed, not kept); 85% when the attention core
    // was recomputed instead and Q, K and V kept; 94% when gradients and Adam's moments were
    // counted fp32, where the recipe keeps both in bf16 (grad_reduce_in_fp32 = false,
    // exp_avg_dtype = exp_avg_sq_dtype = bf16). No published figure gives the run's memory.
    let share = p.report.peak_memory_bytes as f64 / usable as f64;
    assert!((0.6..0.66).contains(&share), "{share}");
}

/// Block scaling against the one published pair: DeepSeek-V3's Megatron-Bridge run quotes 338
/// TFLOP/s per GPU with current scaling and 330 with 128 x 128 / 1 x 128 block scaling (the
/// row's `fp8_recipe` text), 1.024x slower. The row's scenario, priced by the bundled DGX H100
/// profile's GPU-timed curves (nothing fitted to the pair), is slower under block scaling by
/// about as much: by 1-5% (1.027 now; without a blockwise curve it would be exactly 1).
#[test]
fn block_scaling_slows_deepseek_v3_as_published() {
    let row = deepseek_v3_row();
    let profile = twin_sim::profile::parse_str(
        include_str!("../../scenarios/profiles/h100-dgx.toml"),
        "h100-dgx.toml",
    )
    .unwrap();
    let step = |recipe| {
        let mut s = twin_sim::validate::modern::modern_scenario(&row).unwrap();
        s.training.fp8_recipe = recipe;
        let opts = twin_sim::PredictOptions {
            collapse: true,
            ..Default::default()
        };
        twin_sim::predict_with(&s, &opts, Some(&profile))
            .unwrap()
            .report
            .step_time_s
    };
    use twin_sim::scenario::Fp8Recipe;
    let ratio = step(Fp8Recipe::Blockwise) / step(Fp8Recipe::Tensorwise);
    assert!((1.01..1.05).contains(&ratio), "{ratio}");
}

/// A held-out table of A100 runs validated with the bundled A100 profile: every row simulated,
/// within `(median, max)` |step-time error|.
fn a100_control(text: &str, name: &str, rows: usize, bounds: (f64, f64)) {
    let profile = twin_sim::profile::parse_str(
        include_str!("../../scenarios/profiles/a100-dgx.toml"),
        "a100-dgx.toml",
    )
    .unwrap();
    control(text, name, rows, std::slice::from_ref(&profile), bounds);
}

/// A held-out table validated with `profiles` (twin's defaults when empty): every row
/// simulated and predicted to fit in memory, within `(median, max)` |step-time error|.
fn control(
    text: &str,
    name: &str,
    rows: usize,
    profiles: &[twin_sim::profile::Profile],
    (median, max): (f64, f64),
) {
    let table = parse_table(text, name).unwrap();
    let v = validate_table(&table, profiles, &Pricing::Defaults).unwrap();
    println!("{}", v.to_text());
    biases_hold(&table, &v);
    assert_eq!(v.rows.len(), rows);
    assert!(v.uncovered.is_empty(), "{:?}", v.uncovered);
    // Every run ran: each is predicted to fit; and each shape matches its published FLOPs.
    assert_eq!(out_of_memory(&v), Vec::<&str>::new());
    assert_eq!(flops_mismatch(&v), Vec::<&str>::new());
    assert!(v.max_abs_error <= max, "max {}", v.max_abs_error);
    assert!(
        v.median_abs_error <= median,
        "median {}",
        v.median_abs_error
    );
}

/// torchtitan on 64 A100s (April 2024, sim/tests/data/torchtitan-a100.toml): FSDP2 runs of
/// torchtitan's own first performance page, held out of every fit, on a GPU whose peak and
/// power limit are published. They check the torchtitan framework file where the modern
/// table's torchtitan rows (on 500 W Grand Teton H100s of unpublished peak) cannot. The
/// current figures are in docs/accuracy.md; the bounds hold them.
#[test]
fn torchtitan_runs_on_a100_are_predicted_within_the_recorded_accuracy() {
    let text = include_str!("data/torchtitan-a100.toml");
    a100_control(text, "torchtitan-a100.toml", 8, (0.02, 0.10));
}

/// llm-foundry on A100 (sim/tests/data/llm-foundry-a100.toml): the 34 amp_bf16 FSDP rows of
/// 1B-30B MPT models in llm-foundry's benchmark README, on the GPU whose Triton
/// FlashAttention figure the framework's attention curve comes from, held out of every fit.
/// A known miss, named in docs/accuracy.md: every row but two is predicted slower than it ran,
/// more so with longer sequences and with activation checkpointing. The bounds hold today's
/// figures so that it cannot get worse unnoticed.
#[test]
fn llm_foundry_runs_on_a100_are_predicted_within_the_recorded_accuracy() {
    let text = include_str!("data/llm-foundry-a100.toml");
    a100_control(text, "llm-foundry-a100.toml", 34, (0.177, 0.323));
}

/// Blackwell (sim/tests/data/megatron-bridge-b200.toml): Megatron-Bridge's runs on DGX B200
/// nodes (25.09 and 25.11): Llama 3 8B on one node and Llama 3.1 405B on 16, with FP8 current
/// scaling and with MXFP8, and 25.09's capacity-padded Qwen3 MoE runs on one and eight nodes,
/// predicted with the bundled B200 profile (scenarios/profiles/b200-dgx.toml: the DGX H100
/// profile's GEMM plateaus times the B200/H200 ratio of public sustained-matmul measurements,
/// HBM and NVLink efficiencies from public B200 measurements; nothing is fitted to these
/// rows). Without it, with the default curves, the dense rows were 7-30% too fast; with it
/// they are -11.7% to +1.2%. The MoE rows are 19-25% too fast, where the capacity-padded H100
/// rows of the same models are 6-10%. The bounds hold today's figures, rounded up by 0.2
/// points (docs/accuracy.md).
#[test]
fn runs_on_b200_are_predicted_within_the_recorded_accuracy() {
    let text = include_str!("data/megatron-bridge-b200.toml");
    let profile = twin_sim::profile::parse_str(
        include_str!("../../scenarios/profiles/b200-dgx.toml"),
        "b200-dgx.toml",
    )
    .unwrap();
    control(
        text,
        "megatron-bridge-b200.toml",
        11,
        std::slice::from_ref(&profile),
        (0.076, 0.248),
    );
}

/// Megatron-Core's own mixture-of-experts report (sim/tests/data/megatron-core-moe-report.toml,
/// arXiv:2603.07685): its Qwen3-235B-A22B run on 256 H100s, BF16, dropless and force-balanced
/// with DeepEP and the 1F1B all-to-all overlap, at the layout of the modern table's Megatron-Bridge
/// rows of the same model. Held out of every fit; predicted at -13.9%, too fast like every
/// dropless row (the Megatron-Bridge 25.11 FP8 run of that layout: -20.5%; docs/accuracy.md).
/// The bound holds today's figure, rounded up by 0.2 points.
#[test]
fn megatron_core_moe_report_run_is_predicted_within_the_recorded_accuracy() {
    let text = include_str!("data/megatron-core-moe-report.toml");
    let profile = twin_sim::profile::parse_str(
        include_str!("../../scenarios/profiles/h100-dgx.toml"),
        "h100-dgx.toml",
    )
    .unwrap();
    control(
        text,
        "megatron-core-moe-report.toml",
        1,
        std::slice::from_ref(&profile),
        (0.141, 0.141),
    );
}

/// Checks each known bias (`twin_sim::known_bias`, the note a report prints for a kind of
/// job) against the published rows: every row whose scenario it applies to misses in its
/// direction. Returns the biases some row showed.
fn biases_hold(table: &Table, v: &Validation) -> BTreeSet<&'static str> {
    let mut seen = BTreeSet::new();
    for row in &table.run {
        let Some(case) = row_cases(row).ok().and_then(|c| c.into_iter().next()) else {
            continue;
        };
        for bias in known_bias::of(&case.scenario) {
            for c in v.rows.iter().filter(|c| c.id == row.id) {
                let holds = match bias.direction {
                    Direction::TooFast => c.error < 0.0,
                    Direction::TooSlow => c.error > 0.0,
                };
                assert!(
                    holds,
                    "{}: error {:+.3} against the known bias {} ({:?}); correct or drop the \
                     bias (sim/src/known_bias.rs) and docs/accuracy.md",
                    c.id, c.error, bias.id, bias.direction
                );
                seen.insert(bias.id);
            }
        }
    }
    seen
}
