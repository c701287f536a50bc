//! The engine's event queue: events ordered by (time, push order), so events at equal times
//! pop in the order they were scheduled and a run is deterministic.
//!
//! Events at the same time are kept together in a *bucket*, a FIFO of payloads, and only
//! buckets enter the heap, a 4-ary min-heap keyed by (time, the bucket's creation sequence).
//! Symmetric ranks (the members of a tensor- or data-parallel group) finish the same ops at
//! the same times, so at 16,384 GPUs a thousand events share a bucket and the heap holds a
//! few dozen entries instead of tens of thousands; where every time differs (per-op noise)
//! each bucket holds one event and this is a plain heap.
//!
//! Why the order is exactly (time, push order): a push at time `t` appends to the bucket
//! for `t` created last, if that bucket has not been emptied, and otherwise creates a new
//! bucket for `t`. Buckets of one time are therefore ordered by creation, every event of an
//! older bucket was pushed before every event of a newer one, and within a bucket events pop
//! in push order. The bucket created last for a time is found through a direct-mapped table
//! (`recent`) that every bucket creation writes; a time evicted from it by another time
//! just gets a new bucket, which is still ordered after the old one.

/// A popped event. `a` and `b` are the payload; the engine gives them meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Event {
    pub time_ns: u64,
    pub a: u32,
    pub b: u32,
}

/// A heap entry: one bucket.
#[derive(Clone, Copy, Debug)]
struct Node {
    time_ns: u64,
    seq: u64,
    bucket: u32,
}

impl Node {
    /// (time, seq) as one integer: one branch-free comparison instead of two.
    #[inline]
    fn key(&self) -> u128 {
        (u128::from(self.time_ns) << 64) | u128::from(self.seq)
    }
    #[inline]
    fn before(&self, other: &Node) -> bool {
        self.key() < other.key()
    }
}

/// The events of one time, in push order; `items[read..]` are still to pop.
#[derive(Debug, Default)]
struct Bucket {
    time_ns: u64,
    read: u32,
    items: Vec<(u32, u32)>,
}

/// Entries of the table of recently created buckets (a power of two).
const RECENT: usize = 256;
/// `recent` entry that names no bucket.
const NO_BUCKET: u32 = u32::MAX;

#[derive(Debug)]
pub(crate) struct EventQueue {
    heap: Vec<Node>,
    buckets: Vec<Bucket>,
    /// Buckets emptied and ready for reuse (their vectors keep their room).
    free: Vec<u32>,
    /// By a hash of the time: (time, the live bucket created last for it, or [`NO_BUCKET`]).
    recent: Box<[(u64, u32); RECENT]>,
    next_seq: u64,
}

impl Default for EventQueue {
    fn default() -> EventQueue {
        EventQueue::with_capacity(0)
    }
}

#[inline]
fn recent_slot(time_ns: u64) -> usize {
    (time_ns.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - RECENT.trailing_zeros())) as usize
}

impl EventQueue {
    pub fn with_capacity(n: usize) -> EventQueue {
        EventQueue {
            heap: Vec::with_capacity(n),
            buckets: Vec::with_capacity(n),
            free: Vec::with_capacity(n),
            recent: Box::new([(0, NO_BUCKET); RECENT]),
            next_seq: 0,
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.heap
            .iter()
            .filter_map(|n| self.buckets.get(n.bucket as usize))
            .map(|b| b.items.len() - b.read as usize)
            .sum()
    }

    /// Schedule an event; ties in time pop in push order.
    #[inline]
    pub fn push(&mut self, time_ns: u64, a: u32, b: u32) {
        let slot = recent_slot(time_ns);
        let (t, id) = self.recent[slot];
        if t == time_ns {
            if let Some(bucket) = self.buckets.get_mut(id as usize) {
                bucket.items.push((a, b));
                return;
            }
        }
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.buckets.push(Bucket::default());
                (self.buckets.len() - 1) as u32
            }
        };
        if let Some(bucket) = self.buckets.get_mut(id as usize) {
            bucket.time_ns = time_ns;
            bucket.items.push((a, b));
        }
        self.recent[slot] = (time_ns, id);
        let node = Node {
            time_ns,
            seq: self.next_seq,
            bucket: id,
        };
        self.next_seq += 1;
        self.sift_up(node);
    }

    fn sift_up(&mut self, node: Node) {
        let mut i = self.heap.len();
        self.heap.push(node);
        while i > 0 {
            let parent = (i - 1) / 4;
            let p = self.heap[parent];
            if node.before(&p) {
                self.heap[i] = p;
                i = parent;
            } else {
                break;
            }
        }
        self.heap[i] = node;
    }

    /// Time of the earliest event, if any.
    #[inline]
    pub fn next_time_ns(&self) -> Option<u64> {
        self.heap.first().map(|e| e.time_ns)
    }

    /// The earliest event.
    #[inline]
    pub fn pop(&mut self) -> Option<Event> {
        let top = *self.heap.first()?;
        let bucket = self.buckets.get_mut(top.bucket as usize)?;
        let (a, b) = *bucket.items.get(bucket.read as usize)?;
        bucket.read += 1;
        if bucket.read as usize == bucket.items.len() {
            bucket.items.clear();
            bucket.read = 0;
            let slot = recent_slot(top.time_ns);
            if self.recent[slot].1 == top.bucket {
                self.recent[slot].1 = NO_BUCKET;
            }
            self.free.push(top.bucket);
            self.pop_top();
        }
        Some(Event {
            time_ns: top.time_ns,
            a,
            b,
        })
    }

    /// Removes the heap's root.
    fn pop_top(&mut self) {
        let Some(last) = self.heap.pop() else { return };
        let n = self.heap.len();
        if n == 0 {
            return;
        }
        // Sift `last` down from the root.
        let mut i = 0;
        loop {
            let first = 4 * i + 1;
            if first >= n {
                break;
            }
            let end = (first + 4).min(n);
            let mut best = first;
            let mut best_node = self.heap[first];
            for c in first + 1..end {
                let e = self.heap[c];
                if e.before(&best_node) {
                    best = c;
                    best_node = e;
                }
            }
            if best_node.before(&last) {
                self.heap[i] = best_node;
                i = best;
            } else {
                break;
            }
        }
        self.heap[i] = last;
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
    fn a_time_evicted_from_the_table_keeps_push_order() {
        // Two times that share a `recent` entry: pushing the second evicts the first, so the
        // next push at the first time opens a second bucket for it, which must pop after the
        // first bucket and before nothing pushed earlier.
        let t1 = 1_000u64;
        let t2 = (t1 + 1..)
            .find(|&t| recent_slot(t) == recent_slot(t1))
            .unwrap_or(t1);
        assert_ne!(t1, t2);
        let mut q = EventQueue::with_capacity(0);
        q.push(t1, 1, 0);
        q.push(t2, 2, 0);
        q.push(t1, 3, 0);
        q.push(t2, 4, 0);
        q.push(t1, 5, 0);
        let order: Vec<(u64, u32)> = std::iter::from_fn(|| q.pop())
            .map(|e| (e.time_ns, e.a))
            .collect();
        let mut want = vec![(t1, 1), (t1, 3), (t1, 5), (t2, 2), (t2, 4)];
        want.sort_by_key(|&(t, a)| (t, a));
        assert_eq!(order, want);
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

    proptest! {
        #[test]
        fn pops_sorted_by_time_then_push_order(
            ops in proptest::collection::vec((0u64..50, any::<bool>()), 0..400),
            spread in prop_oneof![Just(1u64), Just(1u64 << 20), Just(0x9E37_79B9)],
        ) {
            // Interleave pushes and pops; compare with a sorted reference. `spread` scales
            // the times so that some runs collide in the table of recent buckets.
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
                    let t = now + dt * spread;
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
