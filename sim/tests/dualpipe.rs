//! DualPipe in the engine: exact step times on small pipelines against DeepSeek's bubble,
//! the memory it holds (two stages' parameters per rank, its activations), and the sum of
//! the gradients of each stage's two copies over the pair of ranks that hold them.
//!
//! The oracle is the DualPipe repository's table (deepseek-ai/DualPipe README, "Pipeline
//! Bubbles and Memory Usage Comparison"; arXiv 2412.19437, Table 2): with `PP` stages, F the
//! time of a forward chunk, B of a whole backward chunk, W of its weight-gradient half and
//! F&B of a forward and a backward run together, the bubble is `(PP/2 - 1)(F&B + B - 3W)`.
//! twin runs a forward and a backward of the steady phase one after the other on the
//! compute stream, so F&B = F + B here.
#![cfg(test)]

use twin_sim::cost::CostModel;
use twin_sim::engine::{simulate, SimOptions, SimResult};
use twin_sim::plan::{Group, GroupKind, Plan};
use twin_sim::scenario::{PipelineSchedule, Scenario};
use twin_sim::schedule::{
    generate, CollectiveKind, ComputeOp, MemCategory, OpKind, Phase, Program, Schedule, Stream,
};

mod common;

/// Each pass of a chunk takes a fixed time by its phase: forward `f`, whole backward `b`, its
/// input-gradient half `b - w` and its weight-gradient half `w`; communication is free.
struct PassCost {
    f: u64,
    b: u64,
    w: u64,
}

impl CostModel for PassCost {
    fn compute_ns(&self, _rank: u32, op: &ComputeOp) -> u64 {
        if op.flops == 0 {
            return 0;
        }
        match op.phase {
            Phase::Forward => self.f,
            Phase::Backward => self.b,
            Phase::BackwardInput => self.b - self.w,
            Phase::BackwardWeight => self.w,
            _ => 0,
        }
    }
    fn collective_ns(&self, _: CollectiveKind, _: &Group, _: u64, _: u32) -> u64 {
        0
    }
    fn p2p_ns(&self, _: &Plan, _: u32, _: u32, _: u64) -> u64 {
        0
    }
    fn checkpoint_ns(&self, _: u64) -> u64 {
        0
    }
    fn host_ns(&self, _: twin_sim::cost::HostWork) -> u64 {
        0
    }
}

fn dualpipe(pp: u32, m: u64) -> Scenario {
    common::pipeline(pp, m, PipelineSchedule::DualPipe, 1)
}

fn run(s: &Scenario, cost: &dyn CostModel) -> (Plan, SimResult) {
    let plan = Plan::new(s).unwrap();
    let sched = generate(s, &plan).unwrap();
    sched.validate(&plan).unwrap();
    let res = simulate(&plan, &sched, cost, &SimOptions::default()).unwrap();
    (plan, res)
}

/// DeepSeek's bubble, `(PP/2 - 1)(F&B + B - 3W)` with F&B = F + B.
fn deepseek_bubble(pp: u32, (f, b, w): (u64, u64, u64)) -> u64 {
    (u64::from(pp) / 2 - 1) * ((f + b) + b - 3 * w)
}

/// With every kind of pass equally long (F = B - W = W, the cells of DeepSeek's figure) the
/// step is the work of `m` micro batches plus DeepSeek's bubble, exactly.
#[test]
fn step_is_the_work_plus_deepseeks_bubble() {
    for (pp, m) in [(2u32, 4u64), (4, 8), (4, 12), (6, 12), (8, 16), (8, 20)] {
        for unit in [1u64, 10, 37] {
            let (f, b, w) = (unit, 2 * unit, unit);
            let (_, res) = run(&dualpipe(pp, m), &PassCost { f, b, w });
            let want = m * (f + b) + deepseek_bubble(pp, (f, b, w));
            assert_eq!(res.step_time_ns, want, "pp {pp} m {m} unit {unit}");
        }
    }
    // pp 4, m 8, unit 10: 8 x 30 + (2 - 1)(30 + 20 - 30) = 260.
    let (_, res) = run(
        &dualpipe(4, 8),
        &PassCost {
            f: 10,
            b: 20,
            w: 10,
        },
    );
    assert_eq!(res.step_time_ns, 260);
}

/// Otherwise DeepSeek's figure bounds the step: DualPipe's two middle ranks run their first
/// forward and backward of the main step apart rather than as a pair, which can only shorten
/// it. Two stages have no bubble at all.
#[test]
fn deepseeks_bubble_bounds_the_step() {
    for (pp, m) in [(2u32, 4u64), (2, 6), (4, 8), (6, 12), (8, 16)] {
        for (f, b, w) in [(10u64, 20u64, 8u64), (7, 13, 5), (10, 20, 0), (8, 20, 10)] {
            let (_, res) = run(&dualpipe(pp, m), &PassCost { f, b, w });
            let work = m * (f + b);
            let bound = work + deepseek_bubble(pp, (f, b, w));
            assert!(res.step_time_ns >= work, "pp {pp} m {m}");
            assert!(res.step_time_ns <= bound, "pp {pp} m {m} {f} {b} {w}");
            if pp == 2 {
                assert_eq!(res.step_time_ns, work, "pp 2 m {m} {f} {b} {w}");
            }
        }
    }
}

/// Each rank holds two stages' parameters: rank r the weights 1F1B puts on stages r and
/// pp - 1 - r. At its peak each rank holds PP + 1 micro batches' saved activations of one
/// stage (DualPipe's table), against 1F1B's pp - r on stage r.
#[test]
fn two_stages_of_parameters_and_pp_plus_one_activations() {
    let (pp, m) = (4u32, 8u64);
    let cost = PassCost { f: 10, b: 20, w: 8 };
    let traced = |s: &Scenario| {
        let plan = Plan::new(s).unwrap();
        let sched = generate(s, &plan).unwrap();
        let opts = SimOptions {
            trace: true,
            ..SimOptions::default()
        };
        let res = simulate(&plan, &sched, &cost, &opts).unwrap();
        (plan, res)
    };
    let (dp_plan, dp_res) = traced(&dualpipe(pp, m));
    let (f1_plan, f1_res) = traced(&common::pipeline(pp, m, PipelineSchedule::OneFOneB, 1));
    let weights = |res: &SimResult, rank: u32| {
        res.ranks[rank as usize].memory_at_peak[MemCategory::Weights as usize]
    };
    for r in 0..pp {
        assert_eq!(
            weights(&dp_res, r),
            weights(&f1_res, r) + weights(&f1_res, pp - 1 - r),
            "rank {r}"
        );
    }
    let peak_activations = |res: &SimResult, rank: u32| {
        let trace = res.trace.as_ref().unwrap();
        trace
            .memory
            .iter()
            .filter(|s| s.rank == rank)
            .map(|s| s.bytes[MemCategory::Activations as usize])
            .max()
            .unwrap()
    };
    // Ranks 1 and 2 hold stages 1 and 2, four middle layers each: one set of saved
    // activations is the same for both chunks.
    let set = twin_sim::workload::chunk_work(&dualpipe(pp, m), &dp_plan, &dp_plan.chunks[1][0])
        .activation_bytes;
    assert_eq!(
        set,
        twin_sim::workload::chunk_work(&dualpipe(pp, m), &dp_plan, &dp_plan.chunks[1][1])
            .activation_bytes
    );
    for r in [1, 2] {
        assert_eq!(
            peak_activations(&dp_res, r),
            u64::from(pp + 1) * set,
            "rank {r}"
        );
    }
    let one = twin_sim::workload::chunk_work(
        &common::pipeline(pp, m, PipelineSchedule::OneFOneB, 1),
        &f1_plan,
        &f1_plan.chunks[1][0],
    )
    .activation_bytes;
    assert_eq!(one, set);
    assert_eq!(peak_activations(&f1_res, 1), u64::from(pp - 1) * one);
}

/// [`PassCost`]'s passes, and `mirror` ns for each all-reduce between the two copies of a
/// stage; every other communication is free.
struct MirrorCost {
    passes: PassCost,
    mirror: u64,
}

impl CostModel for MirrorCost {
    fn compute_ns(&self, rank: u32, op: &ComputeOp) -> u64 {
        self.passes.compute_ns(rank, op)
    }
    fn collective_ns(&self, _: CollectiveKind, group: &Group, _: u64, _: u32) -> u64 {
        if group.kind == GroupKind::PpMirror {
            self.mirror
        } else {
            0
        }
    }
    fn p2p_ns(&self, _: &Plan, _: u32, _: u32, _: u64) -> u64 {
        0
    }
    fn checkpoint_ns(&self, _: u64) -> u64 {
        0
    }
    fn host_ns(&self, _: twin_sim::cost::HostWork) -> u64 {
        0
    }
}

fn program(sched: &Schedule, rank: u32) -> &Program {
    &sched.programs[sched.program_of[rank as usize] as usize]
}

/// The (op index, chunk, bytes) of each all-reduce over [`GroupKind::PpMirror`] in a
/// program, in program order.
fn mirror_ops(prog: &Program) -> Vec<(usize, u32, u64)> {
    prog.ops
        .iter()
        .enumerate()
        .filter_map(|(i, o)| match o.kind {
            OpKind::Collective {
                kind: CollectiveKind::AllReduce,
                group: GroupKind::PpMirror,
                bytes,
                ..
            } => Some((i, o.label.chunk, bytes)),
            _ => None,
        })
        .collect()
}

/// pp 4, 8 micro batches, F = B - W = W = 10 ns (B = 20): the step is 260 ns without the
/// sums (`step_is_the_work_plus_deepseeks_bubble`). DualPipe.step's order puts each rank's
/// passes of one copy before the end: rank 0 runs B1 (whole) then B0z, W, B0z, W (steps
/// 6 to 8 with half_rank 0), so its chunk 1 (model stage 3) is done 4 cells, 40 ns, before
/// the end, at 220; rank 1 (a middle rank, half_rank 1) runs B1, B0, B1z, B0z, W1, W0, so
/// its chunk 1 (model stage 2) is done one cell before the end, at 250. Ranks 3 and 2 run
/// the same directions with their chunks swapped, so stage 3's other copy (rank 3's chunk
/// 0) is done at 220 too, stage 2's (rank 2's chunk 0) at 250, and stages 0 and 1 at 260.
/// With one all-reduce per chunk (one bucket) of `x` ns on the DP stream, in that order:
/// rank 0's first sum runs 220..220+x beside its compute, rank 1's 250..250+x; the last
/// sums start at max(260, first's end), and the optimizer waits for them.
#[test]
fn the_copies_sums_hide_behind_the_tail_but_the_last() {
    let mut s = dualpipe(4, 8);
    s.training.grad_bucket_bytes = u64::MAX;
    let passes = || PassCost {
        f: 10,
        b: 20,
        w: 10,
    };
    for (x, want) in [
        (0u64, 260u64),
        // 220 + 10 and 250 + 10 end by 260: only the last pair's sum shows.
        (10, 270),
        // Rank 1's first sum ends at 280, its second at 310 (rank 0's: 250, 290).
        (30, 310),
    ] {
        let plan = Plan::new(&s).unwrap();
        let sched = generate(&s, &plan).unwrap();
        sched.validate(&plan).unwrap();
        let opts = SimOptions {
            trace: true,
            ..SimOptions::default()
        };
        let cost = MirrorCost {
            passes: passes(),
            mirror: x,
        };
        let res = simulate(&plan, &sched, &cost, &opts).unwrap();
        assert_eq!(res.step_time_ns, want, "x {x}");
        let spans = |rank: u32| -> Vec<(u64, u64)> {
            let ops = mirror_ops(program(&sched, rank));
            res.trace
                .as_ref()
                .unwrap()
                .events
                .iter()
                .filter(|e| e.rank == rank && ops.iter().any(|&(i, _, _)| i == e.op as usize))
                .map(|e| (e.start_ns, e.end_ns))
                .collect()
        };
        let first_end = |t: u64| t + x;
        for (rank, first) in [(0u32, 220u64), (3, 220), (1, 250), (2, 250)] {
            let second = first_end(first).max(260);
            assert_eq!(
                spans(rank),
                vec![(first, first + x), (second, second + x)],
                "rank {rank}, x {x}"
            );
        }
    }
}

/// Each rank sums each of its two chunks once with the rank at stage pp - 1 - s, stages'
/// copies matched in one order on both ranks; under ZeRO-1 over dp 2 the sum is of the
/// chunk's reduced shard (half of what the reduce-scatter reads), after that reduce-scatter
/// on the DP stream, and the optimizer waits for it. 1F1B has no such sum.
#[test]
fn copies_are_summed_over_the_pair_after_the_data_parallel_reduction() {
    let mut s = twin_sim::testing::small_scenario(1, 4, 2, 8);
    s.model.layers = 16;
    s.model.vocab = 8;
    s.parallel.schedule = PipelineSchedule::DualPipe;
    s.parallel.zero = 1;
    s.training.grad_bucket_bytes = u64::MAX;
    s.training.recompute = twin_sim::scenario::Recompute::None;
    let plan = Plan::new(&s).unwrap();
    let sched = generate(&s, &plan).unwrap();
    sched.validate(&plan).unwrap();
    for rank in 0..plan.world {
        let pair = &plan.group(plan.group_of(rank, GroupKind::PpMirror)).members;
        let stage = plan.stage_of(rank);
        let other = plan.pp_mirror(rank);
        assert_eq!(plan.stage_of(other), 3 - stage);
        assert_eq!(plan.coords(other).dp, plan.coords(rank).dp);
        let mut want = vec![rank, other];
        want.sort_unstable();
        assert_eq!(pair, &want);
        let prog = program(&sched, rank);
        let mirrors = mirror_ops(prog);
        assert_eq!(mirrors.len(), 2, "rank {rank}: one sum per chunk");
        let mut chunks: Vec<u32> = mirrors.iter().map(|m| m.1).collect();
        chunks.sort_unstable();
        assert_eq!(chunks, vec![0, 1]);
        for &(i, chunk, bytes) in &mirrors {
            let op = &prog.ops[i];
            assert_eq!(op.stream, Stream::Dp);
            let rs = prog
                .ops
                .iter()
                .enumerate()
                .filter(|(_, o)| o.label.chunk == chunk)
                .filter_map(|(j, o)| match o.kind {
                    OpKind::Collective {
                        kind: CollectiveKind::ReduceScatter,
                        group: GroupKind::DenseDp,
                        bytes,
                        ..
                    } => Some((j, bytes)),
                    _ => None,
                })
                .collect::<Vec<_>>();
            assert_eq!(rs.len(), 1, "rank {rank} chunk {chunk}");
            let (j, rs_bytes) = rs[0];
            assert!(
                j < i && op.deps.contains(&(j as u32)),
                "rank {rank} chunk {chunk}"
            );
            assert_eq!(
                bytes,
                (rs_bytes / 4).div_ceil(2) * 4,
                "rank {rank} chunk {chunk}"
            );
        }
        let opt = prog
            .ops
            .iter()
            .position(|o| matches!(&o.kind, OpKind::Compute(c) if c.phase == Phase::Optimizer))
            .unwrap();
        for &(i, _, _) in &mirrors {
            assert!(prog.ops[opt].deps.contains(&(i as u32)), "rank {rank}");
        }
        // The pair's two sums of each model stage carry the same bytes, in the same order.
        let theirs = mirror_ops(program(&sched, other));
        let by_stage = |ops: &[(usize, u32, u64)], r: u32| -> Vec<(u32, u64)> {
            ops.iter()
                .map(|&(_, c, b)| {
                    (
                        plan.chunks[plan.stage_of(r) as usize][c as usize].virtual_stage,
                        b,
                    )
                })
                .collect()
        };
        assert_eq!(by_stage(&mirrors, rank), by_stage(&theirs, other));
    }
    s.parallel.schedule = PipelineSchedule::OneFOneB;
    let plan = Plan::new(&s).unwrap();
    let sched = generate(&s, &plan).unwrap();
    assert!(sched.programs.iter().all(|p| mirror_ops(p).is_empty()));
}

/// On the flow topology the sum of two copies is a two-rank ring all-reduce routed over the
/// link between the pair: each rank sends half of the gradients twice (`2 (n - 1)` steps of
/// `bytes / n` with n = 2), so it takes two link latencies plus `bytes` over the link's
/// achievable bandwidth (line rate times NCCL's protocol efficiency), over NVLink where the
/// pair shares a node and over the NICs where it does not (`ep_all_to_all.rs` does the same
/// for the expert all-to-all).
#[test]
fn the_copies_sum_on_the_flow_topology_runs_over_the_pairs_link() {
    use twin_sim::cost::{Analytic, DEFAULT_NETWORK_EFFICIENCY, DEFAULT_NVLINK_EFFICIENCY};
    // Four ranks on one node, then two nodes of two: stages 0 and 1 on node 0.
    for gpus_per_node in [4u32, 2] {
        let mut s = dualpipe(4, 8);
        s.cluster.gpus_per_node = gpus_per_node;
        s.cluster.topology.model = twin_sim::scenario::NetworkModel::Flow;
        s.training.grad_bucket_bytes = u64::MAX;
        let plan = Plan::new(&s).unwrap();
        let nodes = plan.group(plan.group_of(0, GroupKind::PpMirror)).nodes;
        assert_eq!(nodes, 4 / gpus_per_node, "gpus per node {gpus_per_node}");
        let sched = generate(&s, &plan).unwrap();
        let opts = SimOptions {
            trace: true,
            collapse: false,
            ..SimOptions::default()
        };
        let cost = Analytic::new(&s);
        let res = simulate(&plan, &sched, &cost as &dyn CostModel, &opts).unwrap();
        let link = if nodes == 1 {
            let l = &s.cluster.intra_node;
            (
                l.bandwidth_bytes_per_s * DEFAULT_NVLINK_EFFICIENCY,
                l.latency_ns,
            )
        } else {
            let l = &s.cluster.inter_node;
            (
                l.bandwidth_bytes_per_s * DEFAULT_NETWORK_EFFICIENCY,
                l.latency_ns,
            )
        };
        let mut seen = 0;
        for rank in 0..4 {
            let ops = mirror_ops(program(&sched, rank));
            for e in res.trace.as_ref().unwrap().events.iter() {
                let Some(&(_, _, bytes)) =
                    ops.iter().find(|m| e.rank == rank && m.0 == e.op as usize)
                else {
                    continue;
                };
                let wire_ns = (e.end_ns - e.start_ns - 2 * link.1) as f64;
                let want_ns = bytes as f64 / link.0 * 1e9;
                assert!(
                    (wire_ns / want_ns - 1.0).abs() < 0.001,
                    "rank {rank}, {nodes} node(s): {wire_ns} ns, want {want_ns}"
                );
                seen += 1;
            }
        }
        assert_eq!(seen, 8, "two sums on each of four ranks");
    }
}

/// Every way the data-parallel reduction runs (overlapped buckets, one reduction at the end,
/// one step stale, per micro batch under ZeRO-3, compressed; with dp 2 and without) sums each
/// chunk's two copies once per step, in an order both ranks of a pair share (the validator's
/// matching and dry run), before the optimizer; a step without sync does not.
#[test]
fn every_data_parallel_mode_sums_each_chunk_once() {
    use twin_sim::scenario::{GradCompression, SyncMode};
    for dp in [1u32, 2] {
        for mode in 0..6 {
            let mut s = twin_sim::testing::small_scenario(1, 4, dp, 8);
            s.model.layers = 16;
            s.parallel.schedule = PipelineSchedule::DualPipe;
            s.training.recompute = twin_sim::scenario::Recompute::None;
            match mode {
                0 => {}
                1 => s.training.overlap_grad_reduce = false,
                2 => s.training.sync = SyncMode::Async,
                3 => {
                    s.parallel.zero = 3;
                    s.parallel.fsdp = true;
                }
                4 => s.training.grad_compression = GradCompression::Fp16,
                _ => s.training.sync = SyncMode::Delayed(2),
            }
            let plan = Plan::new(&s).unwrap();
            if mode == 5 {
                // Step 0 of delayed:2 does not synchronise (step 1, generate's, does).
                let quiet = twin_sim::schedule::generate_step(&s, &plan, 0).unwrap();
                quiet.validate(&plan).unwrap();
                assert!(quiet.programs.iter().all(|p| mirror_ops(p).is_empty()));
            }
            let sched = generate(&s, &plan).unwrap();
            sched.validate(&plan).unwrap();
            for rank in 0..plan.world {
                let prog = program(&sched, rank);
                let mirrors = mirror_ops(prog);
                let mut chunks: Vec<u32> = mirrors.iter().map(|m| m.1).collect();
                chunks.dedup();
                chunks.sort_unstable();
                assert_eq!(chunks, vec![0, 1], "dp {dp} mode {mode} rank {rank}");
                let opt = prog
                    .ops
                    .iter()
                    .position(
                        |o| matches!(&o.kind, OpKind::Compute(c) if c.phase == Phase::Optimizer),
                    )
                    .unwrap();
                assert!(mirrors.iter().all(|m| m.0 < opt), "dp {dp} mode {mode}");
            }
        }
    }
}
