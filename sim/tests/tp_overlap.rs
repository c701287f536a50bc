//! `[training] tp_comm_overlap`: the tensor-parallel all-gathers and reduce-scatters of a pass
//! run beside its compute, cut into tp chunks of which one stays exposed; the pass's linear
//! GEMMs run as tp calls of a tp-th of the rows each, on the SMs the framework's
//! `overlaps.tp_comm_overlap_sms` leaves them (weighted by the reduce-scatters' share of the
//! overlapped bytes). Exact figures on a small tp 2 case.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_sim::cost::{Analytic, CostModel};
use twin_sim::engine::{simulate, SimOptions};
use twin_sim::plan::{GroupKind, Plan};
use twin_sim::scenario::Scenario;
use twin_sim::schedule::{generate, CollectiveKind, ComputeOp, OpKind, Phase, Program};
use twin_sim::testing::small_scenario;

/// tp 2 with sequence parallelism, one micro batch, one GPU per tp rank.
fn tp2(overlap: bool) -> Scenario {
    let mut s = small_scenario(2, 1, 1, 1);
    s.parallel.sequence_parallel = true;
    s.training.tp_comm_overlap = overlap;
    s
}

fn program(s: &Scenario) -> (Plan, twin_sim::schedule::Schedule) {
    let plan = Plan::new(s).unwrap();
    let sched = generate(s, &plan).unwrap();
    sched.validate(&plan).unwrap();
    (plan, sched)
}

fn rank0(sched: &twin_sim::schedule::Schedule) -> &Program {
    &sched.programs[sched.program_of[0] as usize]
}

fn compute_of(p: &Program, phase: Phase) -> ComputeOp {
    p.ops
        .iter()
        .find_map(|o| match &o.kind {
            OpKind::Compute(c) if c.phase == phase => Some(c.clone()),
            _ => None,
        })
        .unwrap()
}

/// (kind, bytes, calls) of rank 0's tensor-parallel collectives, in program order.
fn tp_collectives(p: &Program) -> Vec<(CollectiveKind, u64, u32)> {
    p.ops
        .iter()
        .filter_map(|o| match o.kind {
            OpKind::Collective {
                kind,
                group: GroupKind::Tp,
                bytes,
                calls,
            } => Some((kind, bytes, calls)),
            _ => None,
        })
        .collect()
}

#[test]
fn overlapped_collectives_are_cut_into_a_hidden_and_an_exposed_chunk() {
    let (_, plain) = program(&tp2(false));
    let (_, over) = program(&tp2(true));
    let overlapped = |c: &(CollectiveKind, u64, u32)| {
        matches!(
            c.0,
            CollectiveKind::AllGather | CollectiveKind::ReduceScatter
        )
    };
    let (before, others): (Vec<_>, Vec<_>) = tp_collectives(rank0(&plain))
        .into_iter()
        .partition(overlapped);
    let (after, others_after): (Vec<_>, Vec<_>) = tp_collectives(rank0(&over))
        .into_iter()
        .partition(overlapped);
    assert!(!before.is_empty());
    // The head's small all-reduces (vocab-parallel loss) are not overlapped.
    assert_eq!(others, others_after);
    // Each collective becomes its hidden part (t - 1 of t chunks) and its exposed chunk, same
    // calls, same bytes in all.
    assert_eq!(after.len(), 2 * before.len());
    let total =
        |v: &[(CollectiveKind, u64, u32)]| -> u64 { v.iter().map(|c| c.1 * u64::from(c.2)).sum() };
    assert_eq!(total(&after), total(&before));
    for (kind, bytes, calls) in &before {
        assert!(
            after.contains(&(*kind, bytes - bytes / 2, *calls)),
            "{kind:?}"
        );
        assert!(after.contains(&(*kind, bytes / 2, *calls)), "{kind:?}");
    }
}

#[test]
fn overlapped_passes_chunk_their_gemms_and_reserve_the_framework_s_sms() {
    let s = tp2(true);
    let (_, plain) = program(&tp2(false));
    let (_, over) = program(&s);
    let sms = s.training.framework.overlaps.tp_comm_overlap_sms;
    assert_eq!(sms, 16, "megatron-core: Transformer Engine's num_sm");
    for phase in [Phase::Forward, Phase::Backward] {
        let a = compute_of(rank0(&plain), phase);
        let b = compute_of(rank0(&over), phase);
        assert_eq!(a.sms_reserved, 0);
        // Forward and backward each all-gather and reduce-scatter the same bytes: half the
        // framework's SMs on average.
        assert_eq!(b.sms_reserved, 8, "{phase:?}");
        assert_eq!(a.flops, b.flops);
        for (x, y) in a.gemms.iter().zip(b.gemms.iter()) {
            if x.batch > 1 {
                assert_eq!(x, y);
            } else {
                assert_eq!((y.m, y.count), (x.m / 2, x.count * 2), "{phase:?}");
                assert_eq!((y.n, y.k), (x.n, x.k));
            }
        }
    }
}

/// The cost model prices an op's GEMMs on the SMs left: `sm / (sm - reserved)` times as long,
/// the rest of the op unchanged; without an SM count (no profile) nothing changes.
#[test]
fn reserved_sms_stretch_only_the_gemms() {
    let s = tp2(true);
    let (_, over) = program(&s);
    let op = compute_of(rank0(&over), Phase::Forward);
    let mut cost = Analytic::new(&s);
    let free = ComputeOp {
        sms_reserved: 0,
        host_syncs: Default::default(),
        ..op.clone()
    };
    assert_eq!(cost.compute_ns(0, &op), cost.compute_ns(0, &free));
    cost.sm_count = Some(132);
    let gemms_only = ComputeOp {
        attention: None,
        memory_bytes: 0,
        kernels: 0,
        flops: op.gemms.iter().map(|g| g.flops()).sum(),
        ..free.clone()
    };
    let gemm_ns = cost.compute_ns(0, &gemms_only) as f64;
    let extra = cost.compute_ns(0, &op) as f64 - cost.compute_ns(0, &free) as f64;
    let want = gemm_ns * (132.0 / 124.0 - 1.0);
    assert!((extra - want).abs() <= 2.0, "{extra} vs {want}");
}

/// In the engine: a pass's compute and the hidden parts of its collectives start together,
/// the exposed chunks start when both are done, and the next pass waits for them; so the
/// overlap hides exactly the shorter of the two, and the step is shorter than the serial one
/// by exactly that.
#[test]
fn the_engine_hides_exactly_the_overlapped_part() {
    let run = |s: &Scenario| {
        let (plan, sched) = program(s);
        let mut cost = Analytic::new(s);
        cost.sm_count = Some(132);
        let res = simulate(
            &plan,
            &sched,
            &cost,
            &SimOptions {
                trace: true,
                ..SimOptions::default()
            },
        )
        .unwrap();
        (sched, res)
    };
    let s = tp2(true);
    let (sched, res) = run(&s);
    let trace = res.trace.as_ref().unwrap();
    let p = rank0(&sched);
    let ev = |i: usize| {
        trace
            .events
            .iter()
            .find(|e| e.rank == 0 && e.op as usize == i)
            .unwrap()
    };
    let fwd = p
        .ops
        .iter()
        .position(|o| matches!(&o.kind, OpKind::Compute(c) if c.phase == Phase::Forward))
        .unwrap();
    let tp_ops: Vec<usize> = (0..p.ops.len())
        .filter(|&i| {
            matches!(
                p.ops[i].kind,
                OpKind::Collective {
                    group: GroupKind::Tp,
                    ..
                }
            )
        })
        .collect();
    // The forward's hidden parts come before its compute in the program, its exposed chunks
    // after.
    let hidden: Vec<usize> = tp_ops.iter().copied().filter(|&i| i < fwd).collect();
    let exposed: Vec<usize> = tp_ops
        .iter()
        .copied()
        .filter(|&i| i > fwd)
        .take(hidden.len())
        .collect();
    assert!(!hidden.is_empty());
    let start = ev(fwd).start_ns;
    assert_eq!(ev(hidden[0]).start_ns, start);
    let both_done = ev(fwd).end_ns.max(ev(*hidden.last().unwrap()).end_ns);
    assert_eq!(ev(exposed[0]).start_ns, both_done);
    // The pass's cost: its overlapped region is the longer of the two, not their sum.
    let hidden_ns: u64 = hidden.iter().map(|&i| ev(i).end_ns - ev(i).start_ns).sum();
    let compute_ns = ev(fwd).end_ns - ev(fwd).start_ns;
    assert_eq!(both_done - start, compute_ns.max(hidden_ns));
}

/// The key is refused, with the keys involved, where it cannot work: a framework without TP
/// overlap, or tensor parallelism without sequence parallelism.
#[test]
fn tp_comm_overlap_needs_a_framework_that_can_and_sequence_parallelism() {
    let text = include_str!("../../scenarios/512xA100.toml");
    let parse = |sets: &[&str]| {
        let sets: Vec<String> = sets.iter().map(|x| x.to_string()).collect();
        twin_sim::setup::parse_str(text, "512xA100.toml", &sets).map_err(|e| e.to_string())
    };
    let s = parse(&["training.tp_comm_overlap=true"]).unwrap();
    assert!(s.training.tp_comm_overlap);
    let e = parse(&[
        "training.tp_comm_overlap=true",
        "training.framework=\"deepspeed\"",
    ])
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("cannot overlap tensor-parallel communication"),
        "{e}"
    );
    let e = parse(&[
        "training.tp_comm_overlap=true",
        "parallel.sequence_parallel=false",
    ])
    .unwrap_err()
    .to_string();
    assert!(e.contains("sequence_parallel = true"), "{e}");
}

/// MXFP8 needs Blackwell's block-scaled tensor cores: on the A100 (compute capability 8.0) it
/// is refused, naming the keys and what is allowed; on a B200 it parses, as the other recipes
/// do on any GPU.
#[test]
fn mxfp8_needs_a_blackwell_gpu() {
    let text = include_str!("../../scenarios/512xA100.toml");
    let fp8 = |recipe: &str| {
        vec![
            "training.precision=\"fp8\"".to_string(),
            format!("training.fp8_recipe=\"{recipe}\""),
        ]
    };
    let e = twin_sim::setup::parse_str(text, "512xA100.toml", &fp8("mxfp8"))
        .map_err(|e| e.to_string())
        .unwrap_err();
    assert!(e.contains("compute capability 10.0"), "{e}");
    assert!(e.contains("a100-sxm-80gb is 8.0"), "{e}");
    assert!(e.contains("\"blockwise\""), "{e}");
    let mut on_b200 = fp8("mxfp8");
    on_b200.push("cluster.gpu=\"b200-sxm-180gb\"".to_string());
    on_b200.push("cluster.node=\"dgx-b200\"".to_string());
    let s = twin_sim::setup::parse_str(text, "512xA100.toml", &on_b200).unwrap();
    assert_eq!(s.training.fp8_recipe, twin_sim::scenario::Fp8Recipe::Mxfp8);
    for recipe in ["delayed", "tensorwise", "blockwise"] {
        assert!(twin_sim::setup::parse_str(text, "512xA100.toml", &fp8(recipe)).is_ok());
    }
    // Under bf16 the recipe is not read.
    let bf16 = vec!["training.fp8_recipe=\"mxfp8\"".to_string()];
    assert!(twin_sim::setup::parse_str(text, "512xA100.toml", &bf16).is_ok());
}

/// Which FP8 recipes a framework can run is the framework file's: Transformer Engine has no
/// rowwise recipe (Megatron-Core refuses it, naming TE's recipes), torchao has no delayed or
/// block-scaled one (torchtitan refuses them), and torchtitan runs rowwise. Under bf16 neither
/// is read.
#[test]
fn fp8_recipes_follow_the_framework() {
    let text = include_str!("../../scenarios/512xA100.toml");
    let parse = |sets: &[&str]| {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        twin_sim::setup::parse_str(text, "512xA100.toml", &sets).map_err(|e| e.to_string())
    };
    let fp8 = "training.precision=\"fp8\"";
    let e = parse(&[fp8, "training.fp8_recipe=\"rowwise\""]).unwrap_err();
    assert!(
        e.contains("megatron-core cannot launch") && e.contains("Float8BlockScaling"),
        "{e}"
    );
    let titan = ["training.framework=\"torchtitan\"", "parallel.zero=3"];
    for recipe in ["delayed", "blockwise"] {
        let r = format!("training.fp8_recipe=\"{recipe}\"");
        let e = parse(&[titan[0], titan[1], fp8, &r]).unwrap_err();
        assert!(e.contains("torchtitan cannot launch"), "{e}");
        assert!(
            e.contains(&format!("training.fp8_recipe = \"{recipe}\"")),
            "{e}"
        );
    }
    for recipe in ["tensorwise", "rowwise"] {
        let r = format!("training.fp8_recipe=\"{recipe}\"");
        parse(&[titan[0], titan[1], fp8, &r]).unwrap();
    }
    parse(&[titan[0], titan[1], "training.fp8_recipe=\"delayed\""]).unwrap();
    parse(&["training.fp8_recipe=\"rowwise\""]).unwrap();
}
