//! Pipelines whose layers do not divide `pp * vpp`, split automatically as Megatron-Core
//! splits them (`twin_ir::plan::partition`): the generated schedule runs on the uneven chunks
//! and the engine reproduces a hand-computed 1F1B step, and each stage's memory follows its
//! share of the layers.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_sim::cost::CostModel;
use twin_sim::engine::{simulate, SimOptions, SimResult};
use twin_sim::plan::{Group, PartitionRule, Plan};
use twin_sim::scenario::{PipelineSchedule, Recompute, Scenario};
use twin_sim::schedule::{generate, CollectiveKind, ComputeOp, MemCategory, Phase};
use twin_sim::testing::small_scenario;

/// The time of one layer's forward pass; a backward pass costs twice its FLOPs.
const NS_PER_LAYER_FORWARD: u64 = 1_000;

/// Forward and backward passes cost a whole number of layer times (1 µs per layer forward),
/// found by rounding the op's FLOPs to whole layers; the head's GEMM on a vocabulary of 8 is
/// far below half a layer. Everything else (communication, the optimizer) is free.
struct PerLayer {
    layer_forward_flops: u64,
}

impl CostModel for PerLayer {
    fn compute_ns(&self, _rank: u32, op: &ComputeOp) -> u64 {
        match op.phase {
            Phase::Forward | Phase::Backward => {
                let f = self.layer_forward_flops;
                (op.flops + f / 2) / f * NS_PER_LAYER_FORWARD
            }
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

/// `layers` on `pp` stages of 1F1B, `m` micro batches, a negligible head.
fn uneven(layers: u32, pp: u32, m: u64) -> Scenario {
    let mut s = small_scenario(1, pp, 1, m);
    s.model.layers = layers;
    s.model.vocab = 8;
    s.parallel.schedule = PipelineSchedule::OneFOneB;
    s.training.recompute = Recompute::None;
    s
}

fn run(s: &Scenario) -> (Plan, SimResult) {
    let plan = Plan::new(s).unwrap();
    let sched = generate(s, &plan).unwrap();
    sched.validate(&plan).unwrap();
    // One layer's forward FLOPs: a middle stage's forward op over its layer count.
    let mid = &plan.chunks[1][0];
    assert!(!mid.has_embedding && !mid.has_head);
    let fwd = sched
        .programs
        .iter()
        .flat_map(|p| p.ops.iter())
        .find_map(|op| match &op.kind {
            twin_sim::schedule::OpKind::Compute(c)
                if c.phase == Phase::Forward && op.label.num_layers == mid.num_layers =>
            {
                Some(c.flops)
            }
            _ => None,
        })
        .unwrap();
    let cost = PerLayer {
        layer_forward_flops: fwd / u64::from(mid.num_layers),
    };
    let res = simulate(&plan, &sched, &cost, &SimOptions::default()).unwrap();
    (plan, res)
}

/// 7 layers on 3 stages: 9 slots with the embedding and the loss, 3 per stage, so 2, 3, 2.
/// With forward 1 µs and backward 2 µs per layer (F = 2, 3, 2 and B = 4, 6, 4 µs) and three
/// micro batches, 1F1B runs (µs):
/// - stage 0: F1 0-2, F2 2-4, F3 4-6, B1 17-21, B2 26-30, B3 32-36;
/// - stage 1: F1 2-5, F2 5-8, B1 11-17, F3 17-20, B2 20-26, B3 26-32;
/// - stage 2: F1 5-7, B1 7-11, F2 11-13, B2 13-17, F3 20-22, B3 22-26;
///
/// so the step ends at 36 µs, when stage 0's last backward finishes.
#[test]
fn one_f_one_b_on_a_slot_split_takes_the_hand_computed_step() {
    let s = uneven(7, 3, 3);
    let (plan, res) = run(&s);
    assert_eq!(plan.layers_per_virtual_stage(), vec![2, 3, 2]);
    assert!(matches!(
        plan.partition,
        PartitionRule::Slots {
            automatic: true,
            ..
        }
    ));
    assert_eq!(res.step_time_ns, 36_000);
}

/// 8 layers on 3 stages: neither 8 nor 10 divides 3, so lighter ends: middle stages hold
/// ceil(8 / 3) = 3, the 5 left go 3 to the first and 2 to the last. F = 3, 3, 2 and
/// B = 6, 6, 4 µs, three micro batches:
/// - stage 0: F1 0-3, F2 3-6, F3 6-9, B1 18-24, B2 27-33, B3 33-39;
/// - stage 1: F1 3-6, F2 6-9, B1 12-18, F3 18-21, B2 21-27, B3 27-33;
/// - stage 2: F1 6-8, B1 8-12, F2 12-14, B2 14-18, F3 21-23, B3 23-27;
///
/// a step of 39 µs.
#[test]
fn one_f_one_b_on_lighter_ends_takes_the_hand_computed_step() {
    let s = uneven(8, 3, 3);
    let (plan, res) = run(&s);
    assert_eq!(plan.layers_per_virtual_stage(), vec![3, 3, 2]);
    assert!(matches!(plan.partition, PartitionRule::LighterEnds { .. }));
    assert_eq!(res.step_time_ns, 39_000);
}

/// Interleaved 1F1B on Llama 3.1 405B's depth scaled down: 30 layers on pp 4 with vpp 2,
/// 32 slots over 8 virtual stages, so the first and last virtual stage hold 3 and the rest 4.
/// Stage 0 holds virtual stages 0 and 4 (3 + 4 layers), stage 3 holds 3 and 7 (4 + 3), the
/// middle stages 8 each; with 8 micro batches each stage is busy `8 * 3 µs * layers`.
#[test]
fn interleaved_chunks_of_uneven_sizes_run_every_layer_once() {
    let mut s = uneven(30, 4, 8);
    s.parallel.vpp = 2;
    s.parallel.schedule = PipelineSchedule::Interleaved1F1B;
    let (plan, res) = run(&s);
    assert_eq!(
        plan.layers_per_virtual_stage(),
        vec![3, 4, 4, 4, 4, 4, 4, 3]
    );
    for (stage, layers) in [7u64, 8, 8, 7].into_iter().enumerate() {
        let rank = plan.ranks_of_stage(stage as u32)[0];
        assert_eq!(
            res.ranks[rank as usize].compute_busy_ns,
            8 * 3 * NS_PER_LAYER_FORWARD * layers,
            "stage {stage}"
        );
    }
    assert!(res.step_time_ns >= 8 * 3 * NS_PER_LAYER_FORWARD * 8);
}

/// Each stage's weights at its peak are its layers' parameters plus the embedding (stage 0)
/// or the final norm and head (last stage), at 2 bytes each (bf16). The test model is
/// GPT-style (biases, LayerNorm, learned positions): a layer holds `12h² + 13h` parameters,
/// the embedding `V*h + s*h`, the head `V*h + 2h` (Megatron's counting).
#[test]
fn stage_memory_follows_the_partition() {
    let s = uneven(7, 3, 3);
    let (plan, res) = run(&s);
    let (h, v, seq) = (s.model.hidden, s.model.vocab, s.model.seq_len);
    let layer = 12 * h * h + 13 * h;
    let want = [
        2 * layer + v * h + seq * h,
        3 * layer,
        2 * layer + v * h + 2 * h,
    ];
    for (stage, params) in want.iter().enumerate() {
        let rank = plan.ranks_of_stage(stage as u32)[0];
        let r = &res.ranks[rank as usize];
        assert_eq!(
            r.memory_at_peak[MemCategory::Weights as usize],
            2 * params,
            "stage {stage}"
        );
    }
}
