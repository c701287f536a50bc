//! The payloads a host rank sends and the results it must receive, built once per distinct
//! transfer and reused every step. A transfer's data is a pattern the receiver can predict
//! (so a wrong or torn result is caught), but computing the pattern element by element and
//! checking each output element against a formula cost more CPU than the transfer itself
//! (a 32 KiB tensor-parallel collective spent about as long generating and checking as
//! moving), work the simulator does not model and a real framework does not do. Cached, what
//! remains per call is a comparison of the output's bytes. The buffers a call works in are
//! kept here too (`CallData::take_work`), so a call neither copies its input nor touches
//! fresh pages.

use crate::error::RuntimeError;
use crate::transport::collective::{self, Expected, Ring, Work};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use twin_sim::plan::RankId;
use twin_sim::schedule::CollectiveKind;

/// One collective call's input and expected output for this rank.
pub struct CallData {
    pub input: Vec<f32>,
    pub expected: Expected,
    /// Work buffers not in use. Usually one; two calls of the same shape running at once on
    /// different streams each take their own instead of waiting for the other.
    idle: Mutex<Vec<Work>>,
}

impl CallData {
    /// Work buffers for one call (kept ones when there are).
    pub fn take_work(&self) -> Work {
        self.idle
            .lock()
            .ok()
            .and_then(|mut idle| idle.pop())
            .unwrap_or_default()
    }

    /// Give back buffers from [`CallData::take_work`] for the next call.
    pub fn keep_work(&self, work: Work) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(work);
        }
    }
}

type CallKey = (u8, u64, u32, Vec<RankId>);
/// (sender, tag, bytes) of a p2p message.
type P2pKey = (RankId, u32, u64);

#[derive(Default)]
pub struct DataCache {
    calls: Mutex<BTreeMap<CallKey, Arc<CallData>>>,
    p2p: Mutex<BTreeMap<P2pKey, Arc<P2pData>>>,
}

/// One p2p message's bytes and their frame checksum, built once: the bytes never change, so
/// neither does the sum, and a send need not take it again.
pub struct P2pData {
    pub bytes: Vec<u8>,
    /// `transport::frame::wire_sum` of `bytes`.
    pub wire_sum: u64,
}

impl DataCache {
    /// Input and expected output of call `call` of a `kind` collective of `bytes` over
    /// `ring` (built on first use).
    pub fn call(
        &self,
        kind: CollectiveKind,
        ring: &Ring,
        bytes: u64,
        call: u32,
    ) -> Result<Arc<CallData>, RuntimeError> {
        let key = (kind as u8, bytes, call, ring.members.to_vec());
        let mut map = self
            .calls
            .lock()
            .map_err(|_| RuntimeError::Aborted("collective data cache poisoned".into()))?;
        if let Some(d) = map.get(&key) {
            return Ok(Arc::clone(d));
        }
        let elems = usize::try_from(bytes / 4).unwrap_or(0);
        let salt = u64::from(call);
        let d = Arc::new(CallData {
            input: collective::input(kind, ring, elems, salt),
            expected: collective::expected(kind, ring, elems, salt),
            idle: Mutex::new(Vec::new()),
        });
        map.insert(key, Arc::clone(&d));
        Ok(d)
    }

    /// The bytes `sender` sends in the p2p message of `tag` (see [`p2p_payload`]).
    pub fn p2p(&self, sender: RankId, tag: u32, bytes: u64) -> Result<Arc<P2pData>, RuntimeError> {
        let mut map = self
            .p2p
            .lock()
            .map_err(|_| RuntimeError::Aborted("p2p data cache poisoned".into()))?;
        Ok(Arc::clone(map.entry((sender, tag, bytes)).or_insert_with(
            || {
                let bytes = p2p_payload(sender, tag, bytes);
                let wire_sum = crate::transport::frame::wire_sum(&bytes);
                Arc::new(P2pData { bytes, wire_sum })
            },
        )))
    }
}

/// The bytes `sender` puts in the message of `tag`: a pattern the receiver recomputes.
pub fn p2p_payload(sender: RankId, tag: u32, bytes: u64) -> Vec<u8> {
    let len = usize::try_from(bytes).unwrap_or(0);
    let base = u64::from(sender) * 131 + u64::from(tag) * 17;
    (0..len as u64).map(|i| (base + i * 7) as u8).collect()
}
