//! Megatron-Core's selective recompute by module (`training.recompute_modules`): what each
//! module's recompute runs again and what it stops saving, written out term by term on one
//! layer of a small model (b 2, s 256, hidden 256, bf16, one GPU per expert-parallel rank).
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_sim::plan::{GroupKind, Plan};
use twin_sim::scenario::Scenario;
use twin_sim::schedule::CollectiveKind;
use twin_sim::setup::parse_str;
use twin_sim::workload::{layers_work, ChunkWork};

const T: u64 = 2 * 256;
const H: u64 = 256;
/// Routed experts' width, shared expert's width, experts, experts a token.
const F: u64 = 128;
const FS: u64 = 192;
const E: u64 = 4;
const K: u64 = 2;

/// One layer of a gated-MLP model, MoE (4 experts of 128, 2 a token, one shared expert of 192,
/// expert parallelism 2) or dense (MLP 512), with `modules` as `recompute_modules` (`None`:
/// the key left out).
fn scenario(moe: bool, modules: Option<&str>) -> Scenario {
    let experts = if moe {
        "experts = 4\ntop_k = 2\nmoe_ffn_hidden = 128\nshared_experts = 1\n\
         shared_expert_ffn_hidden = 192\n"
    } else {
        ""
    };
    let ep = if moe { "ep = 2\n" } else { "" };
    let modules = modules.map_or(String::new(), |m| format!("recompute_modules = {m}\n"));
    let text = format!(
        "[model]\nlayers = 1\nhidden = 256\nheads = 4\nffn_hidden = 512\nseq_len = 256\n\
         vocab = 1000\ngated_mlp = true\n{experts}\
         [cluster]\ngpu = \"h100-sxm-80gb\"\ngpus = 2\nnode = \"dgx-h100\"\n\
         [parallel]\n{ep}\
         [training]\nglobal_batch = 4\nmicro_batch = 2\nrecompute = \"selective\"\n{modules}"
    );
    parse_str(&text, "recompute.toml", &[]).unwrap_or_else(|e| panic!("{e}"))
}

fn work(s: &Scenario) -> ChunkWork {
    let plan = Plan::new(s).unwrap();
    layers_work(s, &plan, &plan.chunks[0][0], 0, 1, false, false)
}

fn recompute(w: &ChunkWork) -> &twin_sim::workload::PassWork {
    w.recompute.as_ref().expect("a recompute pass")
}

/// Without `recompute_modules` Megatron-Core recomputes the attention core, as with
/// `["core_attn"]`; without it the recompute runs no attention and the backward keeps the
/// kernel's fp32 softmax statistics (4 bytes per head and query).
#[test]
fn the_attention_core_is_the_default_module() {
    let default = work(&scenario(true, None));
    assert_eq!(default, work(&scenario(true, Some(r#"["core_attn"]"#))));
    assert!(recompute(&default).compute.attention.is_some());
    let none = work(&scenario(true, Some(r#"["moe_act"]"#)));
    assert!(recompute(&none).compute.attention.is_none());
    let stats = 4 * 4 * T;
    let moe_act = K * T * F * 2; // the routed experts' down-projection input, bf16
    assert_eq!(
        none.activation_bytes,
        default.activation_bytes + stats - moe_act
    );
}

/// `moe`: the MoE block recomputes whole, router, permutations, every expert and the shared
/// one, and its two all-to-alls run again; it keeps only its input.
#[test]
fn a_recomputed_moe_block_runs_its_gemms_and_all_to_alls_again() {
    let plain = work(&scenario(true, Some("[]")));
    let moe = work(&scenario(true, Some(r#"["moe"]"#)));
    assert!(plain.recompute.as_ref().is_none_or(|r| r.comms.is_empty()));
    let gemm_flops = 2 * T * H * E + 6 * T * K * H * F + 6 * T * H * FS;
    assert_eq!(recompute(&moe).compute.flops, gemm_flops);
    let a2a: Vec<_> = recompute(&moe)
        .comms
        .iter()
        .filter(|c| c.kind == CollectiveKind::AllToAll && c.group == GroupKind::Ep)
        .collect();
    assert_eq!(a2a.iter().map(|c| c.calls).sum::<u32>(), 2);
    // Saved no more: the router's fp32 probabilities, the routed copies, the experts' and the
    // shared expert's up outputs (gated: 2f) and down inputs, the MoE input's GEMM copy; the
    // block's input is kept instead (bf16 throughout).
    let inside = 4 * E * T
        + 2 * K * T * H
        + 2 * K * T * (2 * F)
        + 2 * K * T * F
        + 2 * T * (2 * FS)
        + 2 * T * FS
        + 2 * T * H;
    assert_eq!(
        moe.activation_bytes,
        plain.activation_bytes - inside + 2 * T * H
    );
}

/// `moe_act` runs the routed experts' activation again (SwiGLU reads 2f and writes f: the
/// framework's 3 passes) and keeps no down-projection input; `shared_experts` runs the shared
/// expert again and keeps nothing of it.
#[test]
fn the_experts_activation_and_the_shared_expert_recompute_apart() {
    let plain = work(&scenario(true, Some("[]")));
    let act = work(&scenario(true, Some(r#"["moe_act"]"#)));
    assert_eq!(recompute(&act).compute.flops, 0);
    assert_eq!(recompute(&act).compute.memory_bytes, 3 * 2 * K * T * F);
    assert_eq!(act.activation_bytes, plain.activation_bytes - 2 * K * T * F);
    let shared = work(&scenario(true, Some(r#"["shared_experts"]"#)));
    assert_eq!(recompute(&shared).compute.flops, 6 * T * H * FS);
    assert_eq!(
        shared.activation_bytes,
        plain.activation_bytes - 2 * T * (2 * FS) - 2 * T * FS
    );
}

/// `mlp` recomputes a dense layer's whole MLP (gate and up, down) and keeps nothing inside it;
/// `layernorm` changes nothing where Transformer Engine fuses the norm into the linear layer
/// after it (a dense layer), and in an MoE layer drops the pre-MLP norm's output and runs the
/// norm again (one read, one write).
#[test]
fn a_dense_mlp_and_a_separate_norm_recompute() {
    let plain = work(&scenario(false, Some("[]")));
    let mlp = work(&scenario(false, Some(r#"["mlp"]"#)));
    let f = 512;
    assert_eq!(recompute(&mlp).compute.flops, 6 * T * H * f);
    assert_eq!(
        mlp.activation_bytes,
        plain.activation_bytes - 2 * T * (2 * f) - 2 * T * f
    );
    let dense_norm = work(&scenario(false, Some(r#"["layernorm"]"#)));
    assert_eq!(dense_norm.activation_bytes, plain.activation_bytes);
    let moe_plain = work(&scenario(true, Some("[]")));
    let moe_norm = work(&scenario(true, Some(r#"["layernorm"]"#)));
    assert_eq!(
        moe_norm.activation_bytes,
        moe_plain.activation_bytes - 2 * T * H
    );
    assert_eq!(recompute(&moe_norm).compute.memory_bytes, 2 * 2 * T * H);
}
