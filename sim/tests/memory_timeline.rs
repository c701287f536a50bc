//! The memory timeline's own guarantees, checked by running the engine on generated
//! schedules: over random configurations live memory never goes negative and every
//! allocation is freed by the end of the step; the framework reserve and allocator slack of
//! `[memory]` show up in category reserved; offload moves state to host memory; recompute
//! holds its re-materialised layer; and the verdict names the first op that crosses HBM.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use proptest::prelude::*;
use twin_sim::engine::{simulate, SimOptions, SimResult};
use twin_sim::plan::Plan;
use twin_sim::scenario::*;
use twin_sim::schedule::{generate, MemCategory, OpKind};
use twin_sim::setup::parse_str;
use twin_sim::testing::small_scenario;
use twin_sim::{predict, PredictOptions};

fn run_with(s: &Scenario, opts: &SimOptions) -> (Plan, SimResult) {
    let plan = Plan::new(s).expect("test scenario plans");
    let schedule = generate(s, &plan).expect("test scenario generates");
    let cost = twin_sim::cost::Analytic::new(s);
    let r = simulate(&plan, &schedule, &cost, opts).expect("simulates");
    (plan, r)
}

fn run(s: &Scenario) -> (Plan, SimResult) {
    let opts = SimOptions {
        trace: true,
        ..SimOptions::default()
    };
    run_with(s, &opts)
}

fn cat(r: &twin_sim::engine::RankStats, c: MemCategory) -> u64 {
    r.memory_at_peak[c as usize]
}

#[derive(Clone, Debug)]
struct Cfg {
    pp: u32,
    tp: u32,
    dp: u32,
    ep: u32,
    m_factor: u32,
    schedule: PipelineSchedule,
    zero: u8,
    fsdp: bool,
    recompute: Recompute,
    precision: Precision,
    offload: Offload,
    sp: bool,
    flash: bool,
    layer_granularity: bool,
    uneven: bool,
    slack: f64,
}

fn scenario(c: &Cfg) -> Scenario {
    let mut s = small_scenario(c.tp, c.pp, c.dp, 1);
    let vpp = if c.schedule == PipelineSchedule::Interleaved1F1B {
        2
    } else {
        1
    };
    let m = if c.schedule == PipelineSchedule::Interleaved1F1B {
        c.pp * c.m_factor
    } else {
        c.m_factor + c.pp / 2
    };
    s.parallel.vpp = vpp;
    s.parallel.ep = c.ep;
    // `c.dp` is the expert layers' data parallelism; the scenario's is the dense layers'.
    s.parallel.dp = c.dp * c.ep;
    s.parallel.zero = if c.fsdp { 3 } else { c.zero };
    s.parallel.fsdp = c.fsdp;
    s.parallel.schedule = c.schedule;
    s.parallel.sequence_parallel = c.sp && c.tp > 1;
    s.cluster.gpus = c.tp * c.pp * c.dp * c.ep;
    s.cluster.gpus_per_node = 8.min(s.cluster.gpus);
    s.model.layers = 2 * c.pp * vpp;
    if c.uneven && c.pp > 1 && vpp == 1 {
        // First and last stages one layer lighter (they hold the embedding and the head).
        let mut part = vec![2u32; c.pp as usize];
        part[0] = 1;
        part[c.pp as usize - 1] = 1;
        part[1] += 2;
        s.parallel.layer_partition = Some(part);
    }
    if c.ep > 1 {
        let ffn_hidden = s.model.ffn_hidden;
        s.model.moe = Some(Moe::uniform(4, 2, 1, ffn_hidden));
    }
    s.training.global_batch = u64::from(m * c.dp * c.ep);
    s.training.recompute = c.recompute;
    s.training.precision = c.precision;
    s.training.offload = c.offload;
    s.training.flash_attention = c.flash;
    s.memory.allocator_slack_fraction = c.slack;
    s.run.granularity = if c.layer_granularity {
        Granularity::Layer
    } else {
        Granularity::Chunk
    };
    s
}

fn cfg_strategy() -> impl Strategy<Value = Cfg> {
    let mesh = (1u32..=4, 1u32..=2, 1u32..=3, 1u32..=2, 1u32..=3);
    let modes = (
        prop_oneof![
            Just(PipelineSchedule::Gpipe),
            Just(PipelineSchedule::OneFOneB),
            Just(PipelineSchedule::Interleaved1F1B),
            Just(PipelineSchedule::ZeroBubble),
        ],
        0u8..=3,
        any::<bool>(),
        prop_oneof![
            Just(Recompute::None),
            Just(Recompute::Selective),
            Just(Recompute::Full)
        ],
        prop_oneof![
            Just(Precision::Fp32),
            Just(Precision::Fp16),
            Just(Precision::Bf16),
            Just(Precision::Fp8)
        ],
        prop_oneof![
            Just(Offload::None),
            Just(Offload::Optimizer),
            Just(Offload::Params)
        ],
    );
    let more = (
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(0.0), Just(0.07)],
    );
    (mesh, modes, more).prop_map(
        |(
            (pp, tp, dp, ep, m_factor),
            (schedule, zero, fsdp, recompute, precision, offload),
            (sp, flash, layer_granularity, uneven, slack),
        )| Cfg {
            pp,
            tp,
            dp,
            ep,
            m_factor,
            schedule,
            zero,
            fsdp,
            recompute,
            precision,
            offload,
            sp,
            flash,
            layer_granularity,
            uneven,
            slack,
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Live memory never goes negative (the engine fails a free whose alloc has not run, and
    /// a program that leaves an allocation unfreed) and is zero at the end of the step; the
    /// trace's memory samples agree.
    #[test]
    fn timeline_never_negative_and_empty_at_the_end(c in cfg_strategy()) {
        let s = scenario(&c);
        let (_, r) = run(&s);
        let trace = r.trace.as_ref().expect("trace requested");
        for rank in &r.ranks {
            prop_assert_eq!(rank.end_memory_bytes, 0, "rank {} for {:?}", rank.rank, c);
            let sum: u64 = rank.memory_at_peak.iter().sum();
            prop_assert_eq!(sum, rank.peak_memory_bytes);
            prop_assert!(cat(rank, MemCategory::Reserved) >= s.memory.reserved_bytes);
            let last = trace.memory.iter().rev().find(|m| m.rank == rank.rank);
            if let Some(last) = last {
                prop_assert_eq!(last.bytes, [0; MemCategory::COUNT]);
            }
            let max_sample = trace
                .memory
                .iter()
                .filter(|m| m.rank == rank.rank)
                .map(|m| m.bytes.iter().sum::<u64>())
                .max()
                .unwrap_or(0);
            prop_assert_eq!(max_sample, rank.peak_memory_bytes);
        }
    }
}

#[test]
fn reserve_from_the_memory_section_is_held_all_step() {
    let text = r#"name = "reserve"
[model]
layers = 8
hidden = 1024
heads = 16
seq_len = 1024
vocab = 32000
[cluster]
gpu = "a100-sxm-80gb"
gpus = 8
node = "dgx-a100"
[parallel]
tp = 2
pp = 2
dp = 2
[training]
global_batch = 8
[memory]
reserved_bytes = 2_000_000_000
"#;
    let s = parse_str(text, "reserve.toml", &[]).unwrap();
    assert_eq!(s.memory.reserved_bytes, 2_000_000_000);
    assert_eq!(
        s.memory.allocator_slack_fraction,
        MemorySettings::DEFAULT_ALLOCATOR_SLACK_FRACTION
    );
    let (_, r) = run(&s);
    for rank in &r.ranks {
        assert_eq!(cat(rank, MemCategory::Reserved), 2_000_000_000);
    }
    // The default when the section is absent.
    let plain = parse_str(
        &text.replace("[memory]\nreserved_bytes = 2_000_000_000\n", ""),
        "p.toml",
        &[],
    )
    .unwrap();
    assert_eq!(plain.memory, MemorySettings::default());
    let (_, r) = run(&plain);
    assert_eq!(
        cat(&r.ranks[0], MemCategory::Reserved),
        MemorySettings::DEFAULT_RESERVED_BYTES
    );
}

#[test]
fn allocator_slack_is_a_fraction_of_the_transient_allocations() {
    let mut s = small_scenario(2, 2, 2, 4);
    s.memory.reserved_bytes = 1 << 30;
    s.memory.allocator_slack_fraction = 0.1;
    let (plan, r) = run(&s);
    let schedule = generate(&s, &plan).unwrap();
    let allocs = schedule.programs[0]
        .ops
        .iter()
        .filter(|o| matches!(o.kind, OpKind::Alloc { .. }))
        .count() as u64;
    for rank in &r.ranks {
        let transient = cat(rank, MemCategory::Activations) + cat(rank, MemCategory::Buffers);
        let slack = cat(rank, MemCategory::Reserved) - (1 << 30);
        // Each slack allocation rounds its fraction up to a whole byte.
        let lo = (transient as f64 * 0.1).floor() as u64;
        assert!(
            slack >= lo && slack <= lo + allocs,
            "slack {slack} for {transient} transient bytes"
        );
        assert!(slack > 0);
    }
    // Without slack the peak is lower by at least the slack at the peak.
    s.memory.allocator_slack_fraction = 0.0;
    let (_, r0) = run(&s);
    assert!(r0.ranks[0].peak_memory_bytes < r.ranks[0].peak_memory_bytes);
}

#[test]
fn offload_moves_state_to_host_memory() {
    // ZeRO-3: parameter offload needs sharded parameters (as DeepSpeed's does).
    let mut s = small_scenario(1, 1, 4, 2);
    s.parallel.zero = 3;
    let (_, base) = run(&s);
    s.training.offload = Offload::Optimizer;
    let (_, opt) = run(&s);
    s.training.offload = Offload::Params;
    let (_, params) = run(&s);
    let (b, o, p) = (&base.ranks[0], &opt.ranks[0], &params.ranks[0]);
    assert_eq!(b.host_memory_peak_bytes, 0);
    assert_eq!(cat(o, MemCategory::Optimizer), 0);
    assert_eq!(o.host_memory_peak_bytes, cat(b, MemCategory::Optimizer));
    assert_eq!(cat(p, MemCategory::Weights), 0);
    assert_eq!(
        p.host_memory_peak_bytes,
        cat(b, MemCategory::Optimizer) + cat(b, MemCategory::Weights)
    );
    // Gradients stay on the GPU.
    assert_eq!(cat(p, MemCategory::Grads), cat(b, MemCategory::Grads));
}

#[test]
fn recompute_holds_one_rematerialised_layer_at_its_peak() {
    // One stage, one micro batch: the peak is the recompute's allocation, on top of the
    // saved activations: one layer as if nothing were recomputed, minus what was saved of it.
    let one = |layers: u32, rc: Recompute| {
        let mut s = small_scenario(1, 1, 1, 1);
        s.model.layers = layers;
        s.training.flash_attention = false;
        s.training.recompute = rc;
        let (_, r) = run(&s);
        cat(&r.ranks[0], MemCategory::Activations)
    };
    let layer_none = one(3, Recompute::None) - one(2, Recompute::None);
    for rc in [Recompute::Selective, Recompute::Full] {
        let layer_saved = one(3, rc) - one(2, rc);
        let at_peak = one(2, rc);
        let saved_total = one(2, Recompute::None) - 2 * layer_none + 2 * layer_saved;
        assert_eq!(at_peak, saved_total + (layer_none - layer_saved), "{rc:?}");
    }
}

#[test]
fn verdict_names_the_first_op_that_crosses_hbm() {
    // 1F1B over 4 stages with 8 micro batches: stage 0 climbs to 4 micro batches in flight.
    let mut s = small_scenario(1, 4, 1, 8);
    s.model.layers = 16;
    s.training.flash_attention = false;
    let (_, free) = run(&s);
    let peak = free.ranks[0].peak_memory_bytes;
    // An HBM a little above the memory with one micro batch less in flight.
    s.cluster.gpu.hbm_bytes = peak - cat(&free.ranks[0], MemCategory::Activations) / 8;
    let p = predict(
        &s,
        &PredictOptions {
            trace: true,
            reproducible: true,
            ..PredictOptions::default()
        },
    )
    .unwrap();
    let report = &p.report;
    assert!(!report.fits);
    let oom = report.oom.as_ref().unwrap();
    assert_eq!(oom.rank, 0);
    assert_eq!(oom.over_bytes, peak - s.cluster.gpu.hbm_bytes);
    let stats = &p.result.ranks[0];
    assert_eq!(oom.op, stats.over_capacity_op);
    let op_name = oom.op_name.as_deref().unwrap();
    assert!(op_name.starts_with("alloc "), "{op_name}");
    // The first memory sample over HBM is at that op's time.
    let trace = p.result.trace.as_ref().unwrap();
    let first = trace
        .memory
        .iter()
        .filter(|m| m.rank == 0)
        .find(|m| m.bytes.iter().sum::<u64>() > s.cluster.gpu.hbm_bytes)
        .unwrap();
    assert_eq!(first.time_ns, stats.over_capacity_time_ns);
    assert!(stats.over_capacity_time_ns <= stats.peak_time_ns);
    assert!(report.verdict().starts_with("OUT OF MEMORY by "));
    assert!(report.verdict().contains(op_name));
    // And with room to spare the verdict says how much is free.
    s.cluster.gpu.hbm_bytes = 80_000_000_000;
    let p = predict(&s, &PredictOptions::default()).unwrap();
    assert!(p.report.verdict().starts_with("fits with "));
    assert_eq!(p.result.ranks[0].over_capacity_op, None);
}

#[test]
fn memory_section_errors_are_located() {
    let base = "name = \"t\"\n[model]\nlayers = 8\nhidden = 1024\nheads = 16\nseq_len = 1024\nvocab = 32000\n[cluster]\ngpu = \"a100-sxm-80gb\"\ngpus = 8\nnode = \"dgx-a100\"\n[training]\nglobal_batch = 8\n[memory]\n";
    let err = parse_str(
        &format!("{base}allocator_slack_fraction = 2\n"),
        "m.toml",
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("m.toml:15:"), "{err}");
    assert!(err.contains("memory.allocator_slack_fraction"), "{err}");
    let err = parse_str(&format!("{base}reserved_byte = 1\n"), "m.toml", &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("did you mean `reserved_bytes`"), "{err}");
    let err = parse_str(&format!("{base}reserved_bytes = -1\n"), "m.toml", &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("memory.reserved_bytes"), "{err}");
    // Round trip through the explicit form keeps the section.
    let s = parse_str(
        &format!("{base}reserved_bytes = 123456\nallocator_slack_fraction = 0.25\n"),
        "m.toml",
        &[],
    )
    .unwrap();
    let again = parse_str(&to_toml(&s), "again.toml", &[]).unwrap();
    assert_eq!(again.memory, s.memory);
    assert_eq!(again.memory.reserved_bytes, 123_456);
}

#[test]
fn zero2_accumulates_unsharded_gradients_over_micro_batches() {
    let state = |zero: u8, m: u64| {
        let mut s = small_scenario(1, 1, 4, m);
        s.parallel.zero = zero;
        let (_, r) = run(&s);
        let rank = &r.ranks[0];
        (
            cat(rank, MemCategory::Grads),
            cat(rank, MemCategory::Buffers),
        )
    };
    let (zero1_grads, _) = state(1, 4);
    let (zero2_grads, zero2_one_mb) = state(2, 1);
    let (zero2_grads_m, zero2_many_mb) = state(2, 4);
    // The state holds the shard either way ...
    assert_eq!(zero2_grads, zero2_grads_m);
    assert!(zero2_grads * 4 <= zero1_grads + 4 && zero2_grads * 4 >= zero1_grads);
    // ... and accumulating over micro batches adds the unsharded gradients as a buffer.
    assert_eq!(zero2_many_mb - zero2_one_mb, zero1_grads);
}

#[test]
fn perfetto_memory_counter_has_every_category() {
    let s = small_scenario(1, 2, 1, 2);
    let p = predict(
        &s,
        &PredictOptions {
            trace: true,
            reproducible: true,
            ..PredictOptions::default()
        },
    )
    .unwrap();
    let json = p.trace_json().unwrap();
    let counter = json
        .lines()
        .find(|l| l.contains("\"ph\":\"C\",\"name\":\"memory\""))
        .expect("a memory counter sample");
    for c in MemCategory::ALL {
        assert!(counter.contains(&format!("\"{}\":", c.name())), "{counter}");
    }
    let reserve = format!("\"reserved\":{}", s.memory.reserved_bytes);
    assert!(json.contains(&reserve), "no sample holds the reserve");
}
