//! End-to-end tests of `twin run --backend host` and `twin worker`: real worker processes of
//! the built `twin` binary on loopback. They check the measured report's fields, trace parity
//! with the schedule and with the simulator's trace, and failures: a SIGKILLed, hung or
//! corrupting rank, bad bootstrap environment, and the CUDA backend without a GPU.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use twin_sim::schedule::{Op, OpKind};

mod common;
use common::{text, twin_env as twin};

fn tmp(name: &str) -> PathBuf {
    common::scratch_dir("run").join(name)
}

fn staged(path: &str) -> twin_sim::Staged {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path);
    let s = twin_sim::setup::load(&p, &[]).unwrap();
    twin_sim::Staged::new(&s).unwrap()
}

fn is_mem(op: &Op) -> bool {
    matches!(op.kind, OpKind::Alloc { .. } | OpKind::Free { .. })
}

/// (rank, op) -> (start, end) in microseconds.
type Spans = BTreeMap<(u64, u64), (f64, f64)>;

/// The spans of every "X" event of a Chrome trace, and how many there were (duplicates count).
fn x_events(trace: &str) -> (Spans, usize) {
    let v: Value = serde_json::from_str(trace).unwrap();
    let mut out = BTreeMap::new();
    let mut n = 0;
    for e in v["traceEvents"].as_array().unwrap() {
        if e["ph"] == "X" {
            n += 1;
            let key = (
                e["pid"].as_u64().unwrap(),
                e["args"]["op"].as_u64().unwrap(),
            );
            let ts = e["ts"].as_f64().unwrap();
            out.insert(key, (ts, ts + e["dur"].as_f64().unwrap()));
        }
    }
    (out, n)
}

#[test]
fn json_report_has_the_simulators_fields() {
    let o = twin(
        &[
            "run",
            "scenarios/host/dp-pp-zero.toml",
            "--backend",
            "host",
            "--format",
            "json",
        ],
        &[],
    );
    assert!(o.status.success(), "stderr: {}", text(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["step_time_s"].as_f64().unwrap() > 0.0);
    let bubble = v["bubble_fraction"].as_f64().unwrap();
    let exposed = v["exposed_comm_fraction"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&bubble) && (0.0..=1.0).contains(&exposed));
    assert!(bubble + exposed <= 1.0 + 1e-9);
    // The real peak is close to the simulated one: the same buffers, but frees on other
    // streams (a sent activation) land at measured rather than modelled times, which can
    // shift a few buffers in or out of the peak.
    let sim = twin(
        &[
            "simulate",
            "scenarios/host/dp-pp-zero.toml",
            "--format",
            "json",
        ],
        &[],
    );
    let s: Value = serde_json::from_slice(&sim.stdout).unwrap();
    let real = v["peak_memory_bytes"].as_f64().unwrap();
    let modelled = s["peak_memory_bytes"].as_f64().unwrap();
    assert!(
        (real / modelled - 1.0).abs() < 0.05,
        "real {real}, simulated {modelled}"
    );
    assert_eq!(v["backend"], "host");
    assert_eq!(v["world"], 4);
    assert_eq!(v["step_times_s"].as_array().unwrap().len(), 2);
    assert!(!v["ranks"].as_array().unwrap().is_empty());
}

#[test]
fn host_trace_has_every_op_once_in_dependency_order_and_matches_the_sim_trace() {
    let scenario = "scenarios/host/tp-pp.toml";
    let host_path = tmp("host.trace.json");
    let sim_path = tmp("sim.trace.json");
    let o = twin(
        &[
            "run",
            scenario,
            "--backend",
            "host",
            "--format",
            "json",
            "--trace",
            host_path.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success(), "stderr: {}", text(&o.stderr));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    let residual_us = report["clock_residual_ns"].as_f64().unwrap() / 1e3;
    let o = twin(
        &[
            "simulate",
            scenario,
            "--trace",
            sim_path.to_str().unwrap(),
            "--trace-ranks",
            "all",
        ],
        &[],
    );
    assert!(o.status.success());
    let (host, host_n) = x_events(&std::fs::read_to_string(&host_path).unwrap());
    let (sim, sim_n) = x_events(&std::fs::read_to_string(&sim_path).unwrap());
    // Exactly once per (rank, op): no duplicates, and every non-memory op present.
    assert_eq!(host_n, host.len());
    let st = staged(scenario);
    let mut want = BTreeSet::new();
    for rank in 0..st.plan.world {
        for (i, op) in st.schedule.program(rank).ops.iter().enumerate() {
            if !is_mem(op) {
                want.insert((u64::from(rank), i as u64));
            }
            // Dependency order on the measured times (memory ops are not in the export).
            let Some(&(start, _)) = host.get(&(u64::from(rank), i as u64)) else {
                continue;
            };
            for &d in &op.deps {
                if let Some(&(_, dep_end)) = host.get(&(u64::from(rank), u64::from(d))) {
                    assert!(
                        dep_end <= start,
                        "rank {rank} op {i} started before dep {d} ended"
                    );
                }
            }
        }
    }
    // Every op but the memory ops, and of those only allocations (which take time on the
    // host: every byte is written); frees are instant and never exported.
    let got: BTreeSet<_> = host.keys().copied().collect();
    assert!(
        got.is_superset(&want),
        "missing: {:?}",
        want.difference(&got)
    );
    for &(rank, i) in got.difference(&want) {
        let op = &st.schedule.program(rank as u32).ops[i as usize];
        assert!(
            matches!(op.kind, OpKind::Alloc { .. }),
            "rank {rank} op {i} exported: {:?}",
            op.kind
        );
    }
    // Clocks are aligned across ranks: every receive ends after its send started (within
    // the alignment residual, on both ranks' side).
    let mut pairs = 0;
    for rank in 0..st.plan.world {
        for (i, op) in st.schedule.program(rank).ops.iter().enumerate() {
            let OpKind::Send { peer, tag, .. } = op.kind else {
                continue;
            };
            let dest = match peer {
                twin_sim::schedule::Peer::PpNext => st.plan.pp_next(rank),
                twin_sim::schedule::Peer::PpPrev => st.plan.pp_prev(rank),
                _ => continue,
            };
            let recv = st
                .schedule
                .program(dest)
                .ops
                .iter()
                .position(|o| matches!(o.kind, OpKind::Recv { tag: t, .. } if t == tag));
            let (Some(j), Some(&(send_start, _))) = (recv, host.get(&(u64::from(rank), i as u64)))
            else {
                continue;
            };
            let (_, recv_end) = host[&(u64::from(dest), j as u64)];
            assert!(
                recv_end + 2.0 * residual_us >= send_start,
                "rank {dest} finished receiving tag {tag} at {recv_end} us, before rank {rank} started sending it at {send_start} us"
            );
            pairs += 1;
        }
    }
    assert!(pairs > 0);
    // Same op identities as the simulator's trace of the same scenario (which, without a
    // host profile, prices allocations at nothing and so exports none).
    assert_eq!(sim_n, sim.len());
    assert_eq!(want, sim.keys().copied().collect::<BTreeSet<_>>());
}

/// Live processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if text(&cmd).contains(marker) {
            out.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    out
}

/// Index of an op of `rank` in the middle of its program that matches `pred`.
fn op_index(scenario: &str, rank: u32, pred: impl Fn(&Op) -> bool) -> usize {
    let st = staged(scenario);
    let ops = &st.schedule.program(rank).ops;
    let half = ops.len() / 2;
    (half..ops.len())
        .chain(0..half)
        .find(|&i| pred(&ops[i]))
        .unwrap()
}

#[test]
fn a_sigkilled_rank_ends_the_run_naming_it_and_leaves_no_orphans() {
    let scenario = "scenarios/host/pp.toml";
    let op = op_index(scenario, 1, |o| matches!(o.kind, OpKind::Compute(_)));
    let marker = format!("name=\"kill-{}\"", std::process::id());
    let fault = format!("kill:1:{op}");
    let o = twin(
        &[
            "run",
            scenario,
            "--backend",
            "host",
            "--timeout-s",
            "30",
            "--set",
            &marker,
        ],
        &[("TWIN_FAULT", &fault)],
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("rank 1 failed: killed by signal 9 (SIGKILL)"),
        "{err}"
    );
    // Rank 0 saw it too, at an op, and the run did not wait for the timeout.
    assert!(err.contains("rank 0"), "{err}");
    assert!(!err.contains("made no progress"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(processes_with(&marker), Vec::<String>::new());
}

#[test]
fn a_corrupt_message_is_detected_by_its_receiver() {
    let scenario = "scenarios/host/pp.toml";
    let op = op_index(scenario, 0, |o| matches!(o.kind, OpKind::Send { .. }));
    let fault = format!("corrupt:0:{op}");
    let o = twin(
        &["run", scenario, "--backend", "host", "--timeout-s", "30"],
        &[("TWIN_FAULT", &fault)],
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("rank 1 failed"), "{err}");
    assert!(
        err.contains("corrupt message from rank 0: checksum mismatch"),
        "{err}"
    );
    // The receiver names the op it was running.
    assert!(
        err.contains("rank 1 op ") && err.contains("(recv "),
        "{err}"
    );
}

#[test]
fn a_hung_rank_is_reported_after_the_timeout() {
    let scenario = "scenarios/host/pp.toml";
    let op = op_index(scenario, 1, |o| matches!(o.kind, OpKind::Compute(_)));
    let fault = format!("hang:1:{op}");
    let marker = format!("name=\"hang-{}\"", std::process::id());
    let o = twin(
        &[
            "run",
            scenario,
            "--backend",
            "host",
            "--timeout-s",
            "2",
            "--set",
            &marker,
        ],
        &[("TWIN_FAULT", &fault)],
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("connection to rank 1"), "{err}");
    assert!(err.contains("timed out waiting for the peer"), "{err}");
    assert_eq!(processes_with(&marker), Vec::<String>::new());
}

#[test]
fn bad_bootstrap_environment_is_a_clear_error() {
    let scenario = "scenarios/host/pp.toml";
    let o = twin(
        &["worker", scenario],
        &[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_PORT", "not-a-port"),
        ],
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("MASTER_PORT: \"not-a-port\" is not a TCP port"),
        "{err}"
    );
    // A world size the scenario does not plan.
    let o = twin(
        &["worker", scenario],
        &[("RANK", "0"), ("WORLD_SIZE", "3"), ("MASTER_PORT", "1")],
    );
    assert!(text(&o.stderr).contains("WORLD_SIZE: is 3 but the scenario plans 2 ranks"));
    // A port in use.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let o = twin(
        &["worker", "scenarios/host/single.toml"],
        &[("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_PORT", &port)],
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("the port is in use"), "{err}");
    // Nobody serves the store: the error says where it looked.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port().to_string();
    drop(free);
    let o = twin(
        &["worker", scenario, "--timeout-s", "0.5"],
        &[("RANK", "1"), ("WORLD_SIZE", "2"), ("MASTER_PORT", &port)],
    );
    let err = text(&o.stderr);
    assert!(
        err.contains(&format!("cannot reach the store at 127.0.0.1:{port}")),
        "{err}"
    );
}

#[test]
fn cuda_backend_without_a_gpu_fails_cleanly() {
    let o = twin(
        &["run", "scenarios/host/single.toml", "--backend", "cuda"],
        &[],
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // A multi-rank scenario is checked against the machine's GPUs before any process starts.
    let o = twin(&["run", "scenarios/host/pp.toml", "--backend", "cuda"], &[]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("no CUDA driver found") || err.contains("plans 2 ranks but this machine has"),
        "{err}"
    );
}

/// A one-GPU CUDA run that cannot fit is refused before any device is touched, naming the
/// numbers; one that fits goes on to the device (here: no driver, or a real run elsewhere).
#[test]
fn cuda_run_that_cannot_fit_is_refused_before_it_starts() {
    let run = |layers: &str| {
        twin(
            &[
                "run",
                "scenarios/gpu/llama3-8b-1gpu.toml",
                "--backend",
                "cuda",
                "--set",
                "cluster.gpu=h200-141gb",
                "--set",
                &format!("model.layers={layers}"),
            ],
            &[],
        )
    };
    let o = run("30");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("error: the CUDA run would need 140.92 GiB"),
        "{err}"
    );
    assert!(err.contains("h200-141gb has 139.80 GiB usable"), "{err}");
    assert!(err.contains("--set model.layers=N"), "{err}");
    let found = twin_runtime::backend::cuda::discover::Discovery::run(
        &twin_runtime::backend::cuda::discover::SearchEnv::from_process(),
    );
    if found
        .path(twin_runtime::backend::cuda::discover::CudaLib::Driver)
        .is_none()
    {
        let o = run("29");
        let err = text(&o.stderr);
        assert!(err.contains("no CUDA driver found"), "{err}");
    }
}

/// A CUDA worker started by hand (or by srun) on a machine without a driver bootstraps, says
/// what is missing once, and exits 1 instead of waiting on NCCL.
#[test]
fn cuda_worker_without_a_driver_reports_once_and_exits() {
    let driver = twin_runtime::backend::cuda::discover::Discovery::run(
        &twin_runtime::backend::cuda::discover::SearchEnv::from_process(),
    )
    .path(twin_runtime::backend::cuda::discover::CudaLib::Driver)
    .is_some();
    if driver {
        eprintln!("note: a CUDA driver is present; the no-driver path is not exercised here");
        return;
    }
    let port = twin_runtime::launch::launcher::free_port("127.0.0.1")
        .unwrap()
        .to_string();
    let o = twin(
        &[
            "worker",
            "scenarios/host/single.toml",
            "--backend",
            "cuda",
            "--timeout-s",
            "5",
        ],
        &[("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_PORT", &port)],
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.starts_with("error: no CUDA driver found"), "{err}");
    assert_eq!(err.matches("no CUDA driver found").count(), 1, "{err}");
}

#[test]
fn scale_factors_are_applied_and_reported() {
    let o = twin(
        &[
            "run",
            "scenarios/host/single.toml",
            "--backend",
            "host",
            "--scale",
            "hidden=0.5",
            "--steps",
            "1",
        ],
        &[],
    );
    assert!(o.status.success(), "stderr: {}", text(&o.stderr));
    assert!(text(&o.stdout).contains("scaled          hidden x0.5: 128 -> 64"));
    let o = twin(
        &["run", "scenarios/host/single.toml", "--scale", "width=2"],
        &[],
    );
    assert!(text(&o.stderr).contains("expected KEY=FACTOR"));
}

#[test]
fn killing_the_launcher_takes_its_workers_with_it() {
    let scenario = "scenarios/host/pp.toml";
    let op = op_index(scenario, 1, |o| matches!(o.kind, OpKind::Compute(_)));
    let marker = format!("name=\"orphan-{}\"", std::process::id());
    let mut launcher = Command::new(env!("CARGO_BIN_EXE_twin"))
        .args([
            "run",
            scenario,
            "--backend",
            "host",
            "--timeout-s",
            "120",
            "--set",
            &marker,
        ])
        .env("TWIN_FAULT", format!("hang:1:{op}"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let wait_until = |done: &dyn Fn(usize) -> bool| {
        for _ in 0..200 {
            if done(processes_with(&marker).len()) {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        false
    };
    // Both workers are up (the launcher's own command line holds the marker too).
    assert!(wait_until(&|n| n >= 3), "workers never started");
    launcher.kill().unwrap();
    launcher.wait().unwrap();
    assert!(
        wait_until(&|n| n == 0),
        "left behind: {:?}",
        processes_with(&marker)
    );
}

#[test]
fn workers_started_by_hand_or_by_slurm_variables_run_together() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port().to_string();
    drop(free);
    let spawn = |env: &[(&str, &str)]| {
        Command::new(env!("CARGO_BIN_EXE_twin"))
            .args([
                "worker",
                "scenarios/host/pp.toml",
                "--format",
                "json",
                "--steps",
                "1",
            ])
            .envs(env.iter().copied())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", &port)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    // Rank 1 first (it waits for rank 0's store), with Slurm's names; rank 0 with torchrun's.
    let one = spawn(&[
        ("SLURM_PROCID", "1"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_LOCALID", "1"),
    ]);
    let zero = spawn(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0")]);
    let zero = zero.wait_with_output().unwrap();
    let one = one.wait_with_output().unwrap();
    assert!(zero.status.success(), "{}", text(&zero.stderr));
    assert!(one.status.success(), "{}", text(&one.stderr));
    let v: Value = serde_json::from_slice(&zero.stdout).unwrap();
    assert_eq!(v["world"], 2);
    assert!(v["step_time_s"].as_f64().unwrap() > 0.0);
    assert!(one.stdout.is_empty());
}

#[test]
fn the_transport_variable_is_checked_before_work_and_unix_sockets_carry_a_run() {
    // A value outside the two allowed ones is bad input, named with them, before any rank starts.
    let o = twin(
        &["run", "scenarios/host/pp.toml", "--backend", "host"],
        &[("TWIN_TRANSPORT", "shm")],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let e = text(&o.stderr);
    assert!(
        e.contains("TWIN_TRANSPORT") && e.contains("tcp") && e.contains("unix"),
        "{e}"
    );
    // Over Unix sockets the same schedule runs and its transfers check out.
    let o = twin(
        &[
            "run",
            "scenarios/host/tp-pp.toml",
            "--backend",
            "host",
            "--steps",
            "2",
        ],
        &[("TWIN_TRANSPORT", "unix")],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
}
