//! Fuzzing scenario parsing, validation and planning with proptest: random mutations of the
//! bundled scenarios (deleted, swapped and truncated lines, huge / zero / negative numbers,
//! wrong types, unicode, deep nesting, keys moved between sections) plus random overrides.
//! Properties: `parse_str` never panics; an error is well-formed (located inside the text,
//! bounded in size, never the "plan rejected a validated scenario" kind); and whenever it
//! returns Ok, `Plan::new` succeeds and `to_toml` round-trips.
//!
//! CI runs proptest's default 256 cases; for a long run: `PROPTEST_CASES=20000 cargo test
//! -p twin-sim --test fuzz_scenario`.

use proptest::prelude::*;
use proptest::sample::select;
use twin_sim::plan::Plan;
use twin_sim::scenario::{parse_str, to_toml, ErrorKind};

const SCENARIOS: [&str; 7] = [
    include_str!("../../scenarios/512xA100.toml"),
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
    "gpu",
    "gpus",
    "gpus_per_node",
    "node",
    "tp",
    "pp",
    "dp",
    "vpp",
    "ep",
    "cp",
    "zero",
    "fsdp",
    "sequence_parallel",
    "schedule",
    "layer_partition",
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
    "parallel.order",
    "training.global_batch",
    "training.micro_batch",
    "training.offload",
    "training.sync",
    "training.grad_compression",
    "training.grad_bucket_bytes",
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
    &["a100-sxm-80gb", "h100-sxm-80gb", "h200-141gb"],
    &["dgx-a100", "dgx-h100"],
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
