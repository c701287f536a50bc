//! Property tests: for random valid scenarios (including extreme sizes) nothing panics and
//! the invariants every caller relies on hold.

use super::*;
use crate::workload::{chunk_params, chunk_work, layers_work, optimizer_step, state_bytes};
use proptest::prelude::*;

#[allow(clippy::too_many_arguments)]
fn build(
    (tp, pp, dp, cp, ep, vpp): (u32, u32, u32, u32, u32, u32),
    (layers_per_chunk, head_dim, heads_per_tp, kv_div, ffn_mult): (u32, u64, u32, u32, u64),
    (seq_len, vocab, micro_batch, microbatches): (u64, u64, u64, u64),
    gated: bool,
    tied: bool,
    moe: Option<(u32, u32, u32)>,
    precision: Precision,
    recompute: Recompute,
    zero: u8,
    offload: Offload,
    sp: bool,
    flash: bool,
) -> Scenario {
    let heads = heads_per_tp * tp;
    let hidden = head_dim * u64::from(heads);
    let mut s = gpt(
        layers_per_chunk * pp * vpp,
        hidden,
        heads,
        seq_len,
        vocab,
        (tp, pp, dp),
        micro_batch,
        microbatches,
    );
    s.model.kv_heads = (heads / kv_div).max(1);
    s.model.ffn_hidden = hidden * ffn_mult;
    s.model.gated_mlp = gated;
    s.model.tied_embeddings = tied;
    let ffn_hidden = s.model.ffn_hidden;
    s.model.moe = moe.map(|(experts, top_k, moe_every)| {
        Moe::uniform(experts * ep, top_k, moe_every, ffn_hidden)
    });
    s.parallel.cp = cp;
    s.parallel.ep = if moe.is_some() { ep } else { 1 };
    // `dp` here is the expert layers' data parallelism; the scenario's is the dense layers'.
    s.parallel.dp = dp * s.parallel.ep;
    s.parallel.vpp = vpp;
    s.parallel.zero = zero;
    s.parallel.sequence_parallel = sp;
    s.cluster.gpus = tp * pp * dp * cp * s.parallel.ep;
    s.training.global_batch = microbatches * micro_batch * u64::from(dp * s.parallel.ep);
    s.training.precision = precision;
    s.training.recompute = recompute;
    s.training.offload = offload;
    s.training.flash_attention = flash;
    s
}

fn precision() -> impl Strategy<Value = Precision> {
    prop_oneof![
        Just(Precision::Fp32),
        Just(Precision::Fp16),
        Just(Precision::Bf16),
        Just(Precision::Fp8)
    ]
}

fn recompute() -> impl Strategy<Value = Recompute> {
    prop_oneof![
        Just(Recompute::None),
        Just(Recompute::Selective),
        Just(Recompute::Full)
    ]
}

fn offload() -> impl Strategy<Value = Offload> {
    prop_oneof![
        Just(Offload::None),
        Just(Offload::Optimizer),
        Just(Offload::Params)
    ]
}

/// No sum or GEMM count of `op` came near saturation (beyond that, equalities between
/// differently merged sums need not hold).
fn unsaturated(op: &crate::ir::ComputeOp) -> bool {
    op.flops < u64::MAX / 4 && op.gemms.iter().all(|g| g.count < u32::MAX / 8)
}

prop_compose! {
    fn scenario()(
        mesh in (1u32..=4, 1u32..=3, 1u32..=2, 1u32..=2, 1u32..=2, 1u32..=2),
        shape in (1u32..=3, prop_oneof![Just(1u64), 8..=128u64, Just(1 << 20)], 1u32..=4,
                  prop_oneof![Just(1u32), Just(2), Just(4)], 1u64..=4),
        sizes in (prop_oneof![1u64..=4096, Just(1u64 << 24)], prop_oneof![1u64..=65536, Just(u64::from(u32::MAX))],
                  prop_oneof![1u64..=8, Just(1u64 << 16)], 1u64..=4),
        gated in any::<bool>(),
        tied in any::<bool>(),
        moe in proptest::option::of((1u32..=4, 1u32..=2, 1u32..=3)),
        precision in precision(),
        recompute in recompute(),
        zero in 0u8..=3,
        offload in offload(),
        sp in any::<bool>(),
        flash in any::<bool>(),
    ) -> Scenario {
        build(mesh, shape, sizes, gated, tied, moe, precision, recompute, zero, offload, sp, flash)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_valid_scenario_is_sized_without_panicking(s in scenario()) {
        let plan = plan(&s);
        for c in all_chunks(&plan) {
            let w = chunk_work(&s, &plan, &c);
            let (f, b) = (&w.forward.compute, &w.backward.compute);
            let (bi, bw) = (&w.backward_input.compute, &w.backward_weight);
            prop_assert_eq!(b.flops, bi.flops.saturating_add(bw.flops));
            prop_assert_eq!(b.kernels, bi.kernels.saturating_add(bw.kernels));
            prop_assert_eq!(b.memory_bytes, bi.memory_bytes.saturating_add(bw.memory_bytes));
            if unsaturated(f) {
                prop_assert_eq!(b.flops, 2 * f.flops);
            }
            prop_assert!(w.activation_bytes > 0);
            prop_assert!(w.boundary_bytes > 0);
            prop_assert_eq!(w.recompute.is_some(),
                s.training.recompute != Recompute::None && c.num_layers > 0);
            for call in w.forward.comms.iter().chain(&w.backward.comms) {
                prop_assert!(call.calls > 0 && call.bytes > 0);
            }
            // One layer at a time sums to the chunk (for sizes that do not saturate).
            let mut flops = 0u64;
            let mut act = 0u64;
            for l in c.first_layer..c.first_layer + c.num_layers {
                let one = layers_work(&s, &plan, &c, l, 1, false, false);
                flops = flops.saturating_add(one.forward.compute.flops);
                act = act.saturating_add(one.activation_bytes);
            }
            let bare = layers_work(&s, &plan, &c, c.first_layer, c.num_layers, false, false);
            if unsaturated(&bare.forward.compute) {
                prop_assert_eq!(bare.forward.compute.flops, flops);
            }
            if act < u64::MAX {
                prop_assert_eq!(bare.activation_bytes, act);
            }
            let _ = chunk_params(&s, &plan, &c);
        }
        for stage in 0..plan.pp() {
            let b = state_bytes(&s, &plan, stage);
            let op = optimizer_step(&s, &plan, stage);
            prop_assert!(op.gemms.is_empty());
            if s.training.offload != crate::scenario::Offload::None {
                prop_assert_eq!(b.optimizer_bytes, 0);
            }
        }
    }

    #[test]
    fn sizing_is_deterministic(s in scenario()) {
        let plan = plan(&s);
        for c in all_chunks(&plan) {
            prop_assert_eq!(chunk_work(&s, &plan, &c), chunk_work(&s, &plan, &c));
        }
    }
}
