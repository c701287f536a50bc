//! PyTorch's context-parallel attention (`attention.cp_merge = "eager-fp32"`, torchtitan's
//! file): the fp32 merges of the forward and the fp32 dK/dV accumulation of the backward as
//! memory-bound kernels on the compute stream, the fp32 gradients passed to the next rank in
//! place of a reduce-scatter, and their buffers while a pass runs. Checked on one layer range
//! of two context-parallel ranks with a cost model whose prices are the bytes themselves, so
//! each figure is a hand sum of the formulas in `workload::cp_merge`.
#![cfg(test)]

use twin_sim::cost::CostModel;
use twin_sim::engine::{simulate, SimOptions};
use twin_sim::ir::CollectiveKind;
use twin_sim::plan::{Group, GroupKind, Plan};
use twin_sim::scenario::framework::{Bundled, CpMerge};
use twin_sim::scenario::{CpAlgorithm, Recompute, Scenario};
use twin_sim::schedule::{generate, ComputeOp, OpKind, Phase};
use twin_sim::testing::small_scenario;

const KERNEL_NS: u64 = 1_000;

/// A compute op takes one ns per byte it moves plus 1,000 ns per kernel (the optimizer is
/// free); a collective call one ns per byte of its buffer, except the gradient all-reduce,
/// which is free (so that it does not hide a context-parallel collective's tail); p2p is free.
struct Bytes;

impl CostModel for Bytes {
    fn compute_ns(&self, _rank: u32, op: &ComputeOp) -> u64 {
        if op.phase == Phase::Optimizer {
            return 0;
        }
        op.memory_bytes + u64::from(op.kernels) * KERNEL_NS
    }
    fn collective_ns(&self, kind: CollectiveKind, _: &Group, bytes: u64, calls: u32) -> u64 {
        if kind == CollectiveKind::AllReduce {
            return 0;
        }
        bytes * u64::from(calls)
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
    fn compute_is_rank_invariant(&self) -> bool {
        true
    }
}

/// 8 layers of hidden 1,024 (16 heads of 64, K/V as wide), 1,024 tokens over cp = 2 with
/// the all-gather exchange, one micro batch, flash attention, no recompute.
fn cp2(merge: CpMerge) -> Scenario {
    let mut s = small_scenario(1, 1, 1, 1);
    s.parallel.cp = 2;
    s.cluster.gpus = 2;
    s.parallel.cp_algorithm = CpAlgorithm::AllGather;
    s.training.flash_attention = true;
    s.training.recompute = Recompute::None;
    s.training.framework.cp_merge = merge;
    s
}

// Per layer and rank: E_o = E_kv = 512 tokens x 1,024 = 524,288 elements, L = 16 heads x 512
// = 8,192 log-sum-exp values, c = 2.
const E: u64 = 512 * 1024;
const L: u64 = 16 * 512;
const LAYERS: u64 = 8;
/// Forward: 8c E_kv + (38c - 26) E_o + 48 (c - 1) L = 16 E + 50 E + 48 L bytes, 10c - 6 = 14
/// kernels.
const FORWARD_BYTES: u64 = 66 * E + 48 * L;
const FORWARD_KERNELS: u64 = 14;
/// Backward: (10c + 10) E_o + (50c + 14) E_kv = 30 E + 114 E bytes, 7c + 4 = 18 kernels.
const BACKWARD_BYTES: u64 = 144 * E;
const BACKWARD_KERNELS: u64 = 18;

fn schedule_of(s: &Scenario) -> (Plan, twin_sim::schedule::Schedule) {
    let plan = Plan::new(s).unwrap();
    let sched = generate(s, &plan).unwrap();
    sched.validate(&plan).unwrap();
    (plan, sched)
}

/// (bytes x calls, calls) of rank 0's context-parallel collectives of `kind`.
fn cp_collectives(s: &Scenario, kind: CollectiveKind) -> (u64, u64) {
    let (_, sched) = schedule_of(s);
    let mut out = (0, 0);
    for op in &sched.programs[sched.program_of[0] as usize].ops {
        if let OpKind::Collective {
            kind: k,
            group: GroupKind::Cp,
            bytes,
            calls,
        } = op.kind
        {
            if k == kind {
                out.0 += bytes * u64::from(calls);
                out.1 += u64::from(calls);
            }
        }
    }
    out
}

fn step_ns(s: &Scenario) -> u64 {
    let (plan, sched) = schedule_of(s);
    simulate(&plan, &sched, &Bytes, &SimOptions::default())
        .unwrap()
        .step_time_ns
}

#[test]
fn torchtitan_s_file_merges_in_fp32_and_megatron_core_s_does_not() {
    assert_eq!(
        Bundled::Torchtitan.framework().unwrap().cp_merge,
        CpMerge::EagerFp32
    );
    assert_eq!(
        Bundled::MegatronCore.framework().unwrap().cp_merge,
        CpMerge::Fused
    );
}

/// The backward's reduce-scatter of bf16 dK/dV (2 x 2 bytes x 1,024 tokens x 1,024 per
/// layer) becomes the last of the fp32 transfers: 8 E_kv bytes sent, as an all-to-all buffer
/// of c/(c - 1) = 2 times that; the forward's and backward's K/V all-gathers stay.
#[test]
fn the_fp32_gradient_transfer_replaces_the_reduce_scatter() {
    let fused = cp2(CpMerge::Fused);
    let eager = cp2(CpMerge::EagerFp32);
    assert_eq!(
        cp_collectives(&fused, CollectiveKind::ReduceScatter),
        (LAYERS * 4 * 1024 * 1024, LAYERS)
    );
    assert_eq!(
        cp_collectives(&eager, CollectiveKind::ReduceScatter),
        (0, 0)
    );
    assert_eq!(
        cp_collectives(&eager, CollectiveKind::AllToAll),
        (LAYERS * 2 * 8 * E, LAYERS)
    );
    assert_eq!(cp_collectives(&fused, CollectiveKind::AllToAll), (0, 0));
    assert_eq!(
        cp_collectives(&eager, CollectiveKind::AllGather),
        cp_collectives(&fused, CollectiveKind::AllGather)
    );
}

/// One stage, one micro batch: every op is on the critical path, so the step grows by the
/// merges' bytes and kernels over the 8 layers, forward and backward, plus the all-to-all
/// buffer less the reduce-scatter's.
#[test]
fn the_merges_lengthen_the_step_by_their_bytes_and_kernels() {
    let fused = step_ns(&cp2(CpMerge::Fused));
    let eager = step_ns(&cp2(CpMerge::EagerFp32));
    let merges = LAYERS
        * (FORWARD_BYTES + BACKWARD_BYTES + (FORWARD_KERNELS + BACKWARD_KERNELS) * KERNEL_NS);
    let exchange = LAYERS * (2 * 8 * E) - LAYERS * 4 * 1024 * 1024;
    assert_eq!(eager - fused, merges + exchange);
}

/// Full recompute runs the forward, with its merges, again before the backward.
#[test]
fn full_recompute_runs_the_forward_merges_again() {
    let with = |merge| {
        let mut s = cp2(merge);
        s.training.recompute = Recompute::Full;
        step_ns(&s)
    };
    let plain = step_ns(&cp2(CpMerge::EagerFp32)) - step_ns(&cp2(CpMerge::Fused));
    let recomputed = with(CpMerge::EagerFp32) - with(CpMerge::Fused);
    assert_eq!(
        recomputed - plain,
        LAYERS * (FORWARD_BYTES + FORWARD_KERNELS * KERNEL_NS)
    );
}

/// Memory: the backward holds fp32 dQ, the fp32 dK/dV accumulators, the buffer received and
/// the one sent (4 E_o + 24 E_kv bytes) while it runs, one layer at a time; the peak (at the
/// backward's start, every activation saved) grows by exactly that.
#[test]
fn the_fp32_buffers_raise_the_peak_by_the_backward_s_accumulators() {
    let peak = |s: &Scenario| {
        twin_sim::predict(s, &twin_sim::PredictOptions::default())
            .unwrap()
            .report
            .ranks[0]
            .peak_memory_bytes
    };
    let fused = peak(&cp2(CpMerge::Fused));
    let eager = peak(&cp2(CpMerge::EagerFp32));
    assert_eq!(eager - fused, 4 * E + 24 * E);
}
