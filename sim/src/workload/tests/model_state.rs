//! Parameter counts against published model sizes, and model-state bytes against the ZeRO
//! paper (data/validation/memory.toml, [zero]) and Megatron-LM's distributed
//! optimizer table.

use super::*;
use crate::ir::Phase;
use crate::workload::{
    chunk_params, model_params, model_state_bytes, optimizer_step, state_bytes, ParamCount,
    StateBytes,
};

fn total(p: ParamCount) -> u64 {
    p.dense + p.expert
}

fn on_one_gpu(model: Model) -> Scenario {
    let mut s = gpt(1, 64, 1, 64, 64, (1, 1, 1), 1, 1);
    s.model = model;
    s
}

#[test]
fn gpt3_175b_has_174_6_billion_parameters() {
    let (l, h, s, v) = (96u64, 12288u64, 2048u64, 50257u64);
    let mut m = gpt(96, h, 96, s, v, (1, 1, 1), 1, 1).model;
    m.tied_embeddings = true;
    let p = total(model_params(&m));
    // 12*l*h^2 + 13*l*h + (v + s)*h (flops.toml's params formula) plus the final layer norm.
    assert_eq!(p, 12 * l * h * h + 13 * l * h + (v + s) * h + 2 * h);
    assert!((p as f64 / 174.6e9 - 1.0).abs() < 5e-4, "{p}");
}

/// Heads of `head_dim` other than `h / a`: QKV is `h x (a*hd + 2*g*hd)`, the output
/// projection `a*hd x h`; norms, MLP and embeddings keep `h`.
#[test]
fn explicit_head_dim_sets_the_attention_parameters() {
    let (l, h, a, g, hd, f, v) = (2u64, 96u64, 4u64, 2u64, 32u64, 160u64, 1000u64);
    let m = Model {
        head_dim: Some(hd),
        ..llama(l as u32, h, a as u32, g as u32, f, v)
    };
    let (q, kv) = (a * hd, g * hd);
    let layer = h * (q + 2 * kv) + q * h + 2 * h + 3 * h * f;
    assert_eq!(total(model_params(&m)), l * layer + 2 * v * h + h);
    // Per tensor-parallel rank (tp 2): the attention columns and rows split, norms do not.
    let mut sc = on_one_gpu(m);
    sc.parallel.tp = 2;
    sc.cluster.gpus = 2;
    let plan = plan(&sc);
    let p = chunk_params(&sc, &plan, &plan.chunks[0][0]);
    let rank_layer = h * (q + 2 * kv) / 2 + q / 2 * h + 2 * h + 3 * h * f / 2;
    assert_eq!(total(p), l * rank_layer + 2 * v / 2 * h + h);
}

#[test]
fn llama_and_mixtral_parameter_counts_are_exact() {
    // Published totals (Hugging Face checkpoints): Llama-2 7B 6,738,415,616;
    // Llama-3 70B 70,553,706,496; Mixtral 8x7B 46,702,792,704.
    let llama2_7b = llama(32, 4096, 32, 32, 11008, 32000);
    assert_eq!(total(model_params(&llama2_7b)), 6_738_415_616);
    let llama3_70b = llama(80, 8192, 64, 8, 28672, 128256);
    assert_eq!(total(model_params(&llama3_70b)), 70_553_706_496);
    let mut mixtral = llama(32, 4096, 32, 8, 14336, 32000);
    let ffn_hidden = mixtral.ffn_hidden;
    mixtral.moe = Some(Moe::uniform(8, 2, 1, ffn_hidden));
    let p = model_params(&mixtral);
    assert_eq!(total(p), 46_702_792_704);
    assert_eq!(p.expert, 32 * 8 * 3 * 4096 * 14336);
}

#[test]
fn megatron_table1_models_round_to_their_published_sizes() {
    // (layers, hidden, params_b) of throughput.toml's runs; s 2048, V 51200, tied.
    for (l, h, billions) in [
        (24u32, 2304u64, 1.7f64),
        (36, 4096, 7.5),
        (48, 8192, 39.1),
        (80, 12288, 145.6),
        (105, 20480, 529.6),
    ] {
        let mut m = gpt(l, h, 32, 2048, 51200, (1, 1, 1), 1, 1).model;
        m.tied_embeddings = true;
        let p = total(model_params(&m)) as f64;
        assert_eq!((p / 1e8).round() / 10.0, billions, "l={l} h={h}: {p}");
    }
}

#[test]
fn chunks_sum_to_the_model() {
    let m = llama(16, 1024, 16, 4, 2816, 32000);
    for (tp, pp, vpp) in [
        (1u32, 1u32, 1u32),
        (1, 4, 1),
        (1, 2, 2),
        (2, 4, 2),
        (4, 2, 1),
    ] {
        let mut s = gpt(16, 1024, 16, 1024, 32000, (tp, pp, 1), 1, 4);
        s.model = m.clone();
        s.parallel.vpp = vpp;
        let plan = plan(&s);
        let sum: u64 = all_chunks(&plan)
            .iter()
            .map(|c| total(chunk_params(&s, &plan, c)))
            .sum();
        // Every matrix is split over tp; the norms (2h per layer + h) are replicated.
        let t = u64::from(tp);
        let norms = 2 * 1024 * 16 + 1024;
        assert_eq!(
            sum * t,
            total(model_params(&m)) + (t - 1) * norms,
            "tp{tp} pp{pp} vpp{vpp}"
        );
    }
}

#[test]
fn tied_embeddings_are_copied_to_the_last_stage_when_it_is_another_chunk() {
    let (h, v) = (1024u64, 32000u64);
    let mut s = gpt(4, h, 16, 1024, v, (1, 1, 1), 1, 1);
    s.model.tied_embeddings = true;
    let plan1 = plan(&s);
    let one = total(chunk_params(&s, &plan1, &plan1.chunks[0][0]));
    assert_eq!(one, total(model_params(&s.model)));
    let mut s2 = gpt(4, h, 16, 1024, v, (1, 2, 1), 1, 2);
    s2.model.tied_embeddings = true;
    let plan2 = plan(&s2);
    let sum: u64 = all_chunks(&plan2)
        .iter()
        .map(|c| total(chunk_params(&s2, &plan2, c)))
        .sum();
    assert_eq!(sum, one + v * h);
}

#[test]
fn zero_paper_7_5b_on_64_gpus() {
    // memory.toml [zero]: 120 / 31.4 / 16.6 / 1.9 GB (1e9 bytes) for stages 0..3.
    let p = 7_500_000_000u64;
    let mut s = gpt(1, 64, 1, 64, 64, (1, 1, 1), 1, 1);
    s.training.precision = Precision::Fp16;
    let params = ParamCount {
        dense: p,
        expert: 0,
    };
    let nd = 64;
    let exact = [
        16 * p,
        4 * p + 12 * p / nd,
        2 * p + 14 * p / nd,
        16 * p / nd,
    ];
    for (stage, (gb, want)) in [120.0, 31.4, 16.6, 1.9].into_iter().zip(exact).enumerate() {
        s.parallel.zero = stage as u8;
        let b = model_state_bytes(&s, params, nd, nd);
        let sum = b.weights_bytes + b.grads_bytes + b.optimizer_bytes;
        assert_eq!(sum, want, "stage {stage}");
        assert_eq!(b.host_bytes, 0);
        // The paper rounds to 0.1 GB.
        assert_eq!((sum as f64 / 1e8).round() / 10.0, gb, "stage {stage}");
    }
}

#[test]
fn state_bytes_shard_a_stage_over_the_data_parallel_group() {
    // The 7.5B model of Megatron's Table 1 (36 layers, h 4096) in fp16 on dp 64.
    let mut s = gpt(36, 4096, 32, 2048, 51200, (1, 1, 64), 1, 1);
    s.training.precision = Precision::Fp16;
    s.parallel.zero = 2;
    let plan = plan(&s);
    let p = total(model_params(&s.model));
    let b = state_bytes(&s, &plan, 0);
    assert_eq!(
        b,
        StateBytes {
            weights_bytes: 2 * p,
            grads_bytes: (2 * p).div_ceil(64),
            optimizer_bytes: (12 * p).div_ceil(64),
            host_bytes: 0,
            host_init_bytes: 0,
        }
    );
    // FSDP shards like ZeRO-3.
    s.parallel.zero = 0;
    s.parallel.fsdp = true;
    assert_eq!(
        state_bytes(&s, &plan, 0).weights_bytes,
        (2 * p).div_ceil(64)
    );
}

/// HSDP shards model state over the shard group (fsdp_degree of the dp ranks, times cp and
/// ep for dense parameters), not over dp: bf16 Adam holds 2 + 4 + 12 bytes per parameter,
/// all divided by the shard group. The optimizer updates the same shard.
#[test]
fn hsdp_shards_model_state_over_fsdp_degree_not_dp() {
    let mut s = gpt(4, 1024, 16, 1024, 32000, (1, 1, 8), 1, 1);
    s.parallel.fsdp = true;
    s.parallel.zero = 3;
    let p = total(model_params(&s.model));
    let state = |s: &Scenario| state_bytes(s, &plan(s), 0);
    let sharded = |n: u64| StateBytes {
        weights_bytes: (2 * p).div_ceil(n),
        grads_bytes: (4 * p).div_ceil(n),
        optimizer_bytes: (12 * p).div_ceil(n),
        host_bytes: 0,
        host_init_bytes: 0,
    };
    assert_eq!(state(&s), sharded(8));
    let plain_optimizer = optimizer_step(&s, &plan(&s), 0).memory_bytes;
    s.parallel.fsdp_degree = Some(4);
    assert_eq!(state(&s), sharded(4));
    // Twice the shard, twice the optimizer's traffic.
    assert_eq!(
        optimizer_step(&s, &plan(&s), 0).memory_bytes,
        2 * plain_optimizer
    );
    s.parallel.fsdp_degree = Some(8);
    assert_eq!(state(&s), sharded(8));
    // Context parallelism joins the shard group of dense parameters: 2 * 2 ranks.
    s.parallel.fsdp_degree = Some(2);
    s.parallel.cp = 2;
    s.cluster.gpus = 16;
    assert_eq!(state(&s), sharded(4));
}

#[test]
fn bytes_per_parameter_follow_megatron_for_bf16_and_fp32() {
    // Megatron's distributed-optimizer table: bf16 params with fp32 grads 18 bytes
    // (6 + 12/d distributed); fp32 16 bytes (8 + 8/d).
    let p = 1_000_000_000u64;
    let params = ParamCount {
        dense: p,
        expert: 0,
    };
    let sum = |b: StateBytes| b.weights_bytes + b.grads_bytes + b.optimizer_bytes;
    let mut s = gpt(1, 64, 1, 64, 64, (1, 1, 1), 1, 1);
    for (precision, whole, sharded) in [
        (Precision::Bf16, 18 * p, 6 * p + 12 * p / 8),
        (Precision::Fp8, 18 * p, 6 * p + 12 * p / 8),
        (Precision::Fp32, 16 * p, 8 * p + 8 * p / 8),
        (Precision::Fp16, 16 * p, 4 * p + 12 * p / 8),
    ] {
        s.training.precision = precision;
        s.parallel.zero = 0;
        assert_eq!(sum(model_state_bytes(&s, params, 8, 8)), whole);
        s.parallel.zero = 1;
        assert_eq!(sum(model_state_bytes(&s, params, 8, 8)), sharded);
    }
    // SGD with momentum: 4 bytes of momentum + 4 of master weights.
    s.training.optimizer = Optimizer::Sgd;
    s.training.precision = Precision::Fp16;
    s.parallel.zero = 0;
    assert_eq!(sum(model_state_bytes(&s, params, 8, 8)), 12 * p);
}

#[test]
fn offload_moves_state_to_the_host() {
    let p = 1_000_000_000u64;
    let params = ParamCount {
        dense: p,
        expert: 0,
    };
    let mut s = gpt(1, 64, 1, 64, 64, (1, 1, 1), 1, 1);
    s.training.precision = Precision::Fp16;
    s.parallel.zero = 2;
    s.training.offload = Offload::Optimizer;
    assert_eq!(
        model_state_bytes(&s, params, 8, 8),
        StateBytes {
            weights_bytes: 2 * p,
            grads_bytes: 2 * p / 8,
            optimizer_bytes: 0,
            host_bytes: 12 * p / 8,
            host_init_bytes: 0,
        }
    );
    s.parallel.zero = 3;
    s.training.offload = Offload::Params;
    assert_eq!(
        model_state_bytes(&s, params, 8, 8),
        StateBytes {
            weights_bytes: 0,
            grads_bytes: 2 * p / 8,
            optimizer_bytes: 0,
            host_bytes: 14 * p / 8,
            host_init_bytes: 0,
        }
    );
}

#[test]
fn expert_state_shards_over_expert_data_parallel_ranks() {
    let mut s = on_one_gpu(llama(2, 1024, 16, 16, 4096, 32000));
    let ffn_hidden = s.model.ffn_hidden;
    s.model.moe = Some(Moe::uniform(8, 2, 1, ffn_hidden));
    s.parallel.dp = 8;
    s.parallel.ep = 4;
    s.cluster.gpus = 8;
    s.training.global_batch = 8;
    s.parallel.zero = 1;
    let plan = plan(&s);
    let p = chunk_params(&s, &plan, &plan.chunks[0][0]);
    // Two of the eight experts per rank, 3*h*f each, two layers.
    assert_eq!(p.expert, 2 * 2 * 3 * 1024 * 4096);
    let b = state_bytes(&s, &plan, 0);
    // Dense optimizer state over dp = 8, expert over dp / ep = 2.
    assert_eq!(
        b.optimizer_bytes,
        (12 * p.dense).div_ceil(8) + (12 * p.expert).div_ceil(2)
    );
}

#[test]
fn optimizer_step_streams_the_local_shard() {
    let mut s = gpt(8, 1024, 16, 1024, 32000, (1, 2, 4), 1, 2);
    s.parallel.zero = 1;
    let plan = plan(&s);
    let op = optimizer_step(&s, &plan, 1);
    let p = total(chunk_params(&s, &plan, &plan.chunks[1][0]));
    // bf16: grads (4 bytes) read twice, 12 bytes of state read and written, weights written.
    assert_eq!(op.memory_bytes, p.div_ceil(4) * (2 * 4 + 2 * 12 + 2));
    assert_eq!(op.phase, Phase::Optimizer);
    assert!(op.gemms.is_empty());
    assert_eq!(op.flops, 0);
    // A stage the plan lacks holds nothing.
    assert_eq!(optimizer_step(&s, &plan, 9).memory_bytes, 0);
    assert_eq!(state_bytes(&s, &plan, 9), StateBytes::default());
}

/// llm-foundry's Composer AdamW loops over the tensors an operation at a time over fp32 FSDP
/// shards, and clips on every step: the norm (4 bytes a parameter), the clip's read and write
/// (8) and AdamW's eight passes (80), a kernel per pass and layer; the same shard under a
/// fused kernel moves 4 + 8 + 28.
#[test]
fn llm_foundry_s_optimizer_step_runs_an_op_per_pass() {
    let mut s = gpt(8, 1024, 16, 1024, 32000, (1, 1, 8), 1, 8);
    s.parallel.zero = 3;
    s.training.framework = crate::scenario::framework::Bundled::LlmFoundry
        .framework()
        .expect("the bundled file parses");
    let plan = plan(&s);
    let shard = total(chunk_params(&s, &plan, &plan.chunks[0][0])).div_ceil(8);
    let op = optimizer_step(&s, &plan, 0);
    assert_eq!(op.memory_bytes, shard * (4 + 8 + 80));
    assert_eq!(op.kernels, 10 * 8);
    s.training.optimizer_kernel = Some(crate::scenario::framework::OptimizerKernel::Fused);
    let fused = optimizer_step(&s, &plan, 0);
    assert_eq!(fused.memory_bytes, shard * (4 + 8 + 28));
    assert_eq!(fused.kernels, 8 + 2);
}
