//! The fits that turn microbenchmark samples into profile parameters, each with a 95%
//! confidence interval and its goodness of fit:
//! - [`alpha_beta`]: latency + bytes / bandwidth (collectives per algorithm and tier, p2p,
//!   memory passes, allocation, checkpoint writes), weighted least squares;
//! - [`gemm`]: the simulator's GEMM curve (rate, k_half, ramp, tile) by iteratively
//!   reweighted least squares per tile candidate and a grid over tiles;
//! - [`ratio`]: the compute slowdown under overlapping communication;
//! - [`state`]: the optimizer's update by how much of its state the last-level cache holds;
//! - [`constant`]: a cost that does not depend on size (the host backend's allocation, a
//!   reuse of memory it already holds).
//!
//! Timing noise is roughly proportional to the time, so every fit minimises relative error
//! (weights `1 / predicted^2`, recomputed from the fit a few times).

pub mod alpha_beta;
pub mod gemm;
pub mod interrupt;
pub mod linear;
pub mod ratio;
pub mod spill;
pub mod state;

use serde::Serialize;

/// Why a fit could not be made.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FitError {
    #[error("{have} samples are too few for this fit (need at least {need})")]
    TooFewSamples { have: usize, need: usize },
    #[error("cannot fit: {0}")]
    Degenerate(String),
}

/// A fitted number with its 95% confidence interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Estimate {
    pub value: f64,
    pub ci95: [f64; 2],
}

impl Estimate {
    /// The estimate as a profile parameter fitted by a calibration, with its interval where
    /// both ends are finite.
    pub fn fitted_param(self, reference: String) -> twin_sim::profile::Param {
        let finite = self.ci95[0].is_finite() && self.ci95[1].is_finite();
        twin_sim::profile::Param {
            value: self.value,
            source: twin_sim::profile::Source::Fitted,
            reference,
            ci95: finite.then_some(self.ci95),
        }
    }

    /// Whether the interval contains `x`.
    pub fn covers(&self, x: f64) -> bool {
        self.ci95[0] <= x && x <= self.ci95[1]
    }
    /// The same estimate restricted to `[lo, hi]` (a physical range: a latency cannot be
    /// negative); the interval is clipped too, so it still contains the value.
    pub fn clamp(self, lo: f64, hi: f64) -> Estimate {
        let value = self.value.clamp(lo, hi);
        Estimate {
            value,
            ci95: [
                self.ci95[0].clamp(lo, hi).min(value),
                self.ci95[1].clamp(lo, hi).max(value),
            ],
        }
    }
    /// A rate per second from a fitted time per unit in ns and its interval, the interval
    /// mapped through `1e9 / x` (monotone); an interval reaching zero leaves the rate
    /// unbounded above.
    pub fn per_second(ns_per_unit: f64, ci95: [f64; 2]) -> Estimate {
        Estimate {
            value: 1e9 / ns_per_unit,
            ci95: [
                1e9 / ci95[1],
                if ci95[0] > 0.0 {
                    1e9 / ci95[0]
                } else {
                    f64::INFINITY
                },
            ],
        }
    }
    /// `f(value)` with the interval mapped through `f`, for a monotone `f`.
    pub fn map_monotone(self, f: impl Fn(f64) -> f64) -> Estimate {
        let (a, b) = (f(self.ci95[0]), f(self.ci95[1]));
        Estimate {
            value: f(self.value),
            ci95: [a.min(b), a.max(b)],
        }
    }
}

/// How well a fitted model reproduces the samples it was fitted to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Quality {
    pub samples: usize,
    pub r2: f64,
    pub rms_relative_error: f64,
    pub max_relative_error: f64,
}

impl Quality {
    fn of(measured: &[f64], predicted: &[f64], r2: f64) -> Quality {
        let rel: Vec<f64> = measured
            .iter()
            .zip(predicted)
            .map(|(m, p)| if *m != 0.0 { (p - m) / m } else { 0.0 })
            .collect();
        let n = rel.len().max(1) as f64;
        Quality {
            samples: rel.len(),
            r2,
            rms_relative_error: (rel.iter().map(|r| r * r).sum::<f64>() / n).sqrt(),
            max_relative_error: rel.iter().fold(0.0f64, |a, r| a.max(r.abs())),
        }
    }
}

/// A constant fitted to samples, with its quality.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Constant {
    pub value: Estimate,
    pub quality: Quality,
}

/// The constant that best fits `samples` in relative error (as every fit here), with its 95%
/// interval (Student t).
pub fn constant(samples: &[f64]) -> Result<Constant, FitError> {
    let x: Vec<Vec<f64>> = samples.iter().map(|_| vec![1.0]).collect();
    let f = relative_least_squares(&x, samples)?;
    let value = f.coef.first().copied().unwrap_or(f64::NAN);
    if !value.is_finite() {
        return Err(FitError::Degenerate(
            "the samples have no finite mean".into(),
        ));
    }
    let predicted = vec![value; samples.len()];
    Ok(Constant {
        value: Estimate {
            value,
            ci95: f.ci95(0),
        },
        quality: Quality::of(samples, &predicted, f.r2),
    })
}

/// Sum of squared relative residuals of `predicted` against `measured`: what the grid fits
/// (GEMM tiles, the spill knee, the state ramp) compare candidates by.
fn relative_ssr(measured: &[f64], predicted: &[f64]) -> f64 {
    measured
        .iter()
        .zip(predicted)
        .map(|(m, p)| ((p - m) / m).powi(2))
        .sum()
}

/// Iterations of reweighting (weights from the previous fit's predictions).
const REWEIGHT_ROUNDS: usize = 3;

/// Relative-error least squares: weights `1/y^2` first, then `1/predicted^2`.
fn relative_least_squares(x: &[Vec<f64>], y: &[f64]) -> Result<linear::LinearFit, FitError> {
    let mut w: Vec<f64> = y.iter().map(|v| 1.0 / (v * v).max(1e-30)).collect();
    let mut fit = linear::weighted_least_squares(x, y, &w)?;
    for _ in 0..REWEIGHT_ROUNDS {
        w = x
            .iter()
            .zip(y)
            .map(|(row, yi)| {
                let p = fit.predict(row);
                let p = if p > 0.0 { p } else { *yi };
                1.0 / (p * p).max(1e-30)
            })
            .collect();
        fit = linear::weighted_least_squares(x, y, &w)?;
    }
    Ok(fit)
}

#[cfg(test)]
pub(crate) use crate::sample::SplitMix as TestRng;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_constant_is_recovered_and_its_interval_covers_it_at_about_95_percent() {
        let mut rng = TestRng::new(7);
        let truth = 420.0;
        let trials = 400;
        let mut covered = 0;
        for _ in 0..trials {
            // Multiplicative noise of 10%, as timing noise is.
            let samples: Vec<f64> = (0..40)
                .map(|_| truth * (1.0 + 0.1 * rng.normal()))
                .collect();
            let c = constant(&samples).unwrap();
            assert!((c.value.value / truth - 1.0).abs() < 0.1, "{c:?}");
            assert_eq!(c.quality.samples, 40);
            covered += usize::from(c.value.covers(truth));
        }
        let rate = covered as f64 / f64::from(trials);
        assert!((0.90..=0.99).contains(&rate), "coverage {rate}");
        assert!(constant(&[]).is_err());
    }
}
