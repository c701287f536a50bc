//! DualPipe in the engine: exact step times on small pipelines against DeepSeek's bubble,
//! and the memory it holds (two stages' parameters per rank, its activations).
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
use twin_sim::plan::{Group, Plan};
use twin_sim::scenario::{PipelineSchedule, Scenario};
use twin_sim::schedule::{generate, CollectiveKind, ComputeOp, MemCategory, Phase};

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
