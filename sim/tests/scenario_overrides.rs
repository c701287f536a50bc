//! `--set key=value` overrides: TOML values and bare words, order, new tables, the same
//! validation as the file, and errors that name the override.
#![allow(clippy::result_large_err)]
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_sim::scenario::*;
use twin_sim::setup::{apply_overrides, load, parse_str, ScenarioSource};

const BASE: &str = r#"
[model]
layers = 8
hidden = 1024
heads = 16
seq_len = 1024
vocab = 32000
[cluster]
gpu = "a100-sxm-80gb"
gpus = 16
node = "dgx-a100"
[parallel]
tp = 2
pp = 2
dp = 4
[training]
global_batch = 32
"#;

fn set(overrides: &[&str]) -> Result<Scenario, ScenarioError> {
    let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    parse_str(BASE, "base.toml", &o)
}

#[test]
fn integers_strings_and_bare_words() {
    let s = set(&["parallel.pp=4", "parallel.dp=2", "parallel.schedule=gpipe"]).unwrap();
    assert_eq!((s.parallel.pp, s.parallel.dp), (4, 2));
    assert_eq!(s.parallel.schedule, PipelineSchedule::Gpipe);
    let s = set(&[
        "parallel.schedule=\"zero-bubble\"",
        "training.sync=delayed:3",
    ])
    .unwrap();
    assert_eq!(s.parallel.schedule, PipelineSchedule::ZeroBubble);
    assert_eq!(s.training.sync, SyncMode::Delayed(3));
    let s = set(&[
        "parallel.sequence_parallel=true",
        " training.micro_batch = 2 ",
    ])
    .unwrap();
    assert!(s.parallel.sequence_parallel);
    assert_eq!(s.training.micro_batch, 2);
}

#[test]
fn arrays_and_inline_tables() {
    let s = set(&["model.layers=9", "parallel.layer_partition=[4, 5]"]).unwrap();
    assert_eq!(s.parallel.layer_partition, Some(vec![4, 5]));
    let s = set(&["cluster.gpu={ preset = \"h100-sxm-80gb\", hbm_bytes = 96e9 }"]).unwrap();
    assert_eq!(s.cluster.gpu.hbm_bytes, 96_000_000_000);
    assert_eq!(s.cluster.gpu.peak.bf16_flops_per_s, 989e12);
}

#[test]
fn later_overrides_win() {
    let s = set(&["training.global_batch=64", "training.global_batch=128"]).unwrap();
    assert_eq!(s.training.global_batch, 128);
}

#[test]
fn overrides_create_missing_tables() {
    let s = set(&["run.seed=42", "cluster.intra_node.latency_us=5"]).unwrap();
    assert_eq!(s.run.seed, 42);
    assert_eq!(s.cluster.intra_node.latency_ns, 5_000);
    assert_eq!(
        s.cluster.intra_node.bandwidth_bytes_per_s, 300e9,
        "bandwidth still from the node preset"
    );
}

#[test]
fn leaving_dp_to_be_derived_makes_mesh_what_ifs_easy() {
    let text = BASE.replace("dp = 4\n", "");
    let over = ["parallel.pp=4".to_string()];
    let s = parse_str(&text, "b.toml", &over).unwrap();
    assert_eq!(s.parallel.dp, 2);
}

#[test]
fn explicit_keys_win_over_an_overridden_preset() {
    let s = set(&["model.preset=llama2-7b", "model.kv_heads=4"]).unwrap();
    assert_eq!(s.model.name, "llama2-7b");
    // layers, hidden, heads, seq_len and vocab are written in the file: they stay.
    assert_eq!((s.model.layers, s.model.hidden), (8, 1024));
    // What the file leaves open comes from the preset.
    assert_eq!(s.model.ffn_hidden, 11008);
    assert!(s.model.gated_mlp);
    // The preset's kv_heads (32) contradicts the file's heads (16): the error says where the
    // implicit value came from.
    let e = set(&["model.preset=llama2-7b"]).unwrap_err();
    assert_eq!(e.key, "model.heads");
    assert!(
        e.message
            .contains("(model.kv_heads = 32 comes from model.preset)"),
        "{e}"
    );
}

#[test]
fn override_errors_name_the_override() {
    let e = set(&["parallel.pp=3"]).unwrap_err();
    assert_eq!(e.origin, "--set parallel.pp=3");
    assert_eq!((e.line, e.column), (None, None));
    assert_eq!(e.key, "parallel.pp");
    assert_eq!(e.value, "3");
    assert!(
        e.message
            .contains("tp*pp*dp*cp = 2*3*4*1 = 24, but cluster.gpus = 16"),
        "{e}"
    );
    assert!(
        e.to_string()
            .starts_with("--set parallel.pp=3: parallel.pp = 3: "),
        "{e}"
    );

    let e = set(&["parallel.schedule=gpipee"]).unwrap_err();
    assert_eq!(e.origin, "--set parallel.schedule=gpipee");
    assert!(e.message.contains("did you mean `gpipe`?"), "{e}");
    assert_eq!(
        e.allowed,
        "gpipe, 1f1b, interleaved-1f1b, zero-bubble, dualpipe"
    );

    let e = set(&["parallel.micro_batch=2"]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::UnknownKey);
    assert_eq!(e.origin, "--set parallel.micro_batch=2");
    assert!(e.message.contains("training.micro_batch"), "{e}");
}

#[test]
fn the_latest_override_is_blamed_for_a_cross_field_error() {
    // The file is fine; the user's change broke the mesh rule, so point at the change.
    let e = set(&["run.seed=3", "parallel.tp=4"]).unwrap_err();
    assert_eq!(e.origin, "--set parallel.tp=4");
    assert_eq!(e.key, "parallel.tp");
    // A key written in the file but not overridden is blamed at its line.
    let e = set(&["model.layers=1"]).unwrap_err();
    assert_eq!(e.origin, "--set model.layers=1");
    assert!(
        e.message.contains("1 layers do not split over pp = 2"),
        "{e}"
    );
}

#[test]
fn malformed_overrides() {
    let e = set(&["parallel.pp"]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Override);
    assert_eq!(e.origin, "--set parallel.pp");
    assert!(e.allowed.contains("key=value"), "{e}");

    let e = set(&["=3"]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Override);

    let e = set(&["parallel.tp=[1,"]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Syntax);
    assert_eq!(e.key, "parallel.tp");
    assert!(e.message.contains("not a TOML value"), "{e}");

    let e = set(&["cluster.gpu.hbm_bytes=1"]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Override);
    assert_eq!(e.key, "cluster.gpu");
    assert_eq!(e.value, "\"a100-sxm-80gb\"");
    assert!(e.message.contains("not a table"), "{e}");

    let e = set(&["parallel.tp=two"]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Type);
    assert_eq!(e.value, "\"two\"");
}

#[test]
fn source_resolve_equals_parse_str() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/512xA100.toml");
    let src = ScenarioSource::read(&path).unwrap();
    let over = ["parallel.pp=16".to_string(), "parallel.dp=4".to_string()];
    let a = src.resolve(&over).unwrap();
    let b = load(&path, &over).unwrap();
    let c = parse_str(&src.text, &src.origin, &over).unwrap();
    assert_eq!(a, b);
    assert_eq!(a, c);
    assert_eq!((a.parallel.pp, a.parallel.dp), (16, 4));
}

#[test]
fn apply_overrides_to_a_resolved_scenario() {
    let s = set(&[]).unwrap();
    let t = apply_overrides(&s, &["training.global_batch=64".to_string()]).unwrap();
    assert_eq!(t.training.global_batch, 64);
    let mut want = s.clone();
    want.training.global_batch = 64;
    assert_eq!(t, want);
    // Every value is pinned in the explicit form, so a mesh change needs dp too.
    assert!(apply_overrides(&s, &["parallel.pp=4".to_string()]).is_err());
    let t = apply_overrides(
        &s,
        &["parallel.pp=4".to_string(), "parallel.dp=2".to_string()],
    );
    assert_eq!(t.unwrap().parallel.pp, 4);
}
