//! A lower bound of a layout's step time from its compute and the collectives chained
//! between its computes, for a search that must not simulate every layout (branch and bound:
//! a layout whose bound is slower than the k-th best simulated one cannot enter the top k).
//!
//! It reads the same pass orders ([`super::pipeline::stage_order`]), chunk segments
//! ([`super::chunks::plan_chunks`]) and workload answers as [`super::generate_each`], but
//! emits nothing: each pass is priced by summing its segments' compute ops as the emitter
//! runs them (under `tp_comm_overlap`, GEMMs cut into chunks on the SMs the overlap leaves,
//! and the least the hidden collectives beside them slow them: [`OverlappedPass`]). With
//! ring attention its blocks, each priced on its own, and the chain of its transfers
//! ([`RingParts`]) are counted, since at a high cp they are most of the pass.
//!
//! Why it bounds the engine's step, stage by stage (`k`):
//! - a rank runs its compute ops one at a time on its compute stream, and each pass's first
//!   compute waits for the collectives the pass before it ends with (its tensor-, context- and
//!   expert-parallel ones, less what runs beside the compute:
//!   [`super::emit::chained_comms`]), while the gradient accumulation after a pass runs
//!   beside them. So its step is at least the sum over its passes of each compute plus the
//!   larger of those collectives and that accumulation (`passes_k`; collectives priced by the
//!   cost model, as the engine prices them when no flow network times them), and the
//!   optimizer when the step synchronises;
//! - when its first pass is a forward of chunk 0, that micro batch's forward of chunk 0 (and
//!   its collectives) on every stage before it must run first: `fill_k`;
//! - its last backward of chunk 0 (its input-gradient half where backwards are split) sends
//!   the gradient back after its compute and collectives, and each stage before it must then
//!   run that micro batch's backward of chunk 0 in turn: `drain_k` after it.
//!
//! These hold under every schedule: the fill where the first pass is a forward of chunk 0,
//! the drain always (chunk 0's micro batches flow from stage 0 on, DualPipe's too). So
//! `step >= fill_k + passes_k + optimizer_k` and `step >= fill_k + (passes up to the last
//! backward of chunk 0) + drain_k` for every stage and routing load class. Beyond these:
//! - the longest chain of passes over all stages ([`chain_ends`]): each pass after the one
//!   before it on its rank and after the pass of its micro batch it receives from (the
//!   previous virtual stage's forward, the next one's backward), with the pipeline transfer
//!   between ranks priced by the cost model; a backward's recompute may run before its input
//!   arrives. This holds every bubble of the pass orders, the fill and drain included;
//! - the data-parallel stream ([`dp_stream`]): its collectives run one at a time in issue
//!   order (ZeRO-1/2 gathers at the start, ZeRO-3's gathers, every gradient reduction as the
//!   emitter issues it, through [`DpPolicy::reduction_calls`] and
//!   [`super::emit::bucket_completed`]), and the optimizer waits for the last reduction, so
//!   `step >= dp_k + optimizer_k + gathers after it`; the reductions issued after a stage's
//!   last gradient op (the end-of-step reduction, or the last bucket or segment) follow the
//!   chain's end, then the optimizer.
//!
//! The bound is the largest of these. Bubbles from collectives the chain leaves out (the
//! data-parallel ones beside compute, a ring transfer waiting for its peer's),
//! DualPipe's mirror reductions and memory traffic between ops are what it leaves out. A
//! test checks it against the engine on every third valid layout of small search spaces.

use super::chunks::{plan_chunks, ChunkPlan, Seg};
use super::dp::{DpPolicy, Zero};
use super::emit::{
    bucket_completed, chained_comms, flatten, ring_blocks, steps_gathers, tp_overlapped_pass,
    StageCtx, StepBuffers,
};
use super::pipeline::{split_backwards, stage_order, Pass, Slot};
use super::{ComputeOp, Phase, ScheduleError, Sizes};
use crate::plan::Plan;
use crate::scenario::framework::GradReduce;
use crate::scenario::PipelineSchedule;
use crate::scenario::{MemoryAccounting, Scenario};
use crate::workload::routing::LoadClasses;
use crate::workload::{ChunkWork, CommCall, ParamCount, PassWork};
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::collections::HashMap;
use std::rc::Rc;

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
    /// framework allocates them pass by pass), the framework reserve, the buffers held for
    /// the whole step ([`StepBuffers`]: ZeRO-2's gradient accumulation, async sync's stale
    /// gradients), and the saved activations of the most micro batches its pass order holds
    /// at once with, under ZeRO-3, the gathered unit of the forward that adds the last. Each forward
    /// allocates its saved activations before its compute and the backward (W under
    /// zero-bubble) frees them after its own, while the state and the reserve are held for
    /// the whole step.
    pub memory_bytes: u64,
}

/// The compute prices of segments' work, by the work's address (each entry holds the work
/// alive, so no other work takes its address). Valid for one compute price function and one
/// tensor-parallel setting (`tp`, `tp_comm_overlap`, the framework's overlaps): a caller keeps
/// one per cost model and per such setting.
#[derive(Default)]
pub struct PriceMemo {
    prices: HashMap<*const ChunkWork, (Rc<ChunkWork>, PassPrices, RingWork, OverlappedWork)>,
}

/// What the bound prices ops with.
pub struct Prices<'a> {
    /// A compute op's time.
    pub compute: &'a dyn Fn(&ComputeOp) -> u64,
    /// A collective's time on a rank of the stage (the first argument); 0 where the engine
    /// does not take it from the cost model (a flow network times it).
    pub collective: &'a dyn Fn(u32, &CommCall) -> u64,
    /// A pipeline transfer of `bytes` from the first rank of one stage (the first argument)
    /// to the first rank of another; 0 where a flow network times it.
    pub p2p: &'a dyn Fn(u32, u32, u64) -> u64,
    /// A ring context-parallel transfer of `bytes` into the first rank of a stage (the first
    /// argument) from the previous rank of its cp group; 0 where a flow network times it.
    pub cp_ring: &'a dyn Fn(u32, u64) -> u64,
    /// Offloaded work on a rank's host side (optimizer offload).
    pub host: &'a dyn Fn(crate::schedule::HostWork) -> u64,
    /// How much slower compute runs while its rank communicates
    /// ([`crate::cost::CostModel::overlap_compute_slowdown`]).
    pub overlap_slowdown: f64,
}

/// The [`Bounds`] of step `step`, with each op priced by `price`. When the memory bound
/// exceeds `memory_limit_bytes` nothing is priced and the step's bound is 0. Without `full`
/// the chain of passes over the stages ([`chain_ends`]) and the data-parallel stream
/// (gathers, reductions, the optimizer's wait for them) are left out: a cheaper bound, and a
/// lower one (each stage's fill, passes, drain and optimizer), that a search can take for
/// every layout and refine only for the layouts it would otherwise simulate.
#[allow(clippy::too_many_arguments)]
pub fn step_lower_bounds(
    scenario: &Scenario,
    plan: &Plan,
    sizes: &dyn Sizes,
    step: u64,
    price: &Prices<'_>,
    memo: &mut PriceMemo,
    memory_limit_bytes: u64,
    full: bool,
) -> Result<Bounds, ScheduleError> {
    let (pp, vpp, m) = (plan.pp(), plan.vpp(), plan.microbatches);
    let policy = DpPolicy::new(scenario, plan, step)?;
    let buckets = overlap_buckets(&policy);
    let tp = plan.group_size(crate::plan::GroupKind::Tp);
    let extra_warmup = u32::from(scenario.training.moe_a2a_overlap);
    let orders = Orders::of(scenario.parallel.schedule, (pp, vpp, m), extra_warmup)?;
    let loads: Vec<_> = LoadClasses::new(scenario)
        .loads
        .into_iter()
        .map(|load| plan_chunks(scenario, plan, sizes, load, &policy, buckets))
        .collect();
    let mut bound = 0u64;
    let mut memory = 0u64;
    let grads_held = scenario.training.framework.memory.contiguous_grad_buffer;
    // DeepSpeed accounting: bytes per parameter of a gathered ZeRO-3 module.
    let module_bytes = (scenario.memory.accounting == MemoryAccounting::Deepspeed)
        .then(|| crate::workload::state_coefficients(&scenario.training).weight_bytes);
    let deepspeed = module_bytes.is_some();
    let held_for_the_run = crate::workload::held_for_the_run_bytes(scenario);
    for chunks in &loads {
        for (stage, order) in orders.orders.iter().enumerate() {
            let my_chunks = chunks.get(stage).map(Vec::as_slice).unwrap_or_default();
            let state = sizes.state_bytes(stage as u32);
            let buffers = StepBuffers::new(scenario, plan, &policy, my_chunks, deepspeed);
            let held = state
                .weights_bytes
                .saturating_add(state.optimizer_bytes)
                .saturating_add(if grads_held { state.grads_bytes } else { 0 })
                .saturating_add(held_for_the_run)
                .saturating_add(buffers.bytes());
            let units = gathered_unit_bytes(&policy, my_chunks, module_bytes);
            let grads = orders
                .grads
                .get(stage)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let per_chunk = saved_bytes_per_chunk(my_chunks);
            let saved = orders
                .held_at_forwards(stage)
                .and_then(|h| h.peak_bytes(&per_chunk, &units))
                .unwrap_or_else(|| saved_peak_bytes(&per_chunk, order, grads, &units));
            memory = memory.max(held.saturating_add(saved));
        }
    }
    if memory > memory_limit_bytes {
        return Ok(Bounds {
            step_ns: 0,
            memory_bytes: memory,
        });
    }
    for chunks in &loads {
        let mut fill = 0u64;
        let mut drain = 0u64;
        let mut all_slots = Vec::with_capacity(orders.orders.len());
        let mut optimizers = Vec::with_capacity(orders.orders.len());
        let mut streams = Vec::with_capacity(orders.orders.len());
        for (stage, (order, grads)) in orders.orders.iter().zip(&orders.grads).enumerate() {
            let split = orders.splits.get(stage).is_some_and(|s| !s.is_empty());
            // Segments share their work (`Rc`) between stages and chunks: each is priced
            // once, its collectives once per stage (they run in the stage's groups).
            let mut comms_memo: HashMap<*const ChunkWork, PassPrices> = HashMap::new();
            let mut pass_prices = |segs: &[Seg]| {
                segs.iter().fold(PassPrices::default(), |acc, seg| {
                    let key = Rc::as_ptr(&seg.work);
                    let (_, compute, ring, overlapped) =
                        memo.prices.entry(key).or_insert_with(|| {
                            let p = PassPrices::compute(&seg.work, price.compute);
                            let ring = RingWork::of(&seg.work, price.compute);
                            let overlapped =
                                OverlappedWork::of(scenario, tp, &seg.work, price.compute);
                            (Rc::clone(&seg.work), p, ring, overlapped)
                        });
                    let (compute, ring) = (*compute, *ring);
                    let comms = *comms_memo.entry(key).or_insert_with(|| {
                        PassPrices::comms(seg, &|seg, phase| {
                            chained_comms(scenario, plan, seg, phase)
                                .iter()
                                .map(|c| (price.collective)(stage as u32, c))
                                .fold(0, u64::saturating_add)
                        })
                        .plus(ring.excess(&|bytes| (price.cp_ring)(stage as u32, bytes)))
                        .plus(overlapped.excess(
                            &|bytes| (price.cp_ring)(stage as u32, bytes),
                            &|c| (price.collective)(stage as u32, c),
                            price.overlap_slowdown,
                        ))
                    });
                    acc.plus(compute).plus(comms)
                })
            };
            let my_chunks = chunks.get(stage).map(Vec::as_slice).unwrap_or_default();
            let mine: Vec<ChunkPrices> = my_chunks
                .iter()
                .map(|c| ChunkPrices::new(c, &mut pass_prices))
                .collect();
            // What the rank's passes add up to, whole and up to its last backward of chunk 0,
            // from the stage's slot classes counted once per pipeline shape; every slot's
            // cost only where the chain of passes needs them.
            let tally = orders.tally(stage, buckets, mine.len());
            let (passes, to_drain) = (tally.passes(&mine), tally.to_drain(&mine));
            let slots = if full {
                slot_costs(&mine, order, grads, buckets)
            } else {
                Vec::new()
            };
            // Offloaded, the host's update and the parameters' copy back (none where they
            // stay on the host) follow the last gradients' arrival on the host, as the GPU's
            // update follows their reduction.
            let optimizer = match (policy.syncs, sizes.offloaded_step(stage as u32)) {
                (false, _) => 0,
                (true, Some(o)) => {
                    use crate::schedule::HostWork;
                    let update = (price.host)(HostWork::Update {
                        bytes: o.update_bytes,
                    });
                    let back = match o.params_bytes {
                        0 => 0,
                        bytes => (price.host)(HostWork::Copy { bytes }),
                    };
                    update.saturating_add(back)
                }
                (true, None) => (price.compute)(&sizes.optimizer_step(stage as u32)),
            };
            // The data-parallel stream runs its collectives one at a time, in issue order,
            // and the optimizer waits for the last reduction.
            let ctx = StageCtx {
                s: scenario,
                plan,
                sizes,
                dp: &policy,
                chunks,
                overlap_buckets: buckets,
            };
            let dp = if full {
                dp_stream(&ctx, my_chunks, order, &|call| {
                    (price.collective)(stage as u32, call)
                })?
            } else {
                DpStream::default()
            };
            bound = bound.max(dp.before_optimizer_ns);
            if dp.optimizer_waits {
                bound = bound.max(
                    dp.before_optimizer_ns
                        .saturating_add(optimizer)
                        .saturating_add(dp.after_optimizer_ns),
                );
            }
            // The rank's first op waits for the fill when it is a forward of chunk 0.
            let fill_k = match order.first() {
                Some(s) if s.pass == Pass::Forward && s.chunk == 0 => fill,
                _ => 0,
            };
            bound = bound.max(fill_k.saturating_add(passes).saturating_add(optimizer));
            // The drain starts when the rank's last backward of chunk 0 and its collectives
            // end (the send to the stage before waits for both, not for the gradient
            // accumulation beside them).
            if let Some((before, to_send)) = to_drain {
                let chained = fill_k
                    .saturating_add(before)
                    .saturating_add(to_send)
                    .saturating_add(drain);
                bound = bound.max(chained);
            }
            if let Some(first) = mine.first() {
                // Chunk 0's output goes to the next stage, and its input gradient comes back
                // from there: the same boundary bytes.
                let boundary = my_chunks.first().map_or(0, |c| c.boundary_bytes);
                let (here, next) = (stage as u32, stage as u32 + 1);
                let (to_next, from_next) = if next < pp {
                    (
                        (price.p2p)(here, next, boundary),
                        (price.p2p)(next, here, boundary),
                    )
                } else {
                    (0, 0)
                };
                fill = fill
                    .saturating_add(first.segs.forward)
                    .saturating_add(first.segs.forward_comms)
                    .saturating_add(to_next);
                // The backward on the drain is the input-gradient half where this stage
                // splits backwards.
                let last = [Some(&first.segs), first.final_segs.as_ref()]
                    .into_iter()
                    .flatten()
                    .map(|p| {
                        if split {
                            p.backward.min(p.backward_input)
                        } else {
                            p.backward
                        }
                    })
                    .min()
                    .unwrap_or(0);
                drain = drain.saturating_add(last).saturating_add(from_next);
            }
            all_slots.push(slots);
            optimizers.push(optimizer);
            streams.push(dp);
        }
        // One stage has no transfers: its chain is its passes.
        let ends = if !full {
            None
        } else if pp > 1 {
            chain_ends(
                &orders,
                &all_slots,
                chunks,
                scenario.parallel.schedule == PipelineSchedule::DualPipe,
                price.p2p,
            )
        } else {
            Some(
                all_slots
                    .iter()
                    .map(|s| s.iter().fold(0u64, |t, c| t.saturating_add(c.on_rank())))
                    .collect(),
            )
        };
        if let Some(ends) = ends {
            for ((end, optimizer), dp) in ends.iter().zip(&optimizers).zip(&streams) {
                bound = bound.max(end.saturating_add(*optimizer));
                // The reductions after the last gradient op, then the optimizer (which
                // waits for them) and the gathers after it.
                if dp.optimizer_waits {
                    bound = bound.max(
                        end.saturating_add(dp.after_last_grads_ns)
                            .saturating_add(*optimizer)
                            .saturating_add(dp.after_optimizer_ns),
                    );
                }
            }
        }
    }
    Ok(Bounds {
        step_ns: bound,
        memory_bytes: memory,
    })
}

/// One stage's data-parallel stream, priced: its collectives up to the last gradient
/// reduction (the ZeRO-1/2 parameter gathers at the start, ZeRO-3's gathers, every reduction
/// as [`super::emit`] issues it, bucket by bucket or pass by pass, each through
/// [`DpPolicy::reduction_calls`]), and the ZeRO-1/2 gathers after the optimizer.
#[derive(Clone, Copy, Debug, Default)]
struct DpStream {
    before_optimizer_ns: u64,
    after_optimizer_ns: u64,
    /// The reductions issued after the stage's last gradient op (its last pass's compute
    /// and accumulation): the end-of-step reduction, or the last pass's last bucket or
    /// segment.
    after_last_grads_ns: u64,
    /// The step reduces gradients and its optimizer waits for the last reduction.
    optimizer_waits: bool,
}

/// [`DpStream`] of the stage holding `chunks`, with pass order `order`. The stream is FIFO
/// and the ops counted before the optimizer are all issued before the last reduction: the
/// ZeRO-3 gathers are issued before the pass that uses them (a prefetch one pass ahead), and
/// the last pass of an order produces gradients (every forward is followed by its backward,
/// every split backward by its W).
fn dp_stream(
    ctx: &StageCtx<'_>,
    chunks: &[ChunkPlan],
    order: &[Slot],
    price: &dyn Fn(&CommCall) -> u64,
) -> Result<DpStream, ScheduleError> {
    let dp = ctx.dp;
    let mut out = DpStream::default();
    if !dp.reduces() {
        return Ok(out);
    }
    // Segments of one chunk mostly hold the same parameters: each size priced once (a
    // handful of sizes per stage, looked up in order).
    let reduced_ns: RefCell<Vec<(ParamCount, u64)>> = RefCell::default();
    let gathered_ns: RefCell<Vec<(ParamCount, u64)>> = RefCell::default();
    let priced = |memo: &RefCell<Vec<(ParamCount, u64)>>,
                  params: ParamCount,
                  calls: &dyn Fn(ParamCount) -> u64| {
        if let Some(&(_, ns)) = memo.borrow().iter().find(|(p, _)| *p == params) {
            return ns;
        }
        let ns = calls(params);
        memo.borrow_mut().push((params, ns));
        ns
    };
    let reduce = |params: ParamCount| {
        priced(&reduced_ns, params, &|p| {
            dp.reduction_calls(p)
                .iter()
                .map(|c| price(&c.call))
                .fold(0u64, u64::saturating_add)
        })
    };
    let gather = |params: ParamCount| {
        priced(&gathered_ns, params, &|p| {
            dp.gather_calls(p)
                .iter()
                .map(price)
                .fold(0u64, u64::saturating_add)
        })
    };
    let mut ns = 0u64;
    let mut reduced = false;
    if dp.zero == Zero::ShardedOptimizer && dp.overlap_param_gather && dp.gather_at_start {
        for c in chunks {
            ns = ns.saturating_add(gather(c.params));
        }
    }
    if dp.async_reduce && dp.syncs {
        for c in chunks {
            ns = ns.saturating_add(reduce(c.params));
        }
        reduced = true;
    }
    if dp.zero == Zero::ShardedParams {
        let chunk_of = |c: u32| -> Result<&ChunkPlan, ScheduleError> {
            chunks
                .get(c as usize)
                .ok_or_else(|| ScheduleError::Unsupported(format!("no chunk {c}")))
        };
        let steps = flatten(ctx, order, &chunk_of)?;
        for g in steps_gathers(&steps, order, &chunk_of)? {
            ns = ns.saturating_add(gather(g.params));
        }
        let per_pass = dp.syncs && dp.pipelined.is_none();
        for (i, step) in steps.iter().enumerate() {
            if !matches!(step.phase, Phase::Backward | Phase::BackwardWeight) {
                continue;
            }
            let Some(slot) = order.get(step.slot) else {
                continue;
            };
            let segs = chunk_of(slot.chunk)?.segs_for(step.finalising);
            let Some(seg) = segs.get(step.seg) else {
                continue;
            };
            if per_pass {
                ns = ns.saturating_add(reduce(seg.params));
                reduced = true;
            }
            match dp.pipelined {
                Some(p) if dp.syncs && step.last_grads => {
                    let last_of_slot = steps.get(i + 1).map(|n| n.slot) != Some(step.slot);
                    if p.reduce != GradReduce::AfterBackward {
                        ns = ns.saturating_add(reduce(seg.params));
                    } else if last_of_slot {
                        for s in segs {
                            ns = ns.saturating_add(reduce(s.params));
                        }
                    }
                    reduced = true;
                }
                _ => {}
            }
        }
    } else if dp.syncs && !dp.async_reduce {
        for c in chunks {
            if ctx.overlap_buckets {
                // The finalising backward reduces each bucket once its lowest segment is done.
                let segs = c.segs_for(true);
                for seg in 0..segs.len() {
                    if let Some(bucket) = bucket_completed(segs, dp.bucket_bytes, seg) {
                        let params = bucket
                            .iter()
                            .fold(ParamCount::default(), |a, s| a.plus(s.params));
                        ns = ns.saturating_add(reduce(params));
                    }
                }
            } else {
                ns = ns.saturating_add(reduce(c.params));
            }
        }
        reduced = true;
    }
    out.before_optimizer_ns = ns;
    out.optimizer_waits = reduced && dp.syncs;
    out.after_last_grads_ns = after_last_grads_ns(dp, ctx.overlap_buckets, chunks, order, &reduce);
    if dp.zero == Zero::ShardedOptimizer && !dp.overlap_param_gather && dp.syncs {
        for c in chunks {
            out.after_optimizer_ns = out.after_optimizer_ns.saturating_add(gather(c.params));
        }
    }
    Ok(out)
}

/// [`DpStream::after_last_grads_ns`]: a step that reduces at its end reduces every chunk
/// after its last gradient op; otherwise the last pass (a gradient pass: every forward is
/// followed by its backward, every split backward by its W) reduces its last bucket (under
/// overlapped buckets) or its last segment (ZeRO-3; every segment of the chunk where
/// pipelined FSDP reduces after the backward) once its compute is done.
fn after_last_grads_ns(
    dp: &DpPolicy,
    overlap_buckets: bool,
    chunks: &[ChunkPlan],
    order: &[Slot],
    reduce: &dyn Fn(ParamCount) -> u64,
) -> u64 {
    if !(dp.syncs && dp.reduces()) || dp.async_reduce {
        return 0;
    }
    let sum = |segs: &[Seg]| {
        segs.iter()
            .fold(ParamCount::default(), |a, s| a.plus(s.params))
    };
    let last = order.last().and_then(|s| chunks.get(s.chunk as usize));
    match (dp.zero, last) {
        (_, None) => 0,
        (Zero::ShardedParams, Some(c)) => match dp.pipelined {
            Some(p) if p.reduce == GradReduce::AfterBackward => c
                .segs
                .iter()
                .map(|s| reduce(s.params))
                .fold(0, u64::saturating_add),
            _ => c.segs.first().map_or(0, |s| reduce(s.params)),
        },
        (_, Some(c)) if overlap_buckets => {
            let segs = c.segs_for(true);
            bucket_completed(segs, dp.bucket_bytes, 0).map_or(0, |b| reduce(sum(b)))
        }
        _ => chunks
            .iter()
            .map(|c| reduce(c.params))
            .fold(0, u64::saturating_add),
    }
}

/// Bytes of the ZeRO-3 gather buffer each chunk's forward holds while its last segment
/// computes (its own saved activations already allocated): the segment's gathered
/// parameters, or under DeepSpeed accounting (`module_bytes`, per parameter) its largest
/// module, allocated as the pass starts; 0 where no parameters are gathered.
fn gathered_unit_bytes(dp: &DpPolicy, chunks: &[ChunkPlan], module_bytes: Option<u64>) -> Vec<u64> {
    let gathers = dp.zero == Zero::ShardedParams && dp.shards();
    // Kept gathers are allocated once per step, by a segment's first forward only.
    let kept = dp.pipelined.is_some_and(|p| p.keep_params);
    chunks
        .iter()
        .map(|c| match (gathers, c.segs.last(), module_bytes) {
            (false, _, _) | (_, None, _) => 0,
            (true, Some(_), Some(_)) if kept => 0,
            (true, Some(seg), Some(per_param)) => {
                seg.work.largest_module_params.saturating_mul(per_param)
            }
            (true, Some(seg), None) => dp.param_bytes(
                dp.grad_groups(seg.params)
                    .iter()
                    .map(|(_, e)| *e)
                    .fold(0, u64::saturating_add),
            ),
        })
        .collect()
}

/// The most saved-activation bytes a stage holds at once: each forward of a chunk adds the
/// chunk's saved bytes per micro batch, the pass that last reads them (its backward, or its W
/// where the backward is split) removes them. While a forward's last segment computes, the
/// chunk's gathered unit (`units`, ZeRO-3) is held too.
fn saved_peak_bytes(per_chunk: &[u64], order: &[Slot], grads: &[bool], units: &[u64]) -> u64 {
    let (mut held, mut peak) = (0u64, 0u64);
    for (slot, &grads) in order.iter().zip(grads) {
        let chunk = slot.chunk as usize;
        let bytes = per_chunk.get(chunk).copied().unwrap_or(0);
        if slot.pass == Pass::Forward {
            held = held.saturating_add(bytes);
            let unit = units.get(chunk).copied().unwrap_or(0);
            peak = peak.max(held.saturating_add(unit));
        } else if grads {
            held = held.saturating_sub(bytes);
        }
    }
    peak
}

/// Each chunk's saved-activation bytes per micro batch.
fn saved_bytes_per_chunk(chunks: &[ChunkPlan]) -> Vec<u64> {
    chunks
        .iter()
        .map(|c| {
            c.segs
                .iter()
                .map(|s| s.work.activation_bytes)
                .fold(0, u64::saturating_add)
        })
        .collect()
}

/// What [`saved_peak_bytes`] reads of a stage's order, counted once per pipeline shape: at
/// each forward, how many micro batches of each chunk it holds (forwarded, not yet freed by
/// their gradient pass) and which chunk it forwards, keeping only the forwards that no other
/// forward of the same chunk matches or exceeds in every count. The peak is then the largest
/// held bytes plus unit over those, a few terms a layout instead of a pass over the order.
struct HeldAtForwards {
    points: Vec<(u32, Vec<u64>)>,
}

impl HeldAtForwards {
    /// `None` when the order frees a chunk's activations before it holds them (no schedule
    /// does), where only the pass over the order gives the same answer.
    fn new(order: &[Slot], grads: &[bool], chunks: usize) -> Option<HeldAtForwards> {
        let mut held = vec![0u64; chunks];
        let mut points: Vec<(u32, Vec<u64>)> = Vec::new();
        for (slot, &g) in order.iter().zip(grads) {
            let c = slot.chunk as usize;
            if slot.pass == Pass::Forward {
                *held.get_mut(c)? += 1;
                let dominated = points
                    .iter()
                    .any(|(k, p)| *k == slot.chunk && p.iter().zip(&held).all(|(a, b)| a >= b));
                if !dominated {
                    points.retain(|(k, p)| {
                        !(*k == slot.chunk && held.iter().zip(p).all(|(a, b)| a >= b))
                    });
                    points.push((slot.chunk, held.clone()));
                }
            } else if g {
                let h = held.get_mut(c)?;
                *h = h.checked_sub(1)?;
            }
        }
        Some(HeldAtForwards { points })
    }

    /// [`saved_peak_bytes`] of the stage whose chunks save `per_chunk` bytes a micro batch,
    /// with gathered units `units`; `None` where a sum overflows (the pass over the order
    /// saturates instead).
    fn peak_bytes(&self, per_chunk: &[u64], units: &[u64]) -> Option<u64> {
        let mut peak = 0u64;
        for (chunk, held) in &self.points {
            let mut bytes = 0u64;
            for (c, &n) in held.iter().enumerate() {
                let b = per_chunk.get(c).copied().unwrap_or(0);
                bytes = bytes.checked_add(n.checked_mul(b)?)?;
            }
            let unit = units.get(*chunk as usize).copied().unwrap_or(0);
            peak = peak.max(bytes.checked_add(unit)?);
        }
        Some(peak)
    }
}

/// The end, on each stage, of its last pass when every pass starts only after the pass
/// before it on its rank (its compute, then the larger of its chained collectives and the
/// gradient accumulation after it) and after the pass of the same micro batch it receives
/// from: a forward after the previous virtual stage's forward, a backward (its input half
/// where split) after the next virtual stage's, each sent once its compute and collectives
/// are done and carried by a pipeline transfer between ranks (`transfer`). This is the
/// longest chain of those dependencies, the fill, drain and bubbles of every schedule
/// included; the engine adds to each link, never removes. `None` when the orders deadlock
/// (the engine then fails the layout).
fn chain_ends(
    orders: &Orders,
    costs: &[Vec<SlotCost>],
    chunks: &[Vec<ChunkPlan>],
    dualpipe: bool,
    transfer: &dyn Fn(u32, u32, u64) -> u64,
) -> Option<Vec<u64>> {
    let pp = orders.orders.len();
    // (direction, virtual stage) -> (stage, chunk, bytes of its output). Micro batches flow
    // along the virtual stages; DualPipe's chunk 1 holds the same virtual stages as chunk 0
    // on the mirror stages (its micro batches are fed in at the last stage).
    let direction = |chunk: u32| if dualpipe { chunk.min(1) as usize } else { 0 };
    let mut at: [Vec<Option<(usize, u32, u64)>>; 2] = [Vec::new(), Vec::new()];
    for (stage, row) in chunks.iter().enumerate() {
        for (chunk, c) in row.iter().enumerate() {
            let v = c.layout.virtual_stage as usize;
            let line = &mut at[direction(chunk as u32)];
            if line.len() <= v {
                line.resize(v + 1, None);
            }
            line[v] = Some((stage, chunk as u32, c.boundary_bytes));
        }
    }
    let locate = |chunk: u32, v: usize| at[direction(chunk)].get(v).copied().flatten();
    let virtual_of = |stage: usize, chunk: u32| {
        chunks
            .get(stage)
            .and_then(|r| r.get(chunk as usize))
            .map(|c| c.layout.virtual_stage as usize)
    };
    // Each (from, to, bytes) transfer priced once, kept by the receiving stage: a stage
    // receives from one or two neighbours, so each list holds a few entries, whatever pp.
    let mut carried: Vec<Vec<(usize, u64, u64)>> = vec![Vec::new(); pp];
    let mut next = vec![0usize; pp];
    let mut ready: Vec<Vec<u64>> = orders.orders.iter().map(|o| vec![0; o.len()]).collect();
    let mut chain = vec![0u64; pp];
    loop {
        let mut progressed = false;
        let mut done = true;
        for k in 0..pp {
            let order = &orders.orders[k];
            while let Some(slot) = order.get(next[k]) {
                let j = next[k];
                // The pass this one receives from: (stage, position, transfer bytes).
                let from = match (slot.pass, virtual_of(k, slot.chunk)) {
                    (Pass::Forward, Some(v)) => v
                        .checked_sub(1)
                        .and_then(|u| locate(slot.chunk, u))
                        .map(|(s, c, bytes)| {
                            (
                                s,
                                orders.position(s, Pass::Forward, slot.microbatch, c),
                                bytes,
                            )
                        }),
                    (Pass::Backward, Some(v)) => v
                        .checked_add(1)
                        .and_then(|d| locate(slot.chunk, d))
                        .map(|(s, c, _)| {
                            let bytes = locate(slot.chunk, v).map_or(0, |a| a.2);
                            (
                                s,
                                orders.position(s, Pass::Backward, slot.microbatch, c),
                                bytes,
                            )
                        }),
                    _ => None,
                };
                let arrival = match from {
                    Some((s, Some(p), bytes)) => {
                        if p >= next[s] {
                            break; // not reached yet
                        }
                        let carry = if s == k {
                            0
                        } else {
                            let mine = &mut carried[k];
                            match mine.iter().find(|&&(from, b, _)| from == s && b == bytes) {
                                Some(&(_, _, ns)) => ns,
                                None => {
                                    let ns = transfer(s as u32, k as u32, bytes);
                                    mine.push((s, bytes, ns));
                                    ns
                                }
                            }
                        };
                        ready[s][p].saturating_add(carry)
                    }
                    _ => 0,
                };
                // A backward's recompute runs before its input arrives.
                let c = costs
                    .get(k)
                    .and_then(|c| c.get(j))
                    .copied()
                    .unwrap_or_default();
                let start = chain[k].saturating_add(c.ahead_ns).max(arrival);
                ready[k][j] = start.saturating_add(
                    c.compute_ns
                        .saturating_add(c.comms_ns)
                        .saturating_sub(c.ahead_ns),
                );
                chain[k] = start.saturating_add(c.on_rank().saturating_sub(c.ahead_ns));
                next[k] += 1;
                progressed = true;
            }
            if next[k] < order.len() {
                done = false;
            }
        }
        if done {
            return Some(chain);
        }
        if !progressed {
            return None;
        }
    }
}

/// Every stage's pass order of one pipeline shape, the backwards each splits (zero-bubble,
/// DualPipe) and which of its passes compute weight gradients; kept per thread for the
/// shapes asked most recently (a search asks each shape for many layouts).
struct Orders {
    orders: Vec<Vec<Slot>>,
    splits: Vec<BTreeSet<(u32, u32)>>,
    grads: Vec<Vec<bool>>,
    /// Each stage's forward and backward positions: `index[stage][(pass * chunks + chunk) *
    /// m + microbatch]` (`u32::MAX` where the order has none).
    index: Vec<Vec<u32>>,
    chunks: u32,
    microbatches: u32,
    /// Per stage, its [`StageTally`] by (buckets, chunks held), made when first asked for.
    tallies: RefCell<Vec<Vec<TallyEntry>>>,
    /// Per stage, its [`HeldAtForwards`] (the outer `None`: not made yet).
    held: RefCell<Vec<Option<Option<Rc<HeldAtForwards>>>>>,
}

/// (schedule, (pp, vpp, micro batches), extra warm-up passes).
type OrdersKey = (PipelineSchedule, (u32, u32, u32), u32);

/// A stage's [`StageTally`] for (buckets, chunks held).
type TallyEntry = ((bool, usize), Rc<StageTally>);

/// Pipeline shapes kept per thread.
const MAX_ORDERS: usize = 64;

thread_local! {
    /// Most recently used last.
    static ORDERS: RefCell<Vec<(OrdersKey, Rc<Orders>)>> = const { RefCell::new(Vec::new()) };
}

impl Orders {
    /// The [`StageTally`] of `stage` when the finalising backwards are cut into buckets
    /// (`buckets`) and the stage holds `chunks` chunks.
    fn tally(&self, stage: usize, buckets: bool, chunks: usize) -> Rc<StageTally> {
        let key = (buckets, chunks);
        let found = self
            .tallies
            .borrow()
            .get(stage)
            .and_then(|t| t.iter().find(|(k, _)| *k == key).map(|(_, t)| Rc::clone(t)));
        if let Some(t) = found {
            return t;
        }
        let order = self
            .orders
            .get(stage)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let grads = self.grads.get(stage).map(Vec::as_slice).unwrap_or_default();
        let t = Rc::new(StageTally::new(order, grads, buckets, chunks));
        if let Some(v) = self.tallies.borrow_mut().get_mut(stage) {
            v.push((key, Rc::clone(&t)));
        }
        t
    }

    /// The [`HeldAtForwards`] of `stage` (`None` where the order has none).
    fn held_at_forwards(&self, stage: usize) -> Option<Rc<HeldAtForwards>> {
        if let Some(Some(h)) = self.held.borrow().get(stage) {
            return h.clone();
        }
        let order = self.orders.get(stage)?;
        let grads = self.grads.get(stage)?;
        let h = HeldAtForwards::new(order, grads, self.chunks as usize).map(Rc::new);
        if let Some(e) = self.held.borrow_mut().get_mut(stage) {
            *e = Some(h.clone());
        }
        h
    }

    /// Where `stage` runs the forward or backward of (`mb`, `chunk`).
    fn position(&self, stage: usize, pass: Pass, mb: u32, chunk: u32) -> Option<usize> {
        let pass = match pass {
            Pass::Forward => 0,
            Pass::Backward => 1,
            Pass::Weight => return None,
        };
        if chunk >= self.chunks || mb >= self.microbatches {
            return None;
        }
        let at = (pass * self.chunks as usize + chunk as usize) * self.microbatches as usize
            + mb as usize;
        let i = *self.index.get(stage)?.get(at)?;
        (i != u32::MAX).then_some(i as usize)
    }

    fn of(
        schedule: PipelineSchedule,
        shape: (u32, u32, u32),
        extra_warmup: u32,
    ) -> Result<Rc<Orders>, ScheduleError> {
        let key = (schedule, shape, extra_warmup);
        let cached = ORDERS
            .try_with(|c| {
                let c = c.try_borrow().ok()?;
                c.iter()
                    .rev()
                    .find(|(k, _)| *k == key)
                    .map(|(_, o)| Rc::clone(o))
            })
            .ok()
            .flatten();
        if let Some(o) = cached {
            return Ok(o);
        }
        let orders = (0..shape.0)
            .map(|stage| stage_order(schedule, stage, shape, extra_warmup))
            .collect::<Result<Vec<_>, _>>()?;
        let splits: Vec<BTreeSet<(u32, u32)>> = orders.iter().map(|o| split_backwards(o)).collect();
        let grads = orders
            .iter()
            .zip(&splits)
            .map(|(o, split)| o.iter().map(|s| makes_grads(s, split)).collect())
            .collect();
        let chunks = orders
            .iter()
            .flatten()
            .map(|s| s.chunk + 1)
            .max()
            .unwrap_or(0);
        let m = shape.2;
        let index = orders
            .iter()
            .map(|o| {
                let mut index = vec![u32::MAX; 2 * chunks as usize * m as usize];
                for (i, s) in o.iter().enumerate() {
                    let pass = match s.pass {
                        Pass::Forward => 0,
                        Pass::Backward => 1,
                        Pass::Weight => continue,
                    };
                    let at = (pass * chunks as usize + s.chunk as usize) * m as usize
                        + s.microbatch as usize;
                    if let Some(x) = index.get_mut(at) {
                        *x = i as u32;
                    }
                }
                index
            })
            .collect();
        let tallies = RefCell::new(vec![Vec::new(); orders.len()]);
        let held = RefCell::new(vec![None; orders.len()]);
        let out = Rc::new(Orders {
            orders,
            splits,
            grads,
            index,
            chunks,
            microbatches: m,
            tallies,
            held,
        });
        let _ = ORDERS.try_with(|c| {
            if let Ok(mut c) = c.try_borrow_mut() {
                if c.len() >= MAX_ORDERS {
                    c.remove(0);
                }
                c.push((key, Rc::clone(&out)));
            }
        });
        Ok(out)
    }
}

/// Whether `slot` computes its chunk's weight gradients: a whole backward, or a W.
fn makes_grads(slot: &Slot, split: &BTreeSet<(u32, u32)>) -> bool {
    match slot.pass {
        Pass::Forward => false,
        Pass::Backward => !split.contains(&(slot.microbatch, slot.chunk)),
        Pass::Weight => true,
    }
}

/// A pass's compute over a run of segments, each phase priced once, and the collectives
/// chained after each segment's compute ([`chained_comms`]).
#[derive(Clone, Copy, Default)]
struct PassPrices {
    forward: u64,
    backward: u64,
    backward_input: u64,
    backward_weight: u64,
    recompute: u64,
    accumulate: u64,
    forward_comms: u64,
    backward_comms: u64,
    backward_input_comms: u64,
    recompute_comms: u64,
}

impl PassPrices {
    /// One segment's compute ops priced.
    fn compute(w: &ChunkWork, price: &dyn Fn(&ComputeOp) -> u64) -> PassPrices {
        PassPrices {
            forward: price(&w.forward.compute),
            backward: price(&w.backward.compute),
            backward_input: price(&w.backward_input.compute),
            backward_weight: price(&w.backward_weight),
            recompute: w.recompute.as_ref().map_or(0, |r| price(&r.compute)),
            accumulate: w.grad_accumulate.as_ref().map_or(0, price),
            ..PassPrices::default()
        }
    }

    /// One segment's chained collectives priced.
    fn comms(seg: &Seg, comms: &dyn Fn(&Seg, Phase) -> u64) -> PassPrices {
        PassPrices {
            forward_comms: comms(seg, Phase::Forward),
            backward_comms: comms(seg, Phase::Backward),
            backward_input_comms: comms(seg, Phase::BackwardInput),
            recompute_comms: if seg.work.recompute.is_some() {
                comms(seg, Phase::Recompute)
            } else {
                0
            },
            ..PassPrices::default()
        }
    }

    /// Times of a segment's forward, backward, backward-input and recompute passes, in that
    /// order (as [`RingWork`] and [`OverlappedWork`] hold them).
    fn of_passes([forward, backward, backward_input, recompute]: [u64; 4]) -> PassPrices {
        PassPrices {
            forward,
            backward,
            backward_input,
            recompute,
            ..PassPrices::default()
        }
    }

    fn plus(self, o: PassPrices) -> PassPrices {
        let add = u64::saturating_add;
        PassPrices {
            forward: add(self.forward, o.forward),
            backward: add(self.backward, o.backward),
            backward_input: add(self.backward_input, o.backward_input),
            backward_weight: add(self.backward_weight, o.backward_weight),
            recompute: add(self.recompute, o.recompute),
            accumulate: add(self.accumulate, o.accumulate),
            forward_comms: add(self.forward_comms, o.forward_comms),
            backward_comms: add(self.backward_comms, o.backward_comms),
            backward_input_comms: add(self.backward_input_comms, o.backward_input_comms),
            recompute_comms: add(self.recompute_comms, o.recompute_comms),
        }
    }
}

/// A ring pass's attention blocks, priced once per work. The schedule cuts the pass's compute
/// op into the rest of the pass and `steps + 1` attention blocks ([`ring_blocks`]), each
/// priced on its own (smaller blocks run less efficiently, and each launches its own
/// kernels); each transfer starts once the block it passes on has arrived, and the last block
/// waits for the last of them. So the pass takes at least
/// `rest + max(first + steps x other, steps x transfer + other)`.
#[derive(Clone, Copy, Debug)]
struct RingParts {
    /// `rest + first + steps x other`, less the whole op's price.
    split_ns: u64,
    /// `first + steps x other`.
    blocks_ns: u64,
    other_ns: u64,
    steps: u64,
    bytes: u64,
}

impl RingParts {
    /// `None` without a ring.
    fn of(p: &PassWork, price: &dyn Fn(&ComputeOp) -> u64) -> Option<RingParts> {
        RingParts::of_op(&p.compute, p.ring, price)
    }

    /// As [`RingParts::of`], for `op` run with `ring`.
    fn of_op(
        op: &ComputeOp,
        ring: Option<crate::workload::RingPass>,
        price: &dyn Fn(&ComputeOp) -> u64,
    ) -> Option<RingParts> {
        let r = ring.filter(|r| r.steps > 0)?;
        let (rest, first, other) = ring_blocks(op, r.steps)?;
        let steps = u64::from(r.steps);
        let other_ns = price(&other);
        let blocks_ns = price(&first).saturating_add(steps.saturating_mul(other_ns));
        Some(RingParts {
            split_ns: price(&rest)
                .saturating_add(blocks_ns)
                .saturating_sub(price(op)),
            blocks_ns,
            other_ns,
            steps,
            bytes: r.bytes,
        })
    }

    /// What the pass takes beyond its compute op priced whole (which [`PassPrices::compute`]
    /// counts), with each transfer taking `transfer(bytes)`.
    fn excess_ns(&self, transfer: &dyn Fn(u64) -> u64) -> u64 {
        let chain = self
            .steps
            .saturating_mul(transfer(self.bytes))
            .saturating_add(self.other_ns);
        self.split_ns
            .saturating_add(chain.saturating_sub(self.blocks_ns))
    }
}

/// A pass under `tp_comm_overlap`, priced as the work holds it and as the emitter runs it
/// ([`tp_overlapped_pass`]: GEMMs cut into chunks, on the SMs the overlap leaves), with the
/// hidden chunks of its collectives, which run on the tp stream beside the op from the pass's
/// start.
#[derive(Clone, Debug)]
struct OverlappedPass {
    held_ns: u64,
    held_ring: Option<RingParts>,
    run_ns: u64,
    run_ring: Option<RingParts>,
    hidden: Vec<CommCall>,
}

impl OverlappedPass {
    /// `None` where the pass overlaps nothing.
    fn of(
        scenario: &Scenario,
        tp: u32,
        phase: Phase,
        p: &PassWork,
        price: &dyn Fn(&ComputeOp) -> u64,
    ) -> Option<OverlappedPass> {
        let o = tp_overlapped_pass(scenario, tp, phase, &p.compute, &p.comms)?;
        Some(OverlappedPass {
            held_ns: price(&p.compute),
            held_ring: RingParts::of(p, price),
            run_ns: price(&o.op),
            run_ring: RingParts::of_op(&o.op, p.ring, price),
            hidden: o.hidden,
        })
    }

    /// What the pass takes beyond its op priced as the work holds it and its ring parts
    /// (which [`PassPrices::compute`] and [`RingWork::excess`] count): the op as it runs
    /// (`G`), and the hidden chunks (`T`, each priced by `collective`) beside it. Compute runs
    /// `1 + s` times slower while its rank communicates (`s`: [`Prices::overlap_slowdown`])
    /// and the pass's exposed chunks wait for both, so from the pass's start to them takes at
    /// least `G + T s / (1 + s)`, or `T` where `T > G (1 + s)`. The slowdown is counted only
    /// for a pass without ring attention, whose compute runs without a gap (a ring pass's
    /// blocks may wait for a transfer, and the hidden chunks may run in that wait); a
    /// nanosecond is left for the engine's rounding.
    fn excess_ns(
        &self,
        transfer: &dyn Fn(u64) -> u64,
        collective: &dyn Fn(&CommCall) -> u64,
        slowdown: f64,
    ) -> u64 {
        let ring = |r: Option<RingParts>| r.map_or(0, |r| r.excess_ns(transfer));
        let held = self.held_ns.saturating_add(ring(self.held_ring));
        let g = self.run_ns;
        let s = if slowdown.is_finite() {
            slowdown.max(0.0)
        } else {
            0.0
        };
        let slowed = if self.run_ring.is_some() || s == 0.0 {
            0
        } else {
            let t = self
                .hidden
                .iter()
                .map(collective)
                .fold(0, u64::saturating_add);
            if t as f64 <= g as f64 * (1.0 + s) {
                ((t as f64 * s / (1.0 + s)).floor() as u64).saturating_sub(1)
            } else {
                t - g
            }
        };
        g.saturating_add(ring(self.run_ring))
            .saturating_add(slowed)
            .saturating_sub(held)
    }
}

/// The [`OverlappedPass`] of a segment's forward, backward, backward-input and recompute
/// passes.
#[derive(Clone, Debug)]
struct OverlappedWork([Option<OverlappedPass>; 4]);

impl OverlappedWork {
    fn of(
        scenario: &Scenario,
        tp: u32,
        w: &ChunkWork,
        price: &dyn Fn(&ComputeOp) -> u64,
    ) -> OverlappedWork {
        let pass = |phase, p| OverlappedPass::of(scenario, tp, phase, p, price);
        OverlappedWork([
            pass(Phase::Forward, &w.forward),
            pass(Phase::Backward, &w.backward),
            pass(Phase::BackwardInput, &w.backward_input),
            w.recompute.as_ref().and_then(|r| pass(Phase::Recompute, r)),
        ])
    }

    /// What `tp_comm_overlap` adds to each pass beyond its compute and ring parts.
    fn excess(
        &self,
        transfer: &dyn Fn(u64) -> u64,
        collective: &dyn Fn(&CommCall) -> u64,
        slowdown: f64,
    ) -> PassPrices {
        PassPrices::of_passes(self.0.each_ref().map(|o| {
            o.as_ref()
                .map_or(0, |o| o.excess_ns(transfer, collective, slowdown))
        }))
    }
}

/// The ring parts of a segment's forward, backward, backward-input and recompute passes.
#[derive(Clone, Copy, Debug)]
struct RingWork([Option<RingParts>; 4]);

impl RingWork {
    fn of(w: &ChunkWork, price: &dyn Fn(&ComputeOp) -> u64) -> RingWork {
        RingWork([
            RingParts::of(&w.forward, price),
            RingParts::of(&w.backward, price),
            RingParts::of(&w.backward_input, price),
            w.recompute.as_ref().and_then(|r| RingParts::of(r, price)),
        ])
    }

    /// What ring context parallelism adds to each pass beyond its compute.
    fn excess(&self, transfer: &dyn Fn(u64) -> u64) -> PassPrices {
        PassPrices::of_passes(self.0.map(|r| r.map_or(0, |r| r.excess_ns(transfer))))
    }
}

/// One chunk's passes priced: over its segments, and over its bucket cut when it has one.
struct ChunkPrices {
    segs: PassPrices,
    final_segs: Option<PassPrices>,
}

impl ChunkPrices {
    fn new(c: &ChunkPlan, prices: &mut dyn FnMut(&[Seg]) -> PassPrices) -> ChunkPrices {
        ChunkPrices {
            segs: prices(&c.segs),
            final_segs: c.final_segs.as_deref().map(prices),
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

/// One pass of a stage's order, priced: its compute ops, the collectives the next pass's
/// first compute waits for (0 for the last pass), and the gradient accumulation after it,
/// which runs beside those collectives.
#[derive(Clone, Copy, Debug, Default)]
struct SlotCost {
    compute_ns: u64,
    comms_ns: u64,
    accumulate_ns: u64,
    /// The part of `compute_ns + comms_ns` that may run before the pass's input arrives from
    /// another stage (a backward's recompute and its collectives), or more.
    ahead_ns: u64,
}

impl SlotCost {
    /// What the pass adds to its rank's chain of compute and chained collectives.
    fn on_rank(&self) -> u64 {
        self.compute_ns
            .saturating_add(self.comms_ns.max(self.accumulate_ns))
    }
}

/// Every compute op of one stage's passes, priced, slot by slot: each forward, recompute,
/// backward (input and weight halves where it is split) of each segment, the gradient
/// accumulation after every gradient pass of a chunk but its first, and the collectives
/// chained after each pass but the last.
fn slot_costs(
    chunks: &[ChunkPrices],
    order: &[Slot],
    grads: &[bool],
    buckets: bool,
) -> Vec<SlotCost> {
    slot_classes(order, grads, buckets, chunks.len())
        .into_iter()
        .map(|c| c.cost(chunks))
        .collect()
}

/// What a slot of a stage's order is, as far as its cost goes ([`SlotClass::cost`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SlotClass {
    chunk: u32,
    kind: SlotKind,
    /// The chunk's last gradient pass, cut into buckets.
    finalising: bool,
    /// A gradient pass of a chunk after its first: it accumulates into the gradients.
    accumulates: bool,
    /// The order's last pass: nothing waits for its chained collectives.
    last: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotKind {
    Forward,
    /// A backward whose weight gradient is a later W: the input-gradient half.
    BackwardInput,
    Backward,
    Weight,
}

/// The class of each slot of `order` (`grads`: which slots make weight gradients), for a
/// stage holding `chunks` chunks; the last gradient pass of each chunk finalises it when
/// `buckets`.
fn slot_classes(order: &[Slot], grads: &[bool], buckets: bool, chunks: usize) -> Vec<SlotClass> {
    let mut final_slot = vec![None; chunks];
    for (i, (slot, &g)) in order.iter().zip(grads).enumerate() {
        if g {
            if let Some(f) = final_slot.get_mut(slot.chunk as usize) {
                *f = Some(i);
            }
        }
    }
    let mut first_grads = vec![false; chunks];
    order
        .iter()
        .enumerate()
        .map(|(i, slot)| {
            let grads = grads.get(i).copied().unwrap_or(false);
            let kind = match slot.pass {
                Pass::Forward => SlotKind::Forward,
                Pass::Backward if !grads => SlotKind::BackwardInput,
                Pass::Backward => SlotKind::Backward,
                Pass::Weight => SlotKind::Weight,
            };
            let mut accumulates = false;
            if grads {
                if let Some(seen) = first_grads.get_mut(slot.chunk as usize) {
                    accumulates = *seen;
                    *seen = true;
                }
            }
            SlotClass {
                chunk: slot.chunk,
                kind,
                finalising: buckets && final_slot.get(slot.chunk as usize) == Some(&Some(i)),
                accumulates,
                last: i + 1 == order.len(),
            }
        })
        .collect()
}

impl SlotClass {
    /// The slot's compute, its chained collectives and its gradient accumulation, priced with
    /// its chunk's prices (nothing for a chunk the stage does not hold).
    fn cost(self, chunks: &[ChunkPrices]) -> SlotCost {
        let Some(cp) = chunks.get(self.chunk as usize) else {
            return SlotCost::default();
        };
        let (compute_ns, comms, recompute) = match self.kind {
            SlotKind::Forward => (cp.segs.forward, cp.segs.forward_comms, (0, 0)),
            SlotKind::BackwardInput => {
                let p = cp.segs;
                (
                    p.recompute.saturating_add(p.backward_input),
                    p.recompute_comms.saturating_add(p.backward_input_comms),
                    (p.recompute, p.recompute_comms),
                )
            }
            SlotKind::Backward => {
                let p = cp.segs_for(self.finalising);
                (
                    p.recompute.saturating_add(p.backward),
                    p.recompute_comms.saturating_add(p.backward_comms),
                    (p.recompute, p.recompute_comms),
                )
            }
            SlotKind::Weight => (cp.segs_for(self.finalising).backward_weight, 0, (0, 0)),
        };
        // The chained collectives of the last pass are not counted (nothing waits for them).
        let ahead_ns = if self.last {
            recompute.0
        } else {
            recompute.0.saturating_add(recompute.1)
        };
        let accumulate_ns = if self.accumulates {
            cp.segs_for(self.finalising).accumulate
        } else {
            0
        };
        SlotCost {
            compute_ns,
            comms_ns: if self.last { 0 } else { comms },
            accumulate_ns,
            ahead_ns,
        }
    }
}

/// A stage's order as the count of each of its slot classes, whole and before its last
/// backward of chunk 0: the sums the cheap bound takes of [`slot_costs`], in a term per class
/// instead of one per slot. Sums of saturating terms, so the same whatever their order.
struct StageTally {
    all: Vec<(SlotClass, u64)>,
    /// The classes before the last backward of chunk 0, and that backward's.
    head: Option<(Vec<(SlotClass, u64)>, SlotClass)>,
}

impl StageTally {
    fn new(order: &[Slot], grads: &[bool], buckets: bool, chunks: usize) -> StageTally {
        let classes = slot_classes(order, grads, buckets, chunks);
        let count = |classes: &[SlotClass]| {
            let mut counts: Vec<(SlotClass, u64)> = Vec::new();
            for c in classes {
                match counts.iter_mut().find(|(k, _)| k == c) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((*c, 1)),
                }
            }
            counts
        };
        let head = order
            .iter()
            .rposition(|s| s.chunk == 0 && s.pass == Pass::Backward)
            .and_then(|last| Some((count(classes.get(..last)?), *classes.get(last)?)));
        StageTally {
            all: count(&classes),
            head,
        }
    }

    fn sum(counts: &[(SlotClass, u64)], chunks: &[ChunkPrices]) -> u64 {
        counts.iter().fold(0u64, |t, (c, n)| {
            t.saturating_add(n.saturating_mul(c.cost(chunks).on_rank()))
        })
    }

    /// What the stage's passes add to its rank's chain ([`SlotCost::on_rank`], summed).
    fn passes(&self, chunks: &[ChunkPrices]) -> u64 {
        Self::sum(&self.all, chunks)
    }

    /// The same sum before the last backward of chunk 0, and that backward's compute and
    /// chained collectives.
    fn to_drain(&self, chunks: &[ChunkPrices]) -> Option<(u64, u64)> {
        self.head.as_ref().map(|(head, last)| {
            let c = last.cost(chunks);
            (
                Self::sum(head, chunks),
                c.compute_ns.saturating_add(c.comms_ns),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{Attention, Gemms};
    use crate::workload::RingPass;

    /// A forward pass of two layers whose attention is cut into 4 ring blocks, priced as
    /// 1 ns per 1,000 FLOPs plus 500 ns per kernel (so a block costs more than its share of
    /// the whole op).
    fn pass(ring: Option<RingPass>) -> PassWork {
        PassWork {
            compute: ComputeOp {
                phase: Phase::Forward,
                dtype: crate::scenario::Precision::Bf16,
                gemms: Gemms::default(),
                attention: Some(Attention {
                    batch: 1,
                    heads: 8,
                    head_dim: 128,
                    q_len: 4096,
                    kv_len: 4096,
                    causal: true,
                    backward: false,
                    count: 2,
                    window: 0,
                    windowed: 0,
                    sinks: false,
                }),
                flops: 8_000_000_000,
                memory_bytes: 0,
                kernels: 6,
                sms_reserved: 0,
                host_syncs: Default::default(),
            },
            comms: Vec::new(),
            ring,
        }
    }

    fn price(op: &ComputeOp) -> u64 {
        op.flops / 1_000 + 500 * u64::from(op.kernels)
    }

    /// Every pipeline schedule, the interleaved one with 2, 3 and 4 chunks a rank.
    const SCHEDULES: [(PipelineSchedule, u32); 7] = [
        (PipelineSchedule::Gpipe, 1),
        (PipelineSchedule::OneFOneB, 1),
        (PipelineSchedule::Interleaved1F1B, 2),
        (PipelineSchedule::Interleaved1F1B, 3),
        (PipelineSchedule::Interleaved1F1B, 4),
        (PipelineSchedule::ZeroBubble, 1),
        (PipelineSchedule::DualPipe, 1),
    ];

    /// A stage's slot classes counted once ([`StageTally`]) give the sums the bound takes of
    /// every slot's cost: whole, and before the last backward of chunk 0, with that backward's
    /// own. Every schedule, several shapes, buckets or not, a stage holding all its chunks or
    /// one fewer, random prices.
    #[test]
    fn a_stage_tally_sums_as_its_slots_do() {
        let mut rng = crate::rng::Rng::new(11, 0);
        let prices = |rng: &mut crate::rng::Rng| {
            let mut p = || rng.next_u64() % 1_000_000;
            PassPrices {
                forward: p(),
                backward: p(),
                backward_input: p(),
                backward_weight: p(),
                recompute: p(),
                accumulate: p(),
                forward_comms: p(),
                backward_comms: p(),
                backward_input_comms: p(),
                recompute_comms: p(),
            }
        };
        let mut checked = 0;
        for (schedule, vpp) in SCHEDULES {
            for pp in [2u32, 4] {
                for m in [pp, 2 * pp, 3 * pp + 2] {
                    for extra in [0, 1] {
                        let Ok(orders) = Orders::of(schedule, (pp, vpp, m), extra) else {
                            continue;
                        };
                        for (stage, (order, grads)) in
                            orders.orders.iter().zip(&orders.grads).enumerate()
                        {
                            for held in [orders.chunks as usize, orders.chunks as usize - 1] {
                                let chunks: Vec<ChunkPrices> = (0..held)
                                    .map(|c| ChunkPrices {
                                        segs: prices(&mut rng),
                                        final_segs: (c % 2 == 0).then(|| prices(&mut rng)),
                                    })
                                    .collect();
                                for buckets in [false, true] {
                                    let slots = slot_costs(&chunks, order, grads, buckets);
                                    let sum = |s: &[SlotCost]| {
                                        s.iter().fold(0u64, |t, c| t + c.on_rank())
                                    };
                                    let to_drain = order
                                        .iter()
                                        .rposition(|s| s.chunk == 0 && s.pass == Pass::Backward)
                                        .map(|l| {
                                            (
                                                sum(&slots[..l]),
                                                slots[l].compute_ns + slots[l].comms_ns,
                                            )
                                        });
                                    let tally = orders.tally(stage, buckets, held);
                                    let what = format!(
                                        "{schedule:?} pp {pp} vpp {vpp} m {m} extra {extra} \
                                         stage {stage} holding {held}, buckets {buckets}"
                                    );
                                    assert_eq!(tally.passes(&chunks), sum(&slots), "{what}");
                                    assert_eq!(tally.to_drain(&chunks), to_drain, "{what}");
                                    checked += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 300, "{checked} stages checked");
    }

    /// The saved-activation peak read from a stage's forwards counted once
    /// ([`HeldAtForwards`]) is the pass over its order's: every schedule, several shapes,
    /// random bytes a chunk and random gathered units.
    #[test]
    fn the_held_forwards_give_the_saved_peak_of_the_pass_over_the_order() {
        let mut rng = crate::rng::Rng::new(12, 0);
        let mut checked = 0;
        for (schedule, vpp) in SCHEDULES {
            for pp in [2u32, 4, 8] {
                for m in [pp, 2 * pp, 3 * pp + 1] {
                    let Ok(orders) = Orders::of(schedule, (pp, vpp, m), 0) else {
                        continue;
                    };
                    for (stage, (order, grads)) in
                        orders.orders.iter().zip(&orders.grads).enumerate()
                    {
                        let held = orders.held_at_forwards(stage).expect("a valid order");
                        for _ in 0..4 {
                            let n = orders.chunks as usize;
                            let mut draw = || rng.next_u64() % (1 << 30);
                            let per_chunk: Vec<u64> = (0..n).map(|_| draw()).collect();
                            let units: Vec<u64> = (0..n).map(|_| draw() / 8).collect();
                            assert_eq!(
                                held.peak_bytes(&per_chunk, &units),
                                Some(saved_peak_bytes(&per_chunk, order, grads, &units)),
                                "{schedule:?} pp {pp} vpp {vpp} m {m} stage {stage}"
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 200, "{checked} checked");
    }

    /// The excess is the blocks' own prices over the whole op's while the transfers hide
    /// behind them, and the chain of transfers (plus the last block) once they do not; no
    /// ring, no excess.
    #[test]
    fn ring_excess_is_the_blocks_or_the_transfer_chain_over_the_whole_op() {
        let ring = RingPass {
            steps: 3,
            bytes: 1 << 20,
        };
        let p = pass(Some(ring));
        let (rest, first, other) = ring_blocks(&p.compute, 3).unwrap();
        let whole = price(&p.compute);
        let blocks = price(&first) + 3 * price(&other);
        assert!(
            price(&rest) + blocks > whole,
            "blocks cost more than the whole op"
        );
        let excess = |p: &PassWork, transfer: &dyn Fn(u64) -> u64| {
            RingParts::of(p, &price).map_or(0, |r| r.excess_ns(transfer))
        };
        let hidden = excess(&p, &|_| 1);
        assert_eq!(hidden, price(&rest) + blocks - whole);
        let slow = 10_000_000;
        let exposed = excess(&p, &|bytes| {
            assert_eq!(bytes, 1 << 20);
            slow
        });
        assert_eq!(exposed, price(&rest) + 3 * slow + price(&other) - whole);
        assert_eq!(excess(&pass(None), &|_| slow), 0);
    }
}
