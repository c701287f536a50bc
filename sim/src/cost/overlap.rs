//! A cost model with a compute/communication overlap slowdown added on top of another one.
//! Hardware profiles carry `overlap.compute_slowdown`, but the default [`super::Analytic`]
//! model has no field for it; the prediction pipeline wraps the model in [`WithOverlap`] when
//! a profile sets it, so the engine slows compute that overlaps a transfer (see
//! [`CostModel::overlap_compute_slowdown`]).

use super::CostModel;
use crate::plan::{Group, Plan};
use crate::schedule::{CollectiveKind, ComputeOp};

/// `inner` with `compute_slowdown` as its overlap slowdown; everything else is `inner`'s.
pub struct WithOverlap<'a> {
    pub inner: &'a dyn CostModel,
    pub compute_slowdown: f64,
}

impl CostModel for WithOverlap<'_> {
    fn compute_ns(&self, rank: u32, op: &ComputeOp) -> u64 {
        self.inner.compute_ns(rank, op)
    }
    fn collective_ns(&self, kind: CollectiveKind, group: &Group, bytes: u64, calls: u32) -> u64 {
        self.inner.collective_ns(kind, group, bytes, calls)
    }
    fn p2p_ns(&self, plan: &Plan, src: u32, dst: u32, bytes: u64) -> u64 {
        self.inner.p2p_ns(plan, src, dst, bytes)
    }
    fn checkpoint_ns(&self, bytes: u64) -> u64 {
        self.inner.checkpoint_ns(bytes)
    }
    fn alloc_ns(&self, category: crate::schedule::MemCategory, bytes: u64) -> u64 {
        self.inner.alloc_ns(category, bytes)
    }
    fn free_ns(&self) -> u64 {
        self.inner.free_ns()
    }
    fn interruptions(&self) -> Option<crate::engine::Interruptions> {
        self.inner.interruptions()
    }
    fn wake(&self) -> Option<crate::engine::Wake> {
        self.inner.wake()
    }
    fn compute_is_rank_invariant(&self) -> bool {
        self.inner.compute_is_rank_invariant()
    }
    fn shared_cores(&self) -> Option<u32> {
        self.inner.shared_cores()
    }
    fn overlap_compute_slowdown(&self) -> f64 {
        self.compute_slowdown
    }
}
