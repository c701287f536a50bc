//! One stage's pass order flattened into its compute steps: a forward or backward pass of a
//! chunk becomes one step per segment (a backward in reverse segment order, each preceded by
//! its recompute), and each step notes the ZeRO-3 parameter gather it uses.

use crate::schedule::chunks::ChunkPlan;
use crate::schedule::dp::Zero;
use crate::schedule::emit::StageCtx;
use crate::schedule::pipeline::{split_backwards, Pass, Slot};
use crate::schedule::{Phase, ScheduleError};
use std::collections::BTreeMap;

/// One compute op of the stage, before it is emitted.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    pub slot: usize,
    pub phase: Phase,
    pub seg: usize,
    /// Uses the chunk's bucket cut (the pass that finalises its gradients).
    pub finalising: bool,
    /// Belongs to the pass that produces its chunk's gradients for the last time this step
    /// (the chunk's last backward, or its last W under zero-bubble).
    pub last_grads: bool,
    /// ZeRO-3 parameter gather this step uses, and whether it is the first step to use it.
    pub gather: Option<usize>,
    pub new_gather: bool,
}

/// The stage's compute steps in order, with the ZeRO-3 gather each one uses.
pub fn flatten<'c>(
    ctx: &StageCtx,
    order: &[Slot],
    chunk_of: &dyn Fn(u32) -> Result<&'c ChunkPlan, ScheduleError>,
) -> Result<Vec<Step>, ScheduleError> {
    let split = split_backwards(order);
    // The slot that finalises each chunk's gradients: the last that computes weight
    // gradients (a whole backward, or a W).
    let mut final_slot: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, slot) in order.iter().enumerate() {
        let whole = slot.pass == Pass::Backward && !split.contains(&(slot.microbatch, slot.chunk));
        if whole || slot.pass == Pass::Weight {
            final_slot.insert(slot.chunk, i);
        }
    }
    let gathers = ctx.dp.zero == Zero::ShardedParams && ctx.dp.shards();
    // Parameters kept gathered for the step (pipelined FSDP): one gather per (chunk, segment),
    // made by its first forward and used by every later pass of that segment.
    let keep = ctx.dp.pipelined.is_some_and(|p| p.keep_params);
    let mut kept: BTreeMap<(u32, usize), usize> = BTreeMap::new();
    let mut steps = Vec::new();
    let mut next_gather = 0usize;
    let mut push =
        |steps: &mut Vec<Step>, slot: usize, phase, seg, finalising, needs_params: bool| {
            let last_grads = final_slot.values().any(|&f| f == slot);
            let chunk = order.get(slot).map(|s| s.chunk).unwrap_or(0);
            let (gather, new_gather) = if !gathers {
                (None, false)
            } else if keep {
                if phase == Phase::BackwardWeight {
                    (None, false)
                } else if let Some(&k) = kept.get(&(chunk, seg)) {
                    (Some(k), false)
                } else {
                    kept.insert((chunk, seg), next_gather);
                    next_gather += 1;
                    (Some(next_gather - 1), true)
                }
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
                last_grads,
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
                let zb = split.contains(&(slot.microbatch, slot.chunk));
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
