//! Every JSON document against docs/reference/json.md: each command's `--format json` output
//! starts with its schema tag, has the keys the page requires (the table here and the page's
//! "Required" lines must agree), echoes the layout as documented, and keeps the unit
//! conventions (`_ns` and `_bytes` integers, `_s` numbers, null for what was not computed).
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use serde_json::Value;
use std::collections::BTreeSet;

mod common;
use common::twin;

/// (kind, path, required keys): the path is `""` for the document itself, `a` for the object
/// under key `a`, `a[]` for every element of the array under `a`; nested paths are checked
/// where present.
const REQUIRED: &[(&str, &str, &[&str])] = &[
    (
        "simulate",
        "",
        &[
            "schema",
            "step_time_s",
            "tokens_per_s",
            "tokens_per_s_per_gpu",
            "model_tflops_per_gpu",
            "hardware_tflops_per_gpu",
            "mfu",
            "hfu",
            "framework_flops",
            "bubble_fraction",
            "exposed_comm_fraction",
            "peak_memory_bytes",
            "fits",
            "events",
            "sim_wall_s",
            "ranks",
            "scenario",
            "gpu",
            "world",
            "layout",
            "microbatches",
            "global_batch",
            "precision",
            "hbm_bytes",
            "usable_bytes",
            "hbm_free_bytes",
            "host_memory_peak_bytes",
        ],
    ),
    (
        "simulate",
        "ranks[]",
        &[
            "ranks",
            "rank_count",
            "stage",
            "peak_memory_bytes",
            "memory_breakdown",
            "host_memory_peak_bytes",
        ],
    ),
    (
        "simulate",
        "framework_flops",
        &["framework", "attention", "tflops_per_gpu", "mfu"],
    ),
    (
        "simulate",
        "faults",
        &[
            "goodput",
            "ettr",
            "horizon_ns",
            "seeds",
            "step_time_ns",
            "checkpoint_bytes",
            "checkpoint_interval_steps",
            "checkpoint_stall_ns",
            "reload_ns",
            "recovery_ns",
            "expected_failures",
            "failures_by_cause",
            "mttf_hours",
            "lost_hours",
            "best_interval_steps",
            "best_interval_goodput",
            "young_interval_steps",
            "daly_interval_steps",
            "sweep",
            "config",
        ],
    ),
    (
        "sweep",
        "",
        &[
            "schema",
            "scenario",
            "objective",
            "layouts",
            "invalid",
            "failed",
            "rows",
        ],
    ),
    (
        "sweep",
        "rows[]",
        &[
            "index",
            "overrides",
            "tp",
            "pp",
            "dp",
            "cp",
            "ep",
            "vpp",
            "micro_batch",
            "recompute",
            "zero",
            "schedule",
            "precision",
            "step_time_s",
            "tokens_per_s",
            "mfu",
            "peak_memory_bytes",
            "peak_memory_fraction",
            "bubble_fraction",
            "exposed_comm_fraction",
            "fits",
            "simulated",
        ],
    ),
    ("check", "", &["schema", "passed", "summary", "scenarios"]),
    (
        "check",
        "scenarios[]",
        &["file", "scenario", "layout", "checks"],
    ),
    (
        "check",
        "scenarios[].checks[]",
        &[
            "check",
            "value",
            "operator",
            "threshold",
            "threshold_text",
            "outcome",
        ],
    ),
    ("diff", "", &["schema", "a", "b", "rows"]),
    (
        "diff",
        "rows[]",
        &["field", "a", "b", "delta", "delta_fraction"],
    ),
    ("bench", "", &["schema", "rows"]),
    (
        "bench",
        "rows[]",
        &[
            "scenario",
            "priced_with",
            "gpus",
            "layout",
            "ops",
            "events",
            "collapsed",
            "generate_median_s",
            "simulate_median_s",
            "simulate_best_s",
            "total_median_s",
            "events_per_s",
        ],
    ),
    ("bench-search", "", &["schema", "rows"]),
    (
        "bench-search",
        "rows[]",
        &[
            "scenario",
            "gpus",
            "layouts",
            "simulated",
            "pruned",
            "median_s",
            "layouts_per_s",
        ],
    ),
    (
        "doctor",
        "",
        &[
            "schema",
            "ready",
            "missing",
            "libraries",
            "driver_version",
            "driver_cuda_version",
            "bindings_cuda_version",
            "cublas_version",
            "nccl_version",
            "gpus",
            "peer_access",
            "notes",
        ],
    ),
    (
        "validate",
        "",
        &[
            "schema",
            "rows",
            "median_abs_error",
            "max_abs_error",
            "uncovered",
            "groups",
        ],
    ),
    (
        "validate",
        "rows[]",
        &[
            "id",
            "field",
            "layout",
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
            "bundled_profile",
        ],
    ),
    (
        "run",
        "",
        &[
            "schema",
            "step_time_s",
            "tokens_per_s",
            "mfu",
            "bubble_fraction",
            "exposed_comm_fraction",
            "peak_memory_bytes",
            "fits",
            "ranks",
            "scenario",
            "gpu",
            "world",
            "layout",
            "backend",
            "step_times_s",
            "clock_residual_ns",
            "op_gap",
            "scaled",
            "rss_peak_bytes",
            "final_weights_digest",
        ],
    ),
    (
        "verify-step",
        "",
        &[
            "schema",
            "layout",
            "scenario",
            "profile",
            "warmup",
            "steps",
            "repeat",
            "predicted",
            "measured",
            "step_time_predicted_s",
            "step_time_measured_s",
            "step_time_error",
            "measured_step_times_s",
            "measured_step_time_median_s",
            "measured_step_time_spread_s",
            "bubble_fraction_predicted",
            "bubble_fraction_measured",
            "bubble_fraction_error_points",
            "exposed_comm_fraction_predicted",
            "exposed_comm_fraction_measured",
            "exposed_comm_error_points",
            "peak_memory",
            "violations",
            "machine_check",
            "critical_path",
        ],
    ),
    (
        "verify-measured",
        "",
        &[
            "schema",
            "layout",
            "step_time_predicted_s",
            "step_time_measured_s",
            "step_time_error",
            "classes",
            "collectives",
        ],
    ),
    (
        "verify-recovery",
        "",
        &[
            "schema",
            "layout",
            "inject",
            "at_step",
            "detection_timeout_s",
            "process_restart_s",
            "storage_read_bytes_per_s",
            "checkpoint_bytes",
            "step_time_s",
            "predicted",
            "measured",
            "recovery_error",
            "tolerance",
            "pass",
        ],
    ),
    (
        "verify-recovery",
        "predicted",
        &[
            "detection_s",
            "restart_s",
            "reload_s",
            "recovery_s",
            "steps_lost",
            "lost_s",
        ],
    ),
    (
        "calibrate-host",
        "",
        &[
            "schema",
            "config",
            "fits",
            "profile",
            "host",
            "provenance",
            "elapsed_s",
            "step_bytes",
            "refit_of",
        ],
    ),
    (
        "calibrate-cuda",
        "",
        &[
            "schema",
            "plan",
            "device",
            "refit_of",
            "fits",
            "profile",
            "provenance",
            "elapsed_s",
        ],
    ),
    (
        "calibrate-nccl-tests",
        "",
        &["schema", "logs", "fits", "tiers", "profile"],
    ),
    (
        "calibrate-trace",
        "",
        &[
            "schema",
            "layout",
            "gemm",
            "gemm_kernels",
            "memory_bandwidth_bytes_per_s",
            "memory_kernels",
            "launch_ns",
            "step_measured_s",
            "step_fitted_s",
        ],
    ),
    (
        "calibration-samples",
        "",
        &["schema", "provenance", "outlier_rule", "samples"],
    ),
];

/// Kinds this file does not produce: measured calibrations take minutes (cli_calibrate checks
/// the host ones' tags) and `calibrate cuda` needs a GPU.
const PRODUCED_ELSEWHERE: &[&str] = &["calibrate-host", "calibrate-cuda", "calibration-samples"];

/// Kinds whose fitted parameters (estimate objects) and raw samples are real numbers whatever
/// their unit.
const CALIBRATION: &[&str] = &[
    "calibrate-host",
    "calibrate-cuda",
    "calibrate-nccl-tests",
    "calibrate-trace",
    "calibration-samples",
];

const LAYOUT_KEYS: [&str; 7] = ["tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch"];

type Rows = BTreeSet<(String, String, Vec<String>)>;

fn table() -> Rows {
    REQUIRED
        .iter()
        .map(|(k, p, keys)| {
            let mut keys: Vec<String> = keys.iter().map(|s| s.to_string()).collect();
            keys.sort();
            (k.to_string(), p.to_string(), keys)
        })
        .collect()
}

/// The page's "Required" lines: `Required: ...` (the document) and `Required in `PATH`: ...`,
/// under the `### `twin.KIND/1`` heading they follow.
fn documented() -> Rows {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference/json.md");
    let text = std::fs::read_to_string(path).unwrap();
    let mut kind = None;
    let mut rows = Rows::new();
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("### `twin.") {
            kind = Some(h.split('/').next().unwrap().to_string());
            continue;
        }
        let Some(rest) = line.strip_prefix("Required") else {
            continue;
        };
        let (path, keys) = if let Some(r) = rest.strip_prefix(" in `") {
            let (p, k) = r.split_once("`:").unwrap();
            (p.to_string(), k)
        } else {
            (String::new(), rest.strip_prefix(":").unwrap())
        };
        let mut keys: Vec<String> = keys
            .split(',')
            .map(|k| k.trim().trim_end_matches('.').trim_matches('`').to_string())
            .collect();
        keys.sort();
        let kind = kind
            .clone()
            .expect("a Required line under a kind's heading");
        assert!(rows.insert((kind, path, keys)), "{line}");
    }
    rows
}

#[test]
fn the_table_here_is_the_page() {
    let (here, page) = (table(), documented());
    let only_here: Vec<_> = here.difference(&page).collect();
    let only_page: Vec<_> = page.difference(&here).collect();
    assert!(
        only_here.is_empty() && only_page.is_empty(),
        "this test and docs/reference/json.md disagree:\nonly here: {only_here:?}\nonly on the page: {only_page:?}"
    );
}

/// The values at `path` in `v` (several for `[]` steps); none when a step is absent.
fn at<'a>(v: &'a Value, path: &str) -> Vec<&'a Value> {
    let mut now = vec![v];
    for step in path.split('.').filter(|s| !s.is_empty()) {
        let (key, each) = match step.strip_suffix("[]") {
            Some(k) => (k, true),
            None => (step, false),
        };
        now = now
            .into_iter()
            .filter_map(|x| x.get(key))
            .flat_map(|x| match (each, x.as_array()) {
                (true, Some(items)) => items.iter().collect(),
                _ => vec![x],
            })
            .collect();
    }
    now
}

fn is_integer(v: &Value) -> bool {
    v.is_u64() || v.is_i64()
}

/// `_ns` and `_bytes` keys hold integers (or null, or arrays of them); `_s` keys numbers (or
/// null, or arrays or maps of them); every `layout` object is exactly the layout's integers.
fn check_units(kind: &str, v: &Value, path: &str, errors: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, x) in map {
                let here = format!("{path}.{k}");
                let all = |ok: &dyn Fn(&Value) -> bool| -> bool {
                    fn each(x: &Value, ok: &dyn Fn(&Value) -> bool, maps: bool) -> bool {
                        match x {
                            Value::Null => true,
                            Value::Array(items) => items.iter().all(|y| each(y, ok, maps)),
                            Value::Object(m) if maps => m.values().all(|y| each(y, ok, maps)),
                            _ => ok(x),
                        }
                    }
                    each(x, ok, k.ends_with("_s"))
                };
                // A calibration's fitted parameters are estimate objects in any unit.
                let estimates = CALIBRATION.contains(&kind);
                let integers = k.ends_with("_ns") || k.ends_with("_bytes");
                if integers && !estimates && !all(&is_integer) {
                    errors.push(format!("{kind}: {here} is not an integer: {x}"));
                }
                if k.ends_with("_s") && !estimates && !all(&Value::is_number) {
                    errors.push(format!("{kind}: {here} is not a number: {x}"));
                }
                if k == "layout" {
                    let keys: BTreeSet<&str> = x
                        .as_object()
                        .map(|m| m.keys().map(String::as_str).collect())
                        .unwrap_or_default();
                    let want: BTreeSet<&str> = LAYOUT_KEYS.into_iter().collect();
                    if keys != want || !LAYOUT_KEYS.iter().all(|l| x[*l].is_u64()) {
                        errors.push(format!("{kind}: {here} is not a layout: {x}"));
                    }
                }
                check_units(kind, x, &here, errors);
            }
        }
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                check_units(kind, x, &format!("{path}[{i}]"), errors);
            }
        }
        Value::String(s) => {
            // Rust names of enums do not leak into output.
            for debug in ["TokensPerS", "StepTime", "Some(", "None"] {
                if s.contains(debug) {
                    errors.push(format!("{kind}: {path} holds {s:?}"));
                }
            }
        }
        _ => {}
    }
}

/// The document `text` of `kind`: its tag first, the required keys, the conventions.
fn check_document(kind: &str, text: &str) -> Value {
    assert!(
        text.starts_with(&format!("{{\n  \"schema\": \"twin.{kind}/1\",")),
        "{kind}: the schema tag is not the first key:\n{}",
        &text[..text.len().min(200)]
    );
    let v: Value = serde_json::from_str(text).unwrap();
    let mut errors = Vec::new();
    for (k, path, keys) in REQUIRED {
        if *k != kind {
            continue;
        }
        let objects = at(&v, path);
        if path.is_empty() {
            assert_eq!(objects.len(), 1);
        }
        for o in objects {
            for key in *keys {
                if o.get(key).is_none() {
                    errors.push(format!("{kind}: {path} has no {key:?}"));
                }
            }
        }
    }
    check_units(kind, &v, "", &mut errors);
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    v
}

fn stdout(args: &[&str], codes: &[i32]) -> String {
    let o = twin(args);
    let code = o.status.code().unwrap_or(-1);
    assert!(
        codes.contains(&code),
        "twin {args:?} exited {code}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn scratch(name: &str) -> String {
    common::scratch_dir("json-schema")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn every_document_has_its_tag_its_keys_and_the_conventions() {
    let mut seen = BTreeSet::new();
    let mut doc = |kind: &str, args: &[&str], codes: &[i32]| {
        seen.insert(kind.to_string());
        check_document(kind, &stdout(args, codes))
    };
    let v = doc(
        "simulate",
        &["simulate", "scenarios/small.toml", "--format", "json"],
        &[0],
    );
    // small.toml: tp 2, pp 2, dp 2, micro batch 2 (its [parallel] and [training]).
    assert_eq!(
        (v["layout"]["tp"].as_u64(), v["layout"]["pp"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(v["layout"]["micro_batch"].as_u64(), Some(2));
    let h = doc(
        "simulate",
        &[
            "simulate",
            "scenarios/small.toml",
            "--horizon",
            "1d",
            "--seeds",
            "4",
            "--format",
            "json",
        ],
        &[0],
    );
    assert_eq!(h["faults"]["horizon_ns"], 86_400_000_000_000u64);
    assert!(h["faults"]["failures_by_cause"].is_object());
    let sweep = [
        "sweep",
        "scenarios/small.toml",
        "--vary",
        "parallel.tp=1,2",
        "--format",
        "json",
    ];
    let s = doc("sweep", &sweep, &[0]);
    assert_eq!(s["objective"], "tokens-per-s");
    // The hidden --json prints the same document.
    let alias = stdout(
        &sweep[..4]
            .iter()
            .copied()
            .chain(["--json"])
            .collect::<Vec<_>>(),
        &[0],
    );
    assert_eq!(alias, stdout(&sweep, &[0]));
    let c = doc(
        "check",
        &[
            "check",
            "scenarios/small.toml",
            "--expect",
            "step_time_s<=9.5",
            "--expect",
            "min_goodput=0.9",
            "--format",
            "json",
        ],
        &[0],
    );
    let checks = &c["scenarios"][0]["checks"];
    let bound = checks
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["check"] == "max_step_time_s")
        .unwrap();
    assert_eq!(bound["operator"], "<=");
    assert_eq!(bound["threshold"], 9.5);
    let goodput = checks
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["check"] == "min_goodput")
        .unwrap();
    assert!(goodput["value"].is_null(), "not evaluated: {goodput}");
    doc(
        "diff",
        &[
            "diff",
            "scenarios/small.toml",
            "scenarios/small.toml",
            "--format",
            "json",
        ],
        &[0],
    );
    doc(
        "bench",
        &[
            "bench",
            "scenarios/small.toml",
            "--repeat",
            "1",
            "--format",
            "json",
        ],
        &[0],
    );
    doc(
        "bench-search",
        &[
            "bench",
            "--search",
            "scenarios/small.toml",
            "--repeat",
            "1",
            "--format",
            "json",
        ],
        &[0],
    );
    doc("doctor", &["doctor", "--format", "json"], &[0, 3]);
    let table = scratch("one-row.toml");
    std::fs::write(&table, ONE_ROW).unwrap();
    doc("validate", &["validate", &table, "--format", "json"], &[0]);
    doc(
        "run",
        &[
            "run",
            "scenarios/host/pp.toml",
            "--steps",
            "1",
            "--format",
            "json",
        ],
        &[0],
    );
    doc(
        "verify-step",
        &[
            "verify",
            "step",
            "scenarios/host/pp.toml",
            "--profile",
            "scenarios/profiles/host-example.toml",
            "--steps",
            "1",
            "--warmup",
            "0",
            "--format",
            "json",
        ],
        &[0, 1],
    );
    let fixture = "measured/tests/data/h200-hf-llama/hf-llama-L8-mb1-gb4-s2048-h200.trace.json.gz";
    let (h200, h200_profile) = (
        "scenarios/gpu/hf-llama-8layers-h200.toml",
        "scenarios/profiles/h200-dgx.toml",
    );
    doc(
        "verify-measured",
        &[
            "verify",
            "step",
            h200,
            "--profile",
            h200_profile,
            "--measured",
            fixture,
            "--format",
            "json",
        ],
        &[0],
    );
    doc(
        "verify-recovery",
        &[
            "verify",
            "recovery",
            "scenarios/host/faults.toml",
            "--repeat",
            "1",
            "--steps",
            "8",
            "--format",
            "json",
        ],
        &[0, 1],
    );
    doc(
        "calibrate-trace",
        &[
            "calibrate",
            "trace",
            fixture,
            "--scenario",
            h200,
            "--base-profile",
            h200_profile,
            "-o",
            &scratch("trace.toml"),
            "--format",
            "json",
        ],
        &[0],
    );
    doc(
        "calibrate-nccl-tests",
        &[
            "calibrate",
            "nccl-tests",
            "calibration/tests/data/all_reduce_perf-8xA100.log",
            "-o",
            &scratch("nccl.toml"),
            "--format",
            "json",
        ],
        &[0],
    );
    let kinds: BTreeSet<String> = REQUIRED.iter().map(|r| r.0.to_string()).collect();
    let missed: Vec<&String> = kinds
        .iter()
        .filter(|k| !seen.contains(*k) && !PRODUCED_ELSEWHERE.contains(&k.as_str()))
        .collect();
    assert!(missed.is_empty(), "documented but not produced: {missed:?}");
}

/// A layout whose model state alone exceeds memory is not simulated: its figures are null in
/// the sweep's JSON, and the document still meets its schema.
#[test]
fn a_sweep_gives_null_for_what_it_did_not_simulate() {
    let text = stdout(
        &[
            "sweep",
            "scenarios/small.toml",
            "--vary",
            "parallel.tp=1,2",
            "--set",
            "cluster.gpu.hbm_bytes=1000000",
            "--format",
            "json",
        ],
        &[0],
    );
    let v = check_document("sweep", &text);
    let rows = v["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    for r in rows {
        assert_eq!(r["simulated"], false, "1 MB holds no model state: {r}");
        assert!(
            r["step_time_s"].is_null() && r["tokens_per_s"].is_null(),
            "{r}"
        );
        assert!(r["peak_memory_bytes"].as_u64().unwrap() > 1_000_000, "{r}");
    }
}

/// One small published run (Korthikanti 22B on 8 GPUs).
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
