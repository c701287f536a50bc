//! The compute of one pass of a segment with the collectives tensor/context/expert
//! parallelism add to it. A pass's collectives follow its compute, except that at layer
//! granularity a backward with tensor parallelism is cut into its input- and weight-gradient
//! halves with the input-gradient reductions beside the second, as Megatron-LM overlaps them
//! (see [`overlaps_tp_backward`]).

use crate::plan::GroupKind;
use crate::scenario::Granularity;
use crate::schedule::builder::Builder;
use crate::schedule::chunks::Seg;
use crate::schedule::emit::StageCtx;
use crate::schedule::{ComputeOp, Deps, Label, Phase, ScheduleError};
use crate::workload::CommCall;

/// Emits the compute of `seg`'s pass `phase` after `deps`, then its collectives. Returns the
/// compute op, and the op the next pass must wait for besides it (the last collective, or the
/// compute itself when there is none).
pub fn emit_pass(
    ctx: &StageCtx,
    b: &mut Builder,
    seg: &Seg,
    phase: Phase,
    deps: Deps,
    label: Label,
) -> Result<(u32, u32), ScheduleError> {
    let (op, comms) = pass_work(seg, phase)?;
    if overlaps_tp_backward(ctx, seg, phase) {
        // Megatron: the input-gradient all-reduce runs while the weight-gradient GEMMs do.
        let input = b.compute(pass_work(seg, Phase::BackwardInput)?.0, deps, label)?;
        let (beside, blocking): (Vec<_>, Vec<_>) = comms
            .iter()
            .cloned()
            .partition(crate::workload::overlaps_wgrad);
        let gathered = emit_comms(ctx, b, &blocking, input, label)?;
        let tail = emit_comms(ctx, b, &beside, gathered, label)?;
        let weight = pass_work(seg, Phase::BackwardWeight)?.0;
        Ok((b.compute(weight, [input, gathered], label)?, tail))
    } else {
        let compute = b.compute(op, deps, label)?;
        Ok((compute, emit_comms(ctx, b, comms, compute, label)?))
    }
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

/// The compute op of `seg`'s pass `phase` and the collectives that follow it.
fn pass_work(seg: &Seg, phase: Phase) -> Result<(ComputeOp, &[CommCall]), ScheduleError> {
    let w = &seg.work;
    let mut op = match phase {
        Phase::Forward => (w.forward.compute.clone(), w.forward.comms.as_slice()),
        Phase::Backward => (w.backward.compute.clone(), w.backward.comms.as_slice()),
        Phase::BackwardInput => (
            w.backward_input.compute.clone(),
            w.backward_input.comms.as_slice(),
        ),
        Phase::BackwardWeight => (w.backward_weight.clone(), &[][..]),
        Phase::Recompute => match &w.recompute {
            Some(r) => (r.compute.clone(), r.comms.as_slice()),
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
