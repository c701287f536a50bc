//! Data-parallel policy: how gradients are reduced and parameters gathered across replicas.
//! It decides the ZeRO mode, whether this step synchronises, the gradient and parameter
//! bytes that cross the network (after compression), and how gradients are cut into buckets.
//! The emitter asks these questions; it never reads the training config for them itself.
//!
//! Modelling choices (documented here, once):
//! - Gradients are reduced in `training.grad_reduce_dtype` (the framework's
//!   `optimizer.grad_buffer` by default: fp32, Megatron's `main_grad` accumulation), a gradient
//!   element being `DpPolicy::grad_elem_bytes` before compression; buckets count elements as
//!   [`GRAD_ELEM_BYTES`] each (`grad_bucket_bytes / 4`), as Megatron sizes buckets in
//!   parameters whatever their dtype. Parameters are gathered in the compute dtype, and under
//!   FP8 training in the 16-bit weights' dtype unless `training.fp8_param_gather` gathers FP8
//!   weights (`Training::param_gather_elem_bytes`).
//! - Buckets are cut at layer boundaries: a bucket is the smallest run of consecutive layers
//!   (in backward order) whose gradients reach `grad_bucket_bytes`; its reduction is issued as
//!   `calls` same-size calls of at most `grad_bucket_bytes` each.
//! - ZeRO 0: all-reduce. ZeRO 1/2: reduce-scatter, optimizer on the shard, then all-gather the
//!   updated parameters. Without `overlap_param_gather` that all-gather ends this step; with it,
//!   it is issued at the start of the next step and each chunk's first forward waits for its
//!   gather (Megatron's overlap with the next forward), so a step schedule starts with the
//!   gathers of the previous step's update.
//! - ZeRO 3 / FSDP: each pass that needs weights (forward, recompute + backward, backward
//!   input) first all-gathers its layers' parameters into a gather buffer, prefetched one
//!   pass ahead (one layer at a time when the framework gathers per layer,
//!   [`DpPolicy::gather_per_layer`], as FSDP's per-block units do); after every backward (or weight-gradient pass) the unsharded gradients are
//!   reduce-scattered at once, per micro batch, as FSDP does without `no_sync`.
//! - ZeRO 3 / FSDP under pipeline parallelism where the framework says
//!   `overlaps.grad_reduce_pipelined` ([`Pipelined`]): `torch.distributed.pipelining` turns
//!   FSDP2's gradient sync and its reshard after backward off for every micro batch's backward
//!   (pytorch/pytorch@0138610331c90b8053a0bfc6df0175b200a1cad2:
//!   torch/distributed/pipelining/stage.py `backward_maybe_with_nosync`:
//!   `set_reshard_after_backward(False)`, `set_requires_gradient_sync(False)`) and runs FSDP's
//!   post-backward, the reduce-scatter of every unit, once after the stage's last backward
//!   (`_post_backward`). Meanwhile FSDP2 accumulates each unsharded gradient in its reduce
//!   dtype (`FSDPParam.to_accumulated_grad_if_needed`, fp32 under torchtitan's policy), held
//!   here for the whole step. With `reshard_after_forward` off under pipelining (torchtitan:
//!   `reshard_after_forward = False` when `pp_enabled`,
//!   pytorch/torchtitan@9dec370ad26b5f8e9a7333a0e36165018262644b:torchtitan/parallelisms/parallelize_llama.py
//!   `apply_fsdp`) nothing reshards before that post-backward either, so each layer is
//!   gathered once per step, by its first forward, and stays gathered until its chunk's last
//!   backward.
//! - HSDP (`fsdp_degree` below dp): the gathers and reduce-scatters run over the shard group
//!   (`DenseDp` / `ExpertDp`, cut to the inner `fsdp_degree` dp coordinates by the plan), and
//!   each reduce-scatter's output, the sharded gradient, is then all-reduced over the replica
//!   group (`DpReplica`) in place, as PyTorch FSDP2's `foreach_reduce` does when it has an
//!   all-reduce group (pytorch/pytorch@010ae4a89516fa3be548ab16dff711414ec12d0b:
//!   torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: `reduce_scatter_comm` over
//!   `reduce_scatter_group`, then `dist.all_reduce(reduce_output, group=all_reduce_group)` on
//!   the all-reduce stream after it).
//! - `sync = delayed:N`: step `i` synchronises iff `i % N == N - 1` (accumulate N - 1 steps
//!   locally, reduce and update on the N-th). A step without sync has no gradient reduction,
//!   no optimizer step and no ZeRO-1/2 parameter gather; under ZeRO 3 it keeps full unsharded
//!   gradients (a Buffers allocation for the step) since nothing is reduce-scattered.
//! - DualPipe's two copies of each model stage (on pipeline stages `s` and `pp - 1 - s`) hold
//!   gradients of different micro batches, which DeepSeek's code leaves for the caller to
//!   sum: `DualPipe.step` only runs the passes (deepseek-ai/DualPipe@3da1bbea53
//!   dualpipe/dualpipe.py lines 294-440, no reduction), and its example, which gives rank `r`
//!   copies of `full_modules[r]` and `full_modules[pp_size - 1 - r]` (line 138), sums them
//!   after the step, `p0.grad += p1all[pp_size - 1 - rank]` after an all-gather of every
//!   rank's gradients (examples/example_dualpipe.py lines 168-174). Neither says which
//!   collective DeepSeek's training uses; between two ranks an all-reduce moves what an
//!   all-gather of the pair would. twin sums them with an all-reduce over the pair
//!   ([`GroupKind::PpMirror`]) on the DP
//!   stream, once per chunk after the chunk's data-parallel reduction (on its output: the
//!   shard under ZeRO, the whole gradient otherwise; summing the two copies' shards gives the
//!   sum over all `2 dp` copies), and the optimizer waits for it
//!   ([`DpPolicy::mirror_copies`]).
//! - `sync = async`: each step reduces the previous step's gradients (a stale copy in a
//!   Buffers allocation of the gradient size) on the DP stream from its start, overlapping
//!   this step's compute, and its optimizer applies them (one step stale). Not modelled for
//!   ZeRO 3 / FSDP, whose gradients are reduce-scattered per micro batch.

use crate::plan::{GroupKind, Plan};
use crate::scenario::framework::{FsdpUnit, GradReduce, Reshard};
use crate::scenario::{GradCompression, PipelineSchedule, Scenario, SyncMode};
use crate::schedule::{CollectiveKind, ScheduleError};
use crate::workload::{CommCall, ParamCount};

/// Bytes per gradient element in the bucket size (`grad_bucket_bytes` counts fp32 elements).
pub const GRAD_ELEM_BYTES: u64 = 4;
/// Bytes per index of a top-k sparsified gradient.
pub const TOPK_INDEX_BYTES: u64 = 4;

/// How parameters and gradients are sharded over data-parallel replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Zero {
    /// Replicated: all-reduce gradients.
    None,
    /// ZeRO 1/2: reduce-scatter gradients, all-gather updated parameters.
    ShardedOptimizer,
    /// ZeRO 3 / FSDP: gather parameters per pass, reduce-scatter gradients per micro batch.
    ShardedParams,
}

/// One collective of a gradient reduction ([`DpPolicy::reduction_calls`]).
#[derive(Clone, Debug, PartialEq)]
pub struct DpCall {
    pub call: CommCall,
    /// Waits for the call before it (HSDP's replica all-reduce after its shard group's call),
    /// not for the gradients.
    pub after_previous: bool,
    /// Reads the unreduced gradients (their buffer may go once these are done).
    pub reads_grads: bool,
    /// Ends its part of the reduction (what the optimizer waits for).
    pub ends: bool,
}

/// ZeRO 3 / FSDP under pipeline parallelism, driven once per step (the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pipelined {
    /// `AfterBackward`: each chunk's gradients are reduce-scattered, unit by unit, once its
    /// last backward has finished; `LastMicrobatch`: each unit's as soon as the chunk's last
    /// backward has produced them.
    pub reduce: GradReduce,
    /// Each layer is gathered once per step (its first forward) and kept until its chunk's
    /// last backward.
    pub keep_params: bool,
}

/// The data-parallel decisions for one step.
#[derive(Clone, Debug)]
pub struct DpPolicy {
    pub zero: Zero,
    /// This step reduces gradients and runs the optimizer.
    pub syncs: bool,
    /// The previous step ran the optimizer, so ZeRO-1/2 parameters must be gathered at the
    /// start of this one (with overlap_param_gather).
    pub gather_at_start: bool,
    /// Gradient reduction is one step stale.
    pub async_reduce: bool,
    pub overlap_grad_reduce: bool,
    pub overlap_param_gather: bool,
    pub dense_group_size: u32,
    pub expert_group_size: u32,
    /// HSDP: copies of each shard group (1 without HSDP).
    pub replica_group_size: u32,
    pub bucket_bytes: u64,
    pub compression: GradCompression,
    /// Bytes of a parameter element in a gather and its buffer
    /// (`Training::param_gather_elem_bytes`).
    pub param_elem_bytes: u64,
    /// Bytes of a gradient element in the reduction, before compression
    /// (`Training::grad_elem_bytes`).
    pub grad_elem_bytes: u64,
    /// ZeRO 3 / FSDP gathers one layer at a time (the framework file's
    /// `overlaps.fsdp_unit = "layer"`: FSDP2 / FSDP1 wrap each transformer block as a unit,
    /// Megatron-FSDP's unit is the transformer layer, DeepSpeed ZeRO-3 gathers each
    /// submodule), so the gather buffer holds one layer and the gather of the next layer
    /// overlaps this one's compute. Otherwise a ZeRO-3 pass gathers its whole chunk (or
    /// `run.granularity` segment).
    pub gather_per_layer: bool,
    /// ZeRO 3 / FSDP under pipeline parallelism with the framework's
    /// `overlaps.grad_reduce_pipelined` (`None`: per pass and per micro batch).
    pub pipelined: Option<Pipelined>,
    /// DualPipe with pp even: each chunk's gradients are summed with the other copy's over
    /// [`GroupKind::PpMirror`] before the optimizer (the module comment).
    pub mirror_copies: bool,
}

impl DpPolicy {
    pub fn new(s: &Scenario, plan: &Plan, step: u64) -> Result<DpPolicy, ScheduleError> {
        let zero = if s.parallel.fsdp || s.parallel.zero >= 3 {
            Zero::ShardedParams
        } else if s.parallel.zero >= 1 {
            Zero::ShardedOptimizer
        } else {
            Zero::None
        };
        let (syncs, gather_at_start, async_reduce) = match s.training.sync {
            SyncMode::Sync => (true, true, false),
            SyncMode::Async => (true, true, true),
            SyncMode::Delayed(n) => {
                if n == 0 {
                    return Err(ScheduleError::Unsupported(
                        "sync = delayed:0: the period must be at least 1".into(),
                    ));
                }
                let n = u64::from(n);
                (step % n == n - 1, step.is_multiple_of(n), false)
            }
        };
        if async_reduce && zero == Zero::ShardedParams {
            return Err(ScheduleError::Unsupported(
                "sync = async with ZeRO 3 / FSDP is not modelled: FSDP reduce-scatters \
                 gradients every micro batch, so there is no one-step-stale reduction"
                    .into(),
            ));
        }
        if let GradCompression::Topk(f) = s.training.grad_compression {
            if !(f > 0.0 && f <= 1.0) {
                return Err(ScheduleError::Unsupported(format!(
                    "grad_compression topk:{f}: the kept fraction must be in (0, 1]"
                )));
            }
        }
        Ok(DpPolicy {
            zero,
            syncs,
            gather_at_start,
            async_reduce,
            overlap_grad_reduce: s.training.overlap_grad_reduce,
            overlap_param_gather: s.training.overlap_param_gather,
            dense_group_size: plan.group_size(GroupKind::DenseDp),
            expert_group_size: plan.group_size(GroupKind::ExpertDp),
            replica_group_size: plan.group_size(GroupKind::DpReplica),
            bucket_bytes: s.training.grad_bucket_bytes.max(1),
            compression: s.training.grad_compression,
            param_elem_bytes: s.training.param_gather_elem_bytes(),
            grad_elem_bytes: s.training.grad_elem_bytes(),
            gather_per_layer: zero == Zero::ShardedParams
                && s.training.framework.overlaps.fsdp_unit == FsdpUnit::Layer,
            pipelined: pipelined(s, plan, zero),
            mirror_copies: s.parallel.schedule == PipelineSchedule::DualPipe
                && plan.group_size(GroupKind::PpMirror) > 1,
        })
    }

    /// Groups that reduce gradients, with the parameters each covers, skipping groups of one.
    pub fn grad_groups(&self, params: ParamCount) -> Vec<(GroupKind, u64)> {
        let mut out = Vec::with_capacity(2);
        if self.dense_group_size > 1 && params.dense > 0 {
            out.push((GroupKind::DenseDp, params.dense));
        }
        if self.expert_group_size > 1 && params.expert > 0 {
            out.push((GroupKind::ExpertDp, params.expert));
        }
        out
    }

    /// Every gradient reduction with the parameters it covers: the shard group (reduce-scattered
    /// or all-reduced over, when more than one rank) and its size, for dense and expert
    /// parameters; under HSDP each is followed by an all-reduce of its output over
    /// `DpReplica`, so a shard group of one is listed too.
    pub fn grad_reductions(&self, params: ParamCount) -> Vec<(GroupKind, u32, u64)> {
        let mut out = Vec::with_capacity(2);
        for (group, size, elems) in [
            (GroupKind::DenseDp, self.dense_group_size, params.dense),
            (GroupKind::ExpertDp, self.expert_group_size, params.expert),
        ] {
            if elems > 0 && (size > 1 || self.replica_group_size > 1) {
                out.push((group, size, elems));
            }
        }
        out
    }

    /// Gradient elements of `params` a rank holds after their data-parallel reduction: its
    /// shard of the dense and of the expert ones when ZeRO shards them (over the shard groups,
    /// rounded up), all of them otherwise. What [`GroupKind::PpMirror`] sums.
    pub fn reduced_grad_elems(&self, params: ParamCount) -> u64 {
        let shard = |elems: u64, size: u32| match self.zero {
            Zero::None => elems,
            Zero::ShardedOptimizer | Zero::ShardedParams => elems.div_ceil(u64::from(size.max(1))),
        };
        shard(params.dense, self.dense_group_size)
            .saturating_add(shard(params.expert, self.expert_group_size))
    }

    /// Whether parameters are sharded over more than one rank (ZeRO stages shard over these
    /// groups).
    pub fn shards(&self) -> bool {
        self.dense_group_size > 1 || self.expert_group_size > 1
    }

    /// Whether any gradient crosses the network at all.
    pub fn reduces(&self) -> bool {
        self.shards() || self.replica_group_size > 1
    }

    /// Gradient bytes on the wire for `elems` gradient elements, after compression.
    pub fn wire_grad_bytes(&self, elems: u64) -> u64 {
        match self.compression {
            GradCompression::None => elems.saturating_mul(self.grad_elem_bytes),
            GradCompression::Fp16 => elems.saturating_mul(2),
            GradCompression::Int8 => elems,
            GradCompression::Topk(f) => {
                let kept = ((elems as f64) * f).ceil() as u64;
                kept.saturating_mul(self.grad_elem_bytes + TOPK_INDEX_BYTES)
            }
        }
    }

    pub fn compresses(&self) -> bool {
        !matches!(self.compression, GradCompression::None)
    }

    /// Gradient bytes in memory (uncompressed) for `elems` elements.
    pub fn grad_bytes(&self, elems: u64) -> u64 {
        elems.saturating_mul(self.grad_elem_bytes)
    }

    pub fn param_bytes(&self, elems: u64) -> u64 {
        elems.saturating_mul(self.param_elem_bytes)
    }

    /// The collective that reduces gradients: an all-reduce when replicated, a reduce-scatter
    /// when ZeRO shards them.
    pub fn reduce_kind(&self) -> CollectiveKind {
        match self.zero {
            Zero::None => CollectiveKind::AllReduce,
            Zero::ShardedOptimizer | Zero::ShardedParams => CollectiveKind::ReduceScatter,
        }
    }

    /// The collectives of one reduction of `params`' gradients, in issue order (what the
    /// emitter issues on the data-parallel stream and the search bound prices): per shard
    /// group ([`Self::grad_reductions`]) and per call size ([`Self::grad_calls`]), the call
    /// over the shard group when it has more than one rank, then under HSDP the all-reduce of
    /// its output (the call's bytes over the shard group's size) over the replica group.
    pub fn reduction_calls(&self, params: ParamCount) -> Vec<DpCall> {
        let mut out = Vec::new();
        for (group, size, e) in self.grad_reductions(params) {
            for (bytes, calls) in self.grad_calls(e) {
                let shard_call = size > 1;
                if shard_call {
                    out.push(DpCall {
                        call: CommCall {
                            kind: self.reduce_kind(),
                            group,
                            bytes,
                            calls,
                        },
                        after_previous: false,
                        reads_grads: true,
                        ends: self.replica_group_size <= 1,
                    });
                }
                if self.replica_group_size > 1 {
                    out.push(DpCall {
                        call: CommCall {
                            kind: CollectiveKind::AllReduce,
                            group: GroupKind::DpReplica,
                            bytes: bytes.div_ceil(u64::from(size.max(1))),
                            calls,
                        },
                        after_previous: shard_call,
                        reads_grads: !shard_call,
                        ends: true,
                    });
                }
            }
        }
        out
    }

    /// The all-gathers of `params`' parameters, one per group that shards them.
    pub fn gather_calls(&self, params: ParamCount) -> Vec<CommCall> {
        self.grad_groups(params)
            .into_iter()
            .map(|(group, e)| CommCall {
                kind: CollectiveKind::AllGather,
                group,
                bytes: self.param_bytes(e),
                calls: 1,
            })
            .collect()
    }

    /// Wire bytes of `elems` gradient elements cut into calls of at most the bucket size
    /// (measured before compression): `(bytes per call, calls)`, at most two entries.
    pub fn grad_calls(&self, elems: u64) -> Vec<(u64, u32)> {
        let per_bucket_elems = (self.bucket_bytes / GRAD_ELEM_BYTES).max(1);
        split_calls(elems, per_bucket_elems)
            .into_iter()
            .map(|(e, n)| (self.wire_grad_bytes(e), n))
            .collect()
    }
}

/// [`DpPolicy::pipelined`]: ZeRO 3 over more than one pipeline stage under a framework whose
/// file reduces once per step there.
fn pipelined(s: &Scenario, plan: &Plan, zero: Zero) -> Option<Pipelined> {
    let o = &s.training.framework.overlaps;
    let reduce = o.grad_reduce_pipelined?;
    if zero != Zero::ShardedParams || plan.pp() <= 1 || reduce == GradReduce::EveryMicrobatch {
        return None;
    }
    Some(Pipelined {
        reduce,
        keep_params: matches!(
            o.reshard_after_forward,
            Reshard::Never | Reshard::UnlessPipelined
        ),
    })
}

/// `total` cut into pieces of `per`: `[(per, full)]` plus `[(rest, 1)]` when there is a rest.
fn split_calls(total: u64, per: u64) -> Vec<(u64, u32)> {
    let mut out = Vec::with_capacity(2);
    if total == 0 || per == 0 {
        return out;
    }
    let full = total / per;
    let rest = total % per;
    if full > 0 {
        out.push((per, full.min(u64::from(u32::MAX)) as u32));
    }
    if rest > 0 {
        out.push((rest, 1));
    }
    out
}

/// Group consecutive items (in the given order) until their gradient elements reach
/// `bucket_elems`: returns the exclusive end index of each group.
pub fn bucket_ends(elems: &[u64], bucket_elems: u64) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut acc = 0u64;
    for (i, e) in elems.iter().enumerate() {
        acc = acc.saturating_add(*e);
        if acc >= bucket_elems.max(1) {
            ends.push(i + 1);
            acc = 0;
        }
    }
    if ends.last().copied().unwrap_or(0) < elems.len() {
        ends.push(elems.len());
    }
    ends
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_split_into_full_buckets_and_a_rest() {
        assert_eq!(split_calls(10, 4), vec![(4, 2), (2, 1)]);
        assert_eq!(split_calls(8, 4), vec![(4, 2)]);
        assert_eq!(split_calls(3, 4), vec![(3, 1)]);
        assert!(split_calls(0, 4).is_empty());
    }

    #[test]
    fn buckets_close_when_full() {
        assert_eq!(bucket_ends(&[3, 3, 3, 3, 1], 5), vec![2, 4, 5]);
        assert_eq!(bucket_ends(&[10, 1], 5), vec![1, 2]);
        assert_eq!(bucket_ends(&[1, 1], 5), vec![2]);
        assert!(bucket_ends(&[], 5).is_empty());
    }

    #[test]
    fn compression_shrinks_wire_bytes() {
        let s = crate::testing::small_scenario(1, 1, 2, 2);
        let plan = Plan::new(&s).unwrap();
        let mut p = DpPolicy::new(&s, &plan, 0).unwrap();
        assert_eq!(p.wire_grad_bytes(1000), 4000);
        p.compression = GradCompression::Fp16;
        assert_eq!(p.wire_grad_bytes(1000), 2000);
        p.compression = GradCompression::Int8;
        assert_eq!(p.wire_grad_bytes(1000), 1000);
        p.compression = GradCompression::Topk(0.01);
        assert_eq!(p.wire_grad_bytes(1000), 10 * 8);
    }

    #[test]
    fn delayed_sync_reduces_on_the_last_step_of_each_window() {
        let mut s = crate::testing::small_scenario(1, 1, 2, 2);
        s.training.sync = SyncMode::Delayed(3);
        let plan = Plan::new(&s).unwrap();
        let syncs: Vec<bool> = (0..6)
            .map(|i| DpPolicy::new(&s, &plan, i).unwrap().syncs)
            .collect();
        assert_eq!(syncs, vec![false, false, true, false, false, true]);
        let gathers: Vec<bool> = (0..4)
            .map(|i| DpPolicy::new(&s, &plan, i).unwrap().gather_at_start)
            .collect();
        assert_eq!(gathers, vec![true, false, false, true]);
    }
}
