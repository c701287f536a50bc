//! End-to-end tests of `twin sweep`: --vary products with invalid layouts counted, CSV and
//! JSON output, shards that merge back into the whole sweep, bad input, and the acceptance
//! check that `--search` on the 512-GPU scenario finds a layout at least as fast as the
//! bundled one whose collapsed figures match a full (uncollapsed) simulation.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use std::path::PathBuf;
use std::process::Output;

mod common;
use common::{stdout, twin};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn tmp(name: &str) -> PathBuf {
    common::scratch_dir("sweep").join(name)
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "stderr: {}", stderr(o));
    serde_json::from_str(&stdout(o)).expect("one JSON object")
}

const VARY: [&str; 6] = [
    "--vary",
    "parallel.tp=1,2,4",
    "--vary",
    "parallel.dp=1,2,4",
    "--vary",
    "training.micro_batch=1,2",
];

#[test]
fn vary_counts_invalid_layouts_and_ranks_the_rest() {
    let mut args = vec!["sweep", "scenarios/small.toml"];
    args.extend(VARY);
    args.push("--json");
    let v = json(&twin(&args));
    assert_eq!(v["layouts"], 18);
    let rows = v["rows"].as_array().unwrap();
    // small.toml: 8 GPUs, pp 2, so only tp*dp = 4 is valid: (1,4), (2,2), (4,1).
    assert_eq!(rows.len(), 6);
    assert_eq!(v["invalid"], 12);
    for r in rows {
        assert_eq!(r["tp"].as_u64().unwrap() * r["dp"].as_u64().unwrap(), 4);
    }
    let mut text_args = vec!["sweep", "scenarios/small.toml"];
    text_args.extend(VARY);
    let o = twin(&text_args);
    assert!(o.status.success());
    let out = stdout(&o);
    assert!(out.contains("18 layouts, 12 invalid (skipped)"), "{out}");
    assert!(
        out.lines().any(|l| l.trim_start().starts_with("1 ")),
        "{out}"
    );
    assert!(
        !stderr(&o).contains('['),
        "no progress bar when stderr is not a terminal"
    );
}

#[test]
fn csv_and_json_outputs_hold_every_simulated_layout() {
    let (csv, js) = (tmp("all.csv"), tmp("all.json"));
    for out in [&csv, &js] {
        let mut args = vec!["sweep", "scenarios/small.toml"];
        args.extend(VARY);
        args.extend(["--out", out.to_str().unwrap()]);
        assert!(twin(&args).status.success());
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&js).unwrap()).unwrap();
    let text = std::fs::read_to_string(&csv).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("rank,index,tp,pp,dp"));
    assert_eq!(lines.len() - 1, v["rows"].as_array().unwrap().len());
    // Ranked rows first, numbered from 1, best tokens/s first.
    let col = lines[0]
        .split(',')
        .position(|c| c == "tokens_per_s")
        .unwrap();
    let tps: Vec<f64> = lines[1..]
        .iter()
        .filter(|l| !l.starts_with(','))
        .map(|l| l.split(',').nth(col).unwrap().parse().unwrap())
        .collect();
    assert!(tps.windows(2).all(|w| w[0] >= w[1]), "{tps:?}");
    assert!(lines[1].starts_with("1,"));
}

#[test]
fn shards_merge_into_the_whole_sweep() {
    let mut whole_args = vec!["sweep", "scenarios/small.toml"];
    whole_args.extend(VARY);
    whole_args.push("--json");
    let whole = json(&twin(&whole_args));
    let mut parts = Vec::new();
    for i in 0..3 {
        let part = tmp(&format!("part-{i}.json"));
        let shard = format!("{i}/3");
        let mut args = vec!["sweep", "scenarios/small.toml"];
        args.extend(VARY);
        args.extend(["--shard", &shard, "--out", part.to_str().unwrap()]);
        assert!(twin(&args).status.success());
        parts.push(part.to_str().unwrap().to_string());
    }
    let mut args = vec!["sweep", "--json", "--merge"];
    args.extend(parts.iter().map(String::as_str));
    let merged = json(&twin(&args));
    assert_eq!(merged, whole);
    // The same shard twice overlaps.
    let o = twin(&["sweep", "--merge", &parts[0], &parts[0]]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn bad_input_exits_2() {
    for args in [
        vec![
            "sweep",
            "scenarios/small.toml",
            "--vary",
            "parallel.pp=5..1",
        ],
        vec!["sweep", "scenarios/small.toml"],
        vec![
            "sweep",
            "scenarios/small.toml",
            "--search",
            "--shard",
            "3/3",
        ],
        vec!["sweep", "no/such.toml", "--search"],
        vec!["sweep"],
    ] {
        let o = twin(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn search_beats_the_bundled_layout_and_matches_a_full_simulation() {
    let bundled = json(&twin(&[
        "simulate",
        "scenarios/512xA100.toml",
        "--format",
        "json",
    ]));
    let v = json(&twin(&[
        "sweep",
        "scenarios/512xA100.toml",
        "--search",
        "--space",
        "layouts",
        "--exhaustive",
        "--json",
    ]));
    let rows = v["rows"].as_array().unwrap();
    assert!(rows.len() > 1000, "{} layouts simulated", rows.len());
    let best = rows
        .iter()
        .filter(|r| r["fits"] == true)
        .max_by(|a, b| {
            a["tokens_per_s"]
                .as_f64()
                .unwrap()
                .total_cmp(&b["tokens_per_s"].as_f64().unwrap())
        })
        .unwrap();
    let best_tps = best["tokens_per_s"].as_f64().unwrap();
    assert!(best_tps >= bundled["tokens_per_s"].as_f64().unwrap());
    // The bundled layout itself is among the searched ones, with the same figures.
    let same = rows
        .iter()
        .find(|r| {
            (
                r["tp"].as_u64(),
                r["pp"].as_u64(),
                r["dp"].as_u64(),
                r["vpp"].as_u64(),
            ) == (Some(8), Some(8), Some(8), Some(1))
                && r["micro_batch"] == 1
                && r["recompute"] == "selective"
                && r["zero"] == 1
        })
        .expect("the bundled layout is searched");
    assert_eq!(same["step_time_s"], bundled["step_time_s"]);
    // The winner, simulated in full (every rank), agrees within 0.1% (in fact exactly).
    let mut args = vec!["simulate", "scenarios/512xA100.toml", "--format", "json"];
    for o in best["overrides"].as_array().unwrap() {
        args.extend(["--set", o.as_str().unwrap()]);
    }
    let full = json(&twin(&args));
    let (a, b) = (
        best["step_time_s"].as_f64().unwrap(),
        full["step_time_s"].as_f64().unwrap(),
    );
    assert!((a - b).abs() <= 1e-3 * b, "collapsed {a} vs full {b}");
    assert_eq!(best["peak_memory_bytes"], full["peak_memory_bytes"]);
    assert!(full["events"].as_u64().unwrap() > 0);
}

#[test]
fn simulate_collapse_gives_the_full_report_with_fewer_events() {
    let run = |extra: &[&str]| {
        let mut args = vec![
            "simulate",
            "scenarios/512xA100.toml",
            "--format",
            "json",
            "--reproducible",
        ];
        args.extend(extra);
        json(&twin(&args))
    };
    let (mut full, mut collapsed) = (run(&["--full"]), run(&["--collapse"]));
    // Without either flag the run is collapsed (exact here): the same report and events.
    assert_eq!(run(&[]), collapsed);
    let (ef, ec) = (
        full["events"].as_u64().unwrap(),
        collapsed["events"].as_u64().unwrap(),
    );
    // 512 ranks, 8 stages: one rank per stage simulated.
    assert_eq!(ef, ec * 64);
    full["events"] = 0.into();
    collapsed["events"] = 0.into();
    assert_eq!(full, collapsed);
    // ranks[] lists, per stage, the ranks its representative stands for.
    let ranks = collapsed["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 8);
    assert_eq!(ranks[0]["ranks"], "0-63");
    assert_eq!(ranks[0]["rank_count"], 64);
}

#[test]
fn dp_follows_when_only_tp_and_pp_are_varied() {
    let v = json(&twin(&[
        "sweep",
        "scenarios/small.toml",
        "--vary",
        "parallel.tp=1,2,4,8",
        "--vary",
        "parallel.pp=1,2",
        "--json",
    ]));
    assert_eq!(v["layouts"], 8);
    let rows = v["rows"].as_array().unwrap();
    assert!(rows.len() >= 6, "{v}");
    for r in rows {
        let n = r["tp"].as_u64().unwrap() * r["pp"].as_u64().unwrap() * r["dp"].as_u64().unwrap();
        assert_eq!(n, 8);
    }
}

/// A pruned search run as four shards (as a Slurm array or a Kubernetes indexed job would run
/// it) merges into the same best layouts as one run, each shard pruning on its own.
#[test]
fn four_search_shards_merge_into_the_best_of_one_run() {
    let top = |v: &serde_json::Value| -> Vec<(u64, String)> {
        let rows = v["rows"].as_array().unwrap();
        let mut fit: Vec<&serde_json::Value> = rows.iter().filter(|r| r["fits"] == true).collect();
        fit.sort_by(|a, b| {
            b["tokens_per_s"]
                .as_f64()
                .unwrap()
                .total_cmp(&a["tokens_per_s"].as_f64().unwrap())
                .then(a["index"].as_u64().cmp(&b["index"].as_u64()))
        });
        fit.iter()
            .take(3)
            .map(|r| (r["index"].as_u64().unwrap(), r["step_time_s"].to_string()))
            .collect()
    };
    let one = json(&twin(&[
        "sweep",
        "scenarios/small.toml",
        "--search",
        "--top",
        "3",
        "--format",
        "json",
    ]));
    let mut parts = Vec::new();
    for i in 0..4 {
        let part = tmp(&format!("search-part-{i}.json"));
        let shard = format!("{i}/4");
        let o = twin(&[
            "sweep",
            "scenarios/small.toml",
            "--search",
            "--top",
            "3",
            "--shard",
            &shard,
            "--out",
            part.to_str().unwrap(),
            "--quiet",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        parts.push(part);
    }
    let mut args = vec!["sweep", "--merge"];
    let names: Vec<String> = parts.iter().map(|p| p.display().to_string()).collect();
    args.extend(names.iter().map(String::as_str));
    args.extend(["--format", "json"]);
    let merged = json(&twin(&args));
    assert_eq!(merged["layouts"], one["layouts"]);
    assert!(one["pruned"].as_u64().unwrap() > 0);
    assert_eq!(top(&merged), top(&one));
    assert_eq!(top(&one).len(), 3);
}

/// A search splits layers automatically, so a scenario's own split (`layer_partition` here)
/// is outside its candidates: the text report prices the scenario's own layout beside them,
/// with the figures `twin simulate` gives it. Without a split of its own, no such line.
#[test]
fn a_search_prices_the_scenarios_own_layer_split_beside_its_candidates() {
    let split = "parallel.layer_partition=[1, 3]";
    let own = json(&twin(&[
        "simulate",
        "scenarios/small.toml",
        "--set",
        split,
        "--format",
        "json",
    ]));
    let o = twin(&[
        "sweep",
        "scenarios/small.toml",
        "--set",
        split,
        "--search",
        "--space",
        "layouts",
        "--quiet",
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let text = stdout(&o);
    let line = text
        .lines()
        .skip_while(|l| !l.starts_with("the scenario's own layout"))
        .nth(1)
        .unwrap_or_else(|| panic!("no own layout in:\n{text}"));
    let step_ms = own["step_time_s"].as_f64().unwrap() * 1e3;
    assert!(
        line.starts_with(&format!("  step {step_ms:.3} ms")),
        "{line} (simulate: {step_ms:.3} ms)"
    );
    let plain = twin(&[
        "sweep",
        "scenarios/small.toml",
        "--search",
        "--space",
        "layouts",
        "--quiet",
    ]);
    assert!(plain.status.success(), "stderr: {}", stderr(&plain));
    assert!(!stdout(&plain).contains("own layout"), "{}", stdout(&plain));
}

/// The sweep prices each layout as `twin simulate` does: on a machine a bundled profile
/// describes (the bundled Qwen3 scenario's DGX H100s) with that profile, which it names on
/// stderr, exactly as the file given with --profile, and with the defaults only when asked;
/// on the small scenario's GPU, which no bundled profile describes, it says nothing.
#[test]
fn a_sweep_prices_each_layout_with_the_bundled_profile_of_its_machine() {
    let scenario = "scenarios/moe/qwen3-30b-a3b-16xH100.toml";
    let sweep = |extra: &[&str]| {
        let mut args = vec![
            "sweep",
            scenario,
            "--vary",
            "training.micro_batch=1,2",
            "--format",
            "json",
        ];
        args.extend(extra);
        let o = twin(&args);
        assert!(o.status.success(), "stderr: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (v, stderr(&o))
    };
    let (machine, said) = sweep(&[]);
    assert!(
        said.contains("priced with the bundled profile scenarios/profiles/h100-dgx.toml"),
        "{said}"
    );
    // The same as the file given, and not the defaults.
    let (given, said) = sweep(&["--profile", "scenarios/profiles/h100-dgx.toml"]);
    assert!(!said.contains("note:"), "{said}");
    let (defaults, said) = sweep(&["--profile", "defaults"]);
    assert!(
        said.contains("twin's A100-fitted defaults, as asked"),
        "{said}"
    );
    let steps = |v: &serde_json::Value| -> Vec<f64> {
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["step_time_s"].as_f64().unwrap())
            .collect()
    };
    assert_eq!(steps(&machine), steps(&given));
    assert_ne!(steps(&machine), steps(&defaults));
    // The simulated step of a layout is the sweep's.
    let o = twin(&[
        "simulate",
        scenario,
        "--set",
        "training.micro_batch=1",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let step = r["step_time_s"].as_f64().unwrap();
    assert!(
        steps(&machine).contains(&step),
        "{step} not in {:?}",
        steps(&machine)
    );
    let mut args = vec!["sweep", "scenarios/small.toml"];
    args.extend(VARY);
    let o = twin(&args);
    assert!(o.status.success(), "stderr: {}", stderr(&o));
    assert!(!stderr(&o).contains("note:"), "{}", stderr(&o));
}
