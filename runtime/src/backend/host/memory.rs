//! Real buffers for the schedule's Alloc/Free ops, handed out as a framework's caching allocator
//! does (PyTorch's on a GPU): a Free keeps its buffer, and a later Alloc of the same size takes
//! it back without asking the operating system; an Alloc with no such buffer takes a new
//! `Vec<u8>` of the planned size and writes every byte so its pages are resident. Every step
//! after the first allocates the same sizes, so it runs on memory it already holds.
//!
//! Fresh memory for every Alloc would cost page faults (and the kernel's work behind them),
//! the host's own cost, not the schedule's: the compute op after a fresh 529 KiB allocation
//! ran 10% longer (`lab/examples/step_probe.rs`,
//! docs/journal/2026-11-validation-history.md, 2026-11-23).
//!
//! The peak is taken from what is actually held, when it is held (measured order across
//! streams, not program order); buffers kept for reuse are not held.

use crate::backend::Allocation;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use twin_sim::schedule::{Device, MemCategory};

/// Peak of live device buffers and what made it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldPeak {
    pub peak_bytes: u64,
    /// By category at the peak, indexed by [`MemCategory`].
    pub at_peak: [u64; MemCategory::COUNT],
    pub peak_op: Option<u32>,
    pub peak_time_ns: u64,
    pub host_peak_bytes: u64,
}

#[derive(Default)]
pub struct Held {
    live: BTreeMap<u32, (Allocation, Vec<u8>)>,
    /// Freed buffers kept for reuse, by length.
    cached: BTreeMap<usize, Vec<Vec<u8>>>,
    /// Bytes of new buffers taken since the last reset (none in a step like the one before).
    fresh_bytes: u64,
    now: [u64; MemCategory::COUNT],
    host_now_bytes: u64,
    pub peak: HeldPeak,
}

impl Held {
    fn device_now(&self) -> u64 {
        self.now.iter().sum()
    }

    /// Hold a buffer for `a` (op `op`, at aligned time `time_ns`): a kept one of its size, or a
    /// new one with every byte written.
    pub fn alloc(&mut self, a: Allocation, op: u32, time_ns: u64) -> Result<(), String> {
        if self.live.contains_key(&a.tag) {
            return Err(format!("alloc tag {} is already live", a.tag));
        }
        let len = usize::try_from(a.bytes).map_err(|_| format!("{} bytes", a.bytes))?;
        let buf = match self.cached.get_mut(&len).and_then(Vec::pop) {
            Some(buf) => buf,
            None => {
                self.fresh_bytes = self.fresh_bytes.saturating_add(a.bytes);
                fresh(len)?
            }
        };
        self.hold(a, buf, op, time_ns);
        Ok(())
    }

    /// Bytes of new buffers taken since the last reset.
    pub fn fresh_bytes(&self) -> u64 {
        self.fresh_bytes
    }

    /// Bytes of the buffers kept for reuse.
    pub fn cached_bytes(&self) -> u64 {
        self.cached
            .iter()
            .map(|(len, bufs)| (*len as u64).saturating_mul(bufs.len() as u64))
            .sum()
    }

    /// Count `a` as held without a buffer of its own: the model state, whose real buffers
    /// live across steps in [`super::state::ModelState`].
    pub fn account(&mut self, a: Allocation, op: u32, time_ns: u64) -> Result<(), String> {
        if self.live.contains_key(&a.tag) {
            return Err(format!("alloc tag {} is already live", a.tag));
        }
        self.hold(a, Vec::new(), op, time_ns);
        Ok(())
    }

    fn hold(&mut self, a: Allocation, buf: Vec<u8>, op: u32, time_ns: u64) {
        self.live.insert(a.tag, (a, buf));
        match a.device {
            Device::Gpu => {
                if let Some(slot) = self.now.get_mut(a.category as usize) {
                    *slot += a.bytes;
                }
                let total = self.device_now();
                if total > self.peak.peak_bytes {
                    self.peak.peak_bytes = total;
                    self.peak.at_peak = self.now;
                    self.peak.peak_op = Some(op);
                    self.peak.peak_time_ns = time_ns;
                }
            }
            Device::Host => {
                self.host_now_bytes += a.bytes;
                self.peak.host_peak_bytes = self.peak.host_peak_bytes.max(self.host_now_bytes);
            }
        }
    }

    /// Drop the buffer of `tag`.
    pub fn free(&mut self, tag: u32) -> Result<(), String> {
        let (a, buf) = self
            .live
            .remove(&tag)
            .ok_or_else(|| format!("free of tag {tag}, which is not held"))?;
        self.keep(buf);
        match a.device {
            Device::Gpu => {
                if let Some(slot) = self.now.get_mut(a.category as usize) {
                    *slot = slot.saturating_sub(a.bytes);
                }
            }
            Device::Host => self.host_now_bytes = self.host_now_bytes.saturating_sub(a.bytes),
        }
        Ok(())
    }

    fn keep(&mut self, buf: Vec<u8>) {
        if !buf.is_empty() {
            self.cached.entry(buf.len()).or_default().push(buf);
        }
    }

    /// Start a new step: keep leftovers for reuse, and reset what is held and the peak.
    pub fn reset(&mut self) {
        let live = std::mem::take(&mut self.live);
        for (_, (_, buf)) in live {
            self.keep(buf);
        }
        let cached = std::mem::take(&mut self.cached);
        *self = Held {
            cached,
            ..Held::default()
        };
    }
}

/// A new buffer of `len` bytes with every page resident: writing every byte makes it so (a
/// lazily mapped zero page is not). What an Alloc with no kept buffer of its size takes (the
/// probes in `lab/examples` compare this with a kept buffer).
pub fn fresh(len: usize) -> Result<Vec<u8>, String> {
    let mut buf: Vec<u8> = Vec::new();
    buf.try_reserve_exact(len)
        .map_err(|e| format!("cannot allocate {len} bytes: {e}"))?;
    buf.resize(len, 0);
    std::hint::black_box(&mut buf);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(tag: u32, category: MemCategory, bytes: u64) -> Allocation {
        Allocation {
            tag,
            category,
            device: Device::Gpu,
            bytes,
        }
    }

    #[test]
    fn peak_is_what_was_held_at_once() {
        let mut h = Held::default();
        h.alloc(a(1, MemCategory::Weights, 10_000), 0, 5).unwrap();
        h.alloc(a(2, MemCategory::Activations, 5_000), 1, 6)
            .unwrap();
        h.free(2).unwrap();
        h.alloc(a(3, MemCategory::Activations, 3_000), 3, 9)
            .unwrap();
        assert_eq!(h.peak.peak_bytes, 15_000);
        assert_eq!(h.peak.peak_op, Some(1));
        assert_eq!(h.peak.peak_time_ns, 6);
        assert_eq!(h.peak.at_peak[MemCategory::Activations as usize], 5_000);
        assert!(h.free(2).unwrap_err().contains("not held"));
        assert!(h.alloc(a(1, MemCategory::Grads, 1), 4, 10).is_err());
    }

    #[test]
    fn a_freed_buffer_is_reused_for_the_same_size_only() {
        let mut h = Held::default();
        h.alloc(a(1, MemCategory::Activations, 5_000), 0, 0)
            .unwrap();
        let first = h.live[&1].1.as_ptr();
        h.free(1).unwrap();
        assert_eq!(h.cached_bytes(), 5_000);
        // Another size gets memory of its own; the same size gets the kept buffer back.
        h.alloc(a(2, MemCategory::Activations, 4_000), 1, 1)
            .unwrap();
        h.alloc(a(3, MemCategory::Activations, 5_000), 2, 2)
            .unwrap();
        assert_eq!(h.live[&3].1.as_ptr(), first);
        assert_eq!(h.live[&3].1.len(), 5_000);
        assert_eq!(h.cached_bytes(), 0);
        // Kept buffers are not held: the peak counts live buffers only.
        assert_eq!(h.peak.peak_bytes, 9_000);
        // A new step keeps the leftovers for reuse and starts its peak afresh.
        h.reset();
        assert_eq!(h.cached_bytes(), 9_000);
        assert_eq!(h.peak.peak_bytes, 0);
        h.alloc(a(4, MemCategory::Activations, 4_000), 0, 0)
            .unwrap();
        assert_eq!(h.cached_bytes(), 5_000);
        assert_eq!(h.peak.peak_bytes, 4_000);
    }
}
