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
    fn models_operand_residency(&self) -> bool {
        self.inner.models_operand_residency()
    }
    fn operand_residency(&self, op: &ComputeOp) -> Option<crate::engine::Residency> {
        self.inner.operand_residency(op)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{Analytic, OperandLoad};
    use crate::schedule::MemCategory;
    use crate::testing::small_scenario;

    #[test]
    fn the_wrapper_answers_every_host_question_as_the_model_it_wraps() {
        // A host-like model: every optional host term set, so a method the wrapper forgot
        // to forward would answer with the trait's default instead.
        let s = small_scenario(1, 1, 2, 1);
        let mut inner = Analytic::new(&s);
        inner.gemm.operands = Some(OperandLoad {
            bytes_per_s: 10e9,
            cache_bytes: 2 << 20,
        });
        inner.wake = Some(crate::engine::Wake {
            ns: 1_000.0,
            per_idle: 0.01,
        });
        inner.interruptions = Some(crate::engine::Interruptions {
            rate_per_ns: 1e-6,
            mean_ns: 30_000.0,
        });
        inner.host_cores = Some(2);
        inner.alloc_bytes_per_s = Some(20e9);
        inner.op_overhead_ns = 800;
        let w = WithOverlap {
            inner: &inner,
            compute_slowdown: 0.1,
        };
        let mut op = crate::engine::testkit::compute_op(crate::schedule::Phase::Forward, 1 << 20);
        op.memory_bytes = 1 << 20;
        assert_eq!(w.compute_ns(0, &op), inner.compute_ns(0, &op));
        assert_eq!(
            w.models_operand_residency(),
            inner.models_operand_residency()
        );
        assert!(w.models_operand_residency());
        assert_eq!(w.operand_residency(&op), inner.operand_residency(&op));
        assert_eq!(w.wake(), inner.wake());
        assert_eq!(w.interruptions(), inner.interruptions());
        assert_eq!(w.shared_cores(), Some(2));
        assert_eq!(
            w.alloc_ns(MemCategory::Activations, 1 << 20),
            inner.alloc_ns(MemCategory::Activations, 1 << 20)
        );
        assert_eq!(w.free_ns(), inner.free_ns());
        assert_eq!(
            w.compute_is_rank_invariant(),
            inner.compute_is_rank_invariant()
        );
        assert_eq!(w.overlap_compute_slowdown(), 0.1);
    }
}
