//! `[training] recompute_modules`: what it reads to, that it survives the scenario writer, and
//! that each refusal names the key and what to write instead.

use super::{RecomputeModules, Scenario, ScenarioError};

/// A small MoE model with a shared expert on 2 GPUs, `training` added to `[training]`.
fn text(training: &str) -> String {
    format!(
        "[model]\nlayers = 4\nhidden = 64\nheads = 4\nseq_len = 128\nvocab = 1000\n\
         experts = 4\ntop_k = 2\nshared_experts = 1\n\
         [cluster]\ngpu = \"h100-sxm-80gb\"\ngpus = 2\n\
         [training]\nglobal_batch = 8\n{training}"
    )
}

fn resolve(text: &str) -> Result<Scenario, ScenarioError> {
    super::resolve_text(text, "recompute.toml", &[])
}

fn refused(text: &str) -> String {
    super::refused_text(text, "recompute.toml")
}

#[test]
fn recompute_modules_read_and_round_trip() {
    let plain = resolve(&text("recompute = \"selective\"\n")).unwrap();
    assert_eq!(plain.training.recompute_modules, None);
    let s = resolve(&text(
        "recompute = \"selective\"\nrecompute_modules = [\"moe_act\", \"layernorm\", \"moe\"]\n",
    ))
    .unwrap();
    let m = s.training.recompute_modules.unwrap();
    assert!(m.moe && m.moe_act && m.layernorm);
    assert!(!(m.core_attn || m.mlp || m.mla_up_proj || m.shared_experts));
    // Written back in Megatron-Core's order.
    assert_eq!(m.names(), ["layernorm", "moe_act", "moe"]);
    let again = resolve(&super::emit::to_toml(&s)).unwrap();
    assert_eq!(again.training, s.training);
    assert_eq!(RecomputeModules::ATTENTION_CORE.names(), ["core_attn"]);
}

#[test]
fn what_recompute_modules_cannot_say_is_refused() {
    let e = refused(&text(
        "recompute = \"selective\"\nrecompute_modules = [\"attention\"]\n",
    ));
    assert!(
        e.contains("training.recompute_modules") && e.contains("unknown module"),
        "{e}"
    );
    assert!(e.contains("core_attn"), "{e}");
    let e = refused(&text(
        "recompute = \"selective\"\nrecompute_modules = [\"moe\", \"moe\"]\n",
    ));
    assert!(e.contains("appears twice"), "{e}");
    // Read under selective recompute only, as Megatron-Core reads it: kept, and ignored, under
    // full recompute (a search over `recompute` keeps it).
    resolve(&text(
        "recompute = \"full\"\nrecompute_modules = [\"moe\"]\n",
    ))
    .unwrap();
    let e = refused(&text(
        "recompute = \"selective\"\nframework = \"torchtitan\"\nrecompute_modules = [\"moe\"]\n",
    ));
    assert!(
        e.contains("torchtitan") && e.contains("not by modules"),
        "{e}"
    );
    let e = refused(&text(
        "recompute = \"selective\"\nrecompute_modules = [\"mla_up_proj\"]\n",
    ));
    assert!(e.contains("mla_up_proj needs [model.mla]"), "{e}");
    let dense = text("recompute = \"selective\"\nrecompute_modules = [\"moe_act\"]\n")
        .replace("experts = 4\ntop_k = 2\nshared_experts = 1\n", "");
    let e = refused(&dense);
    assert!(e.contains("moe and moe_act need model.experts"), "{e}");
}
