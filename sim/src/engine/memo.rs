//! Collective and transfer durations memoized within one run: a program issues the same
//! collectives (same concrete group, kind, size and calls) and pipeline transfers (same ranks
//! and size) for every micro batch, and cost models are pure functions of their arguments, so
//! the engine prices each only once while it stays in the table. Kept apart from the event
//! loop, which only asks for a duration.

use crate::schedule::CollectiveKind;

/// A key of a [`Memo`]: compared whole, and hashed to pick its entry.
pub(crate) trait MemoKey: Copy + PartialEq {
    fn hash(&self) -> u64;
}

/// A collective on a concrete group: (group, kind, bytes, calls).
impl MemoKey for (u32, CollectiveKind, u64, u32) {
    #[inline]
    fn hash(&self) -> u64 {
        let (g, kind, bytes, calls) = *self;
        u64::from(g) << 32 ^ bytes ^ u64::from(calls) << 48 ^ (kind as u64) << 56
    }
}

/// A transfer between two ranks: (source, destination, bytes).
impl MemoKey for (u32, u32, u64) {
    #[inline]
    fn hash(&self) -> u64 {
        let (src, dst, bytes) = *self;
        u64::from(src) << 40 ^ u64::from(dst) << 16 ^ bytes
    }
}

/// Durations already priced in this run, by key: a program issues the same collectives and
/// transfers for every micro batch, and cost models are pure functions of their arguments,
/// so most need not be priced again. A direct-mapped table: a key lives in one entry chosen
/// by its hash, and a collision only means pricing again.
pub(crate) struct Memo<K> {
    entries: Vec<Option<(K, u64)>>,
}

/// Collective durations, keyed by (concrete group, kind, bytes, calls).
pub(crate) type CollectiveMemo = Memo<(u32, CollectiveKind, u64, u32)>;

/// Point-to-point transfer durations, keyed by (source, real destination, bytes).
pub(crate) type P2pMemo = Memo<(u32, u32, u64)>;

impl<K: Copy> Default for Memo<K> {
    fn default() -> Self {
        Memo {
            entries: vec![None; Self::SIZE],
        }
    }
}

impl<K> Memo<K> {
    /// A power of two; large enough for the distinct collectives of a full 512-GPU run
    /// (a key per concrete group and collective size).
    const SIZE: usize = 1024;
}

impl<K: MemoKey> Memo<K> {
    pub fn get(&mut self, key: K, price: impl FnOnce() -> u64) -> u64 {
        let h = key.hash().wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let slot = (h >> 54) as usize & (Self::SIZE - 1);
        match self.entries.get_mut(slot) {
            Some(Some((k, ns))) if *k == key => *ns,
            Some(e) => {
                let ns = price();
                *e = Some((key, ns));
                ns
            }
            None => price(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The memo prices each distinct (group, kind, bytes, calls) once while it holds it, and
    /// never answers one key with another's duration, also after evictions.
    #[test]
    fn collective_memo_returns_each_keys_own_price() {
        let mut memo = CollectiveMemo::default();
        let price = |g: u32, bytes: u64, calls: u32| {
            u64::from(g) * 1_000_000 + bytes * 10 + u64::from(calls)
        };
        let mut priced = 0;
        for round in 0..3 {
            for g in 0..4u32 {
                for (bytes, calls) in [(1u64, 1u32), (1, 2), (2, 1)] {
                    for kind in [CollectiveKind::AllReduce, CollectiveKind::AllGather] {
                        let want = price(g, bytes, calls)
                            + u64::from(kind == CollectiveKind::AllGather) * 7;
                        let got = memo.get((g, kind, bytes, calls), || {
                            priced += 1;
                            want
                        });
                        assert_eq!(got, want, "round {round} g {g} {kind:?} {bytes} {calls}");
                    }
                }
            }
        }
        // 24 distinct keys do not fit in 16 entries: some are priced again, none answered
        // wrongly (checked above); a key asked twice in a row is priced once.
        assert!(priced >= 24);
        let mut again = 0;
        for _ in 0..5 {
            memo.get((9, CollectiveKind::Broadcast, 3, 1), || {
                again += 1;
                42
            });
        }
        assert_eq!(again, 1);
    }

    /// Transfers are keyed by source, destination and size: each is answered with its own
    /// price, and a repeated one is not priced again.
    #[test]
    fn p2p_memo_returns_each_keys_own_price() {
        let mut memo = P2pMemo::default();
        let price =
            |src: u32, dst: u32, bytes: u64| u64::from(src) * 1_000 + u64::from(dst) + bytes;
        let mut priced = 0;
        for _ in 0..3 {
            for (src, dst) in [(0, 1), (1, 0), (0, 2), (5, 1)] {
                for bytes in [1u64 << 20, 1 << 21] {
                    let got = memo.get((src, dst, bytes), || {
                        priced += 1;
                        price(src, dst, bytes)
                    });
                    assert_eq!(got, price(src, dst, bytes), "{src} {dst} {bytes}");
                }
            }
        }
        assert!(
            (8..24).contains(&priced),
            "{priced} pricings of 8 keys asked 3 times"
        );
    }
}
