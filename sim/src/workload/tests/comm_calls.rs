//! Tensor, context and expert parallel collectives of a pass.

use super::*;
use crate::ir::CollectiveKind::{self, *};
use crate::plan::GroupKind;
use crate::workload::{chunk_work, layers_work, CommCall};

fn cc(kind: CollectiveKind, group: GroupKind, bytes: u64, calls: u32) -> CommCall {
    CommCall {
        kind,
        group,
        bytes,
        calls,
    }
}

#[test]
fn no_collectives_without_tp_cp_or_ep() {
    let mut sc = gpt(4, 1024, 16, 1024, 32000, (1, 2, 2), 1, 2);
    sc.training.recompute = Recompute::Full;
    let ffn_hidden = sc.model.ffn_hidden;
    sc.model.moe = Some(Moe::uniform(4, 2, 1, ffn_hidden));
    let plan = plan(&sc);
    for c in all_chunks(&plan) {
        let w = chunk_work(&sc, &plan, &c);
        assert!(w.forward.comms.is_empty());
        assert!(w.backward.comms.is_empty());
        assert!(w.backward_input.comms.is_empty());
        assert!(w.recompute.map(|r| r.comms).unwrap_or_default().is_empty());
    }
}

#[test]
fn tensor_parallel_layers_all_reduce_twice_per_direction() {
    let (b, s, h, l) = (2u64, 1024u64, 1024u64, 6u32);
    let mut sc = gpt(l, h, 16, s, 32000, (4, 1, 1), b, 1);
    sc.training.recompute = Recompute::Full;
    let plan = plan(&sc);
    let layout = &plan.chunks[0][0];
    let w = layers_work(&sc, &plan, layout, 0, l, false, false);
    let x = b * s * h * 2;
    let want = vec![cc(AllReduce, GroupKind::Tp, x, 2 * l)];
    assert_eq!(w.forward.comms, want);
    assert_eq!(w.backward.comms, want);
    // Full recompute repeats the forward's collectives.
    assert_eq!(w.recompute.expect("full").comms, want);
}

#[test]
fn sequence_parallel_swaps_each_all_reduce_for_a_gather_scatter_pair() {
    let (b, s, h, l) = (1u64, 2048u64, 2048u64, 4u32);
    let mut sc = gpt(l, h, 16, s, 32000, (8, 1, 1), b, 1);
    sc.parallel.sequence_parallel = true;
    let plan = plan(&sc);
    let w = layers_work(&sc, &plan, &plan.chunks[0][0], 0, l, false, false);
    let x = b * s * h * 2;
    let want = vec![
        cc(AllGather, GroupKind::Tp, x, 2 * l),
        cc(ReduceScatter, GroupKind::Tp, x, 2 * l),
    ];
    assert_eq!(w.forward.comms, want);
    assert_eq!(w.backward.comms, want);
    // Same total bytes as the all-reduces they replace.
    let total = |v: &[CommCall]| v.iter().map(|c| c.bytes * u64::from(c.calls)).sum::<u64>();
    assert_eq!(total(&w.forward.comms), 2 * u64::from(2 * l) * x);
}

#[test]
fn embedding_and_head_add_their_vocab_parallel_collectives() {
    let (b, s, h) = (1u64, 1024u64, 1024u64);
    let mut sc = gpt(2, h, 16, s, 32000, (2, 1, 1), b, 1);
    let plan = plan(&sc);
    let w = chunk_work(&sc, &plan, &plan.chunks[0][0]);
    let x = b * s * h * 2;
    // Embedding all-reduce + 2 per layer, and 3 fp32 cross-entropy reductions per token.
    assert_eq!(
        w.forward.comms,
        vec![
            cc(AllReduce, GroupKind::Tp, x, 5),
            cc(AllReduce, GroupKind::Tp, 4 * b * s, 3)
        ]
    );
    // Backward: 2 per layer and the head's input gradient.
    assert_eq!(w.backward.comms, vec![cc(AllReduce, GroupKind::Tp, x, 5)]);
    sc.parallel.sequence_parallel = true;
    let w = chunk_work(&sc, &plan, &plan.chunks[0][0]);
    assert_eq!(
        w.forward.comms,
        vec![
            cc(ReduceScatter, GroupKind::Tp, x, 5),
            cc(AllGather, GroupKind::Tp, x, 5),
            cc(AllReduce, GroupKind::Tp, 4 * b * s, 3)
        ]
    );
}

#[test]
fn context_parallel_gathers_k_and_v_each_pass_and_scatters_their_gradients() {
    let (b, s, h, t, c, l) = (1u64, 8192u64, 4096u64, 2u64, 4u64, 3u32);
    let mut sc = gpt(l, h, 32, s, 32000, (t as u32, 1, 1), b, 1);
    sc.model.kv_heads = 8;
    sc.parallel.cp = c as u32;
    sc.cluster.gpus = (t * c) as u32;
    sc.training.recompute = Recompute::Full;
    let plan = plan(&sc);
    let w = layers_work(&sc, &plan, &plan.chunks[0][0], 0, l, false, false);
    let kv = 2 * b * s * (h * 8 / 32) / t * 2;
    let tp = b * s / c * h * 2;
    assert_eq!(
        w.forward.comms,
        vec![
            cc(AllReduce, GroupKind::Tp, tp, 2 * l),
            cc(AllGather, GroupKind::Cp, kv, l)
        ]
    );
    assert_eq!(
        w.backward.comms,
        vec![
            cc(AllReduce, GroupKind::Tp, tp, 2 * l),
            cc(AllGather, GroupKind::Cp, kv, l),
            cc(ReduceScatter, GroupKind::Cp, kv, l)
        ]
    );
    assert_eq!(w.recompute.expect("full").comms, w.forward.comms);
}

/// Ulysses: per layer an all-to-all of this rank's Q, K and V (b*s/c*(h+2kv)/t elements) and
/// one of the output (b*s/c*h/t) each way; no gather. Attention then sees the whole sequence
/// for heads/(t*c) heads.
#[test]
fn ulysses_context_parallel_all_to_alls_qkv_and_the_output() {
    let (b, s, h, t, c, l) = (1u64, 8192u64, 4096u64, 2u64, 4u64, 3u32);
    let mut sc = gpt(l, h, 32, s, 32000, (t as u32, 1, 1), b, 1);
    sc.model.kv_heads = 8;
    sc.parallel.cp = c as u32;
    sc.parallel.cp_algorithm = crate::scenario::CpAlgorithm::Ulysses;
    sc.cluster.gpus = (t * c) as u32;
    sc.training.flash_attention = true;
    let plan = plan(&sc);
    let w = layers_work(&sc, &plan, &plan.chunks[0][0], 0, l, false, false);
    let kv = h * 8 / 32;
    let qkv = b * s / c * (h + 2 * kv) / t * 2;
    let o = b * s / c * h / t * 2;
    let tp = b * s / c * h * 2;
    let want = vec![
        cc(AllReduce, GroupKind::Tp, tp, 2 * l),
        cc(AllToAll, GroupKind::Cp, qkv, l),
        cc(AllToAll, GroupKind::Cp, o, l),
    ];
    assert_eq!(w.forward.comms, want);
    assert_eq!(w.backward.comms, want);
    assert_eq!(w.forward.ring, None);
    let a = w.forward.compute.attention.expect("flash");
    assert_eq!((a.q_len, a.kv_len, a.heads, a.count), (s, s, 32 / 8, l));
}

/// Ring: no collective over cp; cp-1 transfers per pass of every layer's K/V block
/// (2*b*s/c*kv/t elements) forward, and of the blocks with their gradients (twice that)
/// backward; the attention kernel keeps the rank's load-balanced share (s/c queries over s).
#[test]
fn ring_context_parallel_passes_kv_blocks_instead_of_collectives() {
    let (b, s, h, t, c, l) = (2u64, 8192u64, 4096u64, 2u64, 4u64, 3u32);
    let mut sc = gpt(l, h, 32, s, 32000, (t as u32, 1, 1), b, 1);
    sc.model.kv_heads = 8;
    sc.parallel.cp = c as u32;
    sc.parallel.cp_algorithm = crate::scenario::CpAlgorithm::Ring;
    sc.cluster.gpus = (t * c) as u32;
    sc.training.flash_attention = true;
    sc.training.recompute = Recompute::Full;
    let p = plan(&sc);
    let w = layers_work(&sc, &p, &p.chunks[0][0], 0, l, false, false);
    let tp = b * s / c * h * 2;
    assert_eq!(
        w.forward.comms,
        vec![cc(AllReduce, GroupKind::Tp, tp, 2 * l)]
    );
    assert_eq!(w.backward.comms, w.forward.comms);
    let block = 2 * b * (s / c) * (h * 8 / 32) / t * 2;
    assert_eq!(block, 2 * 2 * 2048 * 1024 / 2 * 2);
    let fwd = crate::workload::RingPass {
        steps: 3,
        bytes: u64::from(l) * block,
    };
    let bwd = crate::workload::RingPass {
        steps: 3,
        bytes: 2 * u64::from(l) * block,
    };
    assert_eq!(w.forward.ring, Some(fwd));
    assert_eq!(
        (w.backward.ring, w.backward_input.ring),
        (Some(bwd), Some(bwd))
    );
    assert_eq!(w.recompute.expect("full").ring, Some(fwd));
    let a = w.forward.compute.attention.expect("flash");
    assert_eq!((a.q_len, a.kv_len, a.heads), (s / c, s, 32 / 2));
    // Without context parallelism there is nothing to pass.
    let mut one = sc.clone();
    one.parallel.cp = 1;
    one.cluster.gpus = t as u32;
    let plan1 = plan(&one);
    let w1 = layers_work(&one, &plan1, &plan1.chunks[0][0], 0, l, false, false);
    assert_eq!(w1.forward.ring, None);
}

#[test]
fn expert_parallel_moe_layers_all_to_all_twice_per_direction() {
    let (b, s, h, l) = (2u64, 1024u64, 1024u64, 4u32);
    let mut sc = gpt(l, h, 16, s, 32000, (1, 1, 4), b, 2);
    let ffn_hidden = sc.model.ffn_hidden;
    sc.model.moe = Some(Moe::uniform(8, 2, 2, ffn_hidden));
    sc.parallel.ep = 4;
    let plan = plan(&sc);
    let w = layers_work(&sc, &plan, &plan.chunks[0][0], 0, l, false, false);
    // Two MoE layers (0 and 2), each with dispatch and combine.
    let want = vec![cc(AllToAll, GroupKind::Ep, b * s * 2 * h * 2, 4)];
    assert_eq!(w.forward.comms, want);
    assert_eq!(w.backward.comms, want);
}
