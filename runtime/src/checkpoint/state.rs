//! The model state a checkpoint holds, whatever device keeps it: one buffer per state
//! allocation of the schedule (weights on the device, optimizer state anywhere), by tag. A
//! backend only lists its buffers, hands out their bytes and takes bytes back
//! ([`StateBuffers`]); the payload layout, checksums, files, agreement and restarts above it
//! know nothing of where the bytes live, so the host and CUDA backends checkpoint through one
//! code path.
//!
//! Payload (little endian): buffer count u32; then per buffer, in tag order: tag u32,
//! category u8, device u8 (0 GPU, 1 host), two zero bytes, length in bytes u64, the bytes.

use crate::error::RuntimeError;
use twin_sim::schedule::{Device, MemCategory};

/// Bytes of a buffer's record ahead of its bytes.
const RECORD_BYTES: usize = 16;

/// Whether an allocation of this kind is model state (kept across steps and checkpointed).
pub fn is_state(category: MemCategory, device: Device) -> bool {
    matches!(
        (category, device),
        (MemCategory::Weights, Device::Gpu) | (MemCategory::Optimizer, _)
    )
}

/// One state buffer: the schedule's allocation it stands for, and its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateInfo {
    pub tag: u32,
    pub category: MemCategory,
    pub device: Device,
    pub bytes: u64,
}

/// What a backend offers checkpoints: its state buffers, their bytes, and a way to put bytes
/// back. Implemented by the host backend's model state, the CUDA backend (device copies) and
/// the dummy device.
pub trait StateBuffers {
    /// Every state buffer held now, in tag order.
    fn state_buffers(&self) -> Vec<StateInfo>;
    /// Copy the bytes of buffer `tag` into `out` (exactly its length).
    fn read_state(&self, tag: u32, out: &mut [u8]) -> Result<(), RuntimeError>;
    /// Make buffer `info.tag` hold `bytes` (creating it when absent), to be used as the
    /// state by the next steps.
    fn write_state(&mut self, info: StateInfo, bytes: &[u8]) -> Result<(), RuntimeError>;
}

fn too_big(bytes: u64) -> RuntimeError {
    RuntimeError::Unsupported(format!(
        "a state buffer of {bytes} bytes does not fit this machine's address space"
    ))
}

/// The checkpoint payload of `src`'s state: every buffer copied once, straight into place.
pub fn snapshot(src: &dyn StateBuffers) -> Result<Vec<u8>, RuntimeError> {
    let infos = src.state_buffers();
    let total = infos.iter().try_fold(4usize, |n, i| {
        usize::try_from(i.bytes)
            .ok()
            .and_then(|b| n.checked_add(RECORD_BYTES)?.checked_add(b))
            .ok_or_else(|| too_big(i.bytes))
    })?;
    let mut out = Vec::new();
    out.try_reserve_exact(total)
        .map_err(|e| RuntimeError::Unsupported(format!("checkpoint of {total} bytes: {e}")))?;
    out.extend_from_slice(&(infos.len() as u32).to_le_bytes());
    for i in &infos {
        out.extend_from_slice(&i.tag.to_le_bytes());
        out.push(i.category as u8);
        out.push(matches!(i.device, Device::Host) as u8);
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&i.bytes.to_le_bytes());
        let at = out.len();
        out.resize(at + i.bytes as usize, 0);
        let dst = out.get_mut(at..).ok_or_else(|| too_big(i.bytes))?;
        src.read_state(i.tag, dst)?;
    }
    Ok(out)
}

/// The buffers of a payload, each with its bytes, checked to cover the payload exactly.
pub fn parse(payload: &[u8]) -> Result<Vec<(StateInfo, &[u8])>, String> {
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], String> {
        let s = payload
            .get(at..at.saturating_add(n))
            .ok_or_else(|| format!("payload ends at byte {at}, {n} more expected"))?;
        at += n;
        Ok(s)
    };
    let word = |s: &[u8]| {
        let mut w = [0u8; 8];
        let n = s.len().min(8);
        w[..n].copy_from_slice(s.get(..n).unwrap_or_default());
        u64::from_le_bytes(w)
    };
    let count = word(take(4)?);
    let mut out = Vec::new();
    for _ in 0..count {
        let tag = word(take(4)?) as u32;
        let kind = take(4)?;
        let category = MemCategory::ALL
            .get(usize::from(kind.first().copied().unwrap_or(u8::MAX)))
            .copied()
            .ok_or("unknown memory category")?;
        let device = match kind.get(1) {
            Some(0) => Device::Gpu,
            Some(1) => Device::Host,
            _ => return Err("unknown device".into()),
        };
        let bytes = word(take(8)?);
        let len = usize::try_from(bytes).map_err(|_| "buffer too long")?;
        let data = take(len)?;
        let info = StateInfo {
            tag,
            category,
            device,
            bytes,
        };
        out.push((info, data));
    }
    if at != payload.len() {
        return Err(format!(
            "{} bytes after the last buffer",
            payload.len() - at
        ));
    }
    Ok(out)
}

/// Put a checkpoint payload's buffers back into `dst`; returns the state bytes restored. The
/// whole payload is parsed before the first byte reaches `dst`.
pub fn restore(dst: &mut dyn StateBuffers, payload: &[u8]) -> Result<u64, RuntimeError> {
    let buffers = parse(payload).map_err(super::CheckpointError::Payload)?;
    let mut total = 0u64;
    for (info, bytes) in buffers {
        dst.write_state(info, bytes)?;
        total = total.saturating_add(info.bytes);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// State kept as plain byte vectors: the smallest backend there is.
    #[derive(Default)]
    struct Bytes(BTreeMap<u32, (StateInfo, Vec<u8>)>);

    impl StateBuffers for Bytes {
        fn state_buffers(&self) -> Vec<StateInfo> {
            self.0.values().map(|(i, _)| *i).collect()
        }
        fn read_state(&self, tag: u32, out: &mut [u8]) -> Result<(), RuntimeError> {
            out.copy_from_slice(&self.0[&tag].1);
            Ok(())
        }
        fn write_state(&mut self, info: StateInfo, bytes: &[u8]) -> Result<(), RuntimeError> {
            self.0.insert(info.tag, (info, bytes.to_vec()));
            Ok(())
        }
    }

    fn info(tag: u32, category: MemCategory, device: Device, bytes: u64) -> StateInfo {
        StateInfo {
            tag,
            category,
            device,
            bytes,
        }
    }

    #[test]
    fn a_snapshot_restores_every_buffer_and_rejects_junk() {
        let mut a = Bytes::default();
        let w = info(3, MemCategory::Weights, Device::Gpu, 5);
        let o = info(9, MemCategory::Optimizer, Device::Host, 3);
        a.write_state(w, b"abcde").unwrap();
        a.write_state(o, b"xyz").unwrap();
        let payload = snapshot(&a).unwrap();
        assert_eq!(payload.len(), 4 + 2 * RECORD_BYTES + 8);
        let mut b = Bytes::default();
        assert_eq!(restore(&mut b, &payload).unwrap(), 8);
        assert_eq!(b.0[&3], (w, b"abcde".to_vec()));
        assert_eq!(b.0[&9], (o, b"xyz".to_vec()));
        assert_eq!(snapshot(&b).unwrap(), payload);
        // Short, long, or with an unknown category: refused before anything is written.
        let mut c = Bytes::default();
        assert!(restore(&mut c, &payload[..payload.len() - 1]).is_err());
        let mut long = payload.clone();
        long.push(0);
        assert!(restore(&mut c, &long).is_err());
        let mut bad = payload.clone();
        bad[4 + RECORD_BYTES + 5 + 4] = 200;
        assert!(restore(&mut c, &bad)
            .unwrap_err()
            .to_string()
            .contains("unknown memory category"));
        assert!(c.0.is_empty());
    }
}
