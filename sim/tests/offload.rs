//! Optimizer offload (`training.offload`), as ZeRO-Offload runs it: each reduction's gradients
//! (this rank's shard, in the weight dtype) go to the host as they are reduced, the host's CPUs
//! update the optimizer state in host memory, and the updated parameters come back to the GPU.
//! Checked on a small GPT with a cost model of round prices, so every time is a hand sum.
#![cfg(test)]

use twin_sim::cost::{CostModel, HostWork};
use twin_sim::engine::{simulate, SimOptions};
use twin_sim::ir::CollectiveKind;
use twin_sim::plan::{Group, Plan};
use twin_sim::scenario::{Offload, Scenario};
use twin_sim::schedule::{generate, ComputeOp, OpKind, Phase, Schedule, Stream};
use twin_sim::testing::small_scenario;
use twin_sim::trace::TraceEvent;

/// The GPU's optimizer update, when it runs there.
const GPU_OPTIMIZER_NS: u64 = 7_000;

/// A compute op takes 1,000 ns plus one ns per kilobyte it moves; a collective one ns per
/// kilobyte of its buffer; a copy over the host link one ns per 100 bytes; the host's update
/// one ns per 50 bytes of host memory.
struct Prices;

impl CostModel for Prices {
    fn compute_ns(&self, _rank: u32, op: &ComputeOp) -> u64 {
        if op.phase == Phase::Optimizer {
            return GPU_OPTIMIZER_NS;
        }
        1_000 + op.memory_bytes / 1_000
    }
    fn collective_ns(&self, _: CollectiveKind, _: &Group, bytes: u64, calls: u32) -> u64 {
        bytes * u64::from(calls) / 1_000
    }
    fn p2p_ns(&self, _: &Plan, _: u32, _: u32, _: u64) -> u64 {
        0
    }
    fn checkpoint_ns(&self, _: u64) -> u64 {
        0
    }
    fn host_ns(&self, work: HostWork) -> u64 {
        match work {
            HostWork::Copy { bytes } => bytes / 100,
            HostWork::Update { bytes } => bytes / 50,
        }
    }
}

/// `dp` ranks of one stage, ZeRO 1, bf16, the optimizer offloaded or not.
fn scenario(dp: u32, offload: Offload) -> Scenario {
    let mut s = small_scenario(1, 1, dp, 4);
    s.parallel.zero = u8::from(dp > 1);
    s.training.offload = offload;
    s
}

fn run(s: &Scenario) -> (Schedule, Vec<TraceEvent>, u64) {
    let (sched, r) = simulated(s);
    let events = r.trace.unwrap().events;
    (sched, events, r.step_time_ns)
}

fn simulated(s: &Scenario) -> (Schedule, twin_sim::engine::SimResult) {
    let plan = Plan::new(s).unwrap();
    let sched = generate(s, &plan).unwrap();
    sched.validate(&plan).unwrap();
    let opts = SimOptions {
        trace: true,
        ..SimOptions::default()
    };
    let r = simulate(&plan, &sched, &Prices, &opts).unwrap();
    (sched, r)
}

/// Rank 0's ops with their events, in program order.
fn rank0(sched: &Schedule, events: &[TraceEvent]) -> Vec<(OpKind, Stream, TraceEvent)> {
    let program = &sched.programs[sched.program_of[0] as usize];
    let mut out: Vec<_> = events
        .iter()
        .filter(|e| e.rank == 0)
        .map(|e| {
            let op = &program.ops[e.op as usize];
            (op.kind.clone(), op.stream, *e)
        })
        .collect();
    out.sort_by_key(|(_, _, e)| e.op);
    out
}

/// The bytes of each offload op of rank 0: (to the host, the update, back to the GPU).
fn offload_bytes(ops: &[(OpKind, Stream, TraceEvent)]) -> (Vec<u64>, Vec<u64>, Vec<u64>) {
    let (mut out, mut update, mut back) = (Vec::new(), Vec::new(), Vec::new());
    for (kind, stream, _) in ops {
        match kind {
            OpKind::HostCopy { bytes, to_host } => {
                assert_eq!(*stream, Stream::Io);
                if *to_host {
                    out.push(*bytes);
                } else {
                    back.push(*bytes);
                }
            }
            OpKind::HostUpdate { bytes } => {
                assert_eq!(*stream, Stream::Io);
                update.push(*bytes);
            }
            _ => {}
        }
    }
    (out, update, back)
}

/// The gradients that leave equal the parameters that return (one shard, both in bf16); the
/// host's update reads and writes 14 times that (12 bytes of fp32 state a parameter, read and
/// written, plus the gradient read and the parameter written: 28 against 2); and the shard is
/// the model's parameters over the two ranks. No optimizer runs on the GPU.
#[test]
fn the_offloaded_step_moves_one_shard_each_way_and_updates_it_on_the_host() {
    let s = scenario(2, Offload::Optimizer);
    let (sched, events, _) = run(&s);
    let ops = rank0(&sched, &events);
    let (out, update, back) = offload_bytes(&ops);
    assert_eq!(back.len(), 1);
    assert_eq!(update.len(), 1);
    assert!(!out.is_empty());
    assert_eq!(out.iter().sum::<u64>(), back[0]);
    assert_eq!(update[0], 14 * back[0]);
    let params = twin_sim::workload::model_params(&s.model);
    let total = params.dense + params.expert;
    assert_eq!(back[0], 2 * total.div_ceil(2));
    assert!(!ops
        .iter()
        .any(|(k, _, _)| matches!(k, OpKind::Compute(c) if c.phase == Phase::Optimizer)));
    let (none, events, _) = run(&scenario(2, Offload::None));
    let ops = rank0(&none, &events);
    assert_eq!(offload_bytes(&ops), (vec![], vec![], vec![]));
    assert!(ops
        .iter()
        .any(|(k, _, _)| matches!(k, OpKind::Compute(c) if c.phase == Phase::Optimizer)));
}

/// In time: the update starts when the last gradients have reached the host, takes its
/// price, and the parameters' copy back follows it at once and ends the step (the next
/// step's parameter gather is overlapped, so nothing comes after).
#[test]
fn the_host_update_waits_for_the_gradients_and_the_copy_back_ends_the_step() {
    let s = scenario(2, Offload::Optimizer);
    let (sched, events, step_ns) = run(&s);
    let ops = rank0(&sched, &events);
    let of = |f: &dyn Fn(&OpKind) -> bool| -> Vec<&TraceEvent> {
        ops.iter()
            .filter(|(k, _, _)| f(k))
            .map(|(_, _, e)| e)
            .collect()
    };
    let out = of(&|k| matches!(k, OpKind::HostCopy { to_host: true, .. }));
    let update = of(&|k| matches!(k, OpKind::HostUpdate { .. }))[0];
    let back = of(&|k| matches!(k, OpKind::HostCopy { to_host: false, .. }))[0];
    let (out_bytes, update_bytes, back_bytes) = offload_bytes(&ops);
    for (e, bytes) in out.iter().zip(&out_bytes) {
        assert_eq!(e.end_ns - e.start_ns, bytes / 100);
    }
    let grads_home = out.iter().map(|e| e.end_ns).max().unwrap();
    assert_eq!(update.start_ns, grads_home);
    assert_eq!(update.end_ns - update.start_ns, update_bytes[0] / 50);
    assert_eq!(back.start_ns, update.end_ns);
    assert_eq!(back.end_ns - back.start_ns, back_bytes[0] / 100);
    assert_eq!(step_ns, back.end_ns);
}

/// Without data parallelism nothing is reduced: every gradient goes to the host when the last
/// backward ends, and the step is that backward's end plus the three offload prices, where
/// without offload it is the backward's end plus the GPU's update.
#[test]
fn without_data_parallelism_the_gradients_leave_after_the_last_backward() {
    let (sched, events, step_ns) = run(&scenario(1, Offload::Optimizer));
    let ops = rank0(&sched, &events);
    let last_backward = ops
        .iter()
        .filter(|(k, _, _)| matches!(k, OpKind::Compute(c) if c.phase == Phase::Backward))
        .map(|(_, _, e)| e.end_ns)
        .max()
        .unwrap();
    let (out, update, back) = offload_bytes(&ops);
    assert_eq!(out.len(), 1);
    assert_eq!(
        step_ns,
        last_backward + out[0] / 100 + update[0] / 50 + back[0] / 100
    );
    // The two copies run beside no compute: exposed transfers. The host's update is the
    // rank's optimizer work: busy, not communication.
    let (_, r) = simulated(&scenario(1, Offload::Optimizer));
    let rank = &r.ranks[0];
    assert_eq!(rank.comm_exposed_ns, out[0] / 100 + back[0] / 100);
    let (_, none) = simulated(&scenario(1, Offload::None));
    assert_eq!(
        rank.compute_busy_ns,
        none.ranks[0].compute_busy_ns - GPU_OPTIMIZER_NS + update[0] / 50
    );
    let (sched, events, step_none_ns) = run(&scenario(1, Offload::None));
    let last_backward_none = rank0(&sched, &events)
        .iter()
        .filter(|(k, _, _)| matches!(k, OpKind::Compute(c) if c.phase == Phase::Backward))
        .map(|(_, _, e)| e.end_ns)
        .max()
        .unwrap();
    assert_eq!(last_backward_none, last_backward);
    assert_eq!(step_none_ns, last_backward + GPU_OPTIMIZER_NS);
}

/// With the parameters offloaded too (ZeRO 3), every all-gather of parameters waits for a
/// copy of the rank's shard from the host (half the gathered bytes on two ranks), the update
/// leaves the parameters on the host (no copy back), and every gather and every compute pass
/// still finds its parameters.
#[test]
fn offloaded_parameters_are_fetched_before_each_gather() {
    let mut s = scenario(2, Offload::Params);
    s.parallel.zero = 3;
    let (sched, events, _) = run(&s);
    let program = &sched.programs[sched.program_of[0] as usize];
    let mut gathers = 0;
    for op in &program.ops {
        if let OpKind::Collective {
            kind: CollectiveKind::AllGather,
            bytes,
            calls,
            ..
        } = op.kind
        {
            gathers += 1;
            let fetches: Vec<u64> = op
                .deps
                .iter()
                .filter_map(|&d| match program.ops[d as usize].kind {
                    OpKind::HostCopy {
                        bytes,
                        to_host: false,
                    } => Some(bytes),
                    _ => None,
                })
                .collect();
            assert_eq!(fetches, [bytes * u64::from(calls) / 2], "{}", op.name());
        }
    }
    assert!(gathers > 0);
    let ops = rank0(&sched, &events);
    let (out, update, back) = offload_bytes(&ops);
    assert!(!out.is_empty());
    assert_eq!(update.len(), 1);
    assert_eq!(
        back.len(),
        gathers,
        "one fetch per gather, none after the update"
    );
    let update_end = ops
        .iter()
        .find(|(k, _, _)| matches!(k, OpKind::HostUpdate { .. }))
        .map(|(_, _, e)| e.end_ns)
        .unwrap();
    assert!(!ops.iter().any(
        |(k, _, e)| matches!(k, OpKind::HostCopy { to_host: false, .. })
            && e.start_ns >= update_end
    ));
}

/// Under DualPipe each chunk's gradients are summed with the other copy's before the
/// optimizer: the offloaded shard leaves after that sum (every copy to the host waits for a
/// mirror all-reduce), once (the copies add up to the parameters coming back), with and
/// without data parallelism.
#[test]
fn dualpipe_copies_the_summed_gradients_once() {
    use twin_sim::plan::GroupKind;
    use twin_sim::scenario::PipelineSchedule;
    for dp in [1, 2] {
        let mut s = small_scenario(1, 2, dp, 8);
        s.parallel.zero = u8::from(dp > 1);
        s.parallel.schedule = PipelineSchedule::DualPipe;
        s.training.offload = Offload::Optimizer;
        let (sched, _, _) = run(&s);
        for program in &sched.programs {
            let mut out = 0;
            let mut back = 0;
            for op in &program.ops {
                match op.kind {
                    OpKind::HostCopy {
                        bytes,
                        to_host: true,
                    } => {
                        out += bytes;
                        assert!(
                            op.deps.iter().any(|&d| matches!(
                                program.ops[d as usize].kind,
                                OpKind::Collective {
                                    group: GroupKind::PpMirror,
                                    ..
                                }
                            )),
                            "dp {dp}: {} does not wait for the sum",
                            op.name()
                        );
                    }
                    OpKind::HostCopy {
                        bytes,
                        to_host: false,
                    } => back += bytes,
                    _ => {}
                }
            }
            assert!(out > 0, "dp {dp}");
            assert_eq!(out, back, "dp {dp}");
        }
    }
}
