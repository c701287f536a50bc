//! Measured corrections to the GEMM curve by shape (host profiles: `gemm.shape_factors`).
//! The curve is one smooth function of (m, n, k); a CPU sgemm's blocking makes some shapes run
//! 10-20% off it either way (thin-and-wide shapes with a long k over, small ones under:
//! docs/journal/2026-11-validation-history.md, 2026-11-24), and the scenarios' GEMMs sit on both
//! sides. The calibration keeps, for every shape it timed, the ratio of the measured back-to-back
//! call to the curve's price; a shape is priced by the curve times the ratio interpolated from the
//! nearest timed shapes in log space (inverse-distance weights on the log ratios), fading to no
//! correction at [`RADIUS`]: a timed shape gets its own ratio, one between timed shapes a blend,
//! one far from all of them the plain curve.

pub use crate::profile::ShapeFactor;

/// How far (Euclidean, in natural logs of m, n and k) a timed shape still corrects another:
/// a factor of 4 in one dimension. The calibration's grid spaces its shapes at most a factor
/// of 2.5 apart in m and n and 2 in k, so every shape inside the grid has neighbours.
pub const RADIUS: f64 = 1.386_294_361_119_890_6;
/// Neighbours blended.
const NEIGHBOURS: usize = 4;
/// Ratios are kept within this factor of 1 (a timing gone wrong must not price a shape at a
/// tenth of the curve).
pub const LIMIT: f64 = 2.0;

/// Inputs are positive; the table's rows came from a loader that checked them.
fn point(m: u64, n: u64, k: u64) -> [f64; 3] {
    [
        (m.max(1) as f64).ln(),
        (n.max(1) as f64).ln(),
        (k.max(1) as f64).ln(),
    ]
}

/// The correction for `m x n x k` from `table` (1 when it is empty or every row is beyond
/// [`RADIUS`]).
pub fn factor(table: &[ShapeFactor], m: u64, n: u64, k: u64) -> f64 {
    if table.is_empty() {
        return 1.0;
    }
    let q = point(m, n, k);
    // The nearest rows, by squared distance; the table holds a few hundred rows.
    let mut near: Vec<(f64, f64)> = table
        .iter()
        .filter(|r| r.factor.is_finite() && r.factor > 0.0)
        .map(|r| {
            let p = point(r.m, r.n, r.k);
            let d2 = (0..3).map(|i| (p[i] - q[i]).powi(2)).sum::<f64>();
            (d2, r.factor.clamp(1.0 / LIMIT, LIMIT).ln())
        })
        .filter(|&(d2, _)| d2 < RADIUS * RADIUS)
        .collect();
    if near.is_empty() {
        return 1.0;
    }
    near.sort_by(|a, b| a.0.total_cmp(&b.0));
    near.truncate(NEIGHBOURS);
    let nearest = near[0].0.sqrt();
    if nearest < 1e-9 {
        return near[0].1.exp();
    }
    let (mut sum_w, mut sum) = (0.0, 0.0);
    for &(d2, v) in &near {
        let w = 1.0 / d2;
        sum_w += w;
        sum += w * v;
    }
    // Fades to no correction as the nearest timed shape nears the radius.
    let fade = (1.0 - nearest / RADIUS).clamp(0.0, 1.0);
    (fade * sum / sum_w).exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(m: u64, n: u64, k: u64, factor: f64) -> ShapeFactor {
        ShapeFactor { m, n, k, factor }
    }

    #[test]
    fn a_timed_shape_gets_its_own_ratio() {
        let t = [row(64, 256, 128, 0.9), row(64, 1024, 256, 1.12)];
        assert!((factor(&t, 64, 1024, 256) - 1.12).abs() < 1e-12);
        assert!((factor(&t, 64, 256, 128) - 0.9).abs() < 1e-12);
    }

    #[test]
    fn between_two_timed_shapes_it_blends_and_far_away_it_fades_out() {
        let t = [row(40, 1024, 256, 1.16), row(128, 1024, 256, 1.10)];
        let f = factor(&t, 64, 1024, 256);
        // Nearer to 40 than to 128 in log space, and faded a little: between 1 and 1.16.
        assert!(f > 1.0 && f < 1.16, "{f}");
        assert!(f > factor(&t, 90, 1024, 256).min(1.14), "{f}");
        assert_eq!(
            factor(&t, 40, 1024, 4096),
            1.0,
            "k four times longer: beyond the radius"
        );
        assert_eq!(factor(&[], 40, 40, 40), 1.0);
    }

    #[test]
    fn wild_ratios_are_limited_and_bad_rows_ignored() {
        let t = [
            row(64, 64, 64, 50.0),
            row(64, 64, 65, f64::NAN),
            row(64, 64, 66, -1.0),
        ];
        assert!((factor(&t, 64, 64, 64) - LIMIT).abs() < 1e-12);
        let f = factor(&t, 64, 64, 70);
        assert!(f.is_finite() && f <= LIMIT, "{f}");
        assert!(factor(&t, 0, 0, 0).is_finite());
    }
}
