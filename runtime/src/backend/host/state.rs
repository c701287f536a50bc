//! The model state a host rank really keeps: its weight shard and optimizer state, one f32
//! buffer per state allocation of the schedule (Weights and Optimizer categories), created
//! once per run from the scenario seed and the rank, kept across steps, and changed only by
//! the step's Optimizer op. The update is cheap, deterministic and order-sensitive
//! (`w = w * DECAY + g(step, i)`), so a lost or twice-applied step changes the final digest;
//! that is what checkpoints save and restore.

use crate::checkpoint::state::{self as payload, StateBuffers, StateInfo};
use crate::error::RuntimeError;
use crate::transport::frame::checksum;
use std::collections::BTreeMap;
use twin_sim::schedule::{Device, MemCategory};

/// Per-step decay of the stand-in update: 1 - 2^-10, exactly representable.
const DECAY: f32 = 1.0 - 1.0 / 1024.0;
/// Distinct increments per buffer and step (a power of two, so a chunk fits in L1).
const UPDATE_TABLE: usize = 1024;

pub use crate::checkpoint::state::is_state;

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A value in [-0.5, 0.5) from 24 bits of a hash.
fn unit(h: u64) -> f32 {
    (h >> 40) as f32 / (1u64 << 24) as f32 - 0.5
}

#[derive(Clone, Debug, PartialEq)]
struct Buffer {
    category: MemCategory,
    device: Device,
    data: Vec<f32>,
}

/// One rank's persistent model state, keyed by the schedule's allocation tag.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelState {
    seed: u64,
    rank: u32,
    buffers: BTreeMap<u32, Buffer>,
}

impl ModelState {
    pub fn new(seed: u64, rank: u32) -> ModelState {
        ModelState {
            seed,
            rank,
            buffers: BTreeMap::new(),
        }
    }

    /// Make sure the buffer of `tag` exists (initialised from seed, rank and tag on first
    /// use); an existing one must have the planned size.
    pub fn ensure(
        &mut self,
        tag: u32,
        category: MemCategory,
        device: Device,
        bytes: u64,
    ) -> Result<(), String> {
        let len = usize::try_from(bytes.div_ceil(4)).map_err(|_| format!("{bytes} bytes"))?;
        if let Some(b) = self.buffers.get(&tag) {
            if b.data.len() != len || b.category != category || b.device != device {
                return Err(format!(
                    "state buffer {tag} holds {} {} elements, the schedule plans {len} {}",
                    b.data.len(),
                    b.category.name(),
                    category.name()
                ));
            }
            return Ok(());
        }
        let mut data = Vec::new();
        data.try_reserve_exact(len)
            .map_err(|e| format!("cannot allocate {bytes} bytes of state: {e}"))?;
        let base = mix(self.seed ^ mix(u64::from(self.rank) << 32 | u64::from(tag)));
        data.extend((0..len as u64).map(|i| unit(mix(base ^ i))));
        self.buffers.insert(
            tag,
            Buffer {
                category,
                device,
                data,
            },
        );
        Ok(())
    }

    /// The Optimizer op of global step `step`: one read and one write of every state byte
    /// (a memory-bound pass, like a real optimizer's), the increments drawn from a per-step,
    /// per-buffer table of [`UPDATE_TABLE`] values so the pass costs no hashing per element.
    pub fn apply_optimizer(&mut self, step: u64) {
        let salt = mix(self.seed ^ mix(step));
        let mut table = [0f32; UPDATE_TABLE];
        for (tag, b) in &mut self.buffers {
            let base = mix(salt ^ u64::from(*tag));
            for (j, t) in table.iter_mut().enumerate() {
                *t = unit(mix(base ^ j as u64)) * 1e-3;
            }
            for chunk in b.data.chunks_mut(UPDATE_TABLE) {
                for (w, t) in chunk.iter_mut().zip(&table) {
                    *w = *w * DECAY + *t;
                }
            }
        }
    }

    /// Bytes the Optimizer op's state update moves (each state byte read and written).
    pub fn update_bytes(&self) -> u64 {
        2 * self.bytes()
    }

    /// Bytes of state held.
    pub fn bytes(&self) -> u64 {
        self.buffers.values().map(|b| b.data.len() as u64 * 4).sum()
    }

    /// A 64-bit digest of every buffer (tags, kinds and values): the checksum of its
    /// checkpoint payload.
    pub fn digest(&self) -> Result<u64, RuntimeError> {
        Ok(checksum(&self.encode()?))
    }

    /// The checkpoint payload of this state (see [`crate::checkpoint::state`]).
    pub fn encode(&self) -> Result<Vec<u8>, RuntimeError> {
        payload::snapshot(self)
    }

    /// Replace the state with a checkpoint payload's buffers.
    pub fn restore(&mut self, bytes: &[u8]) -> Result<(), RuntimeError> {
        let mut fresh = ModelState::new(self.seed, self.rank);
        payload::restore(&mut fresh, bytes)?;
        *self = fresh;
        Ok(())
    }
}

impl StateBuffers for ModelState {
    fn state_buffers(&self) -> Vec<StateInfo> {
        self.buffers
            .iter()
            .map(|(&tag, b)| StateInfo {
                tag,
                category: b.category,
                device: b.device,
                bytes: b.data.len() as u64 * 4,
            })
            .collect()
    }

    fn read_state(&self, tag: u32, out: &mut [u8]) -> Result<(), RuntimeError> {
        let b = self
            .buffers
            .get(&tag)
            .ok_or_else(|| RuntimeError::Unsupported(format!("no state buffer {tag}")))?;
        if out.len() != b.data.len() * 4 {
            return Err(RuntimeError::Unsupported(format!(
                "state buffer {tag} holds {} bytes, {} asked for",
                b.data.len() * 4,
                out.len()
            )));
        }
        for (o, v) in out.chunks_exact_mut(4).zip(&b.data) {
            o.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    }

    fn write_state(&mut self, info: StateInfo, bytes: &[u8]) -> Result<(), RuntimeError> {
        if !bytes.len().is_multiple_of(4) {
            return Err(RuntimeError::Unsupported(format!(
                "state buffer {} of {} bytes is not whole f32 values",
                info.tag,
                bytes.len()
            )));
        }
        let data = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        self.buffers.insert(
            info.tag,
            Buffer {
                category: info.category,
                device: info.device,
                data,
            },
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(seed: u64, rank: u32) -> ModelState {
        let mut s = ModelState::new(seed, rank);
        s.ensure(3, MemCategory::Weights, Device::Gpu, 4000)
            .unwrap();
        s.ensure(5, MemCategory::Optimizer, Device::Gpu, 12_000)
            .unwrap();
        s
    }

    #[test]
    fn seeded_per_rank_and_sensitive_to_lost_repeated_or_swapped_steps() {
        assert_eq!(state(1, 0), state(1, 0));
        assert_ne!(state(1, 0).digest().unwrap(), state(2, 0).digest().unwrap());
        assert_ne!(state(1, 0).digest().unwrap(), state(1, 1).digest().unwrap());
        let run = |steps: &[u64]| {
            let mut s = state(1, 0);
            for &k in steps {
                s.apply_optimizer(k);
            }
            s.digest().unwrap()
        };
        let good = run(&[0, 1, 2, 3]);
        assert_eq!(good, run(&[0, 1, 2, 3]));
        assert_ne!(good, run(&[0, 1, 3])); // lost
        assert_ne!(good, run(&[0, 1, 2, 2, 3])); // applied twice
        assert_ne!(good, run(&[0, 2, 1, 3])); // out of order
    }

    #[test]
    fn encode_restore_round_trips_and_rejects_junk() {
        let mut a = state(4, 2);
        a.apply_optimizer(0);
        let bytes = a.encode().unwrap();
        assert_eq!(bytes.len() as u64, 4 + 2 * 16 + a.bytes());
        let mut b = ModelState::new(4, 2);
        b.restore(&bytes).unwrap();
        assert_eq!(a, b);
        // The restored buffers are reused, not re-initialised, by `ensure`.
        b.ensure(3, MemCategory::Weights, Device::Gpu, 4000)
            .unwrap();
        assert_eq!(a.digest().unwrap(), b.digest().unwrap());
        assert!(b
            .ensure(3, MemCategory::Weights, Device::Gpu, 8000)
            .is_err());
        let mut c = ModelState::new(4, 2);
        assert!(c.restore(&bytes[..bytes.len() - 1]).is_err());
        let mut long = bytes.clone();
        long.push(0);
        assert!(c.restore(&long).is_err());
    }
}
