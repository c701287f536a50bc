//! One test per invalid-input path: each checks that the error names the file, the line and
//! column, the key, the value and what is allowed.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_sim::scenario::*;
use twin_sim::setup::{load, parse_str};

const BASE: &str = r#"name = "t"
[model]
layers = 8
hidden = 1024
heads = 16
seq_len = 1024
vocab = 32000
[cluster]
gpu = "a100-sxm-80gb"
gpus = 16
node = "dgx-a100"
[parallel]
tp = 2
pp = 2
dp = 4
schedule = "1f1b"
[training]
global_batch = 32
micro_batch = 1
"#;

/// BASE with the first occurrence of `from` replaced by `to`.
fn edit(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "BASE has no {from:?}");
    BASE.replacen(from, to, 1)
}

/// 1-based line and character column of the first occurrence of `needle` in `text`; with a
/// `^` in the needle, of the place the `^` marks (`"tp = ^2"` points at the 2).
fn position(text: &str, needle: &str) -> (u32, u32) {
    let (plain, skip) = match needle.split_once('^') {
        Some((a, b)) => (format!("{a}{b}"), a.len()),
        None => (needle.to_string(), 0),
    };
    let offset = text
        .find(&plain)
        .unwrap_or_else(|| panic!("{plain:?} not in text"))
        + skip;
    let before = &text[..offset];
    let line = before.matches('\n').count() as u32 + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let column = text[line_start..offset].chars().count() as u32 + 1;
    (line, column)
}

struct Expect<'a> {
    kind: ErrorKind,
    key: &'a str,
    value: &'a str,
    /// The text the error should point at (its first occurrence).
    at: &'a str,
    message: &'a [&'a str],
    allowed: &'a [&'a str],
}

fn expect(text: &str, want: Expect<'_>) -> ScenarioError {
    let e = match parse_str(text, "t.toml", &[]) {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(e) => e,
    };
    let shown = e.to_string();
    assert_eq!(e.kind, want.kind, "{shown}");
    assert_eq!(e.origin, "t.toml", "{shown}");
    let (line, column) = position(text, want.at);
    assert_eq!((e.line, e.column), (Some(line), Some(column)), "{shown}");
    assert_eq!(e.key, want.key, "{shown}");
    assert_eq!(e.value, want.value, "{shown}");
    for m in want.message {
        assert!(e.message.contains(m), "message lacks {m:?}: {shown}");
    }
    for a in want.allowed {
        assert!(e.allowed.contains(a), "allowed lacks {a:?}: {shown}");
    }
    // The one-line form carries every part.
    assert!(
        shown.starts_with(&format!("t.toml:{line}:{column}: ")),
        "{shown}"
    );
    assert!(shown.contains(want.key), "{shown}");
    assert!(shown.contains(want.value), "{shown}");
    if !e.allowed.is_empty() {
        assert!(
            shown.contains(&format!("; allowed: {}", e.allowed)),
            "{shown}"
        );
    }
    e
}

#[test]
fn base_is_valid() {
    let s = parse_str(BASE, "t.toml", &[]).unwrap();
    assert_eq!(s.num_microbatches(), 8);
}

#[test]
fn the_example_message_from_the_brief() {
    let text = edit("schedule = \"1f1b\"", "schedule = \"1fb1\"");
    let e = expect(
        &text,
        Expect {
            kind: ErrorKind::Invalid,
            key: "parallel.schedule",
            value: "\"1fb1\"",
            at: "\"1fb1\"",
            message: &["unknown schedule"],
            allowed: &["gpipe, 1f1b, interleaved-1f1b, zero-bubble"],
        },
    );
    assert_eq!(
        e.to_string(),
        "t.toml:16:12: parallel.schedule = \"1fb1\": unknown schedule; allowed: gpipe, 1f1b, interleaved-1f1b, zero-bubble, dualpipe"
    );
}

#[test]
fn close_names_get_a_suggestion() {
    let text = edit("schedule = \"1f1b\"", "schedule = \"gpipee\"");
    expect(
        &text,
        Expect {
            kind: ErrorKind::Invalid,
            key: "parallel.schedule",
            value: "\"gpipee\"",
            at: "\"gpipee\"",
            message: &["did you mean `gpipe`?"],
            allowed: &["zero-bubble"],
        },
    );
}

#[test]
fn toml_syntax_error() {
    let text = edit("tp = 2", "tp = = 2");
    let e = parse_str(&text, "t.toml", &[]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Syntax);
    assert_eq!(e.line, Some(position(&text, "tp = =").0));
    assert!(e.column.is_some());
    assert!(e.to_string().starts_with("t.toml:13:"), "{e}");
    assert!(e.message.contains("TOML syntax error"), "{e}");
}

#[test]
fn duplicate_key_is_a_syntax_error() {
    let text = edit("tp = 2", "tp = 2\ntp = 4");
    let e = parse_str(&text, "t.toml", &[]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Syntax);
    assert_eq!(e.line, Some(14), "{e}");
}

#[test]
fn wrong_type() {
    let text = edit("tp = 2", "tp = \"two\"");
    expect(
        &text,
        Expect {
            kind: ErrorKind::Type,
            key: "parallel.tp",
            value: "\"two\"",
            at: "\"two\"",
            message: &["expected an integer, found a string"],
            allowed: &["an integer"],
        },
    );
    let text = edit(
        "[parallel]\ntp = 2\npp = 2\ndp = 4\nschedule = \"1f1b\"\n",
        "",
    )
    .replace("name = \"t\"", "name = \"t\"\nparallel = 3");
    expect(
        &text,
        Expect {
            kind: ErrorKind::Type,
            key: "parallel",
            value: "3",
            at: "parallel = ^3",
            message: &["expected a table, found an integer"],
            allowed: &["a table"],
        },
    );
}

#[test]
fn fractional_integer() {
    let text = edit("tp = 2", "tp = 2.5");
    expect(
        &text,
        Expect {
            kind: ErrorKind::Type,
            key: "parallel.tp",
            value: "2.5",
            at: "2.5",
            message: &["not a whole number"],
            allowed: &["integers from 1 to 1,048,576"],
        },
    );
}

#[test]
fn unknown_key_suggests_the_closest() {
    let text = edit("micro_batch = 1", "micro_bach = 1");
    expect(
        &text,
        Expect {
            kind: ErrorKind::UnknownKey,
            key: "training.micro_bach",
            value: "",
            at: "micro_bach",
            message: &["unknown key", "did you mean `micro_batch`?"],
            allowed: &["global_batch", "micro_batch"],
        },
    );
}

#[test]
fn key_in_the_wrong_section_names_the_right_one() {
    let text = edit("dp = 4", "dp = 4\nmicro_batch = 1");
    expect(
        &text,
        Expect {
            kind: ErrorKind::UnknownKey,
            key: "parallel.micro_batch",
            value: "",
            at: "micro_batch = 1",
            message: &["did you mean `training.micro_batch` (it belongs in [training])?"],
            allowed: &["tp", "schedule"],
        },
    );
}

#[test]
fn unknown_top_level_table() {
    let text = format!("{BASE}[trainig]\nx = 1\n");
    expect(
        &text,
        Expect {
            kind: ErrorKind::UnknownKey,
            key: "trainig",
            value: "",
            at: "trainig",
            message: &["did you mean `training`?"],
            allowed: &["model", "cluster"],
        },
    );
}

#[test]
fn unicode_key_column_counts_characters() {
    let text = edit("tp = 2", "\"ťp\" = 2");
    expect(
        &text,
        Expect {
            kind: ErrorKind::UnknownKey,
            key: "parallel.ťp",
            value: "",
            at: "\"ťp\"",
            // cp, dp, ep, pp and tp are all one edit away; the first is named.
            message: &["did you mean `cp`?"],
            allowed: &[],
        },
    );
    let text = edit(
        "gpu = \"a100-sxm-80gb\"",
        "gpu = { name = \"ťëšť\", preset = \"a100-sxm-80gb\", hbm_bytes = \"x\" }",
    );
    let e = expect(
        &text,
        Expect {
            kind: ErrorKind::Type,
            key: "cluster.gpu.hbm_bytes",
            value: "\"x\"",
            at: "\"x\"",
            message: &["expected an integer"],
            allowed: &[],
        },
    );
    assert_eq!(e.column, Some(62));
    // A bare key must be ASCII in TOML 1.0: a syntax error, still located.
    let e = parse_str(&edit("tp = 2", "ťp = 2"), "t.toml", &[]).unwrap_err();
    assert_eq!(
        (e.kind, e.line, e.column),
        (ErrorKind::Syntax, Some(13), Some(1))
    );
}

#[test]
fn out_of_range_values() {
    for (from, to, key, value, allowed) in [
        (
            "gpus = 16",
            "gpus = 0",
            "cluster.gpus",
            "0",
            "integers from 1 to 1,048,576",
        ),
        (
            "gpus = 16",
            "gpus = 2_000_000",
            "cluster.gpus",
            "2_000_000",
            "integers from 1 to 1,048,576",
        ),
        (
            "hidden = 1024",
            "hidden = 2097152",
            "model.hidden",
            "2097152",
            "integers from 1 to 1,048,576",
        ),
        (
            "seq_len = 1024",
            "seq_len = 33554432",
            "model.seq_len",
            "33554432",
            "integers from 1 to 16,777,216",
        ),
        (
            "layers = 8",
            "layers = -3",
            "model.layers",
            "-3",
            "integers from 1 to 65,536",
        ),
        (
            "dp = 4",
            "dp = 0",
            "parallel.dp",
            "0",
            "integers from 1 to 1,048,576",
        ),
        (
            "global_batch = 32",
            "global_batch = 9223372036854775807",
            "training.global_batch",
            "9223372036854775807",
            "integers from 1 to 16,777,216",
        ),
    ] {
        let text = edit(from, to);
        let v = to.split(" = ").nth(1).unwrap();
        expect(
            &text,
            Expect {
                kind: ErrorKind::Invalid,
                key,
                value,
                at: &format!("{} = ^{v}", key.rsplit('.').next().unwrap()),
                message: &["too"],
                allowed: &[allowed],
            },
        );
    }
}

#[test]
fn zero_stage_range() {
    let text = edit("dp = 4", "dp = 4\nzero = 4");
    expect(
        &text,
        Expect {
            kind: ErrorKind::Invalid,
            key: "parallel.zero",
            value: "4",
            at: "zero = ^4",
            message: &["too large"],
            allowed: &["integers from 0 to 3"],
        },
    );
}

#[test]
fn negative_and_non_finite_floats() {
    let text = edit(
        "node = \"dgx-a100\"",
        "node = \"dgx-a100\"\n[cluster.intra_node]\nbandwidth_gb_per_s = -5",
    );
    expect(
        &text,
        Expect {
            kind: ErrorKind::Invalid,
            key: "cluster.intra_node.bandwidth_gb_per_s",
            value: "-5",
            at: "-5",
            message: &["out of range"],
            allowed: &["greater than 0"],
        },
    );
    let text = edit(
        "gpu = \"a100-sxm-80gb\"",
        "gpu = { preset = \"a100-sxm-80gb\", peak_bf16_flops_per_s = nan }",
    );
    expect(
        &text,
        Expect {
            kind: ErrorKind::Invalid,
            key: "cluster.gpu.peak_bf16_flops_per_s",
            value: "nan",
            at: "nan",
            message: &["out of range"],
            allowed: &["greater than 0"],
        },
    );
}

#[test]
fn mesh_must_cover_the_gpus() {
    let text = edit("dp = 4", "dp = 3");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.dp",
            value: "3",
            at: "dp = ^3",
            message: &["tp*pp*dp*cp = 2*2*3*1 = 12, but cluster.gpus = 16"],
            allowed: &["dp = 4", "leave dp out"],
        },
    );
}

#[test]
fn derived_dp_must_be_whole() {
    let text = edit("tp = 2", "tp = 3").replace("dp = 4\n", "");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.tp",
            value: "3",
            at: "tp = ^3",
            message: &[
                "gpus / (tp*pp*cp) = 16 / (3*2*1) = 16 / 6",
                "not a whole number",
            ],
            allowed: &["dividing cluster.gpus = 16"],
        },
    );
}

#[test]
fn gpus_fill_whole_nodes() {
    let text = edit("gpus = 16", "gpus = 12").replace("dp = 4", "dp = 3");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "cluster.gpus",
            value: "12",
            at: "gpus = ^12",
            message: &["12 GPUs do not fill whole nodes of 8: 12 % 8 = 4"],
            allowed: &["8, 16", "fewer GPUs than one node"],
        },
    );
    // Fewer GPUs than one node is fine.
    let text = edit("gpus = 16", "gpus = 4").replace("dp = 4", "dp = 1");
    let s = parse_str(&text, "t.toml", &[]).unwrap();
    assert_eq!(s.cluster.gpus_per_node, 8);
}

#[test]
fn heads_must_split_over_tp() {
    let text = edit("hidden = 1024\nheads = 16", "hidden = 1536\nheads = 12")
        .replace("tp = 2", "tp = 8")
        .replace("dp = 4", "dp = 1");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.tp",
            value: "8",
            at: "tp = ^8",
            message: &["heads = 12 is not divisible by tp = 8"],
            allowed: &["tp dividing 12: 1, 2, 3, 4, 6, 12"],
        },
    );
}

#[test]
fn kv_heads_split_or_replicate_over_tp() {
    // kv_heads 4 < tp 8 with 8 % 4 == 0: replicated, accepted.
    let ok = edit("heads = 16", "heads = 16\nkv_heads = 4")
        .replace("tp = 2", "tp = 8")
        .replace("dp = 4", "dp = 1");
    let s = parse_str(&ok, "t.toml", &[]).unwrap();
    assert_eq!(s.model.kv_heads, 4);

    let text = edit(
        "hidden = 1024\nheads = 16",
        "hidden = 1536\nheads = 24\nkv_heads = 6",
    )
    .replace("tp = 2", "tp = 4")
    .replace("dp = 4", "dp = 2");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.tp",
            value: "4",
            at: "tp = ^4",
            message: &["kv_heads = 6 and tp = 4", "neither holds"],
            allowed: &["tp dividing 6"],
        },
    );
}

#[test]
fn heads_must_be_a_multiple_of_kv_heads() {
    let text = edit("heads = 16", "heads = 16\nkv_heads = 6");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "model.kv_heads",
            value: "6",
            at: "kv_heads = ^6",
            message: &["heads = 16 is not a multiple of kv_heads = 6"],
            allowed: &["1, 2, 4, 8, 16"],
        },
    );
}

#[test]
fn hidden_must_be_a_multiple_of_heads() {
    let text = edit("hidden = 1024", "hidden = 1000");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "model.hidden",
            value: "1000",
            at: "1000",
            message: &["hidden = 1000 is not a multiple of heads = 16"],
            allowed: &["multiple of 16"],
        },
    );
}

#[test]
fn head_dim_lifts_the_multiple_of_heads_rule_and_has_a_range() {
    // GPT-OSS-like: the heads are not hidden / heads wide, so hidden need not divide.
    let s = parse_str(
        &edit("hidden = 1024", "hidden = 1000\nhead_dim = 128"),
        "t.toml",
        &[],
    )
    .unwrap();
    assert_eq!(s.model.head_dim(), 128);
    assert_eq!(
        (s.model.q_width(), s.model.kv_width()),
        (16 * 128, 16 * 128)
    );
    let text = edit("hidden = 1024", "hidden = 1000");
    let e = expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "model.hidden",
            value: "1000",
            at: "1000",
            message: &["hidden = 1000 is not a multiple of heads = 16"],
            allowed: &["or model.head_dim"],
        },
    );
    assert!(e.to_string().contains("head_dim"), "{e}");
    let text = edit("heads = 16", "heads = 16\nhead_dim = 0");
    expect(
        &text,
        Expect {
            kind: ErrorKind::Invalid,
            key: "model.head_dim",
            value: "0",
            at: "head_dim = ^0",
            message: &["too"],
            allowed: &["integers from 1 to 65,536"],
        },
    );
}

#[test]
fn ffn_hidden_must_split_over_tp() {
    let text = edit("heads = 16", "heads = 16\nffn_hidden = 1001");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.tp",
            value: "2",
            at: "tp = ^2",
            message: &["ffn_hidden = 1001 is not divisible by tp = 2"],
            allowed: &["tp dividing 1001: 1, 7"],
        },
    );
}

#[test]
fn global_batch_must_divide_into_micro_batches() {
    let text = edit("global_batch = 32", "global_batch = 30");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "training.global_batch",
            value: "30",
            at: "global_batch = ^30",
            message: &["global_batch = 30 is not a positive multiple of micro_batch*dp = 1*4 = 4"],
            allowed: &["multiples of 4: 28, 32"],
        },
    );
    let text = edit("global_batch = 32", "global_batch = 2");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "training.global_batch",
            value: "2",
            at: "global_batch = ^2",
            message: &["micro_batch*dp = 1*4 = 4"],
            allowed: &["multiples of 4: 4, 8"],
        },
    );
}

/// Layers that divide neither evenly nor with the embedding and loss as layers are split
/// with lighter ends (`plan::partition`); a split that no rule finds names the keys.
#[test]
fn layers_split_automatically_or_say_which_keys_to_change() {
    let ok = edit("layers = 8", "layers = 9");
    let s = parse_str(&ok, "t.toml", &[]).unwrap();
    assert_eq!(s.parallel.layer_partition, None);
    let text = edit("layers = 8", "layers = 9").replace(
        "schedule = \"1f1b\"",
        "schedule = \"interleaved-1f1b\"\nvpp = 2",
    );
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "model.layers",
            value: "9",
            at: "layers = ^9",
            message: &[
                "9 layers do not split over pp = 2, vpp = 2: not evenly (9 % 4 = 1)",
                "not with the embedding and loss as layers (11 % 4 = 3)",
                "multiple of vpp = 2, but 9 is not",
            ],
            allowed: &["parallel.layer_partition of 4 counts summing to 9"],
        },
    );
    let ok = text.replace("vpp = 2", "vpp = 2\nlayer_partition = [2, 2, 2, 3]");
    let s = parse_str(&ok, "t.toml", &[]).unwrap();
    assert_eq!(s.parallel.layer_partition, Some(vec![2, 2, 2, 3]));
}

#[test]
fn megatron_split_keys_must_divide_the_pipeline() {
    let text = edit(
        "dp = 4",
        "dp = 4\naccount_for_embedding_in_pipeline_split = true",
    );
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.account_for_embedding_in_pipeline_split",
            value: "true",
            at: "account_for_embedding_in_pipeline_split = ^true",
            message: &[
                "8 layers plus 1 slot(s) for the embedding/loss = 9 do not divide over pp*vpp = 2",
            ],
            allowed: &["a multiple of pp*vpp = 2"],
        },
    );
    let both = text.replace(
        "= true",
        "= true\naccount_for_loss_in_pipeline_split = true",
    );
    let s = parse_str(&both, "t.toml", &[]).unwrap();
    assert!(s.parallel.account_for_loss_in_pipeline_split);
    let given = both.replace("dp = 4", "dp = 4\nlayer_partition = [4, 4]");
    expect(
        &given,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.layer_partition",
            value: "[4, 4]",
            at: "[4, 4]",
            message: &["layer_partition gives the split itself"],
            allowed: &["either layer_partition, or the account_for_*_in_pipeline_split keys"],
        },
    );
}

#[test]
fn layer_partition_rules() {
    let text = edit("dp = 4", "dp = 4\nlayer_partition = [4, 3, 1]");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.layer_partition",
            value: "[4, 3, 1]",
            at: "[4, 3, 1]",
            message: &["layer_partition has 3 entries, but there are pp*vpp = 2*1 = 2"],
            allowed: &["2 layer counts, each >= 1 but the first and the last, summing to 8"],
        },
    );
    let text = edit("dp = 4", "dp = 4\nlayer_partition = [4, 5]");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.layer_partition",
            value: "[4, 5]",
            at: "[4, 5]",
            message: &["layer_partition sums to 9 layers, but the model has 8"],
            allowed: &["summing to 8"],
        },
    );
    let text = edit("dp = 4", "dp = 4\nlayer_partition = [8, -1]");
    expect(
        &text,
        Expect {
            kind: ErrorKind::Type,
            key: "parallel.layer_partition[1]",
            value: "-1",
            at: "[8, ^-1]",
            message: &["not allowed in an array of layer counts"],
            allowed: &["layer counts"],
        },
    );
    // The last virtual stage (the loss's) may hold no layer; a stage in between may not.
    let text = edit("dp = 4", "dp = 4\nlayer_partition = [8, 0]");
    assert!(parse_str(&text, "t.toml", &[]).is_ok());
    let text = edit("pp = 2", "pp = 4").replace("dp = 4", "dp = 2\nlayer_partition = [4, 0, 2, 2]");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.layer_partition",
            value: "[4, 0, 2, 2]",
            at: "[4, 0, 2, 2]",
            message: &["an entry of 0 for a virtual stage that holds neither the embedding"],
            allowed: &["each >= 1 but the first and the last"],
        },
    );
}

#[test]
fn vpp_needs_the_interleaved_schedule() {
    let text = edit("dp = 4", "dp = 4\nvpp = 2");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.vpp",
            value: "2",
            at: "vpp = ^2",
            message: &["vpp = 2 virtual stages per device need the interleaved-1f1b schedule, but schedule = \"1f1b\""],
            allowed: &["vpp = 1, or schedule = \"interleaved-1f1b\""],
        },
    );
}

#[test]
fn interleaved_needs_vpp_two_and_pp_two() {
    let text = edit("schedule = \"1f1b\"", "schedule = \"interleaved-1f1b\"");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.schedule",
            value: "\"interleaved-1f1b\"",
            at: "\"interleaved-1f1b\"",
            message: &["at least 2 model chunks per device, but vpp = 1"],
            allowed: &["vpp >= 2"],
        },
    );
    let text = edit(
        "schedule = \"1f1b\"",
        "schedule = \"interleaved-1f1b\"\nvpp = 2",
    )
    .replace("pp = 2\ndp = 4", "pp = 1\ndp = 8");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.schedule",
            value: "\"interleaved-1f1b\"",
            at: "\"interleaved-1f1b\"",
            message: &["pp = 1"],
            allowed: &["pp >= 2"],
        },
    );
}

#[test]
fn interleaved_needs_microbatches_a_multiple_of_pp() {
    let text = edit(
        "schedule = \"1f1b\"",
        "schedule = \"interleaved-1f1b\"\nvpp = 2",
    )
    .replace("pp = 2\ndp = 4", "pp = 4\ndp = 2")
    .replace("global_batch = 32", "global_batch = 12");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "training.global_batch",
            value: "12",
            at: "global_batch = ^12",
            message: &[
                "global_batch / (micro_batch*dp) = 12 / (1*2) = 6, to be a multiple of pp = 4",
            ],
            allowed: &["global_batch a multiple of micro_batch*dp*pp = 8"],
        },
    );
}

#[test]
fn fsdp_is_zero_three() {
    let s = parse_str(&edit("dp = 4", "dp = 4\nfsdp = true"), "t.toml", &[]).unwrap();
    assert_eq!(s.parallel.zero, 3);
    let text = edit("dp = 4", "dp = 4\nzero = 1\nfsdp = true");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.zero",
            value: "1",
            at: "zero = ^1",
            message: &["fsdp = true shards parameters, gradients and optimizer state (ZeRO-3), but zero = 1"],
            allowed: &["zero = 3"],
        },
    );
}

#[test]
fn fsdp_degree_must_divide_dp_and_needs_zero_three() {
    let s = parse_str(
        &edit("dp = 4", "dp = 4\nfsdp = true\nfsdp_degree = 2"),
        "t.toml",
        &[],
    )
    .unwrap();
    assert_eq!((s.parallel.fsdp_degree(), s.parallel.dp_replicas()), (2, 2));
    let text = edit("dp = 4", "dp = 4\nfsdp = true\nfsdp_degree = 3");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.fsdp_degree",
            value: "3",
            at: "fsdp_degree = ^3",
            message: &["fsdp_degree = 3 does not divide dp = 4"],
            allowed: &["fsdp_degree dividing dp = 4: 1, 2, 4"],
        },
    );
    // dp derived from the GPU count is named the same way.
    let text = edit("dp = 4", "zero = 3\nfsdp_degree = 8");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.fsdp_degree",
            value: "8",
            at: "fsdp_degree = ^8",
            message: &["fsdp_degree = 8 does not divide dp = 4"],
            allowed: &["1, 2, 4"],
        },
    );
    // fsdp_degree = dp changes nothing, with any ZeRO stage (a layout search writes it).
    let s = parse_str(
        &edit("dp = 4", "dp = 4\nzero = 1\nfsdp_degree = 4"),
        "t.toml",
        &[],
    )
    .unwrap();
    assert_eq!((s.parallel.fsdp_degree(), s.parallel.dp_replicas()), (4, 1));
    let text = edit("dp = 4", "dp = 4\nzero = 1\nfsdp_degree = 2");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.fsdp_degree",
            value: "2",
            at: "fsdp_degree = ^2",
            message: &["only ZeRO-3 / FSDP", "zero = 1"],
            allowed: &["fsdp = true or zero = 3"],
        },
    );
}

#[test]
fn offloading_parameters_needs_zero_three() {
    let text = edit("micro_batch = 1", "micro_batch = 1\noffload = \"params\"");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "training.offload",
            value: "\"params\"",
            at: "\"params\"",
            message: &["zero = 0"],
            allowed: &["zero = 3 or fsdp = true"],
        },
    );
}

/// A file written when `ep` multiplied the GPU count (`tp*pp*cp*ep*dp = gpus`) is refused with
/// what to write now; an `ep` that does not divide `dp` is refused with the divisors.
#[test]
fn expert_parallelism_folds_into_data_parallelism() {
    let text =
        edit("vocab = 32000", "vocab = 32000\nexperts = 4").replace("dp = 4", "dp = 2\nep = 2");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.dp",
            value: "2",
            at: "dp = ^2",
            message: &[
                "ep no longer multiplies the GPU count",
                "tp*pp*cp*dp = 8 covers only part of the 16 GPUs",
            ],
            allowed: &["dp = 4 (the old dp times ep)", "leave dp out"],
        },
    );
    let text =
        edit("vocab = 32000", "vocab = 32000\nexperts = 6").replace("dp = 4", "dp = 4\nep = 3");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.ep",
            value: "3",
            at: "ep = ^3",
            message: &["ep = 3 does not divide dp = 4"],
            allowed: &["ep dividing dp: 1, 2, 4"],
        },
    );
    // Without dp, dp is gpus / (tp*pp*cp) whatever ep is.
    let text = edit("vocab = 32000", "vocab = 32000\nexperts = 4").replace("dp = 4\n", "ep = 4\n");
    let s = parse_str(&text, "t.toml", &[]).unwrap();
    assert_eq!((s.parallel.dp, s.parallel.ep, s.parallel.edp()), (4, 4, 1));
}

#[test]
fn expert_parallel_rules() {
    let text = edit("dp = 4", "dp = 4\nep = 2");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.ep",
            value: "2",
            at: "ep = ^2",
            message: &["the model is dense"],
            allowed: &["ep = 1, or a mixture-of-experts model"],
        },
    );
    let text =
        edit("vocab = 32000", "vocab = 32000\nexperts = 6").replace("dp = 4", "dp = 4\nep = 4");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.ep",
            value: "4",
            at: "ep = ^4",
            message: &["experts = 6 is not divisible by ep = 4"],
            allowed: &["ep dividing 6: 1, 2, 3, 6"],
        },
    );
    let text = edit("vocab = 32000", "vocab = 32000\nexperts = 4\ntop_k = 5");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "model.top_k",
            value: "5",
            at: "top_k = ^5",
            message: &["more experts than the 4 there are"],
            allowed: &["1 to 4"],
        },
    );
    let text = edit("vocab = 32000", "vocab = 32000\ntop_k = 2");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "model.top_k",
            value: "2",
            at: "top_k = ^2",
            message: &["only meaningful for a mixture-of-experts model"],
            allowed: &["set model.experts"],
        },
    );
    let text = edit(
        "vocab = 32000",
        "vocab = 32000\nexperts = 8\ntop_k = 2\nrouter_groups = 3",
    );
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "model.router_groups",
            value: "3",
            at: "router_groups = ^3",
            message: &["3 groups do not divide the 8 experts"],
            allowed: &["a divisor of model.experts"],
        },
    );
    let text = edit(
        "vocab = 32000",
        "vocab = 32000\nexperts = 8\ntop_k = 4\nrouter_groups = 4\nrouter_group_top_k = 1",
    );
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "model.router_group_top_k",
            value: "1",
            at: "router_group_top_k = ^1",
            message: &["1 of 4 groups of 2 experts cannot give a token its 4"],
            allowed: &["at most model.router_groups"],
        },
    );
}

#[test]
fn context_parallel_must_divide_the_sequence() {
    let text = edit("seq_len = 1024", "seq_len = 1022").replace("dp = 4", "cp = 4");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.cp",
            value: "4",
            at: "cp = ^4",
            message: &["seq_len = 1022 is not divisible by cp = 4"],
            allowed: &["cp dividing 1022"],
        },
    );
}

#[test]
fn sequence_parallel_must_divide_the_sequence() {
    let text = edit("seq_len = 1024", "seq_len = 1023")
        .replace("dp = 4", "dp = 4\nsequence_parallel = true");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.sequence_parallel",
            value: "true",
            at: "true",
            message: &["tp*cp = 2*1 = 2 ranks, but seq_len = 1023 % 2 = 1"],
            allowed: &["seq_len a multiple of 2, or sequence_parallel = false"],
        },
    );
}

#[test]
fn absurd_model_size_is_rejected() {
    let text = edit(
        "layers = 8\nhidden = 1024",
        "layers = 65536\nhidden = 1048576",
    );
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "model.hidden",
            value: "1048576",
            at: "1048576",
            message: &["parameters, beyond twin's limit"],
            allowed: &["a smaller model"],
        },
    );
    let text = edit("seq_len = 1024", "seq_len = 16777216");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "model.seq_len",
            value: "16777216",
            at: "16777216",
            message: &["one micro batch's forward pass would be about", "FLOPs"],
            allowed: &["a shorter sequence"],
        },
    );
}

#[test]
fn a_big_model_that_does_not_fit_is_not_an_error() {
    // GPT-3 175B on a single GPU: memory is a result, not a validation error.
    let text = "[model]\npreset = \"gpt3-175b\"\n[cluster]\ngpu = \"a100-sxm-80gb\"\ngpus = 1\nnode = \"dgx-a100\"\n[training]\nglobal_batch = 1\n";
    assert!(parse_str(text, "t.toml", &[]).is_ok());
}

#[test]
fn preset_and_hf_config_are_exclusive() {
    let text = edit(
        "layers = 8",
        "preset = \"llama2-7b\"\nhf_config = \"x.json\"\nlayers = 8",
    );
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "model.hf_config",
            value: "\"x.json\"",
            at: "\"x.json\"",
            message: &["give one"],
            allowed: &["either model.preset or model.hf_config"],
        },
    );
}

#[test]
fn unknown_presets() {
    let text = edit("layers = 8", "preset = \"llama3-70\"\nlayers = 8");
    expect(
        &text,
        Expect {
            kind: ErrorKind::Invalid,
            key: "model.preset",
            value: "\"llama3-70\"",
            at: "\"llama3-70\"",
            message: &["unknown model preset; did you mean `llama3-70b`?"],
            allowed: &["gpt3-175b", "mixtral-8x7b"],
        },
    );
    let text = edit("gpu = \"a100-sxm-80gb\"", "gpu = \"a100\"");
    expect(
        &text,
        Expect {
            kind: ErrorKind::Invalid,
            key: "cluster.gpu",
            value: "\"a100\"",
            at: "\"a100\"",
            message: &["unknown GPU preset"],
            allowed: &[
                "a100-sxm-80gb, h100-sxm-80gb, h100-sxm-96gb-500w, h200-141gb, h800-sxm-80gb, b200-sxm-180gb, gb200",
            ],
        },
    );
    let text = edit("node = \"dgx-a100\"", "node = \"dgx-b300\"");
    expect(
        &text,
        Expect {
            kind: ErrorKind::Invalid,
            key: "cluster.node",
            value: "\"dgx-b300\"",
            at: "\"dgx-b300\"",
            message: &["unknown node preset"],
            allowed: &[
                "dgx-a100, dgx-h100, grand-teton, hgx-h800, dgx-h200, hgx-h200, dgx-b200, gb200-nvl72, custom",
            ],
        },
    );
}

#[test]
fn gpu_of_the_wrong_type() {
    let text = edit("gpu = \"a100-sxm-80gb\"", "gpu = 5");
    expect(
        &text,
        Expect {
            kind: ErrorKind::Type,
            key: "cluster.gpu",
            value: "5",
            at: "gpu = ^5",
            message: &["expected a preset name or a table, found an integer"],
            allowed: &["a100-sxm-80gb"],
        },
    );
}

#[test]
fn missing_required_keys() {
    let text = BASE.replace("global_batch = 32\n", "");
    let e = expect(
        &text,
        Expect {
            kind: ErrorKind::Missing,
            key: "training.global_batch",
            value: "",
            at: "[training]",
            message: &["required key is missing"],
            allowed: &[],
        },
    );
    assert!(e
        .to_string()
        .contains("training.global_batch: required key is missing"));
    let text = BASE.replace("gpu = \"a100-sxm-80gb\"\n", "");
    expect(
        &text,
        Expect {
            kind: ErrorKind::Missing,
            key: "cluster.gpu",
            value: "",
            at: "[cluster]",
            message: &["required key is missing"],
            allowed: &[],
        },
    );
    // A node of its own (the GPU preset would otherwise bring its usual node's links).
    let text = BASE.replace(
        "node = \"dgx-a100\"\n",
        "node = \"custom\"\ngpus_per_node = 8\n",
    );
    expect(
        &text,
        Expect {
            kind: ErrorKind::Missing,
            key: "cluster.intra_node.bandwidth_bytes_per_s",
            value: "",
            at: "[cluster]",
            message: &["or set cluster.node to a preset"],
            allowed: &[],
        },
    );
    // A GPU of its own has no usual node: say what to give.
    let text = BASE.replace(
        "gpu = \"a100-sxm-80gb\"\n",
        "gpu = { peak_bf16_flops_per_s = 1e15, hbm_bytes = 96e9, hbm_bandwidth_bytes_per_s = 4e12 }\n",
    )
    .replace("node = \"dgx-a100\"\n", "");
    expect(
        &text,
        Expect {
            kind: ErrorKind::Missing,
            key: "cluster.gpus_per_node",
            value: "",
            at: "[cluster]",
            message: &["or set cluster.node to a preset; a GPU without a preset has no usual node"],
            allowed: &[],
        },
    );
    let text = BASE.replace("heads = 16\n", "");
    expect(
        &text,
        Expect {
            kind: ErrorKind::Missing,
            key: "model.heads",
            value: "",
            at: "[model]",
            message: &["or give model.preset or model.hf_config"],
            allowed: &[],
        },
    );
    // A missing table has no line to point at; the file is still named.
    let text = BASE.replace("[training]\nglobal_batch = 32\nmicro_batch = 1\n", "");
    let e = parse_str(&text, "t.toml", &[]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Missing);
    assert_eq!(
        e.to_string(),
        "t.toml: training.global_batch: required key is missing (sequences per step, whole job)"
    );
}

#[test]
fn both_spellings_of_a_link_field() {
    let text = edit(
        "node = \"dgx-a100\"",
        "node = \"dgx-a100\"\n[cluster.inter_node]\nlatency_us = 5\nlatency_ns = 5000",
    );
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "cluster.inter_node.latency_ns",
            value: "5000",
            at: "latency_ns = ^5000",
            message: &["cluster.inter_node.latency_us is also given"],
            allowed: &["either latency_us or latency_ns"],
        },
    );
}

#[test]
fn order_must_be_a_permutation() {
    for (order, message) in [
        (
            "[\"tp\", \"cp\", \"ep\", \"dp\"]",
            "names 4 axes; all five are needed",
        ),
        (
            "[\"tp\", \"tp\", \"ep\", \"dp\", \"pp\"]",
            "axis \"tp\" appears twice",
        ),
        (
            "[\"tp\", \"xp\", \"ep\", \"dp\", \"pp\"]",
            "unknown axis \"xp\"",
        ),
    ] {
        let text = edit("dp = 4", &format!("dp = 4\norder = {order}"));
        expect(
            &text,
            Expect {
                kind: ErrorKind::Invalid,
                key: "parallel.order",
                value: order,
                at: order,
                message: &[message],
                allowed: &["a permutation of"],
            },
        );
    }
    let text = edit(
        "dp = 4",
        "dp = 4\norder = [\"pp\", \"dp\", \"ep\", \"cp\", \"tp\"]",
    );
    let s = parse_str(&text, "t.toml", &[]).unwrap();
    assert_eq!(
        s.parallel.order,
        [Axis::Pp, Axis::Dp, Axis::Ep, Axis::Cp, Axis::Tp]
    );
}

#[test]
fn training_strings() {
    for (line, key, value, message, allowed) in [
        (
            "precision = \"fp64\"",
            "training.precision",
            "\"fp64\"",
            "unknown precision",
            "fp32, fp16, bf16, fp8",
        ),
        (
            "recompute = \"some\"",
            "training.recompute",
            "\"some\"",
            "unknown recompute policy",
            "none, selective, full",
        ),
        (
            "grad_compression = \"topk:2\"",
            "training.grad_compression",
            "\"topk:2\"",
            "(0, 1]",
            "topk:F",
        ),
        (
            "grad_compression = \"zip\"",
            "training.grad_compression",
            "\"zip\"",
            "unknown gradient compression",
            "none, fp16, int8",
        ),
        (
            "sync = \"delayed:0\"",
            "training.sync",
            "\"delayed:0\"",
            "step count",
            "delayed:N",
        ),
        (
            "sync = \"sometimes\"",
            "training.sync",
            "\"sometimes\"",
            "unknown sync mode",
            "sync, async",
        ),
        (
            "optimizer = \"lion\"",
            "training.optimizer",
            "\"lion\"",
            "unknown optimizer",
            "adam, sgd",
        ),
        (
            "offload = \"disk\"",
            "training.offload",
            "\"disk\"",
            "unknown offload mode",
            "none, optimizer, params",
        ),
    ] {
        let text = edit("micro_batch = 1", &format!("micro_batch = 1\n{line}"));
        expect(
            &text,
            Expect {
                kind: ErrorKind::Invalid,
                key,
                value,
                at: value,
                message: &[message],
                allowed: &[allowed],
            },
        );
    }
    let text = edit(
        "micro_batch = 1",
        "micro_batch = 1\nsync = \"delayed:4\"\ngrad_compression = \"topk:0.01\"",
    );
    let s = parse_str(&text, "t.toml", &[]).unwrap();
    assert_eq!(s.training.sync, SyncMode::Delayed(4));
    assert_eq!(s.training.grad_compression, GradCompression::Topk(0.01));
}

#[test]
fn missing_file_is_an_io_error() {
    let e = load(std::path::Path::new("/nonexistent/x.toml"), &[]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Io);
    assert_eq!(e.origin, "/nonexistent/x.toml");
    assert!(
        e.to_string()
            .starts_with("/nonexistent/x.toml: cannot read scenario file"),
        "{e}"
    );
}

#[test]
fn ulysses_needs_the_heads_of_a_tp_rank_to_split_over_cp() {
    let text = edit("hidden = 1024\nheads = 16", "hidden = 1536\nheads = 12")
        .replace("dp = 4", "dp = 1\ncp = 4\ncp_algorithm = \"ulysses\"");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.cp_algorithm",
            value: "\"ulysses\"",
            at: "cp_algorithm = ^\"ulysses\"",
            message: &["heads / tp = 12 / 2 = 6 is not divisible by cp = 4"],
            allowed: &["cp dividing 6: 1, 2, 3, 6", "\"all-gather\" or \"ring\""],
        },
    );
    // Sixteen heads split: 8 per tp rank, 2 per cp rank.
    let ok = edit("dp = 4", "dp = 1\ncp = 4\ncp_algorithm = \"ulysses\"");
    parse_str(&ok, "t.toml", &[]).unwrap();
}

#[test]
fn ring_context_parallelism_needs_flash_attention() {
    let text = edit("dp = 4", "dp = 1\ncp = 4\ncp_algorithm = \"ring\"").replace(
        "micro_batch = 1",
        "micro_batch = 1\nflash_attention = false",
    );
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.cp_algorithm",
            value: "\"ring\"",
            at: "cp_algorithm = ^\"ring\"",
            message: &["needs flash_attention = true"],
            allowed: &["flash_attention = true"],
        },
    );
}

#[test]
fn an_unknown_cp_algorithm_lists_the_three() {
    let text = edit("dp = 4", "dp = 1\ncp = 4\ncp_algorithm = \"p2p\"");
    expect(
        &text,
        Expect {
            kind: ErrorKind::Invalid,
            key: "parallel.cp_algorithm",
            value: "\"p2p\"",
            at: "\"p2p\"",
            message: &["unknown context-parallel algorithm"],
            allowed: &["all-gather, ring, ulysses"],
        },
    );
}

/// `pipeline_layout` in Megatron-Core's syntax sets the split; it is refused beside
/// `layer_partition`, when it is not a layout, and when its stages put the embedding, the loss
/// or the multi-token prediction modules elsewhere than the model has them.
#[test]
fn pipeline_layout_rules() {
    let text = edit("dp = 4", "dp = 4\npipeline_layout = \"Et|(t)*7L\"");
    let s = parse_str(&text, "t.toml", &[]).unwrap();
    assert_eq!(s.parallel.layer_partition, Some(vec![1, 7]));
    let text = edit(
        "dp = 4",
        "dp = 4\npipeline_layout = \"Ett|(t)*6L\"\nlayer_partition = [2, 6]",
    );
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.pipeline_layout",
            value: "\"Ett|(t)*6L\"",
            at: "\"Ett|(t)*6L\"",
            message: &["both give the split"],
            allowed: &["one of them"],
        },
    );
    let text = edit("dp = 4", "dp = 4\npipeline_layout = \"Et|(t*7L\"");
    expect(
        &text,
        Expect {
            kind: ErrorKind::Type,
            key: "parallel.pipeline_layout",
            value: "\"Et|(t*7L\"",
            at: "\"Et|(t*7L\"",
            message: &["not a pipeline layout", "without its `)`"],
            allowed: &["separated by |"],
        },
    );
    let text = edit("dp = 4", "dp = 4\npipeline_layout = \"Et|(t)*7mL\"");
    expect(
        &text,
        Expect {
            kind: ErrorKind::CrossField,
            key: "parallel.pipeline_layout",
            value: "\"Et|(t)*7mL\"",
            at: "\"Et|(t)*7mL\"",
            message: &["1 multi-token prediction module(s) (m), the model 0"],
            allowed: &["model.mtp_layers"],
        },
    );
}
