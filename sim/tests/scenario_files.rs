//! The bundled scenarios, presets, Hugging Face import and the `to_toml` round trip.
#![allow(clippy::result_large_err)]
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use std::path::{Path, PathBuf};
use twin_sim::plan::Plan;
use twin_sim::scenario::*;
use twin_sim::setup::{load, parse_str, ParsedSource};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.toml` under `scenarios/`, sorted; hardware profiles (`scenarios/profiles/`) and
/// framework files (`scenarios/frameworks/`) are other formats, tested in `twin_sim::profile`
/// and `twin_ir::scenario::framework`.
fn bundled() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                if p.file_name()
                    .is_some_and(|n| n == "profiles" || n == "frameworks")
                {
                    continue;
                }
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "toml") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo().join("scenarios"), &mut out);
    out
}

fn load_bundled(rel: &str) -> Scenario {
    load(&repo().join(rel), &[]).unwrap_or_else(|e| panic!("{e}"))
}

/// Origin inside sim/tests so that `hf_config = "fixtures/..."` resolves.
fn tests_origin() -> String {
    format!("{}/tests/inline.toml", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_bundled_scenario_parses_plans_and_round_trips() {
    let files = bundled();
    assert!(files.len() >= 7, "found only {files:?}");
    for path in files {
        let s = load(&path, &[]).unwrap_or_else(|e| panic!("{e}"));
        let plan = Plan::new(&s).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(plan.world, s.cluster.gpus);
        let text = to_toml(&s);
        let back = parse_str(&text, "roundtrip.toml", &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, s, "{} does not round trip:\n{text}", path.display());
        // The explicit form is a fixed point.
        assert_eq!(to_toml(&back), text);
    }
}

#[test]
fn the_required_scenarios_exist() {
    for rel in [
        "scenarios/512xA100.toml",
        "scenarios/16384xH100.toml",
        "scenarios/small.toml",
        "scenarios/schedules/gpipe.toml",
        "scenarios/schedules/1f1b.toml",
        "scenarios/schedules/interleaved-1f1b.toml",
        "scenarios/schedules/zero-bubble.toml",
    ] {
        assert!(repo().join(rel).is_file(), "{rel} is missing");
    }
}

#[test]
fn scenario_512_is_the_3d_parallel_gpt() {
    let s = load_bundled("scenarios/512xA100.toml");
    let m = &s.model;
    assert_eq!(
        (m.layers, m.hidden, m.heads, m.seq_len, m.vocab),
        (80, 10240, 80, 2048, 51200)
    );
    assert_eq!(m.ffn_hidden, 4 * 10240);
    let p = &s.parallel;
    assert_eq!((p.tp, p.pp, p.dp, p.zero), (8, 8, 8, 1));
    assert!(p.sequence_parallel);
    assert_eq!(p.schedule, PipelineSchedule::OneFOneB);
    assert_eq!(s.training.recompute, Recompute::Selective);
    assert_eq!(s.training.precision, Precision::Bf16);
    assert_eq!(s.cluster.gpu.name, "a100-sxm-80gb");
    assert_eq!(s.cluster.node, "dgx-a100");
    assert_eq!(s.num_microbatches(), 64);
}

#[test]
fn scenario_16384_has_16_to_32_microbatches() {
    let s = load_bundled("scenarios/16384xH100.toml");
    assert_eq!(s.cluster.gpus, 16384);
    assert_eq!((s.parallel.tp, s.parallel.pp, s.parallel.dp), (8, 16, 128));
    let m = s.num_microbatches();
    assert!((16..=32).contains(&m), "{m} micro batches");
    let part = s.parallel.layer_partition.as_ref().unwrap();
    assert_eq!(part.iter().sum::<u32>(), s.model.layers);
}

#[test]
fn schedule_scenarios_cover_every_schedule() {
    for (name, schedule) in PipelineSchedule::ALL {
        let s = load_bundled(&format!("scenarios/schedules/{name}.toml"));
        assert_eq!(s.parallel.schedule, schedule);
        if schedule == PipelineSchedule::Interleaved1F1B {
            assert!(s.parallel.vpp >= 2);
        }
    }
}

#[test]
fn small_scenario_reads_explicit_cluster_and_default_peaks() {
    let s = load_bundled("scenarios/small.toml");
    let g = &s.cluster.gpu;
    assert_eq!(g.name, "small-gpu");
    assert_eq!(g.peak.bf16_flops_per_s, 100e12);
    assert_eq!(g.peak.fp16_flops_per_s, 100e12);
    assert_eq!(g.peak.fp8_flops_per_s, 100e12);
    assert_eq!(g.peak.tf32_flops_per_s, 50e12);
    assert_eq!(g.peak.fp32_flops_per_s, 100e12 / 16.0);
    assert_eq!(g.hbm_bytes, 16_000_000_000);
    assert_eq!(s.cluster.node, "custom");
    assert_eq!(s.cluster.intra_node.bandwidth_bytes_per_s, 100e9);
    assert_eq!(s.cluster.intra_node.latency_ns, 2_000);
    assert_eq!(s.cluster.inter_node.bandwidth_bytes_per_s, 12.5e9);
    assert_eq!(s.run.granularity, Granularity::Layer);
}

const MINIMAL: &str = r#"
[model]
preset = "llama3-70b"
[cluster]
gpu = "h100-sxm-80gb"
gpus = 64
node = "dgx-h100"
[parallel]
tp = 8
pp = 4
[training]
global_batch = 64
"#;

#[test]
fn defaults_fill_everything_not_written() {
    let s = parse_str(MINIMAL, "minimal.toml", &[]).unwrap();
    assert_eq!(s.name, "minimal");
    assert_eq!(s.parallel.dp, 2, "dp = 64 / (8 * 4)");
    assert_eq!((s.parallel.vpp, s.parallel.ep, s.parallel.cp), (1, 1, 1));
    assert_eq!(s.parallel.zero, 0);
    assert!(!s.parallel.fsdp && !s.parallel.sequence_parallel);
    assert_eq!(s.parallel.order, Parallel::DEFAULT_ORDER);
    let t = &s.training;
    assert_eq!(t.micro_batch, 1);
    assert_eq!(t.precision, Precision::Bf16);
    assert_eq!(t.recompute, Recompute::None);
    assert!(t.overlap_grad_reduce && t.overlap_param_gather && t.flash_attention);
    assert_eq!(t.grad_compression, GradCompression::None);
    assert_eq!(t.sync, SyncMode::Sync);
    assert_eq!(t.optimizer, Optimizer::Adam);
    assert_eq!(t.offload, Offload::None);
    // Megatron-Core: max(40M, 1M * dp) fp32 elements.
    assert_eq!(t.grad_bucket_bytes, 160_000_000);
    assert_eq!((s.run.iterations, s.run.seed), (1, 1));
    assert_eq!(s.run.granularity, Granularity::Chunk);
}

#[test]
fn grad_bucket_default_grows_with_data_parallel_size() {
    let over = ["cluster.gpus=1024".to_string()];
    let s = parse_str(MINIMAL, "m.toml", &over).unwrap();
    assert_eq!(s.parallel.dp, 32);
    assert_eq!(s.training.grad_bucket_bytes, 160_000_000);
    let text = MINIMAL.replace("tp = 8\npp = 4", "tp = 1\npp = 1");
    let over = [
        "cluster.gpus=64".to_string(),
        "training.global_batch=128".into(),
    ];
    let s = parse_str(&text, "m.toml", &over).unwrap();
    assert_eq!(s.parallel.dp, 64);
    assert_eq!(s.training.grad_bucket_bytes, 64 * 1_000_000 * 4);
    let over = ["training.grad_bucket_bytes=1000".to_string()];
    let s = parse_str(MINIMAL, "m.toml", &over).unwrap();
    assert_eq!(s.training.grad_bucket_bytes, 1000);
}

#[test]
fn model_preset_fills_only_what_is_not_written() {
    let s = parse_str(MINIMAL, "m.toml", &[]).unwrap();
    let m = &s.model;
    assert_eq!(m.name, "llama3-70b");
    assert_eq!((m.layers, m.hidden, m.heads, m.kv_heads), (80, 8192, 64, 8));
    assert_eq!((m.ffn_hidden, m.seq_len, m.vocab), (28672, 8192, 128256));
    assert!(m.gated_mlp && !m.tied_embeddings && m.moe.is_none());

    let text = MINIMAL.replace(
        "preset = \"llama3-70b\"",
        "preset = \"llama3-70b\"\nseq_len = 4096\nname = \"mine\"",
    );
    let s = parse_str(&text, "m.toml", &[]).unwrap();
    assert_eq!(s.model.seq_len, 4096);
    assert_eq!(s.model.name, "mine");
    assert_eq!(s.model.hidden, 8192);
}

#[test]
fn every_model_preset_resolves_on_a_fitting_cluster() {
    for (preset, layers, kv) in [
        ("gpt3-175b", 96, 96),
        ("llama2-7b", 32, 32),
        ("llama2-13b", 40, 40),
        ("llama2-70b", 80, 8),
        ("llama3-8b", 32, 8),
        ("llama3-70b", 80, 8),
        ("llama3-405b", 126, 8),
        ("mixtral-8x7b", 32, 8),
    ] {
        let text = format!(
            "[model]\npreset = \"{preset}\"\n[cluster]\ngpu = \"a100-sxm-80gb\"\ngpus = 8\nnode = \"dgx-a100\"\n[parallel]\ntp = 8\n[training]\nglobal_batch = 8\n"
        );
        let s = parse_str(&text, "p.toml", &[]).unwrap_or_else(|e| panic!("{preset}: {e}"));
        assert_eq!((s.model.layers, s.model.kv_heads), (layers, kv), "{preset}");
    }
    let text = "[model]\npreset = \"mixtral-8x7b\"\n[cluster]\ngpu = \"a100-sxm-80gb\"\ngpus = 8\nnode = \"dgx-a100\"\n[parallel]\nep = 8\n[training]\nglobal_batch = 8\n";
    let s = parse_str(text, "p.toml", &[]).unwrap();
    let moe = s.model.moe.unwrap();
    assert_eq!((moe.experts, moe.top_k, moe.moe_every), (8, 2, 1));
}

#[test]
fn gpu_and_node_presets() {
    let s = parse_str(MINIMAL, "m.toml", &[]).unwrap();
    let g = &s.cluster.gpu;
    assert_eq!(g.peak.bf16_flops_per_s, 989e12);
    assert_eq!(g.peak.fp8_flops_per_s, 1979e12);
    // nvidia-smi's 81,559 MiB, of which the driver keeps 480 MiB.
    assert_eq!(g.hbm_bytes, 81_559 << 20);
    assert_eq!(g.usable_bytes(), 85_017_493_504);
    assert_eq!(g.hbm_bandwidth_bytes_per_s, 3.35e12);
    let c = &s.cluster;
    assert_eq!(c.gpus_per_node, 8);
    assert_eq!(c.intra_node.bandwidth_bytes_per_s, 450e9);
    assert_eq!(c.inter_node.bandwidth_bytes_per_s, 50e9);

    let over = ["cluster.gpu=h200-141gb".to_string()];
    let s = parse_str(MINIMAL, "m.toml", &over).unwrap();
    assert_eq!(s.cluster.gpu.hbm_bytes, 143_771 << 20);
    assert_eq!(s.cluster.gpu.usable_bytes(), 150_109_880_320);
    assert_eq!(s.cluster.gpu.hbm_bandwidth_bytes_per_s, 4.8e12);

    let over = ["cluster.gpu={preset = \"a100-sxm-80gb\", hbm_bytes = 40e9}".to_string()];
    let s = parse_str(MINIMAL, "m.toml", &over).unwrap();
    assert_eq!(s.cluster.gpu.hbm_bytes, 40_000_000_000);
    // A capacity written by hand is what a process can use, unless the driver's share is
    // written too.
    assert_eq!(s.cluster.gpu.usable_bytes(), 40_000_000_000);
    assert_eq!(s.cluster.gpu.peak.bf16_flops_per_s, 312e12);
    assert_eq!(s.cluster.gpu.name, "a100-sxm-80gb");
    let over = [
        "cluster.gpu={preset = \"a100-sxm-80gb\", hbm_bytes = 40e9, driver_reserved_bytes = 1e9}"
            .to_string(),
    ];
    let s = parse_str(MINIMAL, "m.toml", &over).unwrap();
    assert_eq!(s.cluster.gpu.usable_bytes(), 39_000_000_000);
    let over = ["cluster.gpu={preset = \"h100-sxm-80gb\", name = \"mine\"}".to_string()];
    let s = parse_str(MINIMAL, "m.toml", &over).unwrap();
    assert_eq!(s.cluster.gpu.usable_bytes(), 85_017_493_504);

    let text = MINIMAL.replace(
        "node = \"dgx-h100\"",
        "node = \"dgx-a100\"\n[cluster.inter_node]\nbandwidth_gb_per_s = 100",
    );
    let s = parse_str(&text, "m.toml", &[]).unwrap();
    assert_eq!(s.cluster.intra_node.bandwidth_bytes_per_s, 300e9);
    assert_eq!(s.cluster.inter_node.bandwidth_bytes_per_s, 100e9);
    assert_eq!(
        s.cluster.inter_node.latency_ns, 10_000,
        "latency from the preset"
    );
}

/// A GPU preset without `node` gets its usual 8-GPU NVLink node, and says so.
#[test]
fn a_gpu_preset_brings_its_usual_node() {
    let text = MINIMAL.replace("node = \"dgx-h100\"\n", "");
    for (gpu, node, nvlink) in [
        ("h100-sxm-80gb", "dgx-h100", 450e9),
        ("h200-141gb", "dgx-h100", 450e9),
        ("a100-sxm-80gb", "dgx-a100", 300e9),
    ] {
        let s = parse_str(&text, "m.toml", &[format!("cluster.gpu={gpu}")]).unwrap();
        let c = &s.cluster;
        assert_eq!((c.node.as_str(), c.node_from_gpu), (node, true), "{gpu}");
        assert_eq!(c.gpus_per_node, 8);
        assert_eq!(c.intra_node.bandwidth_bytes_per_s, nvlink);
        // Written back, the node is left for the GPU to choose again.
        let again = parse_str(&to_toml(&s), "again.toml", &[]).unwrap();
        assert_eq!(again, s);
    }
    // So does a GPU table built on a preset; a named node is the user's.
    let over = ["cluster.gpu={preset = \"h200-141gb\", hbm_bytes = 96e9}".to_string()];
    let s = parse_str(&text, "m.toml", &over).unwrap();
    assert_eq!(s.cluster.node, "dgx-h100");
    let s = parse_str(MINIMAL, "m.toml", &[]).unwrap();
    assert!(!s.cluster.node_from_gpu);
}

fn with_hf(file: &str, extra: &str) -> Result<Scenario, ScenarioError> {
    let text = format!(
        "[model]\nhf_config = \"fixtures/hf/{file}\"\n{extra}\n[cluster]\ngpu = \"a100-sxm-80gb\"\ngpus = 8\nnode = \"dgx-a100\"\n[training]\nglobal_batch = 8\n"
    );
    parse_str(&text, &tests_origin(), &[])
}

#[test]
fn hf_llama_config() {
    let s = with_hf("llama2-7b.json", "").unwrap();
    let m = &s.model;
    assert_eq!(m.name, "fixtures/hf/llama2-7b.json");
    assert_eq!(
        (m.layers, m.hidden, m.heads, m.kv_heads),
        (32, 4096, 32, 32)
    );
    assert_eq!((m.ffn_hidden, m.seq_len, m.vocab), (11008, 4096, 32000));
    assert!(m.gated_mlp && !m.tied_embeddings && m.moe.is_none());
    // seq_len in the scenario overrides max_position_embeddings.
    let s = with_hf("llama2-7b.json", "seq_len = 2048").unwrap();
    assert_eq!(s.model.seq_len, 2048);
}

#[test]
fn hf_gpt2_neox_and_mixtral_configs() {
    let m = with_hf("gpt2.json", "").unwrap().model;
    assert_eq!(
        (m.layers, m.hidden, m.heads, m.seq_len),
        (12, 768, 12, 1024)
    );
    assert_eq!((m.ffn_hidden, m.vocab), (4 * 768, 50257));
    assert!(m.tied_embeddings && !m.gated_mlp);

    let m = with_hf("gpt-neox-tiny.json", "").unwrap().model;
    assert_eq!((m.layers, m.hidden, m.ffn_hidden), (6, 512, 2048));
    assert!(!m.gated_mlp && !m.tied_embeddings);

    let m = with_hf("mixtral-8x7b.json", "").unwrap().model;
    assert_eq!((m.kv_heads, m.ffn_hidden, m.seq_len), (8, 14336, 32768));
    let moe = m.moe.unwrap();
    assert_eq!((moe.experts, moe.top_k, moe.moe_every), (8, 2, 1));
}

/// What `hf_config` sets that twin does not model, as the CLI's warning lists it.
fn hf_unmodelled(file: &str, extra: &str) -> Vec<String> {
    let text = format!(
        "[model]\nhf_config = \"fixtures/hf/{file}\"\n{extra}\n[cluster]\ngpu = \"a100-sxm-80gb\"\ngpus = 8\nnode = \"dgx-a100\"\n[training]\nglobal_batch = 8\n"
    );
    ParsedSource::parse(&text, &tests_origin())
        .unwrap()
        .hf_unmodelled(&[])
        .unwrap()
}

/// DeepSeek-V2-Lite (`deepseek_v2`, huggingface.co/deepseek-ai/DeepSeek-V2-Lite config.json)
/// is refused unless forced, and then imports dense with every MoE and latent-attention key
/// listed: the import reads those keys under `deepseek_v3` only. DeepSeek-V3's config imports
/// without force, as MoE with latent attention.
#[test]
fn hf_unknown_model_type_is_refused_unless_forced() {
    let e = with_hf("deepseek-v2-lite.json", "").unwrap_err();
    assert_eq!(e.kind, ErrorKind::HfConfig);
    assert!(
        e.origin.ends_with("fixtures/hf/deepseek-v2-lite.json"),
        "{e}"
    );
    assert_eq!(e.key, "model_type");
    assert_eq!(e.line, Some(15), "{e}");
    assert!(e.to_string().contains("deepseek_v2"), "{e}");
    assert!(
        e.allowed.contains("llama, mistral")
            && e.allowed.contains("deepseek_v3")
            && e.allowed.contains("hf_force"),
        "{e}"
    );

    let s = with_hf("deepseek-v2-lite.json", "hf_force = true").unwrap();
    assert_eq!((s.model.layers, s.model.hidden), (27, 2048));
    let keys: Vec<String> = hf_unmodelled("deepseek-v2-lite.json", "hf_force = true")
        .iter()
        .map(|w| w.split(' ').next().unwrap().to_string())
        .collect();
    let want = [
        "moe_layer_freq",
        "n_routed_experts",
        "n_shared_experts",
        "moe_intermediate_size",
        "first_k_dense_replace",
        "kv_lora_rank",
        "qk_rope_head_dim",
        "qk_nope_head_dim",
        "v_head_dim",
        "rope_scaling",
        "topk_method",
        "n_group",
        "num_experts_per_tok",
    ];
    for k in want {
        assert!(keys.iter().any(|x| x == k), "{k} missing from {keys:?}");
    }
    // attention_bias = false and q_lora_rank = null change nothing and are not listed.
    assert!(!keys.iter().any(|k| k == "attention_bias"), "{keys:?}");
    assert!(!keys.iter().any(|k| k == "q_lora_rank"), "{keys:?}");
    // Its num_experts_per_tok without Mixtral's num_local_experts does not make it MoE.
    assert!(s.model.moe.is_none() && s.model.mla.is_none());

    let m = with_hf("deepseek-v3.json", "").unwrap().model;
    let moe = m.moe.unwrap();
    assert_eq!(
        (moe.experts, moe.shared_experts, moe.dense_layers),
        (256, 1, 3)
    );
    assert_eq!(m.mla.map(|a| a.kv_lora_rank), Some(512));
}

/// Mistral's sliding window is modelled on every layer; Qwen2's sliding_window with
/// use_sliding_window = false is not read, and its query/key/value biases are modelled. Llama
/// and Mixtral configs import without a warning.
#[test]
fn hf_unmodelled_keys_are_listed() {
    let w = hf_unmodelled("mistral-7b.json", "");
    assert!(w.is_empty(), "{w:?}");
    let window = with_hf("mistral-7b.json", "").unwrap().model.sliding_window;
    assert_eq!(window.map(|w| (w.tokens, w.every)), Some((4096, 1)));
    assert_eq!(
        with_hf("qwen2-7b.json", "").unwrap().model.sliding_window,
        None
    );
    assert!(hf_unmodelled("qwen2-7b.json", "").is_empty());
    let m = with_hf("qwen2-7b.json", "").unwrap().model;
    assert_eq!((m.layers, m.hidden, m.kv_heads), (28, 3584, 4));
    assert!(m.qkv_bias);
    // The scenario's key wins over the config's.
    assert!(
        !with_hf("qwen2-7b.json", "qkv_bias = false")
            .unwrap()
            .model
            .qkv_bias
    );
    assert!(hf_unmodelled("llama2-7b.json", "").is_empty());
    assert!(hf_unmodelled("mixtral-8x7b.json", "").is_empty());
    assert!(hf_unmodelled("gpt2.json", "").is_empty());
}

#[test]
fn hf_errors_point_into_the_json_file() {
    let e = with_hf("broken.json", "").unwrap_err();
    assert_eq!(e.kind, ErrorKind::HfConfig);
    assert!(e.origin.ends_with("fixtures/hf/broken.json"), "{e}");
    assert_eq!((e.line, e.column), (Some(4), Some(3)));
    assert_eq!(e.key, "num_hidden_layers");
    assert_eq!(e.value, "-2");

    let e = with_hf("missing.json", "").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Io);
    assert_eq!(e.key, "model.hf_config");
    assert_eq!((e.line, e.column), (Some(2), Some(13)));
    assert!(
        e.to_string().contains("cannot read Hugging Face config"),
        "{e}"
    );
}

#[test]
fn to_toml_round_trips_test_scenarios() {
    for (tp, pp, dp, m) in [(1, 1, 1, 1), (2, 4, 2, 8), (8, 2, 4, 16)] {
        let s = twin_sim::testing::small_scenario(tp, pp, dp, m);
        let back = parse_str(&to_toml(&s), "t.toml", &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, s);
    }
    let mut s = twin_sim::testing::small_scenario(2, 2, 2, 8);
    s.training.grad_compression = GradCompression::Topk(0.013);
    s.training.sync = SyncMode::Delayed(4);
    s.parallel.layer_partition = Some(vec![7, 9]);
    s.parallel.order = [Axis::Tp, Axis::Dp, Axis::Cp, Axis::Ep, Axis::Pp];
    s.cluster.gpu.hbm_bandwidth_bytes_per_s = 1.0 / 3.0 * 1e12;
    s.model.name = "quote \" and unicode é".into();
    s.model.head_dim = Some(96);
    s.parallel.fsdp = true;
    s.parallel.zero = 3;
    s.parallel.fsdp_degree = Some(1);
    let back = parse_str(&to_toml(&s), "t.toml", &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back, s);
}

use twin_sim::schedule::{OPS_PER_PROGRAM, OPS_PER_STEP};

/// The work estimate bounds the schedule that is then generated, closely enough to be a
/// useful limit, on every bundled scenario and at layer granularity too.
#[test]
fn work_estimate_bounds_every_bundled_schedule() {
    for path in bundled() {
        let Ok(base) = load(&path, &[]) else {
            continue;
        };
        for granularity in ["\"chunk\"", "\"layer\""] {
            let set = [format!("run.granularity={granularity}")];
            let s = load(&path, &set).unwrap_or_else(|e| panic!("{e}"));
            let plan = Plan::new(&s).unwrap();
            let est = twin_sim::schedule::estimate(&s, &plan);
            let schedule = twin_sim::schedule::generate(&s, &plan).unwrap();
            let actual: u64 = schedule.programs.iter().map(|p| p.ops.len() as u64).sum();
            let busiest = schedule.programs.iter().map(|p| p.ops.len() as u64).max();
            let at = format!("{} at {granularity}", path.display());
            assert!(est.total_ops >= actual, "{at}: {est:?} < {actual}");
            // Each compute step brings at least two ops (the compute op and an allocation or
            // free), so the allowance of OPS_PER_STEP per step is within 6x, up to the part
            // that does not grow with micro batches: per program, its fixed ops and a
            // possible bucket cut of each layer.
            let pp = u64::from(plan.pp());
            let fixed = pp * OPS_PER_PROGRAM + OPS_PER_STEP * u64::from(s.model.layers);
            assert!(
                est.total_ops <= 6 * actual + fixed,
                "{at}: {est:?} vs {actual}"
            );
            assert!(
                Some(est.stage_ops) >= busiest,
                "{at}: {est:?} vs {busiest:?}"
            );
        }
        drop(base);
    }
}

/// A micro-batch count or layer count whose schedule would exceed the op bound is refused
/// at validation, naming the overridden key, the limit and what to change.
#[test]
fn huge_schedules_are_refused_with_the_keys() {
    let path = repo().join("scenarios/host/single.toml");
    let e = load(&path, &["training.global_batch=1048576".into()]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::CrossField);
    assert_eq!(e.key, "training.global_batch");
    assert_eq!(e.origin, "--set training.global_batch=1048576");
    assert!(
        e.message.contains("1048576 micro batches per pipeline"),
        "{e}"
    );
    assert!(e.message.contains("limit of 4000000 ops"), "{e}");
    assert!(e.allowed.contains("training.micro_batch"), "{e}");
    assert!(e.allowed.contains("run.granularity = \"chunk\""), "{e}");

    let e = load(
        &repo().join("scenarios/512xA100.toml"),
        &[
            "model.layers=65536".into(),
            "run.granularity=\"layer\"".into(),
        ],
    )
    .unwrap_err();
    assert_eq!(e.key, "run.granularity", "{e}");
    assert!(e.message.contains("ops"), "{e}");
    // Within the bound: the same scenarios with a large but feasible batch load.
    load(&path, &["training.global_batch=16384".into()]).unwrap();
}
