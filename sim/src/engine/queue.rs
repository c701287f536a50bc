//! The engine's event queue: events ordered by (time, push order), so events at equal times
//! pop in the order they were scheduled and a run is deterministic.
//!
//! A radix heap (Ahuja, Mehlhorn, Orlin and Tarjan, "Faster algorithms for the shortest path
//! problem", J. ACM 37(2), 1990): the engine never schedules an event before the one it is
//! handling, so the times it pushes are never below the last time popped (`last`), and an
//! event can live in the bucket named by the highest bit in which its time differs from
//! `last` (bucket 0: equal to it). Every time in bucket `i` is below every time in bucket
//! `j > i`. A push appends to its bucket; when bucket 0 runs empty, the first non-empty
//! bucket's least time becomes `last` and that bucket's events move down to the buckets
//! their times now name. An event moves down at most 64 times over its life, in practice a
//! few, and each move is a copy of 16 bytes in sequence: no sift through a heap of tens of
//! thousands of entries (per-op noise makes every time distinct), and the thousand events
//! symmetric ranks schedule at one instant (16,384 GPUs) are one run of appends.
//!
//! Why the order is exactly (time, push order): events of one time are always in the same
//! bucket (the bucket is a function of the time and `last`). A push appends after every
//! event already there, and moving a bucket down and popping bucket 0 both keep the order
//! of the events they move, so events of one time stay in push order.
//!
//! A push below `last` (which the engine does not make; the queue accepts it anyway) puts
//! every queued event back in with the new least time as `last`, bucket by bucket, which
//! keeps the events of each time in push order.

/// A popped event. `a` and `b` are the payload; the engine gives them meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Event {
    pub time_ns: u64,
    pub a: u32,
    pub b: u32,
}

/// Buckets: 0 for times equal to `last`, and `i` in 1..=64 for times whose highest bit
/// differing from `last` is bit `i - 1`.
const BUCKETS: usize = 65;

#[derive(Debug)]
pub(crate) struct EventQueue {
    /// The least time queued, once the queue has held an event: every queued time is at
    /// least this (bucket 0 holds the events at exactly this time).
    last: u64,
    /// Events at time `last` still to pop: `now[read..]`, in push order.
    now: Vec<(u32, u32)>,
    read: usize,
    /// Buckets 1..=64 (at index `i - 1`), in push order within each.
    buckets: Vec<Vec<Event>>,
    /// Bit `i - 1` set: bucket `i` holds events.
    full: u64,
    /// Events queued.
    len: usize,
}

impl Default for EventQueue {
    fn default() -> EventQueue {
        EventQueue::with_capacity(0)
    }
}

/// The bucket of `time_ns` when the least queued time is `last` (`time_ns >= last`).
#[inline]
fn bucket_of(time_ns: u64, last: u64) -> usize {
    (u64::BITS - (time_ns ^ last).leading_zeros()) as usize
}

impl EventQueue {
    pub fn with_capacity(n: usize) -> EventQueue {
        EventQueue {
            last: 0,
            now: Vec::with_capacity(n),
            read: 0,
            buckets: (1..BUCKETS).map(|_| Vec::new()).collect(),
            full: 0,
            len: 0,
        }
    }

    /// Empties the queue for another run, keeping its vectors' room.
    pub fn reset(&mut self) {
        self.last = 0;
        self.now.clear();
        self.read = 0;
        for b in self.buckets.iter_mut() {
            b.clear();
        }
        self.full = 0;
        self.len = 0;
    }

    /// Events queued.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Schedule an event; ties in time pop in push order.
    #[inline]
    pub fn push(&mut self, time_ns: u64, a: u32, b: u32) {
        if self.len == 0 {
            self.now.clear();
            self.read = 0;
            self.last = time_ns;
        } else if time_ns < self.last {
            self.lower_last(time_ns);
        }
        self.len += 1;
        match bucket_of(time_ns, self.last) {
            0 => self.now.push((a, b)),
            i => {
                self.full |= 1 << (i - 1);
                if let Some(v) = self.buckets.get_mut(i - 1) {
                    v.push(Event { time_ns, a, b });
                }
            }
        }
    }

    /// Makes `time_ns` (below every queued time) the new `last`: every queued event goes
    /// back in, the ones at the old `last` first and then bucket by bucket, each in its order,
    /// so the events of each time keep their push order.
    #[cold]
    fn lower_last(&mut self, time_ns: u64) {
        let old = self.last;
        let mut queued: Vec<Event> = self
            .now
            .get(self.read..)
            .unwrap_or(&[])
            .iter()
            .map(|&(a, b)| Event { time_ns: old, a, b })
            .collect();
        for v in self.buckets.iter_mut() {
            queued.append(v);
        }
        self.now.clear();
        self.read = 0;
        self.full = 0;
        self.last = time_ns;
        for e in queued {
            match bucket_of(e.time_ns, time_ns) {
                0 => self.now.push((e.a, e.b)),
                i => {
                    self.full |= 1 << (i - 1);
                    if let Some(v) = self.buckets.get_mut(i - 1) {
                        v.push(e);
                    }
                }
            }
        }
    }

    /// Time of the earliest event, if any.
    #[inline]
    pub fn next_time_ns(&self) -> Option<u64> {
        (self.len > 0).then_some(self.last)
    }

    /// The payload of the event that pops next, if any.
    #[inline]
    pub fn peek_payload(&self) -> Option<(u32, u32)> {
        self.now.get(self.read).copied()
    }

    /// The earliest event.
    #[inline]
    pub fn pop(&mut self) -> Option<Event> {
        if self.len == 0 {
            return None;
        }
        let &(a, b) = self.now.get(self.read)?;
        self.read += 1;
        self.len -= 1;
        let time_ns = self.last;
        if self.read == self.now.len() {
            self.now.clear();
            self.read = 0;
            if self.full != 0 {
                self.refill();
            }
        }
        Some(Event { time_ns, a, b })
    }

    /// Bucket 0 has run empty and another bucket holds events: the first such bucket's least
    /// time becomes `last`, and its events move to the buckets their times now name (all
    /// lower: they share its bits above its own).
    fn refill(&mut self) {
        let i = self.full.trailing_zeros() as usize;
        self.full &= !(1 << i);
        let Some(v) = self.buckets.get_mut(i) else {
            return;
        };
        let moving = std::mem::take(v);
        let Some(least) = moving.iter().map(|e| e.time_ns).min() else {
            return;
        };
        self.last = least;
        for e in &moving {
            match bucket_of(e.time_ns, least) {
                0 => self.now.push((e.a, e.b)),
                j => {
                    self.full |= 1 << (j - 1);
                    if let Some(w) = self.buckets.get_mut(j - 1) {
                        w.push(*e);
                    }
                }
            }
        }
        // The bucket's vector keeps its room for the next events that land in it.
        let mut moving = moving;
        moving.clear();
        if let Some(v) = self.buckets.get_mut(i) {
            if v.capacity() < moving.capacity() {
                *v = moving;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ties_pop_in_push_order() {
        let mut q = EventQueue::with_capacity(4);
        q.push(5, 1, 0);
        q.push(3, 2, 0);
        q.push(5, 3, 0);
        q.push(3, 4, 0);
        let order: Vec<u32> = std::iter::from_fn(|| q.pop()).map(|e| e.a).collect();
        assert_eq!(order, vec![2, 4, 1, 3]);
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn a_push_below_the_least_time_keeps_each_times_push_order() {
        // Not something the engine does; the queue re-buckets everything and stays exact.
        let mut q = EventQueue::with_capacity(0);
        for (t, a) in [(100, 1), (100, 2), (1_000, 3), (100, 4), (1 << 40, 5), (1_000, 6)] {
            q.push(t, a, 0);
        }
        assert_eq!(q.pop().map(|e| e.a), Some(1));
        // 100 is `last` now, with one event of it left; push below it.
        q.push(50, 7, 0);
        q.push(100, 8, 0);
        q.push(50, 9, 0);
        assert_eq!(q.len(), 8);
        let order: Vec<(u64, u32)> = std::iter::from_fn(|| q.pop())
            .map(|e| (e.time_ns, e.a))
            .collect();
        assert_eq!(
            order,
            vec![
                (50, 7),
                (50, 9),
                (100, 2),
                (100, 4),
                (100, 8),
                (1_000, 3),
                (1_000, 6),
                (1 << 40, 5)
            ]
        );
    }

    #[test]
    fn times_across_the_whole_range_pop_in_order() {
        // Times differing from the least in bit 63 and in bit 0 land in the outermost buckets.
        let mut q = EventQueue::with_capacity(0);
        let times = [u64::MAX, 0, 1, u64::MAX, 1 << 63, (1 << 63) - 1, 2, 0];
        for (a, &t) in times.iter().enumerate() {
            q.push(t, a as u32, 0);
        }
        let order: Vec<(u64, u32)> = std::iter::from_fn(|| q.pop())
            .map(|e| (e.time_ns, e.a))
            .collect();
        assert_eq!(
            order,
            vec![
                (0, 1),
                (0, 7),
                (1, 2),
                (2, 6),
                ((1 << 63) - 1, 5),
                (1 << 63, 4),
                (u64::MAX, 0),
                (u64::MAX, 3)
            ]
        );
        assert_eq!(q.next_time_ns(), None);
    }

    #[test]
    fn next_time_is_the_least_queued_time() {
        let mut q = EventQueue::with_capacity(0);
        assert_eq!(q.next_time_ns(), None);
        q.push(9, 1, 0);
        q.push(4, 2, 0);
        q.push(6, 3, 0);
        assert_eq!(q.next_time_ns(), Some(4));
        assert_eq!(q.pop().map(|e| e.a), Some(2));
        assert_eq!(q.next_time_ns(), Some(6));
        q.push(6, 4, 0);
        assert_eq!(q.pop().map(|e| e.a), Some(3));
        assert_eq!(q.next_time_ns(), Some(6));
        assert_eq!(q.pop().map(|e| e.a), Some(4));
        assert_eq!(q.next_time_ns(), Some(9));
    }

    #[test]
    fn a_push_at_the_time_being_popped_comes_after_its_bucket() {
        let mut q = EventQueue::with_capacity(0);
        q.push(7, 1, 0);
        q.push(7, 2, 0);
        assert_eq!(q.pop().map(|e| e.a), Some(1));
        // Appended to the bucket still being popped.
        q.push(7, 3, 0);
        assert_eq!(q.pop().map(|e| e.a), Some(2));
        assert_eq!(q.pop().map(|e| e.a), Some(3));
        // The bucket is gone: a new one at the same time.
        q.push(7, 4, 0);
        q.push(6, 5, 0);
        assert_eq!(q.pop().map(|e| (e.time_ns, e.a)), Some((6, 5)));
        assert_eq!(q.pop().map(|e| (e.time_ns, e.a)), Some((7, 4)));
        assert_eq!(q.pop(), None);
        assert_eq!(q.next_time_ns(), None);
    }

    #[test]
    fn a_reset_queue_is_empty_and_orders_as_a_new_one() {
        let mut q = EventQueue::with_capacity(0);
        for (t, a) in [(5, 1), (5, 2), (3, 3), (9, 4)] {
            q.push(t, a, 0);
        }
        assert_eq!(q.pop().map(|e| e.a), Some(3));
        q.reset();
        assert_eq!(q.len(), 0);
        assert_eq!(q.pop(), None);
        for (t, a) in [(4, 10), (2, 11), (4, 12)] {
            q.push(t, a, 0);
        }
        let order: Vec<u32> = std::iter::from_fn(|| q.pop()).map(|e| e.a).collect();
        assert_eq!(order, vec![11, 10, 12]);
    }

    proptest! {
        #[test]
        fn pops_sorted_by_time_then_push_order(
            ops in proptest::collection::vec((0u64..50, any::<bool>()), 0..400),
            spread in prop_oneof![Just(1u64), Just(1u64 << 20), Just(0x9E37_79B9), Just(1u64 << 57)],
            back in prop_oneof![Just(0u64), Just(3u64)],
        ) {
            // Interleave pushes and pops; compare with a sorted reference. `spread` scales
            // the times from adjacent buckets to the outermost ones; `back` lets some pushes
            // land below the last time popped.
            let mut q = EventQueue::with_capacity(0);
            let mut reference: Vec<(u64, u32)> = Vec::new();
            let mut seq = 0u32;
            let mut now = 0u64;
            for (dt, pop) in ops {
                if pop {
                    let got = q.pop().map(|e| (e.time_ns, e.a));
                    reference.sort_unstable();
                    let want = if reference.is_empty() { None } else { Some(reference.remove(0)) };
                    prop_assert_eq!(got, want);
                    if let Some((t, _)) = got {
                        now = t;
                    }
                } else {
                    let t = now.saturating_add(dt * spread).saturating_sub(back * spread);
                    q.push(t, seq, 0);
                    reference.push((t, seq));
                    seq += 1;
                }
                prop_assert_eq!(q.len(), reference.len());
            }
            reference.sort_unstable();
            for want in reference {
                prop_assert_eq!(q.pop().map(|e| (e.time_ns, e.a)), Some(want));
            }
            prop_assert!(q.pop().is_none());
        }
    }
}
