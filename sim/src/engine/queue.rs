//! The engine's event queue: events ordered by (time, push order), so events at equal times
//! pop in the order they were scheduled and a run is deterministic.
//!
//! Events are held by *nodes*. A node holds the first event pushed for its time; events
//! pushed later for the same time while the node is still queued go to the node's
//! *overflow*, a FIFO, instead of a node of their own. Symmetric ranks (the members of a
//! tensor- or data-parallel group) finish the same ops at the same times, so at 16,384 GPUs a
//! thousand events share a node; where every time differs (per-op noise) no node has an
//! overflow and the nodes are the events.
//!
//! The nodes are ordered by a radix heap (Ahuja, Mehlhorn, Orlin and Tarjan, "Faster
//! algorithms for the shortest path problem", J. ACM 37(2), 1990): no queued time is below
//! the least one, `last`, so a node can live in the bucket named by the highest bit in which
//! its time differs from `last` (bucket 0: equal to it). Every time in bucket `i` is below
//! every time in bucket `j > i`. A new node is appended to its bucket; when bucket 0 runs
//! empty, the first non-empty bucket's least time becomes `last` and its nodes move down to
//! the buckets their times now name. A node moves down at most 64 times, in practice a few,
//! each move a copy in sequence: no sift through a heap of tens of thousands of entries when
//! per-op noise makes every time distinct.
//!
//! Why the order is exactly (time, push order): a push at time `t` joins the node created
//! last for `t` if that node is still queued, and otherwise creates a new node for `t`. Nodes
//! of one time are always in the same bucket (the bucket is a function of the time and
//! `last`); a new node goes after every node already there, and moving a bucket down and
//! popping bucket 0 keep the order of the nodes they move, so nodes of one time stay in
//! creation order. Every event of an older node was pushed before every event of a newer one,
//! and within a node events pop in push order (its own event, then its overflow's). The node
//! created last for a time is found through a direct-mapped table (`recent`) that every node
//! creation writes and every node removal clears; a time evicted from it by another time just
//! gets a new node, which is still ordered after the old one (whose overflow, if it has one,
//! is then found in `evicted`).
//!
//! `last` is the least queued time, not the last popped one, so that the event after the one
//! being handled is known (the engine prefetches its rank's state). A push below it (an
//! event scheduled before the next queued one) makes the pushed time `last` and moves the
//! nodes of the buckets that change, which keeps the nodes of each time in creation order
//! (see `lower_last`).

use std::collections::HashMap;

/// A popped event. `a` and `b` are the payload; the engine gives them meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Event {
    pub time_ns: u64,
    pub a: u32,
    pub b: u32,
}

/// A queued node: the first event of its time, and the order of its creation.
#[derive(Clone, Copy, Debug)]
struct Node {
    time_ns: u64,
    seq: u64,
    a: u32,
    b: u32,
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
/// Radix buckets above bucket 0: `i` in 1..=64 holds the nodes whose time's highest bit
/// differing from `last` is bit `i - 1` (at index `i - 1` of `EventQueue::radix`).
const RADIX: usize = 64;

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
    /// The least queued time, once the queue has held a node: every queued time is at least
    /// this, and `front` holds the nodes at exactly this time.
    last: u64,
    /// Radix bucket 0: the nodes at time `last` still to pop, `front[read..]`, in creation
    /// order.
    front: Vec<Node>,
    read: usize,
    /// Radix buckets 1..=64, each in creation order.
    radix: Vec<Vec<Node>>,
    /// Bit `i - 1` set: radix bucket `i` holds nodes.
    full: u64,
    /// Nodes queued.
    nodes: usize,
    /// Room for the nodes `lower_last` moves.
    scratch: Vec<Node>,
    buckets: Vec<Bucket>,
    /// Buckets emptied and ready for reuse (their vectors keep their room).
    free: Vec<u32>,
    /// By a hash of the time: the node created last for it, while it is queued.
    recent: Box<[Recent; RECENT]>,
    /// Overflows of queued nodes whose `recent` entry another time took: by node sequence.
    evicted: HashMap<u64, u32>,
    /// The front node whose own event has popped, and its overflow being popped.
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

/// The radix bucket of `time_ns` when the least queued time is `last` (`time_ns >= last`).
#[inline]
fn radix_of(time_ns: u64, last: u64) -> usize {
    (u64::BITS - (time_ns ^ last).leading_zeros()) as usize
}

impl EventQueue {
    pub fn with_capacity(n: usize) -> EventQueue {
        EventQueue {
            last: 0,
            front: Vec::with_capacity(n),
            read: 0,
            radix: (0..RADIX).map(|_| Vec::new()).collect(),
            full: 0,
            nodes: 0,
            scratch: Vec::new(),
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
        self.last = 0;
        self.front.clear();
        self.read = 0;
        for v in self.radix.iter_mut() {
            v.clear();
        }
        self.full = 0;
        self.nodes = 0;
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

    /// Every queued node, in no particular order.
    #[cfg(test)]
    fn queued(&self) -> impl Iterator<Item = &Node> {
        self.front
            .get(self.read..)
            .unwrap_or(&[])
            .iter()
            .chain(self.radix.iter().flatten())
    }

    /// Events queued.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        let left = |id: u32| {
            self.buckets
                .get(id as usize)
                .map_or(0, |b| b.items.len() - b.read as usize)
        };
        self.queued()
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
        self.insert(node);
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

    /// Queues a new node after every node already queued for its time.
    #[inline]
    fn insert(&mut self, node: Node) {
        if self.nodes == 0 {
            self.front.clear();
            self.read = 0;
            self.last = node.time_ns;
        } else if node.time_ns < self.last {
            self.lower_last(node.time_ns);
        }
        self.nodes += 1;
        self.place(node);
    }

    /// Appends `node` to the radix bucket its time names.
    #[inline]
    fn place(&mut self, node: Node) {
        match radix_of(node.time_ns, self.last) {
            0 => self.front.push(node),
            i => {
                self.full |= 1 << (i - 1);
                if let Some(v) = self.radix.get_mut(i - 1) {
                    v.push(node);
                }
            }
        }
    }

    /// Makes `time_ns` (below every queued time) the new `last`. Nodes whose bucket may
    /// change are those at most bucket `k = radix_of(time_ns, last)`: a time differing from
    /// the old `last` above bit `k - 1` differs from `time_ns` in the same highest bit, and
    /// one that does not, differs from `time_ns` at most in bit `k - 1`. So bucket 0 and
    /// buckets 1..=k go back in, in that order and each in its order, and land in buckets
    /// 0..=k only: the nodes of each time keep their creation order. The engine makes such
    /// pushes when it schedules an event before the next queued one (the least time is known
    /// ahead, for the prefetch), mostly a short time ahead: a few small buckets move.
    fn lower_last(&mut self, time_ns: u64) {
        self.stop_draining();
        let k = radix_of(time_ns, self.last);
        let mut moving = std::mem::take(&mut self.scratch);
        moving.clear();
        moving.extend(self.front.drain(..).skip(self.read));
        self.read = 0;
        for i in 0..k.min(RADIX) {
            if self.full & (1 << i) != 0 {
                if let Some(v) = self.radix.get_mut(i) {
                    moving.append(v);
                }
            }
        }
        self.full &= if k >= RADIX { 0 } else { u64::MAX << k };
        self.last = time_ns;
        for &node in &moving {
            self.place(node);
        }
        self.scratch = moving;
    }

    /// If the front node is having its overflow popped, makes the overflow's next event the
    /// node's own, so that the node pops as any other when it is next in front (a new node
    /// for a lower time is about to come before it).
    fn stop_draining(&mut self) {
        let Some((seq, id)) = self.draining.take() else {
            return;
        };
        let (Some(top), Some(bucket)) = (
            self.front.get_mut(self.read),
            self.buckets.get_mut(id as usize),
        ) else {
            return;
        };
        if top.seq != seq {
            return;
        }
        let Some(&(a, b)) = bucket.items.get(bucket.read as usize) else {
            return;
        };
        (top.a, top.b) = (a, b);
        bucket.read += 1;
        if bucket.read as usize == bucket.items.len() {
            bucket.items.clear();
            bucket.read = 0;
            self.free.push(id);
            let slot = recent_slot(top.time_ns);
            if self.recent[slot].seq == seq {
                self.recent[slot].bucket = NO_BUCKET;
            } else {
                self.evicted.remove(&seq);
            }
        }
    }

    /// Time of the earliest event, if any.
    #[inline]
    pub fn next_time_ns(&self) -> Option<u64> {
        (self.nodes > 0).then_some(self.last)
    }

    /// The payload of the event that pops next, if any.
    #[inline]
    pub fn peek_payload(&self) -> Option<(u32, u32)> {
        let top = self.front.get(self.read)?;
        match self.draining {
            Some((seq, id)) if seq == top.seq => {
                let b = self.buckets.get(id as usize)?;
                b.items.get(b.read as usize).copied()
            }
            _ => Some((top.a, top.b)),
        }
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
        let top = *self.front.get(self.read)?;
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

    /// Removes the front node, `top`, and its `recent` entry.
    #[inline]
    fn retire(&mut self, top: &Node) {
        let slot = recent_slot(top.time_ns);
        if self.recent[slot].seq == top.seq {
            self.recent[slot] = EMPTY;
        }
        self.read += 1;
        self.nodes -= 1;
        if self.read == self.front.len() {
            self.front.clear();
            self.read = 0;
            if self.full != 0 {
                self.refill();
            }
        }
    }

    /// Bucket 0 has run empty and another holds nodes: the first such bucket's least time
    /// becomes `last`, and its nodes move to the buckets their times now name (all lower:
    /// they share its bits above its own).
    fn refill(&mut self) {
        let i = self.full.trailing_zeros() as usize;
        self.full &= !(1 << i);
        let Some(v) = self.radix.get_mut(i) else {
            return;
        };
        let mut moving = std::mem::take(v);
        if let Some(least) = moving.iter().map(|n| n.time_ns).min() {
            self.last = least;
            for &node in &moving {
                self.place(node);
            }
        }
        // The bucket's vector keeps its room for the next nodes that land in it.
        moving.clear();
        if let Some(v) = self.radix.get_mut(i) {
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
    fn a_push_below_the_least_time_keeps_each_times_push_order() {
        // Not something the engine does; the queue re-buckets everything and stays exact.
        let mut q = EventQueue::with_capacity(0);
        for (t, a) in [
            (100, 1),
            (100, 2),
            (1_000, 3),
            (100, 4),
            (1 << 40, 5),
            (1_000, 6),
        ] {
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
    fn a_push_below_a_node_being_drained_leaves_its_overflow_in_order() {
        let mut q = EventQueue::with_capacity(0);
        for a in 1..=4 {
            q.push(100, a, 0);
        }
        assert_eq!(q.pop().map(|e| e.a), Some(1));
        // 100's node is being drained; a lower time with an overflow of its own comes first.
        q.push(50, 5, 0);
        q.push(50, 6, 0);
        q.push(100, 7, 0);
        let order: Vec<(u64, u32)> = std::iter::from_fn(|| q.pop())
            .map(|e| (e.time_ns, e.a))
            .collect();
        assert_eq!(
            order,
            vec![(50, 5), (50, 6), (100, 2), (100, 3), (100, 4), (100, 7)]
        );
        assert!(q.evicted.is_empty());
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
            spread in prop_oneof![
                Just(1u64),
                Just(1u64 << 20),
                Just(0x9E37_79B9),
                Just(1u64 << 57)
            ],
            back in prop_oneof![Just(0u64), Just(3u64)],
        ) {
            // Interleave pushes and pops; compare with a sorted reference. `spread` scales
            // the times from adjacent buckets to the outermost ones, and so that some collide
            // in the table of recent nodes; `back` lets some pushes land below the last time
            // popped.
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
