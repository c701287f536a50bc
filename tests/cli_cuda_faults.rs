//! End-to-end tests of checkpoints and injected kills on the CUDA worker's path without a GPU:
//! `--backend dummy-cuda` runs the same launcher, device worker, checkpoint files, kill and
//! reload as `--backend cuda`, on a device that keeps its state buffers in host memory. A
//! recovered run ends with the state of an uninterrupted one, which is also the host
//! backend's; flags that cannot take effect are refused.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use serde_json::Value;
use std::path::PathBuf;

mod common;
use common::{text, twin};

fn dir(name: &str) -> PathBuf {
    let d = common::scratch_dir("cuda-faults").join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// `twin run SCENARIO --steps 6 --format json EXTRA...`, which must succeed.
fn run_json(scenario: &str, extra: &[&str]) -> Value {
    let mut args = vec!["run", scenario, "--steps", "6", "--format", "json"];
    args.extend_from_slice(extra);
    let o = twin(&args);
    assert!(
        o.status.success(),
        "twin {args:?} failed\nstderr: {}",
        text(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

fn digests(v: &Value) -> Vec<String> {
    v["final_weights_digest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

/// The command shape (`--steps 6 --checkpoint-dir D --checkpoint-every 2 --inject
/// KILL`) on the device worker: checkpoints 2 and 4 are written and complete, the kill fires
/// once, the rank restarts and reloads, and the final state is the uninterrupted run's.
fn recovers_like_the_host(scenario: &str, kill: &str, at_step: u64, resumed: u64) {
    let host = digests(&run_json(scenario, &[]));
    let clean = run_json(scenario, &["--backend", "dummy-cuda"]);
    assert_eq!(clean["backend"], "dummy-cuda");
    assert_eq!(
        digests(&clean),
        host,
        "the dummy device keeps the host's state"
    );
    let ck = dir(&kill.replace([' ', '=', ':', ','], "-"));
    let v = run_json(
        scenario,
        &[
            "--backend",
            "dummy-cuda",
            "--checkpoint-dir",
            ck.to_str().unwrap(),
            "--checkpoint-every",
            "2",
            "--inject",
            kill,
        ],
    );
    assert_eq!(v["backend"], "dummy-cuda");
    let rec = v["recoveries"].as_array().unwrap();
    assert_eq!(rec.len(), 1, "{:#}", v["recoveries"]);
    assert!(
        rec[0]["cause"]
            .as_str()
            .unwrap()
            .starts_with(&format!("injected: {kill}")),
        "{}",
        rec[0]
    );
    assert_eq!(rec[0]["at_step"], at_step);
    assert_eq!(rec[0]["resumed_from_step"], resumed);
    assert_eq!(rec[0]["steps_lost"], at_step - resumed);
    assert_eq!(v["checkpoints"]["count"], 2, "{:#}", v["checkpoints"]);
    assert!(v["checkpoints"]["bytes"].as_u64().unwrap() > 0);
    let world = digests(&v).len() as u32;
    for step in [2u64, 4] {
        let step_dir = ck.join(format!("step-{step:06}"));
        assert!(
            step_dir.join("COMPLETE").is_file(),
            "{}",
            step_dir.display()
        );
        for rank in 0..world {
            let file = std::fs::read(step_dir.join(format!("rank-{rank:05}.ckpt"))).unwrap();
            let (h, payload) = twin_runtime::checkpoint::format::decode(&file).unwrap();
            assert_eq!((h.rank, h.world, h.step), (rank, world, step));
            assert!(!twin_runtime::checkpoint::state::parse(payload)
                .unwrap()
                .is_empty());
        }
    }
    // Nothing lost, nothing applied twice: the state of the run that never failed.
    assert_eq!(digests(&v), host);
}

#[test]
fn a_one_rank_device_run_recovers_from_a_kill_with_the_uninterrupted_state() {
    recovers_like_the_host(
        "scenarios/host/single.toml",
        "kill rank=0 at=step:4,op:0",
        4,
        4,
    );
}

#[test]
fn a_four_rank_device_run_recovers_a_kill_mid_step_and_recomputes_the_lost_step() {
    recovers_like_the_host(
        "scenarios/host/faults.toml",
        "kill rank=2 at=step:3,op:5",
        3,
        2,
    );
}

#[test]
fn checkpoint_flags_without_a_checkpoint_dir_are_refused() {
    for flag in [
        vec!["--resume"],
        vec!["--checkpoint-async"],
        vec!["--checkpoint-every", "2"],
    ] {
        let mut args = vec!["run", "scenarios/host/single.toml", "--steps", "1"];
        args.extend_from_slice(&flag);
        let o = twin(&args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flag:?}: {err}");
        assert!(err.contains("--checkpoint-dir <DIR>"), "{flag:?}: {err}");
    }
}

#[test]
fn verify_faults_refuses_a_backend_it_does_not_measure() {
    let o = twin(&[
        "verify",
        "recovery",
        "scenarios/host/faults.toml",
        "--backend",
        "cuda",
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("verify recovery measures recoveries on the host backend only")
            && err.contains("twin run --backend cuda --checkpoint-dir"),
        "{err}"
    );
}

#[test]
fn the_host_fault_variable_is_refused_by_a_device_worker() {
    let o = common::twin_env(
        &[
            "run",
            "scenarios/host/single.toml",
            "--backend",
            "dummy-cuda",
            "--steps",
            "1",
        ],
        &[("TWIN_FAULT", "kill:0:1")],
    );
    let err = text(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("TWIN_FAULT is read by the host backend only"),
        "{err}"
    );
}

/// Without a GPU, `--backend cuda` with checkpoints or kills stops before any process starts,
/// naming what is missing; it never runs without them.
#[test]
fn cuda_checkpoints_without_a_gpu_are_refused_before_anything_runs() {
    let driver = twin_runtime::backend::cuda::discover::Discovery::run(
        &twin_runtime::backend::cuda::discover::SearchEnv::from_process(),
    )
    .path(twin_runtime::backend::cuda::discover::CudaLib::Driver)
    .is_some();
    if driver {
        eprintln!("note: a CUDA driver is present; the no-driver refusal is not exercised here");
        return;
    }
    let ck = dir("no-gpu");
    let o = twin(&[
        "run",
        "scenarios/host/single.toml",
        "--backend",
        "cuda",
        "--steps",
        "6",
        "--checkpoint-dir",
        ck.to_str().unwrap(),
        "--inject",
        "kill rank=0 at=step:4",
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.starts_with("error: no CUDA driver found"), "{err}");
    assert!(!ck.join("step-000002").exists());
}
