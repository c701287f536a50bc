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
