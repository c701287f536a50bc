//! Measures the engine alone: builds a synthetic 1F1B schedule with per-pass TP all-reduces,
//! p2p activations, activation alloc/free and bucketed DP gradient all-reduces, then times
//! `simulate` over it and prints wall time and events per second. Run in release:
//! `cargo run --release -p twin-sim --example engine_throughput -- TP PP DP MICROBATCHES [REPS]`.

use std::time::Instant;
use twin_sim::cost::Analytic;
use twin_sim::engine::{simulate, SimOptions};
use twin_sim::plan::{GroupKind, Plan};
use twin_sim::scenario::Precision;
use twin_sim::schedule::{
    CollectiveKind, ComputeOp, Device, Gemm, Label, MemCategory, Op, OpKind, Peer, Phase, Program,
    Schedule, Stream,
};
use twin_sim::testing::small_scenario;

fn compute(phase: Phase, scale: u64) -> OpKind {
    let g = Gemm {
        m: 2048,
        n: 4096,
        k: 4096,
        count: (4 * scale) as u32,
        batch: 1,
        dtype: None,
    };
    OpKind::Compute(ComputeOp {
        attention: None,
        phase,
        dtype: Precision::Bf16,
        gemms: vec![g].into(),
        flops: g.flops(),
        memory_bytes: 1 << 28,
        kernels: 40,
        sms_reserved: 0,
        host_syncs: Default::default(),
    })
}

fn push(ops: &mut Vec<Op>, stream: Stream, kind: OpKind, deps: Vec<u32>, mb: u32) -> u32 {
    ops.push(Op {
        stream,
        kind,
        deps: deps.into(),
        label: Label {
            microbatch: Some(mb),
            ..Label::default()
        },
    });
    ops.len() as u32 - 1
}

fn stage_program(stage: u32, pp: u32, m: u32, buckets: u32) -> Program {
    let warm = (pp - stage - 1).min(m);
    let mut order: Vec<(bool, u32)> = (0..warm).map(|i| (true, i)).collect();
    for i in 0..m - warm {
        order.push((true, warm + i));
        order.push((false, i));
    }
    order.extend((m - warm..m).map(|i| (false, i)));
    let mut ops = Vec::new();
    let mut fwd_done = vec![0u32; m as usize];
    let act = 64u64 << 20;
    let mut last_bwd = 0;
    for (is_fwd, i) in order {
        if is_fwd {
            let mut deps = vec![];
            if stage > 0 {
                let peer = Peer::PpPrev;
                let tag = 2 * i;
                deps.push(push(
                    &mut ops,
                    Stream::PpRecv,
                    OpKind::Recv {
                        peer,
                        bytes: act,
                        tag,
                    },
                    vec![],
                    i,
                ));
            }
            let a = push(
                &mut ops,
                Stream::Compute,
                OpKind::Alloc {
                    category: MemCategory::Activations,
                    device: Device::Gpu,
                    bytes: 1 << 30,
                    tag: i,
                },
                vec![],
                i,
            );
            deps.push(a);
            let f = push(
                &mut ops,
                Stream::Compute,
                compute(Phase::Forward, 1),
                deps,
                i,
            );
            let c = push(
                &mut ops,
                Stream::Tp,
                OpKind::Collective {
                    kind: CollectiveKind::AllReduce,
                    group: GroupKind::Tp,
                    bytes: act,
                    calls: 2,
                },
                vec![f],
                i,
            );
            fwd_done[i as usize] = c;
            if stage + 1 < pp {
                let peer = Peer::PpNext;
                let tag = 2 * i;
                push(
                    &mut ops,
                    Stream::PpSend,
                    OpKind::Send {
                        peer,
                        bytes: act,
                        tag,
                    },
                    vec![c],
                    i,
                );
            }
        } else {
            let mut deps = vec![fwd_done[i as usize]];
            if stage + 1 < pp {
                let peer = Peer::PpNext;
                let tag = 2 * i + 1;
                deps.push(push(
                    &mut ops,
                    Stream::PpRecv,
                    OpKind::Recv {
                        peer,
                        bytes: act,
                        tag,
                    },
                    vec![],
                    i,
                ));
            }
            let b = push(
                &mut ops,
                Stream::Compute,
                compute(Phase::Backward, 2),
                deps,
                i,
            );
            let c = push(
                &mut ops,
                Stream::Tp,
                OpKind::Collective {
                    kind: CollectiveKind::AllReduce,
                    group: GroupKind::Tp,
                    bytes: act,
                    calls: 2,
                },
                vec![b],
                i,
            );
            push(
                &mut ops,
                Stream::Compute,
                OpKind::Free { tag: i },
                vec![c],
                i,
            );
            if stage > 0 {
                let peer = Peer::PpPrev;
                let tag = 2 * i + 1;
                push(
                    &mut ops,
                    Stream::PpSend,
                    OpKind::Send {
                        peer,
                        bytes: act,
                        tag,
                    },
                    vec![c],
                    i,
                );
            }
            last_bwd = c;
        }
    }
    let mut reduces = vec![];
    for _ in 0..buckets {
        reduces.push(push(
            &mut ops,
            Stream::Dp,
            OpKind::Collective {
                kind: CollectiveKind::AllReduce,
                group: GroupKind::Dp,
                bytes: 100 << 20,
                calls: 1,
            },
            vec![last_bwd],
            0,
        ));
    }
    push(
        &mut ops,
        Stream::Compute,
        compute(Phase::Optimizer, 1),
        reduces,
        0,
    );
    Program { stage, ops }
}

fn main() {
    let args: Vec<u32> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (tp, pp, dp, m, reps) = match args.as_slice() {
        [tp, pp, dp, m] => (*tp, *pp, *dp, *m, 20),
        [tp, pp, dp, m, reps] => (*tp, *pp, *dp, *m, *reps),
        _ => (8, 8, 8, 96, 20),
    };
    let scenario = small_scenario(tp, pp, dp, u64::from(m));
    let t0 = Instant::now();
    let plan = match Plan::new(&scenario) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("bad layout: {e}");
            std::process::exit(2);
        }
    };
    let plan_s = t0.elapsed().as_secs_f64();
    let programs: Vec<Program> = (0..pp).map(|s| stage_program(s, pp, m, 8)).collect();
    let schedule = Schedule {
        programs,
        program_of: (0..plan.world).map(|r| plan.stage_of(r)).collect(),
    };
    let cost = Analytic::new(&scenario);
    let opts = SimOptions::default();
    // The best of several runs (up to 20, or about 3 s): on a shared machine the minimum
    // is the run that was not descheduled.
    let mut best = f64::MAX;
    let mut result = None;
    let started = Instant::now();
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        let r = simulate(&plan, &schedule, &cost, &opts);
        best = best.min(t.elapsed().as_secs_f64());
        result = Some(r);
        if started.elapsed().as_secs_f64() > 3.0 {
            break;
        }
    }
    let r = match result {
        Some(Ok(r)) => r,
        Some(Err(e)) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
        None => return,
    };
    println!(
        "world {} (tp {tp} pp {pp} dp {dp}), {} microbatches, {} ops total ({} per rank of stage 0)",
        plan.world,
        m,
        schedule.total_ops(),
        schedule.program(0).ops.len()
    );
    println!("plan: {:.1} ms", plan_s * 1e3);
    println!(
        "simulate: {:.2} ms, {} events, {:.1} M events/s; step {:.1} ms, bubble {:.3}",
        best * 1e3,
        r.events,
        r.events as f64 / best / 1e6,
        r.step_time_ns as f64 / 1e6,
        r.bubble_fraction()
    );
}
