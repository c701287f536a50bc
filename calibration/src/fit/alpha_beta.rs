//! The alpha-beta model `time = alpha * steps + bytes / bandwidth`, fitted by relative-error
//! least squares. `steps` is the number of latency-bound steps of the algorithm (a ring
//! all-reduce over n ranks: 2(n-1)); `bytes` the bytes that cross one rank's link (a ring
//! all-reduce: 2(n-1)/n of the buffer), so one fit serves every collective and p2p of a tier
//! and its bandwidth is the simulator's effective per-direction bandwidth. A fixed-cost +
//! streaming model (memory passes, allocation, file writes) is the same fit with `steps = 1`.

use super::{relative_least_squares, Estimate, FitError, Quality};
use serde::Serialize;

/// One timed sample.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Point {
    pub steps: f64,
    pub bytes: f64,
    pub time_ns: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct AlphaBeta {
    /// Per-step latency (alpha), nanoseconds.
    pub latency_ns: Estimate,
    /// Effective bandwidth (1 / beta).
    pub bandwidth_bytes_per_s: Estimate,
    pub quality: Quality,
}

impl AlphaBeta {
    /// Modelled time of one sample, ns.
    pub fn predict_ns(&self, steps: f64, bytes: f64) -> f64 {
        self.latency_ns.value * steps + bytes / self.bandwidth_bytes_per_s.value * 1e9
    }
}

/// Fits [`AlphaBeta`] to `points`; needs at least two different byte counts.
pub fn fit(points: &[Point]) -> Result<AlphaBeta, FitError> {
    let x: Vec<Vec<f64>> = points.iter().map(|p| vec![p.steps, p.bytes]).collect();
    let y: Vec<f64> = points.iter().map(|p| p.time_ns).collect();
    let f = relative_least_squares(&x, &y)?;
    let beta_ns_per_byte = f.coef.get(1).copied().unwrap_or(f64::NAN);
    if beta_ns_per_byte.is_nan() || beta_ns_per_byte <= 0.0 {
        return Err(FitError::Degenerate(format!(
            "time does not grow with bytes (fitted {beta_ns_per_byte:e} ns/byte)"
        )));
    }
    let bandwidth = Estimate::per_second(beta_ns_per_byte, f.ci95(1));
    let latency = Estimate {
        value: f.coef.first().copied().unwrap_or(f64::NAN),
        ci95: f.ci95(0),
    };
    let predicted: Vec<f64> = x.iter().map(|r| f.predict(r)).collect();
    Ok(AlphaBeta {
        latency_ns: latency,
        bandwidth_bytes_per_s: bandwidth,
        quality: Quality::of(&y, &predicted, f.r2),
    })
}

/// [`fit`], falling back to the bandwidth-only model `time = bytes / bandwidth` (latency 0)
/// when the samples are too noisy to separate a fixed cost (time does not grow with bytes
/// at the sizes measured); the note says so.
pub fn fit_or_rate(points: &[Point]) -> Result<(AlphaBeta, Option<String>), FitError> {
    match fit(points) {
        Ok(f) => Ok((f, None)),
        Err(FitError::Degenerate(why)) => {
            let x: Vec<Vec<f64>> = points.iter().map(|p| vec![p.bytes]).collect();
            let y: Vec<f64> = points.iter().map(|p| p.time_ns).collect();
            let f = relative_least_squares(&x, &y)?;
            let beta = f.coef.first().copied().unwrap_or(f64::NAN);
            if beta.is_nan() || beta <= 0.0 {
                return Err(FitError::Degenerate(why));
            }
            let predicted: Vec<f64> = x.iter().map(|r| f.predict(r)).collect();
            Ok((
                AlphaBeta {
                    latency_ns: Estimate {
                        value: 0.0,
                        ci95: [0.0, 0.0],
                    },
                    bandwidth_bytes_per_s: Estimate::per_second(beta, f.ci95(0)),
                    quality: Quality::of(&y, &predicted, f.r2),
                },
                Some(format!(
                    "{why}; fitted bytes / bandwidth without a fixed cost instead"
                )),
            ))
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::super::TestRng;
    use super::*;

    /// Ring all-reduce samples over 2..=4 ranks and 4 KiB..64 MiB with multiplicative noise.
    fn synthetic(rng: &mut TestRng, alpha_ns: f64, bw: f64, noise: f64) -> Vec<Point> {
        let mut out = Vec::new();
        for n in 2..=4u32 {
            let nf = f64::from(n);
            for e in [12, 14, 16, 18, 20, 22, 24, 26] {
                let size = f64::from(1u32 << e);
                for _ in 0..3 {
                    let steps = 2.0 * (nf - 1.0);
                    let bytes = 2.0 * (nf - 1.0) / nf * size;
                    let t = (alpha_ns * steps + bytes / bw * 1e9) * (1.0 + noise * rng.normal());
                    out.push(Point {
                        steps,
                        bytes,
                        time_ns: t,
                    });
                }
            }
        }
        out
    }

    #[test]
    fn recovers_known_parameters() {
        let mut rng = TestRng::new(7);
        let f = fit(&synthetic(&mut rng, 25_000.0, 1.5e9, 0.03)).unwrap();
        assert!((f.latency_ns.value / 25_000.0 - 1.0).abs() < 0.05, "{f:?}");
        assert!(
            (f.bandwidth_bytes_per_s.value / 1.5e9 - 1.0).abs() < 0.02,
            "{f:?}"
        );
        assert!(f.quality.r2 > 0.99);
        assert!(f.quality.rms_relative_error < 0.05);
    }

    #[test]
    fn intervals_cover_the_truth_at_about_95_percent() {
        let mut rng = TestRng::new(2026);
        let (mut lat, mut bw) = (0, 0);
        let datasets = 200;
        for _ in 0..datasets {
            let f = fit(&synthetic(&mut rng, 25_000.0, 1.5e9, 0.05)).unwrap();
            lat += usize::from(f.latency_ns.covers(25_000.0));
            bw += usize::from(f.bandwidth_bytes_per_s.covers(1.5e9));
        }
        for (what, hits) in [("latency", lat), ("bandwidth", bw)] {
            let rate = hits as f64 / f64::from(datasets);
            assert!((0.90..=0.99).contains(&rate), "{what} coverage {rate}");
        }
    }

    #[test]
    fn noisy_fixed_cost_falls_back_to_bandwidth_only() {
        // Times shrink with bytes (noise): no alpha-beta, but a rate through the origin.
        let pts: Vec<Point> = [(1e6, 3e6), (2e6, 2.9e6), (4e6, 2.8e6)]
            .iter()
            .map(|&(bytes, time_ns)| Point {
                steps: 1.0,
                bytes,
                time_ns,
            })
            .collect();
        assert!(fit(&pts).is_err());
        let (f, note) = fit_or_rate(&pts).unwrap();
        assert!(note.unwrap().contains("without a fixed cost"));
        assert_eq!(f.latency_ns.value, 0.0);
        assert!(f.bandwidth_bytes_per_s.value > 0.0);
    }

    #[test]
    fn flat_times_are_an_error() {
        let pts: Vec<Point> = (1..6)
            .map(|i| Point {
                steps: 1.0,
                bytes: f64::from(i) * 1e6,
                time_ns: 1e6 - f64::from(i),
            })
            .collect();
        assert!(fit(&pts).is_err());
    }
}
