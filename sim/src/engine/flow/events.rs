//! Completion events of flows: re-solving rates once per instant, one heap event for the flows
//! of a transfer that finish together, and what finishing means for the engine. See
//! [`Flows::resolve`].

use super::round::round_non_negative;
use super::{fast, Batch, Finished, Flows, Owner, FLOW_TAG, NO_FLOW};
use crate::engine::queue::EventQueue;

/// A flow's work left at `now` after running at `old_rate` since `last_ns`, and when it
/// finishes from `now` at `rate` (`u64::MAX`: never), to the nanosecond.
#[inline]
pub(super) fn settle(
    left: f64,
    (old_rate, last_ns): (f64, u64),
    rate: f64,
    now: u64,
) -> (f64, u64) {
    let elapsed = now.saturating_sub(last_ns) as f64;
    let left = (left - old_rate * elapsed).max(0.0);
    let dt = if rate > 0.0 {
        round_non_negative(left / rate)
    } else {
        f64::MAX
    };
    let finish = if dt >= (u64::MAX - now) as f64 {
        u64::MAX
    } else {
        now + dt as u64
    };
    (left, finish)
}

impl Flows {
    /// Recomputes the rates the last changes touched and schedules a new completion for
    /// every flow whose rate changed — once per instant: while the next event is at `now`
    /// too, the changes wait for it. Re-solving after each of several events at one instant
    /// only settled zero elapsed time and pushed events that the next re-solve made stale;
    /// the rates that leave the instant are those of the flows present at its end either
    /// way (tested against re-solving after every event).
    ///
    /// Flows of one transfer that the solver reports one after another and that finish at the
    /// same time share one heap event (a [`Batch`] chain) instead of one event each: their
    /// events would have had consecutive sequence numbers, so they would have popped one right
    /// after the other, and [`Flows::finish`] handles them in that order. The heap carries a
    /// ring phase as one event instead of one per ring edge.
    pub fn resolve(&mut self, now: u64, queue: &mut EventQueue) {
        if fast() && queue.next_time_ns() == Some(now) {
            return;
        }
        self.resolve_now(now, queue);
    }

    fn resolve_now(&mut self, now: u64, queue: &mut EventQueue) {
        if let Some(solo) = &mut self.solo {
            solo.resolve(now, queue);
            return;
        }
        let mut changed = std::mem::take(&mut self.changed);
        changed.clear();
        self.solver.resolve(&mut changed);
        // Memory-bound flows end their stretch at the old rates first (`flow::memory`).
        self.settle_memory_of(&changed, now);
        // Flows that grew keep their rate but need a new completion (once each).
        for id in self.grown.drain(..) {
            if !changed.contains(&id) && self.solver.is_active(id) {
                changed.push(id);
            }
        }
        // The open batch: (finish time, owning transfer, head node, tail node).
        let mut open: Option<(u64, u32, u32, u32)> = None;
        for &id in &changed {
            let rate = self.solver.rate(id);
            let i = &mut self.info[id as usize];
            let finish;
            (i.left, finish) = settle(i.left, (i.rate, i.last_ns), rate, now);
            i.rate = rate;
            i.last_ns = now;
            i.version = i.version.wrapping_add(1);
            let (version, tid) = match i.owner {
                Owner::Transfer(t) => (i.version, t),
                Owner::Compute { .. } => (i.version, NO_FLOW),
            };
            let node = self.node(id, version);
            match &mut open {
                Some((f, t, _, tail)) if *f == finish && *t == tid && tid != NO_FLOW && fast() => {
                    self.batches[*tail as usize].next = node;
                    *tail = node;
                }
                _ => {
                    if let Some((f, _, head, _)) = open {
                        queue.push(f, FLOW_TAG | head, 0);
                    }
                    open = Some((finish, tid, node, node));
                }
            }
        }
        if let Some((f, _, head, _)) = open {
            queue.push(f, FLOW_TAG | head, 0);
        }
        self.changed = changed;
    }

    /// A new batch node for flow `id` at `version`.
    fn node(&mut self, id: u32, version: u32) -> u32 {
        let b = Batch {
            id,
            version,
            next: NO_FLOW,
        };
        match self.free_batches.pop() {
            Some(n) => {
                self.batches[n as usize] = b;
                n
            }
            None => {
                self.batches.push(b);
                (self.batches.len() - 1) as u32
            }
        }
    }

    /// The completion event of batch `head` popped at `now`: finishes its flows in order.
    /// (Between separate events at one instant the engine would not re-solve either, see
    /// [`Flows::resolve`].) `version` is the event's second payload: without a flow network
    /// or shared cores `head` is a flow and `version` the one its event was scheduled for
    /// ([`super::solo`]); otherwise it is unused.
    pub fn finish(
        &mut self,
        now: u64,
        (head, version): (u32, u32),
        queue: &mut EventQueue,
    ) -> Finished {
        if let Some(solo) = &mut self.solo {
            // As below: the reference re-solves before each completion.
            if !fast() && solo.is_dirty() {
                solo.resolve(now, queue);
            }
            let (done, slot) = solo.finish(head, version);
            if let Some(s) = slot.and_then(|s| self.compute_flow.get_mut(s as usize)) {
                *s = NO_FLOW;
            }
            return done;
        }
        let mut node = head;
        let mut out = Finished::Nothing;
        while let Some(&Batch { id, version, next }) = self.batches.get(node as usize) {
            self.free_batches.push(node);
            node = next;
            if !matches!(out, Finished::Nothing) {
                // Cannot happen (a batch is one phase of one transfer, which ends with its
                // last flow); kept correct anyway: the rest becomes its own event.
                let rest = self.node(id, version);
                self.batches[rest as usize].next = next;
                queue.push(now, FLOW_TAG | rest, 0);
                break;
            }
            if !fast() && self.is_dirty() {
                self.resolve_now(now, queue);
            }
            out = self.finish_flow(now, id, version);
        }
        out
    }

    /// Flow `id`'s completion (as of `version`) at `now`.
    fn finish_flow(&mut self, now: u64, id: u32, version: u32) -> Finished {
        let Some(i) = self.info.get(id as usize).copied() else {
            return Finished::Nothing;
        };
        if i.version != version {
            return Finished::Nothing;
        }
        // Invalidate any other pending event of this id.
        self.info[id as usize].version = i.version.wrapping_add(1);
        self.solver.remove(id);
        match i.owner {
            Owner::Compute { rank, op, slot } => {
                if let Some(s) = self.compute_flow.get_mut(slot as usize) {
                    *s = NO_FLOW;
                }
                let own_ns = self.memory_finished(id, now);
                Finished::Compute { rank, op, own_ns }
            }
            Owner::Transfer(tid) => {
                let t = &mut self.transfers[tid as usize];
                t.flows_left = t.flows_left.saturating_sub(1);
                if t.flows_left > 0 {
                    return Finished::Nothing;
                }
                let t = *t;
                if (t.next as usize) < self.phases(&t) {
                    self.start_phase(now, tid);
                    return Finished::Nothing;
                }
                let (done, latency_ns) = (t.done, t.latency_ns);
                self.free_transfers.push(tid);
                Finished::Transfer { done, latency_ns }
            }
        }
    }
}
