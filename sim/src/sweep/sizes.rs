//! Workload sizing shared between neighbouring layouts of a sweep. A search enumerates the
//! ZeRO stage innermost, so runs of layouts differ only in it, and the work of a layer range
//! (`workload::layers_work`: GEMM shapes, collectives, activation sizes) does not depend on
//! the ZeRO stage. Sizing it once per run instead of once per layout saves a large part of
//! schedule generation; everything else (state bytes, the optimizer step) is asked of the
//! workload model every time. The cached answers are clones of what the model returned, so
//! the schedules are exactly those `schedule::generate` builds.

use crate::plan::{ChunkLayout, Plan};
use crate::scenario::Scenario;
use crate::schedule::{ComputeOp, Schedule, ScheduleError, Sizes, WorkloadSizes};
use crate::workload::{ChunkWork, ParamCount, StateBytes};
use std::cell::RefCell;
use std::collections::BTreeMap;

/// Everything `layers_work` is asked: the chunk layout's fields, then the layer range and
/// whether it carries the embedding and the head.
type Query = ([u32; 5], [bool; 2], u32, u32, bool, bool);

/// The answers for one scenario (with its ZeRO stage set to 0).
struct Cache {
    scenario: Scenario,
    work: BTreeMap<Query, ChunkWork>,
}

thread_local! {
    static CACHE: RefCell<Option<Cache>> = const { RefCell::new(None) };
}

/// `scenario` as the cache keys it: every field but the ZeRO stage, which sizing ignores.
fn key_of(scenario: &Scenario) -> Scenario {
    let mut key = scenario.clone();
    key.parallel.zero = 0;
    key
}

/// [`crate::schedule::generate`] for `scenario` and its `plan`, with `layers_work` answered
/// from this thread's cache when the previous layouts it sized had the same scenario up to
/// the ZeRO stage.
pub(crate) fn generate(scenario: &Scenario, plan: &Plan) -> Result<Schedule, ScheduleError> {
    let key = key_of(scenario);
    let cached = CACHE
        .try_with(|c| c.try_borrow_mut().ok().and_then(|mut c| c.take()))
        .ok()
        .flatten();
    let work = match cached {
        Some(c) if c.scenario == key => c.work,
        _ => BTreeMap::new(),
    };
    let sizes = Shared {
        inner: WorkloadSizes { scenario, plan },
        work: RefCell::new(work),
    };
    let step = crate::schedule::representative_step(scenario);
    let schedule = crate::schedule::generate_with(scenario, plan, &sizes, step);
    let work = sizes.work.into_inner();
    let _ = CACHE.try_with(|c| {
        if let Ok(mut c) = c.try_borrow_mut() {
            *c = Some(Cache {
                scenario: key,
                work,
            });
        }
    });
    schedule
}

/// The workload model with remembered `layers_work` answers.
struct Shared<'a> {
    inner: WorkloadSizes<'a>,
    work: RefCell<BTreeMap<Query, ChunkWork>>,
}

impl Sizes for Shared<'_> {
    fn layers_work(
        &self,
        layout: &ChunkLayout,
        first_layer: u32,
        num_layers: u32,
        embedding: bool,
        head: bool,
    ) -> ChunkWork {
        let query = (
            [
                layout.stage,
                layout.chunk,
                layout.virtual_stage,
                layout.first_layer,
                layout.num_layers,
            ],
            [layout.has_embedding, layout.has_head],
            first_layer,
            num_layers,
            embedding,
            head,
        );
        if let Some(w) = self
            .work
            .try_borrow()
            .ok()
            .and_then(|m| m.get(&query).cloned())
        {
            return w;
        }
        let w = self
            .inner
            .layers_work(layout, first_layer, num_layers, embedding, head);
        if let Ok(mut m) = self.work.try_borrow_mut() {
            m.insert(query, w.clone());
        }
        w
    }

    fn layers_params(
        &self,
        layout: &ChunkLayout,
        first_layer: u32,
        num_layers: u32,
        embedding: bool,
        head: bool,
    ) -> ParamCount {
        self.inner
            .layers_params(layout, first_layer, num_layers, embedding, head)
    }

    fn state_bytes(&self, stage: u32) -> StateBytes {
        self.inner.state_bytes(stage)
    }

    fn optimizer_step(&self, stage: u32) -> ComputeOp {
        self.inner.optimizer_step(stage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::small_scenario;

    /// Schedules sized from the cache (filled by the same scenario at other ZeRO stages, and
    /// by other scenarios in between) equal `schedule::generate`'s.
    #[test]
    fn cached_sizes_give_the_generated_schedules() {
        let mut layouts = Vec::new();
        for (tp, pp, dp) in [(2, 2, 2), (1, 4, 2)] {
            for recompute in [
                crate::scenario::Recompute::None,
                crate::scenario::Recompute::Full,
            ] {
                for zero in [0, 1, 2, 3, 1] {
                    let mut s = small_scenario(tp, pp, dp, 8);
                    s.parallel.zero = zero;
                    s.training.recompute = recompute;
                    layouts.push(s);
                }
            }
        }
        let mut hits = 0;
        for s in &layouts {
            let plan = Plan::new(s).unwrap();
            // Entries cached for this very scenario (up to the ZeRO stage), if any.
            let cached = || {
                CACHE.with(|c| {
                    c.borrow()
                        .as_ref()
                        .filter(|c| c.scenario == key_of(s))
                        .map(|c| c.work.len())
                })
            };
            let before = cached();
            let shared = generate(s, &plan).unwrap();
            hits += usize::from(before.is_some() && before == cached());
            assert_eq!(
                shared,
                crate::schedule::generate(s, &plan).unwrap(),
                "{s:?}"
            );
        }
        assert_eq!(hits, 16, "layouts the cache answered alone");
    }
}
