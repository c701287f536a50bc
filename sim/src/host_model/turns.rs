//! Compute ops taking turns on a shared core. The host runtime binds each rank to a core and
//! runs its compute stream on a thread that yields after every op, so two ranks bound to one
//! core run their compute ops one after the other, each at the core's full speed, and not side
//! by side at half speed each (processor sharing, which the flow model would give them). The
//! two agree on a core's total work but not on when each op ends: with turns, the member of a
//! tensor-parallel pair whose core ran the other rank's op first reaches the collective later,
//! and its partner on the other core waits (docs/validation.md, "critical path").
//!
//! Per core the engine keeps whether a compute op holds it and the ready compute ops waiting
//! for it, in the order they became ready (a yielding thread goes behind the threads already
//! waiting). A waiting op has not started: its stream is taken, and it starts, in the trace and
//! the accounts, when it gets the core, as the runtime's own timestamps see it. Transfers and
//! allocations are not compute ops: they still share the core with the op that holds it.

use std::collections::VecDeque;

/// A compute op waiting for a core: its rank, slot and stream.
pub(crate) type Waiter = (u32, u32, u8);

#[derive(Default)]
pub(crate) struct Turns {
    held: Vec<bool>,
    /// The op holding each core, while one does.
    holder: Vec<Option<Waiter>>,
    waiting: Vec<VecDeque<Waiter>>,
}

impl Turns {
    /// The ready compute op `w` asks for `core`: true when it gets it now, false when it waits.
    pub fn claim(&mut self, core: usize, w: Waiter) -> bool {
        if core >= self.held.len() {
            self.held.resize(core + 1, false);
            self.holder.resize(core + 1, None);
            self.waiting.resize_with(core + 1, VecDeque::new);
        }
        if self.held[core] {
            self.waiting[core].push_back(w);
            false
        } else {
            self.held[core] = true;
            self.holder[core] = Some(w);
            true
        }
    }

    /// The op holding `core` now, if one does (it may still be waiting out its hand-off).
    pub fn holder(&self, core: usize) -> Option<Waiter> {
        self.holder.get(core).copied().flatten()
    }

    /// The op holding `core` finished: the longest-waiting op gets it (returned), or the core
    /// is free.
    pub fn release(&mut self, core: usize) -> Option<Waiter> {
        debug_assert!(self.held.get(core).copied().unwrap_or(false));
        let next = self.waiting.get_mut(core)?.pop_front();
        if next.is_none() {
            self.held[core] = false;
        }
        if let Some(h) = self.holder.get_mut(core) {
            *h = next;
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_core_serves_one_op_and_then_its_waiters_in_order() {
        let mut t = Turns::default();
        assert!(t.claim(1, (0, 0, 0)));
        assert!(!t.claim(1, (2, 1, 0)));
        assert!(!t.claim(1, (4, 2, 0)));
        assert_eq!(t.holder(1), Some((0, 0, 0)));
        // Another core is independent.
        assert!(t.claim(0, (1, 3, 0)));
        assert_eq!(t.release(1), Some((2, 1, 0)));
        assert_eq!(t.holder(1), Some((2, 1, 0)));
        assert_eq!(t.release(1), Some((4, 2, 0)));
        assert_eq!(t.release(1), None);
        assert_eq!(t.holder(1), None);
        assert_eq!(t.holder(7), None);
        // Free again.
        assert!(t.claim(1, (0, 0, 0)));
        assert_eq!(t.release(0), None);
    }
}
