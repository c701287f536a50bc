//! Repeated timing with a warm-up and one stated outlier rule, so every benchmark treats its
//! samples the same way: run `warmup` untimed calls, time `repeats` calls, then drop every
//! sample above `median + 3 * 1.4826 * MAD` (MAD: median absolute deviation; 1.4826 * MAD
//! estimates the standard deviation of normal noise). Only slow outliers are dropped: timing
//! noise on a shared machine (preemption, page faults) only ever adds time. How many samples
//! were dropped is kept and reported.

use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Scale from MAD to the standard deviation of a normal distribution.
pub const MAD_TO_SIGMA: f64 = 1.4826;
/// Samples more than this many (MAD-estimated) standard deviations above the median are
/// outliers.
pub const OUTLIER_SIGMAS: f64 = 3.0;

/// The timed samples of one measurement after the outlier rule.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Kept {
    /// Samples kept, in measurement order (nanoseconds, or whatever unit was filtered).
    pub kept: Vec<f64>,
    /// Samples dropped by the outlier rule, in measurement order.
    pub dropped: Vec<f64>,
}

/// Median of `xs` (the mean of the two middle values for an even count); `None` when empty
/// or when a value is NaN.
pub use twin_sim::stats::median;

/// Applies the outlier rule of the module doc.
pub fn reject_outliers(xs: &[f64]) -> Kept {
    let Some(med) = median(xs) else {
        return Kept {
            kept: xs.to_vec(),
            dropped: Vec::new(),
        };
    };
    let deviations: Vec<f64> = xs.iter().map(|x| (x - med).abs()).collect();
    let mad = median(&deviations).unwrap_or(0.0);
    let limit = med + OUTLIER_SIGMAS * MAD_TO_SIGMA * mad;
    let (kept, dropped) = xs.iter().partition(|&&x| x <= limit);
    Kept { kept, dropped }
}

/// How many times to run a measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repeats {
    pub warmup: u32,
    pub timed: u32,
}

/// Times `f` (after the warm-up) and applies the outlier rule; samples in nanoseconds.
pub fn time_ns(r: Repeats, mut f: impl FnMut()) -> Kept {
    for _ in 0..r.warmup {
        f();
    }
    let mut samples = Vec::with_capacity(r.timed as usize);
    for _ in 0..r.timed.max(1) {
        let t = Instant::now();
        f();
        samples.push(t.elapsed().as_nanos() as f64);
    }
    reject_outliers(&samples)
}

/// [`time_ns`] for a measurement that times itself (returns its own duration in ns, e.g. the
/// slowest rank of a collective) and may fail.
pub fn measured_ns<E>(r: Repeats, mut f: impl FnMut() -> Result<f64, E>) -> Result<Kept, E> {
    for _ in 0..r.warmup {
        f()?;
    }
    let mut samples = Vec::with_capacity(r.timed as usize);
    for _ in 0..r.timed.max(1) {
        samples.push(f()?);
    }
    Ok(reject_outliers(&samples))
}

/// Seeded pseudo-random numbers (SplitMix64; Box-Muller normals): benchmark order shuffles
/// and synthetic test data. Same seed, same sequence.
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> SplitMix {
        SplitMix(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in (0, 1).
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    /// Standard normal.
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
    /// Fisher-Yates shuffle.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = (self.next_u64() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn slow_outliers_are_dropped_and_counted() {
        // Median 100, deviations {0,1,1,2,2,900,...}: MAD = 2, limit = 100 + 3*1.4826*2 ~ 108.9.
        let xs = [100.0, 101.0, 99.0, 102.0, 98.0, 1000.0, 100.0, 108.0, 110.0];
        let k = reject_outliers(&xs);
        assert_eq!(k.dropped, vec![1000.0, 110.0]);
        assert_eq!(k.kept.len(), 7);
        assert!(k.kept.contains(&108.0));
    }

    #[test]
    fn fast_samples_are_never_dropped() {
        let xs = [100.0, 100.0, 100.0, 100.0, 1.0];
        let k = reject_outliers(&xs);
        assert!(k.dropped.is_empty());
        assert_eq!(k.kept.len(), 5);
    }

    #[test]
    fn identical_samples_are_all_kept() {
        let k = reject_outliers(&[5.0; 6]);
        assert_eq!(k.kept.len(), 6);
        assert!(k.dropped.is_empty());
    }

    #[test]
    fn timing_runs_warmup_plus_timed() {
        let mut calls = 0;
        let k = time_ns(
            Repeats {
                warmup: 2,
                timed: 5,
            },
            || calls += 1,
        );
        assert_eq!(calls, 7);
        assert_eq!(k.kept.len() + k.dropped.len(), 5);
    }
}
