//! The optimizer's update by how much of its state the last-level cache still holds
//! (`twin_sim::cost::StateCache`): a sample updates `S` bytes of state after `E` other bytes
//! were written. Model: `t = M (h / bw_resident + (1 - h) / bw_evicted)` for `M` bytes moved,
//! with `h` a ramp over the distance `D = E + w S`: `1` up to `lo`, `0` from `hi`, linear
//! between. `w` is how much each byte of the state counts against the cache beside the other
//! bytes: an update of 48 MiB ran at DRAM speed with nothing written between, one of 4 MiB at
//! cache speed after 44 MiB (docs/validation.md, session 16). For fixed `(w, lo, hi)` the
//! model is linear in the two inverse bandwidths, fitted by relative-error least squares; `(w,
//! lo, hi)` by a grid (the smallest residual wins). Intervals: the bandwidths map the
//! intervals of their inverses; `w`, `lo` and `hi` span the grid points an F-test at 95% does
//! not reject against the best, as the GEMM curve's tiles.

use super::{relative_least_squares, relative_ssr, Estimate, FitError, Quality};
use serde::Serialize;
use statrs::distribution::{ContinuousCDF, FisherSnedecor};
// The fraction resident at a distance: the cost model's own ramp, so fit and model agree.
use twin_sim::cost::ramp as resident;

/// One timed update.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct StatePoint {
    /// Other bytes written since the state was last touched.
    pub other_bytes: f64,
    /// Bytes of state the update touches.
    pub state_bytes: f64,
    /// Bytes the update moved (each state byte read and written).
    pub moved_bytes: f64,
    pub time_ns: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StateFit {
    /// What each state byte counts for in the distance (`w`).
    pub state_weight: Estimate,
    /// Distance up to which the state is all resident (`lo`).
    pub resident_bytes: Estimate,
    /// Distance from which none of it is (`hi`).
    pub evicted_bytes: Estimate,
    pub resident_bandwidth_bytes_per_s: Estimate,
    pub evicted_bandwidth_bytes_per_s: Estimate,
    pub quality: Quality,
}

struct Candidate {
    w: f64,
    lo: f64,
    hi: f64,
    ssr: f64,
    fit: StateFit,
}

/// Candidate weights of a state byte in the distance.
pub const WEIGHTS: [f64; 9] = [1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 3.0, 4.0];

/// Fits the ramp model; `grid` are the candidate sizes for `lo` and `hi` (bytes), `weights`
/// those for `w`. A candidate needs samples with the state all resident and samples with some
/// of it evicted.
pub fn fit(points: &[StatePoint], grid: &[u64], weights: &[f64]) -> Result<StateFit, FitError> {
    let y: Vec<f64> = points.iter().map(|p| p.time_ns).collect();
    let mut fits: Vec<Candidate> = Vec::new();
    let mut last_err = None;
    for &w in weights {
        let distance: Vec<f64> = points
            .iter()
            .map(|p| p.other_bytes + w * p.state_bytes)
            .collect();
        for (i, &lo) in grid.iter().enumerate() {
            for &hi in &grid[i + 1..] {
                let (lo, hi) = (lo as f64, hi as f64);
                if !distance.iter().any(|&d| d <= lo) || !distance.iter().any(|&d| d > lo) {
                    continue;
                }
                let x: Vec<Vec<f64>> = points
                    .iter()
                    .zip(&distance)
                    .map(|(p, &d)| {
                        let h = resident(d, lo, hi);
                        vec![p.moved_bytes * h, p.moved_bytes * (1.0 - h)]
                    })
                    .collect();
                let f = match relative_least_squares(&x, &y) {
                    Ok(f) => f,
                    Err(e) => {
                        last_err = Some(e);
                        continue;
                    }
                };
                let (a, b) = (
                    f.coef.first().copied().unwrap_or(f64::NAN),
                    f.coef.get(1).copied().unwrap_or(f64::NAN),
                );
                if !(a > 0.0 && b > 0.0) {
                    last_err = Some(FitError::Degenerate(format!(
                        "a rate is not positive with the ramp from {lo} to {hi} bytes"
                    )));
                    continue;
                }
                let predicted: Vec<f64> = x.iter().map(|r| f.predict(r)).collect();
                let ssr = relative_ssr(&y, &predicted);
                let point = |v: f64| Estimate {
                    value: v,
                    ci95: [v, v],
                };
                fits.push(Candidate {
                    w,
                    lo,
                    hi,
                    ssr,
                    fit: StateFit {
                        state_weight: point(w),
                        resident_bytes: point(lo),
                        evicted_bytes: point(hi),
                        resident_bandwidth_bytes_per_s: Estimate::per_second(a, f.ci95(0)),
                        evicted_bandwidth_bytes_per_s: Estimate::per_second(b, f.ci95(1)),
                        quality: Quality::of(&y, &predicted, f.r2),
                    },
                });
            }
        }
    }
    let best = fits
        .iter()
        .min_by(|a, b| a.ssr.total_cmp(&b.ssr))
        .ok_or_else(|| {
            last_err.unwrap_or(FitError::Degenerate(
                "no pair of sizes with samples on both sides".into(),
            ))
        })?;
    // Parameters: two rates, the two sizes and the weight.
    let dof = points.len() as f64 - 5.0;
    let mut out = best.fit.clone();
    if dof >= 1.0 {
        let f95 = FisherSnedecor::new(3.0, dof)
            .map_err(|e| FitError::Degenerate(format!("F distribution: {e}")))?
            .inverse_cdf(0.95);
        let limit = best.ssr * (1.0 + 3.0 * f95 / dof);
        let accepted: Vec<&Candidate> = fits.iter().filter(|c| c.ssr <= limit).collect();
        let span = |get: fn(&Candidate) -> f64| {
            let lo = accepted
                .iter()
                .map(|c| get(c))
                .fold(f64::INFINITY, f64::min);
            let hi = accepted
                .iter()
                .map(|c| get(c))
                .fold(f64::NEG_INFINITY, f64::max);
            [lo, hi]
        };
        out.state_weight.ci95 = span(|c| c.w);
        out.resident_bytes.ci95 = span(|c| c.lo);
        out.evicted_bytes.ci95 = span(|c| c.hi);
    }
    Ok(out)
}

/// Candidate sizes for [`fit`]: every 8 MiB up to the largest distance measured at the
/// largest weight.
pub fn grid(points: &[StatePoint]) -> Vec<u64> {
    const STEP: u64 = 8 << 20;
    let w = WEIGHTS.iter().copied().fold(1.0, f64::max);
    let max = points
        .iter()
        .map(|p| p.other_bytes + w * p.state_bytes)
        .fold(0.0f64, f64::max);
    let n = (max / STEP as f64).ceil() as u64;
    (1..=n.min(512)).map(|i| i * STEP).collect()
}

#[cfg(test)]
mod tests {
    use super::super::TestRng;
    use super::*;

    const MIB: f64 = 1048576.0;

    /// Samples of the ramp model with multiplicative noise, over the calibration's sweep.
    fn synthetic(rng: &mut TestRng, w: f64, lo: f64, hi: f64, noise: f64) -> Vec<StatePoint> {
        let (bw_r, bw_e) = (54e9, 23e9);
        let mut out = Vec::new();
        for &s in &[4.0, 16.0, 32.0] {
            for &e in &[0.0, 16.0, 32.0, 48.0, 64.0, 96.0, 128.0, 192.0, 256.0] {
                let moved = 2.0 * s * MIB;
                let h = resident((e + w * s) * MIB, lo, hi);
                let t = moved * (h / bw_r + (1.0 - h) / bw_e) * 1e9;
                for _ in 0..7 {
                    out.push(StatePoint {
                        other_bytes: e * MIB,
                        state_bytes: s * MIB,
                        moved_bytes: moved,
                        time_ns: t * (1.0 + noise * rng.normal()),
                    });
                }
            }
        }
        out
    }

    #[test]
    fn the_ramp_and_both_rates_are_recovered() {
        let mut rng = TestRng::new(11);
        let (lo, hi) = (48.0 * MIB, 128.0 * MIB);
        let pts = synthetic(&mut rng, 2.0, lo, hi, 0.03);
        let sixteen: Vec<u64> = (1..=16).map(|i| i * (16 << 20)).collect();
        let f = fit(&pts, &sixteen, &[1.0, 1.5, 2.0, 2.5]).unwrap();
        assert_eq!(f.state_weight.value, 2.0, "{f:?}");
        assert!(f.state_weight.covers(2.0));
        assert_eq!(f.resident_bytes.value, lo, "{f:?}");
        assert_eq!(f.evicted_bytes.value, hi, "{f:?}");
        assert!(f.resident_bytes.covers(lo) && f.evicted_bytes.covers(hi));
        let rel = |a: f64, b: f64| (a / b - 1.0).abs();
        assert!(
            rel(f.resident_bandwidth_bytes_per_s.value, 54e9) < 0.03,
            "{f:?}"
        );
        assert!(
            rel(f.evicted_bandwidth_bytes_per_s.value, 23e9) < 0.03,
            "{f:?}"
        );
        assert!(f.quality.rms_relative_error < 0.05);
    }

    #[test]
    fn the_rate_intervals_cover_the_truth_at_about_95_percent() {
        let mut rng = TestRng::new(5);
        let (lo, hi) = (48.0 * MIB, 128.0 * MIB);
        // A coarser grid than the calibration's keeps a hundred fits quick.
        let coarse: Vec<u64> = (1..=12).map(|i| i * (16 << 20)).collect();
        let (trials, mut covered) = (60, [0usize; 2]);
        for _ in 0..trials {
            let pts = synthetic(&mut rng, 1.5, lo, hi, 0.05);
            let f = fit(&pts, &coarse, &[1.0, 1.5, 2.0]).unwrap();
            covered[0] += usize::from(f.resident_bandwidth_bytes_per_s.covers(54e9));
            covered[1] += usize::from(f.evicted_bandwidth_bytes_per_s.covers(23e9));
        }
        for c in covered {
            assert!((51..=60).contains(&c), "covered {c} of {trials}");
        }
    }

    #[test]
    fn all_resident_samples_cannot_place_the_ramp() {
        let pts: Vec<StatePoint> = (0..10)
            .map(|i| StatePoint {
                other_bytes: 0.0,
                state_bytes: 4.0 * MIB,
                moved_bytes: 8.0 * MIB,
                time_ns: 150_000.0 + f64::from(i),
            })
            .collect();
        assert!(fit(&pts, &grid(&pts), &WEIGHTS).is_err());
    }
}
