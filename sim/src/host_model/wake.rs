//! Transfers into a core that slept. On a VM an idle vCPU takes longer to wake the longer it
//! idled: a one-way 4 KiB transfer over the host runtime's TCP mesh took 37-42 µs back to back,
//! 55-61 µs after 50 µs idle, 82 µs after 1 ms and 169 µs after 5 ms, and in a pipeline the
//! receiver has usually idled for a bubble (docs/journal/2026-11-validation-history.md,
//! 2026-11-23). With a profile's `[host] wake_ns` and `wake_per_idle` the engine adds `wake_ns +
//! wake_per_idle x idle` to a transfer whose receiving core (for a collective, any member's) ran no
//! compute for `idle` before the transfer began; the profile's transfer latency is the back-to-back
//! one.

/// The extra time of a transfer into a core that idled (from a profile).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Wake {
    /// The jump once the core idled at all.
    pub ns: f64,
    /// Extra nanoseconds per nanosecond idle.
    pub per_idle: f64,
}

/// Idle spans beyond this are priced as this long (the calibration measures up to 5 ms).
const MAX_IDLE_NS: u64 = 10_000_000;

impl Wake {
    /// The extra time of a transfer whose receiving core idled `idle_ns` (0: it was busy).
    pub fn extra_ns(&self, idle_ns: u64) -> u64 {
        if idle_ns == 0 {
            return 0;
        }
        let t = self.ns + self.per_idle * idle_ns.min(MAX_IDLE_NS) as f64;
        if t.is_finite() && t > 0.0 {
            t.round() as u64
        } else {
            0
        }
    }
}

/// Per core: compute ops running on it, and when it last started or finished one.
#[derive(Default)]
pub(crate) struct CoreIdle {
    running: Vec<u32>,
    last_active_ns: Vec<u64>,
}

impl CoreIdle {
    fn slot(&mut self, core: usize) -> usize {
        if core >= self.running.len() {
            self.running.resize(core + 1, 0);
            self.last_active_ns.resize(core + 1, 0);
        }
        core
    }

    pub fn started(&mut self, core: usize, now: u64) {
        let c = self.slot(core);
        self.running[c] += 1;
        self.last_active_ns[c] = now;
    }

    pub fn finished(&mut self, core: usize, now: u64) {
        let c = self.slot(core);
        self.running[c] = self.running[c].saturating_sub(1);
        self.last_active_ns[c] = now;
    }

    /// How long `core` has run no compute as of `now` (0 while it runs some). A core that
    /// never ran any idled since the step began.
    pub fn idle_ns(&self, core: usize, now: u64) -> u64 {
        match self.running.get(core) {
            Some(&n) if n > 0 => 0,
            Some(_) => now.saturating_sub(self.last_active_ns[core]),
            None => now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_core_wakes_for_free_an_idle_one_pays_for_its_idle_time() {
        let w = Wake {
            ns: 17_000.0,
            per_idle: 0.022,
        };
        assert_eq!(w.extra_ns(0), 0);
        assert_eq!(w.extra_ns(1_000_000), 17_000 + 22_000);
        // Beyond the measured range the idle time is capped.
        assert_eq!(w.extra_ns(1_000_000_000), w.extra_ns(MAX_IDLE_NS));
        let mut c = CoreIdle::default();
        assert_eq!(c.idle_ns(1, 500), 500, "never active: idle since the start");
        c.started(1, 500);
        assert_eq!(c.idle_ns(1, 900), 0);
        c.finished(1, 1_000);
        assert_eq!(c.idle_ns(1, 4_000), 3_000);
        // Two ops on one core: busy until both finished.
        c.started(1, 4_000);
        c.started(1, 4_100);
        c.finished(1, 4_200);
        assert_eq!(c.idle_ns(1, 5_000), 0);
        c.finished(1, 5_000);
        assert_eq!(c.idle_ns(1, 5_500), 500);
    }
}
