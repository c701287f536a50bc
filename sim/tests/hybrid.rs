//! Hybrid models (`model.hybrid_pattern`, Megatron-Core's Mamba-Transformer hybrids): their
//! parameter counts against the model card, their work built from blocks (a transformer layer
//! is exactly its attention block and its MLP block), a Mamba mixer's FLOPs and saved bytes
//! written out here term by term, and a hybrid step simulated end to end.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_sim::cost::Analytic;
use twin_sim::engine::{simulate, SimOptions};
use twin_sim::plan::Plan;
use twin_sim::scenario::Scenario;
use twin_sim::schedule::generate;
use twin_sim::schedule::CollectiveKind;
use twin_sim::setup::parse_str;
use twin_sim::workload::{activated_params, layers_work, model_params, ChunkWork};

mod common;
use common::step_collapsed_as_in_full;

/// NVIDIA Nemotron 3 Nano 30B-A3B as Megatron-Bridge's recipe gives it
/// (NVIDIA-NeMo/Megatron-Bridge@21d102f5e:src/megatron/bridge/recipes/nemotronh/nemotron_3_nano.py:
/// 52 layers, hidden 2688, 32 query and 2 key/value heads of 128, Mamba 64 heads of 64 with
/// state 128 in 8 groups, 128 experts of 1856 and one shared of 3712, 6 a token, squared ReLU,
/// vocabulary 131072, untied).
const NEMOTRON_3_NANO: &str = r#"
[model]
layers = 52
hidden = 2688
heads = 32
kv_heads = 2
head_dim = 128
ffn_hidden = 1856
seq_len = 8192
vocab = 131072
experts = 128
top_k = 6
moe_ffn_hidden = 1856
shared_experts = 1
shared_expert_ffn_hidden = 3712
hybrid_pattern = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
[model.mamba]
heads = 64
head_dim = 64
state = 128
groups = 8
[cluster]
gpu = "h100-sxm-80gb"
gpus = 16
node = "dgx-h100"
[parallel]
ep = 8
zero = 1
[training]
global_batch = 64
precision = "fp8"
fp8_recipe = "tensorwise"
grad_reduce_dtype = "bf16"
moe_routing = "force-balanced"
"#;

fn nemotron() -> Scenario {
    parse_str(NEMOTRON_3_NANO, "nemotron-3-nano.toml", &[]).unwrap_or_else(|e| panic!("{e}"))
}

/// Parameters counted matrix by matrix (Megatron-Core's modules: `MambaMixer`, attention with
/// grouped queries, `MoELayer` with a shared expert; RMSNorm, no biases):
/// - a Mamba layer: its norm (h), `in_proj` (h x (2*4096 + 2*8*128 + 64)), the convolution
///   over 4096 + 2*8*128 channels (4 taps and a bias each), `dt_bias`, `A_log` and `D` (64
///   each), the gated norm (4096) and `out_proj` (4096 x h);
/// - an attention layer: its norm, QKV (h x (4096 + 2*256)) and the output (4096 x h);
/// - an MoE layer: its norm, the router (h x 128), 128 experts and the shared one, each up
///   (h x f) and down (f x h);
/// - both embedding matrices and the final norm.
///
/// The card (huggingface.co/nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16) gives 31.6B in all,
/// and 3.2B activated a token, 3.6B with the embeddings: 3.2B leaves the input embedding out
/// (its rows are looked up), 3.6B counts it.
#[test]
fn nemotron_3_nano_parameters_match_the_card() {
    let s = nemotron();
    let h: u64 = 2688;
    let mamba =
        h + h * (2 * 4096 + 2 * 8 * 128 + 64) + (4096 + 2 * 8 * 128) * 5 + 3 * 64 + 4096 + 4096 * h;
    let attention = h + h * (4096 + 2 * 256) + 4096 * h;
    let expert = 2 * h * 1856;
    let moe = h + h * 128 + 128 * expert + 2 * h * 3712;
    let embeddings = 2 * 131_072 * h;
    let want = 23 * mamba + 6 * attention + 23 * moe + embeddings + h;
    let p = model_params(&s.model);
    assert_eq!(p.dense + p.expert, want);
    assert_eq!(p.expert, 23 * 128 * expert);
    let total = (p.dense + p.expert) as f64;
    assert!((total / 31.6e9 - 1.0).abs() < 0.005, "{total}");
    let activated = activated_params(&s.model);
    assert_eq!(activated, p.dense + 23 * 6 * expert);
    let input_embedding = 131_072 * h;
    let card = |x: u64, billions: f64| ((x as f64 / 1e9) * 10.0).round() / 10.0 == billions;
    assert!(card(activated, 3.6), "{activated}");
    assert!(card(activated - input_embedding, 3.2), "{activated}");
}

/// A small model on `tp` GPUs: a transformer (`pattern` empty) or a hybrid.
fn small(pattern: &str, layers: u32, tp: u32) -> Scenario {
    let mamba = "[model.mamba]\nheads = 16\nhead_dim = 32\nstate = 64\ngroups = 4\nchunk = 64\n";
    let hybrid = match (pattern.is_empty(), pattern.contains('M')) {
        (true, _) => String::new(),
        (false, true) => format!("hybrid_pattern = \"{pattern}\"\n{mamba}"),
        (false, false) => format!("hybrid_pattern = \"{pattern}\"\n"),
    };
    let text = format!(
        "[model]\nlayers = {layers}\nhidden = 512\nheads = 8\nkv_heads = 4\nffn_hidden = 1024\n\
         seq_len = 512\nvocab = 4096\ngated_mlp = true\n{hybrid}\
         [cluster]\ngpu = \"h100-sxm-80gb\"\ngpus = {tp}\nnode = \"dgx-h100\"\n\
         [parallel]\ntp = {tp}\nsequence_parallel = true\n\
         [training]\nglobal_batch = 4\nmicro_batch = 2\n"
    );
    parse_str(&text, "small.toml", &[]).unwrap_or_else(|e| panic!("{e}"))
}

fn work(s: &Scenario, layers: u32) -> ChunkWork {
    let plan = Plan::new(s).unwrap();
    layers_work(s, &plan, &plan.chunks[0][0], 0, layers, false, false)
}

/// Megatron-Core's framework file gives a transformer layer an even number of elementwise
/// passes and kernels, so its two blocks split them exactly: two transformer layers and the
/// four blocks `*-*-` do the same work, save the same bytes and exchange the same collectives.
#[test]
fn a_transformer_layer_is_its_attention_block_and_its_mlp_block() {
    let (dense, hybrid) = (small("", 2, 2), small("*-*-", 4, 2));
    let (a, b) = (work(&dense, 2), work(&hybrid, 4));
    for (x, y) in [
        (&a.forward, &b.forward),
        (&a.backward, &b.backward),
        (&a.backward_input, &b.backward_input),
    ] {
        assert_eq!(x.compute.flops, y.compute.flops);
        assert_eq!(x.compute.memory_bytes, y.compute.memory_bytes);
        assert_eq!(x.compute.kernels, y.compute.kernels);
        assert_eq!(x.compute.gemms.to_vec(), y.compute.gemms.to_vec());
        assert_eq!(x.compute.attention, y.compute.attention);
        assert_eq!(x.comms, y.comms);
    }
    assert_eq!(a.backward_weight, b.backward_weight);
    assert_eq!(a.activation_bytes, b.activation_bytes);
    assert_eq!(model_params(&dense.model), model_params(&hybrid.model));
}

/// One Mamba layer of one micro batch (b 2, s 512, hidden 512; 16 heads of 32, state 64 in 4
/// groups, chunks of 64; tp 2): the forward's FLOPs are `in_proj` and `out_proj` and the
/// scan's four batched products over the 16 chunks of the micro batch; the backward computes
/// both operands' gradients of each (twice the forward) and runs `C Bᵀ` and the chunk states
/// again; tensor parallelism adds one all-gather and one reduce-scatter each way.
#[test]
fn a_mamba_layer_does_its_projections_and_its_chunked_scan() {
    let s = small("M", 1, 2);
    let w = work(&s, 1);
    let (t, h, tp) = (2 * 512u64, 512u64, 2u64);
    let (heads, p, n, g, q) = (16u64, 32u64, 64u64, 4u64, 64u64);
    let inner = heads * p;
    let in_proj = 2 * t * h * ((2 * inner + 2 * g * n + heads) / tp);
    let out_proj = 2 * t * (inner / tp) * h;
    let chunks = 2 * 512 / q;
    let cb = 2 * q * n * q * chunks * (g / tp);
    let states = 2 * n * q * p * chunks * (heads / tp);
    let diagonal = 2 * q * q * p * chunks * (heads / tp);
    let off_diagonal = 2 * q * n * p * chunks * (heads / tp);
    let forward = in_proj + out_proj + cb + states + diagonal + off_diagonal;
    assert_eq!(w.forward.compute.flops, forward);
    assert_eq!(w.backward.compute.flops, 2 * forward + cb + states);
    let pairs = |kind: CollectiveKind| w.forward.comms.iter().filter(|c| c.kind == kind).count();
    assert_eq!(pairs(CollectiveKind::AllGather), 1);
    assert_eq!(pairs(CollectiveKind::ReduceScatter), 1);
    // Saved for the backward (bf16): the norm's input and in_proj's input (sequence parallel,
    // split over tp), the residual's mask, in_proj's output, the scan's output and out_proj's
    // input (split over tp), and the gated norm's fp32 statistics per group.
    let replicated = t * h / tp;
    let saved = replicated * (2 + 2 + 1)
        + 2 * t * ((2 * inner + 2 * g * n + heads) / tp)
        + 2 * t * inner / tp
        + 4 * t * (g / tp)
        + 2 * t * inner / tp;
    assert_eq!(w.activation_bytes, saved);
}

/// The Nemotron 3 Nano layout runs end to end on 16 GPUs (expert parallelism 8): the schedule
/// validates, every rank finishes, and one representative per stage gives the step of every
/// rank.
#[test]
fn a_hybrid_step_simulates_collapsed_as_in_full() {
    let step_ns = step_collapsed_as_in_full(&nemotron());
    // Fewer Mamba layers (the same pattern with every M an attention layer) change the step.
    let attention_only = parse_str(
        &NEMOTRON_3_NANO
            .replace("MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME", &{
                "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME".replace('M', "*")
            })
            .replace(
                "[model.mamba]\nheads = 64\nhead_dim = 64\nstate = 128\ngroups = 8\n",
                "",
            ),
        "attention.toml",
        &[],
    )
    .unwrap();
    let plan = Plan::new(&attention_only).unwrap();
    let sched = generate(&attention_only, &plan).unwrap();
    let other = simulate(
        &plan,
        &sched,
        &Analytic::new(&attention_only),
        &SimOptions::default(),
    )
    .unwrap();
    assert_ne!(other.step_time_ns, step_ns);
}
