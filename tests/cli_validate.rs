//! End-to-end tests of `twin validate` and `twin simulate --profile`: the real binary, as a
//! user runs it.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

mod common;
use common::twin;

fn tmp(name: &str, text: &str) -> String {
    let dir = common::scratch_dir("validate");
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// One small published run (Korthikanti 22B on 8 GPUs) keeps the test fast.
const ONE_ROW: &str = r#"
[[run]]
id = "korthikanti-t5-22b"
source = "Korthikanti et al. 2022, Tables 3 and 5"
gpu = "a100-sxm-80gb"
gpus = 8
layers = 48
hidden = 6144
heads = 64
seq_len = 2048
vocab = 51200
tp = 8
pp = 1
dp = 1
global_batch = 4
micro_batch = 4
iteration_s_full_recompute = 1.42
"#;

#[test]
fn validate_prints_json_in_the_documented_shape() {
    let table = tmp("one.toml", ONE_ROW);
    let o = twin(&["validate", &table, "--format", "json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let row = &v["rows"][0];
    assert_eq!(row["id"], "korthikanti-t5-22b");
    assert_eq!(row["field"], "iteration_s_full_recompute");
    assert_eq!(row["published"], 1.42);
    let predicted = row["predicted"].as_f64().unwrap();
    let error = row["error"].as_f64().unwrap();
    assert!(((predicted - 1.42) / 1.42 - error).abs() < 1e-12);
    assert_eq!(v["max_abs_error"].as_f64(), Some(error.abs()));
    assert_eq!(v["median_abs_error"].as_f64(), Some(error.abs()));
}

#[test]
fn validate_with_the_a100_profile_prints_a_table() {
    let table = tmp("one-text.toml", ONE_ROW);
    let o = twin(&[
        "validate",
        &table,
        "--profile",
        "scenarios/profiles/a100-dgx.toml",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("| korthikanti-t5-22b | iteration_s_full_recompute | 1.42 |"));
    assert!(out.contains("median |error|"));
}

#[test]
fn simulate_with_a_profile_and_a_mismatched_one() {
    let ok = twin(&[
        "simulate",
        "scenarios/512xA100.toml",
        "--profile",
        "scenarios/profiles/a100-dgx.toml",
        "--format",
        "json",
    ]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let bad = twin(&[
        "simulate",
        "scenarios/512xA100.toml",
        "--profile",
        "scenarios/profiles/h100-dgx.toml",
    ]);
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("h100-sxm-80gb") && err.contains("a100-sxm-80gb"),
        "{err}"
    );
}

#[test]
fn a_broken_profile_is_a_located_input_error() {
    let good = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/profiles/a100-dgx.toml"
    ))
    .unwrap();
    let text = good.replace("tile_m = {", "tile_m = { typo = 1,");
    assert_ne!(text, good, "the profile has a gemm.tile_m line to break");
    let profile = tmp("broken.toml", &text);
    let o = twin(&["simulate", "scenarios/512xA100.toml", "--profile", &profile]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("broken.toml:") && err.contains("typo"),
        "{err}"
    );
}

/// A key the table layout does not know (here a misspelt micro batch, which the prediction
/// would otherwise ignore) is bad input: exit 2 with the file, line, key and allowed keys.
#[test]
fn validate_refuses_unknown_keys() {
    let table = tmp(
        "typo.toml",
        &ONE_ROW.replace("micro_batch = 4", "micro_bach = 4"),
    );
    let o = twin(&["validate", &table]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    let line = ONE_ROW
        .lines()
        .position(|l| l.starts_with("micro_batch"))
        .unwrap()
        + 1;
    assert!(e.contains(&format!("{table}:{line}:")), "{e}");
    assert!(
        e.contains("micro_bach: unknown key; did you mean `micro_batch`?"),
        "{e}"
    );
    assert!(e.contains("allowed: id, source"), "{e}");
}

/// `--emit-scenarios DIR` writes each row's scenario, and simulating it gives the row's
/// prediction.
#[test]
fn validate_writes_each_row_s_scenario() {
    let table = tmp("emit.toml", ONE_ROW);
    let dir = common::scratch_dir("validate-emit").join("rows");
    let o = twin(&[
        "validate",
        &table,
        "--format",
        "json",
        "--emit-scenarios",
        &dir.display().to_string(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let predicted = v["rows"][0]["predicted"].as_f64().unwrap();
    let file = dir.join("korthikanti-t5-22b.toml");
    assert!(file.exists(), "{}", file.display());
    let sim = twin(&["simulate", &file.display().to_string(), "--format", "json"]);
    assert!(
        sim.status.success(),
        "{}",
        String::from_utf8_lossy(&sim.stderr)
    );
    let s: serde_json::Value = serde_json::from_slice(&sim.stdout).unwrap();
    let step = s["step_time_s"].as_f64().unwrap();
    assert!(
        (step - predicted).abs() <= 1e-9 * predicted,
        "{step} vs {predicted}"
    );
}
