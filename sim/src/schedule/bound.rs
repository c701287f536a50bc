//! A lower bound of a layout's step time from its compute alone, for a search that must not
//! simulate every layout (branch and bound: a layout whose bound is slower than the k-th best
//! simulated one cannot enter the top k).
//!
//! It reads the same pass orders ([`super::pipeline::stage_order`]), chunk segments
//! ([`super::chunks::plan_chunks`]) and workload answers as [`super::generate_each`], but
//! emits nothing: each pass is priced by summing its segments' compute ops, as the emitter
//! would cut them, before the emitter's own refinements (ring-attention blocks, chunked
//! GEMMs under TP overlap, SMs given to communication), which can only lengthen them.
//!
//! Why it bounds the engine's step, stage by stage (`k`):
//! - a rank runs its compute ops one at a time on its compute stream, so its step is at least
//!   the sum of their prices (`work_k`: every pass of its order, each recompute, each
//!   gradient accumulation, and the optimizer when the step synchronises);
//! - its first op is the forward of chunk 0 of some micro batch, which needs that micro
//!   batch's forward of chunk 0 on every stage before it: `fill_k`, the sum of those
//!   forwards, passes before it can start;
//! - the last pass of a rank is a backward of chunk 0 (every later chunk's backward of the
//!   same micro batch precedes it), and each stage before it must then run that micro batch's
//!   backward of chunk 0 in turn: `drain_k` more after the rank's passes.
//!
//! The chains hold under `gpipe`, `1f1b` and `interleaved-1f1b`. Zero-bubble and DualPipe
//! split backwards (a W may come last), and DualPipe's ranks also start from the other end of
//! the pipeline, so under them the bound is a stage's passes and optimizer alone. So `step >=
//! fill_k + passes_k + max(optimizer_k, drain_k)` for every stage and routing load class; the
//! bound is the largest. Communication, bubbles beyond the fill and drain,
//! and memory traffic between ops are what it leaves out. A test checks it against the
//! engine on every valid layout of small search spaces.

use super::chunks::{plan_chunks, ChunkPlan, Seg};
use super::dp::{DpPolicy, Zero};
use super::pipeline::{split_backwards, stage_order, Pass, Slot};
use super::{ComputeOp, ScheduleError, Sizes};
use crate::plan::Plan;
use crate::scenario::{PipelineSchedule, Scenario};
use crate::workload::routing::LoadClasses;
use std::collections::BTreeSet;

/// Whether the finalising backward of each chunk is cut into gradient buckets with
/// overlapped reduction (as [`super::generate_each`] decides it).
pub(crate) fn overlap_buckets(policy: &DpPolicy) -> bool {
    policy.zero != Zero::ShardedParams
        && policy.syncs
        && !policy.async_reduce
        && policy.overlap_grad_reduce
        && policy.reduces()
}

/// Lower bounds of a layout's step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// The step time (see the module documentation).
    pub step_ns: u64,
    /// The peak memory of the busiest rank: its model state (without the gradients where the
    /// framework allocates them pass by pass), the framework reserve, and the saved
    /// activations of the most micro batches its pass order holds at once. Each forward
    /// allocates its saved activations before its compute and the backward (W under
    /// zero-bubble) frees them after its own, while the state and the reserve are held for
    /// the whole step.
    pub memory_bytes: u64,
}

/// The [`Bounds`] of step `step`, with each compute op priced by `price`.
pub fn step_lower_bounds(
    scenario: &Scenario,
    plan: &Plan,
    sizes: &dyn Sizes,
    step: u64,
    price: &dyn Fn(&ComputeOp) -> u64,
) -> Result<Bounds, ScheduleError> {
    let (pp, vpp, m) = (plan.pp(), plan.vpp(), plan.microbatches);
    let policy = DpPolicy::new(scenario, plan, step)?;
    let buckets = overlap_buckets(&policy);
    // The fill and drain chains hold where each stage's passes run chunk 0's forward first
    // and its backward last, unsplit; zero-bubble and DualPipe split backwards, and
    // DualPipe's ranks also start from the other end.
    let chains = matches!(
        scenario.parallel.schedule,
        PipelineSchedule::Gpipe | PipelineSchedule::OneFOneB | PipelineSchedule::Interleaved1F1B
    );
    let extra_warmup = u32::from(scenario.training.moe_a2a_overlap);
    let orders = (0..pp)
        .map(|stage| {
            stage_order(
                scenario.parallel.schedule,
                stage,
                (pp, vpp, m),
                extra_warmup,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut bound = 0u64;
    let mut memory = 0u64;
    let grads_held = scenario.training.framework.memory.contiguous_grad_buffer;
    for load in LoadClasses::new(scenario).loads {
        let chunks = plan_chunks(scenario, plan, sizes, load, &policy, buckets);
        let mut fill = 0u64;
        let mut drain = 0u64;
        for (stage, order) in orders.iter().enumerate() {
            let mine: Vec<ChunkPrices> = chunks
                .get(stage)
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .map(|c| ChunkPrices::new(c, price))
                .collect();
            let (passes, last_adds) = passes_ns(&mine, order, buckets);
            let state = sizes.state_bytes(stage as u32);
            let held = state
                .weights_bytes
                .saturating_add(state.optimizer_bytes)
                .saturating_add(if grads_held { state.grads_bytes } else { 0 })
                .saturating_add(scenario.memory.reserved_bytes);
            let saved = chunks
                .get(stage)
                .map(|c| saved_peak_bytes(c, order))
                .unwrap_or(0);
            memory = memory.max(held.saturating_add(saved));
            let optimizer = if policy.syncs {
                price(&sizes.optimizer_step(stage as u32))
            } else {
                0
            };
            if !chains {
                bound = bound.max(passes.saturating_add(optimizer));
                continue;
            }
            bound = bound.max(fill.saturating_add(passes).saturating_add(optimizer));
            // The drain starts when the last backward ends, beside the gradient accumulation
            // that follows it.
            let chained = fill
                .saturating_add(passes.saturating_sub(last_adds))
                .saturating_add(drain);
            bound = bound.max(chained);
            if let Some(first) = mine.first() {
                fill = fill.saturating_add(first.segs.forward);
                let last = match &first.final_segs {
                    Some(f) => first.segs.backward.min(f.backward),
                    None => first.segs.backward,
                };
                drain = drain.saturating_add(last);
            }
        }
    }
    Ok(Bounds {
        step_ns: bound,
        memory_bytes: memory,
    })
}

/// The most saved-activation bytes a stage holds at once: each forward of a chunk adds the
/// chunk's saved bytes per micro batch, the pass that last reads them (its backward, or its W
/// where the backward is split) removes them.
fn saved_peak_bytes(chunks: &[ChunkPlan], order: &[Slot]) -> u64 {
    let per_chunk: Vec<u64> = chunks
        .iter()
        .map(|c| {
            c.segs
                .iter()
                .map(|s| s.work.activation_bytes)
                .fold(0, u64::saturating_add)
        })
        .collect();
    let split = split_backwards(order);
    let (mut held, mut peak) = (0u64, 0u64);
    for slot in order {
        let bytes = per_chunk.get(slot.chunk as usize).copied().unwrap_or(0);
        if slot.pass == Pass::Forward {
            held = held.saturating_add(bytes);
            peak = peak.max(held);
        } else if makes_grads(slot, &split) {
            held = held.saturating_sub(bytes);
        }
    }
    peak
}

/// Whether `slot` computes its chunk's weight gradients: a whole backward, or a W.
fn makes_grads(slot: &Slot, split: &BTreeSet<(u32, u32)>) -> bool {
    match slot.pass {
        Pass::Forward => false,
        Pass::Backward => !split.contains(&(slot.microbatch, slot.chunk)),
        Pass::Weight => true,
    }
}

/// A pass's compute over a run of segments, each phase priced once.
#[derive(Clone, Copy, Default)]
struct PassPrices {
    forward: u64,
    backward: u64,
    backward_input: u64,
    backward_weight: u64,
    recompute: u64,
    accumulate: u64,
}

impl PassPrices {
    fn new(segs: &[Seg], price: &dyn Fn(&ComputeOp) -> u64) -> PassPrices {
        let mut p = PassPrices::default();
        for s in segs {
            let w = &s.work;
            let add = |total: &mut u64, op: &ComputeOp| *total = total.saturating_add(price(op));
            add(&mut p.forward, &w.forward.compute);
            add(&mut p.backward, &w.backward.compute);
            add(&mut p.backward_input, &w.backward_input.compute);
            add(&mut p.backward_weight, &w.backward_weight);
            if let Some(r) = &w.recompute {
                add(&mut p.recompute, &r.compute);
            }
            if let Some(a) = &w.grad_accumulate {
                add(&mut p.accumulate, a);
            }
        }
        p
    }
}

/// One chunk's passes priced: over its segments, and over its bucket cut when it has one.
struct ChunkPrices {
    segs: PassPrices,
    final_segs: Option<PassPrices>,
}

impl ChunkPrices {
    fn new(c: &ChunkPlan, price: &dyn Fn(&ComputeOp) -> u64) -> ChunkPrices {
        ChunkPrices {
            segs: PassPrices::new(&c.segs, price),
            final_segs: c.final_segs.as_deref().map(|f| PassPrices::new(f, price)),
        }
    }

    /// As [`ChunkPlan::segs_for`].
    fn segs_for(&self, finalising: bool) -> &PassPrices {
        match (&self.final_segs, finalising) {
            (Some(f), true) => f,
            _ => &self.segs,
        }
    }
}

/// Every compute op of one stage's passes, priced: each forward, recompute, backward (input
/// and weight halves where it is split) of each segment, and the gradient accumulation after
/// every gradient pass of a chunk but its first; and the accumulation after the last pass
/// (0 when there is none).
fn passes_ns(chunks: &[ChunkPrices], order: &[Slot], buckets: bool) -> (u64, u64) {
    let split = split_backwards(order);
    // The last gradient pass of each chunk finalises it (cut into buckets when `buckets`).
    let mut final_slot = vec![None; chunks.len()];
    for (i, slot) in order.iter().enumerate() {
        if makes_grads(slot, &split) {
            if let Some(f) = final_slot.get_mut(slot.chunk as usize) {
                *f = Some(i);
            }
        }
    }
    let mut first_grads = vec![false; chunks.len()];
    let mut total = 0u64;
    let mut last_adds = 0u64;
    for (i, slot) in order.iter().enumerate() {
        let Some(cp) = chunks.get(slot.chunk as usize) else {
            continue;
        };
        let finalising = buckets && final_slot.get(slot.chunk as usize) == Some(&Some(i));
        let grads = makes_grads(slot, &split);
        let ns = match slot.pass {
            Pass::Forward => cp.segs.forward,
            Pass::Backward if !grads => {
                let p = cp.segs;
                p.recompute.saturating_add(p.backward_input)
            }
            Pass::Backward => {
                let p = cp.segs_for(finalising);
                p.recompute.saturating_add(p.backward)
            }
            Pass::Weight => cp.segs_for(finalising).backward_weight,
        };
        total = total.saturating_add(ns);
        last_adds = 0;
        if grads {
            let seen = first_grads.get_mut(slot.chunk as usize);
            if seen.as_deref() == Some(&true) {
                last_adds = cp.segs_for(finalising).accumulate;
                total = total.saturating_add(last_adds);
            }
            if let Some(s) = seen {
                *s = true;
            }
        }
    }
    (total, last_adds)
}
