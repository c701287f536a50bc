//! The engine's per-rank memory timeline: live device bytes per category moved by `Alloc` and
//! `Free` ops, the peak with its time, op and breakdown, the first alloc over the device's
//! capacity, and host (offload) memory. Kept apart from the event loop: the loop only says
//! when ops ended, and [`replay`] says, after the step, what the allocs and frees did to
//! memory. At one instant they apply in program order, whatever order the events of that
//! instant were processed in, so the timeline does not depend on the event loop's order.

use super::compile::{CProgram, Effect, When, MEM_REF};
use crate::schedule::MemCategory;

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RankMem {
    pub live: [u64; MemCategory::COUNT],
    pub total: u64,
    pub host: u64,
    pub host_peak: u64,
    pub peak: u64,
    pub peak_ns: u64,
    pub peak_op: Option<u32>,
    pub at_peak: [u64; MemCategory::COUNT],
    /// First alloc over the capacity, and when.
    pub over_op: Option<u32>,
    pub over_ns: u64,
}

impl RankMem {
    /// Apply alloc op `op` at `now`; returns whether device memory changed.
    pub fn alloc(
        &mut self,
        now: u64,
        op: u32,
        category: usize,
        gpu: bool,
        bytes: u64,
        capacity_bytes: u64,
    ) -> bool {
        if !gpu {
            self.host = self.host.saturating_add(bytes);
            self.host_peak = self.host_peak.max(self.host);
            return false;
        }
        if let Some(live) = self.live.get_mut(category) {
            *live = live.saturating_add(bytes);
        }
        self.total = self.total.saturating_add(bytes);
        if self.total > self.peak {
            self.peak = self.total;
            self.peak_ns = now;
            self.peak_op = Some(op);
            self.at_peak = self.live;
        }
        if self.total > capacity_bytes && self.over_op.is_none() {
            self.over_op = Some(op);
            self.over_ns = now;
        }
        true
    }

    /// Undo an allocation; returns whether device memory changed. The engine frees only
    /// allocations that have run, so nothing goes below zero.
    pub fn free(&mut self, category: usize, gpu: bool, bytes: u64) -> bool {
        if !gpu {
            debug_assert!(self.host >= bytes);
            self.host = self.host.saturating_sub(bytes);
            return false;
        }
        if let Some(live) = self.live.get_mut(category) {
            debug_assert!(*live >= bytes && self.total >= bytes);
            *live = live.saturating_sub(bytes);
        }
        self.total = self.total.saturating_sub(bytes);
        true
    }

    /// Device and host bytes still live.
    pub fn end_bytes(&self) -> u64 {
        self.total.saturating_add(self.host)
    }
}

/// One memory op's effect as the replay applied it: when, the op (IR index), and the device
/// bytes live after it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Applied {
    pub time_ns: u64,
    pub op: u32,
    pub total: u64,
    pub live: [u64; MemCategory::COUNT],
    /// Whether it changed device memory (a host alloc or free does not).
    pub changed: bool,
}

/// A free that would take effect before its alloc: the free's and the alloc's IR indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FreeFirst {
    pub free: u32,
    pub alloc: u32,
}

/// The memory timeline of one simulated rank, replayed from its step: every alloc and free of
/// its program takes effect at its time, the end of the last op it waited on (the op before
/// it on its stream and its deps) or, for a priced one the engine ran, its own end (`ends`,
/// by record slot). Effects at the same time apply in program order. `times` and `order` are
/// scratch; `applied`, when given, receives every effect in the order applied.
pub(crate) fn replay(
    prog: &CProgram,
    ends: &[u64],
    capacity_bytes: u64,
    scratch: &mut (Vec<u64>, Vec<(u64, u32)>),
    mut applied: Option<&mut Vec<Applied>>,
) -> Result<RankMem, FreeFirst> {
    let (times, order) = scratch;
    times.clear();
    for m in &prog.mem_ops {
        let t = match m.when {
            When::Ran(slot) => ends.get(slot as usize).copied().unwrap_or(0),
            When::After { start, end } => prog
                .mem_waits
                .get(start as usize..end as usize)
                .unwrap_or(&[])
                .iter()
                .map(|&w| {
                    if w & MEM_REF != 0 {
                        times.get((w & !MEM_REF) as usize).copied().unwrap_or(0)
                    } else {
                        ends.get(w as usize).copied().unwrap_or(0)
                    }
                })
                .max()
                .unwrap_or(0),
        };
        times.push(t);
    }
    order.clear();
    order.extend(times.iter().enumerate().map(|(k, &t)| (t, k as u32)));
    // (time, position) is unique, and positions are in program order.
    order.sort_unstable();
    let mut mem = RankMem::default();
    for &(t, k) in order.iter() {
        let Some(m) = prog.mem_ops.get(k as usize) else {
            continue;
        };
        let changed = match m.effect {
            Effect::Alloc {
                category,
                gpu,
                bytes,
            } => mem.alloc(t, m.index, category as usize, gpu, bytes, capacity_bytes),
            Effect::Free { alloc } => {
                let a = prog.mem_ops.get(alloc as usize);
                if times.get(alloc as usize).is_none_or(|&ta| ta > t) {
                    return Err(FreeFirst {
                        free: m.index,
                        alloc: a.map_or(alloc, |a| a.index),
                    });
                }
                match a.map(|a| a.effect) {
                    Some(Effect::Alloc {
                        category,
                        gpu,
                        bytes,
                    }) => mem.free(category as usize, gpu, bytes),
                    _ => false,
                }
            }
        };
        if let Some(out) = applied.as_deref_mut() {
            out.push(Applied {
                time_ns: t,
                op: m.index,
                total: mem.total,
                live: mem.live,
                changed,
            });
        }
    }
    Ok(mem)
}
