//! End-to-end tests of `twin doctor`: the real binary, as a user or a CI job runs it. On a
//! machine without a CUDA driver (CI, the dev machine) it must say what is missing and where
//! it searched, and exit 3; with a driver and a GPU it exits 0 and lists the GPU.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_runtime::backend::cuda::discover::{CudaLib, Discovery, SearchEnv};

mod common;
use common::twin;

fn driver_present() -> bool {
    Discovery::run(&SearchEnv::from_process())
        .path(CudaLib::Driver)
        .is_some()
}

#[test]
fn doctor_text_says_what_is_missing_and_where_it_searched() {
    let o = twin(&["doctor"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for needle in [
        "libraries:",
        "CUDA driver",
        "cuBLAS",
        "NCCL",
        "driver:",
        "GPUs:",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in\n{out}");
    }
    if driver_present() {
        eprintln!("note: a CUDA driver is present; checking the GPU path instead");
        assert_eq!(
            o.status.code() == Some(0),
            out.contains("ready: the CUDA backend can run")
        );
        return;
    }
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(
        out.contains("CUDA driver  not found (no CUDA driver found (searched: "),
        "{out}"
    );
    assert!(out.contains("/usr/lib/x86_64-linux-gnu"), "{out}");
    assert!(out.contains("TWIN_CUDA_LIB_DIR"), "{out}");
    assert!(
        out.contains("not ready: the CUDA backend cannot run here; missing:"),
        "{out}"
    );
    assert!(
        out.contains("  - CUDA driver: no CUDA driver found"),
        "{out}"
    );
}

#[test]
fn doctor_json_is_machine_readable_and_agrees_with_the_exit_code() {
    let o = twin(&["doctor", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    let ready = v["ready"].as_bool().expect("ready is a bool");
    let missing = v["missing"].as_array().expect("missing is a list");
    assert_eq!(ready, missing.is_empty());
    assert_eq!(o.status.code(), Some(if ready { 0 } else { 3 }));
    let libs = v["libraries"].as_array().expect("libraries is a list");
    let names: Vec<&str> = libs.iter().filter_map(|l| l["name"].as_str()).collect();
    assert_eq!(
        names,
        ["CUDA driver", "cuBLASLt", "cuBLAS", "NCCL", "NVRTC"]
    );
    assert!(libs
        .iter()
        .all(|l| l["path"].is_object() && l["required"].is_boolean()));
    assert_eq!(v["bindings_cuda_version"], "13.0");
    if driver_present() {
        return;
    }
    assert!(!ready);
    let driver = &libs[0]["path"]["not_found"];
    assert!(
        driver
            .as_str()
            .is_some_and(|s| s.starts_with("no CUDA driver found (searched: ")),
        "{driver}"
    );
    assert!(missing.iter().any(|m| m
        .as_str()
        .is_some_and(|s| s.starts_with("GPUs: no CUDA driver found"))));
}

#[test]
fn doctor_rejects_an_unknown_format() {
    let o = twin(&["doctor", "--format", "yaml"]);
    assert_eq!(o.status.code(), Some(2));
}
