//! What the framework file changes in the model today, each with exact figures on a small
//! case: `[training] cuda_graphs` replaces the kernel gap by the framework's graph replay gap
//! (priced per kernel, so a single-GPU step shrinks by exactly the launches it pays), and the
//! framework's `memory.loss_logits_bytes` sets what the head keeps of the logits (the last
//! stage's peak moves by exactly that difference). The default framework changes nothing:
//! tests/golden.rs holds the bundled scenarios' results. llm-foundry's file prices the block as
//! megatron-core's does and differs, today, only in the logits its loss keeps.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_sim::cost::{Analytic, CostModel};
use twin_sim::engine::{simulate, SimOptions};
use twin_sim::plan::Plan;
use twin_sim::scenario::framework::{AttentionBackend, Bundled};
use twin_sim::scenario::Scenario;
use twin_sim::schedule::{generate, OpKind};
use twin_sim::testing::small_scenario;

/// One GPU: no communication, so the step is its compute ops one after another.
fn one_gpu() -> Scenario {
    small_scenario(1, 1, 1, 2)
}

/// The step time and (kernels, summed compute time) of rank 0's program under `cost`.
fn step(s: &Scenario) -> (u64, u64, u64) {
    let plan = Plan::new(s).unwrap();
    let sched = generate(s, &plan).unwrap();
    let cost = Analytic::new(s);
    let res = simulate(&plan, &sched, &cost, &SimOptions::default()).unwrap();
    let (mut kernels, mut compute_ns) = (0u64, 0u64);
    for op in &sched.programs[sched.program_of[0] as usize].ops {
        if let OpKind::Compute(c) = &op.kind {
            kernels += u64::from(c.kernels);
            compute_ns += cost.compute_ns(0, c);
        }
    }
    (res.step_time_ns, kernels, compute_ns)
}

#[test]
fn cuda_graphs_take_the_framework_s_gap_off_every_kernel() {
    let eager = one_gpu();
    let mut graphed = eager.clone();
    graphed.training.cuda_graphs = true;
    assert_eq!(Analytic::new(&eager).launch_ns, 1_000);
    assert_eq!(
        Analytic::new(&graphed).launch_ns,
        graphed.training.framework.launch.cuda_graphs_kernel_gap_ns
    );
    assert_eq!(Analytic::new(&graphed).launch_ns, 500);
    let (eager_ns, kernels, eager_compute) = step(&eager);
    let (graphed_ns, graphed_kernels, graphed_compute) = step(&graphed);
    assert_eq!(kernels, graphed_kernels);
    assert!(kernels > 0);
    // The step is its compute ops, end to end, with and without graphs.
    assert_eq!(eager_ns, eager_compute);
    assert_eq!(graphed_ns, graphed_compute);
    // 500 ns less per kernel, exactly.
    assert_eq!(eager_ns - graphed_ns, 500 * kernels);
}

/// A profile's gap below the graph gap is kept: graphs never slow a kernel down.
#[test]
fn cuda_graphs_never_lengthen_a_shorter_hardware_gap() {
    let mut s = one_gpu();
    s.training.cuda_graphs = true;
    assert_eq!(twin_sim::cost::kernel_gap_ns(&s, 300), 300);
    assert_eq!(twin_sim::cost::kernel_gap_ns(&s, 2_000), 500);
    s.training.cuda_graphs = false;
    assert_eq!(twin_sim::cost::kernel_gap_ns(&s, 2_000), 2_000);
}

#[test]
fn loss_logits_bytes_set_what_the_head_keeps_and_the_last_stage_s_peak() {
    // pp 2: the head is on stage 1 only.
    let fp32 = small_scenario(1, 2, 1, 4);
    let mut bf16 = fp32.clone();
    bf16.training.framework.memory.loss_logits_bytes = 2;
    let plan = Plan::new(&fp32).unwrap();
    let last = &plan.chunks[1][0];
    let first = &plan.chunks[0][0];
    let a = twin_sim::workload::chunk_work(&fp32, &plan, last).activation_bytes;
    let b = twin_sim::workload::chunk_work(&bf16, &plan, last).activation_bytes;
    // Per micro batch: tokens (micro batch x seq) x vocab / tp, 2 bytes fewer each.
    let m = &fp32.model;
    let logits =
        fp32.training.micro_batch * m.seq_len * m.vocab.div_ceil(u64::from(fp32.parallel.tp));
    assert_eq!(a - b, 2 * logits);
    assert_eq!(
        twin_sim::workload::chunk_work(&fp32, &plan, first).activation_bytes,
        twin_sim::workload::chunk_work(&bf16, &plan, first).activation_bytes
    );
    // The memory timeline: the last stage under 1F1B holds one micro batch's activations at
    // its peak, so its peak drops by exactly that; the first stage's does not move.
    let peak = |s: &Scenario, stage: usize| -> u64 {
        let r = twin_sim::predict(s, &twin_sim::PredictOptions::default()).unwrap();
        r.report.ranks[stage].peak_memory_bytes
    };
    assert_eq!(peak(&fp32, 1) - peak(&bf16, 1), 2 * logits);
    assert_eq!(peak(&fp32, 0), peak(&bf16, 0));
}

/// ZeRO 3 under a framework whose FSDP unit is a layer (torchtitan's FSDP2: one `fully_shard`
/// unit per block) gathers each layer before each forward and backward, where a unit of a
/// chunk (`overlaps.fsdp_unit = "chunk"`) gathers the whole chunk once per pass: 8 layers, 2
/// micro batches, so 8 times the gathers with the same bytes in all, and a gather buffer of a
/// layer (at most two alive: the one computing and the one prefetched) instead of the chunk.
#[test]
fn per_layer_param_gather_gathers_each_layer_and_holds_one_layer_s_buffer() {
    use twin_sim::ir::CollectiveKind;
    use twin_sim::scenario::framework::{Bundled, FsdpUnit};
    let mut layered = small_scenario(1, 1, 2, 2);
    layered.parallel.zero = 3;
    layered.training.framework = Bundled::Torchtitan.framework().unwrap();
    // Every bundled framework gathers per layer; a file of one's own may say `chunk`.
    let mut chunked = layered.clone();
    chunked.training.framework.overlaps.fsdp_unit = FsdpUnit::Chunk;
    let gathers = |s: &Scenario| -> (usize, u64) {
        let plan = Plan::new(s).unwrap();
        let sched = generate(s, &plan).unwrap();
        sched.validate(&plan).unwrap();
        let prog = &sched.programs[sched.program_of[0] as usize];
        let mut n = 0;
        let mut bytes = 0;
        for op in &prog.ops {
            if let OpKind::Collective {
                kind: CollectiveKind::AllGather,
                bytes: b,
                ..
            } = op.kind
            {
                n += 1;
                bytes += b;
            }
        }
        (n, bytes)
    };
    let (n_chunk, bytes_chunk) = gathers(&chunked);
    let (n_layer, bytes_layer) = gathers(&layered);
    // Forward and backward of each of 2 micro batches.
    assert_eq!(n_chunk, 4);
    assert_eq!(n_layer, 8 * 4);
    assert_eq!(bytes_layer, bytes_chunk);

    // The gather buffers at the peak: the chunk's parameters in bf16, or at most two layers'.
    let buffers = |s: &Scenario| -> u64 {
        let r = twin_sim::predict(s, &twin_sim::PredictOptions::default()).unwrap();
        r.report.ranks[0].memory_breakdown.buffers
    };
    let plan = Plan::new(&chunked).unwrap();
    let layout = &plan.chunks[0][0];
    let chunk_params = twin_sim::workload::chunk_params(&chunked, &plan, layout);
    let chunk_bytes = 2 * (chunk_params.dense + chunk_params.expert);
    assert!(buffers(&chunked) >= chunk_bytes);
    let m = &chunked.model;
    // One layer's parameters (with the embedding or head on the first or last layer).
    let embedding = m.vocab * m.hidden;
    let layer_bytes = 2 * ((chunk_params.dense - 2 * embedding) / u64::from(m.layers) + embedding);
    let fp32_grads = 2 * layer_bytes;
    assert!(
        buffers(&layered) <= 2 * layer_bytes + fp32_grads,
        "{} > {}",
        buffers(&layered),
        2 * layer_bytes + fp32_grads
    );
}

/// llm-foundry's file (MPT under Composer, docs/reference/frameworks.md): the eager MPT block
/// launches the same five elementwise kernels over the same passes as megatron-core's layer,
/// so on the same attention kernel and optimizer one GPU's step is exactly as long, and its own Triton
/// kernel makes it longer; flash-attn's fused cross entropy keeps the bf16 logits, so the head
/// holds 2 bytes fewer per logit, and FSDP's fp32 parameters (`memory.fp32_params`) hold 16
/// bytes of state per parameter where Megatron-Core's 16-bit ones beside fp32 masters hold 18,
/// so the peak drops by exactly those.
#[test]
fn llm_foundry_prices_the_block_like_megatron_core_and_keeps_bf16_logits() {
    let mc = one_gpu();
    let mut lf = mc.clone();
    lf.training.framework = Bundled::LlmFoundry.framework().unwrap();
    assert_eq!(lf.training.framework.name, "llm-foundry");
    // Megatron-Core runs flash-attn on this A100.
    assert_eq!(
        twin_sim::cost::scenario_backend(&mc),
        AttentionBackend::Flash
    );
    assert_eq!(
        twin_sim::cost::scenario_backend(&lf),
        AttentionBackend::Triton
    );
    assert!(step(&lf).0 > step(&mc).0);
    let mut same_kernel = lf.clone();
    same_kernel.training.framework.attention_backend = AttentionBackend::Flash;
    // Its optimizer runs an operation at a time and scales the gradients on every step, so
    // the step is longer than under Megatron-Core's fused update.
    assert!(step(&same_kernel).0 > step(&mc).0);
    // With Megatron-Core's update, its pass over fp32 parameters moves fewer bytes; over 16-bit
    // parameters, as Megatron-Core's, the step is the same.
    same_kernel.training.framework.optimizer = mc.training.framework.optimizer;
    assert!(same_kernel.training.framework.memory.fp32_params);
    assert!(step(&same_kernel).0 < step(&mc).0);
    same_kernel.training.framework.memory.fp32_params = false;
    assert_eq!(step(&mc), step(&same_kernel));
    let plan = Plan::new(&mc).unwrap();
    let chunk = &plan.chunks[0][0];
    let a = twin_sim::workload::chunk_work(&mc, &plan, chunk).activation_bytes;
    let b = twin_sim::workload::chunk_work(&lf, &plan, chunk).activation_bytes;
    let m = &mc.model;
    let logits = mc.training.micro_batch * m.seq_len * m.vocab;
    assert_eq!(a - b, 2 * logits);
    let peak = |s: &Scenario| -> u64 {
        let r = twin_sim::predict(s, &twin_sim::PredictOptions::default()).unwrap();
        r.report.ranks[0].peak_memory_bytes
    };
    let params = twin_sim::workload::chunk_params(&mc, &plan, chunk);
    assert_eq!(
        peak(&mc) - peak(&lf),
        2 * logits + 2 * (params.dense + params.expert)
    );
}

/// torchtitan repeats grouped K/V to the query heads before SDPA (`repeat_kv`), so its
/// context-parallel all-gather of K and V carries heads/kv_heads times Megatron-Core's bytes.
#[test]
fn repeated_kv_heads_widen_the_context_parallel_exchange() {
    use twin_sim::ir::CollectiveKind;
    use twin_sim::plan::GroupKind;
    use twin_sim::scenario::framework::Bundled;
    use twin_sim::scenario::CpAlgorithm;
    let mut mc = small_scenario(1, 1, 1, 2);
    mc.parallel.cp = 2;
    mc.cluster.gpus = 2;
    mc.parallel.cp_algorithm = CpAlgorithm::AllGather;
    mc.training.flash_attention = true;
    mc.model.kv_heads = 4;
    let mut tt = mc.clone();
    tt.training.framework = Bundled::Torchtitan.framework().unwrap();
    tt.parallel.zero = 3;
    let cp_gather = |s: &Scenario| -> u64 {
        let plan = Plan::new(s).unwrap();
        let w = twin_sim::workload::chunk_work(s, &plan, &plan.chunks[0][0]);
        w.forward
            .comms
            .iter()
            .filter(|c| c.group == GroupKind::Cp && c.kind == CollectiveKind::AllGather)
            .map(|c| c.bytes * u64::from(c.calls))
            .sum()
    };
    let (a, b) = (cp_gather(&mc), cp_gather(&tt));
    assert!(a > 0);
    assert_eq!(b, a * u64::from(mc.model.heads / mc.model.kv_heads));
    // Memory: without recompute each layer saves K and V at the query width, so a chunk's
    // activations grow by 2 x tokens x (q - kv) bf16 elements per layer (cp halves the tokens).
    let acts = |s: &Scenario| {
        let plan = Plan::new(s).unwrap();
        twin_sim::workload::chunk_work(s, &plan, &plan.chunks[0][0]).activation_bytes
    };
    let tt_plain = {
        let mut s = mc.clone();
        s.training.framework = Bundled::Torchtitan.framework().unwrap();
        s.parallel.zero = 3;
        s.training.framework.kv_heads_repeated = false;
        s
    };
    let m = &mc.model;
    let tokens = mc.training.micro_batch * m.seq_len / 2;
    let (q, kv) = (m.q_width(), m.kv_width());
    assert_eq!(
        acts(&tt) - acts(&tt_plain),
        u64::from(m.layers) * 2 * 2 * tokens * (q - kv)
    );
}
