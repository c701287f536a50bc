//! Ring context parallelism in the engine: the generated schedule runs each K/V transfer
//! beside one attention block, so a step shows only what a transfer takes beyond the block it
//! hides behind. Checked against the closed form on a two-rank ring with a cost model of fixed
//! prices (the closed form is the oracle; the engine simulates the schedule op by op).
#![cfg(test)]

use twin_sim::cost::CostModel;
use twin_sim::engine::{simulate, SimOptions};
use twin_sim::plan::{Group, Plan};
use twin_sim::scenario::{CpAlgorithm, Recompute, Scenario};
use twin_sim::schedule::{generate, CollectiveKind, ComputeOp, OpKind, Peer, Phase, Schedule};
use twin_sim::testing::small_scenario;

/// Fixed prices: the op without attention 5,000 ns forward and 9,000 backward; the causal
/// (first) attention block 1,000 / 2,500; an unmasked block 700 / 1,750; a p2p `bytes /
/// bytes_per_ns`; everything else free.
struct Prices {
    bytes_per_ns: u64,
}

impl CostModel for Prices {
    fn compute_ns(&self, _rank: u32, op: &ComputeOp) -> u64 {
        let backward = matches!(op.phase, Phase::Backward | Phase::BackwardInput);
        match (&op.attention, op.phase) {
            (_, Phase::Optimizer | Phase::Compress | Phase::Copy) => 0,
            (Some(a), _) if a.causal => {
                if backward {
                    2_500
                } else {
                    1_000
                }
            }
            (Some(_), _) => {
                if backward {
                    1_750
                } else {
                    700
                }
            }
            (None, _) => {
                if backward {
                    9_000
                } else {
                    5_000
                }
            }
        }
    }
    fn collective_ns(&self, _: CollectiveKind, _: &Group, _: u64, _: u32) -> u64 {
        0
    }
    fn p2p_ns(&self, _: &Plan, _: u32, _: u32, bytes: u64) -> u64 {
        bytes / self.bytes_per_ns
    }
    fn checkpoint_ns(&self, _: u64) -> u64 {
        0
    }
    fn host_ns(&self, _: twin_sim::cost::HostWork) -> u64 {
        0
    }
    fn compute_is_rank_invariant(&self) -> bool {
        true
    }
}

/// Two ranks of one cp group, one micro batch, flash attention, no recompute, and the
/// gradient reduction over the cp group after the backward (not cut into buckets), so each
/// pass is one op.
fn ring_scenario() -> Scenario {
    let mut s = small_scenario(1, 1, 1, 1);
    s.parallel.cp = 2;
    s.parallel.cp_algorithm = CpAlgorithm::Ring;
    s.cluster.gpus = 2;
    s.training.flash_attention = true;
    s.training.recompute = Recompute::None;
    s.training.overlap_grad_reduce = false;
    s
}

fn ring_sends(sched: &Schedule) -> Vec<u64> {
    sched.programs[0]
        .ops
        .iter()
        .filter_map(|op| match op.kind {
            OpKind::Send {
                peer: Peer::CpNext,
                bytes,
                ..
            } => Some(bytes),
            _ => None,
        })
        .collect()
}

fn step_ns(s: &Scenario, bytes_per_ns: u64) -> (u64, Vec<u64>) {
    let plan = Plan::new(s).unwrap();
    let sched = generate(s, &plan).unwrap();
    sched.validate(&plan).unwrap();
    let res = simulate(
        &plan,
        &sched,
        &Prices { bytes_per_ns },
        &SimOptions::default(),
    )
    .unwrap();
    (res.step_time_ns, ring_sends(&sched))
}

#[test]
fn ring_transfers_hide_behind_the_block_before_them() {
    let s = ring_scenario();
    // One transfer per direction of the pass: K, V of the rank's 512 positions over 8 layers
    // (2 * 512 * 1024 * 2 bytes * 8 = 16 MiB), and backward with their gradients.
    let (_, sends) = step_ns(&s, u64::MAX);
    let fwd = 2 * 512 * 1024 * 2 * 8;
    assert_eq!(sends, vec![fwd, 2 * fwd]);
    let all_compute = 5_000 + 1_000 + 700 + 9_000 + 2_500 + 1_750;
    // Transfers shorter than the block beside them (16 MiB at 32 KiB/ns: 512 ns < 1,000 fwd,
    // 1,024 < 2,500 bwd): the step is the compute alone.
    let (fast, _) = step_ns(&s, 32 * 1024);
    assert_eq!(fast, all_compute);
    // Longer ones (16 MiB at 4 KiB/ns: 4,096 ns fwd, 8,192 bwd): each shows by exactly what it
    // takes beyond its block, 3,096 + 5,692.
    let (slow, _) = step_ns(&s, 4 * 1024);
    assert_eq!(slow, all_compute + (4_096 - 1_000) + (8_192 - 2_500));
}

#[test]
fn all_gather_puts_no_transfer_beside_the_attention() {
    let mut s = ring_scenario();
    s.parallel.cp_algorithm = CpAlgorithm::AllGather;
    let (step, sends) = step_ns(&s, 4 * 1024);
    assert!(sends.is_empty());
    // One op per pass, priced whole by its attention kernel's causal shape: 1,000 + 2,500.
    assert_eq!(step, 1_000 + 2_500);
}

/// The ring's receives run on their own stream ([`Stream::CpRecv`]), apart from the
/// pipeline's: an interleaved pipeline whose transfers block (`overlap_p2p_comm = false`)
/// posts a pass's receive after the ring receives of the pass before it, and when those
/// shared the pp-recv stream each waited for compute that waited, through the peer stage's
/// blocking send, for the other (two stages deadlocked from 4 micro batches on). Every
/// micro-batch count and granularity now runs, and no ring receive is on the pp-recv stream.
#[test]
fn a_ring_beside_an_interleaved_pipeline_of_blocking_transfers_runs() {
    use twin_sim::scenario::{Granularity, PipelineSchedule};
    use twin_sim::schedule::Stream;
    for m in [2u64, 4, 6, 8] {
        for granularity in [Granularity::Chunk, Granularity::Layer] {
            let mut s = small_scenario(1, 2, 1, m);
            s.parallel.cp = 2;
            s.parallel.cp_algorithm = CpAlgorithm::Ring;
            s.parallel.vpp = 2;
            s.parallel.schedule = PipelineSchedule::Interleaved1F1B;
            s.cluster.gpus = 4;
            s.training.flash_attention = true;
            s.training.overlap_p2p_comm = false;
            s.run.granularity = granularity;
            let plan = Plan::new(&s).unwrap();
            let sched = generate(&s, &plan).unwrap();
            let ring_recvs: Vec<Stream> = sched.programs[0]
                .ops
                .iter()
                .filter(|op| {
                    matches!(
                        op.kind,
                        OpKind::Recv {
                            peer: Peer::CpPrev,
                            ..
                        }
                    )
                })
                .map(|op| op.stream)
                .collect();
            assert!(!ring_recvs.is_empty());
            assert!(ring_recvs.iter().all(|&st| st == Stream::CpRecv));
            let r = simulate(
                &plan,
                &sched,
                &Prices { bytes_per_ns: 4096 },
                &SimOptions::default(),
            );
            assert!(r.is_ok(), "m {m}, {granularity:?}: {:?}", r.err());
        }
    }
}
