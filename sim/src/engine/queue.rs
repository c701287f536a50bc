//! The engine's event queue: events ordered by (time, push order), so events at equal times
//! pop in the order they were scheduled and a run is deterministic.
//!
//! The heap is a 4-ary min-heap of *nodes* keyed by (time, the node's creation sequence).
//! A node holds the first event pushed for its time; events pushed later for the same time
//! while the node is still queued go to the node's *overflow*, a FIFO bucket, instead of the
//! heap. Symmetric ranks (the members of a tensor- or data-parallel group) finish the same ops
//! at the same times, so at 16,384 GPUs a thousand events share a node and the heap holds a
//! few dozen entries instead of tens of thousands; where every time differs (per-op noise)
//! no node has an overflow and this is a plain heap of events.
//!
//! Why the order is exactly (time, push order): a push at time `t` joins the node created
//! last for `t` if that node is still queued, and otherwise creates a new node for `t`. Nodes
//! of one time are therefore ordered by creation, every event of an older node was pushed
//! before every event of a newer one, and within a node events pop in push order (its own
//! event, then its overflow's). The node created last for a time is found through a
//! direct-mapped table (`recent`) that every node creation writes and every node removal
//! clears; a time evicted from it by another time just gets a new node, which is still
//! ordered after the old one (whose overflow, if it has one, is then found in `evicted`).

use std::collections::HashMap;

/// A popped event. `a` and `b` are the payload; the engine gives them meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Event {
    pub time_ns: u64,
    pub a: u32,
    pub b: u32,
}

/// A heap entry: the first event of its time, and the order of its creation.
#[derive(Clone, Copy, Debug)]
struct Node {
    time_ns: u64,
    seq: u64,
    a: u32,
    b: u32,
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

/// The overflow of a node: events pushed after its own for its time; `items[read..]` are
/// still to pop.
#[derive(Debug, Default)]
struct Bucket {
    read: u32,
    items: Vec<(u32, u32)>,
}

/// Entries of the table of recently created nodes (a power of two).
const RECENT: usize = 256;
/// `Recent::seq` of an entry that names no node.
const NO_NODE: u64 = u64::MAX;
/// `Recent::bucket` of a node without an overflow.
const NO_BUCKET: u32 = u32::MAX;

/// The node created last for `time_ns`, while it is queued.
#[derive(Clone, Copy, Debug)]
struct Recent {
    time_ns: u64,
    seq: u64,
    bucket: u32,
}

const EMPTY: Recent = Recent {
    time_ns: 0,
    seq: NO_NODE,
    bucket: NO_BUCKET,
};

#[derive(Debug)]
pub(crate) struct EventQueue {
    heap: Vec<Node>,
    buckets: Vec<Bucket>,
    /// Buckets emptied and ready for reuse (their vectors keep their room).
    free: Vec<u32>,
    /// By a hash of the time: the node created last for it, while it is queued.
    recent: Box<[Recent; RECENT]>,
    /// Overflows of queued nodes whose `recent` entry another time took: by node sequence.
    evicted: HashMap<u64, u32>,
    /// The root node whose own event has popped, and its overflow being popped.
    draining: Option<(u64, u32)>,
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
            buckets: Vec::new(),
            free: Vec::new(),
            recent: Box::new([EMPTY; RECENT]),
            evicted: HashMap::new(),
            draining: None,
            next_seq: 0,
        }
    }

    /// Empties the queue for another run, keeping its vectors' room.
    pub fn reset(&mut self) {
        self.heap.clear();
        for b in self.buckets.iter_mut() {
            b.items.clear();
            b.read = 0;
        }
        self.free.clear();
        self.free.extend((0..self.buckets.len() as u32).rev());
        self.recent.fill(EMPTY);
        self.evicted.clear();
        self.draining = None;
        self.next_seq = 0;
    }

    /// Events queued.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        let left = |id: u32| {
            self.buckets
                .get(id as usize)
                .map_or(0, |b| b.items.len() - b.read as usize)
        };
        self.heap
            .iter()
            .map(|n| match self.draining {
                Some((seq, id)) if seq == n.seq => left(id),
                _ => 1 + self.overflow_of(n).map_or(0, left),
            })
            .sum()
    }

    /// Schedule an event; ties in time pop in push order.
    #[inline]
    pub fn push(&mut self, time_ns: u64, a: u32, b: u32) {
        let slot = recent_slot(time_ns);
        let e = self.recent[slot];
        if e.seq != NO_NODE && e.time_ns == time_ns {
            let id = if e.bucket != NO_BUCKET {
                e.bucket
            } else {
                let id = self.new_bucket();
                self.recent[slot].bucket = id;
                id
            };
            if let Some(bucket) = self.buckets.get_mut(id as usize) {
                bucket.items.push((a, b));
            }
            return;
        }
        if e.seq != NO_NODE && e.bucket != NO_BUCKET {
            self.evicted.insert(e.seq, e.bucket);
        }
        let node = Node {
            time_ns,
            seq: self.next_seq,
            a,
            b,
        };
        self.recent[slot] = Recent {
            time_ns,
            seq: self.next_seq,
            bucket: NO_BUCKET,
        };
        self.next_seq += 1;
        self.sift_up(node);
    }

    fn new_bucket(&mut self) -> u32 {
        match self.free.pop() {
            Some(id) => id,
            None => {
                self.buckets.push(Bucket::default());
                (self.buckets.len() - 1) as u32
            }
        }
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

    /// The overflow of queued node `n`, if it has one.
    #[inline]
    fn overflow_of(&self, n: &Node) -> Option<u32> {
        let e = self.recent[recent_slot(n.time_ns)];
        if e.seq == n.seq {
            (e.bucket != NO_BUCKET).then_some(e.bucket)
        } else if self.evicted.is_empty() {
            None
        } else {
            self.evicted.get(&n.seq).copied()
        }
    }

    /// The earliest event.
    #[inline]
    pub fn pop(&mut self) -> Option<Event> {
        let top = *self.heap.first()?;
        if let Some((seq, id)) = self.draining.filter(|&(seq, _)| seq == top.seq) {
            let bucket = self.buckets.get_mut(id as usize)?;
            let (a, b) = *bucket.items.get(bucket.read as usize)?;
            bucket.read += 1;
            if bucket.read as usize == bucket.items.len() {
                bucket.items.clear();
                bucket.read = 0;
                self.free.push(id);
                self.draining = None;
                if !self.evicted.is_empty() {
                    self.evicted.remove(&seq);
                }
                self.retire(&top);
            }
            return Some(Event {
                time_ns: top.time_ns,
                a,
                b,
            });
        }
        // The node's own event; its overflow, if any, pops next.
        match self.overflow_of(&top) {
            Some(id) => self.draining = Some((top.seq, id)),
            None => self.retire(&top),
        }
        Some(Event {
            time_ns: top.time_ns,
            a: top.a,
            b: top.b,
        })
    }

    /// Removes the root, `top`, and its `recent` entry.
    fn retire(&mut self, top: &Node) {
        let slot = recent_slot(top.time_ns);
        if self.recent[slot].seq == top.seq {
            self.recent[slot] = EMPTY;
        }
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

    /// A time other than `t` that shares its `recent` entry.
    fn colliding(t: u64) -> u64 {
        (t + 1..)
            .find(|&u| recent_slot(u) == recent_slot(t))
            .unwrap_or(t)
    }

    #[test]
    fn a_time_evicted_from_the_table_keeps_push_order() {
        // Pushing t2 evicts t1's entry, so the next push at t1 creates a second node for it,
        // which must pop after the first node and its overflow.
        let t1 = 1_000u64;
        let t2 = colliding(t1);
        assert_ne!(t1, t2);
        let mut q = EventQueue::with_capacity(0);
        q.push(t1, 1, 0);
        q.push(t1, 2, 0); // t1's first node now has an overflow
        q.push(t2, 3, 0); // evicts it: the overflow must still pop
        q.push(t1, 4, 0);
        q.push(t2, 5, 0);
        q.push(t1, 6, 0);
        assert_eq!(q.len(), 6);
        let order: Vec<(u64, u32)> = std::iter::from_fn(|| q.pop())
            .map(|e| (e.time_ns, e.a))
            .collect();
        let mut want = vec![(t1, 1), (t1, 2), (t1, 4), (t1, 6), (t2, 3), (t2, 5)];
        want.sort_by_key(|&(t, a)| (t, a));
        assert_eq!(order, want);
        assert!(q.evicted.is_empty());
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn a_node_drained_while_its_entry_is_evicted_pops_its_whole_overflow() {
        let t1 = 1_000u64;
        let t2 = colliding(t1);
        let mut q = EventQueue::with_capacity(0);
        q.push(t1, 1, 0);
        q.push(t1, 2, 0);
        q.push(t1, 3, 0);
        assert_eq!(q.pop().map(|e| e.a), Some(1));
        assert_eq!(q.pop().map(|e| e.a), Some(2));
        // t2 takes the entry while t1's node is being popped; a push at t1 then opens a new
        // node, after the old one's last event.
        q.push(t2, 4, 0);
        q.push(t1, 5, 0);
        let rest: Vec<u32> = std::iter::from_fn(|| q.pop()).map(|e| e.a).collect();
        let want = if t1 < t2 {
            vec![3, 5, 4]
        } else {
            vec![4, 3, 5]
        };
        assert_eq!(rest, want);
        assert!(q.evicted.is_empty());
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
