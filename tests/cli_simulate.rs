//! End-to-end tests of `twin simulate` and `twin bench`: they run the real binary the way a
//! user or a CI job does and check what it prints, writes and exits with.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use std::path::PathBuf;
use std::process::Output;

mod common;
use common::{stdout, twin};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn tmp(name: &str) -> PathBuf {
    common::scratch_dir("simulate").join(name)
}

#[test]
fn simulate_main_scenario_prints_a_readable_report() {
    let o = twin(&["simulate", "scenarios/512xA100.toml"]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    for needle in [
        "step time",
        "tokens/s",
        "MFU",
        "bubble",
        "exposed",
        "memory",
    ] {
        assert!(
            out.to_lowercase().contains(&needle.to_lowercase()),
            "missing {needle:?} in:\n{out}"
        );
    }
}

#[test]
fn simulate_json_has_the_stable_fields() {
    let o = twin(&["simulate", "scenarios/512xA100.toml", "--format", "json"]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON object");
    for key in [
        "step_time_s",
        "tokens_per_s",
        "tokens_per_s_per_gpu",
        "model_tflops_per_gpu",
        "hardware_tflops_per_gpu",
        "mfu",
        "hfu",
        "bubble_fraction",
        "exposed_comm_fraction",
        "peak_memory_bytes",
        "fits",
        "events",
        "sim_wall_s",
        "ranks",
    ] {
        assert!(v.get(key).is_some(), "missing top-level field {key}");
    }
    let step = v["step_time_s"].as_f64().unwrap();
    assert!(step > 0.0 && step.is_finite());
    let mfu = v["mfu"].as_f64().unwrap();
    assert!(mfu > 0.0 && mfu < 1.0, "mfu {mfu}");
    let ranks = v["ranks"].as_array().unwrap();
    assert!(!ranks.is_empty());
    for r in ranks {
        assert!(r.get("rank").is_some() || r.get("ranks").is_some());
        assert!(r.get("stage").is_some());
        assert!(r.get("peak_memory_bytes").is_some());
        let b = &r["memory_breakdown"];
        for cat in [
            "weights",
            "grads",
            "optimizer",
            "activations",
            "buffers",
            "reserved",
        ] {
            assert!(
                b.get(cat).and_then(|x| x.as_u64()).is_some(),
                "breakdown lacks {cat}"
            );
        }
    }
    // tokens/s follows from the step time and the batch: 512 sequences of 2048 tokens.
    let tps = v["tokens_per_s"].as_f64().unwrap();
    assert!((tps * step - 512.0 * 2048.0).abs() / (512.0 * 2048.0) < 1e-6);
}

#[test]
fn same_scenario_and_seed_give_byte_identical_json_and_trace() {
    let (t1, t2) = (tmp("a.trace.json"), tmp("b.trace.json"));
    let run = |t: &PathBuf| {
        let o = twin(&[
            "simulate",
            "scenarios/small.toml",
            "--format",
            "json",
            "--reproducible",
            "--trace",
            t.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "stderr: {}", stderr(&o));
        stdout(&o)
    };
    let (a, b) = (run(&t1), run(&t2));
    assert_eq!(a, b, "JSON differs between two runs");
    let (ta, tb) = (std::fs::read(&t1).unwrap(), std::fs::read(&t2).unwrap());
    assert!(!ta.is_empty());
    assert_eq!(ta, tb, "trace differs between two runs");
}

#[test]
fn trace_is_chrome_json_with_ranks_streams_and_memory_counter() {
    let t = tmp("small.trace.json");
    let o = twin(&[
        "simulate",
        "scenarios/small.toml",
        "--trace",
        t.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&t).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().expect("traceEvents array");
    let has = |ph: &str| events.iter().any(|e| e["ph"] == ph);
    assert!(has("X"), "no complete events");
    assert!(has("C"), "no counter (memory) events");
    assert!(events
        .iter()
        .any(|e| e["ph"] == "M" && e["name"] == "process_name"));
    assert!(events
        .iter()
        .any(|e| e["ph"] == "M" && e["name"] == "thread_name"));
}

#[test]
fn set_override_changes_the_prediction_and_is_validated() {
    let base = twin(&["simulate", "scenarios/512xA100.toml", "--format", "json"]);
    let more_pp = twin(&[
        "simulate",
        "scenarios/512xA100.toml",
        "--format",
        "json",
        "--set",
        "parallel.pp=16",
        "--set",
        "parallel.dp=4",
    ]);
    assert!(more_pp.status.success(), "stderr: {}", stderr(&more_pp));
    let a: serde_json::Value = serde_json::from_str(&stdout(&base)).unwrap();
    let b: serde_json::Value = serde_json::from_str(&stdout(&more_pp)).unwrap();
    assert_ne!(a["step_time_s"], b["step_time_s"]);
    assert_ne!(a["peak_memory_bytes"], b["peak_memory_bytes"]);

    let bad = twin(&[
        "simulate",
        "scenarios/512xA100.toml",
        "--set",
        "parallel.pp=3",
    ]);
    assert_eq!(bad.status.code(), Some(2), "bad input exits 2");
    let err = stderr(&bad);
    assert!(err.contains("parallel.pp"), "error names the key: {err}");
}

#[test]
fn invalid_scenario_names_file_line_key_and_allowed_values() {
    let p = tmp("bad.toml");
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/small.toml"))
            .unwrap();
    // Replace the schedule with a typo.
    let re = text
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("schedule") {
                "schedule = \"1fb1\"".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(re.contains("1fb1"), "small.toml sets parallel.schedule");
    std::fs::write(&p, re).unwrap();
    let o = twin(&["simulate", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("bad.toml:"), "names the file: {err}");
    assert!(err.contains("parallel.schedule"), "names the key: {err}");
    assert!(err.contains("1fb1"), "names the value: {err}");
    assert!(
        err.contains("interleaved-1f1b"),
        "lists what is allowed: {err}"
    );
}

#[test]
fn missing_file_is_a_clear_error_not_a_panic() {
    let o = twin(&["simulate", "does/not/exist.toml"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("does/not/exist.toml"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bench_reports_events_per_second() {
    let o = twin(&[
        "bench",
        "scenarios/small.toml",
        "--repeat",
        "1",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["schema"], "twin.bench/1");
    let row = &v["rows"][0];
    assert!(row["events"].as_u64().unwrap() > 0);
    assert!(row["events_per_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn bench_collapse_measures_the_collapsed_mode() {
    let run = |extra: &[&str]| {
        let mut args = vec![
            "bench",
            "scenarios/small.toml",
            "--repeat",
            "1",
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        let o = twin(&args);
        assert!(o.status.success(), "stderr: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        (
            v["rows"][0]["collapsed"].as_bool().unwrap(),
            v["rows"][0]["events"].as_u64().unwrap(),
        )
    };
    let (full_collapsed, full_events) = run(&[]);
    let (collapsed, events) = run(&["--collapse"]);
    assert!(!full_collapsed && collapsed);
    assert!(events < full_events, "{events} vs {full_events}");
}

/// `twin bench` prices its runs as `twin simulate` does: the bundled profile of a machine
/// one describes, twin's defaults elsewhere or with `--profile defaults`, and each row says
/// which.
#[test]
fn bench_prices_as_simulate_does() {
    let small = std::fs::read_to_string("scenarios/small.toml").unwrap();
    let start = small.find("[cluster]").unwrap();
    let end = small.find("[parallel]").unwrap();
    let dgx = tmp("bench-dgx.toml");
    std::fs::write(
        &dgx,
        format!(
            "{}[cluster]\ngpus = 8\ngpu = \"h100-sxm-80gb\"\nnode = \"dgx-h100\"\n\n{}",
            &small[..start],
            &small[end..]
        ),
    )
    .unwrap();
    let dgx = dgx.to_str().unwrap();
    let priced = |extra: &[&str]| {
        let mut args = vec!["bench", "--repeat", "1", "--format", "json"];
        args.extend_from_slice(extra);
        let o = twin(&args);
        assert!(o.status.success(), "stderr: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["priced_with"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        priced(&["scenarios/small.toml", dgx]),
        ["defaults", "scenarios/profiles/h100-dgx.toml"]
    );
    assert_eq!(priced(&[dgx, "--profile", "defaults"]), ["defaults"]);
}

/// A GPU preset without a node runs on its usual node, and both reports say so.
#[test]
fn a_gpu_without_a_node_gets_its_usual_node_and_a_note() {
    let path = tmp("no-node.toml");
    std::fs::write(
        &path,
        "[model]\npreset = \"llama3-8b\"\nlayers = 2\nseq_len = 1024\n\
         [cluster]\ngpu = \"h100-sxm-80gb\"\ngpus = 8\n\
         [parallel]\ntp = 8\n[training]\nglobal_batch = 4\n",
    )
    .unwrap();
    let file = path.to_str().unwrap();
    let o = twin(&["simulate", file]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let note = "cluster.node not given: h100-sxm-80gb GPUs come in dgx-h100 nodes (8 per node)";
    assert!(
        stdout(&o).contains(&format!("note            {note}")),
        "{}",
        stdout(&o)
    );
    let o = twin(&["simulate", file, "--format", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        json["notes"][0].as_str().unwrap().starts_with(note),
        "{json}"
    );
    assert_eq!(json["usable_bytes"], 85_017_493_504u64);
}

/// A million micro batches (an 8.8 GB schedule) is refused before
/// anything is built: exit 2, naming the key, the limit and what to change.
#[test]
fn huge_micro_batch_count_is_refused_with_exit_2() {
    let o = twin(&[
        "simulate",
        "scenarios/host/single.toml",
        "--set",
        "training.global_batch=1048576",
    ]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("--set training.global_batch=1048576"), "{e}");
    assert!(e.contains("limit of 4000000 ops"), "{e}");
    assert!(e.contains("training.micro_batch"), "{e}");
}

/// `--trace` alone holds one rank per pipeline stage: on 16,384 GPUs (16 stages) a small
/// file, said so on stderr with the way to every rank; the same trace gzipped when the name
/// ends in .gz. Every rank's trace (1.7 GB estimated) is refused before the simulation,
/// naming the estimate and `--trace-ranks`, and nothing is written.
#[test]
fn traces_hold_representative_ranks_by_default_and_every_rank_is_refused_when_too_large() {
    let (plain, gz) = (tmp("16k.trace.json"), tmp("16k.trace.json.gz"));
    for t in [&plain, &gz] {
        let _ = std::fs::remove_file(t);
        let o = twin(&[
            "simulate",
            "scenarios/16384xH100.toml",
            "--reproducible",
            "--trace",
            t.to_str().unwrap(),
        ]);
        let e = stderr(&o);
        assert!(o.status.success(), "{e}");
        assert!(
            e.contains("one rank per pipeline stage (16 of 16384"),
            "{e}"
        );
        assert!(e.contains("--trace-ranks all"), "{e}");
    }
    let bytes = std::fs::read(&plain).unwrap();
    assert!(bytes.len() < 50 << 20, "{} bytes", bytes.len());
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let pids: std::collections::BTreeSet<u64> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["pid"].as_u64())
        .collect();
    // Llama 3 405B at tp 8, pp 16, dp 128: stage s's first rank is s * 8 * 128.
    assert_eq!(pids, (0..16).map(|s| s * 1024).collect());
    let mut back = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(&gz).unwrap()),
        &mut back,
    )
    .unwrap();
    assert_eq!(back, bytes, "the gzip holds the plain trace");
    let all = tmp("16k-all.trace.json");
    let _ = std::fs::remove_file(&all);
    let o = twin(&[
        "simulate",
        "scenarios/16384xH100.toml",
        "--trace",
        all.to_str().unwrap(),
        "--trace-ranks",
        "all",
    ]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("a trace of 16384 rank(s) would hold"), "{e}");
    assert!(e.contains("about 1778384896 bytes of JSON (1.7GiB)"), "{e}");
    assert!(e.contains("over the limit of 536870912 bytes"), "{e}");
    assert!(e.contains("--trace-ranks 0-63"), "{e}");
    assert!(!all.exists());
    for t in [&plain, &gz] {
        let _ = std::fs::remove_file(t);
    }
}

/// `--trace-ranks` traces the listed ranks (every rank simulated, the same report); a rank
/// outside the layout, or a list without --trace, is bad input.
#[test]
fn trace_ranks_lists_ranks_and_refuses_ranks_outside_the_layout() {
    let t = tmp("small-ranks.trace.json");
    let report = |extra: &[&str]| {
        let mut argv = vec!["simulate", "scenarios/small.toml", "--format", "json"];
        argv.extend_from_slice(&["--reproducible", "--trace", t.to_str().unwrap()]);
        argv.extend_from_slice(extra);
        let o = twin(&argv);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let pids: std::collections::BTreeSet<u64> =
            serde_json::from_slice::<serde_json::Value>(&std::fs::read(&t).unwrap()).unwrap()
                ["traceEvents"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|e| e["pid"].as_u64())
                .collect();
        (v["step_time_s"].clone(), pids)
    };
    // small.toml: tp 2, pp 2, dp 2 (8 GPUs).
    let (step, pids) = report(&["--trace-ranks", "1,5-6"]);
    assert_eq!(pids, [1, 5, 6].into());
    let (all_step, all) = report(&["--trace-ranks", "all"]);
    assert_eq!(all, (0..8).collect());
    assert_eq!(step, all_step);
    let (_, full) = report(&["--full"]);
    assert_eq!(full, all);
    let o = twin(&[
        "simulate",
        "scenarios/small.toml",
        "--trace",
        t.to_str().unwrap(),
        "--trace-ranks",
        "0-8",
    ]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("--trace-ranks names rank 8"), "{e}");
    assert!(e.contains("ranks 0-7"), "{e}");
    let o = twin(&["simulate", "scenarios/small.toml", "--trace-ranks", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--trace"), "{}", stderr(&o));
    let o = twin(&[
        "simulate",
        "scenarios/small.toml",
        "--trace",
        t.to_str().unwrap(),
        "--trace-ranks",
        "3-1",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("backwards"), "{}", stderr(&o));
    let _ = std::fs::remove_file(&t);
}

/// Llama 3.1 405B's 126 layers on pp 8 with vpp 8 need no written partition: the report shows
/// the split twin chose (the embedding and the loss each take a layer's slot).
#[test]
fn simulate_shows_an_automatic_uneven_layer_split() {
    let path = tmp("llama405b-pp8-vpp8.toml");
    std::fs::write(
        &path,
        "name = \"llama405b-pp8-vpp8\"\n\
         [model]\npreset = \"llama3-405b\"\n\
         [cluster]\ngpu = \"h100-sxm-80gb\"\ngpus = 64\n\
         [parallel]\ntp = 8\npp = 8\nvpp = 8\nschedule = \"interleaved-1f1b\"\nsequence_parallel = true\n\
         [training]\nglobal_batch = 16\n",
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let o = twin(&["simulate", p]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("layer split     1, 2 x62, 1 layers per virtual stage: embedding and loss"),
        "{out}"
    );
    let o = twin(&["simulate", p, "--format", "json"]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let split = &v["layer_partition"];
    assert_eq!(split["rule"], "slots");
    assert_eq!(split["automatic"], true);
    let mut want = vec![2u64; 64];
    want[0] = 1;
    want[63] = 1;
    assert_eq!(split["layers_per_virtual_stage"], serde_json::json!(want));
    assert_eq!(
        split["layers_per_stage"],
        serde_json::json!([15, 16, 16, 16, 16, 16, 16, 15])
    );
}

/// `--resolved` writes the scenario as twin resolved it, and tools/torch_reference.py builds
/// its PyTorch job from that file: its dry run reads the model and batch twin resolved (the
/// script itself needs a GPU; its scenario reading does not).
#[test]
fn resolved_scenario_feeds_the_torch_reference_script() {
    let resolved = tmp("resolved-hf-llama.toml");
    let o = twin(&[
        "simulate",
        "scenarios/gpu/hf-llama-8layers-h200.toml",
        "--resolved",
        resolved.to_str().unwrap(),
        "--set",
        "training.global_batch=8",
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let text = std::fs::read_to_string(&resolved).unwrap();
    assert!(
        text.contains("hidden = 4096") && text.contains("global_batch = 8"),
        "{text}"
    );
    let Ok(py) = std::process::Command::new("python3")
        .args([
            "tools/torch_reference.py",
            resolved.to_str().unwrap(),
            "unused",
            "--dry-run",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
    else {
        eprintln!("python3 not found: the script's dry run is not checked");
        return;
    };
    assert!(
        py.status.success(),
        "{}",
        String::from_utf8_lossy(&py.stderr)
    );
    let job: serde_json::Value = serde_json::from_slice(&py.stdout).unwrap();
    assert_eq!(job["layers"], 8);
    assert_eq!(job["kv_heads"], 8);
    assert_eq!(job["head_dim"], 128);
    assert_eq!(job["accum"], 8, "8 sequences of 1, one GPU");
    assert_eq!(job["gated"], true);
}

#[test]
fn simulate_breakdown_splits_each_stage_step_by_class() {
    let o = twin(&[
        "simulate",
        "scenarios/512xA100.toml",
        "--breakdown",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON object");
    let stages = v["time_by_class"].as_array().expect("time_by_class");
    // 512xA100.toml runs 8 pipeline stages; one row each, their representatives in order.
    assert_eq!(stages.len(), 8);
    let step = v["step_time_s"].as_f64().unwrap();
    for (i, c) in stages.iter().enumerate() {
        assert_eq!(c["stage"], i as u64);
        let classes = [
            "gemm_s",
            "attention_s",
            "elementwise_s",
            "optimizer_s",
            "exposed_comm_s",
            "idle_s",
        ];
        let sum: f64 = classes.iter().map(|k| c[*k].as_f64().unwrap()).sum();
        let own = c["step_time_s"].as_f64().unwrap();
        assert!((sum - own).abs() < 1e-6, "stage {i}: {sum} vs {own}");
        assert!((own - step).abs() < 1e-6, "stage {i}: {own} vs {step}");
        assert!(c["gemm_s"].as_f64().unwrap() > 0.0, "stage {i}: {c}");
    }
    // Without the flag the document has no such key.
    let o = twin(&["simulate", "scenarios/512xA100.toml", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON object");
    assert!(v.get("time_by_class").is_none());
    // The text names the classes, one row per stage.
    let o = twin(&["simulate", "scenarios/512xA100.toml", "--breakdown"]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let out = stdout(&o);
    let at = out.find("where the step goes").expect(&out);
    let table: Vec<&str> = out[at..]
        .lines()
        .skip(2)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(table.len(), 8, "{out}");
    for header in [
        "gemm",
        "attention",
        "elementwise",
        "optimizer",
        "exposed comm",
        "idle",
    ] {
        assert!(out[at..].contains(header), "{header} missing:\n{out}");
    }
}
