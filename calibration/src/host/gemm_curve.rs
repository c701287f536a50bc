//! The host GEMM curve's side of the fit: the points it is fitted to, its price of one call,
//! and how it does on the shapes it was not fitted to (held-out errors) and on each timed
//! shape (the profile's shape factors). Split from `host` so that module reads as the list of
//! fits.

use crate::bench::GemmSamples;
use crate::fit::gemm::{self, GemmFit, GemmPoint};
use twin_sim::cost::shape_factors::ShapeFactor;

/// The GEMM calls of `s` (held out or not) as fit points. Evicted calls are cold; a
/// back-to-back call is cold too when its A, B and C (f32) outgrow `private_cache_bytes`
/// (0: unknown, every back-to-back call warm).
pub(crate) fn gemm_points(
    s: &[GemmSamples],
    holdout: bool,
    private_cache_bytes: u64,
) -> Vec<GemmPoint> {
    s.iter()
        .filter(|g| g.holdout == holdout)
        .flat_map(|g| {
            let point = move |time_ns: f64, cold: bool| GemmPoint {
                m: g.m,
                n: g.n,
                k: g.k,
                batch: g.batch,
                time_ns,
                cold,
            };
            let warm_cold = outgrows(g, private_cache_bytes);
            g.kept_ns
                .iter()
                .map(move |&t| point(t, true))
                .chain(g.warm_kept_ns.iter().map(move |&t| point(t, warm_cold)))
        })
        .collect()
}

/// Whether one product of `g`'s shape (A, B and C in f32) outgrows a private cache of
/// `cache_bytes` (never when the size is unknown, 0).
pub(super) fn outgrows(g: &GemmSamples, cache_bytes: u64) -> bool {
    let shape = twin_sim::schedule::Gemm::single(g.m, g.n, g.k, 1);
    cache_bytes > 0 && shape.working_set_bytes(4) > cache_bytes
}

/// The curve's prediction of one call of `batch` products of `m x n x k`, its operands out of
/// the private cache when it starts (`cold`) or not.
pub fn gemm_predict_ns(f: &GemmFit, m: u64, n: u64, k: u64, batch: u64, cold: bool) -> f64 {
    let kf = k as f64;
    let rate = f.rate_flops_per_s.value * kf / (kf + f.k_half.value.max(0.0));
    let products = batch.max(1) as f64;
    let bytes = gemm::operand_bytes(m, n, k);
    let per_byte_ns = |e: &Option<crate::fit::Estimate>| e.map_or(0.0, |bw| bytes / bw.value * 1e9);
    let (pack_ns, load_ns) = (
        per_byte_ns(&f.pack_bytes_per_s),
        per_byte_ns(&f.operand_bytes_per_s),
    );
    let cold_ns = if cold {
        load_ns + f.cold_ramp_ns.map_or(0.0, |e| e.value)
    } else {
        0.0
    };
    (gemm::padded_flops(m, n, k, f.tile_m, f.tile_n) / rate * 1e9 + pack_ns) * products
        + f.ramp_ns.value.max(0.0)
        + cold_ns
}

/// Relative error of the curve `g` on each held-out shape's median, evicted calls and
/// back-to-back calls (cold when they outgrow `private_cache_bytes`) apart.
pub(crate) fn holdout_errors(
    g: &GemmFit,
    samples: &[GemmSamples],
    private_cache_bytes: u64,
) -> Vec<f64> {
    samples
        .iter()
        .filter(|x| x.holdout)
        .flat_map(|x| {
            let err = move |times: &[f64], cold: bool| {
                let med = crate::sample::median(times)?;
                Some(((gemm_predict_ns(g, x.m, x.n, x.k, x.batch, cold) - med) / med).abs())
            };
            [
                err(&x.kept_ns, true),
                err(&x.warm_kept_ns, outgrows(x, private_cache_bytes)),
            ]
        })
        .flatten()
        .collect()
}

/// The price of `x`'s back-to-back calls by the curve `g`: cold where one product outgrows
/// the private cache.
fn back_to_back_ns(g: &GemmFit, x: &GemmSamples, private_cache_bytes: u64) -> f64 {
    gemm_predict_ns(g, x.m, x.n, x.k, x.batch, outgrows(x, private_cache_bytes))
}

/// Per timed shape that is not held out, its median back-to-back call over the curve's price
/// for it (`twin_sim::cost::shape_factors`). Back to back is how an op's GEMMs find their
/// operands; the evicted calls' extra load the cost model prices apart, per op.
pub fn shape_factors(
    g: &GemmFit,
    samples: &[GemmSamples],
    private_cache_bytes: u64,
) -> Vec<ShapeFactor> {
    samples
        .iter()
        .filter(|x| !x.holdout && x.batch <= 1)
        .filter_map(|x| {
            let measured = crate::sample::median(&x.warm_kept_ns)?;
            let price = back_to_back_ns(g, x, private_cache_bytes);
            (price > 0.0 && measured > 0.0).then(|| ShapeFactor {
                m: x.m,
                n: x.n,
                k: x.k,
                factor: measured / price,
            })
        })
        .collect()
}

/// RMS relative error of the held-out shapes' median back-to-back calls by the curve alone,
/// and with `factors` (which hold none of them) interpolated; 0 without held-out shapes.
pub(super) fn holdout_rms(
    g: &GemmFit,
    samples: &[GemmSamples],
    private_cache_bytes: u64,
    factors: &[ShapeFactor],
) -> (f64, f64) {
    let errs: Vec<(f64, f64)> = samples
        .iter()
        .filter(|x| x.holdout)
        .filter_map(|x| {
            let measured = crate::sample::median(&x.warm_kept_ns)?;
            let price = back_to_back_ns(g, x, private_cache_bytes);
            let f = twin_sim::cost::shape_factors::factor(factors, x.m, x.n, x.k);
            Some((
                (price - measured) / measured,
                (price * f - measured) / measured,
            ))
        })
        .collect();
    let rms = |get: fn(&(f64, f64)) -> f64| {
        if errs.is_empty() {
            0.0
        } else {
            (errs.iter().map(|e| get(e).powi(2)).sum::<f64>() / errs.len() as f64).sqrt()
        }
    };
    (rms(|e| e.0), rms(|e| e.1))
}
