//! Turns one stage's pass order into its program. [`emit_stage`] walks the stage's compute
//! steps ([`steps`]) and, for each, asks every concern for its ops in program order: the
//! pipeline receive and send ([`p2p`]), the ZeRO-3 parameter gathers ([`zero`]), the saved
//! activations and recompute buffers ([`memory`]), the compute with its tensor/context/expert
//! collectives ([`compute`]) and the data-parallel gradient buckets and optimizer ([`dp`]).
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
//! produces it until its send has finished. Without `overlap_p2p_comm` a receive is posted
//! after the pass before it, and a pass waits for the send of the pass before it ([`p2p`]).
//!
//! With `moe_a2a_overlap` (Megatron-Core's combined 1F1B) a pass of the steady phase (a
//! forward beside a backward, [`beside_opposite`]) leaves its expert all-to-alls to run beside
//! the next pass, which belongs to another micro batch: beside every compute of it, its
//! recompute included; the pass after that waits for them, and the pass's send waits for them
//! too. The pipeline order has one more warm-up forward so
//! that the two never belong to the same micro batch ([`crate::schedule::pipeline::stage_order`]).
//!
//! DualPipe moves some transfers ([`crate::schedule::pipeline::Link`]): a pass may leave its
//! send for after the next pass, which then does not wait for it, and a pass may receive a
//! later pass's input before it runs and wait for it, as DualPipe receives and sends in
//! batches before each compute.

mod compute;
mod dp;
mod memory;
mod p2p;
mod steps;
mod zero;

pub(crate) use compute::{chained_comms, ring_blocks, tp_overlapped_pass};
pub(crate) use dp::{bucket_completed, StepBuffers};
pub use p2p::check_tags;
pub(crate) use steps::flatten;
pub(crate) use zero::steps_gathers;

use crate::plan::Plan;
use crate::scenario::Scenario;
use crate::schedule::builder::Builder;
use crate::schedule::chunks::ChunkPlan;
use crate::schedule::dp::DpPolicy;
use crate::schedule::pipeline::Slot;
use crate::schedule::sizes::Sizes;
use crate::schedule::{Deps, Label, Phase, Program, ScheduleError, Stream};
use dp::DpEmitter;
use memory::Activations;
use p2p::Pipe;

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
    let my_chunks = ctx
        .chunks
        .get(stage as usize)
        .ok_or_else(|| ScheduleError::Unsupported(format!("stage {stage} has no layout")))?;
    let chunk_of = |c: u32| -> Result<&ChunkPlan, ScheduleError> {
        my_chunks
            .get(c as usize)
            .ok_or_else(|| ScheduleError::Unsupported(format!("stage {stage} has no chunk {c}")))
    };
    let steps = steps::flatten(ctx, order, &chunk_of)?;
    let last_gather_users = zero::last_gather_users(&steps);

    let mut b = Builder::with_slack(
        ctx.s.memory.allocator_slack_fraction,
        crate::workload::host_slack_fraction(ctx.s),
    );
    // The per-step allowance the work estimate bounds programs with (`estimate`).
    let reserve = super::estimate::ops_for_steps(steps.len() as u64);
    b.reserve(usize::try_from(reserve).unwrap_or(usize::MAX));
    let mut dp = DpEmitter::new(ctx, stage, &zero::steps_gathers(&steps, order, &chunk_of)?);
    let state_tags = memory::alloc_state(ctx, &mut b, stage)?;
    dp.start(&mut b, my_chunks)?;

    let mut pipe = Pipe::new(ctx);
    let mut acts = Activations::default();
    let mut pending_comms: Vec<u32> = Vec::new();
    // `moe_a2a_overlap`: the expert all-to-alls this pass leaves for later, and those the pass
    // before left, which run beside this one (every step of it, a recompute included).
    let mut deferred_comms: Vec<u32> = Vec::new();
    let mut beside_comms: Vec<u32> = Vec::new();
    // The micro batch of each chunk's first gradient pass.
    let mut first_grads: Vec<Option<u32>> = vec![None; my_chunks.len()];
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
        let mb = slot.microbatch;
        let key = (mb, slot.chunk);
        let chunk_label = label(
            Some(mb),
            slot.chunk,
            cp.layout.first_layer,
            cp.layout.num_layers,
        );
        let seg_label = label(Some(mb), slot.chunk, seg.first_layer, seg.num_layers);

        if first_of_slot {
            pipe.receive(ctx, &mut b, (step.slot, slot), cp, chunk_label)?;
        }
        let gathered_deps = dp.before_compute(&mut b, step.gather, step.new_gather, slot)?;
        let consumes_recv = step.phase != Phase::Recompute && step.phase != Phase::BackwardWeight;
        if first_of_slot {
            // The all-to-alls that ran beside the pass before: this pass waits for them. This
            // pass runs beside those the pass before left.
            pending_comms.append(&mut beside_comms);
            beside_comms = std::mem::take(&mut deferred_comms);
        }
        let mut deps: Deps = pending_comms.drain(..).collect();
        deps.extend(gathered_deps);
        // A pass after one that sends after it runs before that send; the pass after it
        // waits for both.
        let after_paired = step.slot > 0
            && order
                .get(step.slot - 1)
                .is_some_and(|prev| prev.link.send_after_next);
        if first_of_slot && !after_paired {
            deps.extend(pipe.take_unwaited_sends());
        }
        if let (true, Some(ahead)) = (first_of_slot, slot.link.receive_ahead) {
            let index = step.slot + ahead as usize;
            if let Some(later) = order.get(index).copied() {
                let later_cp = chunk_of(later.chunk)?;
                let later_label = label(
                    Some(later.microbatch),
                    later.chunk,
                    later_cp.layout.first_layer,
                    later_cp.layout.num_layers,
                );
                deps.extend(pipe.receive_ahead(
                    ctx,
                    &mut b,
                    (index, later),
                    later_cp,
                    later_label,
                )?);
            }
        }
        let mut consumed = None;
        if consumes_recv {
            if let Some((op, buf)) = pipe.take_received() {
                deps.push(op);
                consumed = Some(buf);
            }
        }
        let sends = last_of_slot && pipe.sends(slot, cp);
        if sends {
            pipe.reserve_send(ctx, &mut b, slot, cp, chunk_label)?;
        }
        if step.phase == Phase::Forward {
            acts.save(&mut b, key, seg, seg_label)?;
        }
        let makes_grads = step.phase == Phase::Backward || step.phase == Phase::BackwardWeight;
        let grad_buf = if makes_grads {
            dp.grad_buffer(&mut b, seg, seg_label)?
        } else {
            None
        };
        if step.phase == Phase::Recompute {
            acts.recompute(&mut b, seg, seg_label)?;
        }

        // What a pass holds only while it runs (the loss's gradients of the logits, an MoE
        // layer's all-to-all buffers).
        let transient_bytes = match step.phase {
            Phase::Backward | Phase::BackwardInput => seg.work.backward_transient_bytes,
            Phase::Forward | Phase::Recompute => seg.work.forward_transient_bytes,
            _ => 0,
        };
        let transient = b.alloc(
            Stream::Compute,
            crate::schedule::MemCategory::Activations,
            crate::schedule::Device::Gpu,
            transient_bytes,
            Deps::new(),
            seg_label,
        )?;
        let defer_a2a = ctx.s.training.moe_a2a_overlap && beside_opposite(order, step.slot);
        let ops = compute::emit_pass(ctx, &mut b, seg, step.phase, deps, seg_label, defer_a2a)?;
        let (compute, tail) = (ops.compute, ops.tail);
        b.free(Stream::Compute, transient, [compute], seg_label)?;
        if matches!(step.phase, Phase::Backward | Phase::BackwardInput) {
            acts.free_recomputed(&mut b, [compute], seg_label)?;
        }
        if tail != compute {
            pending_comms.push(tail);
        }
        deferred_comms.extend(ops.deferred);
        let last_user = last_gather_users.get(i).copied().unwrap_or(false);
        dp.after_compute(&mut b, step.gather, compute, last_user)?;
        if let Some(buf) = consumed {
            b.free(Stream::Compute, buf, [compute], chunk_label)?;
        }
        if makes_grads {
            // After the chunk's first backward, each adds its gradients to the earlier ones'
            // where the framework keeps per-parameter gradients.
            let grads = match &seg.work.grad_accumulate {
                Some(add) if first_grads[slot.chunk as usize].is_some_and(|m| m != mb) => {
                    b.compute(add.clone(), [compute], seg_label)?
                }
                _ => compute,
            };
            first_grads[slot.chunk as usize].get_or_insert(mb);
            last_grad_op = Some(grads);
            dp.per_pass_grads(&mut b, seg, grads, grad_buf, seg_label)?;
            let reduced =
                dp.pipelined_grads(&mut b, segs, step, slot.chunk, grads, last_of_slot)?;
            pending_comms.extend(reduced);
            dp.finalising_bucket(&mut b, segs, step, slot.chunk, grads)?;
            if step.last_grads && last_of_slot {
                dp.chunk_grads_done(&mut b, cp, grads)?;
            }
        }
        // Activations: freed after the pass that last reads them, the one that computes the
        // weight gradients (a whole backward, or W after a split one).
        if makes_grads {
            if !step.finalising || cp.final_segs.is_none() {
                acts.free_segment(&mut b, key, step.seg, compute, seg_label)?;
            } else if last_of_slot {
                acts.free_all(&mut b, key, compute, chunk_label)?;
            }
        }
        if sends {
            let mut after = Deps::from([compute, tail]);
            after.extend(deferred_comms.iter().copied());
            pipe.send(ctx, &mut b, slot, cp, after, chunk_label)?;
        }
        pipe.passed(compute, tail);
    }
    acts.free_recomputed(&mut b, Deps::new(), Label::default())?;
    dp.finish(&mut b, my_chunks, last_grad_op)?;
    let tails = b.tails();
    for tag in dp.step_buffers().into_iter().chain(state_tags).rev() {
        b.free(Stream::Compute, tag, tails.clone(), Label::default())?;
    }
    Ok(b.finish(stage))
}

/// Whether slot `i` of `order` sits beside a pass of the other direction (a forward next to a
/// backward): the steady phase, where `moe_a2a_overlap` runs each pass's expert all-to-alls
/// beside the other pass's compute.
fn beside_opposite(order: &[Slot], i: usize) -> bool {
    let forward = |s: &Slot| s.pass == crate::schedule::pipeline::Pass::Forward;
    let Some(me) = order.get(i) else {
        return false;
    };
    let opposite = |j: usize| order.get(j).is_some_and(|o| forward(o) != forward(me));
    opposite(i + 1) || (i > 0 && opposite(i - 1))
}

impl StageCtx<'_> {
    /// Members of any group of `kind` (all groups of a kind have the same size).
    pub fn plan_group_size(&self, kind: crate::plan::GroupKind) -> u32 {
        self.plan.group_size(kind)
    }
}

#[cfg(test)]
mod tests;
