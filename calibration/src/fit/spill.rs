//! Where a memory-bound pass outgrows the caches: `t = a + min(b, C) / bw + max(0, b - C) /
//! bw_spill` over the memory-pass samples (`b` bytes moved). For a fixed knee `C` the model is
//! linear in `(a, 1/bw, 1/bw_spill)`, so it is fitted exactly by relative-error least squares
//! per candidate, and `C` by a grid over the measured sizes (the smallest residual wins), as
//! the GEMM curve's tile. Intervals: the two bandwidths map the intervals of their inverse
//! (monotone); the knee carries none (a grid point).

use super::{relative_least_squares, relative_ssr, Estimate, FitError, Quality};
use serde::Serialize;

/// One timed pass.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PassPoint {
    pub bytes: f64,
    pub time_ns: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SpillFit {
    /// Bytes of a pass beyond which it slows down (`C`).
    pub knee_bytes: u64,
    /// Bandwidth of the bytes up to the knee.
    pub bandwidth_bytes_per_s: Estimate,
    /// Bandwidth of the bytes beyond it.
    pub spill_bandwidth_bytes_per_s: Estimate,
    pub fixed_ns: Estimate,
    pub quality: Quality,
}

fn regressors(p: &PassPoint, knee: f64) -> Vec<f64> {
    vec![1.0, p.bytes.min(knee), (p.bytes - knee).max(0.0)]
}

/// Fits the knee model; `knees` are the candidate knees (bytes), each needing samples above
/// it and at two sizes at or below it.
pub fn fit(points: &[PassPoint], knees: &[u64]) -> Result<SpillFit, FitError> {
    let y: Vec<f64> = points.iter().map(|p| p.time_ns).collect();
    let mut best: Option<(f64, SpillFit)> = None;
    let mut last_err = None;
    for &knee in knees {
        let c = knee as f64;
        let below: std::collections::BTreeSet<u64> = points
            .iter()
            .filter(|p| p.bytes <= c)
            .map(|p| p.bytes as u64)
            .collect();
        if below.len() < 2 || !points.iter().any(|p| p.bytes > c) {
            continue;
        }
        let x: Vec<Vec<f64>> = points.iter().map(|p| regressors(p, c)).collect();
        let f = match relative_least_squares(&x, &y) {
            Ok(f) => f,
            Err(e) => {
                last_err = Some(e);
                continue;
            }
        };
        let (b1, b2) = (
            f.coef.get(1).copied().unwrap_or(f64::NAN),
            f.coef.get(2).copied().unwrap_or(f64::NAN),
        );
        if !(b1 > 0.0 && b2 > 0.0) {
            last_err = Some(FitError::Degenerate(format!(
                "time does not grow with bytes at knee {knee} ({b1:e}, {b2:e} ns/byte)"
            )));
            continue;
        }
        let predicted: Vec<f64> = x.iter().map(|r| f.predict(r)).collect();
        let ssr = relative_ssr(&y, &predicted);
        let fit = SpillFit {
            knee_bytes: knee,
            bandwidth_bytes_per_s: Estimate::per_second(b1, f.ci95(1)),
            spill_bandwidth_bytes_per_s: Estimate::per_second(b2, f.ci95(2)),
            fixed_ns: Estimate {
                value: f.coef.first().copied().unwrap_or(f64::NAN),
                ci95: f.ci95(0),
            },
            quality: Quality::of(&y, &predicted, f.r2),
        };
        if best.as_ref().is_none_or(|(s, _)| ssr < *s) {
            best = Some((ssr, fit));
        }
    }
    best.map(|(_, f)| f).ok_or_else(|| {
        last_err.unwrap_or(FitError::Degenerate(
            "no knee candidate with samples on both sides".into(),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::super::TestRng;
    use super::*;

    const MIB: f64 = 1048576.0;

    fn synthetic(rng: &mut TestRng, knee: f64, noise: f64) -> Vec<PassPoint> {
        let mut out = Vec::new();
        for &m in &[0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0] {
            let b = m * MIB;
            let t = 2_000.0 + b.min(knee) / 100.0 + (b - knee).max(0.0) / 30.0;
            for _ in 0..5 {
                out.push(PassPoint {
                    bytes: b,
                    time_ns: t * (1.0 + noise * rng.normal()),
                });
            }
        }
        out
    }

    fn knees() -> Vec<u64> {
        [1u64, 2, 4, 8, 16, 32].iter().map(|m| m << 20).collect()
    }

    #[test]
    fn recovers_the_knee_and_both_bandwidths() {
        let mut rng = TestRng::new(8);
        let f = fit(&synthetic(&mut rng, 8.0 * MIB, 0.01), &knees()).unwrap();
        assert_eq!(f.knee_bytes, 8 << 20);
        // 100 and 30 bytes per ns.
        assert!(
            (f.bandwidth_bytes_per_s.value / 100e9 - 1.0).abs() < 0.05,
            "{f:?}"
        );
        assert!(
            (f.spill_bandwidth_bytes_per_s.value / 30e9 - 1.0).abs() < 0.03,
            "{f:?}"
        );
        assert!(f.spill_bandwidth_bytes_per_s.covers(30e9) || f.quality.rms_relative_error < 0.02);
    }

    #[test]
    fn without_a_knee_both_bandwidths_agree() {
        let mut rng = TestRng::new(9);
        // Knee beyond every sample: one bandwidth throughout.
        let f = fit(&synthetic(&mut rng, 1e12, 0.01), &knees()).unwrap();
        let r = f.spill_bandwidth_bytes_per_s.value / f.bandwidth_bytes_per_s.value;
        assert!((r - 1.0).abs() < 0.1, "{f:?}");
    }

    #[test]
    fn no_usable_knee_is_an_error() {
        let pts = [PassPoint {
            bytes: 1e6,
            time_ns: 10.0,
        }];
        assert!(fit(&pts, &knees()).is_err());
    }
}
