//! The compute of one pass of a segment with the collectives tensor/context/expert
//! parallelism add to it. A pass's collectives follow its compute, except that at layer
//! granularity a backward with tensor parallelism is cut into its input- and weight-gradient
//! halves with the input-gradient reductions beside the second, as Megatron-LM overlaps them
//! (see [`overlaps_tp_backward`]). With ring context parallelism the pass's attention kernel
//! is cut into `cp` blocks with the K/V transfers between them (see [`emit_ring`]).

use crate::plan::GroupKind;
use crate::scenario::Granularity;
use crate::schedule::builder::Builder;
use crate::schedule::chunks::Seg;
use crate::schedule::emit::StageCtx;
use crate::schedule::{
    Attention, ComputeOp, Deps, Label, OpKind, Peer, Phase, ScheduleError, Stream,
};
use crate::workload::{CommCall, RingPass};

pub fn emit_pass(
    ctx: &StageCtx,
    b: &mut Builder,
    seg: &Seg,
    phase: Phase,
    deps: Deps,
    label: Label,
) -> Result<(u32, u32), ScheduleError> {
    let (op, comms, ring) = pass_work(seg, phase)?;
    if overlaps_tp_backward(ctx, seg, phase) {
        // Megatron: the input-gradient all-reduce runs while the weight-gradient GEMMs do.
        let (input_op, _, input_ring) = pass_work(seg, Phase::BackwardInput)?;
        let input = emit_ring(ctx, b, input_op, input_ring, deps, label)?;
        let (beside, blocking): (Vec<_>, Vec<_>) = comms
            .iter()
            .cloned()
            .partition(crate::workload::overlaps_wgrad);
        let gathered = emit_comms(ctx, b, &blocking, input, label)?;
        let tail = emit_comms(ctx, b, &beside, gathered, label)?;
        let weight = pass_work(seg, Phase::BackwardWeight)?.0;
        Ok((b.compute(weight, [input, gathered], label)?, tail))
    } else {
        let compute = emit_ring(ctx, b, op, ring, deps, label)?;
        Ok((compute, emit_comms(ctx, b, comms, compute, label)?))
    }
}

/// Emits `op` after `deps`; with a ring exchange (`ring`, over a cp group of more than one
/// rank) and a fused attention kernel, as Transformer Engine's `AttnFuncWithCPAndKVP2P` runs
/// it: the op's other work first (the QKV projections make this rank's K/V block), then `cp`
/// attention blocks on the compute stream. Before block `i` (`i < cp-1`) a send of the block
/// held to the next rank of the group and a receive of the next block from the previous one
/// start (cp and pp-recv streams: with rendezvous sends, a send and a receive on one stream
/// would wait for each other around the ring); block `i+1` waits for that receive. So each
/// transfer hides behind one block's compute and only what it takes longer shows. Block 0
/// is the causal diagonal of this rank's two load-balanced chunks, the other `cp-1` blocks
/// are unmasked (all queries against one chunk of keys, or half the queries against both), see
/// [`ring_blocks`]. All layers of the op are folded into each block and each transfer. Returns
/// the last block (or the op).
fn emit_ring(
    ctx: &StageCtx,
    b: &mut Builder,
    op: ComputeOp,
    ring: Option<RingPass>,
    deps: Deps,
    label: Label,
) -> Result<u32, ScheduleError> {
    let blocks = match ring {
        Some(r) if r.steps > 0 && ctx.plan_group_size(GroupKind::Cp) > 1 => {
            ring_blocks(&op, r.steps).map(|blocks| (r, blocks))
        }
        _ => None,
    };
    let Some((r, (rest, first, other))) = blocks else {
        return b.compute(op, deps, label);
    };
    let mut last = b.compute(rest, deps, label)?;
    let mut held = last;
    let mut received: Option<u32> = None;
    for i in 0..=r.steps {
        let next = if i < r.steps {
            let tag = b.ring_tag()?;
            let send = OpKind::Send {
                peer: Peer::CpNext,
                bytes: r.bytes,
                tag,
            };
            let recv = OpKind::Recv {
                peer: Peer::CpPrev,
                bytes: r.bytes,
                tag,
            };
            b.push(Stream::Cp, send, [held], label)?;
            Some(b.push(Stream::PpRecv, recv, [held], label)?)
        } else {
            None
        };
        let block = if i == 0 { first.clone() } else { other.clone() };
        let mut block_deps = Deps::from([last]);
        if let Some(rx) = received {
            block_deps = Deps::from([last, rx]);
        }
        last = b.compute(block, block_deps, label)?;
        if let Some(rx) = next {
            held = rx;
            received = Some(rx);
        }
    }
    Ok(last)
}

/// `op` cut for ring attention over `steps + 1` blocks: the op without its attention kernel,
/// the first block and each other block. With a causal mask and this rank's load-balanced
/// chunks (`q_len = 2L` queries, chunks of `L`), the first block is causal over the `2L`
/// local keys and every other block is `2L x L` unmasked pairs, the same for every rank at
/// every step (Transformer Engine: the rank's whole Q against the first half of a lower rank's
/// K/V, or the second half of Q against all of a higher rank's); together exactly the pairs of
/// the unsplit kernel when `q_len` is even. Unmasked, each block is `q_len x kv_len/(steps+1)`.
/// The op's Megatron FLOPs beyond its GEMMs are shared evenly (the first block takes the
/// remainder) and its attention launches are charged per block. `None` without an attention
/// kernel.
fn ring_blocks(op: &ComputeOp, steps: u32) -> Option<(ComputeOp, ComputeOp, ComputeOp)> {
    let a = op.attention?;
    let gemm_flops = op
        .gemms
        .iter()
        .fold(0u64, |acc, g| acc.saturating_add(g.flops()));
    let attention_flops = op.flops.saturating_sub(gemm_flops);
    let per_block = attention_flops / (u64::from(steps) + 1);
    let (first, other) = if a.causal {
        (
            Attention {
                kv_len: a.q_len,
                ..a
            },
            Attention {
                kv_len: a.q_len / 2,
                causal: false,
                ..a
            },
        )
    } else {
        let kv = a.kv_len / (u64::from(steps) + 1);
        (Attention { kv_len: kv, ..a }, Attention { kv_len: kv, ..a })
    };
    let rest = ComputeOp {
        attention: None,
        flops: gemm_flops,
        kernels: op.kernels.saturating_sub(a.count),
        ..op.clone()
    };
    let block = |attention: Attention, flops: u64| ComputeOp {
        attention: Some(attention),
        gemms: Vec::new().into(),
        flops,
        memory_bytes: 0,
        kernels: a.count,
        ..op.clone()
    };
    let first_flops = attention_flops.saturating_sub(per_block.saturating_mul(u64::from(steps)));
    Some((rest, block(first, first_flops), block(other, per_block)))
}

/// Whether the backward of `seg` is emitted as Megatron-LM runs it: the input-gradient half
/// first, its backward all-gathers on the critical path, then the reductions of its input
/// gradients on the tp stream while the weight-gradient half runs on the compute stream
/// (Megatron's asynchronous tensor-parallel communication: a column-parallel layer's backward
/// launches the all-reduce or reduce-scatter of its input gradient, computes its weight
/// gradient, then waits; see [`crate::workload::overlaps_wgrad`]). The next pass waits for
/// both, as the layer's backward returns only then. Done for layer granularity (one layer per
/// op, as Megatron overlaps per layer), for a full backward (zero-bubble's B already carries
/// the collectives and its W runs later), and only when every collective of the backward is a
/// tensor-parallel one (context- and expert-parallel exchanges sit inside the backward and stay
/// on the critical path).
fn overlaps_tp_backward(ctx: &StageCtx, seg: &Seg, phase: Phase) -> bool {
    phase == Phase::Backward
        && ctx.s.run.granularity == Granularity::Layer
        && ctx.plan_group_size(GroupKind::Tp) > 1
        && crate::workload::backward_comms_overlap_wgrad(&seg.work.backward.comms)
}

/// Emits `comms` (those over groups of more than one rank) one after another after `after`;
/// returns the last one, or `after` when none was emitted.
fn emit_comms(
    ctx: &StageCtx,
    b: &mut Builder,
    comms: &[CommCall],
    after: u32,
    label: Label,
) -> Result<u32, ScheduleError> {
    let mut tail = after;
    for call in comms {
        if ctx.plan_group_size(call.group) <= 1 {
            continue;
        }
        tail = b.collective(
            call.kind,
            call.group,
            call.bytes,
            call.calls,
            [after, tail],
            label,
        )?;
    }
    Ok(tail)
}

/// The compute op of `seg`'s pass `phase`, the collectives that follow it and its ring
/// exchange.
type PassParts<'a> = (ComputeOp, &'a [CommCall], Option<RingPass>);

fn pass_work(seg: &Seg, phase: Phase) -> Result<PassParts<'_>, ScheduleError> {
    let w = &seg.work;
    let mut op = match phase {
        Phase::Forward => (
            w.forward.compute.clone(),
            w.forward.comms.as_slice(),
            w.forward.ring,
        ),
        Phase::Backward => (
            w.backward.compute.clone(),
            w.backward.comms.as_slice(),
            w.backward.ring,
        ),
        Phase::BackwardInput => (
            w.backward_input.compute.clone(),
            w.backward_input.comms.as_slice(),
            w.backward_input.ring,
        ),
        Phase::BackwardWeight => (w.backward_weight.clone(), &[][..], None),
        Phase::Recompute => match &w.recompute {
            Some(r) => (r.compute.clone(), r.comms.as_slice(), r.ring),
            None => {
                return Err(ScheduleError::Unsupported(
                    "recompute step without recompute work".into(),
                ))
            }
        },
        Phase::Optimizer | Phase::Compress => {
            return Err(ScheduleError::Unsupported(format!(
                "{} is not a pass of a chunk",
                phase.short()
            )))
        }
    };
    op.0.phase = phase;
    Ok(op)
}
