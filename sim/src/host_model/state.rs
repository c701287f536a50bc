//! How much of the optimizer's state the last-level cache still holds when the next step's
//! update reads it (host profiles: `memory.state_*`). Two things push it out between two
//! updates: the bytes the node's own ranks touch in the step (a ramp over that distance), and
//! time, on a cache other tenants of the machine share (a decay over the time since the last
//! update). Timed after an idle gap with nothing else touched, an update of 8 MiB ran at 48 GB/s
//! back to back, 37 at 10 ms, 21 at 50 ms and 19 at 100 ms
//! (docs/journal/2026-11-validation-history.md, 2026-11-24). The cost model prices an optimizer op
//! with its own ramp; the engine, which knows when the op starts, adds what the decay takes away
//! ([`StateAging`]).

use crate::units::positive_rate;
use serde::Serialize;

/// How fast the optimizer's update runs by how much of its state the node's last-level cache
/// still holds. The update touches state last touched a step earlier, and everything else the
/// node's ranks touched in that step came between: `E` other bytes, with `S` bytes of the
/// update's own state (half the bytes it moves: each state byte is read and written). At the
/// distance `E + state_weight x S` the part still resident is `1` up to `resident_bytes`, `0`
/// from `evicted_bytes`, linear between; a state byte counts `state_weight` times (1-2 here: an
/// update of 48 MiB ran at DRAM speed with nothing between, one of 4 MiB at cache speed after
/// 44 MiB). With a [`StateDecay`], that part also survives the time since the last update by
/// the decay's fraction. Resident bytes move at `resident_efficiency` of the memory bandwidth,
/// the rest at `evicted_efficiency` (docs/journal/2026-11-validation-history.md, 2026-11-24).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct StateCache {
    pub state_weight: f64,
    pub resident_bytes: u64,
    pub evicted_bytes: u64,
    pub resident_efficiency: f64,
    pub evicted_efficiency: f64,
    /// The state leaving the cache with time (`memory.state_decay_after_ns` and
    /// `state_lifetime_ns`); `None`: it stays as long as the node's own bytes let it.
    pub decay: Option<StateDecay>,
}

/// The fraction of the state a shared last-level cache keeps over time with nothing of the
/// node's own touched: `1` up to `after_ns`, then `exp(-(t - after_ns) / lifetime_ns)`. Other
/// tenants' traffic fills the cache's free room first, then pushes out lines at random.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct StateDecay {
    pub after_ns: u64,
    pub lifetime_ns: u64,
}

impl StateDecay {
    /// The fraction left `elapsed_ns` after the last update.
    pub fn survival(&self, elapsed_ns: u64) -> f64 {
        survival(
            elapsed_ns as f64,
            self.after_ns as f64,
            self.lifetime_ns as f64,
        )
    }
}

/// [`StateDecay::survival`] on plain numbers, for the calibration's fit (which places
/// `after` and `lifetime` with this same function). A lifetime that is not positive keeps
/// nothing past `after`.
pub fn survival(elapsed: f64, after: f64, lifetime: f64) -> f64 {
    if elapsed.is_nan() || elapsed <= after {
        1.0
    } else if lifetime > 0.0 && lifetime.is_finite() {
        (-(elapsed - after) / lifetime).exp()
    } else if lifetime.is_infinite() {
        1.0
    } else {
        0.0
    }
}

impl StateCache {
    /// The fraction of `state_bytes` of state resident after `other_bytes` of other data.
    pub fn resident_fraction(&self, other_bytes: u64, state_bytes: u64) -> f64 {
        let d = other_bytes as f64 + self.state_weight.max(0.0) * state_bytes as f64;
        ramp(d, self.resident_bytes as f64, self.evicted_bytes as f64)
    }

    /// Seconds of an update moving `moved_bytes` with `resident` of its state in the cache,
    /// on memory of `hbm_bytes_per_s`.
    pub fn update_s(&self, moved_bytes: u64, resident: f64, hbm_bytes_per_s: f64) -> f64 {
        let b = moved_bytes as f64;
        let h = resident.clamp(0.0, 1.0);
        h * b / positive_rate(hbm_bytes_per_s * self.resident_efficiency)
            + (1.0 - h) * b / positive_rate(hbm_bytes_per_s * self.evicted_efficiency)
    }
}

/// What an optimizer op pays beyond its price (which assumes no time since the last update)
/// `t` after that update: `max_extra_ns x (1 - survival(t))`, where `max_extra_ns` is what
/// the part of the state the ramp leaves resident costs once it has gone.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StateAging {
    pub max_extra_ns: u64,
    pub decay: StateDecay,
}

impl StateAging {
    /// The extra time `elapsed_ns` after the last update.
    pub fn extra_ns(&self, elapsed_ns: u64) -> u64 {
        let lost = 1.0 - self.decay.survival(elapsed_ns);
        (self.max_extra_ns as f64 * lost).round() as u64
    }
}

/// The ramp of [`StateCache`] at distance `d`: 1 up to `lo`, 0 from `hi`, linear between. The
/// calibration's fit (`twin_calibration::fit::state`) places `lo` and `hi` with this same
/// function.
pub fn ramp(d: f64, lo: f64, hi: f64) -> f64 {
    if d <= lo {
        1.0
    } else if d >= hi {
        0.0
    } else {
        (hi - d) / (hi - lo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_survives_until_the_delay_then_decays() {
        let d = StateDecay {
            after_ns: 5_000_000,
            lifetime_ns: 20_000_000,
        };
        assert_eq!(d.survival(0), 1.0);
        assert_eq!(d.survival(5_000_000), 1.0);
        assert!((d.survival(25_000_000) - (-1.0f64).exp()).abs() < 1e-12);
        assert!(d.survival(u64::MAX) < 1e-12);
        assert_eq!(survival(1.0, 0.0, f64::INFINITY), 1.0);
        assert_eq!(survival(1.0, 0.0, 0.0), 0.0);
        assert_eq!(survival(f64::NAN, 0.0, 1.0), 1.0);
    }

    #[test]
    fn aging_costs_what_the_resident_part_loses() {
        let a = StateAging {
            max_extra_ns: 1_000,
            decay: StateDecay {
                after_ns: 0,
                lifetime_ns: 10,
            },
        };
        assert_eq!(a.extra_ns(0), 0);
        assert_eq!(
            a.extra_ns(10),
            (1_000.0 * (1.0 - (-1.0f64).exp())).round() as u64
        );
        assert_eq!(a.extra_ns(u64::MAX), 1_000);
    }

    #[test]
    fn an_update_is_priced_between_the_two_rates() {
        let c = StateCache {
            state_weight: 1.0,
            resident_bytes: 1,
            evicted_bytes: 2,
            resident_efficiency: 0.8,
            evicted_efficiency: 0.2,
            decay: None,
        };
        assert_eq!(c.update_s(80, 1.0, 100.0), 1.0);
        assert_eq!(c.update_s(80, 0.0, 100.0), 4.0);
        assert_eq!(c.update_s(80, 0.5, 100.0), 2.5);
        // Out-of-range fractions and rates do not divide by zero or go negative.
        assert_eq!(c.update_s(80, 2.0, 100.0), 1.0);
        assert!(c.update_s(80, 0.5, 0.0).is_finite());
    }
}
