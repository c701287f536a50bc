//! Ready-made scenarios for tests in this crate and downstream crates, built from struct
//! literals so that tests of the plan, generators and engine do not depend on the parser.

use crate::scenario::*;

/// A100 80GB figures (datasheet): dense peaks, 80 GiB... HBM2e, 2.039 TB/s.
pub fn a100() -> Gpu {
    Gpu {
        name: "a100-sxm-80gb".into(),
        peak: PeakFlops {
            fp32_flops_per_s: 19.5e12,
            tf32_flops_per_s: 156e12,
            fp16_flops_per_s: 312e12,
            bf16_flops_per_s: 312e12,
            fp8_flops_per_s: 312e12,
        },
        hbm_bytes: 80 * 1_000_000_000,
        driver_reserved_bytes: 0,
        hbm_bandwidth_bytes_per_s: 2.039e12,
    }
}

/// A small GPT on `tp*pp*dp` A100s in DGX-A100-like nodes of 8.
pub fn small_scenario(tp: u32, pp: u32, dp: u32, microbatches: u64) -> Scenario {
    let gpus = tp * pp * dp;
    Scenario {
        name: format!("test-tp{tp}-pp{pp}-dp{dp}"),
        model: Model {
            name: "test-gpt".into(),
            layers: 8 * pp.max(1),
            hidden: 1024,
            heads: 16,
            kv_heads: 16,
            head_dim: None,
            ffn_hidden: 4096,
            seq_len: 1024,
            vocab: 32000,
            gated_mlp: false,
            tied_embeddings: false,
            qkv_bias: false,
            mla: None,
            mtp_layers: 0,
            sliding_window: None,
            attention_sinks: false,
            moe: None,
            hybrid: None,
        },
        cluster: Cluster {
            gpu: a100(),
            gpus,
            gpus_per_node: 8.min(gpus),
            node: "dgx-a100".into(),
            node_from_gpu: false,
            intra_node: Link {
                bandwidth_bytes_per_s: 300e9,
                latency_ns: 3_000,
            },
            inter_node: Link {
                bandwidth_bytes_per_s: 25e9,
                latency_ns: 10_000,
            },
            topology: Default::default(),
        },
        parallel: Parallel {
            tp,
            pp,
            dp,
            vpp: 1,
            ep: 1,
            etp: None,
            cp: 1,
            cp_algorithm: CpAlgorithm::AllGather,
            zero: 0,
            fsdp: false,
            fsdp_degree: None,
            sequence_parallel: tp > 1,
            schedule: PipelineSchedule::OneFOneB,
            layer_partition: None,
            account_for_embedding_in_pipeline_split: false,
            account_for_loss_in_pipeline_split: false,
            order: Parallel::DEFAULT_ORDER,
        },
        training: Training {
            global_batch: microbatches * u64::from(dp),
            tokens: None,
            micro_batch: 1,
            precision: Precision::Bf16,
            fp8_recipe: Fp8Recipe::Delayed,
            fp8_param_gather: false,
            recompute_modules: None,
            recompute: Recompute::None,
            recompute_layers: None,
            overlap_grad_reduce: true,
            overlap_param_gather: true,
            grad_compression: GradCompression::None,
            grad_reduce_dtype: None,
            optimizer_kernel: None,
            grad_clip: true,
            optimizer_state_dtype: None,
            sync: SyncMode::Sync,
            optimizer: Optimizer::Adam,
            offload: Offload::None,
            flash_attention: true,
            framework: crate::scenario::framework::default_framework()
                .expect("the bundled megatron-core framework file parses"),
            tp_comm_overlap: false,
            overlap_p2p_comm: false,
            compile: false,
            cuda_graphs: false,
            moe_routing: MoeRouting::Balanced,
            moe_a2a_overlap: false,
            moe_dispatcher: MoeDispatcher::AllToAll,
            grad_bucket_bytes: 40_000_000 * 4,
        },
        memory: MemorySettings::default(),
        run: Run {
            iterations: 1,
            seed: 1,
            granularity: Granularity::Chunk,
        },
    }
}

/// [`small_scenario`] with a model small enough to run for real on a CPU in a test (the host
/// backend's GEMMs, a calibration check): 2 layers, hidden 64, 4 heads, FFN 256, sequence 32,
/// vocabulary 128.
pub fn cpu_sized_scenario(tp: u32, pp: u32, dp: u32, microbatches: u64) -> Scenario {
    let mut s = small_scenario(tp, pp, dp, microbatches);
    s.model.layers = 2;
    s.model.hidden = 64;
    s.model.heads = 4;
    s.model.kv_heads = 4;
    s.model.ffn_hidden = 256;
    s.model.seq_len = 32;
    s.model.vocab = 128;
    s
}

/// The smallest scenario file the schema accepts with an H100 preset: 2 layers on 8 GPUs.
pub const MINIMAL_SCENARIO_TOML: &str = r#"
[model]
layers = 2
hidden = 64
heads = 4
seq_len = 128
vocab = 1000
[cluster]
gpu = "h100-sxm-80gb"
gpus = 8
[training]
global_batch = 8
"#;
