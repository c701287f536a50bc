//! Data-parallel traffic of generated schedules: overlapped buckets, compression, async and
//! delayed sync, ZeRO-1/2 parameter gathers, ZeRO-3/FSDP per-pass gathers and scatters,
//! expert-parallel gradient groups.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_sim::scenario::*;
use twin_sim::schedule::*;
use twin_sim::testing::small_scenario;

mod common;
use common::{gen_ok, is_phase};

fn dp_scenario(zero: u8) -> Scenario {
    let mut s = small_scenario(1, 2, 4, 4);
    s.parallel.zero = zero;
    s.training.grad_bucket_bytes = 1 << 20; // one uniform layer's gradients
    s
}

fn dp_collectives(prog: &Program, kind: CollectiveKind) -> Vec<usize> {
    use twin_sim::plan::GroupKind;
    prog.ops
        .iter()
        .enumerate()
        .filter(|(_, o)| {
            matches!(o.kind, OpKind::Collective { kind: k, group: GroupKind::DenseDp | GroupKind::ExpertDp, .. } if k == kind)
        })
        .map(|(i, _)| i)
        .collect()
}

fn wire_bytes(prog: &Program, kind: CollectiveKind) -> u64 {
    dp_collectives(prog, kind)
        .iter()
        .map(|&i| prog.ops[i].comm_bytes())
        .sum()
}

#[test]
fn overlapped_buckets_start_during_the_last_backward() {
    let s = dp_scenario(0);
    let prog = &gen_ok(&s, 0).programs[0];
    let last_bwd = prog
        .ops
        .iter()
        .rposition(|o| is_phase(o, Phase::Backward))
        .unwrap();
    let ars = dp_collectives(prog, CollectiveKind::AllReduce);
    assert!(
        ars.len() > 1,
        "one bucket per layer expected, got {}",
        ars.len()
    );
    assert!(
        ars[0] < last_bwd,
        "first bucket must be issued before the last backward piece"
    );
    for &i in &ars {
        let dep = prog.ops[i].deps[0] as usize;
        assert!(
            is_phase(&prog.ops[dep], Phase::Backward),
            "bucket waits for its backward piece"
        );
    }
    // without overlap: every bucket after the last backward, same bytes in total
    let mut s2 = s.clone();
    s2.training.overlap_grad_reduce = false;
    let prog2 = &gen_ok(&s2, 0).programs[0];
    let last_bwd2 = prog2
        .ops
        .iter()
        .rposition(|o| is_phase(o, Phase::Backward))
        .unwrap();
    assert!(dp_collectives(prog2, CollectiveKind::AllReduce)
        .iter()
        .all(|&i| i > last_bwd2));
    assert_eq!(
        wire_bytes(prog, CollectiveKind::AllReduce),
        wire_bytes(prog2, CollectiveKind::AllReduce)
    );
}

#[test]
fn compression_shrinks_bytes_and_adds_compress_ops() {
    let s = dp_scenario(0);
    let plain = gen_ok(&s, 0);
    let mut s8 = s.clone();
    s8.training.grad_compression = GradCompression::Int8;
    let int8 = gen_ok(&s8, 0);
    for (a, b) in plain.programs.iter().zip(&int8.programs) {
        let (wa, wb) = (
            wire_bytes(a, CollectiveKind::AllReduce),
            wire_bytes(b, CollectiveKind::AllReduce),
        );
        assert!(wa > 0);
        assert_eq!(wb * 4, wa, "int8 sends a quarter of fp32 gradients");
        let sites = dp_collectives(b, CollectiveKind::AllReduce).len();
        let compress = b
            .ops
            .iter()
            .filter(|o| is_phase(o, Phase::Compress))
            .count();
        assert_eq!(
            compress,
            2 * sites,
            "one compress before, one decompress after each"
        );
        assert_eq!(
            a.ops
                .iter()
                .filter(|o| is_phase(o, Phase::Compress))
                .count(),
            0
        );
    }
}

/// `grad_reduce_dtype = "bf16"` (Megatron-Core's `grad_reduce_in_fp32 = false`) halves every
/// data-parallel gradient reduction, in the same calls and buckets as fp32 (buckets count
/// elements), adds no compression ops, and under 16-bit parameters with fp32 masters holds the
/// gradient buffer at 2 bytes a parameter; over fp32 parameters (FSDP) the shard stays fp32.
/// bf16 moments (`optimizer_state_dtype`) halve Adam's state beside the fp32 master weights.
#[test]
fn bf16_gradient_reduction_halves_the_bytes_in_the_same_calls() {
    use twin_sim::scenario::framework::{Bundled, Dtype};
    let s = dp_scenario(1);
    assert_eq!(s.training.grad_elem_bytes(), 4);
    let fp32 = gen_ok(&s, 0);
    let mut half = s.clone();
    half.training.grad_reduce_dtype = Some(Dtype::Bf16);
    assert_eq!(half.training.grad_elem_bytes(), 2);
    let bf16 = gen_ok(&half, 0);
    for (a, b) in fp32.programs.iter().zip(&bf16.programs) {
        let kind = CollectiveKind::ReduceScatter;
        assert!(wire_bytes(a, kind) > 0);
        assert_eq!(wire_bytes(b, kind) * 2, wire_bytes(a, kind));
        assert_eq!(dp_collectives(a, kind).len(), dp_collectives(b, kind).len());
        assert!(!b.ops.iter().any(|o| is_phase(o, Phase::Compress)));
    }
    let k = twin_sim::workload::state_coefficients(&half.training);
    assert_eq!(
        (k.weight_bytes, k.grad_bytes, k.optimizer_bytes),
        (2, 2, 12)
    );
    // Moments in bf16 (`optimizer_state_dtype`): Adam's two take 4 bytes beside the fp32
    // master's 4, and the optimizer pass moves 8 bytes a parameter fewer.
    let before = twin_sim::workload::optimizer_bytes_per_param(&half.training, &k);
    half.training.optimizer_state_dtype = Some(Dtype::Bf16);
    let k = twin_sim::workload::state_coefficients(&half.training);
    assert_eq!((k.weight_bytes, k.grad_bytes, k.optimizer_bytes), (2, 2, 8));
    let after = twin_sim::workload::optimizer_bytes_per_param(&half.training, &k);
    assert_eq!(before - after, 8);
    half.training.framework = Bundled::Torchtitan.framework().unwrap();
    let k = twin_sim::workload::state_coefficients(&half.training);
    assert_eq!((k.weight_bytes, k.grad_bytes, k.optimizer_bytes), (4, 4, 4));
}

/// `fp8_param_gather` under FP8 training halves every data-parallel parameter gather, ZeRO-1's
/// all-gather of the updated parameters and ZeRO-3's per-pass gathers alike, and ZeRO-3's
/// gather buffers with them; the gradient reductions keep their bytes. Without it FP8 training
/// gathers the 16-bit weights, as bf16 training does.
#[test]
fn fp8_param_gather_halves_the_parameter_gathers_and_their_buffers() {
    use twin_sim::schedule::MemCategory;
    for zero in [1, 3] {
        let mut s = dp_scenario(zero);
        s.training.precision = Precision::Bf16;
        let bf16 = gen_ok(&s, 1);
        s.training.precision = Precision::Fp8;
        let sixteen = gen_ok(&s, 1);
        s.training.fp8_param_gather = true;
        let eight = gen_ok(&s, 1);
        for ((a, b), c) in bf16
            .programs
            .iter()
            .zip(&sixteen.programs)
            .zip(&eight.programs)
        {
            let gathers = |p: &Program| wire_bytes(p, CollectiveKind::AllGather);
            assert!(gathers(a) > 0, "zero {zero}");
            assert_eq!(gathers(b), gathers(a), "zero {zero}");
            assert_eq!(gathers(c) * 2, gathers(b), "zero {zero}");
            let reduced = |p: &Program| wire_bytes(p, CollectiveKind::ReduceScatter);
            assert_eq!(reduced(c), reduced(b), "zero {zero}");
            // The gather buffers: the data-parallel stream's buffer allocations.
            let buffers = |p: &Program| -> u64 {
                p.ops
                    .iter()
                    .filter(|o| o.stream == Stream::Dp)
                    .filter_map(|o| match o.kind {
                        OpKind::Alloc {
                            category: MemCategory::Buffers,
                            bytes,
                            ..
                        } => Some(bytes),
                        _ => None,
                    })
                    .sum()
            };
            if zero == 3 {
                assert!(buffers(b) > 0);
                assert_eq!(buffers(c) * 2, buffers(b));
            }
        }
    }
}

#[test]
fn async_reduces_the_previous_gradients_from_the_start() {
    let mut s = dp_scenario(0);
    s.training.sync = SyncMode::Async;
    let prog = &gen_ok(&s, 0).programs[0];
    let first_fwd = prog
        .ops
        .iter()
        .position(|o| is_phase(o, Phase::Forward))
        .unwrap();
    let ars = dp_collectives(prog, CollectiveKind::AllReduce);
    assert!(!ars.is_empty());
    assert!(ars
        .iter()
        .all(|&i| i < first_fwd && prog.ops[i].deps.is_empty()));
    let opt = prog
        .ops
        .iter()
        .position(|o| is_phase(o, Phase::Optimizer))
        .unwrap();
    for &i in &ars {
        assert!(prog.ops[opt].deps.contains(&(i as u32)));
    }
}

#[test]
fn delayed_sync_reduces_only_on_the_last_step_of_a_window() {
    let mut s = dp_scenario(1);
    s.training.sync = SyncMode::Delayed(2);
    for (step, syncs) in [(0u64, false), (1, true), (2, false), (3, true)] {
        let sched = gen_ok(&s, step);
        let prog = &sched.programs[1];
        let rs = dp_collectives(prog, CollectiveKind::ReduceScatter).len();
        let opt = prog
            .ops
            .iter()
            .filter(|o| is_phase(o, Phase::Optimizer))
            .count();
        assert_eq!((rs > 0, opt == 1), (syncs, syncs), "step {step}");
    }
    // generate() builds the synchronising step
    assert_eq!(representative_step(&s), 1);
}

#[test]
fn zero1_gathers_parameters_after_the_update_or_at_the_next_start() {
    let mut s = dp_scenario(1);
    s.training.overlap_param_gather = false;
    let prog = &gen_ok(&s, 0).programs[0];
    let opt = prog
        .ops
        .iter()
        .position(|o| is_phase(o, Phase::Optimizer))
        .unwrap();
    let ags = dp_collectives(prog, CollectiveKind::AllGather);
    assert!(!ags.is_empty() && ags.iter().all(|&i| i > opt));
    s.training.overlap_param_gather = true;
    let prog = &gen_ok(&s, 0).programs[0];
    let first_fwd = prog
        .ops
        .iter()
        .position(|o| is_phase(o, Phase::Forward))
        .unwrap();
    let ags = dp_collectives(prog, CollectiveKind::AllGather);
    assert!(!ags.is_empty() && ags.iter().all(|&i| i < first_fwd));
    assert!(ags
        .iter()
        .all(|i| prog.ops[first_fwd].deps.contains(&(*i as u32))));
}

#[test]
fn zero3_gathers_before_every_pass_and_scatters_after_every_backward() {
    for fsdp in [false, true] {
        let mut s = dp_scenario(if fsdp { 0 } else { 3 });
        s.parallel.fsdp = fsdp;
        let prog = &gen_ok(&s, 0).programs[1];
        let count = |p| prog.ops.iter().filter(|o| is_phase(o, p)).count();
        let (f, b) = (count(Phase::Forward), count(Phase::Backward));
        assert_eq!(dp_collectives(prog, CollectiveKind::AllGather).len(), f + b);
        assert_eq!(dp_collectives(prog, CollectiveKind::ReduceScatter).len(), b);
        assert!(dp_collectives(prog, CollectiveKind::AllReduce).is_empty());
    }
}

#[test]
fn expert_gradients_reduce_over_the_expert_replicas() {
    use twin_sim::plan::GroupKind;
    let mut s = small_scenario(1, 1, 2, 4);
    s.parallel.ep = 2;
    s.parallel.dp = 4;
    s.cluster.gpus = 4;
    s.training.global_batch = 4 * 2 * 2;
    let ffn_hidden = s.model.ffn_hidden;
    s.model.moe = Some(Moe::uniform(4, 2, 1, ffn_hidden));
    let prog = &gen_ok(&s, 0).programs[0];
    let groups: std::collections::BTreeSet<GroupKind> = prog
        .ops
        .iter()
        .filter_map(|o| match o.kind {
            OpKind::Collective { group, .. } => Some(group),
            _ => None,
        })
        .collect();
    assert!(groups.contains(&GroupKind::DenseDp));
    assert!(groups.contains(&GroupKind::ExpertDp));
    assert!(groups.contains(&GroupKind::Ep));
}

/// A schedule with the workload model's sizes (the real parameter counts), validated.
fn gen_sized(s: &Scenario) -> Schedule {
    let plan = twin_sim::plan::Plan::new(s).unwrap();
    let sched = generate(s, &plan).unwrap();
    sched.validate(&plan).unwrap();
    sched
}

/// HSDP over dp 8 in shard groups of 4: parameters are gathered and gradients
/// reduce-scattered over the shard group (DenseDp); each reduce-scatter is followed by an
/// all-reduce of its output, a quarter of its bytes in as many calls, over the replica group
/// (DpReplica); the optimizer waits for the all-reduces. One stage holds the whole model, so
/// the reduce-scatters of one backward carry its fp32 gradients: 4 bytes per parameter.
#[test]
fn hsdp_all_reduces_each_sharded_gradient_over_the_replicas() {
    use twin_sim::plan::GroupKind;
    let mut s = small_scenario(1, 1, 8, 2);
    s.parallel.fsdp = true;
    s.parallel.zero = 3;
    s.parallel.fsdp_degree = Some(4);
    // One gather and one reduction per pass (a chunk-wide FSDP unit) keeps the figures whole.
    s.training.framework.overlaps.fsdp_unit = twin_sim::scenario::framework::FsdpUnit::Chunk;
    s.training.grad_bucket_bytes = 1 << 26;
    let params = twin_sim::workload::model_params(&s.model).dense;
    let prog = &gen_sized(&s).programs[0];
    let collectives: Vec<(usize, CollectiveKind, GroupKind, u64, u32)> = prog
        .ops
        .iter()
        .enumerate()
        .filter_map(|(i, o)| match o.kind {
            OpKind::Collective {
                kind,
                group,
                bytes,
                calls,
            } => Some((i, kind, group, bytes, calls)),
            _ => None,
        })
        .collect();
    let of = |k: CollectiveKind, g: GroupKind| {
        collectives
            .iter()
            .filter(|c| c.1 == k && c.2 == g)
            .copied()
            .collect::<Vec<_>>()
    };
    let scatters = of(CollectiveKind::ReduceScatter, GroupKind::DenseDp);
    let replicas = of(CollectiveKind::AllReduce, GroupKind::DpReplica);
    let backwards = prog
        .ops
        .iter()
        .filter(|o| is_phase(o, Phase::Backward))
        .count();
    assert_eq!(backwards, 2);
    // Each backward's gradients: 4 * params bytes in calls of at most the bucket size.
    let scattered: u64 = scatters.iter().map(|c| c.3 * u64::from(c.4)).sum();
    assert_eq!(scattered, 2 * 4 * params);
    assert!(scatters.iter().all(|c| c.3 <= 1 << 26));
    assert_eq!(replicas.len(), scatters.len());
    for (rs, ar) in scatters.iter().zip(&replicas) {
        assert_eq!(
            (ar.3, ar.4),
            (rs.3.div_ceil(4), rs.4),
            "a quarter, as many calls"
        );
        assert_eq!(
            prog.ops[ar.0].deps,
            vec![rs.0 as u32],
            "after its reduce-scatter"
        );
    }
    // Gathers stay on the shard group; nothing else crosses the replica group.
    assert!(!of(CollectiveKind::AllGather, GroupKind::DenseDp).is_empty());
    assert_eq!(collectives.len(), {
        let gathers = of(CollectiveKind::AllGather, GroupKind::DenseDp).len();
        gathers + scatters.len() + replicas.len()
    });
    let optimizer = prog
        .ops
        .iter()
        .position(|o| is_phase(o, Phase::Optimizer))
        .unwrap();
    for ar in &replicas {
        assert!(prog.ops[optimizer].deps.contains(&(ar.0 as u32)));
    }
    // fsdp_degree = dp is plain FSDP: the same program without the replica all-reduces.
    s.parallel.fsdp_degree = Some(8);
    let plain = &gen_sized(&s).programs[0];
    s.parallel.fsdp_degree = None;
    assert_eq!(plain, &gen_sized(&s).programs[0]);
    assert!(plain.ops.iter().all(|o| !matches!(
        o.kind,
        OpKind::Collective {
            group: GroupKind::DpReplica,
            ..
        }
    )));
}

/// fsdp_degree = 1: nothing is sharded (no gathers, no reduce-scatters); every gradient is
/// all-reduced over the dp replicas, whole, after each backward.
#[test]
fn hsdp_of_degree_one_replicates_and_all_reduces() {
    use twin_sim::plan::GroupKind;
    let mut s = small_scenario(1, 1, 4, 2);
    s.parallel.fsdp = true;
    s.parallel.zero = 3;
    s.parallel.fsdp_degree = Some(1);
    s.training.framework.overlaps.fsdp_unit = twin_sim::scenario::framework::FsdpUnit::Chunk;
    s.training.grad_bucket_bytes = 1 << 40;
    let params = twin_sim::workload::model_params(&s.model).dense;
    let prog = &gen_sized(&s).programs[0];
    let calls: Vec<(CollectiveKind, GroupKind, u64)> = prog
        .ops
        .iter()
        .filter_map(|o| match o.kind {
            OpKind::Collective {
                kind, group, bytes, ..
            } => Some((kind, group, bytes)),
            _ => None,
        })
        .collect();
    let want = (CollectiveKind::AllReduce, GroupKind::DpReplica, 4 * params);
    assert_eq!(calls, vec![want, want]);
}
