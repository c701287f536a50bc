//! Tests of the validation table, the row rules, the layer fit and its held-out check.

use super::*;
use crate::cost::Analytic;
use crate::profile::bundled::Pricing;
use crate::scenario::{ErrorKind, Recompute, Scenario};

const THROUGHPUT: &str = include_str!("../../../data/validation/throughput.toml");

fn table() -> Table {
    parse_table(THROUGHPUT, "throughput.toml").unwrap()
}

fn layer_table() -> LayerTiming {
    table().layer_timing.remove(0)
}

fn default_cost() -> Analytic {
    Analytic::new(&crate::testing::small_scenario(8, 1, 1, 1))
}

#[test]
fn published_table_parses() {
    let t = table();
    assert_eq!(t.run.len(), 7);
    assert_eq!(t.layer_timing.len(), 1);
    assert_eq!(t.layer_timing[0].rows.len(), 5);
    let e = parse_table("[[run]]\nid = 3\n", "t.toml").unwrap_err();
    assert_eq!(e.line, Some(2));
}

/// A key the row layout does not have (a typo such as `micro_bach` or `kv_head`) is refused with its line, the key, a suggestion and the allowed keys.
#[test]
fn unknown_keys_are_refused() {
    let row = "[[run]]\nid = \"r\"\nsource = \"paper\"\ngpu = \"a100-sxm-80gb\"\ngpus = 8\nlayers = 2\nhidden = 64\nheads = 4\nseq_len = 128\nvocab = 512\ntp = 1\npp = 1\ndp = 8\nglobal_batch = 8\n";
    parse_table(row, "t.toml").unwrap();
    let e = parse_table(&format!("{row}micro_bach = 2\n"), "t.toml").unwrap_err();
    assert_eq!(e.kind, ErrorKind::UnknownKey);
    assert_eq!((e.origin.as_str(), e.line), ("t.toml", Some(15)));
    assert_eq!(e.key, "micro_bach");
    assert!(e.message.contains("did you mean `micro_batch`"), "{e}");
    assert!(
        e.allowed.contains("global_batch") && e.allowed.contains("tflops_per_gpu"),
        "{e}"
    );
    let e = parse_table(&format!("{row}kv_head = 1\n"), "t.toml").unwrap_err();
    assert_eq!((e.key.as_str(), e.line), ("kv_head", Some(15)));
    assert!(e.message.contains("did you mean `kv_heads`"), "{e}");
    let e = parse_table("[[layer_timing]]\nid = \"x\"\nnote = 1\n", "t.toml").unwrap_err();
    assert_eq!((e.key.as_str(), e.line), ("note", Some(3)));
    let e = parse_table("[[runs]]\nid = \"x\"\n", "t.toml").unwrap_err();
    assert_eq!(e.key, "runs");
    assert!(e.message.contains("did you mean `run`"), "{e}");
}

#[test]
fn rows_become_scenarios_by_the_documented_rules() {
    let t = table();
    let cases: Vec<Case> = t.run.iter().flat_map(|r| row_cases(r).unwrap()).collect();
    assert_eq!(cases.len(), 9);
    let find = |id: &str, field: &str| -> &Scenario {
        &cases
            .iter()
            .find(|c| c.id == id && c.field == field)
            .unwrap()
            .scenario
    };
    let s = find("megatron-sc21-t1-145.6b", "tflops_per_gpu");
    assert_eq!((s.parallel.tp, s.parallel.pp, s.parallel.dp), (8, 8, 24));
    assert_eq!(s.model.layers, 80);
    assert_eq!(s.training.recompute, Recompute::Full);
    assert!(!s.training.flash_attention && !s.training.overlap_grad_reduce);
    let s = find("korthikanti-t5-175b", "iteration_s_selective_sp");
    assert_eq!(s.training.recompute, Recompute::Selective);
    assert!(s.parallel.sequence_parallel);
    assert_eq!(s.parallel.vpp, 3);
    let s = find("korthikanti-t5-175b", "iteration_s_full_recompute");
    assert_eq!(s.training.recompute, Recompute::Full);
    assert!(!s.parallel.sequence_parallel);
    let unknown = RunRow {
        gpu: "tpu-v4".into(),
        ..t.run[0].clone()
    };
    assert!(matches!(
        row_scenario(&unknown, "full", false),
        Err(ValidateError::UnknownGpu { .. })
    ));
}

#[test]
fn median_and_errors() {
    assert_eq!(median_abs(&[]), 0.0);
    assert_eq!(median_abs(&[-0.3, 0.1, 0.2]), 0.2);
    assert_eq!(median_abs(&[-0.4, 0.1, 0.2, 0.3]), 0.25);
    assert_eq!(relative_error(110.0, 100.0), 0.1);
    assert_eq!(relative_error(1.0, 0.0), 0.0);
}

/// Predicted layer times follow the published ordering: sequence parallelism shortens the
/// forward, full recompute adds about one forward to the backward, selective recompute
/// little.
#[test]
fn layer_cases_order_like_table_4() {
    let timing = layer_table();
    let cost = default_cost();
    let p: Vec<LayerPrediction> = timing
        .rows
        .iter()
        .map(|c| layer_times(&timing, c, &cost).unwrap())
        .collect();
    let (base, sp, full, sel) = (p[0], p[1], p[2], p[3]);
    assert!(sp.forward_ns < base.forward_ns);
    assert_eq!(full.forward_ns, base.forward_ns);
    let extra = full.backward_ns - base.backward_ns;
    assert!(
        extra.abs_diff(base.forward_ns) < base.forward_ns / 20,
        "{extra}"
    );
    assert!(sel.backward_ns > base.backward_ns && sel.backward_ns < full.backward_ns);
}

/// The shipped default curve is the fit's optimum: refitting on Table 4 returns it.
#[test]
fn default_curve_is_the_table_4_fit() {
    let timing = layer_table();
    let fit = fit_gemm_curve(&timing, &timing.rows, &default_cost()).unwrap();
    let d = crate::cost::DEFAULT_GEMM_CURVE;
    assert!(
        (fit.gemm.max_efficiency - d.max_efficiency).abs() < 1e-9,
        "{fit:?}"
    );
    assert_eq!(fit.gemm.k_half, d.k_half);
    assert!((fit.memory_efficiency - crate::cost::DEFAULT_MEMORY_EFFICIENCY).abs() < 1e-9);
    assert_eq!(fit.samples, 10);
    // With the backward's tensor-parallel reductions beside the weight gradient, the fitted
    // layer matches each forward and backward half within 2% (1.1% measured); without that
    // overlap the halves were off by up to 6.9%.
    assert!(fit.max_relative_error < 0.02, "{fit:?}");
    // The A100 profile records this fit's quality.
    let profile = crate::profile::parse_str(
        include_str!("../../../scenarios/profiles/a100-dgx.toml"),
        "a100-dgx.toml",
    )
    .unwrap();
    let q = profile.fit.unwrap();
    assert_eq!(q.samples, fit.samples);
    assert!(
        (q.rms_relative_error - fit.rms_relative_error).abs() < 5e-4,
        "{fit:?}"
    );
    assert!(
        (q.max_relative_error - fit.max_relative_error).abs() < 5e-4,
        "{fit:?}"
    );
    assert_eq!(profile.gemm_max_efficiency.value, fit.gemm.max_efficiency);
}

/// Held-out check: fit on the three cases without sequence parallelism, predict the two with
/// it (which the fit never saw); the layer totals stay within 5%.
#[test]
fn fit_generalises_to_held_out_layer_cases() {
    let timing = layer_table();
    let (train, test): (Vec<LayerCase>, Vec<LayerCase>) = timing
        .rows
        .iter()
        .cloned()
        .partition(|c| !c.case.contains("sequence"));
    assert_eq!((train.len(), test.len()), (3, 2));
    let fit = fit_gemm_curve(&timing, &train, &default_cost()).unwrap();
    let mut cost = default_cost();
    cost.gemm = fit.gemm.clone();
    cost.memory_efficiency = fit.memory_efficiency;
    for case in &test {
        let p = layer_times(&timing, case, &cost).unwrap();
        let total_ms = (p.forward_ns + p.backward_ns) as f64 * 1e-6;
        let err = relative_error(total_ms, case.forward_ms + case.backward_ms);
        assert!(
            err.abs() < 0.05,
            "{}: {total_ms:.2} ms, {err:+.3}",
            case.case
        );
    }
}

#[test]
fn json_has_the_documented_shape() {
    let v = Validation {
        rows: vec![Comparison {
            id: "a".into(),
            field: "tflops_per_gpu".into(),
            layout: crate::json::Layout::default(),
            published: 100.0,
            predicted: 95.0,
            error: -0.05,
            groups: vec!["BF16".into()],
            unmodelled: vec!["compile".into()],
            fits: false,
            peak_memory_gib: 81.5,
            usable_memory_gib: 79.25,
            published_flops_per_token: Some(50e9),
            model_flops_per_token: 56e9,
            framework_flops_per_token: 52e9,
            bundled_profile: None,
        }],
        median_abs_error: 0.05,
        max_abs_error: 0.05,
        uncovered: vec![Uncovered {
            id: "b".into(),
            reason: "why".into(),
        }],
        groups: vec![GroupSummary {
            group: "BF16".into(),
            rows: 1,
            median_abs_error: 0.05,
            max_abs_error: 0.05,
            worst: "a".into(),
        }],
    };
    let json: serde_json::Value = serde_json::from_str(&v.to_json()).unwrap();
    let row = &json["rows"][0];
    for key in [
        "id",
        "field",
        "published",
        "predicted",
        "error",
        "groups",
        "unmodelled",
        "fits",
        "peak_memory_gib",
        "usable_memory_gib",
        "published_flops_per_token",
        "model_flops_per_token",
        "framework_flops_per_token",
    ] {
        assert!(row.get(key).is_some(), "{key}");
    }
    assert_eq!(json["uncovered"][0]["reason"], "why");
    assert_eq!(json["groups"][0]["worst"], "a");
    let text = v.to_text();
    assert!(text.contains("| BF16 | 1 | 5.0% | 5.0% | a |"), "{text}");
    assert!(text.contains("- a: compile"), "{text}");
    assert!(
        text.contains(
            "published runs the prediction puts out of memory (each ran):\n\
             - a: peak 81.50 GiB of 79.25 GiB usable"
        ),
        "{text}"
    );
    // 52 is 4% from the published 50, 56 is 12%: neither within 2%.
    assert!(
        text.contains(
            "- a: published 50.00, twin 56.00 with full attention, 52.00 as the framework counts"
        ),
        "{text}"
    );
    let mut near = v.rows[0].clone();
    near.framework_flops_per_token = 50.9e9;
    assert!(!near.flops_mismatch());
    near.published_flops_per_token = None;
    near.framework_flops_per_token = 1.0;
    assert!(!near.flops_mismatch());
    assert!(
        text.contains("1 of 2 rows cannot be expressed:\n- b: why"),
        "{text}"
    );
    assert_eq!(json["median_abs_error"], 0.05);
    assert_eq!(json["max_abs_error"], 0.05);
    assert!(v
        .to_text()
        .contains("| a | tflops_per_gpu | 100.00 | 95.00 | -5.0% |"));
}

#[test]
fn empty_table_is_an_error() {
    let t = Table::default();
    assert!(matches!(
        validate_table(&t, &[], &Pricing::Defaults),
        Err(ValidateError::NoRows)
    ));
}

/// The launch-settings table (sim/tests/data/megatron-sc21-launch.toml) carries micro batch,
/// interleaving and DDP overlap per row, and the row rules pass them on.
#[test]
fn launch_settings_reach_the_scenarios() {
    let text = include_str!("../../tests/data/megatron-sc21-launch.toml");
    let t = parse_table(text, "megatron-sc21-launch.toml").unwrap();
    assert_eq!(t.run.len(), 9);
    let scenario = |id: &str| -> Scenario {
        let row = t.run.iter().find(|r| r.id == id).unwrap();
        row_cases(row).unwrap().remove(0).scenario
    };
    let small = scenario("megatron-sc21-t1-1.7b-launch");
    assert!(small.training.overlap_grad_reduce);
    assert_eq!(small.training.micro_batch, 16);
    let big = scenario("megatron-sc21-t1-145.6b-launch");
    assert!(!big.training.overlap_grad_reduce);
    assert_eq!(big.training.micro_batch, 2);
    assert_eq!(big.parallel.vpp, 2);
    assert_eq!(
        big.parallel.schedule,
        crate::scenario::PipelineSchedule::Interleaved1F1B
    );
    // A row without the field keeps the rule: no overlap.
    assert!(!table().run.iter().any(|r| r.overlap_grad_reduce.is_some()));
}

/// A modern row's explicit `head_dim` and an `fsdp` degree below dp under ZeRO-3 (HSDP) reach
/// the scenario; `fsdp = dp` stays plain FSDP.
#[test]
fn modern_rows_carry_head_dim_and_hsdp() {
    let row = RunRow {
        id: "qwen3-like".into(),
        gpu: "h100-sxm-80gb".into(),
        gpus: 16,
        layers: 4,
        hidden: 2560,
        heads: 32,
        kv_heads: Some(8),
        head_dim: Some(128),
        ffn_hidden: Some(9728),
        ffn_act: Some("swiglu".into()),
        seq_len: 4096,
        vocab: 151936,
        tp: 1,
        pp: 1,
        dp: 16,
        fsdp: Some(8),
        zero_stage: Some(3),
        global_batch: 32,
        precision: Some("bf16".into()),
        step_time_s: Some(1.0),
        ..RunRow::default()
    };
    let s = modern::modern_scenario(&row).unwrap();
    assert_eq!(s.model.head_dim, Some(128));
    assert_eq!((s.model.q_width(), s.model.kv_width()), (32 * 128, 8 * 128));
    assert_eq!((s.parallel.zero, s.parallel.fsdp_degree), (3, Some(8)));
    assert_eq!(s.parallel.dp_replicas(), 2);
    let plain = modern::modern_scenario(&RunRow {
        fsdp: Some(16),
        ..row
    })
    .unwrap();
    assert_eq!(plain.parallel.fsdp_degree, None);
}

/// A two-layer modern row on 8 H100s (data parallel), with a published step time; tests set
/// what they vary.
fn small_modern_row() -> RunRow {
    RunRow {
        id: "modern-row".into(),
        gpu: "h100-sxm-80gb".into(),
        gpus: 8,
        layers: 2,
        hidden: 1024,
        heads: 8,
        seq_len: 2048,
        vocab: 32000,
        tp: 1,
        pp: 1,
        dp: 8,
        global_batch: 8,
        precision: Some("bf16".into()),
        step_time_s: Some(1.0),
        ..RunRow::default()
    }
}

/// A row whose `gpu_note` describes Grand Teton's 96 GB HBM2e, 500 W H100 runs on that preset
/// (and the note is no longer listed as unmodelled); with a profile for each GPU, each row takes
/// its own, and a row whose GPU no given profile describes takes its machine's bundled one, or
/// is uncovered with the mismatch as reason when the defaults are the fallback.
#[test]
fn gpu_notes_select_their_preset_and_each_row_its_profile() {
    let note = "Grand Teton: H100 SXM with 96 GB HBM2e (2.4 TB/s), 500 W power limit";
    let row = RunRow {
        id: "tt-like".into(),
        precision: Some("bf16".into()),
        framework: Some("torchtitan".into()),
        ..small_modern_row()
    };
    let noted = RunRow {
        id: "tt-noted".into(),
        gpu_note: Some(note.into()),
        ..row.clone()
    };
    assert_eq!(modern::gpu_preset(&row), "h100-sxm-80gb");
    assert_eq!(modern::gpu_preset(&noted), "h100-sxm-96gb-500w");
    let s = modern::modern_scenario(&noted).unwrap();
    assert_eq!(s.cluster.gpu.name, "h100-sxm-96gb-500w");
    assert_eq!(s.cluster.gpu.hbm_bandwidth_bytes_per_s, 2.4e12);
    assert!(!modern::unmodelled(&noted).contains(&"gpu_note"));
    // A note twin has no preset for stays listed.
    let other = RunRow {
        gpu_note: Some("liquid-cooled".into()),
        ..row.clone()
    };
    assert_eq!(modern::gpu_preset(&other), "h100-sxm-80gb");
    assert!(modern::unmodelled(&other).contains(&"gpu_note"));

    let dgx = crate::profile::parse_str(
        include_str!("../../../scenarios/profiles/h100-dgx.toml"),
        "h100-dgx.toml",
    )
    .unwrap();
    let teton = crate::profile::parse_str(
        include_str!("../../../scenarios/profiles/h100-grand-teton.toml"),
        "h100-grand-teton.toml",
    )
    .unwrap();
    let t = Table {
        run: vec![row, noted],
        layer_timing: Vec::new(),
    };
    let both = validate_table(&t, &[dgx.clone(), teton], &Pricing::Defaults).unwrap();
    assert_eq!(both.rows.len(), 2);
    assert!(both.uncovered.is_empty());
    // Same shape, less peak and bandwidth: the Grand Teton row is slower.
    assert!(both.rows[1].predicted > both.rows[0].predicted);
    assert!(both.rows.iter().all(|r| r.bundled_profile.is_none()));
    // Without profiles, each row falls back to the bundled profile of its machine: the same
    // files, built into the binary, so the same predictions, and each row names its profile
    // (the text counts them).
    let machine = validate_table(&t, &[], &Pricing::Machine).unwrap();
    let paths: Vec<Option<&str>> = machine
        .rows
        .iter()
        .map(|r| r.bundled_profile.as_deref())
        .collect();
    assert_eq!(
        paths,
        [
            Some("scenarios/profiles/h100-dgx.toml"),
            Some("scenarios/profiles/h100-grand-teton.toml")
        ]
    );
    for (m, b) in machine.rows.iter().zip(&both.rows) {
        assert_eq!(m.predicted, b.predicted, "{}", m.id);
    }
    assert!(
        machine
            .to_text()
            .contains("- scenarios/profiles/h100-grand-teton.toml: 1 rows"),
        "{}",
        machine.to_text()
    );
    // With the defaults as the fallback, nothing is named and the GEMMs are the A100 fit's.
    let defaults = validate_table(&t, &[], &Pricing::Defaults).unwrap();
    assert!(defaults.rows.iter().all(|r| r.bundled_profile.is_none()));
    assert_ne!(defaults.rows[0].predicted, both.rows[0].predicted);
    // One profile given: the other row falls back to its machine's bundled profile, or, with
    // the defaults as the fallback, is uncovered with the mismatch as the reason.
    let one = validate_table(&t, std::slice::from_ref(&dgx), &Pricing::Machine).unwrap();
    assert_eq!(one.rows.len(), 2);
    assert_eq!(one.rows[0].bundled_profile, None);
    assert_eq!(
        one.rows[1].bundled_profile.as_deref(),
        Some("scenarios/profiles/h100-grand-teton.toml")
    );
    let one = validate_table(&t, &[dgx], &Pricing::Defaults).unwrap();
    assert_eq!(one.rows.len(), 1);
    assert_eq!(one.uncovered.len(), 1);
    assert!(
        one.uncovered[0].reason.contains("h100-sxm-96gb-500w"),
        "{}",
        one.uncovered[0].reason
    );
}

/// Each llm-foundry row of the modern table (MosaicML Composer, FSDP) is predicted under the
/// bundled llm-foundry framework file, as each torchtitan row is under torchtitan's; a row of
/// no known family keeps the default (megatron-core).
#[test]
fn modern_rows_take_their_family_framework_file() {
    use crate::scenario::framework::{Bundled, Origin};
    let text = include_str!("../../../data/validation/throughput-modern.toml");
    let t = parse_table(text, "throughput-modern.toml").unwrap();
    let framework_of = |row: &RunRow| modern::modern_scenario(row).unwrap().training.framework;
    let foundry: Vec<&RunRow> = t
        .run
        .iter()
        .filter(|r| modern::family(r) == "llm-foundry")
        .collect();
    assert_eq!(foundry.len(), 18);
    for row in foundry {
        let fw = framework_of(row);
        assert_eq!(fw.name, "llm-foundry", "{}", row.id);
        assert_eq!(fw.origin, Origin::Bundled(Bundled::LlmFoundry));
        assert_eq!(fw.memory.loss_logits_bytes, 2);
    }
    let titan = t
        .run
        .iter()
        .find(|r| modern::family(r) == "torchtitan")
        .unwrap();
    assert_eq!(framework_of(titan).name, "torchtitan");
    let other = RunRow {
        framework: Some("an in-house trainer".into()),
        ..titan.clone()
    };
    assert_eq!(modern::family(&other), "other");
    assert_eq!(framework_of(&other).name, "megatron-core");
}

/// A modern FP8 row's recipe text selects `fp8_recipe`: current or tensorwise scaling is
/// `tensorwise` (first), block scaling `blockwise`, TE delayed scaling `delayed`; a text naming
/// none is listed as unmodelled.
#[test]
fn fp8_recipe_text_selects_the_recipe() {
    let row = |text: &str| RunRow {
        id: "fp8-row".into(),
        precision: Some("fp8".into()),
        fp8_recipe: Some(text.into()),
        ..small_modern_row()
    };
    use crate::scenario::Fp8Recipe;
    for (text, want) in [
        (
            "FP8 current scaling (TE Float8CurrentScaling), bf16 params",
            Fp8Recipe::Tensorwise,
        ),
        (
            "torchao Float8Linear, tensorwise dynamic scaling",
            Fp8Recipe::Tensorwise,
        ),
        ("TE delayed scaling (recipe n/s)", Fp8Recipe::Delayed),
        (
            "TE Float8BlockScaling: 1x128 activation / 128x128 weight blockwise",
            Fp8Recipe::Blockwise,
        ),
        (
            "FP8 (per-tensor current scaling; another figure of the source is blockwise)",
            Fp8Recipe::Tensorwise,
        ),
    ] {
        let r = row(text);
        assert_eq!(
            modern::modern_scenario(&r).unwrap().training.fp8_recipe,
            want,
            "{text}"
        );
        assert!(!modern::unmodelled(&r).contains(&"fp8_recipe"), "{text}");
    }
    let unknown = row("FP8 (table n/s)");
    assert_eq!(
        modern::modern_scenario(&unknown)
            .unwrap()
            .training
            .fp8_recipe,
        Fp8Recipe::Delayed
    );
    assert!(modern::unmodelled(&unknown).contains(&"fp8_recipe"));
    // MXFP8 ("FP8-MX" in Megatron-Bridge's tables) on a Blackwell GPU; on an H100 the row
    // cannot be expressed, and says why.
    let mx = RunRow {
        gpu: "b200-sxm-180gb".into(),
        ..row("FP8-MX (TE MXFP8BlockScaling)")
    };
    assert_eq!(
        modern::modern_scenario(&mx).unwrap().training.fp8_recipe,
        Fp8Recipe::Mxfp8
    );
    let e = modern::modern_scenario(&row("FP8-MX"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("compute capability 10.0"), "{e}");
}

/// [`small_modern_row`] with 8 experts of 512, two per token, over ep = 8.
fn small_moe_row() -> RunRow {
    RunRow {
        id: "moe-row".into(),
        arch: Some("moe".into()),
        experts: Some(8),
        top_k: Some(2),
        moe_ffn_hidden: Some(512),
        ep: Some(8),
        ..small_modern_row()
    }
}

/// The modern rules read a setting however a source spells it: in any case, with or without
/// spaces and hyphens, and as Transformer Engine's or torchao's class names; a text naming none
/// of what twin models stays listed as unmodelled.
#[test]
fn source_spellings_select_the_same_settings() {
    use crate::scenario::{framework::Dtype, Fp8Recipe, MoeDispatcher, MoeRouting, Precision};
    let moe = small_moe_row();
    let scenario = |row: &RunRow| modern::modern_scenario(row).unwrap();

    for (text, want) in [
        ("all-to-all (NCCL)", Some(MoeDispatcher::AllToAll)),
        ("AllToAll", Some(MoeDispatcher::AllToAll)),
        ("flex (DeepEP all-to-all)", Some(MoeDispatcher::DeepEp)),
        ("flex / HybridEP", Some(MoeDispatcher::HybridEp)),
        ("allgather", None),
    ] {
        let row = RunRow {
            moe_dispatcher: Some(text.into()),
            ..moe.clone()
        };
        let listed = modern::unmodelled(&row).contains(&"moe_dispatcher");
        assert_eq!(listed, want.is_none(), "{text}");
        let got = scenario(&row).training.moe_dispatcher;
        assert_eq!(got, want.unwrap_or_default(), "{text}");
    }

    for (text, want) in [
        (
            "Force-balanced (moe_router_force_load_balancing)",
            Some(MoeRouting::ForceBalanced),
        ),
        (
            "token drop, capacity_factor=1.25, padded",
            Some(MoeRouting::Capacity { factor: 1.25 }),
        ),
        (
            "token-drop (capacity factor: 2)",
            Some(MoeRouting::Capacity { factor: 2.0 }),
        ),
        ("dropless, aux-loss balanced", Some(MoeRouting::Balanced)),
        ("model's own router", None),
    ] {
        let row = RunRow {
            routing: Some(text.into()),
            ..moe.clone()
        };
        assert_eq!(
            modern::unmodelled(&row).contains(&"routing"),
            want.is_none(),
            "{text}"
        );
        assert_eq!(
            scenario(&row).training.moe_routing,
            want.unwrap_or_default(),
            "{text}"
        );
    }

    // Transformer Engine has no rowwise recipe: those rows are torchtitan's (torchao).
    for (framework, text, want) in [
        ("NeMo", "TE Float8CurrentScaling", Fp8Recipe::Tensorwise),
        (
            "torchtitan",
            "torchao Float8Linear, rowwise scaling",
            Fp8Recipe::Rowwise,
        ),
        (
            "torchtitan",
            "torchao rowwise_with_gw_hp",
            Fp8Recipe::Rowwise,
        ),
        ("NeMo", "TE Float8BlockScaling", Fp8Recipe::Blockwise),
        (
            "NeMo",
            "TE DelayedScaling, amax history 1024",
            Fp8Recipe::Delayed,
        ),
        (
            "torchtitan",
            "torchao Float8Linear (dynamic scaling)",
            Fp8Recipe::Tensorwise,
        ),
    ] {
        let row = RunRow {
            framework: Some(framework.into()),
            precision: Some("FP8".into()),
            fp8_recipe: Some(text.into()),
            ..small_modern_row()
        };
        let s = scenario(&row);
        assert_eq!(s.training.precision, Precision::Fp8, "{text}");
        assert_eq!(s.training.fp8_recipe, want, "{text}");
        assert!(!modern::unmodelled(&row).contains(&"fp8_recipe"), "{text}");
    }

    for (gpu, preset) in [
        ("H100 SXM5 80GB", "h100-sxm-80gb"),
        ("h200-sxm-141gb", "h200-141gb"),
        ("H800", "h800-sxm-80gb"),
        ("B200 SXM 180GB", "b200-sxm-180gb"),
        ("GB200 NVL72", "gb200"),
        ("h100-sxm-96gb-500w", "h100-sxm-96gb-500w"),
    ] {
        let row = RunRow {
            gpu: gpu.into(),
            ..small_modern_row()
        };
        assert_eq!(scenario(&row).cluster.gpu.name, preset, "{gpu}");
    }
    // A part twin has no preset for is refused by the scenario's check, which lists them.
    let pcie = RunRow {
        gpu: "H100 PCIe".into(),
        ..small_modern_row()
    };
    let e = modern::modern_scenario(&pcie).unwrap_err().to_string();
    assert!(
        e.contains("H100 PCIe") && e.contains("h100-sxm-80gb"),
        "{e}"
    );
    // A note on a renamed part still names no preset of its own, so it stays listed.
    let noted = RunRow {
        gpu: "H100 SXM5".into(),
        gpu_note: Some("liquid-cooled".into()),
        ..small_modern_row()
    };
    assert!(modern::unmodelled(&noted).contains(&"gpu_note"));

    let bf16 = RunRow {
        precision: Some("BF16 (bfloat16 AMP)".into()),
        ..small_modern_row()
    };
    assert_eq!(scenario(&bf16).training.precision, Precision::Bf16);
    assert!(modern::groups(&bf16).contains(&"BF16".to_string()));

    for (graphs, want) in [
        (toml::Value::String("none".into()), false),
        (toml::Value::String("Off".into()), false),
        (toml::Value::String("full iteration".into()), true),
        (toml::Value::Boolean(true), true),
    ] {
        let row = RunRow {
            cuda_graphs: Some(graphs.clone()),
            ..small_modern_row()
        };
        assert_eq!(scenario(&row).training.cuda_graphs, want, "{graphs}");
    }

    for (act, gated) in [
        ("SwiGLU", true),
        ("geglu", true),
        ("swiglu (clamped)", true),
        ("gelu", false),
        ("squared-relu", false),
    ] {
        let row = RunRow {
            ffn_act: Some(act.into()),
            ..small_modern_row()
        };
        assert_eq!(scenario(&row).model.gated_mlp, gated, "{act}");
    }

    for (text, want) in [
        ("Full", Recompute::Full),
        ("block", Recompute::Full),
        ("Selective (op)", Recompute::Selective),
        ("off", Recompute::None),
    ] {
        let row = RunRow {
            recompute: Some(text.into()),
            ..small_modern_row()
        };
        assert_eq!(scenario(&row).training.recompute, want, "{text}");
    }
    let unknown = RunRow {
        recompute: Some("sometimes".into()),
        ..small_modern_row()
    };
    assert!(modern::modern_scenario(&unknown).is_err());

    let dtypes = RunRow {
        grad_reduce_dtype: Some("float32".into()),
        optimizer_state_dtype: Some("bfloat16".into()),
        ..small_modern_row()
    };
    let s = scenario(&dtypes);
    assert_eq!(s.training.grad_reduce_dtype, Some(Dtype::Fp32));
    assert_eq!(s.training.optimizer_state_dtype, Some(Dtype::Bf16));

    for (framework, family, file) in [
        ("LLM Foundry (Composer)", "llm-foundry", "llm-foundry"),
        ("Hugging Face Transformers Trainer", "hf", "hf"),
        ("HF accelerate", "hf", "hf"),
    ] {
        let row = RunRow {
            framework: Some(framework.into()),
            ..small_modern_row()
        };
        assert_eq!(modern::family(&row), family, "{framework}");
        assert_eq!(scenario(&row).training.framework.name, file, "{framework}");
    }
}

/// A Mamba hybrid's pattern may be followed by a note: the pattern is read up to it, and the
/// mixer's shape from the row's `mamba`, else from the note's words, else from Megatron-Core's
/// defaults, which are then listed as assumed.
#[test]
fn a_hybrid_pattern_is_read_past_its_note() {
    let row = RunRow {
        id: "hybrid".into(),
        arch: Some("hybrid-mamba-moe".into()),
        layers: 4,
        hidden: 1024,
        experts: Some(8),
        top_k: Some(2),
        moe_ffn_hidden: Some(512),
        hybrid_pattern: Some(
            "ME*E (M=Mamba-2 x1, E=MoE x2; mamba 32 heads x 64 dim, state 128, 4 groups)".into(),
        ),
        ..small_modern_row()
    };
    // The pattern and the mixer's (heads, head_dim, state, groups) a row is read as.
    let read = |row: &RunRow| {
        let hybrid = modern::modern_scenario(row).unwrap().model.hybrid.unwrap();
        let m = hybrid.mamba.unwrap();
        (hybrid.pattern, (m.heads, m.head_dim, m.state, m.groups))
    };
    assert_eq!(read(&row), ("ME*E".to_string(), (32, 64, 128, 4)));
    assert!(
        modern::unmodelled(&row).is_empty(),
        "{:?}",
        modern::unmodelled(&row)
    );

    // The row's own `mamba` wins over the note.
    let given = RunRow {
        mamba: Some("heads=16, head_dim=128, state=64, groups=2".into()),
        ..row.clone()
    };
    assert_eq!(read(&given).1, (16, 128, 64, 2));

    // Neither: Megatron-Core's defaults (2 * hidden / 64 heads of 64, state 128, 8 groups).
    let bare = RunRow {
        hybrid_pattern: Some("ME*E".into()),
        ..row
    };
    assert_eq!(read(&bare).1, (32, 64, 128, 8));
    assert!(modern::unmodelled(&bare)
        .iter()
        .any(|u| u.starts_with("mamba")));
}

/// A Megatron-Bridge row that does not say how it reduces gradients or gathers FP8 weights
/// takes what every Megatron-Bridge performance recipe sets: bf16 reductions, and FP8 weight
/// gathers but under block scaling. What a row states wins, and other families keep twin's
/// defaults.
#[test]
fn megatron_bridge_rows_take_their_recipes_settings() {
    use crate::scenario::framework::Dtype;
    let bridge = RunRow {
        framework: Some("Megatron-Bridge (Megatron-Core)".into()),
        precision: Some("fp8".into()),
        fp8_recipe: Some("FP8 current scaling".into()),
        ..small_modern_row()
    };
    let s = modern::modern_scenario(&bridge).unwrap();
    assert_eq!(s.training.grad_reduce_dtype, Some(Dtype::Bf16));
    assert!(s.training.fp8_param_gather);
    let block = RunRow {
        fp8_recipe: Some("blockwise".into()),
        ..bridge.clone()
    };
    assert!(
        !modern::modern_scenario(&block)
            .unwrap()
            .training
            .fp8_param_gather
    );
    let stated = RunRow {
        grad_reduce_dtype: Some("fp32".into()),
        fp8_param_gather: Some(false),
        ..bridge.clone()
    };
    let s = modern::modern_scenario(&stated).unwrap();
    assert_eq!(s.training.grad_reduce_dtype, Some(Dtype::Fp32));
    assert!(!s.training.fp8_param_gather);
    let nemo = RunRow {
        framework: Some("NeMo 1.x (Megatron-Core)".into()),
        ..bridge
    };
    let s = modern::modern_scenario(&nemo).unwrap();
    assert_eq!(s.training.grad_reduce_dtype, None);
    assert!(!s.training.fp8_param_gather);
}

/// A `pp_schedule` that names what `vpp` already chooses is read through it; GPipe, ZB-H1 and
/// DualPipe select their schedules; V-shaped schedules, and an interleaved schedule without
/// `vpp`, are listed as unmodelled.
#[test]
fn pipeline_schedule_text_is_read_or_listed() {
    use crate::scenario::PipelineSchedule;
    let row = |text: &str, vpp: Option<u32>| RunRow {
        layers: 8,
        pp: 2,
        dp: 4,
        global_batch: 32,
        vpp,
        pp_schedule: Some(text.into()),
        ..small_modern_row()
    };
    for (text, vpp, want, listed) in [
        ("1F1B", None, PipelineSchedule::OneFOneB, false),
        (
            "Interleaved 1F1B",
            Some(2),
            PipelineSchedule::Interleaved1F1B,
            false,
        ),
        ("Interleaved1F1B", None, PipelineSchedule::OneFOneB, true),
        ("GPipe", None, PipelineSchedule::Gpipe, false),
        (
            "ZeroBubble (ZB-H1)",
            None,
            PipelineSchedule::ZeroBubble,
            false,
        ),
        ("ZBVZeroBubble", None, PipelineSchedule::OneFOneB, true),
    ] {
        let r = row(text, vpp);
        assert_eq!(
            modern::modern_scenario(&r).unwrap().parallel.schedule,
            want,
            "{text}"
        );
        assert_eq!(
            modern::unmodelled(&r).contains(&"pp_schedule"),
            listed,
            "{text}"
        );
    }
    // torchtitan's interleaved schedule without a `vpp` takes its default two stages per rank.
    let titan = RunRow {
        framework: Some("torchtitan".into()),
        zero_stage: Some(3),
        ..row("Interleaved1F1B", None)
    };
    let s = modern::modern_scenario(&titan).unwrap();
    assert_eq!(s.parallel.schedule, PipelineSchedule::Interleaved1F1B);
    assert_eq!(s.parallel.vpp, 2);
    assert!(!modern::unmodelled(&titan).contains(&"pp_schedule"));
}

/// A mixture-of-experts row with context parallelism is expressed: its expert layers refold the
/// context-parallel ranks as Megatron-Core does, and only the scenario's own checks may refuse
/// the layout. `arch` is read however spelt; an architecture twin does not know is refused
/// with the reason.
#[test]
fn moe_rows_with_context_parallelism_are_expressed() {
    let moe = RunRow {
        arch: Some("Mixture-of-Experts".into()),
        cp: Some(2),
        dp: 4,
        ..small_moe_row()
    };
    let s = modern::modern_scenario(&moe).unwrap();
    assert_eq!((s.parallel.cp, s.parallel.dp, s.parallel.ep), (2, 4, 8));
    assert_eq!(modern::groups(&moe), ["MoE"]);
    let upper = RunRow {
        arch: Some("MoE".into()),
        ..moe.clone()
    };
    assert_eq!(modern::groups(&upper), ["MoE"]);
    // ep must divide tp*cp*dp/etp = 8: the scenario's check names the keys.
    let e = modern::modern_scenario(&RunRow {
        ep: Some(16),
        ..moe.clone()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("parallel.ep"), "{e}");
    let e = modern::modern_scenario(&RunRow {
        arch: Some("diffusion".into()),
        ..moe
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("diffusion"), "{e}");
}

/// A row that publishes only its MFU and the peak it divides by is compared as the TFLOP/s
/// that MFU is of that peak: the same comparison as the row publishing those TFLOP/s, under
/// a label that says where the figure came from. Without a peak it cannot be compared.
#[test]
fn a_row_with_only_its_mfu_is_compared_as_its_tflops() {
    let base = RunRow {
        step_time_s: None,
        ..small_modern_row()
    };
    let by_mfu = RunRow {
        id: "by-mfu".into(),
        mfu_percent: Some(40.0),
        mfu_peak_tflops: Some(989.0),
        ..base.clone()
    };
    let by_tflops = RunRow {
        id: "by-tflops".into(),
        tflops_per_gpu: Some(0.4 * 989.0),
        ..base.clone()
    };
    let t = Table {
        run: vec![by_mfu, by_tflops],
        layer_timing: Vec::new(),
    };
    let r = validate_table(&t, &[], &Pricing::Machine).unwrap();
    assert_eq!(r.rows.len(), 2);
    assert_eq!(r.rows[0].field, "step_time_s from mfu_percent");
    assert_eq!(r.rows[1].field, "step_time_s from tflops_per_gpu");
    assert_eq!(r.rows[0].published, r.rows[1].published);
    assert_eq!(r.rows[0].predicted, r.rows[1].predicted);
    let no_peak = RunRow {
        mfu_percent: Some(40.0),
        ..base
    };
    let Err(e) = modern::modern_cases(&no_peak) else {
        panic!("a row with an MFU and no peak was compared");
    };
    assert!(e.to_string().contains("MFU with its peak"), "{e}");
}

/// A published figure that is not a positive number refuses its row with the reason instead
/// of counting as a perfect prediction (an error of 0 against a step of 0 s or of infinity).
#[test]
fn a_figure_that_is_not_positive_refuses_its_row() {
    for (row, field) in [
        (
            RunRow {
                step_time_s: Some(0.0),
                ..small_modern_row()
            },
            "step_time_s",
        ),
        (
            RunRow {
                step_time_s: Some(f64::NAN),
                ..small_modern_row()
            },
            "step_time_s",
        ),
        (
            RunRow {
                step_time_s: None,
                tflops_per_gpu: Some(0.0),
                ..small_modern_row()
            },
            "model_tflops_per_gpu",
        ),
    ] {
        let t = Table {
            run: vec![row],
            layer_timing: Vec::new(),
        };
        let v = validate_table(&t, &[], &Pricing::Machine);
        let e = match v {
            Ok(v) => {
                assert!(v.rows.is_empty(), "{field}: compared");
                assert_eq!(v.uncovered.len(), 1, "{field}");
                v.uncovered[0].reason.clone()
            }
            Err(e) => e.to_string(),
        };
        assert!(e.contains(field) && e.contains("positive"), "{e}");
    }
}

mod text_fields_fuzz {
    //! The modern rules never panic on a row's free text, however odd: proptest writes random
    //! text (unicode, punctuation, the rules' own words run together) into every text field
    //! of a small dense and a small MoE row, and odd numbers into the ones the rules read.
    use super::*;
    use proptest::prelude::*;
    use proptest::sample::select;

    /// Random text, or words the rules look for, glued by odd separators.
    fn text() -> impl Strategy<Value = String> {
        let words = select(vec![
            "fp8",
            "FP8-MX",
            "current scaling",
            "rowwise",
            "blockwise",
            "delayed",
            "dynamic",
            "capacity factor",
            "capacity_factor=",
            "force-balanced",
            "dropless",
            "deepep",
            "all-to-all",
            "hybridep",
            "Interleaved 1F1B",
            "ZBV",
            "DualPipe",
            "GPipe",
            "full",
            "selective",
            "none",
            "MEM*E-",
            "mamba 64 heads x 64 dim, state 128, 8 groups",
            "heads=0, head_dim=0",
            "H100 SXM5",
            "gb200",
            "sxm",
            "moe",
            "hybrid",
            "(",
            "=",
            "",
        ]);
        prop_oneof![
            ".{0,40}",
            prop::collection::vec((words, ".{0,3}"), 0..5).prop_map(|parts| {
                parts
                    .into_iter()
                    .map(|(w, sep)| format!("{w}{sep}"))
                    .collect()
            }),
        ]
    }

    proptest! {
        #[test]
        fn odd_text_never_panics(
            moe in any::<bool>(),
            framework in text(),
            arch in prop_oneof![
                select(vec!["dense", "moe", "MoE", "hybrid-mamba-moe"]).prop_map(String::from),
                text(),
            ],
            precision in text(),
            fp8_recipe in text(),
            routing in text(),
            dispatcher in text(),
            schedule in text(),
            pattern in text(),
            mamba in text(),
            gpu in text(),
            recompute in text(),
            ffn_act in text(),
            graphs in text(),
            dtype in text(),
            vpp in prop::option::of(0u32..9),
            mfu in prop::option::of(-1.0f64..200.0),
        ) {
            let base = if moe { small_moe_row() } else { small_modern_row() };
            let row = RunRow {
                framework: Some(framework),
                arch: Some(arch),
                precision: Some(precision),
                fp8_recipe: Some(fp8_recipe),
                routing: Some(routing),
                moe_dispatcher: Some(dispatcher),
                pp_schedule: Some(schedule),
                hybrid_pattern: Some(pattern),
                mamba: Some(mamba),
                gpu,
                recompute: Some(recompute),
                ffn_act: Some(ffn_act),
                cuda_graphs: Some(toml::Value::String(graphs)),
                grad_reduce_dtype: Some(dtype.clone()),
                optimizer_state_dtype: Some(dtype),
                vpp,
                step_time_s: None,
                mfu_percent: mfu,
                mfu_peak_tflops: Some(989.0),
                ..base
            };
            let _ = modern::unmodelled(&row);
            let _ = modern::groups(&row);
            let _ = row_cases(&row);
        }
    }
}
