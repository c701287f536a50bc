//! End-to-end tests of `twin simulate` on a scenario with `[variability]`: the step sampled on
//! varied clusters, every rank simulated, reported as P50/P95/P99 in text and JSON.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

mod common;
use common::{stdout, twin};

const SCENARIO: &str = "scenarios/variability.toml";

fn json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["simulate", SCENARIO, "--format", "json", "--reproducible"];
    all.extend_from_slice(args);
    let o = twin(&all);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_str(&stdout(&o)).expect("simulate prints JSON")
}

fn ns(v: &serde_json::Value, path: &[&str]) -> u64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_u64()
        .unwrap_or_else(|| panic!("{path:?} is no integer in {v}"))
}

#[test]
fn without_variation_the_percentiles_are_the_predicted_step() {
    let v = json(&[
        "--samples",
        "12",
        "--set",
        "variability.gpu_speed_cv=0",
        "--set",
        "variability.link_bandwidth_cv=0",
        "--set",
        "variability.step_jitter_cv=0",
        "--set",
        "variability.slow_node_fraction=0",
    ]);
    let var = &v["variability"];
    assert_eq!(var["samples"], 12);
    let det = ns(var, &["deterministic_step_time_ns"]);
    // The prediction is collapsed to representative ranks; the samples simulate every rank:
    // the collapse is exact, so they agree to the nanosecond.
    let predicted = v["step_time_s"].as_f64().expect("step_time_s");
    assert_eq!(det, (predicted * 1e9).round() as u64);
    for p in ["p50", "p95", "p99"] {
        assert_eq!(ns(var, &[p, "step_time_ns"]), det, "{p}");
    }
    assert_eq!(ns(var, &["min_step_time_ns"]), det);
    assert_eq!(ns(var, &["max_step_time_ns"]), det);
}

#[test]
fn variation_slows_the_step_and_a_seed_gives_byte_identical_output() {
    let args = [
        "simulate",
        SCENARIO,
        "--samples",
        "16",
        "--format",
        "json",
        "--reproducible",
    ];
    let a = twin(&args);
    let b = twin(&args);
    assert!(a.status.success());
    assert_eq!(a.stdout, b.stdout, "same seed, same bytes");
    let v: serde_json::Value = serde_json::from_str(&stdout(&a)).expect("JSON");
    let var = &v["variability"];
    let det = ns(var, &["deterministic_step_time_ns"]);
    let (p50, p95, p99) = (
        ns(var, &["p50", "step_time_ns"]),
        ns(var, &["p95", "step_time_ns"]),
        ns(var, &["p99", "step_time_ns"]),
    );
    assert!(
        det < p50 && p50 <= p95 && p95 <= p99,
        "{det} {p50} {p95} {p99}"
    );
    // Throughput at a percentile is the prediction's scaled by the step times' ratio.
    let tokens = v["tokens_per_s_per_gpu"].as_f64().expect("tokens");
    let at_p95 = var["p95"]["tokens_per_s_per_gpu"]
        .as_f64()
        .expect("tokens at p95");
    let want = tokens * det as f64 / p95 as f64;
    assert!((at_p95 - want).abs() <= want * 1e-9, "{at_p95} vs {want}");
    let other = twin(&[
        "simulate",
        SCENARIO,
        "--samples",
        "16",
        "--format",
        "json",
        "--reproducible",
        "--set",
        "run.seed=8",
    ]);
    assert_ne!(a.stdout, other.stdout, "another seed, other samples");
    let text = twin(&["simulate", SCENARIO, "--samples", "16"]);
    let text = stdout(&text);
    assert!(text.contains("variability     16 samples"), "{text}");
    assert!(
        text.contains("P95") && text.contains("paced the samples"),
        "{text}"
    );
}

#[test]
fn a_bad_variability_value_is_located() {
    let o = twin(&[
        "simulate",
        SCENARIO,
        "--set",
        "variability.slow_node_factor=0.5",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("variability.slow_node_factor") && err.contains("at least 1"),
        "{err}"
    );
}

fn horizon_json(extra: &[&str]) -> serde_json::Value {
    let mut all = vec![
        "simulate",
        "scenarios/512xA100-faults.toml",
        "--format",
        "json",
        "--reproducible",
        "--seeds",
        "40",
        "--set",
        "training.tokens=3e10",
    ];
    all.extend_from_slice(extra);
    let o = twin(&all);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_str(&stdout(&o)).expect("simulate prints JSON")
}

#[test]
fn without_failures_the_time_to_train_has_no_spread() {
    let v = horizon_json(&[
        "--set",
        "faults.node_failures_per_1000_node_days=0",
        "--set",
        "faults.straggler_per_gpu_hour=0",
    ]);
    let t = &v["time_to_train"];
    // 3e10 tokens at 512 sequences of 2,048 tokens a step.
    let steps = 30_000_000_000u64.div_ceil(512 * 2048);
    assert_eq!(t["steps"], steps);
    let (p10, p50, p90) = (
        ns(t, &["time_p10_ns"]),
        ns(t, &["time_p50_ns"]),
        ns(t, &["time_p90_ns"]),
    );
    assert_eq!((p10, p50), (p50, p90));
    // Every trial loses only the checkpoint stalls: steps x step over that goodput.
    let step_s = v["step_time_s"].as_f64().expect("step");
    let goodput = t["goodput"]["p50"].as_f64().expect("goodput");
    let want = steps as f64 * (step_s * 1e9).round() / goodput;
    assert!((p50 as f64 - want).abs() <= 1.0, "{p50} vs {want}");
}

#[test]
fn with_failures_the_mean_time_to_train_lies_in_the_horizon_models_interval() {
    let v = horizon_json(&[]);
    let t = &v["time_to_train"];
    let steps = t["steps"].as_u64().expect("steps") as f64;
    let step_ns = (v["step_time_s"].as_f64().expect("step") * 1e9).round();
    let g = &v["faults"]["goodput"];
    let (lo, hi) = (
        g["ci_low"].as_f64().expect("ci_low"),
        g["ci_high"].as_f64().expect("ci_high"),
    );
    let mean = ns(t, &["mean_time_ns"]) as f64;
    let (fast, slow) = (steps * step_ns / hi, steps * step_ns / lo);
    assert!(fast <= mean && mean <= slow, "{fast} <= {mean} <= {slow}");
    let (p10, p90) = (ns(t, &["time_p10_ns"]), ns(t, &["time_p90_ns"]));
    assert!(p10 < p90, "failures spread the time: {p10} {p90}");
}
