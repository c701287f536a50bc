//! Fuzzing scenario parsing, validation and planning with proptest: random mutations of the
//! bundled scenarios, mixtures of experts among them (deleted, swapped and truncated lines,
//! huge / zero / negative numbers, wrong types, unicode, deep nesting, keys moved between
//! sections) plus random overrides.
//! Properties: `parse_str` never panics; an error is well-formed (located inside the text,
//! bounded in size, never the "plan rejected a validated scenario" kind); and whenever it
//! returns Ok, `Plan::new` succeeds and `to_toml` round-trips.
//!
//! CI runs proptest's default 256 cases; for a long run: `PROPTEST_CASES=20000 cargo test
//! -p twin-sim --test fuzz_scenario`.
//!
//! `mutated_scenarios_run_bounded` goes further: it runs the whole prediction (load, plan,
//! schedule, validate, simulate) on mutated scenarios, with numeric keys also pushed toward
//! huge values (global batch, layers, sequence length, GPUs, micro batch: the values that
//! once hung or aborted on memory). Each input runs in a child process (this test binary,
//! entered at `fuzz_child`) under an address-space rlimit and a wall-clock limit, and the
//! test fails on any panic, abort, time-out or peak resident memory over the bound. The
//! inputs come from a fixed seed. CI runs [`PIPELINE_CASES`] of them; `TWIN_FUZZ_CASES=10000
//! cargo test --release -p twin-sim --test fuzz_scenario mutated_scenarios_run_bounded --
//! --nocapture` runs more and prints the slowest and largest.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use proptest::prelude::*;
use proptest::sample::select;
use twin_sim::plan::Plan;
use twin_sim::scenario::{to_toml, ErrorKind};
use twin_sim::setup::parse_str;

const SCENARIOS: [&str; 9] = [
    include_str!("../../scenarios/512xA100.toml"),
    include_str!("../../scenarios/moe/deepseek-v3-1024xH100.toml"),
    include_str!("../../scenarios/moe/qwen3-30b-a3b-16xH100.toml"),
    include_str!("../../scenarios/16384xH100.toml"),
    include_str!("../../scenarios/small.toml"),
    include_str!("../../scenarios/schedules/gpipe.toml"),
    include_str!("../../scenarios/schedules/1f1b.toml"),
    include_str!("../../scenarios/schedules/interleaved-1f1b.toml"),
    include_str!("../../scenarios/schedules/zero-bubble.toml"),
];

/// Keys of the schema (and a few near misses), for renaming keys and for overrides.
const KEYS: &[&str] = &[
    "name",
    "preset",
    "hf_config",
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "ffn_hidden",
    "seq_len",
    "vocab",
    "gated_mlp",
    "tied_embeddings",
    "experts",
    "top_k",
    "moe_every",
    "moe_routing",
    "moe_a2a_overlap",
    "moe_ffn_hidden",
    "shared_experts",
    "shared_expert_ffn_hidden",
    "dense_layers",
    "dense_ffn_hidden",
    "router_groups",
    "router_group_top_k",
    "mtp_layers",
    "head_dim",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "moe_dispatcher",
    "fp8_recipe",
    "gpu",
    "gpus",
    "gpus_per_node",
    "node",
    "tp",
    "pp",
    "dp",
    "vpp",
    "ep",
    "etp",
    "cp",
    "zero",
    "fsdp",
    "sequence_parallel",
    "schedule",
    "layer_partition",
    "pipeline_layout",
    "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split",
    "order",
    "global_batch",
    "micro_batch",
    "precision",
    "recompute",
    "sync",
    "grad_compression",
    "offload",
    "optimizer",
    "grad_bucket_bytes",
    "iterations",
    "seed",
    "granularity",
    "latency_us",
    "latency_ns",
    "bandwidth_gb_per_s",
    "bandwidth_bytes_per_s",
    "hbm_bytes",
    "peak_bf16_flops_per_s",
    "micro_bach",
    "tpp",
    "intra_node",
    "inter_node",
];

const SECTIONS: &[&str] = &[
    "model",
    "cluster",
    "parallel",
    "training",
    "run",
    "cluster.gpu",
    "model.mla",
];

/// Hand-picked values: extremes, wrong types, unicode, names that are almost right.
const VALUES: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "4",
    "7",
    "8",
    "16",
    "-1",
    "-9223372036854775808",
    "9223372036854775807",
    "1048576",
    "1048577",
    "4294967296",
    "16777216",
    "16777217",
    "65536",
    "1e308",
    "-0.0",
    "0.5",
    "nan",
    "inf",
    "-inf",
    "1e-300",
    "3.0",
    "true",
    "false",
    "\"\"",
    "\"x\"",
    "\"ťëšť 🚀\"",
    "\"\\u0000\"",
    "[]",
    "[1, 2]",
    "[0]",
    "[1, 1, 1, 1]",
    "{}",
    "{ a = 1 }",
    "1979-05-27T07:32:00Z",
    "\"gpipe\"",
    "\"1f1b\"",
    "\"interleaved-1f1b\"",
    "\"zero-bubble\"",
    "\"bf16\"",
    "\"fp8\"",
    "\"full\"",
    "\"selective\"",
    "\"topk:0.5\"",
    "\"topk:0\"",
    "\"delayed:2\"",
    "\"delayed:-1\"",
    "\"async\"",
    "\"params\"",
    "\"optimizer\"",
    "\"balanced\"",
    "\"force-balanced\"",
    "{ imbalance = 1.5 }",
    "{ capacity_factor = 1.0 }",
    "{ expert_load_cv = 0.5 }",
    "\"llama3-70b\"",
    "\"mixtral-8x7b\"",
    "\"gpt3-175b\"",
    "\"h200-141gb\"",
    "\"dgx-h100\"",
    "\"custom\"",
    "\"layer\"",
    "\"/\"",
    "\"../Cargo.toml\"",
    "\"fixtures/hf/gpt2.json\"",
    "[\"tp\", \"cp\", \"ep\", \"dp\", \"pp\"]",
    "[\"pp\", \"dp\", \"ep\", \"cp\", \"tp\"]",
    "{ preset = \"a100-sxm-80gb\", hbm_bytes = 1 }",
];

#[derive(Clone, Debug)]
enum Mutation {
    DeleteLine(usize),
    DuplicateLine(usize),
    SwapLines(usize, usize),
    /// Replace the value of the n-th `key = value` line.
    SetValue(usize, String),
    /// Exchange the values of two `key = value` lines.
    SwapValues(usize, usize),
    /// Rename the key of the n-th `key = value` line.
    RenameKey(usize, String),
    /// Insert a line `key = value` (maybe under a new table header).
    InsertLine(usize, String),
    InsertText(usize, String),
    Truncate(usize),
    DeepNesting(usize, usize, bool),
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0u64..=16).prop_map(|v| v.to_string()),
        2 => (0u32..40).prop_map(|e| (1u64 << e).to_string()),
        4 => select(VALUES).prop_map(str::to_string),
        1 => any::<i64>().prop_map(|v| v.to_string()),
        1 => any::<f64>().prop_map(|v| format!("{v:?}")),
        1 => "\\PC{0,12}".prop_map(|s| format!("{s:?}")),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let ix = any::<usize>;
    prop_oneof![
        2 => ix().prop_map(Mutation::DeleteLine),
        1 => ix().prop_map(Mutation::DuplicateLine),
        1 => (ix(), ix()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
        12 => (ix(), value()).prop_map(|(a, v)| Mutation::SetValue(a, v)),
        2 => (ix(), ix()).prop_map(|(a, b)| Mutation::SwapValues(a, b)),
        1 => (ix(), select(KEYS)).prop_map(|(a, k)| Mutation::RenameKey(a, k.to_string())),
        1 => (ix(), select(SECTIONS), select(KEYS), value()).prop_map(|(a, s, k, v)| {
            Mutation::InsertLine(a, format!("[{s}]\n{k} = {v}"))
        }),
        3 => (ix(), select(KEYS), value())
            .prop_map(|(a, k, v)| Mutation::InsertLine(a, format!("{k} = {v}"))),
        1 => (ix(), "\\PC{0,6}|[\\[\\]{}=\"'#.\\n]{1,4}")
            .prop_map(|(a, t)| Mutation::InsertText(a, t)),
        1 => ix().prop_map(Mutation::Truncate),
        1 => (ix(), 1usize..400, any::<bool>())
            .prop_map(|(a, d, arrays)| Mutation::DeepNesting(a, d, arrays)),
    ]
}

/// Dotted keys of the schema, for overrides that get past the key check.
const PATHS: &[&str] = &[
    "name",
    "model.layers",
    "model.hidden",
    "model.heads",
    "model.kv_heads",
    "model.ffn_hidden",
    "model.seq_len",
    "model.vocab",
    "model.experts",
    "model.top_k",
    "model.moe_every",
    "model.preset",
    "model.gated_mlp",
    "cluster.gpus",
    "cluster.gpus_per_node",
    "cluster.node",
    "cluster.gpu",
    "cluster.intra_node.latency_us",
    "cluster.inter_node.bandwidth_gb_per_s",
    "parallel.tp",
    "parallel.pp",
    "parallel.dp",
    "parallel.vpp",
    "parallel.ep",
    "parallel.cp",
    "parallel.zero",
    "parallel.fsdp",
    "parallel.sequence_parallel",
    "parallel.schedule",
    "parallel.layer_partition",
    "parallel.account_for_embedding_in_pipeline_split",
    "parallel.account_for_loss_in_pipeline_split",
    "parallel.order",
    "training.global_batch",
    "training.micro_batch",
    "training.offload",
    "training.sync",
    "training.grad_compression",
    "training.grad_bucket_bytes",
    "training.moe_routing",
    "training.moe_a2a_overlap",
    "run.iterations",
    "run.seed",
    "run.granularity",
];

fn override_() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (select(PATHS), value()).prop_map(|(k, v)| format!("{k}={v}")),
        1 => (select(SECTIONS), select(KEYS), value()).prop_map(|(s, k, v)| format!("{s}.{k}={v}")),
        1 => "\\PC{0,16}",
    ]
}

const INT_PATHS: &[&str] = &[
    "model.layers",
    "model.hidden",
    "model.heads",
    "model.kv_heads",
    "model.seq_len",
    "model.experts",
    "cluster.gpus",
    "cluster.gpus_per_node",
    "parallel.tp",
    "parallel.pp",
    "parallel.dp",
    "parallel.vpp",
    "parallel.ep",
    "parallel.cp",
    "parallel.zero",
    "training.global_batch",
    "training.micro_batch",
];

/// Names that may replace a quoted value of the same family.
const NAME_FAMILIES: &[&[&str]] = &[
    &["gpipe", "1f1b", "interleaved-1f1b", "zero-bubble"],
    &["fp32", "fp16", "bf16", "fp8"],
    &["none", "selective", "full"],
    &[
        "a100-sxm-80gb",
        "h100-sxm-80gb",
        "h100-sxm-96gb-500w",
        "h200-141gb",
        "h800-sxm-80gb",
        "b200-sxm-180gb",
        "gb200",
    ],
    &[
        "dgx-a100",
        "dgx-h100",
        "hgx-h800",
        "dgx-h200",
        "hgx-h200",
        "dgx-b200",
        "gb200-nvl72",
    ],
    &["delayed", "tensorwise", "rowwise", "blockwise", "mxfp8"],
    &[
        "megatron-core",
        "nemo",
        "torchtitan",
        "deepspeed",
        "hf",
        "llm-foundry",
    ],
    &["all-gather", "ring", "ulysses"],
    &[
        "gpt3-175b",
        "llama2-7b",
        "llama2-13b",
        "llama2-70b",
        "llama3-8b",
        "llama3-70b",
        "llama3-405b",
        "mixtral-8x7b",
    ],
    &["chunk", "layer"],
];

/// Replaces the value of the n-th assignment with a value of the same kind: an integer from
/// a small set of plausible sizes, a name from the same family, or the other boolean.
fn plausible_edit(lines: &mut [String], n: usize, pick: usize) {
    const INTS: [u64; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 80, 96, 128, 1024];
    let Some(i) = assignment(lines, n) else {
        return;
    };
    let Some((key, rest)) = lines[i].split_once(" = ") else {
        return;
    };
    let value = rest.split('#').next().unwrap_or("").trim();
    let new = if value.parse::<i64>().is_ok() {
        INTS[pick % INTS.len()].to_string()
    } else if value == "true" || value == "false" {
        (value == "false").to_string()
    } else if let Some(name) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
        match NAME_FAMILIES.iter().find(|f| f.contains(&name)) {
            Some(family) => format!("\"{}\"", family[pick % family.len()]),
            None => return,
        }
    } else {
        return;
    };
    lines[i] = format!("{key} = {new}");
}

/// Index of the n-th (mod count) line that looks like `key = value`, if any.
fn assignment(lines: &[String], n: usize) -> Option<usize> {
    let idx: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with('#') && l.contains(" = "))
        .map(|(i, _)| i)
        .collect();
    (!idx.is_empty()).then(|| idx[n % idx.len()])
}

/// Clamps a byte index to a char boundary of `s`.
fn boundary(s: &str, i: usize) -> usize {
    let mut i = i % (s.len() + 1);
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn apply(text: &str, m: &Mutation) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let n = lines.len().max(1);
    match m {
        Mutation::DeleteLine(i) => {
            if !lines.is_empty() {
                lines.remove(i % n);
            }
        }
        Mutation::DuplicateLine(i) => {
            if let Some(l) = lines.get(i % n).cloned() {
                lines.insert(i % n, l);
            }
        }
        Mutation::SwapLines(a, b) => {
            if !lines.is_empty() {
                lines.swap(a % n, b % n);
            }
        }
        Mutation::SetValue(i, v) => {
            if let Some(i) = assignment(&lines, *i) {
                let key = lines[i].split(" = ").next().unwrap_or("").to_string();
                lines[i] = format!("{key} = {v}");
            }
        }
        Mutation::SwapValues(a, b) => {
            if let (Some(a), Some(b)) = (assignment(&lines, *a), assignment(&lines, *b)) {
                let (ka, va) = lines[a].split_once(" = ").unwrap();
                let (kb, vb) = lines[b].split_once(" = ").unwrap();
                let (na, nb) = (format!("{ka} = {vb}"), format!("{kb} = {va}"));
                lines[a] = na;
                lines[b] = nb;
            }
        }
        Mutation::RenameKey(i, k) => {
            if let Some(i) = assignment(&lines, *i) {
                let rest = lines[i]
                    .split_once(" = ")
                    .map(|x| x.1)
                    .unwrap_or("")
                    .to_string();
                lines[i] = format!("{k} = {rest}");
            }
        }
        Mutation::InsertLine(i, l) => lines.insert(i % (lines.len() + 1), l.clone()),
        Mutation::InsertText(i, t) => {
            let joined = lines.join("\n");
            let at = boundary(&joined, *i);
            return format!("{}{t}{}", &joined[..at], &joined[at..]);
        }
        Mutation::Truncate(i) => {
            let joined = lines.join("\n");
            let at = boundary(&joined, *i);
            return joined[..at].to_string();
        }
        Mutation::DeepNesting(i, depth, arrays) => {
            let (open, close) = if *arrays {
                ("[".repeat(*depth), "]".repeat(*depth))
            } else {
                ("{ a = ".repeat(*depth), " }".repeat(*depth))
            };
            let v = format!("{open}1{close}");
            match assignment(&lines, *i) {
                Some(i) => {
                    let key = lines[i].split(" = ").next().unwrap_or("").to_string();
                    lines[i] = format!("{key} = {v}");
                }
                None => lines.push(format!("x = {v}")),
            }
        }
    }
    lines.join("\n")
}

fn check(text: &str, overrides: &[String]) -> Result<(), TestCaseError> {
    match parse_str(text, "fuzz.toml", overrides) {
        Ok(s) => {
            let plan = Plan::new(&s);
            prop_assert!(
                plan.is_ok(),
                "validated but unplannable: {:?}\n{text}",
                plan.err()
            );
            let back = parse_str(&to_toml(&s), "roundtrip.toml", &[]);
            prop_assert!(
                back.as_ref() == Ok(&s),
                "round trip failed: {back:?}\n{text}"
            );
        }
        Err(e) => {
            prop_assert!(e.kind != ErrorKind::Plan, "validation gap: {e}\n{text}");
            let shown = e.to_string();
            prop_assert!(!e.message.is_empty());
            prop_assert!(
                shown.len() < 4096,
                "unbounded message: {} chars",
                shown.len()
            );
            if e.origin == "fuzz.toml" {
                if let (Some(line), Some(column)) = (e.line, e.column) {
                    let lines = text.split('\n').count() as u32;
                    prop_assert!(line >= 1 && line <= lines, "line {line} of {lines}: {e}");
                    prop_assert!(column >= 1, "{e}");
                }
            } else {
                prop_assert!(
                    e.origin.starts_with("--set ") || e.line.is_none() || e.origin.contains('/'),
                    "unexpected origin: {e}"
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn mutated_scenarios_never_panic(
        which in 0..SCENARIOS.len(),
        mutations in proptest::collection::vec(mutation(), 1..4),
        overrides in proptest::collection::vec(override_(), 0..3),
    ) {
        let mut text = SCENARIOS[which].to_string();
        for m in &mutations {
            text = apply(&text, m);
        }
        check(&text, &overrides)?;
    }

    /// Type-correct edits only (small integers for integers, known names for names), so most
    /// cases get through parsing and exercise the cross-field rules and the plan.
    #[test]
    fn plausible_edits_reach_validation_and_the_plan(
        which in 0..SCENARIOS.len(),
        edits in proptest::collection::vec((any::<usize>(), 0usize..64), 1..4),
        overrides in proptest::collection::vec((select(INT_PATHS), 0u64..=64), 0..3),
    ) {
        let mut lines: Vec<String> = SCENARIOS[which].lines().map(str::to_string).collect();
        for (line, v) in &edits {
            plausible_edit(&mut lines, *line, *v);
        }
        let overrides: Vec<String> = overrides.iter().map(|(k, v)| format!("{k}={v}")).collect();
        check(&lines.join("\n"), &overrides)?;
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,400}") {
        check(&text, &[])?;
    }
}

/// Inputs `mutated_scenarios_run_bounded` runs by default (`TWIN_FUZZ_CASES` overrides).
const PIPELINE_CASES: usize = 24;
/// Wall-clock bound per input in release builds; unoptimised builds get ten times as long.
const PIPELINE_TIMEOUT_S: u64 = 20;
/// Peak resident memory bound per input.
const PIPELINE_MAX_RSS_BYTES: u64 = 2 << 30;
/// Address space a child may map: past this, allocations fail and the child aborts (which
/// the test reports) instead of taking the machine's memory.
const PIPELINE_ADDRESS_SPACE_BYTES: u64 = 8 << 30;
/// Environment variable naming the input file of a child run.
const CHILD_INPUT: &str = "TWIN_FUZZ_CHILD_INPUT";

/// Keys whose huge values made twin hang or abort, and values from plausible to past every
/// bound.
const HUGE_PATHS: &[&str] = &[
    "training.global_batch",
    "training.micro_batch",
    "model.layers",
    "model.seq_len",
    "cluster.gpus",
    "parallel.dp",
    "parallel.pp",
    "parallel.ep",
    "model.experts",
    "model.mtp_layers",
];

fn huge_override() -> impl Strategy<Value = String> {
    (select(HUGE_PATHS), 4u32..=26, 0u64..=2).prop_map(|(k, e, add)| {
        let v = (1u64 << e) + if add == 2 { 1 } else { 0 };
        format!("{k}={v}")
    })
}

/// One pipeline input: a scenario text and its overrides.
fn pipeline_input() -> impl Strategy<Value = (String, Vec<String>)> {
    let mutated = (
        0..SCENARIOS.len(),
        proptest::collection::vec(mutation(), 0..3),
        proptest::collection::vec(prop_oneof![2 => huge_override(), 1 => override_()], 0..3),
    )
        .prop_map(|(which, mutations, overrides)| {
            let mut text = SCENARIOS[which].to_string();
            for m in &mutations {
                text = apply(&text, m);
            }
            (text, overrides)
        });
    let plausible = (
        0..SCENARIOS.len(),
        proptest::collection::vec((any::<usize>(), 0usize..64), 0..3),
        proptest::collection::vec(huge_override(), 1..3),
    )
        .prop_map(|(which, edits, overrides)| {
            let mut lines: Vec<String> = SCENARIOS[which].lines().map(str::to_string).collect();
            for (line, v) in &edits {
                plausible_edit(&mut lines, *line, *v);
            }
            (lines.join("\n"), overrides)
        });
    prop_oneof![mutated, plausible]
}

/// The child side: runs the CLI's default prediction on the input named by
/// [`CHILD_INPUT`]. Without that variable (a normal test run) there is nothing to do.
#[test]
fn fuzz_child() {
    let Ok(path) = std::env::var(CHILD_INPUT) else {
        return;
    };
    let input = std::fs::read_to_string(&path).expect("child input");
    let (text, overrides): (String, Vec<String>) =
        serde_json::from_str(&input).expect("child input JSON");
    // Refusals (invalid scenarios, work bounds) are fine; panics and aborts are not.
    let outcome = match parse_str(&text, "fuzz.toml", &overrides) {
        Err(_) => "rejected",
        Ok(scenario) => {
            let opts = twin_sim::PredictOptions {
                collapse: true,
                ..Default::default()
            };
            match twin_sim::predict(&scenario, &opts) {
                Ok(_) => "simulated",
                Err(_) => "refused",
            }
        }
    };
    std::fs::write(format!("{path}.outcome"), outcome).expect("child outcome");
}

/// How one child run ended.
struct ChildRun {
    wall_s: f64,
    max_rss_bytes: u64,
    /// `None` when the child was killed at the time limit.
    status: Option<libc::c_int>,
    /// What `fuzz_child` recorded: rejected, refused or simulated (empty if it died first).
    outcome: String,
}

/// Runs `fuzz_child` on `input_path` in a child process under the address-space rlimit,
/// killing it after `timeout`.
fn run_child(input_path: &std::path::Path, timeout: std::time::Duration) -> ChildRun {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["--exact", "fuzz_child", "--test-threads=1", "--quiet"])
        .env(CHILD_INPUT, input_path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: PIPELINE_ADDRESS_SPACE_BYTES as libc::rlim_t,
                rlim_max: PIPELINE_ADDRESS_SPACE_BYTES as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let start = std::time::Instant::now();
    // Reaped by wait4 below, which also gives its peak memory; std's wait would not.
    #[allow(clippy::zombie_processes)]
    let child = cmd.spawn().expect("spawn child");
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let mut killed = false;
    loop {
        // SAFETY: pid is our own child; status and usage are valid for writes.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break;
        }
        assert!(r == 0, "wait4: {}", std::io::Error::last_os_error());
        if !killed && start.elapsed() > timeout {
            // SAFETY: signalling our own unreaped child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed = true;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    ChildRun {
        wall_s: start.elapsed().as_secs_f64(),
        // Linux reports ru_maxrss in KiB.
        max_rss_bytes: (usage.ru_maxrss.max(0) as u64) * 1024,
        status: (!killed).then_some(status),
        outcome: {
            let mut p = input_path.as_os_str().to_owned();
            p.push(".outcome");
            let o = std::fs::read_to_string(&p).unwrap_or_default();
            let _ = std::fs::remove_file(&p);
            o
        },
    }
}

#[test]
fn mutated_scenarios_run_bounded() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let cases: usize = std::env::var("TWIN_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(PIPELINE_CASES);
    let timeout_s = if cfg!(debug_assertions) {
        PIPELINE_TIMEOUT_S * 10
    } else {
        PIPELINE_TIMEOUT_S
    };
    let timeout = std::time::Duration::from_secs(timeout_s);
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[34; 32]),
    );
    let strategy = pipeline_input();
    let inputs: Vec<(String, Vec<String>)> = (0..cases)
        .map(|_| strategy.new_tree(&mut runner).expect("input").current())
        .collect();
    let dir = std::env::temp_dir().join(format!("twin-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<(usize, ChildRun)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..jobs)
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(input) = inputs.get(i) else {
                            return out;
                        };
                        let path = dir.join(format!("{i}.json"));
                        std::fs::write(&path, serde_json::to_string(input).expect("JSON"))
                            .expect("write input");
                        out.push((i, run_child(&path, timeout)));
                        let _ = std::fs::remove_file(&path);
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("worker"))
            .collect()
    });
    let _ = std::fs::remove_dir_all(&dir);
    let slowest = results
        .iter()
        .max_by(|a, b| a.1.wall_s.total_cmp(&b.1.wall_s));
    let largest = results.iter().max_by_key(|r| r.1.max_rss_bytes);
    let count = |o: &str| results.iter().filter(|r| r.1.outcome == o).count();
    if let (Some(s), Some(l)) = (slowest, largest) {
        println!(
            "{} inputs ({} rejected by validation, {} refused by the pipeline, {} simulated), \
             {jobs} at a time: slowest {:.2} s (input {}), largest {:.0} MiB (input {})",
            results.len(),
            count("rejected"),
            count("refused"),
            count("simulated"),
            s.1.wall_s,
            s.0,
            l.1.max_rss_bytes as f64 / (1 << 20) as f64,
            l.0
        );
    }
    let mut failures = Vec::new();
    for (i, run) in &results {
        let what = match run.status {
            None => Some(format!("killed after {timeout_s} s")),
            Some(st) if libc::WIFSIGNALED(st) => {
                Some(format!("died of signal {}", libc::WTERMSIG(st)))
            }
            Some(st) if libc::WEXITSTATUS(st) != 0 => {
                Some(format!("exited {} (a panic)", libc::WEXITSTATUS(st)))
            }
            Some(_) if run.max_rss_bytes > PIPELINE_MAX_RSS_BYTES => {
                Some(format!("peak memory {} MiB", run.max_rss_bytes >> 20))
            }
            Some(_) => None,
        };
        if let Some(what) = what {
            let (text, overrides) = &inputs[*i];
            failures.push(format!("input {i} {what}; overrides {overrides:?}\n{text}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} inputs failed:\n{}",
        failures.len(),
        results.len(),
        failures.join("\n---\n")
    );
}
