//! Tests of the backward's tensor-parallel overlap (Megatron's asynchronous all-reduce): at
//! layer granularity the input-gradient half runs first, its collectives run on the tp stream
//! beside the weight-gradient half, and the next pass waits for both.

use crate::cost::Analytic;
use crate::engine::{simulate, SimOptions};
use crate::plan::{GroupKind, Plan};
use crate::scenario::{Granularity, Scenario};
use crate::schedule::{generate, OpKind, Phase, Program, Schedule, Stream};
use crate::testing::small_scenario;

fn layer_scenario(tp: u32) -> Scenario {
    let mut s = small_scenario(tp, 1, 1, 2);
    s.run.granularity = Granularity::Layer;
    s.parallel.sequence_parallel = false;
    s
}

fn schedule(s: &Scenario) -> (Plan, Schedule) {
    let plan = Plan::new(s).unwrap();
    let sched = generate(s, &plan).unwrap();
    (plan, sched)
}

fn phase_of(p: &Program, i: usize) -> Option<Phase> {
    match &p.ops.get(i)?.kind {
        OpKind::Compute(c) => Some(c.phase),
        _ => None,
    }
}

fn count(p: &Program, phase: Phase) -> usize {
    (0..p.ops.len())
        .filter(|&i| phase_of(p, i) == Some(phase))
        .count()
}

#[test]
fn tp_backward_collectives_run_beside_the_weight_gradient() {
    let s = layer_scenario(2);
    let (_, sched) = schedule(&s);
    let p = &sched.programs[0];
    let layers = s.model.layers as usize;
    let microbatches = 2;
    assert_eq!(count(p, Phase::Backward), 0);
    assert_eq!(count(p, Phase::BackwardInput), layers * microbatches);
    assert_eq!(count(p, Phase::BackwardWeight), layers * microbatches);
    let mut passes_after = 0;
    for (i, op) in p.ops.iter().enumerate() {
        if phase_of(p, i) != Some(Phase::BackwardWeight) {
            continue;
        }
        // The weight half follows its input half...
        let input = op.deps.iter().copied().max().unwrap() as usize;
        assert_eq!(phase_of(p, input), Some(Phase::BackwardInput), "op {i}");
        // ...and the layer's tp collectives depend on the input half, not on the weight half.
        let comms: Vec<usize> = (0..p.ops.len())
            .filter(|&j| {
                matches!(
                    p.ops[j].kind,
                    OpKind::Collective {
                        group: GroupKind::Tp,
                        ..
                    }
                ) && p.ops[j].deps.contains(&(input as u32))
            })
            .collect();
        assert!(
            !comms.is_empty(),
            "op {i}: no collective after the input half"
        );
        for &j in &comms {
            assert_eq!(p.ops[j].stream, Stream::Tp);
            assert!(
                !p.ops[j].deps.contains(&(i as u32)),
                "op {j} waits for wgrad"
            );
        }
        // The next pass (not the optimizer step after the last one) waits for the last of
        // them.
        let last = *comms.iter().max().unwrap() as u32;
        let next = (i + 1..p.ops.len()).find(|&j| phase_of(p, j).is_some());
        if let Some(next) = next.filter(|&j| phase_of(p, j) != Some(Phase::Optimizer)) {
            assert!(p.ops[next].deps.contains(&last), "op {next} skips {last}");
            passes_after += 1;
        }
    }
    // Every backward but the step's last is followed by another pass.
    assert_eq!(passes_after, layers * microbatches - 1);
}

#[test]
fn backward_stays_whole_without_tp_or_at_chunk_granularity() {
    let (_, sched) = schedule(&layer_scenario(1));
    let p = &sched.programs[0];
    assert!(count(p, Phase::Backward) > 0);
    assert_eq!(count(p, Phase::BackwardWeight), 0);

    let mut chunk = layer_scenario(2);
    chunk.run.granularity = Granularity::Chunk;
    let (_, sched) = schedule(&chunk);
    let p = &sched.programs[0];
    assert!(count(p, Phase::Backward) > 0);
    assert_eq!(count(p, Phase::BackwardWeight), 0);
}

/// In the simulation the first collective of each layer's backward starts when its weight
/// gradient does (both wait only for the input half), so communication and the wgrad GEMMs
/// run at the same time.
#[test]
fn simulated_tp_collectives_start_with_the_weight_gradient() {
    let s = layer_scenario(2);
    let (plan, sched) = schedule(&s);
    let cost = Analytic::new(&s);
    let opts = SimOptions {
        trace: true,
        ..SimOptions::default()
    };
    let result = simulate(&plan, &sched, &cost, &opts).unwrap();
    let trace = result.trace.unwrap();
    let p = &sched.programs[0];
    let starts = |pred: &dyn Fn(usize) -> bool| -> Vec<u64> {
        let mut v: Vec<u64> = trace
            .events
            .iter()
            .filter(|e| e.rank == 0 && pred(e.op as usize))
            .map(|e| e.start_ns)
            .collect();
        v.sort_unstable();
        v
    };
    let wgrad = starts(&|i| phase_of(p, i) == Some(Phase::BackwardWeight));
    let first_tp = starts(&|i| {
        matches!(
            p.ops[i].kind,
            OpKind::Collective {
                group: GroupKind::Tp,
                ..
            }
        ) && p.ops[i]
            .deps
            .iter()
            .all(|&d| phase_of(p, d as usize) == Some(Phase::BackwardInput))
    });
    assert_eq!(wgrad.len(), 16);
    assert_eq!(wgrad, first_tp);
}

/// With sequence parallelism the backward all-gathers bring the gradient the input half needs
/// and stay on the critical path (the weight half waits for them); the reduce-scatters of the
/// input gradients run beside the weight half.
#[test]
fn sequence_parallel_backward_gathers_block_and_scatters_overlap() {
    use crate::schedule::CollectiveKind;
    let mut s = layer_scenario(2);
    s.parallel.sequence_parallel = true;
    let (_, sched) = schedule(&s);
    let p = &sched.programs[0];
    let mut checked = 0;
    for (i, op) in p.ops.iter().enumerate() {
        if phase_of(p, i) != Some(Phase::BackwardWeight) {
            continue;
        }
        let gather = op
            .deps
            .iter()
            .copied()
            .find(|&d| {
                matches!(
                    p.ops[d as usize].kind,
                    OpKind::Collective {
                        kind: CollectiveKind::AllGather,
                        ..
                    }
                )
            })
            .expect("the weight half waits for the backward all-gather");
        let scatter = (0..p.ops.len())
            .find(|&j| {
                matches!(
                    p.ops[j].kind,
                    OpKind::Collective {
                        kind: CollectiveKind::ReduceScatter,
                        ..
                    }
                ) && p.ops[j].deps.contains(&gather)
            })
            .expect("a reduce-scatter after the all-gather");
        assert!(!p.ops[scatter].deps.contains(&(i as u32)));
        checked += 1;
    }
    assert_eq!(checked, 16);
}
