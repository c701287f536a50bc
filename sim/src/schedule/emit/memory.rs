//! The memory one stage's program holds outside the pipeline and data-parallel buffers: the
//! model state and the expert dispatcher's buffers for the whole step (and, under DeepSpeed
//! accounting, the host memory that building the model needs, allocated and freed first), and
//! the saved activations of each forward with the buffer a recompute re-creates, each freed
//! after the pass that last reads it.

use crate::schedule::builder::{AllocTag, Builder};
use crate::schedule::chunks::Seg;
use crate::schedule::emit::StageCtx;
use crate::schedule::{Deps, Device, Label, MemCategory, ScheduleError, Stream};
use std::collections::BTreeMap;

/// Allocates the stage's model state (after building the model on the host, which is done
/// before the state exists); returns the tags to free at the end of the step.
pub fn alloc_state(
    ctx: &StageCtx,
    b: &mut Builder,
    stage: u32,
) -> Result<Vec<Option<AllocTag>>, ScheduleError> {
    let state = ctx.sizes.state_bytes(stage);
    let init = b.alloc(
        Stream::Compute,
        MemCategory::Weights,
        Device::Host,
        state.host_init_bytes,
        Deps::new(),
        Label::default(),
    )?;
    b.free(Stream::Compute, init, Deps::new(), Label::default())?;
    let mut tags = Vec::new();
    for (cat, dev, bytes) in [
        (
            MemCategory::Reserved,
            Device::Gpu,
            ctx.s.memory.reserved_bytes,
        ),
        // DeepEP's all-to-all buffers, held from start-up (`workload::dispatch_buffer_bytes`).
        (
            MemCategory::Buffers,
            Device::Gpu,
            crate::workload::dispatch_buffer_bytes(ctx.s),
        ),
        (MemCategory::Weights, Device::Gpu, state.weights_bytes),
        (MemCategory::Grads, Device::Gpu, state.grads_bytes),
        (MemCategory::Optimizer, Device::Gpu, state.optimizer_bytes),
        (MemCategory::Optimizer, Device::Host, state.host_bytes),
    ] {
        tags.push(b.alloc(
            Stream::Compute,
            cat,
            dev,
            bytes,
            Deps::new(),
            Label::default(),
        )?);
    }
    Ok(tags)
}

/// The activations alive in the stage: the saved ones of each (micro batch, chunk), one per
/// forward segment, and the buffer of the latest recompute.
#[derive(Default)]
pub struct Activations {
    saved: BTreeMap<(u32, u32), Vec<Option<AllocTag>>>,
    recomputed: Option<AllocTag>,
}

impl Activations {
    /// Allocates what a forward segment of `(mb, chunk)` saves, right before its compute.
    pub fn save(
        &mut self,
        b: &mut Builder,
        key: (u32, u32),
        seg: &Seg,
        label: Label,
    ) -> Result<(), ScheduleError> {
        let tag = b.alloc(
            Stream::Compute,
            MemCategory::Activations,
            Device::Gpu,
            seg.work.activation_bytes,
            Deps::new(),
            label,
        )?;
        self.saved.entry(key).or_default().push(tag);
        Ok(())
    }

    /// Allocates what a recompute re-creates, freeing a stale recompute buffer first.
    pub fn recompute(
        &mut self,
        b: &mut Builder,
        seg: &Seg,
        label: Label,
    ) -> Result<(), ScheduleError> {
        b.free(Stream::Compute, self.recomputed.take(), Deps::new(), label)?;
        self.recomputed = b.alloc(
            Stream::Compute,
            MemCategory::Activations,
            Device::Gpu,
            seg.work.recompute_bytes,
            Deps::new(),
            label,
        )?;
        Ok(())
    }

    /// Frees the recompute buffer after `compute`, the backward that read it.
    pub fn free_recomputed(
        &mut self,
        b: &mut Builder,
        deps: impl Into<Deps>,
        label: Label,
    ) -> Result<(), ScheduleError> {
        b.free(Stream::Compute, self.recomputed.take(), deps, label)
    }

    /// Frees the saved activations of segment `seg` of `key` after `compute`.
    pub fn free_segment(
        &mut self,
        b: &mut Builder,
        key: (u32, u32),
        seg: usize,
        compute: u32,
        label: Label,
    ) -> Result<(), ScheduleError> {
        let tag = self
            .saved
            .get_mut(&key)
            .and_then(|v| v.get_mut(seg))
            .and_then(Option::take);
        b.free(Stream::Compute, tag, [compute], label)
    }

    /// Frees every saved activation of `key` after `compute` (when the backward was cut
    /// differently from the forward).
    pub fn free_all(
        &mut self,
        b: &mut Builder,
        key: (u32, u32),
        compute: u32,
        label: Label,
    ) -> Result<(), ScheduleError> {
        for tag in self.saved.remove(&key).unwrap_or_default() {
            b.free(Stream::Compute, tag, [compute], label)?;
        }
        Ok(())
    }
}
