//! Emits the data-parallel ops of one stage's program as [`crate::schedule::dp`] decides
//! them: gradient buckets (all-reduce or reduce-scatter, compressed or not) cut from the
//! backward that finalises a chunk's gradients, ZeRO-1/2 parameter all-gathers, the
//! one-step-stale reduction of async sync, DualPipe's sum of the two copies of each stage
//! ([`crate::schedule::dp`]), and the optimizer step that waits for the gradients it needs. ZeRO-3/FSDP's per-pass gathers and reduce-scatters are in
//! [`super::zero`].
//!
//! Under `[memory] accounting = "deepspeed"` only the buffers differ (the ops and their
//! timing do not): ZeRO-3 holds the 16-bit parameters and gradients of one module, the
//! pass's largest, and counts the gathered parameters from the pass that uses them rather
//! than from the prefetch, as DeepSpeed's estimator does; ZeRO-2 has no accumulation buffer,
//! since its 16-bit gradients are state already (or streamed to the host when offloaded).

use crate::plan::GroupKind;
use crate::scenario::MemoryAccounting;
use crate::schedule::builder::{AllocTag, Builder};
use crate::schedule::chunks::{ChunkPlan, Seg};
use crate::schedule::dp::Zero;
use crate::schedule::emit::steps::Step;
use crate::schedule::emit::zero::{Gather, Issued};
use crate::schedule::emit::StageCtx;
use crate::schedule::{
    CollectiveKind, ComputeOp, Deps, Device, Gemms, Label, MemCategory, OpKind, Phase,
    ScheduleError, Stream,
};
use crate::workload::ParamCount;
use std::collections::BTreeMap;

/// Where a step sums DualPipe's two copies of each chunk ([`DpEmitter::mirror`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum MirrorAt {
    /// After the one-step-stale reduction at the start (async sync).
    Start,
    /// As each chunk's gradients are done (and reduced, where the reduction overlaps).
    Pass,
    /// After the reduction at the end of the step.
    Finish,
}

/// A decompression still to run before the optimizer.
struct Decompress {
    deps: Vec<u32>,
    elems: u64,
    /// The gradient elements this rank keeps of them (its ZeRO shard, else all).
    kept_elems: u64,
    wire_bytes: u64,
    label: Label,
}

/// The gradient bucket (its segments, in model order) that the backward step of segment
/// `seg` completes, when it completes one: a finalising backward runs its `segs` from the
/// last down, and each bucket ([`ChunkPlan::bucket_ends_backward`]) is reduced once its
/// lowest segment is done.
pub fn bucket_completed(segs: &[Seg], bucket_bytes: u64, seg: usize) -> Option<&[Seg]> {
    let pos = segs.len().checked_sub(1)?.checked_sub(seg)?;
    let ends = ChunkPlan::bucket_ends_backward(segs, bucket_bytes);
    let k = ends.iter().position(|&e| e == pos + 1)?;
    let lo = k
        .checked_sub(1)
        .and_then(|j| ends.get(j))
        .copied()
        .unwrap_or(0);
    segs.get(segs.len() - (pos + 1)..segs.len() - lo)
}

/// The buffers [`DpEmitter::start`] allocates for the whole step: the stale gradients of
/// async sync, ZeRO-2's unsharded gradient accumulation and the unsharded gradients of a
/// ZeRO-3 step without sync (0 for each one a step does not hold).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepBuffers {
    pub stale_bytes: u64,
    pub accumulation_bytes: u64,
    pub unsynced_bytes: u64,
}

impl StepBuffers {
    /// The buffers of a stage holding `chunks`; `deepspeed`: under DeepSpeed accounting.
    pub fn new(
        s: &crate::scenario::Scenario,
        plan: &crate::plan::Plan,
        dp: &crate::schedule::dp::DpPolicy,
        chunks: &[ChunkPlan],
        deepspeed: bool,
    ) -> StepBuffers {
        if !dp.reduces() {
            return StepBuffers::default();
        }
        let all = chunks
            .iter()
            .fold(ParamCount::default(), |acc, c| acc.plus(c.params));
        let elems = all.dense.saturating_add(all.expert);
        let mut out = StepBuffers::default();
        if dp.async_reduce && dp.syncs {
            out.stale_bytes = dp.grad_bytes(elems);
        }
        // ZeRO-2 keeps only its gradient shard as state, but this step reduces once, after
        // the last backward (or not at all under delayed sync): the gradients of the earlier
        // micro batches accumulate unsharded, in the gradient dtype, meanwhile.
        let zero2 = s.parallel.zero == 2 && dp.zero == Zero::ShardedOptimizer;
        if zero2 && !deepspeed && (plan.microbatches > 1 || !dp.syncs) {
            let per_param = crate::workload::state_coefficients(&s.training).grad_bytes;
            out.accumulation_bytes = elems.saturating_mul(per_param);
        }
        if dp.zero == Zero::ShardedParams && !dp.syncs {
            out.unsynced_bytes = dp.grad_bytes(elems);
        }
        out
    }

    /// Their sum.
    pub fn bytes(&self) -> u64 {
        self.stale_bytes
            .saturating_add(self.accumulation_bytes)
            .saturating_add(self.unsynced_bytes)
    }
}

pub struct DpEmitter<'a> {
    pub(super) ctx: &'a StageCtx<'a>,
    stage: u32,
    /// Each ZeRO-3 gather, in the order the passes need them.
    pub(super) gathers: Vec<Gather>,
    pub(super) issued: Vec<Option<Issued>>,
    /// The last compute op that used each gather (for the prefetch throttle).
    pub(super) gather_users: Vec<Option<u32>>,
    /// ZeRO-1/2 parameter gathers issued at the start, waited for by each chunk's first forward.
    pub(super) start_gathers: BTreeMap<u32, Vec<u32>>,
    /// Ops the optimizer waits for.
    opt_deps: Vec<u32>,
    decompress: Vec<Decompress>,
    /// Buffers held for the whole step.
    step_bufs: Vec<Option<AllocTag>>,
    /// DeepSpeed accounting: bytes per parameter of a module's gathered weights and of its
    /// gradients (the 16-bit weight dtype); `None` under Megatron accounting.
    pub(super) module_bytes_per_param: Option<u64>,
    /// Pipelined FSDP: each chunk's unsharded gradients, accumulated over the step.
    pub(super) pipelined_grads: BTreeMap<u32, Option<AllocTag>>,
    /// Pipelined FSDP: the reductions of the chunk whose last backward is running.
    pub(super) pipelined_readers: Vec<u32>,
    /// The last data-parallel reduction op of each chunk so far.
    reduced: BTreeMap<u32, u32>,
    /// The host's optimizer step when `training.offload` moves the optimizer there: the
    /// gradients go to the host as they are reduced, the host updates, the parameters come
    /// back before the next gather (`None`: the optimizer runs on the GPU).
    offloaded: Option<crate::workload::OffloadedStep>,
    /// `training.offload = "params"` under ZeRO 3: every gather first fetches the rank's
    /// shard from host memory.
    params_offloaded: bool,
}

/// A copy of `bytes` between the GPU and host memory (offload) on the io stream after `deps`.
fn host_copy(
    b: &mut Builder,
    bytes: u64,
    to_host: bool,
    deps: Deps,
    label: Label,
) -> Result<u32, ScheduleError> {
    b.push(Stream::Io, OpKind::HostCopy { bytes, to_host }, deps, label)
}

fn chunk_label(c: &ChunkPlan) -> Label {
    Label {
        microbatch: None,
        chunk: c.layout.chunk,
        first_layer: c.layout.first_layer,
        num_layers: c.layout.num_layers,
    }
}

impl<'a> DpEmitter<'a> {
    pub fn new(ctx: &'a StageCtx<'a>, stage: u32, gathers: &[Gather]) -> DpEmitter<'a> {
        let module_bytes_per_param = (ctx.s.memory.accounting == MemoryAccounting::Deepspeed)
            .then(|| crate::workload::state_coefficients(&ctx.s.training).weight_bytes);
        DpEmitter {
            ctx,
            stage,
            gathers: gathers.to_vec(),
            issued: gathers.iter().map(|_| None).collect(),
            gather_users: vec![None; gathers.len()],
            start_gathers: BTreeMap::new(),
            opt_deps: Vec::new(),
            decompress: Vec::new(),
            step_bufs: Vec::new(),
            module_bytes_per_param,
            pipelined_grads: BTreeMap::new(),
            pipelined_readers: Vec::new(),
            reduced: BTreeMap::new(),
            offloaded: ctx.sizes.offloaded_step(stage),
            params_offloaded: ctx.s.training.offload == crate::scenario::Offload::Params
                && ctx.dp.zero == Zero::ShardedParams,
        }
    }

    /// Whether the framework copies parameters and gradients between its ZeRO-3 collectives'
    /// buffers and the tensors they serve on the compute stream (FSDP2's copy-out and copy-in,
    /// `overlaps.fsdp_copies`).
    pub(super) fn copies(&self) -> bool {
        self.ctx.dp.zero == Zero::ShardedParams
            && self.ctx.s.training.framework.overlaps.fsdp_copies
    }

    /// One memory-bound copy kernel on the compute stream over `bytes` (read + written).
    pub(super) fn copy_op(&self, bytes: u64) -> ComputeOp {
        ComputeOp {
            attention: None,
            phase: Phase::Copy,
            dtype: self.ctx.s.training.precision,
            gemms: Gemms::default(),
            flops: 0,
            memory_bytes: bytes,
            kernels: 1,
            sms_reserved: 0,
            host_syncs: Default::default(),
        }
    }

    fn compress_op(&self, elems: u64, wire_bytes: u64) -> ComputeOp {
        ComputeOp {
            attention: None,
            phase: Phase::Compress,
            dtype: self.ctx.s.training.precision,
            gemms: Gemms::default(),
            flops: elems,
            memory_bytes: self.ctx.dp.grad_bytes(elems).saturating_add(wire_bytes),
            kernels: 1,
            sms_reserved: 0,
            host_syncs: Default::default(),
        }
    }

    /// Reduce the gradients of `params` after `deps`: (compress,) collectives on the DP
    /// stream, and the optimizer's wait (on a later decompression when compressing). Under
    /// HSDP each call over the shard group is followed by an all-reduce of its output (the
    /// call's bytes over the shard group's size) over the replica group. Returns the ops that
    /// read the unreduced gradients: the calls over the shard group, or the replica
    /// all-reduces where the shard group is one rank.
    pub(super) fn reduce(
        &mut self,
        b: &mut Builder,
        params: ParamCount,
        deps: impl Into<Deps>,
        label: Label,
    ) -> Result<Vec<u32>, ScheduleError> {
        let dp = self.ctx.dp;
        let groups = dp.grad_reductions(params);
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        let elems: u64 = groups.iter().map(|(_, _, e)| *e).sum();
        let wire = dp.wire_grad_bytes(elems);
        let mut deps: Deps = deps.into();
        if self.copies() {
            // FSDP2's copy-in (`foreach_reduce_scatter_copy_in`): the unsharded gradients,
            // read in the training dtype, written to the reduce-scatter buffer in the reduce
            // dtype, on the compute stream before the reduce-scatter stream waits for it.
            let bytes = dp.param_bytes(elems).saturating_add(dp.grad_bytes(elems));
            deps = [b.compute(self.copy_op(bytes), deps, label)?].into();
        }
        if dp.compresses() {
            deps = [b.compute(self.compress_op(elems, wire), deps, label)?].into();
        }
        let (mut readers, mut last) = (Vec::new(), Vec::new());
        let mut previous = None;
        for c in dp.reduction_calls(params) {
            let after = match (c.after_previous, previous) {
                (true, Some(op)) => [op].into(),
                _ => deps.clone(),
            };
            let op = b.collective(
                c.call.kind,
                c.call.group,
                c.call.bytes,
                c.call.calls,
                after,
                label,
            )?;
            if c.reads_grads {
                readers.push(op);
            }
            if c.ends {
                last.push(op);
            }
            previous = Some(op);
        }
        if let Some(&op) = last.iter().max() {
            self.reduced.insert(label.chunk, op);
        }
        if dp.compresses() {
            self.decompress.push(Decompress {
                deps: last,
                elems,
                kept_elems: dp.reduced_grad_elems(params),
                wire_bytes: wire,
                label,
            });
        } else if self.offloaded.is_some() && self.mirror_at().is_none() {
            // The reduced gradients (this rank's shard) go to the host as they are reduced,
            // overlapping the backward still running (after DualPipe's sum of the two copies
            // where there is one: `mirror`).
            let bytes = dp.param_bytes(dp.reduced_grad_elems(params));
            self.opt_deps
                .push(host_copy(b, bytes, true, last.into(), label)?);
        } else {
            self.opt_deps.extend(last);
        }
        Ok(readers)
    }

    /// All-gather the parameters `params` on the DP stream after `deps`.
    pub(super) fn gather_params(
        &mut self,
        b: &mut Builder,
        params: ParamCount,
        deps: Deps,
        label: Label,
    ) -> Result<Vec<u32>, ScheduleError> {
        let dp = self.ctx.dp;
        let mut deps = deps;
        let mut fetched = None;
        if self.params_offloaded {
            // Offloaded parameters: this rank's shard comes from the host before the gather
            // (and is all the layer has where nothing is gathered).
            let bytes = dp.param_bytes(dp.reduced_grad_elems(params));
            let fetch = host_copy(b, bytes, false, deps, label)?;
            deps = [fetch].into();
            fetched = Some(fetch);
        }
        let mut ops = Vec::new();
        for c in dp.gather_calls(params) {
            ops.push(b.collective(c.kind, c.group, c.bytes, c.calls, deps.clone(), label)?);
        }
        if ops.is_empty() {
            ops.extend(fetched);
        }
        Ok(ops)
    }

    /// Ops at the start of the step: ZeRO-1/2 gathers of the previous update, the stale
    /// reduction of async sync, the unsharded gradient buffer of a ZeRO-3 step without sync
    /// and of a ZeRO-2 step that accumulates over micro batches.
    pub fn start(&mut self, b: &mut Builder, chunks: &[ChunkPlan]) -> Result<(), ScheduleError> {
        let dp = self.ctx.dp;
        if !dp.reduces() {
            return Ok(());
        }
        if dp.zero == Zero::ShardedOptimizer && dp.overlap_param_gather && dp.gather_at_start {
            for c in chunks {
                let ops = self.gather_params(b, c.params, Deps::new(), chunk_label(c))?;
                self.start_gathers.insert(c.layout.chunk, ops);
            }
        }
        let held = StepBuffers::new(
            self.ctx.s,
            self.ctx.plan,
            dp,
            chunks,
            self.module_bytes_per_param.is_some(),
        );
        if held.stale_bytes > 0 {
            let stale = b.alloc(
                Stream::Dp,
                MemCategory::Buffers,
                Device::Gpu,
                held.stale_bytes,
                Deps::new(),
                Label::default(),
            )?;
            self.step_bufs.push(stale);
            for c in chunks {
                self.reduce(b, c.params, Deps::new(), chunk_label(c))?;
            }
            if self.mirror_at() == Some(MirrorAt::Start) {
                self.mirror_all(b, chunks, None)?;
            }
        }
        if held.accumulation_bytes > 0 {
            let accumulation = b.alloc(
                Stream::Compute,
                MemCategory::Buffers,
                Device::Gpu,
                held.accumulation_bytes,
                Deps::new(),
                Label::default(),
            )?;
            self.step_bufs.push(accumulation);
        }
        // Pipelined FSDP reduces once per step: each chunk's gradients accumulate unsharded in
        // the reduce dtype until its last backward has reduce-scattered them.
        if dp.pipelined.is_some() && dp.syncs {
            for c in chunks {
                let tag = b.alloc(
                    Stream::Compute,
                    MemCategory::Buffers,
                    Device::Gpu,
                    dp.grad_bytes(c.params.dense.saturating_add(c.params.expert)),
                    Deps::new(),
                    chunk_label(c),
                )?;
                self.pipelined_grads.insert(c.layout.chunk, tag);
            }
        }
        if held.unsynced_bytes > 0 {
            let full = b.alloc(
                Stream::Compute,
                MemCategory::Buffers,
                Device::Gpu,
                held.unsynced_bytes,
                Deps::new(),
                Label::default(),
            )?;
            self.step_bufs.push(full);
        }
        Ok(())
    }

    /// After `compute`, a step of the backward that finalises its chunk's gradients (cut
    /// into `segs`), reduces the bucket that this step completes, if it completes one.
    pub fn finalising_bucket(
        &mut self,
        b: &mut Builder,
        segs: &[Seg],
        step: &Step,
        chunk: u32,
        compute: u32,
    ) -> Result<(), ScheduleError> {
        if !(step.finalising && self.ctx.overlap_buckets) {
            return Ok(());
        }
        if let Some(bucket) = bucket_completed(segs, self.ctx.dp.bucket_bytes, step.seg) {
            self.bucket(b, bucket, chunk, compute)?;
        }
        Ok(())
    }

    /// Overlapped bucket: reduce the gradients of `segs` as soon as `compute` finished.
    fn bucket(
        &mut self,
        b: &mut Builder,
        segs: &[Seg],
        chunk: u32,
        compute: u32,
    ) -> Result<(), ScheduleError> {
        let params = segs
            .iter()
            .fold(ParamCount::default(), |acc, s| acc.plus(s.params));
        let first = segs.first().map(|s| s.first_layer).unwrap_or(0);
        let layers = segs.iter().map(|s| s.num_layers).sum();
        let label = Label {
            microbatch: None,
            chunk,
            first_layer: first,
            num_layers: layers,
        };
        self.reduce(b, params, [compute], label)?;
        Ok(())
    }

    /// End of the step: the non-overlapped reduction, decompression, the optimizer and the
    /// ZeRO-1/2 parameter gather when it is not deferred to the next step.
    pub fn finish(
        &mut self,
        b: &mut Builder,
        chunks: &[ChunkPlan],
        last_grad_op: Option<u32>,
    ) -> Result<(), ScheduleError> {
        let dp = self.ctx.dp;
        if !dp.syncs {
            return Ok(());
        }
        if self.tail_reduce() {
            // Gradients finish from the last chunk down to the first.
            for c in chunks.iter().rev() {
                self.reduce(
                    b,
                    c.params,
                    last_grad_op.into_iter().collect::<Deps>(),
                    chunk_label(c),
                )?;
            }
        }
        if self.mirror_at() == Some(MirrorAt::Finish) {
            self.mirror_all(b, chunks, last_grad_op)?;
        }
        let mut deps = std::mem::take(&mut self.opt_deps);
        for d in std::mem::take(&mut self.decompress) {
            let op = self.compress_op(d.elems, d.wire_bytes);
            let decompressed = b.compute(op, d.deps, d.label)?;
            deps.push(match self.offloaded {
                Some(_) => {
                    let bytes = dp.param_bytes(d.kept_elems);
                    host_copy(b, bytes, true, [decompressed].into(), d.label)?
                }
                None => decompressed,
            });
        }
        // The op after which the updated parameters are on the GPU; `None` when they stay on
        // the host (offloaded parameters, which the gathers fetch).
        let updated = match self.offloaded {
            Some(step) => {
                if !dp.reduces() && self.mirror_at().is_none() {
                    // Nothing was reduced nor summed: every gradient goes to the host after
                    // the backward.
                    let params = chunks
                        .iter()
                        .fold(ParamCount::default(), |acc, c| acc.plus(c.params));
                    let bytes = dp.param_bytes(dp.reduced_grad_elems(params));
                    let grads: Deps = last_grad_op.into_iter().collect();
                    deps.push(host_copy(b, bytes, true, grads, Label::default())?);
                }
                let update = b.push(
                    Stream::Io,
                    OpKind::HostUpdate {
                        bytes: step.update_bytes,
                    },
                    deps,
                    Label::default(),
                )?;
                match step.params_bytes {
                    0 => None,
                    bytes => Some(host_copy(
                        b,
                        bytes,
                        false,
                        [update].into(),
                        Label::default(),
                    )?),
                }
            }
            None => {
                let mut opt = self.ctx.sizes.optimizer_step(self.stage);
                opt.phase = Phase::Optimizer;
                Some(b.compute(opt, deps, Label::default())?)
            }
        };
        if let Some(updated) = updated {
            if dp.zero == Zero::ShardedOptimizer && !dp.overlap_param_gather && dp.reduces() {
                for c in chunks {
                    self.gather_params(b, c.params, [updated].into(), chunk_label(c))?;
                }
            }
        }
        Ok(())
    }

    /// Whether this step reduces the gradients once, at its end, after the last backward.
    fn tail_reduce(&self) -> bool {
        let dp = self.ctx.dp;
        dp.zero != Zero::ShardedParams
            && !dp.async_reduce
            && !self.ctx.overlap_buckets
            && dp.reduces()
    }

    /// Where this step sums DualPipe's copies; `None` where it does not (not DualPipe, or a
    /// step without sync).
    fn mirror_at(&self) -> Option<MirrorAt> {
        let dp = self.ctx.dp;
        if !(dp.mirror_copies && dp.syncs) {
            None
        } else if dp.async_reduce && dp.reduces() {
            Some(MirrorAt::Start)
        } else if self.tail_reduce() {
            Some(MirrorAt::Finish)
        } else {
            Some(MirrorAt::Pass)
        }
    }

    /// After the pass that last produces chunk `c`'s gradients (`grads`, the op that holds
    /// them) and the reductions it issued: the sum with the other copy, where the step sums
    /// as it goes. Both ranks of a pair reach their copies' last passes in one order (stage
    /// `pp - 1 - s` runs stage `s`'s order of directions, its chunks swapped), so their
    /// all-reduces match.
    pub fn chunk_grads_done(
        &mut self,
        b: &mut Builder,
        c: &ChunkPlan,
        grads: u32,
    ) -> Result<(), ScheduleError> {
        if self.mirror_at() == Some(MirrorAt::Pass) {
            self.mirror(b, c, Some(grads))?;
        }
        Ok(())
    }

    /// The sums of every chunk at once, in model order (the order both ranks of a pair share).
    fn mirror_all(
        &mut self,
        b: &mut Builder,
        chunks: &[ChunkPlan],
        grads: Option<u32>,
    ) -> Result<(), ScheduleError> {
        let mut order: Vec<&ChunkPlan> = chunks.iter().collect();
        order.sort_by_key(|c| c.layout.virtual_stage);
        for c in order {
            self.mirror(b, c, grads)?;
        }
        Ok(())
    }

    /// DualPipe: all-reduce chunk `c`'s reduced gradients (its shard under ZeRO) with the
    /// other copy of its model stage over [`GroupKind::PpMirror`], after the chunk's last
    /// data-parallel reduction or, without one, after `grads`. Compressed as the
    /// data-parallel reduction is: the decompression before the optimizer waits for it.
    fn mirror(
        &mut self,
        b: &mut Builder,
        c: &ChunkPlan,
        grads: Option<u32>,
    ) -> Result<(), ScheduleError> {
        let dp = self.ctx.dp;
        let elems = dp.reduced_grad_elems(c.params);
        if elems == 0 {
            return Ok(());
        }
        let chunk = c.layout.chunk;
        let label = chunk_label(c);
        let mut deps: Deps = self
            .reduced
            .get(&chunk)
            .copied()
            .or(grads)
            .into_iter()
            .collect();
        let pending = self.decompress.iter().any(|d| d.label.chunk == chunk);
        let wire = dp.wire_grad_bytes(elems);
        if dp.compresses() && !pending {
            deps = [b.compute(self.compress_op(elems, wire), deps, label)?].into();
        }
        let mut ops = Vec::with_capacity(2);
        for (bytes, calls) in dp.grad_calls(elems) {
            ops.push(b.collective(
                CollectiveKind::AllReduce,
                GroupKind::PpMirror,
                bytes,
                calls,
                deps.clone(),
                label,
            )?);
        }
        if !dp.compresses() {
            match self.offloaded {
                Some(_) => {
                    let bytes = dp.param_bytes(elems);
                    let copy = host_copy(b, bytes, true, ops.into(), label)?;
                    self.opt_deps.push(copy);
                }
                None => self.opt_deps.extend(ops),
            }
        } else if pending {
            for d in self
                .decompress
                .iter_mut()
                .filter(|d| d.label.chunk == chunk)
            {
                d.deps.extend(ops.iter().copied());
            }
        } else {
            self.decompress.push(Decompress {
                deps: ops,
                elems,
                kept_elems: elems,
                wire_bytes: wire,
                label,
            });
        }
        Ok(())
    }

    /// Buffers held for the whole step, to free at its end.
    pub fn step_buffers(&mut self) -> Vec<Option<AllocTag>> {
        std::mem::take(&mut self.step_bufs)
    }
}
