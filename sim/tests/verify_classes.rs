//! A predicted step by class of work (`verify::predicted_classes`): the classes and idle sum
//! exactly to the step, and each class is what the cost model's parts of the rank's ops say.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_sim::cost::{Analytic, CostModel};
use twin_sim::engine::{simulate, SimOptions};
use twin_sim::plan::Plan;
use twin_sim::schedule::{generate, OpKind, Phase};
use twin_sim::verify::{compare_classes, predicted_classes, ClassTimes, WorkClass};

#[test]
fn predicted_classes_sum_to_the_step_and_follow_the_cost_model() {
    for (tp, pp, dp) in [(1, 1, 1), (2, 1, 2), (1, 2, 2)] {
        let s = twin_sim::testing::small_scenario(tp, pp, dp, 4);
        let plan = Plan::new(&s).unwrap();
        let sched = generate(&s, &plan).unwrap();
        let cost = Analytic::new(&s);
        let opts = SimOptions {
            trace: true,
            collapse: false,
            ..SimOptions::default()
        };
        let res = simulate(&plan, &sched, &cost, &opts).unwrap();
        for rank in 0..plan.world {
            let t = predicted_classes(&sched, &res, &cost, rank);
            let sum: u64 = t.by_class_ns.iter().map(|(_, n)| n).sum();
            assert_eq!(sum, t.step_ns, "({tp},{pp},{dp}) rank {rank}");
            assert_eq!(t.step_ns, res.step_time_ns);
            let stats = &res.ranks[rank as usize];
            assert_eq!(t.get(WorkClass::Communication), stats.comm_exposed_ns);
            assert_eq!(t.get(WorkClass::Idle), stats.idle_ns);
            // Alone on its GPU every op runs its priced time, so the GEMM class is the sum of
            // the GEMM parts (within rounding, one ns per op).
            let program = sched.program(rank);
            let (mut gemm_s, mut ops) = (0.0, 0u64);
            let mut optimizer_ns = 0;
            for op in &program.ops {
                if let OpKind::Compute(c) = &op.kind {
                    ops += 1;
                    if c.phase == Phase::Optimizer {
                        optimizer_ns += cost.compute_ns(rank, c);
                    } else {
                        gemm_s += cost.compute_parts(c, false).gemm_s;
                    }
                }
            }
            let gemm_ns = (gemm_s * 1e9).round() as u64;
            assert!(
                t.get(WorkClass::Gemm).abs_diff(gemm_ns) <= ops,
                "({tp},{pp},{dp}) rank {rank}: {} vs {gemm_ns}",
                t.get(WorkClass::Gemm)
            );
            assert!(t.get(WorkClass::Optimizer).abs_diff(optimizer_ns) <= ops);
            assert!(t.get(WorkClass::Gemm) > 0 && t.get(WorkClass::Elementwise) > 0);
        }
    }
}

/// With an eager host slower than the GPU, every compute op waits for its kernels' issue: that
/// wait is idle (the GPU idles), and the work classes stay the cost model's prices.
#[test]
fn time_waiting_for_the_host_is_idle() {
    let mut s = twin_sim::testing::small_scenario(1, 1, 1, 4);
    let plan = Plan::new(&s).unwrap();
    let sched = generate(&s, &plan).unwrap();
    let opts = SimOptions {
        trace: true,
        collapse: false,
        ..SimOptions::default()
    };
    let fast = Analytic::new(&s);
    let res = simulate(&plan, &sched, &fast, &opts).unwrap();
    let without = predicted_classes(&sched, &res, &fast, 0);
    // 1 ms per kernel: far longer than any of this small model's kernels.
    s.training.framework.launch.host_per_kernel_ns = 1_000_000;
    let slow = Analytic::new(&s);
    assert_eq!(slow.host_issue_ns(), 1_000_000);
    let res = simulate(&plan, &sched, &slow, &opts).unwrap();
    let with = predicted_classes(&sched, &res, &slow, 0);
    let sum: u64 = with.by_class_ns.iter().map(|(_, n)| n).sum();
    assert_eq!(sum, with.step_ns);
    // The host issues every kernel of the rank one after another: the step is at least that.
    let kernels: u64 = sched
        .program(0)
        .ops
        .iter()
        .filter_map(|o| match &o.kind {
            OpKind::Compute(c) => Some(u64::from(c.kernels)),
            _ => None,
        })
        .sum();
    assert!(kernels > 0);
    assert!(with.step_ns >= kernels * 1_000_000);
    assert!(with.step_ns > without.step_ns);
    // The work is the same; only idle grew, by the whole lengthening of the step (within a
    // nanosecond per op of rounding).
    let ops = sched.program(0).ops.len() as u64;
    for c in [WorkClass::Gemm, WorkClass::Attention, WorkClass::Optimizer] {
        assert!(with.get(c).abs_diff(without.get(c)) <= ops, "{c:?}");
    }
    let grown = with.step_ns - without.step_ns;
    assert!(
        (with.get(WorkClass::Idle) - without.get(WorkClass::Idle)).abs_diff(grown) <= 2 * ops,
        "idle {} -> {}, step grew {grown}",
        without.get(WorkClass::Idle),
        with.get(WorkClass::Idle)
    );
}

#[test]
fn a_comparison_reports_each_class_and_the_peak_errors() {
    let mut predicted = ClassTimes::new(
        100,
        &[
            (WorkClass::Gemm, 60),
            (WorkClass::Elementwise, 30),
            (WorkClass::Idle, 10),
        ],
    );
    predicted.peak_allocated_bytes = Some(90);
    let mut measured = ClassTimes::new(
        125,
        &[
            (WorkClass::Gemm, 65),
            (WorkClass::Elementwise, 50),
            (WorkClass::Idle, 10),
        ],
    );
    measured.peak_allocated_bytes = Some(100);
    let c = compare_classes(&predicted, &measured, Some(120));
    assert!((c.step_time_error - 0.2).abs() < 1e-12);
    assert_eq!(c.peak_allocated_error, Some(0.1));
    let elementwise = c
        .classes
        .iter()
        .find(|r| r.class == WorkClass::Elementwise)
        .unwrap();
    assert!((elementwise.difference_s - 20e-9).abs() < 1e-18);
    assert_eq!(c.classes.len(), WorkClass::ALL.len());
    let text = c.to_text();
    assert!(
        text.contains("elementwise") && text.contains("reserved"),
        "{text}"
    );
}

/// `Simulation::stage_classes` (`twin simulate --breakdown`): one row per pipeline stage, its
/// representative rank's classes as `predicted_classes` gives them; nothing without a trace of
/// those ranks.
#[test]
fn stage_classes_give_each_stage_representative_its_classes() {
    use twin_sim::simulation::{simulate as run, SimulateOptions};
    let s = twin_sim::testing::small_scenario(2, 2, 2, 4);
    let plan = Plan::new(&s).unwrap();
    let reps = twin_sim::trace::representative_ranks(&plan);
    assert_eq!(reps.len(), 2);
    let predict = twin_sim::PredictOptions {
        trace: true,
        trace_ranks: Some(reps.clone()),
        collapse: true,
        ..twin_sim::PredictOptions::default()
    };
    let opts = SimulateOptions {
        predict: &predict,
        profile: None,
        samples: 1,
        variability: None,
        sample_progress: None,
        horizon: None,
        progress: None,
    };
    let sim = run(&s, &plan, "test", &opts).unwrap();
    let stages = sim.stage_classes().expect("the representatives are traced");
    assert_eq!(stages.len(), 2);
    let p = &sim.prediction;
    for (i, c) in stages.iter().enumerate() {
        assert_eq!(c.stage, i as u32);
        assert_eq!(c.rank, reps[i]);
        let t = predicted_classes(&p.staged.schedule, &p.result, &p.staged.cost, c.rank);
        let s = |w: WorkClass| t.get(w) as f64 * 1e-9;
        assert_eq!(c.gemm_s, s(WorkClass::Gemm));
        assert_eq!(c.attention_s, s(WorkClass::Attention));
        assert_eq!(c.elementwise_s, s(WorkClass::Elementwise));
        assert_eq!(c.optimizer_s, s(WorkClass::Optimizer));
        assert_eq!(c.exposed_comm_s, s(WorkClass::Communication));
        assert_eq!(c.idle_s, s(WorkClass::Idle));
        assert_eq!(c.step_time_s, t.step_ns as f64 * 1e-9);
        assert!(c.gemm_s > 0.0);
    }
    // A pipeline of two stages has a bubble on both.
    assert!(stages.iter().all(|c| c.idle_s > 0.0), "{stages:#?}");
    // Without a trace there is nothing to split.
    let untraced = twin_sim::PredictOptions {
        collapse: true,
        ..twin_sim::PredictOptions::default()
    };
    let sim = run(
        &s,
        &plan,
        "test",
        &SimulateOptions {
            predict: &untraced,
            ..opts
        },
    )
    .unwrap();
    assert!(sim.stage_classes().is_none());
}
