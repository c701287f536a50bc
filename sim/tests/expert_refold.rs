//! Expert layers that refold a stage's ranks (`etp = 1` under `tp = 2`, and expert parallelism
//! under context parallelism) run end to end: the schedule validates, every rank finishes,
//! simulating one representative per stage gives the step of simulating every rank, and the
//! scenario file says it as Megatron-Core does.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_sim::plan::{GroupKind, Plan};
use twin_sim::setup::parse_str;

mod common;
use common::step_collapsed_as_in_full;

const TEXT: &str = r#"
[model]
layers = 4
hidden = 1024
heads = 16
seq_len = 1024
vocab = 32000
experts = 8
top_k = 2
moe_ffn_hidden = 512
[cluster]
gpu = "h100-sxm-80gb"
gpus = 32
[parallel]
tp = 2
pp = 2
ep = 8
etp = 1
sequence_parallel = true
[training]
global_batch = 64
"#;

#[test]
fn a_refolded_expert_layout_simulates_collapsed_as_in_full() {
    let s = parse_str(TEXT, "refold.toml", &[]).unwrap();
    assert_eq!(
        (s.parallel.dp, s.parallel.etp(), s.parallel.edp()),
        (8, 1, 2)
    );
    let plan = Plan::new(&s).unwrap();
    // ep 8 spans the tp pairs of four dp ranks: consecutive ranks of the stage.
    let ep = plan.group(plan.group_of(0, GroupKind::Ep));
    assert_eq!(ep.members, (0..8).collect::<Vec<_>>());
    step_collapsed_as_in_full(&s);
}

/// Under context parallelism the expert layers refold the stage's ranks, with `etp = 1` under
/// `tp = 2` and with `etp = tp`: the ep group takes the context-parallel ranks first, so at
/// tp 1, cp 2 and ep 8 on 16 GPUs it is one node's 8 consecutive ranks, where ep along dp
/// would span both nodes (ranks 0, 2, ..., 14). Both layouts simulate, collapsed as in full.
#[test]
fn expert_layers_under_context_parallelism_run_end_to_end() {
    let s = parse_str(
        TEXT,
        "refold.toml",
        &["parallel.cp=2".into(), "cluster.gpus=64".into()],
    )
    .unwrap();
    assert_eq!(
        (s.parallel.dp, s.parallel.etp(), s.parallel.edp()),
        (8, 1, 4)
    );
    step_collapsed_as_in_full(&s);

    let s = parse_str(
        TEXT,
        "cp.toml",
        &[
            "parallel.tp=1".into(),
            "parallel.pp=1".into(),
            "parallel.cp=2".into(),
            "parallel.etp=1".into(),
            "parallel.sequence_parallel=false".into(),
            "cluster.gpus=16".into(),
        ],
    )
    .unwrap();
    assert_eq!((s.parallel.dp, s.parallel.edp()), (8, 2));
    let plan = Plan::new(&s).unwrap();
    let ep = plan.group(plan.group_of(0, GroupKind::Ep));
    assert_eq!(ep.members, (0..8).collect::<Vec<_>>());
    assert_eq!(ep.nodes, 1);
    step_collapsed_as_in_full(&s);
}

/// Expert tensor parallelism between 1 and tp (tp 4, etp 2, ep 8 over 16 ranks a stage): the
/// etp pairs are consecutive ranks, the ep groups 8 ranks 2 apart, and the layout simulates,
/// collapsed as in full.
#[test]
fn expert_tensor_parallelism_between_one_and_tp_runs_end_to_end() {
    let s = parse_str(
        TEXT,
        "r.toml",
        &["parallel.tp=4".into(), "parallel.etp=2".into()],
    )
    .unwrap();
    assert_eq!(
        (s.parallel.dp, s.parallel.etp(), s.parallel.edp()),
        (4, 2, 1)
    );
    let plan = Plan::new(&s).unwrap();
    let etp = plan.group(plan.group_of(3, GroupKind::Etp));
    assert_eq!(etp.members, vec![2, 3]);
    let ep = plan.group(plan.group_of(3, GroupKind::Ep));
    assert_eq!(ep.members, (1..16).step_by(2).collect::<Vec<_>>());
    step_collapsed_as_in_full(&s);
}

#[test]
fn uneven_expert_splits_and_missing_sequence_parallelism_are_refused() {
    let e = parse_str(
        TEXT,
        "r.toml",
        &["parallel.tp=4".into(), "parallel.etp=3".into()],
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("etp = 3 does not divide the experts' width moe_ffn_hidden = 512"),
        "{e}"
    );
    let e = parse_str(TEXT, "r.toml", &["parallel.sequence_parallel=false".into()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs sequence parallelism"), "{e}");
    // Expert parallelism under context parallelism on a dense model names ep, not etp.
    let dense = TEXT
        .replace("experts = 8\ntop_k = 2\nmoe_ffn_hidden = 512\n", "")
        .replace("etp = 1\n", "");
    let e = parse_str(
        &dense,
        "r.toml",
        &["parallel.cp=2".into(), "cluster.gpus=64".into()],
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("ep shards experts, but the model is dense (ep = 8 under cp = 2)"),
        "{e}"
    );
    let e = parse_str(TEXT, "r.toml", &["parallel.ep=3".into()])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ep = 3 does not divide tp*cp*dp/etp = 2*1*8/1 = 16"),
        "{e}"
    );
}

/// Every mixture-of-experts, latent-attention and expert-parallel key survives the scenario
/// writer (what `sweep` and `validate --emit-scenarios` write out and read back).
#[test]
fn moe_and_mla_keys_survive_a_round_trip_through_the_writer() {
    let text = TEXT.replace(
        "moe_ffn_hidden = 512\n",
        "moe_ffn_hidden = 512\nshared_experts = 2\nshared_expert_ffn_hidden = 256\n\
         dense_layers = 1\ndense_ffn_hidden = 2048\nqkv_bias = true\nmtp_layers = 1\n\
         [model.mla]\nq_lora_rank = 64\nkv_lora_rank = 32\nqk_nope_head_dim = 32\n\
         qk_rope_head_dim = 16\nv_head_dim = 32\n",
    );
    let s = parse_str(&text, "refold.toml", &[]).unwrap();
    assert!(s.model.mla.is_some() && s.model.qkv_bias && s.model.mtp_layers == 1);
    let again = parse_str(&twin_sim::scenario::to_toml(&s), "again.toml", &[]).unwrap();
    assert_eq!(again.model, s.model);
    assert_eq!(again.parallel, s.parallel);
}
