//! The simulator's GEMM curve (sim/src/cost/gemm.rs) fitted to timed GEMM calls:
//! `t = padded_flops / (rate * k / (k + k_half)) + ramp`, with `padded_flops` the FLOPs of m
//! and n rounded up to whole `tile_m x tile_n` tiles and `rate = peak * max_efficiency`.
//! Multiplying out, `t = a * F + b * F / k + c` with `a = 1/rate`, `b = k_half/rate`,
//! `c = ramp`: for a fixed tile the model is linear in `(a, b, c)`, so the nonlinear least
//! squares problem is solved exactly by relative-error least squares per tile candidate,
//! and the tile by a grid over candidates (the smallest residual wins). Intervals: `rate` maps
//! the interval of `a` (monotone); `k_half` is propagated by the delta method from the
//! linearised covariance of `(a, b)`; the tile's interval is every candidate an F-test does not
//! reject against the best (`SSR <= SSR_min * (1 + 2 F(0.95; 2, dof) / dof)`).
//! The roofline memory bound of the simulator's curve is not fitted: calibration GEMMs are
//! compute bound on every shape it times (k >= 32).
//!
//! [`Operands::Loaded`] adds what a CPU sgemm pays for its operands, in three more terms:
//! `p * (m*k + k*n) * 4` on every product (it packs A and B before its kernel runs, cached or
//! not), and on a call whose operands are out of the private cache (`GemmPoint::cold`)
//! `e + d * (m*k + k*n) * 4`, a fixed cost and the load from beyond the cache. A curve fitted
//! to evicted calls only, with one `d` for both packing and loading, prices the GEMMs of an op
//! whose operands are cached at the compute term alone, 15-35% under what they ran back to back
//! (docs/journal/2026-11-validation-history.md, 2026-11-24). Telling `p` from `d` and `e` needs
//! both kinds of call: the host times each shape after an eviction and back to back. The model
//! stays linear, so it is fitted the same way; the intervals of the rates map those of `p` and `d`.

use super::{relative_least_squares, Estimate, FitError, Quality};
use serde::Serialize;
use statrs::distribution::{ContinuousCDF, FisherSnedecor};

/// One timed call of `batch` products of `m x n x k` (a strided-batched call when `batch` >
/// 1): the ramp is paid once, the FLOPs `batch` times.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct GemmPoint {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub batch: u64,
    pub time_ns: f64,
    /// The call's operands were out of the private cache when it started (evicted first, or
    /// too large to stay); only [`Operands::Loaded`] reads it.
    pub cold: bool,
}

/// Whether the curve has the operand terms (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operands {
    /// Three terms: FLOPs, short-k, ramp (GPUs).
    Free,
    /// Plus packing A and B (f32) on every product, and a fixed cost and loading them on a
    /// cold call (the host).
    Loaded,
}

/// Bytes of the A and B operands of one `m x n x k` product in f32, what the host's sgemm
/// reads (and packs) per call: the simulator's own count, which prices them.
pub fn operand_bytes(m: u64, n: u64, k: u64) -> f64 {
    twin_sim::schedule::Gemm::single(m, n, k, 1).operand_bytes(4) as f64
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GemmFit {
    /// `peak * max_efficiency`: what a large, well-shaped GEMM sustains.
    pub rate_flops_per_s: Estimate,
    pub k_half: Estimate,
    pub ramp_ns: Estimate,
    pub tile_m: u64,
    pub tile_n: u64,
    /// Smallest and largest tile side not rejected by the F-test.
    pub tile_m_ci95: [u64; 2],
    pub tile_n_ci95: [u64; 2],
    /// Rate at which a cold call loads A and B beyond packing them ([`Operands::Loaded`];
    /// `None` with [`Operands::Free`]).
    pub operand_bytes_per_s: Option<Estimate>,
    /// Rate at which every product packs A and B ([`Operands::Loaded`]).
    pub pack_bytes_per_s: Option<Estimate>,
    /// Fixed cost of a cold call beyond `ramp_ns` ([`Operands::Loaded`]).
    pub cold_ramp_ns: Option<Estimate>,
    pub quality: Quality,
}

impl GemmFit {
    /// Nanoseconds the fitted curve gives one call of `m x n x k` (one product, no operand
    /// terms): the padded FLOPs at the rate, slowed by the short-k term, plus the ramp.
    pub fn call_ns(&self, m: u64, n: u64, k: u64) -> f64 {
        let f = padded_flops(m, n, k, self.tile_m, self.tile_n);
        let per_flop_ns = 1e9 / self.rate_flops_per_s.value;
        f * per_flop_ns * (1.0 + self.k_half.value / k.max(1) as f64) + self.ramp_ns.value
    }
}

/// FLOPs of `m x n x k` with m and n rounded up to whole tiles.
pub fn padded_flops(m: u64, n: u64, k: u64, tile_m: u64, tile_n: u64) -> f64 {
    let up = |v: u64, t: u64| v.div_ceil(t.max(1)).saturating_mul(t.max(1));
    2.0 * up(m, tile_m) as f64 * up(n, tile_n) as f64 * k as f64
}

fn regressors(p: &GemmPoint, tile_m: u64, tile_n: u64, operands: Operands) -> Vec<f64> {
    let products = p.batch.max(1) as f64;
    let f = padded_flops(p.m, p.n, p.k, tile_m, tile_n) * products;
    let mut r = vec![f, f / p.k.max(1) as f64, 1.0];
    if operands == Operands::Loaded {
        let bytes = operand_bytes(p.m, p.n, p.k);
        // Only a call's first product finds its operands cold.
        let cold = if p.cold { 1.0 } else { 0.0 };
        r.extend([bytes * products, cold, cold * bytes]);
    }
    r
}

struct TileFit {
    fit: GemmFit,
    ssr: f64,
    dof: usize,
}

fn fit_tile(
    points: &[GemmPoint],
    tile_m: u64,
    tile_n: u64,
    operands: Operands,
) -> Result<TileFit, FitError> {
    if points.iter().any(|p| p.m == 0 || p.n == 0 || p.k == 0) {
        return Err(FitError::Degenerate(
            "a GEMM sample has a zero dimension".into(),
        ));
    }
    if operands == Operands::Loaded
        && !(points.iter().any(|p| p.cold) && points.iter().any(|p| !p.cold))
    {
        return Err(FitError::Degenerate(
            "the operand terms need calls with cached and with evicted operands".into(),
        ));
    }
    let x: Vec<Vec<f64>> = points
        .iter()
        .map(|p| regressors(p, tile_m, tile_n, operands))
        .collect();
    let y: Vec<f64> = points.iter().map(|p| p.time_ns).collect();
    let f = relative_least_squares(&x, &y)?;
    let (a, b) = (
        f.coef.first().copied().unwrap_or(f64::NAN),
        f.coef.get(1).copied().unwrap_or(f64::NAN),
    );
    if a.is_nan() || a <= 0.0 {
        return Err(FitError::Degenerate(format!(
            "GEMM time does not grow with FLOPs (fitted {a:e} ns/FLOP)"
        )));
    }
    let rate = Estimate::per_second(a, f.ci95(0));
    let kh = b / a;
    let kh_se = f.var_of(&[-b / (a * a), 1.0 / a, 0.0]).sqrt();
    let k_half = Estimate {
        value: kh,
        ci95: [kh - f.t95 * kh_se, kh + f.t95 * kh_se],
    };
    let ramp = Estimate {
        value: f.coef.get(2).copied().unwrap_or(f64::NAN),
        ci95: f.ci95(2),
    };
    let (operand_bytes_per_s, pack_bytes_per_s, cold_ramp_ns) = match operands {
        Operands::Free => (None, None, None),
        Operands::Loaded => {
            let rate_of = |i: usize, what: &str| {
                let d = f.coef.get(i).copied().unwrap_or(f64::NAN);
                if d.is_nan() || d <= 0.0 {
                    return Err(FitError::Degenerate(format!(
                        "GEMM time does not grow with {what} (fitted {d:e} ns/byte)"
                    )));
                }
                Ok(Estimate::per_second(d, f.ci95(i)))
            };
            let pack = rate_of(3, "operand bytes on every call")?;
            let load = rate_of(5, "operand bytes on a cold call")?;
            let cold = Estimate {
                value: f.coef.get(4).copied().unwrap_or(f64::NAN),
                ci95: f.ci95(4),
            };
            (Some(load), Some(pack), Some(cold))
        }
    };
    // Relative residuals: the quantity minimised, and the F-test's scale.
    let predicted: Vec<f64> = x.iter().map(|r| f.predict(r)).collect();
    let ssr = super::relative_ssr(&y, &predicted);
    Ok(TileFit {
        fit: GemmFit {
            rate_flops_per_s: rate,
            k_half,
            ramp_ns: ramp,
            tile_m,
            tile_n,
            tile_m_ci95: [tile_m, tile_m],
            tile_n_ci95: [tile_n, tile_n],
            operand_bytes_per_s,
            pack_bytes_per_s,
            cold_ramp_ns,
            quality: Quality::of(&y, &predicted, f.r2),
        },
        ssr,
        dof: f.dof,
    })
}

/// Fits the curve for every `(tile_m, tile_n)` in `tiles x tiles` and keeps the best.
pub fn fit(points: &[GemmPoint], tiles: &[u64], operands: Operands) -> Result<GemmFit, FitError> {
    let mut fits = Vec::new();
    let mut last_err = None;
    for &tm in tiles {
        for &tn in tiles {
            match fit_tile(points, tm, tn, operands) {
                Ok(f) => fits.push(f),
                Err(e) => last_err = Some(e),
            }
        }
    }
    let best = fits
        .iter()
        .min_by(|a, b| a.ssr.total_cmp(&b.ssr))
        .ok_or_else(|| last_err.unwrap_or(FitError::Degenerate("no tile candidates".into())))?;
    let dof = best.dof.max(1) as f64;
    let f95 = FisherSnedecor::new(2.0, dof)
        .map_err(|e| FitError::Degenerate(format!("F distribution: {e}")))?
        .inverse_cdf(0.95);
    let limit = best.ssr * (1.0 + 2.0 * f95 / dof);
    let accepted: Vec<&TileFit> = fits.iter().filter(|f| f.ssr <= limit).collect();
    let span = |get: fn(&GemmFit) -> u64| {
        let lo = accepted.iter().map(|f| get(&f.fit)).min().unwrap_or(0);
        let hi = accepted.iter().map(|f| get(&f.fit)).max().unwrap_or(0);
        [lo, hi]
    };
    let mut out = best.fit.clone();
    out.tile_m_ci95 = span(|f| f.tile_m);
    out.tile_n_ci95 = span(|f| f.tile_n);
    Ok(out)
}

/// Fits the curve with the tile fixed (what the coverage tests check).
pub fn fit_with_tile(
    points: &[GemmPoint],
    tile_m: u64,
    tile_n: u64,
    operands: Operands,
) -> Result<GemmFit, FitError> {
    fit_tile(points, tile_m, tile_n, operands).map(|f| f.fit)
}

#[cfg(test)]
mod tests {
    use super::super::TestRng;
    use super::*;

    const RATE: f64 = 60e9;
    const K_HALF: f64 = 48.0;
    const RAMP_NS: f64 = 3_000.0;

    fn truth_ns(m: u64, n: u64, k: u64, tile: u64) -> f64 {
        let kf = k as f64;
        padded_flops(m, n, k, tile, tile) / (RATE * kf / (kf + K_HALF)) * 1e9 + RAMP_NS
    }

    fn synthetic(rng: &mut TestRng, tile: u64, noise: f64) -> Vec<GemmPoint> {
        let mut out = Vec::new();
        for &m in &[24u64, 64, 100, 128, 200] {
            for &n in &[32u64, 72, 128, 250] {
                for &k in &[16u64, 32, 64, 128, 256, 512] {
                    // Two calls of each shape: one with its operands cached, one evicted
                    // (the three-term curve reads no difference).
                    for cold in [false, true] {
                        let t = truth_ns(m, n, k, tile) * (1.0 + noise * rng.normal());
                        out.push(GemmPoint {
                            m,
                            n,
                            k,
                            batch: 1,
                            time_ns: t,
                            cold,
                        });
                    }
                }
            }
        }
        out
    }

    #[test]
    fn recovers_rate_k_half_ramp_and_tile() {
        let mut rng = TestRng::new(11);
        let pts = synthetic(&mut rng, 16, 0.02);
        let f = fit(&pts, &[1, 4, 8, 16, 32], Operands::Free).unwrap();
        assert_eq!((f.tile_m, f.tile_n), (16, 16), "{f:?}");
        assert!(f.tile_m_ci95[0] <= 16 && 16 <= f.tile_m_ci95[1]);
        assert!(
            (f.rate_flops_per_s.value / RATE - 1.0).abs() < 0.02,
            "{f:?}"
        );
        assert!((f.k_half.value / K_HALF - 1.0).abs() < 0.1, "{f:?}");
        assert!((f.ramp_ns.value / RAMP_NS - 1.0).abs() < 0.2, "{f:?}");
        assert!(f.quality.rms_relative_error < 0.03);
    }

    #[test]
    fn batched_calls_pay_the_ramp_once() {
        // Batched samples (one ramp, `batch` products) mixed with single calls: the fit
        // recovers the same curve. Fitting them as if each product paid a ramp would not.
        let mut rng = TestRng::new(5);
        let mut pts = synthetic(&mut rng, 16, 0.01);
        for &batch in &[8u64, 32] {
            for &(m, n, k) in &[(128u64, 128u64, 32u64), (200, 250, 64), (64, 72, 16)] {
                let product = truth_ns(m, n, k, 16) - RAMP_NS;
                let t = (RAMP_NS + batch as f64 * product) * (1.0 + 0.01 * rng.normal());
                pts.push(GemmPoint {
                    m,
                    n,
                    k,
                    batch,
                    time_ns: t,
                    cold: false,
                });
            }
        }
        let f = fit_with_tile(&pts, 16, 16, Operands::Free).unwrap();
        assert!(
            (f.rate_flops_per_s.value / RATE - 1.0).abs() < 0.02,
            "{f:?}"
        );
        assert!((f.k_half.value / K_HALF - 1.0).abs() < 0.1, "{f:?}");
        assert!((f.ramp_ns.value / RAMP_NS - 1.0).abs() < 0.2, "{f:?}");
        assert!(f.quality.max_relative_error < 0.05, "{f:?}");
    }

    #[test]
    fn intervals_cover_the_truth_at_about_95_percent() {
        let mut rng = TestRng::new(99);
        let datasets = 200;
        let (mut rate, mut kh, mut ramp) = (0, 0, 0);
        for _ in 0..datasets {
            let f = fit_with_tile(&synthetic(&mut rng, 8, 0.05), 8, 8, Operands::Free).unwrap();
            rate += usize::from(f.rate_flops_per_s.covers(RATE));
            kh += usize::from(f.k_half.covers(K_HALF));
            ramp += usize::from(f.ramp_ns.covers(RAMP_NS));
        }
        for (what, hits) in [("rate", rate), ("k_half", kh), ("ramp", ramp)] {
            let r = hits as f64 / f64::from(datasets);
            assert!((0.90..=0.99).contains(&r), "{what} coverage {r}");
        }
    }

    #[test]
    fn recovers_packing_the_cold_calls_load_and_ramp_and_covers_them() {
        const PACK_BYTES_PER_S: f64 = 40e9;
        const OPERAND_BYTES_PER_S: f64 = 15e9;
        const COLD_RAMP_NS: f64 = 1_500.0;
        let mut rng = TestRng::new(21);
        let (datasets, mut pack_hits, mut load_hits, mut ramp_hits) = (100, 0, 0, 0);
        for _ in 0..datasets {
            let pts: Vec<GemmPoint> = synthetic(&mut rng, 8, 0.0)
                .into_iter()
                .map(|p| {
                    let bytes = operand_bytes(p.m, p.n, p.k);
                    let cold = if p.cold {
                        COLD_RAMP_NS + bytes / OPERAND_BYTES_PER_S * 1e9
                    } else {
                        0.0
                    };
                    let t = p.time_ns + bytes / PACK_BYTES_PER_S * 1e9 + cold;
                    GemmPoint {
                        time_ns: t * (1.0 + 0.03 * rng.normal()),
                        ..p
                    }
                })
                .collect();
            let f = fit_with_tile(&pts, 8, 8, Operands::Loaded).unwrap();
            let load = f.operand_bytes_per_s.expect("the load term was fitted");
            let pack = f.pack_bytes_per_s.expect("the packing term was fitted");
            let ramp = f.cold_ramp_ns.expect("the cold ramp was fitted");
            assert!(
                (load.value / OPERAND_BYTES_PER_S - 1.0).abs() < 0.3,
                "{f:?}"
            );
            assert!((pack.value / PACK_BYTES_PER_S - 1.0).abs() < 0.5, "{f:?}");
            assert!(
                (f.rate_flops_per_s.value / RATE - 1.0).abs() < 0.05,
                "{f:?}"
            );
            load_hits += usize::from(load.covers(OPERAND_BYTES_PER_S));
            pack_hits += usize::from(pack.covers(PACK_BYTES_PER_S));
            ramp_hits += usize::from(ramp.covers(COLD_RAMP_NS));
        }
        for (what, hits) in [
            ("load", load_hits),
            ("pack", pack_hits),
            ("cold ramp", ramp_hits),
        ] {
            let r = hits as f64 / f64::from(datasets);
            assert!((0.88..=0.99).contains(&r), "{what} coverage {r}");
        }
        // Without the terms in the data, the fit says it cannot place one, or finds them
        // negligible against the FLOPs.
        let plain = synthetic(&mut rng, 8, 0.01);
        match fit_with_tile(&plain, 8, 8, Operands::Loaded) {
            Err(FitError::Degenerate(_)) => {}
            Ok(f) => {
                let bw = f.operand_bytes_per_s.unwrap().value;
                let pack = f.pack_bytes_per_s.unwrap().value;
                // At these rates the operands of the largest sample cost under 3% of its time.
                let (m, n, k) = (200, 250, 512);
                let share =
                    operand_bytes(m, n, k) * (1.0 / bw + 1.0 / pack) * 1e9 / truth_ns(m, n, k, 8);
                assert!(share < 0.03, "{f:?}");
            }
            Err(e) => panic!("{e}"),
        }
        // Only evicted calls: packing cannot be told from loading, and the fit says so.
        let cold_only: Vec<GemmPoint> = plain
            .iter()
            .map(|p| GemmPoint { cold: true, ..*p })
            .collect();
        match fit_with_tile(&cold_only, 8, 8, Operands::Loaded) {
            Err(FitError::Degenerate(why)) => assert!(why.contains("cached"), "{why}"),
            other => panic!("{other:?}"),
        }
        // The three-term fit reports no operand terms.
        let f = fit_with_tile(&plain, 8, 8, Operands::Free).unwrap();
        assert!(f.operand_bytes_per_s.is_none() && f.pack_bytes_per_s.is_none());
    }

    #[test]
    fn padding_rounds_up_to_tiles() {
        assert_eq!(padded_flops(100, 64, 10, 64, 64), 2.0 * 128.0 * 64.0 * 10.0);
        assert_eq!(padded_flops(1, 1, 1, 1, 1), 2.0);
    }
}
