//! `[model] hybrid_pattern` and `[model.mamba]`: what they read to, that they survive the
//! scenario writer, and that each refusal names the key and what to write instead.

use super::{Block, Mamba, Scenario, ScenarioError};

/// A 6-layer hybrid (Mamba, MoE, attention) on 2 GPUs, with `extra` in `[model]` and
/// `parallel` in `[parallel]`.
fn text(pattern: &str, extra: &str, parallel: &str) -> String {
    format!(
        "[model]\nlayers = 6\nhidden = 64\nheads = 4\nseq_len = 128\nvocab = 1000\n\
         experts = 4\ntop_k = 2\nhybrid_pattern = \"{pattern}\"\n{extra}\
         [model.mamba]\nheads = 8\nhead_dim = 16\nstate = 32\ngroups = 2\n\
         [cluster]\ngpu = \"h100-sxm-80gb\"\ngpus = 2\n[parallel]\n{parallel}\
         [training]\nglobal_batch = 8\n"
    )
}

fn resolve(text: &str) -> Result<Scenario, ScenarioError> {
    super::resolve_text(text, "hybrid.toml", &[])
}

fn refused(text: &str) -> String {
    super::refused_text(text, "hybrid.toml")
}

#[test]
fn a_hybrid_pattern_reads_counts_and_round_trips() {
    let s = resolve(&text("MEM*E-", "", "")).unwrap();
    let h = s.model.hybrid.as_ref().unwrap();
    assert_eq!(h.pattern, "MEM*E-");
    assert_eq!(
        h.mamba,
        Some(Mamba {
            heads: 8,
            head_dim: 16,
            state: 32,
            groups: 2,
            conv_kernel: 4,
            chunk: 128,
        })
    );
    let mamba = h.mamba.unwrap();
    assert_eq!(mamba.inner(), 128);
    assert_eq!(mamba.in_proj_width(), 2 * 128 + 2 * 2 * 32 + 8);
    assert_eq!(mamba.conv_channels(), 128 + 2 * 2 * 32);
    assert_eq!(h.count_in(Block::Mamba, 0, 6), 2);
    assert_eq!(h.count_in(Block::Moe, 0, 6), 2);
    assert_eq!(h.count_in(Block::Attention, 0, 6), 1);
    assert_eq!(h.count_in(Block::Mlp, 0, 6), 1);
    // A range counts its own layers only: layers 2..5 are "M*E".
    assert_eq!(h.count_in(Block::Mamba, 2, 3), 1);
    assert_eq!(h.count_in(Block::Moe, 2, 3), 1);
    assert_eq!(s.model.moe_layers_in(0, 6), 2);
    assert_eq!(s.model.moe_layers_in(3, 3), 1);
    let again = resolve(&super::emit::to_toml(&s)).unwrap();
    assert_eq!(again.model, s.model);
}

#[test]
fn a_pattern_of_the_wrong_length_or_symbols_is_refused() {
    let e = refused(&text("MEM*E", "", ""));
    assert!(
        e.contains("model.hybrid_pattern") && e.contains("5 symbols for 6 layers"),
        "{e}"
    );
    let e = refused(&text("MEM*EX", "", ""));
    assert!(
        e.contains("'X' at position 5") && e.contains("M (Mamba-2 mixer)"),
        "{e}"
    );
    let e = refused(&text("MEM|EE", "", ""));
    assert!(e.contains("layer_partition"), "{e}");
    // `E` layers need experts, and experts need an `E` layer.
    let e = refused(&text("MEM*E-", "", "").replace("experts = 4\ntop_k = 2\n", ""));
    assert!(e.contains("`E` layers need experts"), "{e}");
    let e = refused(&text("MMM*--", "", ""));
    assert!(e.contains("no `E` layer"), "{e}");
}

#[test]
fn what_a_hybrid_model_does_not_model_is_refused() {
    let e = refused(&text("MEM*E-", "dense_layers = 1\n", ""));
    assert!(
        e.contains("model.dense_layers") && e.contains("places the MoE layers"),
        "{e}"
    );
    let e = refused(&text("MEM*E-", "moe_every = 2\n", ""));
    assert!(e.contains("model.moe_every"), "{e}");
    let e = refused(&text("MEM*E-", "mtp_layers = 1\n", ""));
    assert!(
        e.contains("model.mtp_layers") && e.contains("hybrid"),
        "{e}"
    );
    let e = refused(&text("MEM*E-", "sliding_window = 16\n", ""));
    assert!(e.contains("model.sliding_window"), "{e}");
    // No `M`: no [model.mamba]; an `M`: [model.mamba] is needed.
    let e = refused(&text("EEE*E-", "", ""));
    assert!(e.contains("model.mamba") && e.contains("no layer"), "{e}");
    let no_mamba = text("MEM*E-", "", "").replace(
        "[model.mamba]\nheads = 8\nhead_dim = 16\nstate = 32\ngroups = 2\n",
        "",
    );
    let e = refused(&no_mamba);
    assert!(e.contains("model.mamba") && e.contains("missing"), "{e}");
    let e = refused(&text("MEM*E-", "", "").replace("groups = 2", "groups = 3"));
    assert!(e.contains("model.mamba.groups"), "{e}");
}

#[test]
fn tensor_and_context_parallelism_must_fit_the_mixer() {
    // 8 heads and 2 groups split over tp 2, not over tp 4 (4 GPUs: the groups do not split).
    resolve(&text("MEM*E-", "", "tp = 2\n")).unwrap();
    let four = text("MEM*E-", "", "tp = 4\n").replace("gpus = 2", "gpus = 4");
    let e = refused(&four);
    assert!(
        e.contains("model.mamba.groups") && e.contains("tp = 4"),
        "{e}"
    );
    let e = refused(&text("MEM*E-", "", "cp = 2\n"));
    assert!(e.contains("parallel.cp") && e.contains("Mamba"), "{e}");
}
