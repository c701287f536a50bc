//! End-to-end tests of `twin simulate`'s horizon mode: the bundled faults scenario reports
//! goodput and ETTR (text and top-level JSON), byte-identically for a seed, and a bad
//! `--horizon` is a usage error.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

mod common;
use common::twin;

#[test]
fn faults_scenario_json_has_goodput_and_ettr_and_is_deterministic() {
    let args = [
        "simulate",
        "scenarios/512xA100-faults.toml",
        "--format",
        "json",
        "--seeds",
        "16",
        "--reproducible",
    ];
    let a = twin(&args);
    let b = twin(&args);
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert_eq!(a.stdout, b.stdout);
    let v: serde_json::Value = serde_json::from_slice(&a.stdout).expect("json");
    let g = v["goodput"].as_f64().unwrap_or(-1.0);
    let e = v["ettr"].as_f64().unwrap_or(-1.0);
    assert!(g > 0.5 && g <= e && e <= 1.0, "goodput {g} ettr {e}");
    assert_eq!(v["faults"]["seeds"], 16);
}

#[test]
fn horizon_flag_adds_the_fault_summary_to_text() {
    let o = twin(&[
        "simulate",
        "scenarios/small.toml",
        "--horizon",
        "1d",
        "--seeds",
        "4",
    ]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("goodput") && text.contains("ETTR"), "{text}");
    let plain = twin(&["simulate", "scenarios/small.toml"]);
    assert!(!String::from_utf8_lossy(&plain.stdout).contains("ETTR"));
}

#[test]
fn bad_horizon_is_a_usage_error() {
    let o = twin(&["simulate", "scenarios/small.toml", "--horizon", "soon"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a duration"));
}
