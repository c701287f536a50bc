//! Turns one stage's pass order into its program: for every pass the pipeline receive, the
//! compute op(s) with the collectives tensor/context/expert parallelism add, the pipeline send,
//! the memory they hold, and around them the data-parallel traffic that [`crate::schedule::dp`]
//! decides. The data-parallel ops themselves are emitted by [`crate::schedule::dp_emit`].
//! A pass's collectives follow its compute, except that at layer granularity a backward with
//! tensor parallelism is cut into its input- and weight-gradient halves with the input-gradient
//! reductions beside the second, as Megatron-LM overlaps them (see `overlaps_tp_backward`).
//!
//! Memory, per rank: weights, gradients and optimizer state are allocated at the start and
//! freed at the end. Each forward segment allocates its saved activations right before its
//! compute; they are freed right after the pass that last needs them: the backward, or, under
//! zero-bubble, the weight-gradient pass W (W reads the saved inputs). With recompute, the
//! saved bytes are what the workload says survives the forward, and a recompute allocates the
//! activations it re-creates (one layer's worth, `recompute_bytes`) from its start until the
//! backward (B under zero-bubble) after it has finished. The framework reserve (category
//! reserved) is held for the whole step like the model state. Under DeepSpeed accounting the
//! host memory that building the model needs is allocated and freed first, before the state. A received activation
//! or gradient lives in a Buffers allocation from the moment its receive is posted until the
//! compute that consumes it has finished; a sent one from just before the compute that
//! produces it until its send has finished. Receives are posted in consumption order on the
//! pp-recv stream, with no other dependency, so a transfer overlaps whatever the stage computes
//! meanwhile; sends go in production order on the pp-send stream.

use crate::plan::{GroupKind, Plan};
use crate::scenario::{Granularity, PipelineSchedule, Scenario};
use crate::schedule::builder::{AllocTag, Builder};
use crate::schedule::chunks::{ChunkPlan, Seg};
use crate::schedule::dp::{DpPolicy, Zero};
use crate::schedule::dp_emit::{DpEmitter, Gather};
use crate::schedule::pipeline::{Pass, Slot};
use crate::schedule::sizes::Sizes;
use crate::schedule::{ComputeOp, Deps, Device, Label, MemCategory, OpKind, Peer, Phase, Program};
use crate::schedule::{ScheduleError, Stream};
use std::collections::BTreeMap;

/// Everything one stage's emission reads.
pub struct StageCtx<'a> {
    pub s: &'a Scenario,
    pub plan: &'a Plan,
    pub sizes: &'a dyn Sizes,
    pub dp: &'a DpPolicy,
    /// `chunks[stage][chunk]` for every stage (boundary sizes of neighbours are needed).
    pub chunks: &'a [Vec<ChunkPlan>],
    /// The finalising backward of each chunk is cut into buckets with overlapped reduction.
    pub overlap_buckets: bool,
}

/// One compute op of the stage, before it is emitted.
#[derive(Clone, Copy, Debug)]
struct Step {
    slot: usize,
    phase: Phase,
    seg: usize,
    /// Uses the chunk's bucket cut (the pass that finalises its gradients).
    finalising: bool,
    /// ZeRO-3 parameter gather this step uses, and whether it is the first step to use it.
    gather: Option<usize>,
    new_gather: bool,
}

/// Direction bit of a pipeline tag.
const FWD: u64 = 0;
const BWD: u64 = 1;

/// Tag of the transfer over boundary `b` (between virtual stages b and b+1) of micro batch
/// `mb` in direction `dir`; unique per (sender, receiver) pair within a step.
fn p2p_tag(mb: u32, boundary: u32, boundaries: u32, dir: u64) -> u32 {
    let t = (u64::from(mb) * u64::from(boundaries) + u64::from(boundary)) * 2 + dir;
    // generate() checks the largest tag fits before emitting anything.
    t.min(u64::from(u32::MAX)) as u32
}

/// Check that every pipeline tag of the step fits in a u32.
pub fn check_tags(m: u32, pp: u32, vpp: u32) -> Result<(), ScheduleError> {
    let boundaries = u64::from(pp) * u64::from(vpp);
    let max = u64::from(m).saturating_mul(boundaries).saturating_mul(2);
    if max > u64::from(u32::MAX) {
        return Err(ScheduleError::TooLarge(format!(
            "{m} micro batches x {boundaries} pipeline boundaries do not fit in 32-bit tags"
        )));
    }
    Ok(())
}

fn label(mb: Option<u32>, chunk: u32, first_layer: u32, num_layers: u32) -> Label {
    Label {
        microbatch: mb,
        chunk,
        first_layer,
        num_layers,
    }
}

/// Emit the program of `stage` for the pass order `order`.
pub fn emit_stage(ctx: &StageCtx, stage: u32, order: &[Slot]) -> Result<Program, ScheduleError> {
    let zb = ctx.s.parallel.schedule == PipelineSchedule::ZeroBubble;
    let my_chunks = ctx
        .chunks
        .get(stage as usize)
        .ok_or_else(|| ScheduleError::Unsupported(format!("stage {stage} has no layout")))?;
    let chunk_of = |c: u32| -> Result<&ChunkPlan, ScheduleError> {
        my_chunks
            .get(c as usize)
            .ok_or_else(|| ScheduleError::Unsupported(format!("stage {stage} has no chunk {c}")))
    };
    let grad_pass = if zb { Pass::Weight } else { Pass::Backward };
    // The slot that finalises each chunk's gradients: its last backward (W under ZB).
    let mut final_slot: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, slot) in order.iter().enumerate() {
        if slot.pass == grad_pass {
            final_slot.insert(slot.chunk, i);
        }
    }
    let steps = flatten(ctx, order, &final_slot, zb, &chunk_of)?;

    let mut b = Builder::with_slack(
        ctx.s.memory.allocator_slack_fraction,
        crate::workload::host_slack_fraction(ctx.s),
    );
    // The per-step allowance the work estimate bounds programs with (`estimate`).
    let reserve = super::estimate::ops_for_steps(steps.len() as u64);
    b.reserve(usize::try_from(reserve).unwrap_or(usize::MAX));
    let mut dp = DpEmitter::new(ctx, stage, &steps_gathers(&steps, order, &chunk_of)?);
    let state = ctx.sizes.state_bytes(stage);
    // Building the model on the host (DeepSpeed accounting): done before the state exists.
    let init = b.alloc(
        Stream::Compute,
        MemCategory::Weights,
        Device::Host,
        state.host_init_bytes,
        Deps::new(),
        Label::default(),
    )?;
    b.free(Stream::Compute, init, Deps::new(), Label::default())?;
    let mut state_tags = Vec::new();
    for (cat, dev, bytes) in [
        (
            MemCategory::Reserved,
            Device::Gpu,
            ctx.s.memory.reserved_bytes,
        ),
        (MemCategory::Weights, Device::Gpu, state.weights_bytes),
        (MemCategory::Grads, Device::Gpu, state.grads_bytes),
        (MemCategory::Optimizer, Device::Gpu, state.optimizer_bytes),
        (MemCategory::Optimizer, Device::Host, state.host_bytes),
    ] {
        state_tags.push(b.alloc(
            Stream::Compute,
            cat,
            dev,
            bytes,
            Deps::new(),
            Label::default(),
        )?);
    }
    dp.start(&mut b, my_chunks)?;

    let pp = ctx.plan.pp();
    let vpp = ctx.plan.vpp();
    let last_vs = pp * vpp - 1;
    let boundaries = last_vs.max(1);
    let mut pending_comms: Vec<u32> = Vec::new();
    let mut acts: BTreeMap<(u32, u32), Vec<Option<AllocTag>>> = BTreeMap::new();
    let mut recv: Option<(u32, Option<AllocTag>)> = None;
    let mut send_buf: Option<AllocTag> = None;
    let mut recompute_buf: Option<AllocTag> = None;
    let mut last_grad_op: Option<u32> = None;

    for (i, step) in steps.iter().enumerate() {
        let slot = order
            .get(step.slot)
            .copied()
            .ok_or_else(|| ScheduleError::Unsupported("step outside the order".into()))?;
        let first_of_slot = i == 0 || steps.get(i - 1).map(|p| p.slot) != Some(step.slot);
        let last_of_slot = steps.get(i + 1).map(|n| n.slot) != Some(step.slot);
        let cp = chunk_of(slot.chunk)?;
        let segs = cp.segs_for(step.finalising);
        let seg = segs
            .get(step.seg)
            .ok_or_else(|| ScheduleError::Unsupported("segment out of range".into()))?;
        let vs = cp.layout.virtual_stage;
        let mb = slot.microbatch;
        let chunk_label = label(
            Some(mb),
            slot.chunk,
            cp.layout.first_layer,
            cp.layout.num_layers,
        );
        let seg_label = label(Some(mb), slot.chunk, seg.first_layer, seg.num_layers);

        // Pipeline receive: activation from the previous virtual stage, or gradient from
        // the next one.
        if first_of_slot && pp > 1 {
            let incoming = match slot.pass {
                Pass::Forward if vs > 0 => Some((
                    Peer::PpPrev,
                    p2p_tag(mb, vs - 1, boundaries, FWD),
                    boundary_bytes(ctx, vs - 1),
                )),
                Pass::Backward if vs < last_vs => Some((
                    Peer::PpNext,
                    p2p_tag(mb, vs, boundaries, BWD),
                    cp.boundary_bytes,
                )),
                _ => None,
            };
            if let Some((peer, tag, bytes)) = incoming {
                let buf = b.alloc(
                    Stream::PpRecv,
                    MemCategory::Buffers,
                    Device::Gpu,
                    bytes,
                    Deps::new(),
                    chunk_label,
                )?;
                let op = b.push(
                    Stream::PpRecv,
                    OpKind::Recv { peer, bytes, tag },
                    Deps::new(),
                    chunk_label,
                )?;
                recv = Some((op, buf));
            }
        }

        let gathered_deps = dp.before_compute(&mut b, step.gather, step.new_gather, slot)?;
        let consumes_recv = step.phase != Phase::Recompute && step.phase != Phase::BackwardWeight;
        let mut deps: Deps = pending_comms.drain(..).collect();
        deps.extend(gathered_deps);
        let mut consumed = None;
        if consumes_recv {
            if let Some((op, buf)) = recv.take() {
                deps.push(op);
                consumed = Some(buf);
            }
        }
        let sends = pp > 1
            && match slot.pass {
                Pass::Forward => vs < last_vs,
                Pass::Backward => vs > 0,
                Pass::Weight => false,
            };
        if last_of_slot && sends {
            let bytes = match slot.pass {
                Pass::Forward => cp.boundary_bytes,
                _ => boundary_bytes(ctx, vs.saturating_sub(1)),
            };
            send_buf = b.alloc(
                Stream::Compute,
                MemCategory::Buffers,
                Device::Gpu,
                bytes,
                Deps::new(),
                chunk_label,
            )?;
        }
        if step.phase == Phase::Forward {
            let tag = b.alloc(
                Stream::Compute,
                MemCategory::Activations,
                Device::Gpu,
                seg.work.activation_bytes,
                Deps::new(),
                seg_label,
            )?;
            acts.entry((mb, slot.chunk)).or_default().push(tag);
        }
        let makes_grads = step.phase == Phase::Backward || step.phase == Phase::BackwardWeight;
        let grad_buf = if makes_grads {
            dp.grad_buffer(&mut b, seg, seg_label)?
        } else {
            None
        };

        if step.phase == Phase::Recompute {
            let stale = recompute_buf.take();
            b.free(Stream::Compute, stale, Deps::new(), seg_label)?;
            recompute_buf = b.alloc(
                Stream::Compute,
                MemCategory::Activations,
                Device::Gpu,
                seg.work.recompute_bytes,
                Deps::new(),
                seg_label,
            )?;
        }

        let (op, comms) = pass_work(seg, step.phase)?;
        let (compute, tail) = if overlaps_tp_backward(ctx, seg, step.phase) {
            // Megatron: the input-gradient all-reduce runs while the weight-gradient GEMMs do.
            let input = b.compute(pass_work(seg, Phase::BackwardInput)?.0, deps, seg_label)?;
            let (beside, blocking): (Vec<_>, Vec<_>) = comms
                .iter()
                .cloned()
                .partition(crate::workload::overlaps_wgrad);
            let gathered = emit_comms(ctx, &mut b, &blocking, input, seg_label)?;
            let tail = emit_comms(ctx, &mut b, &beside, gathered, seg_label)?;
            let weight = pass_work(seg, Phase::BackwardWeight)?.0;
            (b.compute(weight, [input, gathered], seg_label)?, tail)
        } else {
            let compute = b.compute(op, deps, seg_label)?;
            (compute, emit_comms(ctx, &mut b, comms, compute, seg_label)?)
        };
        if matches!(step.phase, Phase::Backward | Phase::BackwardInput) {
            b.free(Stream::Compute, recompute_buf.take(), [compute], seg_label)?;
        }
        if tail != compute {
            pending_comms.push(tail);
        }
        let last_user =
            step.gather.is_some() && steps.get(i + 1).map(|n| n.gather) != Some(step.gather);
        dp.after_compute(&mut b, step.gather, compute, last_user)?;
        if let Some(buf) = consumed {
            b.free(Stream::Compute, buf, [compute], chunk_label)?;
        }
        if makes_grads {
            last_grad_op = Some(compute);
            dp.per_pass_grads(&mut b, seg, compute, grad_buf, seg_label)?;
            if step.finalising && ctx.overlap_buckets {
                let pos = segs.len() - 1 - step.seg;
                let ends = ChunkPlan::bucket_ends_backward(segs, ctx.dp.bucket_bytes);
                if let Some(k) = ends.iter().position(|&e| e == pos + 1) {
                    let lo = k
                        .checked_sub(1)
                        .and_then(|j| ends.get(j))
                        .copied()
                        .unwrap_or(0);
                    if let Some(bucket) = segs.get(segs.len() - (pos + 1)..segs.len() - lo) {
                        dp.bucket(&mut b, bucket, slot.chunk, compute)?;
                    }
                }
            }
        }
        // Activations: freed after the pass that last reads them.
        let frees_acts = (zb && slot.pass == Pass::Weight) || (!zb && slot.pass == Pass::Backward);
        if frees_acts && (step.phase == Phase::Backward || step.phase == Phase::BackwardWeight) {
            let same_cut = !step.finalising || cp.final_segs.is_none();
            if same_cut {
                let tag = acts
                    .get_mut(&(mb, slot.chunk))
                    .and_then(|v| v.get_mut(step.seg))
                    .and_then(Option::take);
                b.free(Stream::Compute, tag, [compute], seg_label)?;
            } else if last_of_slot {
                for tag in acts.remove(&(mb, slot.chunk)).unwrap_or_default() {
                    b.free(Stream::Compute, tag, [compute], chunk_label)?;
                }
            }
        }
        if last_of_slot && sends {
            let (peer, tag, bytes) = match slot.pass {
                Pass::Forward => (
                    Peer::PpNext,
                    p2p_tag(mb, vs, boundaries, FWD),
                    cp.boundary_bytes,
                ),
                _ => (
                    Peer::PpPrev,
                    p2p_tag(mb, vs - 1, boundaries, BWD),
                    boundary_bytes(ctx, vs - 1),
                ),
            };
            let send = b.push(
                Stream::PpSend,
                OpKind::Send { peer, bytes, tag },
                [compute, tail],
                chunk_label,
            )?;
            b.free(Stream::PpSend, send_buf.take(), [send], chunk_label)?;
        }
    }
    b.free(
        Stream::Compute,
        recompute_buf.take(),
        Deps::new(),
        Label::default(),
    )?;
    dp.finish(&mut b, my_chunks, last_grad_op)?;
    let tails = b.tails();
    for tag in dp.step_buffers().into_iter().chain(state_tags).rev() {
        b.free(Stream::Compute, tag, tails.clone(), Label::default())?;
    }
    Ok(b.finish(stage))
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
    comms: &[crate::workload::CommCall],
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

/// Boundary bytes of the output of virtual stage `v`.
fn boundary_bytes(ctx: &StageCtx, v: u32) -> u64 {
    let pp = ctx.plan.pp().max(1);
    ctx.chunks
        .get((v % pp) as usize)
        .and_then(|row| row.get((v / pp) as usize))
        .map(|c| c.boundary_bytes)
        .unwrap_or(0)
}

fn pass_work(
    seg: &Seg,
    phase: Phase,
) -> Result<(ComputeOp, &[crate::workload::CommCall]), ScheduleError> {
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

/// The stage's compute steps in order, with the ZeRO-3 gather each one uses.
fn flatten<'c>(
    ctx: &StageCtx,
    order: &[Slot],
    final_slot: &BTreeMap<u32, usize>,
    zb: bool,
    chunk_of: &dyn Fn(u32) -> Result<&'c ChunkPlan, ScheduleError>,
) -> Result<Vec<Step>, ScheduleError> {
    let gathers = ctx.dp.zero == Zero::ShardedParams && ctx.dp.reduces();
    let mut steps = Vec::new();
    let mut next_gather = 0usize;
    let mut push = |steps: &mut Vec<Step>, slot, phase, seg, finalising, needs_params: bool| {
        let (gather, new_gather) = if !gathers {
            (None, false)
        } else if needs_params {
            next_gather += 1;
            (Some(next_gather - 1), true)
        } else if phase == Phase::BackwardWeight {
            (None, false)
        } else {
            // A backward after its recompute shares the recompute's gather.
            (next_gather.checked_sub(1), false)
        };
        steps.push(Step {
            slot,
            phase,
            seg,
            finalising,
            gather,
            new_gather,
        });
    };
    for (i, slot) in order.iter().enumerate() {
        let cp = chunk_of(slot.chunk)?;
        let finalising = ctx.overlap_buckets && final_slot.get(&slot.chunk) == Some(&i);
        match slot.pass {
            Pass::Forward => {
                for seg in 0..cp.segs.len() {
                    push(&mut steps, i, Phase::Forward, seg, false, true);
                }
            }
            Pass::Backward => {
                let fin = finalising && !zb;
                let segs = cp.segs_for(fin);
                let phase = if zb {
                    Phase::BackwardInput
                } else {
                    Phase::Backward
                };
                for seg in (0..segs.len()).rev() {
                    let rc = segs[seg].work.recompute.is_some();
                    if rc {
                        push(&mut steps, i, Phase::Recompute, seg, fin, true);
                    }
                    push(&mut steps, i, phase, seg, fin, !rc);
                }
            }
            Pass::Weight => {
                let segs = cp.segs_for(finalising);
                for seg in (0..segs.len()).rev() {
                    push(&mut steps, i, Phase::BackwardWeight, seg, finalising, false);
                }
            }
        }
    }
    Ok(steps)
}

/// Each ZeRO-3 gather, in gather order.
fn steps_gathers<'c>(
    steps: &[Step],
    order: &[Slot],
    chunk_of: &dyn Fn(u32) -> Result<&'c ChunkPlan, ScheduleError>,
) -> Result<Vec<Gather>, ScheduleError> {
    let mut out = Vec::new();
    for st in steps.iter().filter(|s| s.new_gather) {
        let slot = order
            .get(st.slot)
            .ok_or_else(|| ScheduleError::Unsupported("step outside the order".into()))?;
        let seg = chunk_of(slot.chunk)?
            .segs_for(st.finalising)
            .get(st.seg)
            .ok_or_else(|| ScheduleError::Unsupported("segment out of range".into()))?;
        out.push(Gather {
            params: seg.params,
            largest_module_params: seg.work.largest_module_params,
            label: label(None, slot.chunk, seg.first_layer, seg.num_layers),
        });
    }
    Ok(out)
}

impl StageCtx<'_> {
    /// Members of any group of `kind` (all groups of a kind have the same size).
    pub fn plan_group_size(&self, kind: crate::plan::GroupKind) -> u32 {
        use crate::plan::GroupKind as G;
        let z = self.plan.sizes;
        match kind {
            G::Tp => z.tp,
            G::Cp => z.cp,
            G::Ep => z.ep,
            G::Dp => z.dp,
            G::DenseDp => z.dp.saturating_mul(z.ep).saturating_mul(z.cp),
            G::ExpertDp => z.dp.saturating_mul(z.cp),
            G::Pp => z.pp,
            G::World => self.plan.world,
        }
    }
}

#[cfg(test)]
#[path = "emit_tests.rs"]
mod tests;
