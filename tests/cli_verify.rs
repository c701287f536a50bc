//! End-to-end tests of `twin verify` on a small host scenario: the JSON fields the issue fixes,
//! the trace directory, and the exit code when a threshold is exceeded. Each run launches real
//! worker processes and finishes in about a second in a debug build.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use serde_json::Value;
use std::path::PathBuf;

mod common;
use common::{text, twin};

const PROFILE: &str = "scenarios/profiles/host-example.toml";

fn tmp(name: &str) -> PathBuf {
    common::scratch_dir("verify").join(name)
}

#[test]
fn json_has_the_stable_fields_and_the_trace_dir_holds_both_traces() {
    let dir = tmp("traces");
    let o = twin(&[
        "verify",
        "step",
        "scenarios/host/pp.toml",
        "--backend",
        "host",
        "--profile",
        PROFILE,
        "--steps",
        "2",
        "--warmup",
        "1",
        "--format",
        "json",
        "--trace-dir",
        dir.to_str().unwrap(),
        // A bubble error can never exceed 100 points: this threshold holds.
        "--max-bubble-error-points",
        "100",
    ]);
    assert!(o.status.success(), "stderr: {}", text(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    for side in ["predicted", "measured"] {
        for key in [
            "step_time_s",
            "bubble_fraction",
            "exposed_comm_fraction",
            "peak_memory_bytes",
            "ranks",
        ] {
            assert!(v[side].get(key).is_some(), "{side}.{key} missing");
        }
    }
    assert_eq!(v["measured"]["backend"], "host");
    // Signed fractions and points, as defined: (measured - predicted) / measured.
    let pred = v["predicted"]["step_time_s"].as_f64().unwrap();
    let meas = v["measured_step_time_median_s"].as_f64().unwrap();
    let err = v["step_time_error"].as_f64().unwrap();
    assert!((err - (meas - pred) / meas).abs() < 1e-12, "{err}");
    let bubble = v["bubble_fraction_error_points"].as_f64().unwrap();
    let want = (v["measured"]["bubble_fraction"].as_f64().unwrap()
        - v["predicted"]["bubble_fraction"].as_f64().unwrap())
        * 100.0;
    assert!((bubble - want).abs() < 1e-9);
    // Both sides' MFU divide the same model FLOPs by the profile's peak, so they differ only by
    // their step times (the shown measured step is one of the run's).
    let mfu = |side: &str| v[side]["mfu"].as_f64().unwrap();
    let step = |side: &str| v[side]["step_time_s"].as_f64().unwrap();
    let (pm, mm) = (
        mfu("predicted") * step("predicted"),
        mfu("measured") * step("measured"),
    );
    assert!((pm / mm - 1.0).abs() < 1e-6, "{pm} {mm}");
    assert!(mfu("predicted") < 1.0 && mfu("measured") < 1.0);
    assert!(v["peak_memory_error"].as_f64().is_some());
    assert_eq!(v["peak_memory"].as_array().unwrap().len(), 2);
    // A host profile: how the cores spent the step between ops, both ways. `pp.toml`'s two
    // ranks have a core each, and a rank is busy for no longer than the step.
    for side in ["predicted", "measured"] {
        let a = &v["core_activity"][side];
        assert_eq!(a["cores"], 2, "{side}: {a}");
        let busy = a["busy_s"].as_f64().unwrap();
        let idle = a["idle_between_ops_s"].as_f64().unwrap();
        let step = v[side]["step_time_s"].as_f64().unwrap();
        assert!(
            busy > 0.0 && idle >= 0.0 && busy + idle <= step * 1.000_001,
            "{side}: {a}"
        );
    }
    // `pp.toml` has no collective, so no call meets another.
    for side in ["predicted", "measured"] {
        let m = &v["collective_meetings"][side];
        assert_eq!(
            (&m["calls"], &m["meeting_calls"]),
            (&0.into(), &0.into()),
            "{side}: {m}"
        );
    }
    // Two measured steps after one warm-up; the median lies within their spread.
    assert_eq!(v["measured_step_times_s"].as_array().unwrap().len(), 2);
    let spread = v["measured_step_time_spread_s"].as_array().unwrap();
    let (lo, hi) = (spread[0].as_f64().unwrap(), spread[1].as_f64().unwrap());
    assert!(lo <= meas && meas <= hi);
    // The op table: GEMM compute and p2p groups, matched op by op.
    let groups = v["op_groups"].as_array().unwrap();
    assert!(groups.iter().any(|g| g["kind"] == "gemm"));
    assert!(groups.iter().any(|g| g["kind"] == "p2p"));
    assert_eq!(v["unmatched_ops"], 0);
    assert!(v["violations"].as_array().unwrap().is_empty());
    // The machine check before and after the runs: the scenario's GEMMs, predicted and
    // measured, with the errors' sign convention.
    // A check's predicted and measured times, and its error's sign convention.
    let timed = |c: &Value| {
        let (p, m) = (
            c["predicted_s"].as_f64().unwrap(),
            c["measured_s"].as_f64().unwrap(),
        );
        assert!(p > 0.0 && m > 0.0, "{c}");
        assert!(
            (c["error"].as_f64().unwrap() - (m - p) / m).abs() < 1e-12,
            "{c}"
        );
    };
    for when in ["before", "after"] {
        let c = &v["machine_check"][when];
        assert!(c["shapes"].as_u64().unwrap() >= 1, "{c}");
        timed(c);
    }
    // The bundled profile prices the optimizer by its state's cache residency, so the check
    // also timed the scenario's largest state update at the model's distance.
    for when in ["optimizer_before", "optimizer_after"] {
        let c = &v["machine_check"][when];
        assert!(c["state_bytes"].as_u64().unwrap() > 0, "{c}");
        assert!(c["other_bytes"].as_u64().is_some(), "{c}");
        timed(c);
    }
    // One check before each run (one run here), and the error at the profile's speed: the
    // measured median scaled by that check's predicted / measured GEMM time.
    let checks = v["machine_check"]["runs"].as_array().unwrap();
    assert_eq!(checks.len(), 1);
    assert_eq!(checks[0], v["machine_check"]["before"]);
    let c = &checks[0];
    let f = c["predicted_s"].as_f64().unwrap() / c["measured_s"].as_f64().unwrap();
    let at = v["machine_check"]["step_time_error_at_profile_speed"]
        .as_f64()
        .unwrap();
    let scaled = meas * f;
    assert!((at - (scaled - pred) / scaled).abs() < 1e-9, "{at}");
    // Other work on the machine during the run, as fractions of its cores.
    let load = &v["machine_check"]["load"];
    assert_eq!(load.as_array().unwrap().len(), 1);
    if !load[0].is_null() {
        for k in ["other_fraction", "steal_fraction"] {
            assert!(
                (0.0..=1.0).contains(&load[0][k].as_f64().unwrap()),
                "{load}"
            );
        }
    }
    // Both sides' critical paths: time in ops plus waits is the span; the prediction's span is
    // its step, and it has no waits but, at most, sends waiting for their receivers.
    for side in ["predicted", "measured"] {
        let c = &v["critical_path"][side];
        let total = |k: &str| -> f64 {
            c[k].as_object()
                .unwrap()
                .values()
                .map(|x| x.as_f64().unwrap())
                .sum()
        };
        let span = c["span_s"].as_f64().unwrap();
        assert!(
            (total("op_s") + total("wait_s") - span).abs() < 1e-9,
            "{side}: {c}"
        );
        assert!(c["op_s"]["gemm"].as_f64().unwrap() > 0.0, "{side}: {c}");
    }
    let p = &v["critical_path"]["predicted"];
    assert!((p["span_s"].as_f64().unwrap() - pred).abs() < 1e-6);
    // Both traces in the on-disk format of `twin simulate --trace`, and the JSON itself.
    for f in ["predicted.trace.json", "measured.trace.json"] {
        let t: Value = serde_json::from_str(&std::fs::read_to_string(dir.join(f)).unwrap())
            .unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(!t["traceEvents"].as_array().unwrap().is_empty(), "{f}");
    }
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("verify.json")).unwrap()).unwrap();
    assert_eq!(saved, v);
}

/// `twin verify step SCENARIO` with the bundled profile for one measured step, no warm-up, and
/// `extra` arguments.
fn verify_one_step(scenario: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "verify",
        "step",
        scenario,
        "--profile",
        PROFILE,
        "--steps",
        "1",
        "--warmup",
        "0",
    ];
    args.extend_from_slice(extra);
    twin(&args)
}

#[test]
fn an_exceeded_threshold_exits_1_naming_it() {
    let o = verify_one_step(
        "scenarios/host/single.toml",
        &["--max-step-time-error", "0"],
    );
    assert_eq!(o.status.code(), Some(1), "stderr: {}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.contains("--max-step-time-error"), "{err}");
    assert!(!err.contains("--max-bubble-error-points"), "{err}");
    // The comparison is still printed.
    assert!(text(&o.stdout).contains("step time"), "{}", text(&o.stdout));
    // One rank on the profile's two cores: nothing is shared, and nothing said about it.
    assert!(
        !text(&o.stdout).contains("ranks share cores"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn ranks_that_share_cores_are_named_with_what_the_model_leaves_out() {
    // tp-pp.toml has four ranks on one node; the profile's host has two cores.
    let o = verify_one_step("scenarios/host/tp-pp.toml", &[]);
    assert!(o.status.success(), "stderr: {}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.contains("ranks share cores: 4 ranks per node on 2 cores"),
        "{out}"
    );
    assert!(out.contains("run-queue delays"), "{out}");
    assert!(
        out.contains("cores idle between ops, per core and step:\n  measured  "),
        "{out}"
    );
    // Its two tensor-parallel groups each have a member on both cores: every TP call is
    // counted on both sides, met or not.
    assert!(
        out.contains("collectives meeting on a core, per step:\n  measured  "),
        "{out}"
    );
    assert!(
        out.contains(" of 136 calls met another group's on a core"),
        "{out}"
    );
}

#[test]
fn bad_arguments_are_usage_errors() {
    let o = twin(&[
        "verify",
        "step",
        "scenarios/host/single.toml",
        "--profile",
        PROFILE,
        "--max-step-time-error",
        "-1",
    ]);
    assert_eq!(o.status.code(), Some(2), "stderr: {}", text(&o.stderr));
    let o = twin(&[
        "verify",
        "step",
        "scenarios/host/single.toml",
        "--profile",
        "scenarios/profiles/a100-dgx.toml",
    ]);
    // A profile for another GPU than the scenario's is bad input too.
    assert_eq!(o.status.code(), Some(2), "stderr: {}", text(&o.stderr));
    assert!(text(&o.stderr).contains("cpu-core"));
}

#[test]
fn simulate_with_a_fitted_profile_reports_a_deterministic_interval() {
    let args = [
        "simulate",
        "scenarios/host/pp.toml",
        "--profile",
        PROFILE,
        "--format",
        "json",
        "--reproducible",
    ];
    let a = twin(&args);
    assert!(a.status.success(), "stderr: {}", text(&a.stderr));
    let b = twin(&args);
    assert_eq!(a.stdout, b.stdout, "same seed, same interval");
    let v: Value = serde_json::from_slice(&a.stdout).unwrap();
    let ci = v["step_time_ci95_s"].as_array().unwrap();
    let (lo, hi) = (ci[0].as_f64().unwrap(), ci[1].as_f64().unwrap());
    let point = v["step_time_s"].as_f64().unwrap();
    assert!(lo < hi && lo <= point && point <= hi, "{lo} {point} {hi}");
    // Another seed draws other samples.
    let mut other = args.to_vec();
    other.extend(["--set", "run.seed=99"]);
    let c: Value = serde_json::from_slice(&twin(&other).stdout).unwrap();
    assert_ne!(c["step_time_ci95_s"], v["step_time_ci95_s"]);
    // Text: the interval on the step time line.
    let t = twin(&["simulate", "scenarios/host/pp.toml", "--profile", PROFILE]);
    let out = text(&t.stdout);
    let line = out.lines().find(|l| l.starts_with("step time")).unwrap();
    assert!(
        line.contains("(95% CI ") && line.ends_with(" ms)"),
        "{line}"
    );
    // A profile without intervals: no interval field.
    let plain = twin(&[
        "simulate",
        "scenarios/512xA100.toml",
        "--profile",
        "scenarios/profiles/a100-dgx.toml",
        "--format",
        "json",
    ]);
    let p: Value = serde_json::from_slice(&plain.stdout).unwrap();
    assert!(p.get("step_time_ci95_s").is_none());
}

/// Issue 6's timing acceptance on the bundled host scenarios and the held-out one
/// (`pp-wide.toml`, shapes not among those the profile was fitted to): step time within 5%,
/// bubble within 2 points, peak memory within 2%, over five runs. Timing depends on the machine
/// being idle, so it is not part of the default suite: run it with
/// `cargo test --release --test cli_verify -- --ignored` on a quiet machine. As the issue
/// states it, it first runs `twin calibrate host --scenario scenarios/host/tp-pp.toml`
/// on this machine (about 20 s; the bundled profile was measured on another one), or takes the
/// profile named by `TWIN_ACCEPTANCE_PROFILE`. It fails on a machine shared with other work
/// (docs/validation.md, "verify", has the numbers).
#[test]
#[ignore = "timing acceptance: needs an idle machine (docs/validation.md, verify)"]
fn host_scenarios_and_the_held_out_one_are_predicted_within_the_bounds() {
    let profile = match std::env::var("TWIN_ACCEPTANCE_PROFILE") {
        Ok(p) => PathBuf::from(p),
        Err(_) => {
            let p = tmp("acceptance-profile.toml");
            let o = twin(&[
                "calibrate",
                "host",
                "--scenario",
                "scenarios/host/tp-pp.toml",
                "--no-progress",
                "-o",
                p.to_str().expect("a UTF-8 temporary path"),
            ]);
            assert!(
                o.status.success(),
                "calibration failed: {}",
                text(&o.stderr)
            );
            p
        }
    };
    let profile = profile.to_str().expect("a UTF-8 profile path");
    // Every scenario is verified before the test fails, so one run reports all four.
    let mut failures = Vec::new();
    for scenario in [
        "scenarios/host/pp.toml",
        "scenarios/host/tp-pp.toml",
        "scenarios/host/dp-pp-zero.toml",
        "scenarios/host/pp-wide.toml",
    ] {
        let o = twin(&[
            "verify",
            "step",
            scenario,
            "--profile",
            profile,
            "--steps",
            "10",
            "--warmup",
            "5",
            "--repeat",
            "5",
            "--max-step-time-error",
            "0.05",
            "--max-bubble-error-points",
            "2",
            "--max-peak-memory-error",
            "0.02",
        ]);
        if !o.status.success() {
            failures.push(format!(
                "{scenario}: {}\n{}",
                text(&o.stderr),
                text(&o.stdout)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "with profile {profile}:\n{}",
        failures.join("\n")
    );
}

/// `verify step --measured` on the bundled H200 trace and snapshot: nothing runs, the
/// prediction and the trace are compared by class, each side's classes sum to its step, and
/// the peak allocated memory is the snapshot's (torch's `max_memory_allocated`).
#[test]
fn verify_measured_compares_a_pytorch_trace_by_class() {
    let dir = "measured/tests/data/h200-hf-llama";
    let trace = format!("{dir}/hf-llama-L8-mb1-gb4-s2048-h200.trace.json.gz");
    let snapshot = format!("{dir}/hf-llama-L8-mb1-gb4-s2048-h200.memsnap.pickle.gz");
    let o = twin(&[
        "verify",
        "step",
        "scenarios/gpu/hf-llama-8layers-h200.toml",
        "--profile",
        "scenarios/profiles/h200-dgx.toml",
        "--measured",
        &trace,
        "--memory-snapshot",
        &snapshot,
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let classes = v["classes"].as_array().unwrap();
    for side in ["predicted_s", "measured_s"] {
        let sum: f64 = classes.iter().map(|c| c[side].as_f64().unwrap()).sum();
        let step = v[format!("step_time_{side}")].as_f64().unwrap();
        assert!((sum - step).abs() <= 1e-6 * step, "{side}: {sum} vs {step}");
    }
    // The profiled step: 358 ms by the profiler's window (the fixture's meta.json), of which
    // the GPU's span is a little shorter.
    let measured = v["step_time_measured_s"].as_f64().unwrap();
    assert!((0.34..0.358).contains(&measured), "{measured}");
    assert_eq!(v["peak_allocated_measured_bytes"], 57_195_896_832u64);
    // The peak by kind: the fp32 parameters (weights) and Adam's moments are the model's
    // state on both sides, within 1%.
    let at_peak = v["at_peak"].as_array().unwrap();
    let kinds: Vec<&str> = at_peak.iter().map(|r| r[0].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["weights", "grads", "optimizer", "activations", "other"]
    );
    for row in &at_peak[..3] {
        let (p, m) = (row[1].as_f64().unwrap(), row[2].as_f64().unwrap());
        assert!((p - m).abs() <= 0.01 * m, "{row}");
    }
    // The memory timeline: 20 bins of each step, each the most either side held in it, so
    // the bins' maxima are the two peaks; the largest divergence names a bin.
    let t = &v["memory_timeline"];
    let bins = t["bins"].as_array().unwrap();
    assert_eq!(bins.len(), 20);
    let most = |k: &str| bins.iter().map(|b| b[k].as_u64().unwrap()).max().unwrap();
    assert_eq!(most("measured_bytes"), 57_195_896_832u64);
    assert_eq!(
        most("predicted_bytes"),
        v["peak_allocated_predicted_bytes"].as_u64().unwrap()
    );
    assert!(t["largest"].as_u64().unwrap() < 20);
    assert!((0.0..1.0).contains(&t["mean_abs_error"].as_f64().unwrap()));
    let names: Vec<&str> = classes
        .iter()
        .map(|c| c["class"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "gemm",
            "attention",
            "elementwise",
            "optimizer",
            "communication",
            "idle"
        ]
    );
    // A threshold the run misses fails the command.
    let o = twin(&[
        "verify",
        "step",
        "scenarios/gpu/hf-llama-8layers-h200.toml",
        "--profile",
        "scenarios/profiles/h200-dgx.toml",
        "--measured",
        &trace,
        "--max-step-time-error",
        "0.001",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("verify failed"));
    // Not a trace: a clear error naming the file, no panic.
    let o = twin(&[
        "verify",
        "step",
        "scenarios/gpu/hf-llama-8layers-h200.toml",
        "--profile",
        "scenarios/profiles/h200-dgx.toml",
        "--measured",
        "scenarios/small.toml",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("small.toml") && !err.contains("panicked"),
        "{err}"
    );
}

/// A two-rank PyTorch trace with NCCL kernels: the rank asked for is compared, and its
/// collectives side by side with the predicted ones by kind and size range (an all-gather by
/// its output, as twin counts its buffer).
#[test]
fn verify_measured_compares_collectives_of_a_multi_rank_trace() {
    let dir = std::env::temp_dir().join(format!("twin-verify-nccl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = dir.join("dp2.toml");
    std::fs::write(
        &scenario,
        "name = \"dp2\"\n[model]\npreset = \"llama3-8b\"\nlayers = 2\nseq_len = 1024\n\
         [cluster]\ngpu = \"h200-141gb\"\ngpus = 2\nnode = \"dgx-h200\"\n\
         [parallel]\ndp = 2\n[training]\nglobal_batch = 2\n",
    )
    .unwrap();
    let kernel = |name: &str, stream: u32, ts: u32, dur: u32, args: &str| {
        format!(
            r#"{{"ph": "X", "cat": "kernel", "name": "{name}", "pid": 0, "tid": {stream}, "ts": {ts}, "dur": {dur}, "args": {{"device": 0, "stream": {stream}{args}}}}}"#
        )
    };
    // Rank 1 waits 2 ms between its GEMM and its all-reduce: idle 2 of its 11 ms.
    for rank in 0..2u32 {
        let wait = 2000 * rank;
        let events = [
            kernel(
                "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
                7,
                0,
                5000,
                "",
            ),
            kernel(
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                20,
                5000 + wait,
                3000,
                r#", "Collective name": "allreduce", "In msg nelems": 40000000, "Out msg nelems": 40000000, "Group size": 2, "dtype": "Float""#,
            ),
            kernel(
                "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                20,
                8000 + wait,
                1000,
                r#", "Collective name": "allgather", "In msg nelems": 1024, "Out msg nelems": 2048, "Group size": 2, "dtype": "BFloat16""#,
            ),
        ];
        std::fs::write(
            dir.join(format!("r{rank}.trace.json")),
            format!(
                r#"{{"distributedInfo": {{"rank": {rank}, "world_size": 2}}, "traceEvents": [{}]}}"#,
                events.join(",")
            ),
        )
        .unwrap();
    }
    let o = twin(&[
        "verify",
        "step",
        scenario.to_str().unwrap(),
        "--profile",
        "scenarios/profiles/h200-dgx.toml",
        "--measured",
        dir.to_str().unwrap(),
        "--rank",
        "1",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["collectives"].as_array().unwrap();
    fn row<'a>(
        rows: &'a [serde_json::Value],
        kind: &'a str,
    ) -> impl Iterator<Item = &'a serde_json::Value> {
        rows.iter().filter(move |r| r["kind"] == kind)
    }
    let rows = rows.as_slice();
    // The measured all-reduce: 160 MB of fp32, one call; the prediction reduces the
    // gradients with all-reduces too.
    let measured: Vec<_> = row(rows, "all-reduce")
        .filter(|r| r["measured_calls"].as_u64() == Some(1))
        .collect();
    assert_eq!(measured.len(), 1, "{rows:?}");
    assert_eq!(measured[0]["size"], "64.0MiB-256.0MiB");
    assert!((measured[0]["measured_s"].as_f64().unwrap() - 3e-3).abs() < 1e-12);
    assert!(row(rows, "all-reduce").any(|r| r["predicted_calls"].as_u64().unwrap() > 0));
    // The all-gather by its output: 2048 bf16 elements.
    let ag: Vec<_> = row(rows, "all-gather").collect();
    assert_eq!(ag.len(), 1, "{rows:?}");
    assert_eq!(ag[0]["size"], "4.0KiB-16.0KiB");
    assert_eq!(ag[0]["predicted_calls"], 0);
    // Idle over the step, averaged over both ranks: (0 + 2/11) / 2.
    let bubble = v["bubble_fraction"].as_array().unwrap();
    assert!(
        (bubble[1].as_f64().unwrap() - 1.0 / 11.0).abs() < 1e-9,
        "{bubble:?}"
    );
    assert!((0.0..1.0).contains(&bubble[0].as_f64().unwrap()));
    let text = twin(&[
        "verify",
        "step",
        scenario.to_str().unwrap(),
        "--profile",
        "scenarios/profiles/h200-dgx.toml",
        "--measured",
        dir.to_str().unwrap(),
    ]);
    assert!(text.status.success());
    assert!(String::from_utf8_lossy(&text.stdout).contains("all-gather"));
    // A rank the traces do not hold is an error that says so.
    let o = twin(&[
        "verify",
        "step",
        scenario.to_str().unwrap(),
        "--profile",
        "scenarios/profiles/h200-dgx.toml",
        "--measured",
        dir.to_str().unwrap(),
        "--rank",
        "5",
    ]);
    assert!(!o.status.success());
    let _ = std::fs::remove_dir_all(&dir);
}
