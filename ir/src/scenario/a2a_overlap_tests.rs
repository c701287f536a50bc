//! `[training] moe_a2a_overlap`: it reads, defaults to false, is accepted where Megatron-Core
//! runs its combined 1F1B, and each refusal names the keys, their values and what to write
//! instead.

use super::ScenarioError;
use super::{moe_a2a_overlap_blocker, A2aOverlapBlocker, ErrorKind, Scenario};

/// A mixture-of-experts model of 4 experts and 4 layers on 8 GPUs, expert-parallel over 2;
/// `[training]` is the last section, so a line appended to it lands there.
const MOE: &str = r#"[model]
layers = 4
hidden = 64
heads = 4
seq_len = 128
vocab = 1000
experts = 4
top_k = 2
[cluster]
gpu = "h100-sxm-80gb"
gpus = 8
[parallel]
ep = 2
[training]
global_batch = 8
"#;

/// `MOE` with `moe_a2a_overlap = true` as its last line, and that line's number.
fn with_overlap() -> (String, u32) {
    let line = MOE.lines().count() as u32 + 1;
    (format!("{MOE}moe_a2a_overlap = true\n"), line)
}

fn resolve(text: &str, overrides: &[&str]) -> Result<Scenario, ScenarioError> {
    super::resolve_text(text, "moe.toml", overrides)
}

/// The refusal of `moe_a2a_overlap = true` under `overrides`, checked to be a cross-field
/// error that names the flag's rule and says what to write instead.
fn refused(overrides: &[&str]) -> ScenarioError {
    let (text, _) = with_overlap();
    let e = resolve(&text, overrides).expect_err("refused");
    assert_eq!(e.kind, ErrorKind::CrossField, "{e}");
    assert!(e.message.contains("moe_a2a_overlap"), "{e}");
    assert!(e.allowed.contains("moe_a2a_overlap = false"), "{e}");
    // Without the flag the same layout is accepted: the refusal is the flag's.
    resolve(MOE, overrides).unwrap_or_else(|e| panic!("{overrides:?} without the flag: {e}"));
    e
}

#[test]
fn moe_a2a_overlap_reads_and_defaults_to_false() {
    assert!(!resolve(MOE, &[]).unwrap().training.moe_a2a_overlap);
    let (text, _) = with_overlap();
    let s = resolve(&text, &[]).unwrap();
    assert!(s.training.moe_a2a_overlap);
    assert_eq!(moe_a2a_overlap_blocker(&s), None);
    let s = resolve(MOE, &["training.moe_a2a_overlap=true"]).unwrap();
    assert!(s.training.moe_a2a_overlap);
    let s = resolve(&text, &["training.moe_a2a_overlap=false"]).unwrap();
    assert!(!s.training.moe_a2a_overlap);
}

#[test]
fn moe_a2a_overlap_takes_only_a_boolean() {
    let text = format!("{MOE}moe_a2a_overlap = \"yes\"\n");
    let e = resolve(&text, &[]).expect_err("a string");
    assert_eq!(e.key, "training.moe_a2a_overlap", "{e}");
    assert_eq!(e.line, Some(MOE.lines().count() as u32 + 1), "{e}");
}

/// Megatron-Core runs the combined 1F1B without a pipeline and under the interleaved schedule,
/// with selective recomputation, FP8 and one multi-token prediction layer.
#[test]
fn moe_a2a_overlap_is_accepted_where_megatron_runs_it() {
    let (text, _) = with_overlap();
    let cases: &[&[&str]] = &[
        &[],
        &[
            "parallel.pp=2",
            "parallel.vpp=2",
            "parallel.schedule=\"interleaved-1f1b\"",
        ],
        &["training.recompute=\"selective\""],
        &["training.precision=\"fp8\""],
        &["training.precision=\"fp16\""],
        &["model.mtp_layers=1"],
        &["parallel.ep=4"],
    ];
    for overrides in cases {
        let s = resolve(&text, overrides).unwrap_or_else(|e| panic!("{overrides:?}: {e}"));
        assert!(s.training.moe_a2a_overlap, "{overrides:?}");
        assert_eq!(moe_a2a_overlap_blocker(&s), None, "{overrides:?}");
    }
}

/// Written in the file with nothing overridden, the error sits on the flag's line.
#[test]
fn a_refusal_points_at_the_flag_in_the_file() {
    let dense = MOE
        .replace("experts = 4\ntop_k = 2\n", "")
        .replace("ep = 2\n", "");
    let line = dense.lines().count() as u32 + 1;
    let text = format!("{dense}moe_a2a_overlap = true\n");
    let e = resolve(&text, &[]).expect_err("dense");
    assert_eq!((e.origin.as_str(), e.line), ("moe.toml", Some(line)), "{e}");
    assert_eq!(e.key, "training.moe_a2a_overlap", "{e}");
    assert!(e.message.contains("dense"), "{e}");
    assert!(e.allowed.contains("model.experts"), "{e}");
    resolve(&dense, &[]).unwrap();
}

#[test]
fn moe_a2a_overlap_needs_expert_parallelism() {
    let e = refused(&["parallel.ep=1"]);
    assert_eq!(e.key, "parallel.ep", "{e}");
    assert!(e.message.contains("ep = 1"), "{e}");
    assert!(e.allowed.contains("parallel.ep > 1"), "{e}");
    let (text, line) = with_overlap();
    let e = resolve(&text.replace("ep = 2\n", ""), &[]).expect_err("ep 1 by default");
    assert_eq!(
        (e.key.as_str(), e.line),
        ("training.moe_a2a_overlap", Some(line - 1))
    );
}

#[test]
fn moe_a2a_overlap_needs_a_framework_that_can() {
    for fw in ["torchtitan", "deepspeed"] {
        let set = format!("training.framework=\"{fw}\"");
        let e = refused(&[&set]);
        assert_eq!(e.key, "training.framework", "{e}");
        assert!(e.message.contains(fw), "{e}");
        assert!(e.message.contains("overlaps.moe_a2a_overlap"), "{e}");
        assert!(e.allowed.contains("megatron-core"), "{e}");
    }
    // nemo is megatron-core.
    let (text, _) = with_overlap();
    resolve(&text, &["training.framework=\"nemo\""]).unwrap();
}

/// Megatron-Core: "virtual_pipeline_model_parallel_size must be specified when
/// pipeline_model_parallel_size > 1".
#[test]
fn moe_a2a_overlap_under_a_pipeline_needs_the_interleaved_schedule() {
    for schedule in ["1f1b", "gpipe", "zero-bubble"] {
        let set = format!("parallel.schedule=\"{schedule}\"");
        let e = refused(&["parallel.pp=2", &set]);
        assert_eq!(e.key, "parallel.schedule", "{e}");
        assert!(e.message.contains("pp = 2"), "{e}");
        assert!(e.allowed.contains("interleaved-1f1b"), "{e}");
    }
    let e = refused(&["parallel.pp=2"]);
    assert_eq!(e.key, "parallel.pp", "{e}");
}

#[test]
fn moe_a2a_overlap_refuses_full_recomputation() {
    let e = refused(&["training.recompute=\"full\""]);
    assert_eq!(
        (e.key.as_str(), e.value.as_str()),
        ("training.recompute", "\"full\"")
    );
    assert!(e.allowed.contains("selective"), "{e}");
    refused(&["training.recompute=\"full\"", "training.recompute_layers=1"]);
}

#[test]
fn moe_a2a_overlap_refuses_fp32() {
    let e = refused(&["training.precision=\"fp32\""]);
    assert_eq!(e.key, "training.precision", "{e}");
    assert!(e.allowed.contains("bf16"), "{e}");
}

/// Megatron-Core refuses the overlap with recomputed MoE blocks, and builds it on the
/// transformer model only: not for a hybrid model.
#[test]
fn moe_a2a_overlap_refuses_recomputed_moe_blocks_and_hybrid_models() {
    let e = refused(&[
        "training.recompute=\"selective\"",
        "training.recompute_modules=[\"moe\", \"core_attn\"]",
    ]);
    assert_eq!(e.key, "training.recompute_modules", "{e}");
    assert!(e.allowed.contains("without \"moe\""), "{e}");
    let e = refused(&["model.layers=2", "model.hybrid_pattern=\"*E\""]);
    assert_eq!(e.key, "model.hybrid_pattern", "{e}");
}

#[test]
fn moe_a2a_overlap_allows_at_most_one_mtp_layer() {
    let e = refused(&["model.mtp_layers=2"]);
    assert_eq!(e.key, "model.mtp_layers", "{e}");
    assert!(e.message.contains("has 2"), "{e}");
}

/// The blocker names the first rule a scenario breaks, flag or not.
#[test]
fn the_blocker_follows_the_rules_in_order() {
    let cases: &[(&[&str], A2aOverlapBlocker)] = &[
        (&["parallel.ep=1"], A2aOverlapBlocker::NoExpertParallelism),
        (
            &["training.framework=\"torchtitan\"", "parallel.ep=1"],
            A2aOverlapBlocker::NoExpertParallelism,
        ),
        (
            &["training.framework=\"deepspeed\"", "parallel.pp=2"],
            A2aOverlapBlocker::Framework,
        ),
        (&["parallel.pp=2"], A2aOverlapBlocker::Pipeline),
        (
            &["parallel.pp=2", "training.recompute=\"full\""],
            A2aOverlapBlocker::Pipeline,
        ),
        (
            &["training.recompute=\"full\""],
            A2aOverlapBlocker::FullRecompute,
        ),
        (&["training.precision=\"fp32\""], A2aOverlapBlocker::Fp32),
        (&["model.mtp_layers=3"], A2aOverlapBlocker::MtpLayers),
        (
            &[
                "training.recompute=\"selective\"",
                "training.recompute_modules=[\"moe\"]",
            ],
            A2aOverlapBlocker::MoeRecompute,
        ),
        (
            &["model.layers=2", "model.hybrid_pattern=\"*E\""],
            A2aOverlapBlocker::Hybrid,
        ),
    ];
    for (overrides, want) in cases {
        let s = resolve(MOE, overrides).unwrap_or_else(|e| panic!("{overrides:?}: {e}"));
        assert!(!s.training.moe_a2a_overlap);
        assert_eq!(moe_a2a_overlap_blocker(&s), Some(*want), "{overrides:?}");
    }
    let dense = MOE
        .replace("experts = 4\ntop_k = 2\n", "")
        .replace("ep = 2\n", "");
    let s = resolve(&dense, &[]).unwrap();
    assert_eq!(moe_a2a_overlap_blocker(&s), Some(A2aOverlapBlocker::Dense));
}
