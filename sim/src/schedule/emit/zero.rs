//! ZeRO-3 (FSDP) parameter traffic of one stage's program: which pass needs which parameter
//! gather, the gather issued for the first pass that needs it with a one-ahead prefetch
//! throttled by the pass before, its buffer freed after its last user, and each pass's own
//! unsharded gradient buffer reduce-scattered right after it. ZeRO-1/2 gathers issued at the
//! start of the step are waited for here too, by each chunk's first forward.

use crate::scenario::framework::GradReduce;
use crate::schedule::builder::{AllocTag, Builder};
use crate::schedule::chunks::{ChunkPlan, Seg};
use crate::schedule::dp::Zero;
use crate::schedule::emit::dp::DpEmitter;
use crate::schedule::emit::label;
use crate::schedule::emit::steps::Step;
use crate::schedule::pipeline::{Pass, Slot};
use crate::schedule::{Deps, Device, Label, MemCategory, ScheduleError, Stream};
use crate::workload::ParamCount;

/// One ZeRO-3 gather: the parameters it brings and the largest module among them.
#[derive(Clone, Copy, Debug)]
pub struct Gather {
    pub params: ParamCount,
    pub largest_module_params: u64,
    pub label: Label,
}

/// A ZeRO-3 gather once issued: the collectives to wait for and its buffer.
pub(super) struct Issued {
    ops: Vec<u32>,
    buffer: Option<AllocTag>,
}

/// Each ZeRO-3 gather, in gather order.
pub fn steps_gathers<'c>(
    steps: &[Step],
    order: &[Slot],
    chunk_of: &dyn Fn(u32) -> Result<&'c ChunkPlan, ScheduleError>,
) -> Result<Vec<Gather>, ScheduleError> {
    let mut out = Vec::new();
    for st in steps.iter().filter(|s| s.new_gather) {
        let slot = order
            .get(st.slot)
            .ok_or_else(|| ScheduleError::Unsupported("step outside the order".into()))?;
        let seg = chunk_of(slot.chunk)?
            .segs_for(st.finalising)
            .get(st.seg)
            .ok_or_else(|| ScheduleError::Unsupported("segment out of range".into()))?;
        out.push(Gather {
            params: seg.params,
            largest_module_params: seg.work.largest_module_params,
            label: label(None, slot.chunk, seg.first_layer, seg.num_layers),
        });
    }
    Ok(out)
}

/// For each step, whether it is the last to use its gather (so its buffer can go after it).
/// A gather is used by consecutive steps, or, kept for the step under pipelined FSDP, by
/// every pass of its segment.
pub fn last_gather_users(steps: &[Step]) -> Vec<bool> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = vec![false; steps.len()];
    for (i, s) in steps.iter().enumerate().rev() {
        if let Some(g) = s.gather {
            if let Some(o) = out.get_mut(i) {
                *o = seen.insert(g);
            }
        }
    }
    out
}

impl DpEmitter<'_> {
    /// Bytes one gather of `params` brings: the parameters of every data-parallel group they
    /// belong to, in the compute dtype.
    fn gathered_bytes(&self, params: ParamCount) -> u64 {
        let dp = self.ctx.dp;
        let elems: u64 = dp.grad_groups(params).iter().map(|(_, e)| *e).sum();
        dp.param_bytes(elems)
    }

    fn issue_gather(&mut self, b: &mut Builder, k: usize, deps: Deps) -> Result<(), ScheduleError> {
        if self.issued.get(k).map(Option::is_some).unwrap_or(true) {
            return Ok(());
        }
        let Some(&Gather { params, label, .. }) = self.gathers.get(k) else {
            return Ok(());
        };
        // DeepSpeed accounting allocates the module buffer when the pass starts instead.
        let buffer = match self.module_bytes_per_param {
            Some(_) => None,
            None => b.alloc(
                Stream::Dp,
                MemCategory::Buffers,
                Device::Gpu,
                self.gathered_bytes(params),
                deps,
                label,
            )?,
        };
        let ops = self.gather_params(b, params, Deps::new(), label)?;
        if let Some(slot) = self.issued.get_mut(k) {
            *slot = Some(Issued { ops, buffer });
        }
        Ok(())
    }

    /// Ops the compute of a pass must wait for; issues ZeRO-3 gathers (the pass's own if not
    /// yet issued, and the next one as prefetch once the pass before this one is done).
    pub fn before_compute(
        &mut self,
        b: &mut Builder,
        gather: Option<usize>,
        new_gather: bool,
        slot: Slot,
    ) -> Result<Vec<u32>, ScheduleError> {
        let mut deps = Vec::new();
        if slot.pass == Pass::Forward {
            if let Some(ops) = self.start_gathers.remove(&slot.chunk) {
                deps.extend(ops);
            }
        }
        if let (Some(k), true) = (gather, new_gather) {
            self.issue_gather(b, k, Deps::new())?;
            let throttle: Deps = k
                .checked_sub(1)
                .and_then(|p| self.gather_users.get(p).copied().flatten())
                .into_iter()
                .collect();
            self.issue_gather(b, k + 1, throttle)?;
            let module_buffer = match (self.module_bytes_per_param, self.gathers.get(k)) {
                (Some(per_param), Some(g)) => b.alloc(
                    Stream::Compute,
                    MemCategory::Buffers,
                    Device::Gpu,
                    g.largest_module_params.saturating_mul(per_param),
                    Deps::new(),
                    g.label,
                )?,
                _ => None,
            };
            let mut waits = Vec::new();
            if let Some(Some(issued)) = self.issued.get_mut(k) {
                waits.extend(issued.ops.iter().copied());
                if module_buffer.is_some() {
                    issued.buffer = module_buffer;
                }
            }
            match self.gathers.get(k).filter(|_| self.copies()) {
                Some(g) => deps.push(self.copy_out(b, g.params, waits, g.label)?),
                None => deps.extend(waits),
            }
        }
        Ok(deps)
    }

    /// FSDP2's copy-out (`foreach_all_gather_copy_out`): once a gather is done, the compute
    /// stream copies its output into the unit's unsharded parameters (the gathered bytes read
    /// and written, one kernel); the parameters are allocated for the copy while the
    /// all-gather output, the gather's buffer, still holds the same bytes. Returns the copy.
    fn copy_out(
        &mut self,
        b: &mut Builder,
        params: ParamCount,
        waits: Vec<u32>,
        label: Label,
    ) -> Result<u32, ScheduleError> {
        let bytes = self.gathered_bytes(params);
        let second = b.alloc(
            Stream::Compute,
            MemCategory::Buffers,
            Device::Gpu,
            bytes,
            Deps::new(),
            label,
        )?;
        let copy = b.compute(self.copy_op(bytes.saturating_mul(2)), waits, label)?;
        b.free(Stream::Compute, second, [copy], label)?;
        Ok(copy)
    }

    /// After a pass's compute: note the gather's user; free the gather buffer after its last.
    pub fn after_compute(
        &mut self,
        b: &mut Builder,
        gather: Option<usize>,
        compute: u32,
        last_user: bool,
    ) -> Result<(), ScheduleError> {
        let Some(k) = gather else { return Ok(()) };
        if let Some(u) = self.gather_users.get_mut(k) {
            *u = Some(compute);
        }
        if last_user {
            let buffer = self
                .issued
                .get_mut(k)
                .and_then(Option::as_mut)
                .and_then(|i| i.buffer.take());
            b.free(Stream::Compute, buffer, [compute], Label::default())?;
        }
        Ok(())
    }

    pub(super) fn reduces_per_pass(&self) -> bool {
        let dp = self.ctx.dp;
        dp.zero == Zero::ShardedParams && dp.syncs && dp.reduces() && dp.pipelined.is_none()
    }

    /// Pipelined FSDP ([`crate::schedule::dp::Pipelined`]): after a step of its chunk's last
    /// backward, reduce-scatter this segment's gradients (`last-microbatch`) or, at the end
    /// of that pass, every segment's in backward order (`after-backward`); once the chunk's
    /// reductions are issued, its accumulated gradients are freed after the ops that read
    /// them. Returns those ops at the end of the pass: the rank's next compute waits for them,
    /// as FSDP2's post-backward callback makes the compute stream wait for the last
    /// reduce-scatter (pytorch/pytorch@0138610331c90b8053a0bfc6df0175b200a1cad2:
    /// torch/distributed/fsdp/_fully_shard/_fsdp_state.py `_root_post_backward_final_callback`:
    /// `current_stream().wait_event(self._comm_ctx.reduce_scatter_state.event)`, called by the
    /// pipeline stage's `_post_backward`).
    pub fn pipelined_grads(
        &mut self,
        b: &mut Builder,
        segs: &[Seg],
        step: &Step,
        chunk: u32,
        grads: u32,
        last_of_slot: bool,
    ) -> Result<Vec<u32>, ScheduleError> {
        let dp = self.ctx.dp;
        let Some(p) = dp.pipelined else {
            return Ok(Vec::new());
        };
        if !(dp.syncs && dp.reduces() && step.last_grads) {
            return Ok(Vec::new());
        }
        let mut readers = Vec::new();
        let unit = |seg: &Seg| label(None, chunk, seg.first_layer, seg.num_layers);
        if p.reduce == GradReduce::AfterBackward {
            if last_of_slot {
                for seg in segs.iter().rev() {
                    readers.extend(self.reduce(b, seg.params, [grads], unit(seg))?);
                }
            }
        } else if let Some(seg) = segs.get(step.seg) {
            readers.extend(self.reduce(b, seg.params, [grads], unit(seg))?);
        }
        self.pipelined_readers.extend(readers);
        if !last_of_slot {
            return Ok(Vec::new());
        }
        let buffer = self.pipelined_grads.remove(&chunk).flatten();
        let readers = std::mem::take(&mut self.pipelined_readers);
        b.free(
            Stream::Dp,
            buffer,
            readers.iter().copied().collect::<Deps>(),
            Label::default(),
        )?;
        Ok(readers)
    }

    /// The unsharded gradient buffer a ZeRO-3 pass writes before it is reduce-scattered.
    pub fn grad_buffer(
        &mut self,
        b: &mut Builder,
        seg: &Seg,
        label: Label,
    ) -> Result<Option<AllocTag>, ScheduleError> {
        if !self.reduces_per_pass() {
            return Ok(None);
        }
        let bytes = match self.module_bytes_per_param {
            Some(per_param) => seg.work.largest_module_params.saturating_mul(per_param),
            None => self.ctx.dp.grad_bytes(seg.elems()),
        };
        b.alloc(
            Stream::Compute,
            MemCategory::Buffers,
            Device::Gpu,
            bytes,
            Deps::new(),
            label,
        )
    }

    /// ZeRO-3: reduce-scatter this pass's gradients, then free their buffer.
    pub fn per_pass_grads(
        &mut self,
        b: &mut Builder,
        seg: &Seg,
        compute: u32,
        buffer: Option<AllocTag>,
        label: Label,
    ) -> Result<(), ScheduleError> {
        if !self.reduces_per_pass() {
            return Ok(());
        }
        let ops = self.reduce(b, seg.params, [compute], label)?;
        let deps = ops.last().map(|&o| [o]).unwrap_or_else(|| [compute]);
        b.free(Stream::Dp, buffer, deps, label)
    }
}
