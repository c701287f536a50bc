//! The engine's per-rank memory timeline: live device bytes per category moved by `Alloc` and
//! `Free` ops, the peak with its time, op and breakdown, the first alloc over the device's
//! capacity, and host (offload) memory. Kept apart from the event loop so that the loop only
//! says when an op ran, and this says what that did to memory.

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
