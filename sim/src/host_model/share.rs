//! Busy time on shared CPU cores, counted as work. When ranks share a core (the host model,
//! `[host] cores`), processor sharing runs two ranks' ops side by side at half speed each, and
//! a wall-clock account would call both ranks busy for the whole stretched span. A real host
//! run shows something else: its ranks take turns on the core op by op (every stream thread
//! yields after each op), so each rank is seen busy for its ops' own time and waiting for the
//! rest. This module keeps, per rank, how much of its compute and communication spans was
//! such waiting (wall time beyond the op's solo time), and the run's accounts move it to idle
//! time. Without shared cores nothing is kept.

use crate::schedule::Stream;

/// Streams per rank.
const STREAMS: usize = Stream::COUNT;

/// Solo time not known (the flow network timed the transfer): no waiting is counted.
const UNKNOWN: u64 = u64::MAX;

/// Per simulated rank (slot), the waiting within its compute and communication spans.
pub(crate) struct CoreShare {
    /// Solo time of the op running on (slot, stream).
    solo_ns: Vec<u64>,
    /// Per slot: [compute, communication] wall time beyond solo time.
    waiting_ns: Vec<[u64; 2]>,
}

impl CoreShare {
    pub fn new(slots: usize) -> CoreShare {
        CoreShare {
            solo_ns: vec![UNKNOWN; slots * STREAMS],
            waiting_ns: vec![[0, 0]; slots],
        }
    }

    /// The op starting on `stream` of `slot` takes `solo_ns` alone on its core (`None`: not
    /// known).
    pub fn started(&mut self, slot: usize, stream: usize, solo_ns: Option<u64>) {
        if let Some(s) = self.solo_ns.get_mut(slot * STREAMS + stream) {
            *s = solo_ns.unwrap_or(UNKNOWN);
        }
    }

    /// The op on `stream` of `slot` finished after `wall_ns`; `comm` for a transfer.
    pub fn finished(&mut self, slot: usize, stream: usize, wall_ns: u64, comm: bool) {
        let solo = self
            .solo_ns
            .get(slot * STREAMS + stream)
            .copied()
            .unwrap_or(UNKNOWN);
        if solo == UNKNOWN {
            return;
        }
        if let Some(w) = self.waiting_ns.get_mut(slot) {
            w[usize::from(comm)] += wall_ns.saturating_sub(solo);
        }
    }

    /// The solo time of the op on `stream` of `slot` (the last one started there), when it is
    /// known and shorter than `wall_ns`, the time it took: the trace's `solo_ns`.
    pub fn solo_below(&self, slot: usize, stream: usize, wall_ns: u64) -> Option<u64> {
        self.solo_ns
            .get(slot * STREAMS + stream)
            .copied()
            .filter(|&s| s != UNKNOWN && s < wall_ns)
    }

    /// A rank's (compute busy, exposed communication, idle) with its waiting moved to idle;
    /// the three still sum to the same step time.
    pub fn apply(&self, slot: usize, compute_ns: u64, comm_ns: u64, idle_ns: u64) -> [u64; 3] {
        let [wc, wm] = self.waiting_ns.get(slot).copied().unwrap_or([0, 0]);
        let (wc, wm) = (wc.min(compute_ns), wm.min(comm_ns));
        [compute_ns - wc, comm_ns - wm, idle_ns + wc + wm]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_moves_to_idle_and_the_sum_is_kept() {
        let mut s = CoreShare::new(2);
        // Slot 1: a compute op of 100 ns solo took 250 ns; a transfer of 40 ns took 60 ns;
        // one of unknown solo time took 500 ns.
        s.started(1, 0, Some(100));
        s.finished(1, 0, 250, false);
        s.started(1, 3, Some(40));
        s.finished(1, 3, 60, true);
        s.started(1, 4, None);
        s.finished(1, 4, 500, true);
        assert_eq!(s.apply(1, 300, 100, 50), [150, 80, 220]);
        // Waiting never exceeds the account it comes from.
        assert_eq!(s.apply(1, 100, 10, 0), [0, 0, 110]);
        // Slot 0 had none.
        assert_eq!(s.apply(0, 300, 100, 50), [300, 100, 50]);
    }
}
