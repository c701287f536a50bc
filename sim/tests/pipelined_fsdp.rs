//! FSDP2 under pipeline parallelism as torchtitan runs it (`overlaps.grad_reduce_pipelined =
//! "after-backward"` with `reshard_after_forward = "unless-pipelined"`): each layer is
//! gathered once per step by its first forward and kept, gradients accumulate unsharded in
//! fp32, and each chunk's layers are reduce-scattered once, after its last backward. Checked
//! with a cost model of fixed prices, so the exposed tail is a hand sum.
#![cfg(test)]

use twin_sim::cost::CostModel;
use twin_sim::engine::{simulate, SimOptions};
use twin_sim::ir::CollectiveKind;
use twin_sim::plan::{Group, Plan};
use twin_sim::scenario::framework::Bundled;
use twin_sim::scenario::{Recompute, Scenario, SyncMode};
use twin_sim::schedule::{generate, generate_step, ComputeOp, OpKind, Phase};
use twin_sim::testing::small_scenario;

const FORWARD_NS: u64 = 1_000;
const BACKWARD_NS: u64 = 2_000;
const REDUCE_SCATTER_NS: u64 = 500;

/// Fixed prices: every forward compute op 1,000 ns, every backward 2,000, an all-gather call
/// `gather_ns`, a reduce-scatter call 500; the optimizer, other compute, other collectives and
/// p2p are free.
struct Prices {
    gather_ns: u64,
}

impl CostModel for Prices {
    fn compute_ns(&self, _rank: u32, op: &ComputeOp) -> u64 {
        match op.phase {
            Phase::Forward => FORWARD_NS,
            Phase::Backward => BACKWARD_NS,
            _ => 0,
        }
    }
    fn collective_ns(&self, kind: CollectiveKind, _: &Group, _: u64, calls: u32) -> u64 {
        let per_call = match kind {
            CollectiveKind::AllGather => self.gather_ns,
            CollectiveKind::ReduceScatter => REDUCE_SCATTER_NS,
            _ => 0,
        };
        per_call * u64::from(calls)
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

/// pp 2, dp 2 under FSDP2 (zero 3), torchtitan's file, 8 layers per stage, `m` micro batches,
/// no recompute.
fn titan(m: u64) -> Scenario {
    let mut s = small_scenario(1, 2, 2, m);
    s.parallel.zero = 3;
    s.training.framework = Bundled::Torchtitan.framework().unwrap();
    s.training.recompute = Recompute::None;
    s
}

/// The same with gradients reduced every micro batch and parameters gathered per pass (FSDP2
/// outside `torch.distributed.pipelining`).
fn per_microbatch(m: u64) -> Scenario {
    let mut s = titan(m);
    s.training.framework.overlaps.grad_reduce_pipelined = None;
    s
}

/// (all-gathers, reduce-scatters, all-gather bytes) of stage `stage`'s program.
fn dp_collectives(s: &Scenario, stage: usize) -> (u64, u64, u64) {
    let plan = Plan::new(s).unwrap();
    let sched = generate(s, &plan).unwrap();
    sched.validate(&plan).unwrap();
    let rank = plan.ranks_of_stage(stage as u32)[0];
    let prog = &sched.programs[sched.program_of[rank as usize] as usize];
    let (mut gathers, mut scatters, mut gathered) = (0, 0, 0);
    for op in &prog.ops {
        if let OpKind::Collective {
            kind, bytes, calls, ..
        } = op.kind
        {
            match kind {
                CollectiveKind::AllGather => {
                    gathers += u64::from(calls);
                    gathered += bytes * u64::from(calls);
                }
                CollectiveKind::ReduceScatter => scatters += u64::from(calls),
                _ => {}
            }
        }
    }
    (gathers, scatters, gathered)
}

/// The step time with gathers of `gather_ns`; under `sync = delayed:2`, of step 0, which does
/// not synchronise.
fn step_with(s: &Scenario, gather_ns: u64) -> u64 {
    let plan = Plan::new(s).unwrap();
    let sched = generate_step(s, &plan, 0).unwrap();
    simulate(&plan, &sched, &Prices { gather_ns }, &SimOptions::default())
        .unwrap()
        .step_time_ns
}

/// The step time with gathers of 300 ns (hidden behind the previous layer's compute).
fn step_ns(s: &Scenario) -> u64 {
    step_with(s, 300)
}

#[test]
fn torchtitan_under_pp_gathers_each_layer_once_and_reduces_once_per_step() {
    let m = 4;
    let plan = Plan::new(&titan(m)).unwrap();
    let layers = u64::from(plan.chunks[0][0].num_layers);
    assert_eq!(layers, 8);
    for stage in 0..2 {
        let (g, r, bytes) = dp_collectives(&titan(m), stage);
        // One gather per layer (FSDP unit) and step.
        assert_eq!(g, layers, "stage {stage}");
        // Outside pipelining: a gather before each forward and each backward of every micro
        // batch, and each backward's reduce-scatters (cut into calls of at most
        // `grad_bucket_bytes`, as the per-pass reduction is), m times over.
        let (g0, r0, bytes0) = dp_collectives(&per_microbatch(m), stage);
        assert_eq!(g0, 2 * m * layers, "stage {stage}");
        assert!(r >= layers);
        assert_eq!(r0, m * r, "stage {stage}");
        // The same parameters each time: 2m times the bytes.
        assert_eq!(bytes0, 2 * m * bytes);
    }
    // Without pipelining (pp 1) the file's reduction per micro batch holds.
    let mut flat = small_scenario(1, 1, 2, m);
    flat.parallel.zero = 3;
    flat.training.framework = Bundled::Torchtitan.framework().unwrap();
    flat.training.recompute = Recompute::None;
    let (g, _, _) = dp_collectives(&flat, 0);
    assert_eq!(g, 2 * m * 8);
}

/// Stage 0's last backward ends the pipeline; its layers' reduce-scatters all wait for it and
/// run one after another on the data-parallel stream, so the step is exactly 8 reduce-scatters
/// longer than a step that does not synchronise (delayed sync: the same gathers, no reduction,
/// no optimizer). Reduced per micro batch instead, each layer's reduce-scatter hides behind the
/// next layer's backward (500 < 2,000 ns) and only the last layer's (two calls: the first
/// layer carries the embedding) is exposed.
#[test]
fn after_backward_reduction_exposes_the_chunk_s_reduce_scatters_after_its_last_backward() {
    for m in [1, 4] {
        let synced = titan(m);
        let mut quiet = synced.clone();
        quiet.training.sync = SyncMode::Delayed(2);
        // Stage 0's calls: one per layer, the first layer's (with the embedding) in two.
        let (_, calls, _) = dp_collectives(&synced, 0);
        assert_eq!(calls, 9);
        assert_eq!(
            step_ns(&synced) - step_ns(&quiet),
            calls * REDUCE_SCATTER_NS
        );

        let synced = per_microbatch(m);
        let mut quiet = synced.clone();
        quiet.training.sync = SyncMode::Delayed(2);
        assert_eq!(step_ns(&synced) - step_ns(&quiet), 2 * REDUCE_SCATTER_NS);
    }
}

/// Gathered once and kept, the gathers cost the same whatever the micro batches. At 5,000 ns
/// a gather (a layer's forward is 1,000), one ahead of the layer computing:
/// - stage 0's first forward waits for its 8 gathers back to back and ends at 8 x 5,000 +
///   1,000 = 41,000 ns instead of 8,000: 33,000 later;
/// - stage 1 has gathered its first two layers by then; each later gather is issued once the
///   layer two before it has run (the prefetch throttle), so after its first layer (41,000 to
///   42,000) its 6 remaining gathers run back to back and its last layer ends at 42,000 +
///   6 x 5,000 + 1,000 = 73,000 instead of 16,000: 57,000 later;
/// - nothing waits for a gather again, so the step is exactly 57,000 ns longer, for 1 micro
///   batch and for 4. Gathered per pass, every forward and backward waits again, and more so
///   with more micro batches.
#[test]
fn kept_parameters_are_not_gathered_again_in_later_micro_batches() {
    let slower = |s: Scenario| {
        let mut s = s;
        s.training.sync = SyncMode::Delayed(2);
        step_with(&s, 5_000) - step_with(&s, 0)
    };
    assert_eq!(slower(titan(1)), 57_000);
    assert_eq!(slower(titan(4)), 57_000);
    assert!(slower(per_microbatch(4)) > slower(per_microbatch(1)));
    assert!(slower(per_microbatch(1)) > 57_000);
}

/// Memory: the stage keeps its parameters gathered in bf16 (2 bytes each) and its unsharded
/// fp32 gradients (4 bytes each) for the step, where per-pass FSDP holds a layer or two.
#[test]
fn kept_parameters_and_fp32_gradients_stay_resident() {
    let buffers = |s: &Scenario| -> u64 {
        let r = twin_sim::predict(s, &twin_sim::PredictOptions::default()).unwrap();
        r.report.ranks[0].memory_breakdown.buffers
    };
    let s = titan(4);
    let plan = Plan::new(&s).unwrap();
    let params = twin_sim::workload::chunk_params(&s, &plan, &plan.chunks[0][0]);
    let stage_params = params.dense + params.expert;
    let kept = buffers(&s);
    let per_pass = buffers(&per_microbatch(4));
    assert!(kept >= 6 * stage_params, "{kept} < 6 x {stage_params}");
    assert!(per_pass < kept);
    // What per-pass FSDP holds beyond the gather and gradient buffers (received activations
    // and gradients of the pipeline) is held the same way here: the difference is at most
    // the whole stage's bf16 parameters and fp32 gradients.
    assert!(kept - per_pass <= 6 * stage_params);
}

/// Interleaved (two chunks per stage): after a chunk's last backward its reduce-scatters are
/// issued, and the rank's next compute (the other chunk's backward) waits for all of them, as
/// FSDP2's post-backward callback makes the compute stream wait for the last one. Each chunk
/// reduces its own layers once.
#[test]
fn the_next_compute_waits_for_a_finished_chunk_s_reduce_scatters() {
    let mut s = titan(4);
    s.parallel.vpp = 2;
    s.parallel.schedule = twin_sim::scenario::PipelineSchedule::Interleaved1F1B;
    let plan = Plan::new(&s).unwrap();
    let sched = generate(&s, &plan).unwrap();
    sched.validate(&plan).unwrap();
    let prog = &sched.programs[sched.program_of[0] as usize];
    let scatters = |chunk: u32| -> Vec<usize> {
        prog.ops
            .iter()
            .enumerate()
            .filter(|(_, op)| {
                op.label.chunk == chunk
                    && matches!(
                        op.kind,
                        OpKind::Collective {
                            kind: CollectiveKind::ReduceScatter,
                            ..
                        }
                    )
            })
            .map(|(i, _)| i)
            .collect()
    };
    let layers = plan.chunks[0][0].num_layers as usize;
    assert_eq!(layers, 4);
    let mut waited = 0;
    for chunk in 0..2 {
        let rs = scatters(chunk);
        // One call per layer; the first chunk's first layer carries the embedding (two calls).
        assert!(rs.len() == layers || rs.len() == layers + 1, "{rs:?}");
        let last = *rs.last().unwrap();
        let next_compute = prog.ops[last..]
            .iter()
            .position(|op| matches!(op.kind, OpKind::Compute(_)))
            .map(|k| last + k);
        if let Some(c) = next_compute {
            for &r in &rs {
                assert!(
                    prog.ops[c].deps.contains(&(r as u32)),
                    "op {c} does not wait for {r}"
                );
            }
            waited += 1;
        }
    }
    // The chunk whose last backward is not the stage's last op is waited for.
    assert!(waited >= 1);
}
