//! Workload sizing shared between the layouts of a sweep. The work of a layer range
//! (`workload::layers_work`: GEMM shapes, collectives, activation sizes) depends on the
//! scenario's model, tensor/context/expert parallelism, micro batch, recompute and precision,
//! and on the range itself, but not on the pipeline layout that asked (its stage, chunk or
//! virtual stage), the pipeline depth and schedule, the data-parallel size or the ZeRO
//! stage. A search visits each combination of the former with dozens of the latter, and
//! pipelines of the same chunk size ask for the same ranges, so each thread keeps the answers
//! of its recent scenarios and sizes a layer range once per combination instead of once per
//! layout. Everything else (state bytes, the optimizer step) is asked of the workload model
//! every time. The cached answers are what the model returned, shared (`Rc`), so the
//! schedules are exactly those `schedule::generate` builds.

use crate::plan::{ChunkLayout, Plan};
use crate::profile::bundled::Pricing;
use crate::scenario::{PipelineSchedule, Scenario};
use crate::schedule::{
    ComputeOp, PriceMemo, Program, Schedule, ScheduleError, Sizes, WorkloadSizes,
};
use crate::workload::routing::ExpertLoad;
use crate::workload::{ChunkWork, LayerCounts, ParamCount, RangeKey, StateBytes};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

/// Everything `layers_work` is asked besides the scenario, as far as its answer depends on
/// it: not the range's position, only what its layers are ([`RangeKey`]), so the layers of a
/// uniform model share one answer.
type Query = RangeKey;

/// A layer range's parameters depend on what it holds: its dense and MoE layers, the
/// embedding and the head.
type ParamsQuery = (LayerCounts, bool, bool);

/// What one scenario's layouts were answered.
#[derive(Default)]
struct Answers {
    work: BTreeMap<Query, Rc<ChunkWork>>,
    params: BTreeMap<ParamsQuery, ParamCount>,
    /// The bound's compute prices of that work, under the cost model of `priced_by` (which
    /// reads none of the fields [`key_of`] normalises).
    prices: PriceMemo,
    priced_by: Pricing,
}

/// The answers for one scenario (as [`key_of`] normalises it).
struct Cache {
    scenario: Scenario,
    answers: Answers,
}

/// Scenarios kept per thread: a search's inner loops (micro batch x recompute x ZeRO) give
/// a dozen keys per tensor-parallel size.
const MAX_SCENARIOS: usize = 16;

thread_local! {
    /// Most recently used first.
    static CACHE: RefCell<Vec<Cache>> = const { RefCell::new(Vec::new()) };
}

/// `scenario` as the cache keys it: the fields sizing does not read (pipeline depth,
/// virtual stages and schedule, data-parallel size, ZeRO stage and HSDP degree, the
/// data-parallel overlaps, offload) set to fixed values.
fn key_of(scenario: &Scenario) -> Scenario {
    let mut key = scenario.clone();
    let t = &mut key.training;
    t.overlap_grad_reduce = true;
    t.overlap_param_gather = true;
    t.offload = crate::scenario::Offload::None;
    let p = &mut key.parallel;
    p.pp = 1;
    p.dp = 1;
    p.vpp = 1;
    p.zero = 0;
    p.fsdp_degree = None;
    p.schedule = PipelineSchedule::OneFOneB;
    p.layer_partition = None;
    p.account_for_embedding_in_pipeline_split = false;
    p.account_for_loss_in_pipeline_split = false;
    key
}

/// This thread's cached answers for `key`, taken out of the cache (empty if none).
fn take(key: &Scenario) -> Answers {
    CACHE
        .try_with(|c| {
            c.try_borrow_mut().ok().and_then(|mut c| {
                let i = c.iter().position(|e| e.scenario == *key)?;
                let e = c.remove(i);
                Some(e.answers)
            })
        })
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Puts answers back as the most recent, dropping the least recent beyond the limit.
fn put(scenario: Scenario, answers: Answers) {
    let _ = CACHE.try_with(|c| {
        if let Ok(mut c) = c.try_borrow_mut() {
            c.insert(0, Cache { scenario, answers });
            c.truncate(MAX_SCENARIOS);
        }
    });
}

/// [`crate::schedule::generate`] for `scenario` and its `plan`, with `layers_work` answered
/// from this thread's cache when earlier layouts sized the same ranges of the same scenario
/// up to the fields sizing ignores.
pub(crate) fn generate(scenario: &Scenario, plan: &Plan) -> Result<Schedule, ScheduleError> {
    with_cache(scenario, plan, |sizes, step| {
        crate::schedule::generate_with(scenario, plan, sizes, step)
    })
}

/// [`generate`]'s programs handed to `each` one at a time, as
/// [`crate::schedule::generate_each`] does.
pub(crate) fn generate_each<E: From<ScheduleError>>(
    scenario: &Scenario,
    plan: &Plan,
    each: impl FnMut(Program) -> Result<(), E>,
) -> Result<(), E> {
    with_cache(scenario, plan, |sizes, step| {
        crate::schedule::generate_each(scenario, plan, sizes, step, each)
    })
}

/// [`crate::schedule::step_lower_bounds`] of `scenario`'s representative step, each op
/// priced by the cost model the sweep simulates it with (`pricing`'s; collectives on the
/// first rank of each stage, in that rank's groups, as the engine prices them when no flow
/// network times them), with `layers_work` and the compute prices of its answers taken from
/// this thread's cache as [`generate`] takes them. `full`: with the pass chain and the
/// data-parallel stream (the full bound) or without them (a cheaper, lower one).
pub(crate) fn lower_bounds(
    scenario: &Scenario,
    plan: &Plan,
    pricing: &Pricing,
    memory_limit_bytes: u64,
    full: bool,
) -> Result<crate::schedule::Bounds, ScheduleError> {
    let analytic_cost = super::cost_model(scenario, pricing).map_err(ScheduleError::Unsupported)?;
    let cost: &dyn crate::cost::CostModel = &analytic_cost;
    let compute = |op: &ComputeOp| cost.compute_ns(0, op);
    let analytic = scenario.cluster.topology.model != crate::scenario::NetworkModel::Flow;
    // Each stage's first rank: the rank the bound prices a stage's transfers from.
    let first_rank = |stage: u32| {
        plan.rank_of(crate::plan::Coords {
            pp: stage,
            ..Default::default()
        })
    };
    // The groups of each stage's first rank, each built once (a bound asks for them per pass
    // and segment).
    let kinds = crate::plan::GroupKind::ALL.len();
    let groups = RefCell::new(vec![None; (plan.pp() as usize).saturating_mul(kinds)]);
    let collective = |stage: u32, c: &crate::workload::CommCall| {
        if !analytic {
            return 0;
        }
        let slot = (stage as usize) * kinds + c.group.index();
        let mut groups = groups.borrow_mut();
        let Some(group) = groups.get_mut(slot) else {
            return 0;
        };
        let group = group.get_or_insert_with(|| plan.group_containing(first_rank(stage), c.group));
        cost.collective_ns(c.kind, group, c.bytes, c.calls)
    };
    let p2p = |from: u32, to: u32, bytes: u64| {
        if !analytic {
            return 0;
        }
        cost.p2p_ns(plan, first_rank(from), first_rank(to), bytes)
    };
    // The engine's ring transfers into a rank come from the previous rank of its cp group.
    let cp_ring = |stage: u32, bytes: u64| {
        if !analytic {
            return 0;
        }
        let rank = first_rank(stage);
        let prev = crate::schedule::Peer::CpPrev.rank_for(plan, rank);
        cost.p2p_ns(plan, prev, rank, bytes)
    };
    let host = |work: crate::cost::HostWork| cost.host_ns(work);
    let prices = crate::schedule::Prices {
        compute: &compute,
        collective: &collective,
        p2p: &p2p,
        cp_ring: &cp_ring,
        host: &host,
        overlap_slowdown: cost.overlap_compute_slowdown(),
    };
    with_cache(scenario, plan, |sizes, step| {
        let mut memo = sizes.prices.take();
        if !super::same_pricing(&sizes.priced_by.borrow(), pricing) {
            memo = PriceMemo::default();
            sizes.priced_by.replace(pricing.clone());
        }
        let b = crate::schedule::step_lower_bounds(
            scenario,
            plan,
            sizes,
            step,
            &prices,
            &mut memo,
            memory_limit_bytes,
            full,
        );
        sizes.prices.replace(memo);
        b
    })
}

/// Runs `f` with the caching sizes provider of `scenario` and the step it generates.
fn with_cache<T>(scenario: &Scenario, plan: &Plan, f: impl FnOnce(&Shared, u64) -> T) -> T {
    let key = key_of(scenario);
    let answers = take(&key);
    let sizes = Shared {
        inner: WorkloadSizes { scenario, plan },
        work: RefCell::new(answers.work),
        params: RefCell::new(answers.params),
        prices: RefCell::new(answers.prices),
        priced_by: RefCell::new(answers.priced_by),
    };
    let step = crate::schedule::representative_step(scenario);
    let out = f(&sizes, step);
    let answers = Answers {
        work: sizes.work.into_inner(),
        params: sizes.params.into_inner(),
        prices: sizes.prices.into_inner(),
        priced_by: sizes.priced_by.into_inner(),
    };
    put(key, answers);
    out
}

/// The workload model with remembered `layers_work` and `layers_params` answers.
struct Shared<'a> {
    inner: WorkloadSizes<'a>,
    work: RefCell<BTreeMap<Query, Rc<ChunkWork>>>,
    params: RefCell<BTreeMap<ParamsQuery, ParamCount>>,
    prices: RefCell<PriceMemo>,
    priced_by: RefCell<Pricing>,
}

/// `map`'s answer for `key`, or `answer()` remembered in it.
fn remembered<K: Ord, V: Clone>(
    map: &RefCell<BTreeMap<K, V>>,
    key: K,
    answer: impl FnOnce(&K) -> V,
) -> V {
    if let Some(v) = map.try_borrow().ok().and_then(|m| m.get(&key).cloned()) {
        return v;
    }
    let v = answer(&key);
    if let Ok(mut m) = map.try_borrow_mut() {
        m.insert(key, v.clone());
    }
    v
}

impl Sizes for Shared<'_> {
    fn layers_work(
        &self,
        layout: &ChunkLayout,
        first_layer: u32,
        num_layers: u32,
        embedding: bool,
        head: bool,
        load: ExpertLoad,
    ) -> Rc<ChunkWork> {
        let query = RangeKey::of(
            self.inner.scenario,
            layout,
            (first_layer, num_layers),
            (embedding, head),
            load,
        );
        remembered(&self.work, query, |key| {
            Rc::new(crate::workload::range_work(self.inner.scenario, key))
        })
    }

    fn layers_params(
        &self,
        _layout: &ChunkLayout,
        first_layer: u32,
        num_layers: u32,
        embedding: bool,
        head: bool,
    ) -> ParamCount {
        let layers = LayerCounts::of(
            &self.inner.scenario.model,
            u64::from(first_layer),
            u64::from(num_layers),
        );
        remembered(
            &self.params,
            (layers, embedding, head),
            |&(layers, e, h)| crate::workload::counted_params(self.inner.scenario, layers, e, h),
        )
    }

    fn state_bytes(&self, stage: u32) -> StateBytes {
        let (s, plan) = (self.inner.scenario, self.inner.plan);
        let params = crate::workload::stage_params_by(plan, stage, |c| {
            self.layers_params(c, c.first_layer, c.num_layers, c.has_embedding, c.has_head)
        });
        crate::workload::state_bytes_of(s, plan, stage, params)
    }

    fn optimizer_step(&self, stage: u32) -> ComputeOp {
        self.inner.optimizer_step(stage)
    }

    fn offloaded_step(&self, stage: u32) -> Option<crate::workload::OffloadedStep> {
        self.inner.offloaded_step(stage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Recompute;
    use crate::testing::small_scenario;

    /// Answers cached for this thread's `key`, if any.
    fn cached(key: &Scenario) -> Option<usize> {
        CACHE.with(|c| {
            c.borrow()
                .iter()
                .find(|e| e.scenario == *key)
                .map(|e| e.answers.work.len())
        })
    }

    /// Layers alike (the same kind, recomputed or not, windowed or not) share one answer
    /// wherever they sit, and that answer is the workload model's for each of them; layers
    /// of another kind get their own.
    #[test]
    fn alike_layers_share_one_answer() {
        use crate::scenario::{Moe, SlidingWindow};
        let mut s = small_scenario(1, 1, 1, 8);
        s.model.moe = Some(Moe::uniform(4, 2, 2, 256));
        s.model.sliding_window = Some(SlidingWindow {
            tokens: 64,
            every: 4,
        });
        let plan = Plan::new(&s).unwrap();
        let layout = plan.chunks[0][0].clone();
        let load = crate::workload::routing::LoadClasses::new(&s).busiest();
        let shared = Shared {
            inner: WorkloadSizes {
                scenario: &s,
                plan: &plan,
            },
            work: RefCell::default(),
            params: RefCell::default(),
            prices: RefCell::default(),
            priced_by: RefCell::default(),
        };
        let one = |first: u32| shared.layers_work(&layout, first, 1, false, false, load);
        let model = |first: u32| {
            shared
                .inner
                .layers_work(&layout, first, 1, false, false, load)
        };
        // Layers 0 and 4: MoE and windowed; 2 and 6: MoE, not windowed; the odd ones dense.
        assert!(Rc::ptr_eq(&one(0), &one(4)));
        assert!(Rc::ptr_eq(&one(2), &one(6)));
        assert!(Rc::ptr_eq(&one(1), &one(5)));
        assert!(Rc::ptr_eq(&one(3), &one(5)));
        for (a, b) in [(0, 2), (1, 2), (0, 1)] {
            assert!(!Rc::ptr_eq(&one(a), &one(b)), "layers {a} and {b}");
            assert_ne!(one(a), one(b), "layers {a} and {b}");
        }
        for first in 0..8 {
            assert_eq!(*one(first), *model(first), "layer {first}");
            for n in 1..=8 - first {
                let ends = (first == 0, first + n == 8);
                assert_eq!(
                    shared.layers_params(&layout, first, n, ends.0, ends.1),
                    shared
                        .inner
                        .layers_params(&layout, first, n, ends.0, ends.1),
                    "layers {first}..{}",
                    first + n
                );
            }
        }
        assert_eq!(shared.state_bytes(0), shared.inner.state_bytes(0));
    }

    /// Schedules sized from the cache (filled by other pipeline layouts, data-parallel sizes,
    /// schedules and ZeRO stages of the same scenario, with other scenarios in between)
    /// equal `schedule::generate`'s, and the layouts whose layer ranges were all asked before
    /// are answered from the cache alone.
    #[test]
    fn cached_sizes_give_the_generated_schedules() {
        let base = small_scenario(2, 2, 2, 8); // 16 layers on 8 GPUs
        let layout = |pp: u32, dp: u32, vpp: u32, zero: u8, schedule, recompute| {
            let mut s = base.clone();
            s.parallel.pp = pp;
            s.parallel.dp = dp;
            s.parallel.vpp = vpp;
            s.parallel.zero = zero;
            s.parallel.schedule = schedule;
            s.training.recompute = recompute;
            s
        };
        use PipelineSchedule::{Gpipe, Interleaved1F1B, OneFOneB};
        let (none, full) = (Recompute::None, Recompute::Full);
        // (layout, whether every range it asks was asked before under the same key)
        let layouts = [
            (layout(2, 2, 1, 0, OneFOneB, none), false),
            // ZeRO 3 gathers layer by layer (the framework's FSDP unit): one-layer ranges.
            (layout(2, 2, 1, 3, Gpipe, none), false),
            (layout(2, 2, 2, 1, Interleaved1F1B, none), false), // chunks of 4 layers
            (layout(4, 1, 1, 2, OneFOneB, none), true),         // stages of 4 layers
            // Offload and the data-parallel overlaps do not change what a range costs.
            (
                {
                    let mut s = layout(4, 1, 1, 2, OneFOneB, none);
                    s.training.offload = crate::scenario::Offload::Optimizer;
                    s.training.overlap_grad_reduce = false;
                    s.training.overlap_param_gather = false;
                    s
                },
                true,
            ),
            (layout(1, 4, 1, 0, OneFOneB, none), false), // one stage of 16
            (layout(2, 2, 1, 0, OneFOneB, full), false), // another key
            (layout(4, 1, 1, 1, OneFOneB, none), true),  // the first key is still kept
            (layout(2, 2, 2, 0, Interleaved1F1B, full), false),
            (layout(4, 1, 1, 3, Gpipe, full), false), // one-layer ranges under this key
            (layout(2, 2, 1, 3, OneFOneB, full), true), // the same one-layer ranges
        ];
        for (i, (s, answered)) in layouts.iter().enumerate() {
            let plan = Plan::new(s).unwrap();
            let key = key_of(s);
            let before = cached(&key);
            let shared = generate(s, &plan).unwrap();
            assert_eq!(
                before.is_some() && before == cached(&key),
                *answered,
                "layout {i}: {before:?} entries before, {:?} after",
                cached(&key)
            );
            assert_eq!(
                shared,
                crate::schedule::generate(s, &plan).unwrap(),
                "layout {i}"
            );
        }
    }
}
