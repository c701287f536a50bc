//! Interruptions of compute by the machine itself. A shared host (a VM above all) takes the
//! core away from a running op now and then, or slows it: on the development VM a back-to-back
//! GEMM loop lost 3-12% of its busy time to hundreds of interruptions a second of ~60-80 µs
//! each, counting calls over 1.2x the median; counted by the calibration's outlier rule, 3.1-3.2%
//! of busy time in about 5,000 a second of ~6 µs (`calibration::bench::interrupt`). One rank loses
//! just that; ranks that meet at transfers (a pipeline, a tensor-parallel group) wait for each
//! other's interruptions too, so the median step grows with the ranks that must meet
//! (docs/journal/2026-11-validation-history.md, 2026-11-23). With a profile's `[host]
//! interruptions_per_s` and `interruption_mean_ns` and a seed, the engine lengthens each compute op
//! by interruptions drawn as a compound Poisson process: their count over the op's solo time is
//! Poisson with mean `rate x time`, each interruption exponential with the profile's mean. The
//! draws come from one seeded generator in event order, so a seed gives the same step every time.

use crate::profile::Rng;

/// Interruption rate and length, from a profile.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Interruptions {
    /// Interruptions per nanosecond of busy time.
    pub rate_per_ns: f64,
    /// Mean length of one interruption.
    pub mean_ns: f64,
}

/// The seeded draws of one run.
pub(crate) struct Jitter {
    rng: Rng,
    model: Interruptions,
}

/// At most this many interruptions are drawn for one op (a bound on the loop; the mean count
/// of a host op is below one).
const MAX_PER_OP: u32 = 10_000;

impl Jitter {
    pub fn new(seed: u64, model: Interruptions) -> Jitter {
        Jitter {
            rng: Rng::new(seed ^ 0x6A09_E667_F3BC_C909),
            model,
        }
    }

    fn uniform(&mut self) -> f64 {
        self.rng.open01()
    }

    /// The interruptions of an op of `solo_ns`: their total length.
    pub fn delay_ns(&mut self, solo_ns: u64) -> u64 {
        let mean_count = self.model.rate_per_ns * solo_ns as f64;
        // Also catches NaN: only a positive, finite rate and length draw anything.
        let positive = |x: f64| x.is_finite() && x > 0.0;
        if !positive(mean_count) || !positive(self.model.mean_ns) {
            return 0;
        }
        // Poisson by inversion (the mean is small: a product of uniforms against e^-mean).
        let limit = (-mean_count).exp();
        let mut p = self.uniform();
        let mut count = 0u32;
        while p > limit && count < MAX_PER_OP {
            count += 1;
            p *= self.uniform();
        }
        let total: f64 = (0..count)
            .map(|_| -self.model.mean_ns * self.uniform().ln())
            .sum();
        total.round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_match_the_compound_poisson_mean_and_repeat_per_seed() {
        let model = Interruptions {
            rate_per_ns: 500.0 / 1e9,
            mean_ns: 70_000.0,
        };
        let mut j = Jitter::new(7, model);
        let n = 200_000u64;
        let solo = 400_000u64;
        let total: u64 = (0..n).map(|_| j.delay_ns(solo)).sum();
        // Expected delay per op: rate x solo x mean = 0.2 x 70 us = 14 us.
        let mean = total as f64 / n as f64;
        assert!((mean - 14_000.0).abs() < 14_000.0 * 0.02, "{mean}");
        // Same seed, same draws; another seed, others.
        let a: Vec<u64> = (0..50)
            .map(|_| Jitter::new(3, model).delay_ns(solo))
            .collect();
        assert!(a.iter().all(|&x| x == a[0]));
        let mut x = Jitter::new(3, model);
        let mut y = Jitter::new(4, model);
        let xs: Vec<u64> = (0..100).map(|_| x.delay_ns(solo)).collect();
        let ys: Vec<u64> = (0..100).map(|_| y.delay_ns(solo)).collect();
        assert_ne!(xs, ys);
    }

    #[test]
    fn no_rate_or_no_time_means_no_delay() {
        let mut j = Jitter::new(
            1,
            Interruptions {
                rate_per_ns: 0.0,
                mean_ns: 70_000.0,
            },
        );
        assert_eq!(j.delay_ns(1_000_000), 0);
        let mut j = Jitter::new(
            1,
            Interruptions {
                rate_per_ns: 1e-6,
                mean_ns: 70_000.0,
            },
        );
        assert_eq!(j.delay_ns(0), 0);
    }
}
