//! Issue 3's acceptance against the published figures of data/validation/memory.toml.
//! Every measured number comes from the simulator's own memory timeline: the schedule is
//! generated, the engine runs it, and the test reads the live bytes per category at each
//! rank's peak ([`RankStats::memory_at_peak`]). The only numbers written here are the
//! published ones (and the model shapes that the sources state).
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_sim::engine::{simulate, RankStats, SimOptions, SimResult};
use twin_sim::plan::Plan;
use twin_sim::scenario::{
    to_toml, MemoryAccounting, PipelineSchedule, Precision, Recompute, Scenario,
};
use twin_sim::schedule::{generate, MemCategory};
use twin_sim::setup::parse_str;
use twin_sim::testing::small_scenario;
use twin_sim::workload::{chunk_work, model_params};
use twin_sim::{predict, PredictOptions};

const GB: f64 = 1e9;

fn run(s: &Scenario) -> (Plan, SimResult) {
    let plan = Plan::new(s).expect("test scenario plans");
    let schedule = generate(s, &plan).expect("test scenario generates");
    schedule
        .validate(&plan)
        .expect("generated schedule validates");
    let cost = twin_sim::cost::Analytic::new(s);
    let result = simulate(&plan, &schedule, &cost, &SimOptions::default()).expect("simulates");
    (plan, result)
}

fn at_peak(r: &RankStats, cat: MemCategory) -> u64 {
    r.memory_at_peak[cat as usize]
}

/// Within 0.5% of `published`, or within half a unit of its last printed digit when the
/// source rounded more coarsely than that (`unit`: 0.1 for "1.9").
fn close(measured: f64, published: f64, unit: f64) -> bool {
    let tol = (published.abs() * 0.005).max(unit / 2.0);
    (measured - published).abs() <= tol
}

// ---------------------------------------------------------------------------------------
// ZeRO paper: 7.5B parameters, Nd = 64, mixed-precision Adam, model states only.

/// A GPT of 7.5e9 parameters (36 layers of hidden 4096, tied 60,000-word vocabulary) on 64
/// GPUs, pure data parallel, fp16 mixed-precision Adam.
fn zero_scenario(stage: u8) -> Scenario {
    let mut s = small_scenario(1, 1, 64, 1);
    s.model.layers = 36;
    s.model.hidden = 4096;
    s.model.heads = 32;
    s.model.kv_heads = 32;
    s.model.ffn_hidden = 4 * 4096;
    s.model.seq_len = 1024;
    s.model.vocab = 60_000;
    s.model.tied_embeddings = true;
    s.training.precision = Precision::Fp16;
    s.parallel.zero = stage;
    s.parallel.fsdp = false;
    s
}

#[test]
fn zero_paper_model_states_for_stages_0_to_3() {
    let published = [(0u8, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)];
    let params = model_params(&zero_scenario(0).model);
    let p = (params.dense + params.expert) as f64;
    assert!((p / 7.5e9 - 1.0).abs() < 0.001, "model has {p} parameters");
    for (stage, gb) in published {
        let (_, r) = run(&zero_scenario(stage));
        assert_eq!(r.ranks.len(), 64);
        for rank in &r.ranks {
            let states = at_peak(rank, MemCategory::Weights)
                + at_peak(rank, MemCategory::Grads)
                + at_peak(rank, MemCategory::Optimizer);
            let measured = states as f64 / GB;
            assert!(
                close(measured, gb, 0.1),
                "stage {stage}, rank {}: {measured} GB, published {gb} GB",
                rank.rank
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Korthikanti et al. 2022, Table 2: activation bytes per layer.

/// One pipeline stage, one micro batch, `layers` layers; materialised attention (the paper
/// predates flash attention) and 16-bit activations.
fn table2_scenario(layers: u32, t: u32, sp: bool, recompute: Recompute) -> Scenario {
    let mut s = small_scenario(t, 1, 1, 1);
    s.model.layers = layers;
    s.model.hidden = 2048;
    s.model.heads = 16;
    s.model.kv_heads = 16;
    s.model.ffn_hidden = 4 * 2048;
    s.model.seq_len = 2048;
    s.training.micro_batch = 2;
    s.training.global_batch = 2;
    s.training.precision = Precision::Bf16;
    s.training.flash_attention = false;
    s.training.recompute = recompute;
    s.parallel.sequence_parallel = sp;
    s
}

/// Activation bytes at rank 0's peak.
fn activations_at_peak(s: &Scenario) -> u64 {
    let (_, r) = run(s);
    at_peak(&r.ranks[0], MemCategory::Activations)
}

/// Bytes one layer adds to the activations at the peak: a 3-layer run minus a 2-layer run.
/// The embedding, the head and a recompute's one-layer transient are in both and cancel.
fn per_layer(t: u32, sp: bool, recompute: Recompute) -> u64 {
    activations_at_peak(&table2_scenario(3, t, sp, recompute))
        - activations_at_peak(&table2_scenario(2, t, sp, recompute))
}

#[test]
fn korthikanti_table2_every_row() {
    // s = 2048, b = 2, h = 2048, a = 16.
    let (s, b, h, a) = (2048.0, 2.0, 2048.0, 16.0);
    let sbh = s * b * h;
    for t in [1u32, 2, 4, 8] {
        let tf = f64::from(t);
        let rows = [
            // (sp, recompute, published, row)
            (
                false,
                Recompute::None,
                if t == 1 {
                    sbh * (34.0 + 5.0 * a * s / h)
                } else {
                    sbh * (10.0 + 24.0 / tf + 5.0 * a * s / (h * tf))
                },
                "no parallelism / tensor parallel",
            ),
            (
                true,
                Recompute::None,
                sbh / tf * (34.0 + 5.0 * a * s / h),
                "tensor + sequence parallel",
            ),
            (
                false,
                Recompute::Selective,
                sbh * (10.0 + 24.0 / tf),
                "tensor parallel, selective",
            ),
            (
                true,
                Recompute::Selective,
                sbh * 34.0 / tf,
                "tensor + sequence parallel, selective",
            ),
            (false, Recompute::Full, 2.0 * sbh, "full recompute"),
        ];
        for (sp, recompute, published, row) in rows {
            let measured = per_layer(t, sp, recompute) as f64;
            assert!(
                close(measured, published, 0.0),
                "{row}, t = {t}: {measured} bytes per layer, published {published}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Pipeline schedules: micro batches in flight at the peak.

/// p stages of `layers / p` layers, tensor + sequence parallel, materialised attention, no
/// recompute.
fn pipeline_scenario(
    p: u32,
    m: u64,
    schedule: PipelineSchedule,
    vpp: u32,
    layers: u32,
) -> Scenario {
    let mut s = table2_scenario(layers, 2, true, Recompute::None);
    s.parallel.pp = p;
    s.parallel.vpp = vpp;
    s.parallel.schedule = schedule;
    s.cluster.gpus = 2 * p;
    s.cluster.gpus_per_node = 8.min(2 * p);
    s.training.global_batch = m * s.training.micro_batch;
    s
}

/// Activation bytes one micro batch saves on `stage` (all its chunks), from the workload.
fn per_microbatch(s: &Scenario, plan: &Plan, stage: u32) -> u64 {
    plan.chunks[stage as usize]
        .iter()
        .map(|c| chunk_work(s, plan, c).activation_bytes)
        .sum()
}

#[test]
fn one_f_one_b_stage_i_holds_p_minus_i_micro_batches() {
    let (p, m) = (4u32, 8u64);
    let s = pipeline_scenario(p, m, PipelineSchedule::OneFOneB, 1, 8);
    let (plan, r) = run(&s);
    for rank in &r.ranks {
        let stage = plan.stage_of(rank.rank);
        let held = at_peak(rank, MemCategory::Activations);
        assert_eq!(
            held,
            u64::from(p - stage) * per_microbatch(&s, &plan, stage),
            "stage {stage}"
        );
    }
}

#[test]
fn gpipe_holds_every_micro_batch() {
    let (p, m) = (4u32, 6u64);
    let s = pipeline_scenario(p, m, PipelineSchedule::Gpipe, 1, 8);
    let (plan, r) = run(&s);
    for rank in &r.ranks {
        let stage = plan.stage_of(rank.rank);
        let held = at_peak(rank, MemCategory::Activations);
        assert_eq!(held, m * per_microbatch(&s, &plan, stage), "stage {stage}");
    }
}

#[test]
fn one_f_one_b_first_stage_total_is_sbhl_over_t_times_34_plus_5as_over_h() {
    // p micro batches of L/p layers: the whole model's activations on the first stage.
    let (p, layers) = (4u32, 32u32);
    let s = pipeline_scenario(p, 8, PipelineSchedule::OneFOneB, 1, layers);
    let (plan, r) = run(&s);
    let first = r
        .ranks
        .iter()
        .find(|x| plan.stage_of(x.rank) == 0)
        .expect("a first-stage rank");
    let (sq, b, h, a, t) = (2048.0, 2.0, 2048.0, 16.0, 2.0);
    let published = sq * b * h * f64::from(layers) / t * (34.0 + 5.0 * a * sq / h);
    let measured = at_peak(first, MemCategory::Activations) as f64;
    assert!(
        close(measured, published, 0.0),
        "{measured} bytes, published {published}"
    );
}

#[test]
fn interleaving_multiplies_the_first_stage_by_1_plus_p_minus_1_over_p_v() {
    let layers = 64u32;
    for (p, v) in [(4u32, 2u32), (4, 4), (2, 4)] {
        let m = 2 * u64::from(p);
        let plain = pipeline_scenario(p, m, PipelineSchedule::OneFOneB, 1, layers);
        let inter = pipeline_scenario(p, m, PipelineSchedule::Interleaved1F1B, v, layers);
        let first = |s: &Scenario| {
            let (plan, r) = run(s);
            let rank = r
                .ranks
                .iter()
                .find(|x| plan.stage_of(x.rank) == 0)
                .expect("a first-stage rank");
            at_peak(rank, MemCategory::Activations) as f64
        };
        let factor = first(&inter) / first(&plain);
        let published = 1.0 + f64::from(p - 1) / f64::from(p * v);
        assert!(
            close(factor, published, 0.0),
            "p = {p}, v = {v}: factor {factor}, published {published}"
        );
    }
}

/// Qi et al. 2023 (Zero Bubble Pipeline Parallelism, arXiv 2401.10241): ZB-H1 keeps the
/// largest peak over the stages at 1F1B's `p` micro batches; later stages, whose W passes wait,
/// hold more than 1F1B's `p - i` (here all of them reach `p`).
#[test]
fn zero_bubble_h1_holds_at_most_p_micro_batches_and_later_stages_more_than_1f1b() {
    let (p, m) = (4u32, 8u64);
    let s = pipeline_scenario(p, m, PipelineSchedule::ZeroBubble, 1, 8);
    let (plan, r) = run(&s);
    let mut most = 0;
    for rank in &r.ranks {
        let stage = plan.stage_of(rank.rank);
        let per = per_microbatch(&s, &plan, stage);
        let held = at_peak(rank, MemCategory::Activations);
        assert_eq!(held % per, 0, "stage {stage}: whole micro batches");
        let n = held / per;
        assert!(n <= u64::from(p), "stage {stage} holds {n}");
        if stage > 0 {
            assert!(n > u64::from(p - stage), "stage {stage} holds {n}");
        }
        most = most.max(n);
    }
    assert_eq!(most, u64::from(p));
}

// ---------------------------------------------------------------------------------------
// DeepSpeed's memory estimator for t5-3b on one node of 8 GPUs (memory.toml,
// [deepspeed_estimator]), under `[memory] accounting = "deepspeed"`.

const GIB: f64 = (1u64 << 30) as f64;

/// A t5-3b stand-in: the twin models decoder-only transformers, so this is not T5's shape,
/// but it has t5-3b's exact parameter count, 2,851,598,336, and its largest module, the
/// shared 32128 x 1024 embedding (32,899,072), which are all the estimator reads. (The file's
/// 2851e6 and 32e6 are those two numbers as DeepSpeed prints them, in whole millions; its
/// published rows were computed from the exact ones.) 79 GPT-style layers of hidden 1024,
/// 32 heads, MLP 15360, tied embeddings; the 274 learned positions fill the count exactly.
/// Pure data parallel over 8 GPUs, fp16 mixed-precision Adam, no framework reserve.
fn t5_3b(zero: u8, offload: &str) -> Scenario {
    let text = r#"
name = "t5-3b-deepspeed"
[model]
layers = 79
hidden = 1024
heads = 32
ffn_hidden = 15360
seq_len = 274
vocab = 32128
tied_embeddings = true
[cluster]
gpu = "a100-sxm-80gb"
gpus = 8
node = "dgx-a100"
[parallel]
tp = 1
pp = 1
[training]
global_batch = 8
micro_batch = 1
precision = "fp16"
[memory]
reserved_bytes = 0
accounting = "deepspeed"
"#;
    let overrides = [
        format!("parallel.zero={zero}"),
        format!("training.offload={offload}"),
    ];
    parse_str(text, "t5-3b.toml", &overrides).expect("t5-3b scenario parses")
}

/// GPU (model states and the ZeRO-3 gather buffers at the peak, per rank) and host (sum of
/// the node's ranks' peaks: every rank runs the same program, so their peaks coincide) GiB.
fn deepspeed_row(zero: u8, offload: &str) -> (Vec<f64>, f64) {
    let s = t5_3b(zero, offload);
    let p = predict(&s, &PredictOptions::default()).expect("t5-3b predicts");
    let node = s.cluster.gpus_per_node;
    let mut gpu = Vec::new();
    let mut host_node = 0u64;
    for r in &p.result.ranks {
        // Activations are not model state; the estimator leaves them out.
        let states = at_peak(r, MemCategory::Weights)
            + at_peak(r, MemCategory::Grads)
            + at_peak(r, MemCategory::Optimizer)
            + at_peak(r, MemCategory::Buffers);
        assert_eq!(
            at_peak(r, MemCategory::Reserved),
            0,
            "no reserve, no GPU slack"
        );
        gpu.push(states as f64 / GIB);
        if r.rank / node == 0 {
            host_node += r.host_memory_peak_bytes;
        }
    }
    // The report's breakdown agrees with the engine's (same numbers, through `predict`).
    for e in &p.report.ranks {
        let b = &e.memory_breakdown;
        let states = b.weights + b.grads + b.optimizer + b.buffers;
        assert!(gpu.iter().all(|g| (*g - states as f64 / GIB).abs() < 1e-12));
    }
    (gpu, host_node as f64 / GIB)
}

/// The published figures have two decimals: within 0.5%, or within their rounding when that
/// is coarser (0.12 GiB).
fn check_row(what: &str, zero: u8, offload: &str, gpu_gib: f64, cpu_gib: f64) {
    let (gpu, host) = deepspeed_row(zero, offload);
    assert_eq!(gpu.len(), 8);
    for (rank, g) in gpu.iter().enumerate() {
        assert!(
            close(*g, gpu_gib, 0.01),
            "{what}, rank {rank}: {g} GiB per GPU, published {gpu_gib}"
        );
    }
    assert!(
        close(host, cpu_gib, 0.01),
        "{what}: {host} GiB per node, published {cpu_gib}"
    );
}

#[test]
fn deepspeed_t5_3b_model_is_the_estimators() {
    let s = t5_3b(3, "none");
    let p = model_params(&s.model);
    let total = p.dense + p.expert;
    // DeepSpeed prints whole millions: "2851M total params, 32M largest layer params".
    assert_eq!(total / 1_000_000, 2851);
    let plan = Plan::new(&s).expect("plans");
    let largest = plan
        .chunks
        .iter()
        .flatten()
        .map(|c| chunk_work(&s, &plan, c).largest_module_params)
        .max()
        .expect("one chunk");
    assert_eq!(largest / 1_000_000, 32);
    assert_eq!(
        largest,
        32128 * 1024,
        "the word embedding is the largest module"
    );
}

#[test]
fn deepspeed_estimator_zero2_t5_3b() {
    check_row("zero2, offload_optimizer=cpu", 2, "optimizer", 5.31, 127.48);
    check_row("zero2, offload_optimizer=none", 2, "none", 15.93, 127.48);
}

#[test]
fn deepspeed_estimator_zero3_t5_3b() {
    check_row(
        "zero3, offload_param=cpu, offload_optimizer=cpu",
        3,
        "params",
        0.12,
        71.71,
    );
    check_row(
        "zero3, offload_param=none, offload_optimizer=cpu",
        3,
        "optimizer",
        0.79,
        63.74,
    );
    check_row(
        "zero3, offload_param=none, offload_optimizer=none",
        3,
        "none",
        6.10,
        1.47,
    );
}

/// The option changes what is counted, not the ZeRO paper's figures under the default.
#[test]
fn deepspeed_accounting_is_not_the_default() {
    let s = t5_3b(2, "none");
    let mut megatron = s.clone();
    megatron.memory = twin_sim::scenario::MemorySettings {
        reserved_bytes: 0,
        ..Default::default()
    };
    let gpu = |s: &Scenario| {
        let (_, r) = run(s);
        let x = &r.ranks[0];
        at_peak(x, MemCategory::Grads) + at_peak(x, MemCategory::Optimizer)
    };
    // Megatron: 2P of fp16 gradients sharded (ZeRO-2) + 12P/N; DeepSpeed: 2P all live
    // + (4 + 12)P/N.
    assert!(gpu(&s) > gpu(&megatron));
}

#[test]
fn accounting_key_is_parsed_located_and_round_tripped() {
    let base = "name = \"t\"\n[model]\nlayers = 8\nhidden = 1024\nheads = 16\nseq_len = 1024\nvocab = 32000\n[cluster]\ngpu = \"a100-sxm-80gb\"\ngpus = 8\nnode = \"dgx-a100\"\n[training]\nglobal_batch = 8\n[memory]\n";
    let plain = parse_str(base, "m.toml", &[]).expect("parses");
    assert_eq!(plain.memory.accounting, MemoryAccounting::Megatron);
    let err = parse_str(
        &format!("{base}accounting = \"deepspeeed\"\n"),
        "m.toml",
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("m.toml:15:"), "{err}");
    assert!(err.contains("memory.accounting"), "{err}");
    assert!(err.contains("did you mean `deepspeed`"), "{err}");
    let err = parse_str(&format!("{base}accounting = 1\n"), "m.toml", &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("memory.accounting"), "{err}");
    let s = parse_str(
        &format!("{base}accounting = \"deepspeed\"\n"),
        "m.toml",
        &[],
    )
    .expect("parses");
    assert_eq!(s.memory.accounting, MemoryAccounting::Deepspeed);
    let again = parse_str(&to_toml(&s), "again.toml", &[]).expect("round trip parses");
    assert_eq!(again.memory, s.memory);
    let set = parse_str(base, "m.toml", &["memory.accounting=deepspeed".to_string()])
        .expect("override parses");
    assert_eq!(set.memory.accounting, MemoryAccounting::Deepspeed);
}

/// DeepSpeed accounting on every ZeRO stage, offload, pipeline depth, micro batch count and
/// granularity: the schedule validates, runs, and leaves nothing allocated, and the host holds
/// the model being built.
#[test]
fn deepspeed_accounting_timeline_is_valid_everywhere() {
    use twin_sim::scenario::{Granularity, Offload};
    for zero in 0u8..=3 {
        for offload in [Offload::None, Offload::Optimizer, Offload::Params] {
            if offload == Offload::Params && zero < 3 {
                continue;
            }
            for (pp, m, granularity) in [
                (1u32, 1u64, Granularity::Chunk),
                (1, 4, Granularity::Layer),
                (2, 4, Granularity::Chunk),
                (2, 3, Granularity::Layer),
            ] {
                let mut s = small_scenario(1, pp, 4, m);
                s.parallel.zero = zero;
                s.training.offload = offload;
                s.run.granularity = granularity;
                s.memory.accounting = MemoryAccounting::Deepspeed;
                let p = predict(&s, &PredictOptions::default()).expect("predicts");
                for r in &p.result.ranks {
                    assert_eq!(r.end_memory_bytes, 0, "zero {zero}, {offload:?}, pp {pp}");
                    // The fp32 model built on the host before the step.
                    assert!(r.host_memory_peak_bytes > 0, "zero {zero}, {offload:?}");
                }
            }
        }
    }
}
