//! The compute of one pass of a segment with the collectives tensor/context/expert
//! parallelism add to it. A pass's collectives follow its compute, except that at layer
//! granularity a backward with tensor parallelism is cut into its input- and weight-gradient
//! halves with the input-gradient reductions beside the second, as Megatron-LM overlaps them
//! (see [`overlaps_tp_backward`]). With `tp_comm_overlap` the pass's tensor-parallel
//! all-gathers and reduce-scatters run beside its compute instead, one chunk of each exposed
//! (see [`emit_tp_overlapped`]). With ring context parallelism the pass's attention kernel
//! is cut into `cp` blocks with the K/V transfers between them (see [`emit_ring`]).

use crate::plan::{GroupKind, Plan};
use crate::scenario::{Granularity, Scenario};
use crate::schedule::builder::Builder;
use crate::schedule::chunks::Seg;
use crate::schedule::emit::StageCtx;
use crate::schedule::{
    Attention, CollectiveKind, ComputeOp, Deps, Label, OpKind, Peer, Phase, ScheduleError, Stream,
};
use crate::workload::{CommCall, RingPass};

/// A pass's ops: its compute (the last op on the compute stream), the end of the collectives
/// the next compute waits for, and the end of the expert all-to-alls left to run beside the
/// next compute (`moe_a2a_overlap`), when there are some.
#[derive(Clone, Copy, Debug)]
pub struct PassOps {
    pub compute: u32,
    pub tail: u32,
    pub deferred: Option<u32>,
}

/// Emits `seg`'s pass `phase` after `deps`. With `defer_a2a` its expert-parallel all-to-alls
/// are not on the critical path of the next compute: they run on the ep stream beside it, as
/// Megatron-Core's combined 1F1B hides one micro batch's dispatch and combine behind another's
/// compute (see `emit_stage`).
pub fn emit_pass(
    ctx: &StageCtx,
    b: &mut Builder,
    seg: &Seg,
    phase: Phase,
    deps: Deps,
    label: Label,
    defer_a2a: bool,
) -> Result<PassOps, ScheduleError> {
    let (op, all, ring) = pass_work(seg, phase)?;
    let split: (Vec<CommCall>, Vec<CommCall>);
    let comms: &[CommCall] = if defer_a2a && all.iter().any(is_expert_a2a) {
        split = all.iter().cloned().partition(is_expert_a2a);
        &split.1
    } else {
        split = (Vec::new(), Vec::new());
        all
    };
    let tp = ctx.plan_group_size(GroupKind::Tp);
    let (compute, tail) = if let Some(pass) = tp_overlapped_pass(ctx.s, tp, phase, &op, comms) {
        emit_tp_overlapped(ctx, b, pass, (ring, comms), deps, label)?
    } else if overlaps_tp_backward(ctx.s, tp, seg, phase) {
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
        (b.compute(weight, [input, gathered], label)?, tail)
    } else {
        let compute = emit_ring(ctx, b, op, ring, deps, label)?;
        (compute, emit_comms(ctx, b, comms, compute, label)?)
    };
    let deferred = emit_comms(ctx, b, &split.0, compute, label)?;
    Ok(PassOps {
        compute,
        tail,
        deferred: (deferred != compute).then_some(deferred),
    })
}

/// An expert-parallel all-to-all (an MoE layer's dispatch or combine).
fn is_expert_a2a(c: &CommCall) -> bool {
    c.group == GroupKind::Ep && c.kind == CollectiveKind::AllToAll
}

/// The collectives of `seg`'s pass `phase` that the next compute on its rank waits for after
/// the pass's own compute, one after another, as [`emit_pass`] chains them, each with the
/// bytes of its chained part: every collective over a group of more than one rank, except
/// what runs beside the compute. That is, under `tp_comm_overlap` all but one chunk of each
/// overlapped collective ([`emit_tp_overlapped`]); at layer granularity the input-gradient
/// reductions of a backward ([`overlaps_tp_backward`]); with `moe_a2a_overlap` the expert
/// all-to-alls (which run beside the next compute where the pass sits next to one of the
/// other direction). For [`crate::schedule::step_lower_bounds`]: the step is at least the
/// sum, on one rank, of its computes and the collectives chained between them.
pub(crate) fn chained_comms(s: &Scenario, plan: &Plan, seg: &Seg, phase: Phase) -> Vec<CommCall> {
    let w = &seg.work;
    let all = match phase {
        Phase::Forward => w.forward.comms.as_slice(),
        Phase::Backward => w.backward.comms.as_slice(),
        Phase::BackwardInput => w.backward_input.comms.as_slice(),
        Phase::Recompute => w.recompute.as_ref().map_or(&[][..], |r| r.comms.as_slice()),
        Phase::BackwardWeight | Phase::Optimizer | Phase::Compress | Phase::Copy => &[],
    };
    let comms: Vec<CommCall> = all
        .iter()
        .filter(|c| !(s.training.moe_a2a_overlap && is_expert_a2a(c)))
        .cloned()
        .collect();
    let tp = plan.group_size(GroupKind::Tp);
    let wide = |c: &CommCall| plan.group_size(c.group) > 1;
    if tp_comm_overlap_sms(s, tp, phase, &comms).is_some() {
        let t = u64::from(tp).max(1);
        comms
            .into_iter()
            .filter_map(|c| {
                if tp_overlapped(&c) {
                    Some(CommCall {
                        bytes: c.bytes / t,
                        ..c
                    })
                } else {
                    wide(&c).then_some(c)
                }
            })
            .collect()
    } else if overlaps_tp_backward(s, tp, seg, phase) {
        comms
            .into_iter()
            .filter(|c| wide(c) && !crate::workload::overlaps_wgrad(c))
            .collect()
    } else {
        comms.into_iter().filter(wide).collect()
    }
}

/// Emits `op` after `deps`; with a ring exchange (`ring`, over a cp group of more than one
/// rank) and a fused attention kernel, as Transformer Engine's `AttnFuncWithCPAndKVP2P` runs
/// it: the op's other work first (the QKV projections make this rank's K/V block), then `cp`
/// attention blocks on the compute stream. Before block `i` (`i < cp-1`) a send of the block
/// held to the next rank of the group and a receive of the next block from the previous one
/// start (on the cp and cp-recv streams, [`Stream::CpRecv`]); block `i+1` waits for that
/// receive. So each
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
            Some(b.push(Stream::CpRecv, recv, [held], label)?)
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
pub(crate) fn ring_blocks(op: &ComputeOp, steps: u32) -> Option<(ComputeOp, ComputeOp, ComputeOp)> {
    let a = op.attention?;
    let gemm_flops = op.gemm_flops();
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
fn overlaps_tp_backward(s: &Scenario, tp: u32, seg: &Seg, phase: Phase) -> bool {
    phase == Phase::Backward
        && s.run.granularity == Granularity::Layer
        && tp > 1
        && crate::workload::backward_comms_overlap_wgrad(&seg.work.backward.comms)
}

/// Whether a tensor-parallel collective is one `tp_comm_overlap` overlaps with its GEMMs.
fn tp_overlapped(c: &CommCall) -> bool {
    c.group == GroupKind::Tp
        && matches!(
            c.kind,
            CollectiveKind::AllGather | CollectiveKind::ReduceScatter
        )
}

/// With `tp_comm_overlap` (and a tp group of more than one rank), the SMs a pass with `comms`
/// gives to its overlapped collectives: the framework's `overlaps.tp_comm_overlap_sms`, which
/// only the reduce-scatters take (Transformer Engine's pipelined and bulk overlaps launch the
/// GEMM on the other SMs; its ring-exchange all-gathers use the copy engines), weighted by
/// their share of the pass's overlapped bytes. `None` when the pass overlaps nothing, or is a
/// backward and the framework overlaps only the forward's (`tp_comm_overlap_backward`).
fn tp_comm_overlap_sms(s: &Scenario, tp: u32, phase: Phase, comms: &[CommCall]) -> Option<u32> {
    let overlaps = &s.training.framework.overlaps;
    let forward = matches!(phase, Phase::Forward | Phase::Recompute);
    if !s.training.tp_comm_overlap || tp <= 1 || !(forward || overlaps.tp_comm_overlap_backward) {
        return None;
    }
    let bytes = |c: &CommCall| c.bytes.saturating_mul(u64::from(c.calls));
    let (mut all, mut scatter) = (0u64, 0u64);
    for c in comms.iter().filter(|c| tp_overlapped(c)) {
        all = all.saturating_add(bytes(c));
        if c.kind == CollectiveKind::ReduceScatter {
            scatter = scatter.saturating_add(bytes(c));
        }
    }
    if all == 0 {
        return None;
    }
    let sms = u64::from(overlaps.tp_comm_overlap_sms);
    // Rounded to the nearest SM.
    let weighted = (sms.saturating_mul(scatter) + all / 2) / all;
    Some(u32::try_from(weighted).unwrap_or(u32::MAX))
}

/// A pass under `tp_comm_overlap` as [`emit_tp_overlapped`] runs it: its compute op, GEMMs
/// cut into `t` chunks (the tp group's size) on the SMs the overlap leaves them, and the part
/// of each overlapped collective that runs beside that compute from the pass's start (all but
/// one chunk). `None` where the pass overlaps nothing ([`tp_comm_overlap_sms`]).
pub(crate) struct TpOverlapped {
    pub op: ComputeOp,
    pub hidden: Vec<CommCall>,
}

/// `op` and `comms` of a pass `phase` run as [`TpOverlapped`] with a tp group of `tp` ranks.
/// The emitter and the step's lower bound ([`crate::schedule::step_lower_bounds`]) both take
/// the pass from here.
pub(crate) fn tp_overlapped_pass(
    s: &Scenario,
    tp: u32,
    phase: Phase,
    op: &ComputeOp,
    comms: &[CommCall],
) -> Option<TpOverlapped> {
    let sms = tp_comm_overlap_sms(s, tp, phase, comms)?;
    let t = u64::from(tp).max(1);
    let op = ComputeOp {
        sms_reserved: sms,
        gemms: chunked_gemms(&op.gemms, t).into(),
        ..op.clone()
    };
    let hidden = comms
        .iter()
        .filter(|c| tp_overlapped(c))
        .map(|c| CommCall {
            bytes: c.bytes - c.bytes / t,
            ..c.clone()
        })
        .collect();
    Some(TpOverlapped { op, hidden })
}

/// A pass whose tensor-parallel all-gathers and reduce-scatters overlap its GEMMs, chunk by
/// chunk, as Transformer Engine's userbuffers and PyTorch's async TP run them: each collective
/// is cut into `t` chunks (one per rank of the tp group: the ring exchange's steps); `t - 1`
/// of them run on the tp stream beside the compute (from the pass's start), and one stays
/// exposed after both (the first chunk of an all-gather before any GEMM has its input, the
/// last of a reduce-scatter after the last GEMM chunk). The compute's GEMMs run on the SMs the
/// overlap leaves them (`sms` reserved, see [`tp_comm_overlap_sms`]). Other collectives (cp,
/// ep) follow as without overlap.
fn emit_tp_overlapped(
    ctx: &StageCtx,
    b: &mut Builder,
    pass: TpOverlapped,
    (ring, comms): (Option<RingPass>, &[CommCall]),
    deps: Deps,
    label: Label,
) -> Result<(u32, u32), ScheduleError> {
    let t = u64::from(ctx.plan_group_size(GroupKind::Tp)).max(1);
    let (overlapped, rest): (Vec<CommCall>, Vec<CommCall>) =
        comms.iter().cloned().partition(tp_overlapped);
    let mut beside = Vec::with_capacity(pass.hidden.len());
    for c in &pass.hidden {
        beside.push(b.collective(c.kind, c.group, c.bytes, c.calls, deps.clone(), label)?);
    }
    let compute = emit_ring(ctx, b, pass.op, ring, deps, label)?;
    let mut tail = compute;
    for (c, &side) in overlapped.iter().zip(&beside) {
        tail = b.collective(
            c.kind,
            c.group,
            c.bytes / t,
            c.calls,
            [compute, side, tail],
            label,
        )?;
    }
    Ok((compute, emit_comms(ctx, b, &rest, tail, label)?))
}

/// The linear layers' GEMMs of an overlapped pass cut into `t` calls along their rows (the
/// tokens: each chunk of the exchange feeds or drains its own GEMM call), so each call pays
/// its fixed time and the efficiency of a `t` times shorter GEMM. Batched GEMMs (the attention
/// core's per-head products) stay whole.
fn chunked_gemms(gemms: &[crate::schedule::Gemm], t: u64) -> Vec<crate::schedule::Gemm> {
    let chunks = u32::try_from(t).unwrap_or(u32::MAX);
    gemms
        .iter()
        .map(|g| {
            if g.batch > 1 || t <= 1 || g.m < t {
                *g
            } else {
                crate::schedule::Gemm {
                    m: g.m / t,
                    count: g.count.saturating_mul(chunks),
                    ..*g
                }
            }
        })
        .collect()
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
        Phase::Optimizer | Phase::Compress | Phase::Copy => {
            return Err(ScheduleError::Unsupported(format!(
                "{} is not a pass of a chunk",
                phase.short()
            )))
        }
    };
    op.0.phase = phase;
    Ok(op)
}
