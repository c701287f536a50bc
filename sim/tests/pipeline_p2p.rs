//! `[training] overlap_p2p_comm`: with it, a stage posts its receives as early as it can and
//! computes on while its sends drain; without it (Megatron-Core's 1F1B, torch's pipelining) a
//! pass waits for the send of the pass before it and, except under the interleaved schedule,
//! a receive is posted only when the pass before it has finished. Exact times on a two-stage pipeline
//! whose transfers each take a fixed time, and the default and refusals of the key.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_sim::engine::{simulate, SimOptions, SimResult};
use twin_sim::plan::Plan;
use twin_sim::scenario::{PipelineSchedule, Scenario};
use twin_sim::schedule::{generate, OpKind, Phase};

/// Each pipeline transfer's time.
const TRANSFER_NS: u64 = 1_000_000;

mod common;

use common::FlopsCost;

/// Compute costs 1 ns per 1,000 FLOPs of model passes; a pipeline transfer takes
/// `TRANSFER_NS`; everything else is free.
const FIXED_TRANSFER: FlopsCost = FlopsCost {
    p2p_ns: TRANSFER_NS,
};

/// A pipeline-only scenario; a tiny vocabulary keeps the head negligible.
fn pipeline(pp: u32, m: u64, schedule: PipelineSchedule, vpp: u32, overlap: bool) -> Scenario {
    let mut s = common::pipeline(pp, m, schedule, vpp);
    s.training.overlap_p2p_comm = overlap;
    s
}

fn run(s: &Scenario) -> SimResult {
    let plan = Plan::new(s).unwrap();
    let sched = generate(s, &plan).unwrap();
    sched.validate(&plan).unwrap();
    let opts = SimOptions {
        trace: true,
        collapse: false,
        ..SimOptions::default()
    };
    simulate(&plan, &sched, &FIXED_TRANSFER, &opts).unwrap()
}

/// Forward and backward time of one micro batch on stage `stage`: the compute of its first
/// micro batch, by phase.
fn pass_ns(s: &Scenario, res: &SimResult, stage: u32, phase: Phase) -> u64 {
    let plan = Plan::new(s).unwrap();
    let sched = generate(s, &plan).unwrap();
    let rank = (0..plan.world)
        .find(|&r| plan.stage_of(r) == stage)
        .unwrap();
    let prog = &sched.programs[sched.program_of[rank as usize] as usize];
    let trace = res.trace.as_ref().unwrap();
    trace
        .events
        .iter()
        .filter(|e| e.rank == rank)
        .filter(|e| match &prog.ops[e.op as usize].kind {
            OpKind::Compute(c) => {
                c.phase == phase && prog.ops[e.op as usize].label.microbatch == Some(0)
            }
            _ => false,
        })
        .map(|e| e.end_ns - e.start_ns)
        .sum()
}

/// Two stages, two micro batches, 1F1B, stage times f and b. Overlapped, the step is
/// 3f + 3b + 2T: the activation of micro batch 1 travels while stage 0 computes on and
/// stage 1 runs B0, so only the first activation and the last gradient are exposed. Blocking,
/// it is 3f + 3b + 3T: stage 0 waits for the send of F0 before F1, and stage 1 posts the
/// receive of F1's activation only after B0, so that transfer is exposed too.
#[test]
fn blocking_transfers_expose_the_transfer_overlap_hides() {
    let over = pipeline(2, 2, PipelineSchedule::OneFOneB, 1, true);
    let block = pipeline(2, 2, PipelineSchedule::OneFOneB, 1, false);
    let (ro, rb) = (run(&over), run(&block));
    let f = pass_ns(&over, &ro, 0, Phase::Forward);
    let b = pass_ns(&over, &ro, 0, Phase::Backward);
    assert!(f > 10 * TRANSFER_NS && b > f, "f {f} b {b}");
    // The last stage's head and loss make its passes a little longer than stage 0's.
    let f1 = pass_ns(&over, &ro, 1, Phase::Forward);
    let b1 = pass_ns(&over, &ro, 1, Phase::Backward);
    assert!(f1 >= f && b1 >= b);
    // Stage 0: F0, F1, B0, B1; stage 1: F0, B0, F1, B1 (the critical path runs through
    // stage 1's passes, then B1 on stage 0).
    let want_over = f + 2 * (f1 + b1) + b + 2 * TRANSFER_NS;
    let want_block = want_over + TRANSFER_NS;
    assert_eq!(ro.step_time_ns, want_over);
    assert_eq!(rb.step_time_ns, want_block);
    assert_eq!(pass_ns(&block, &rb, 0, Phase::Forward), f);
}

/// Blocking transfers never make a step faster, and every schedule still runs to the end
/// (no pass waits on a transfer its peer posts only later). Under the interleaved schedule a
/// blocking stage waits for its sends, its receives posted as the peer sends.
#[test]
fn blocking_transfers_run_every_schedule_and_never_speed_it_up() {
    for (schedule, vpp) in [
        (PipelineSchedule::Gpipe, 1),
        (PipelineSchedule::OneFOneB, 1),
        (PipelineSchedule::Interleaved1F1B, 2),
        (PipelineSchedule::ZeroBubble, 1),
    ] {
        for (pp, m) in [(2u32, 4u64), (4, 8), (8, 16)] {
            let over = run(&pipeline(pp, m, schedule, vpp, true));
            let block = run(&pipeline(pp, m, schedule, vpp, false));
            assert!(
                block.step_time_ns > over.step_time_ns,
                "{schedule:?} pp {pp} m {m}: blocking {} <= overlapped {}",
                block.step_time_ns,
                over.step_time_ns
            );
        }
    }
}

fn parse(text: &str, sets: &[&str]) -> Result<Scenario, String> {
    let sets: Vec<String> = sets.iter().map(|x| x.to_string()).collect();
    twin_sim::setup::parse_str(text, "512xA100.toml", &sets).map_err(|e| e.to_string())
}

/// When not written, the key is the framework file's `overlaps.p2p_overlap` under an
/// interleaved schedule and false under any other; written true, it is refused under 1F1B
/// with a pipeline and under a framework that cannot, naming the keys.
#[test]
fn overlap_p2p_comm_defaults_from_the_framework_and_schedule() {
    let text = include_str!("../../scenarios/512xA100.toml");
    let interleaved = ["parallel.schedule=\"interleaved-1f1b\"", "parallel.vpp=2"];
    assert!(!parse(text, &[]).unwrap().training.overlap_p2p_comm);
    assert!(parse(text, &interleaved).unwrap().training.overlap_p2p_comm);
    let mut tt = interleaved.to_vec();
    tt.extend(["training.framework=\"torchtitan\"", "parallel.zero=3"]);
    assert!(!parse(text, &tt).unwrap().training.overlap_p2p_comm);
    let mut off = interleaved.to_vec();
    off.push("training.overlap_p2p_comm=false");
    assert!(!parse(text, &off).unwrap().training.overlap_p2p_comm);

    let e = parse(text, &["training.overlap_p2p_comm=true"]).unwrap_err();
    assert!(e.contains("interleaved schedules only"), "{e}");
    assert!(e.contains("schedule = \"interleaved-1f1b\""), "{e}");
    assert!(e.contains("overlap_p2p_comm = false"), "{e}");
    let mut tt_on = tt.clone();
    tt_on.push("training.overlap_p2p_comm=true");
    let e = parse(text, &tt_on).unwrap_err();
    assert!(
        e.contains("cannot overlap the pipeline's sends and receives"),
        "{e}"
    );
    assert!(e.contains("framework torchtitan"), "{e}");
    // Without a pipeline there is nothing to overlap and nothing to refuse.
    let one_stage = parse(
        text,
        &[
            "parallel.pp=1",
            "parallel.dp=64",
            "training.overlap_p2p_comm=true",
        ],
    )
    .unwrap();
    assert!(one_stage.training.overlap_p2p_comm);
}
