//! Real buffers for the schedule's Alloc/Free ops: each Alloc takes a `Vec<u8>` of the planned
//! size and writes every byte so its pages are resident, each Free drops it. The peak is taken from
//! what is actually held, when it is held (measured order across streams, not program order).

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
    now: [u64; MemCategory::COUNT],
    host_now_bytes: u64,
    pub peak: HeldPeak,
}

impl Held {
    fn device_now(&self) -> u64 {
        self.now.iter().sum()
    }

    /// Allocate and touch a buffer for `a` (op `op`, at aligned time `time_ns`).
    pub fn alloc(&mut self, a: Allocation, op: u32, time_ns: u64) -> Result<(), String> {
        if self.live.contains_key(&a.tag) {
            return Err(format!("alloc tag {} is already live", a.tag));
        }
        let len = usize::try_from(a.bytes).map_err(|_| format!("{} bytes", a.bytes))?;
        let mut buf: Vec<u8> = Vec::new();
        buf.try_reserve_exact(len)
            .map_err(|e| format!("cannot allocate {} bytes: {e}", a.bytes))?;
        // Writing every byte makes every page resident (a lazily mapped zero page is not).
        buf.resize(len, 0);
        std::hint::black_box(&mut buf);
        self.hold(a, buf, op, time_ns);
        Ok(())
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
        drop(buf);
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

    /// Start a new step: drop leftovers and reset the peak.
    pub fn reset(&mut self) {
        *self = Held::default();
    }
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
}
