//! Weighted linear least squares with the standard errors, Student-t 95% intervals and R² the
//! calibration reports. Every fit in this crate reduces to it: the alpha-beta models are
//! linear in (latency, 1/bandwidth), and the GEMM curve is linear in (1/rate, k_half/rate,
//! ramp) once the tile is fixed. Columns are scaled to unit RMS before solving, so a latency
//! column (a handful of steps) and a bytes column (1e8) do not ruin the conditioning.

use super::FitError;
use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

/// Result of [`weighted_least_squares`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LinearFit {
    pub coef: Vec<f64>,
    /// Covariance of `coef` (residual variance times the inverse normal matrix).
    pub cov: Vec<Vec<f64>>,
    /// Degrees of freedom of the residual (samples minus parameters).
    pub dof: usize,
    /// Two-sided 95% Student-t quantile for `dof`.
    pub t95: f64,
    /// Weighted coefficient of determination.
    pub r2: f64,
}

impl LinearFit {
    /// Standard error of coefficient `i`.
    pub fn se(&self, i: usize) -> f64 {
        self.cov
            .get(i)
            .and_then(|r| r.get(i))
            .map_or(f64::NAN, |v| v.max(0.0).sqrt())
    }
    /// 95% interval of coefficient `i`.
    pub fn ci95(&self, i: usize) -> [f64; 2] {
        let c = self.coef.get(i).copied().unwrap_or(f64::NAN);
        let h = self.t95 * self.se(i);
        [c - h, c + h]
    }
    /// Prediction for one row of regressors.
    pub fn predict(&self, x: &[f64]) -> f64 {
        self.coef.iter().zip(x).map(|(c, v)| c * v).sum()
    }
    /// Variance of a linear combination `g · coef` (the delta method's building block).
    pub fn var_of(&self, g: &[f64]) -> f64 {
        let mut v = 0.0;
        for (i, gi) in g.iter().enumerate() {
            for (j, gj) in g.iter().enumerate() {
                let c = self
                    .cov
                    .get(i)
                    .and_then(|r| r.get(j))
                    .copied()
                    .unwrap_or(0.0);
                v += gi * c * gj;
            }
        }
        v.max(0.0)
    }
}

/// Two-sided 95% quantile of Student's t with `dof` degrees of freedom.
pub fn t95(dof: usize) -> Result<f64, FitError> {
    let t = StudentsT::new(0.0, 1.0, dof.max(1) as f64)
        .map_err(|e| FitError::Degenerate(format!("Student t with {dof} dof: {e}")))?;
    Ok(t.inverse_cdf(0.975))
}

/// Minimises `sum_i w_i (y_i - x_i · b)^2`. Rows of `x` all have the same length `p`; the fit
/// needs more rows than parameters and full column rank.
pub fn weighted_least_squares(x: &[Vec<f64>], y: &[f64], w: &[f64]) -> Result<LinearFit, FitError> {
    let n = y.len();
    let p = x.first().map_or(0, Vec::len);
    if p == 0 || x.len() != n || w.len() != n || x.iter().any(|r| r.len() != p) {
        return Err(FitError::Degenerate(format!(
            "{n} observations with inconsistent regressors"
        )));
    }
    if n <= p {
        return Err(FitError::TooFewSamples {
            have: n,
            need: p + 1,
        });
    }
    if x.iter().flatten().chain(y).chain(w).any(|v| !v.is_finite()) || w.iter().any(|&v| v < 0.0) {
        return Err(FitError::Degenerate(
            "non-finite sample or negative weight".into(),
        ));
    }
    // Column scales: RMS of each regressor.
    let scale: Vec<f64> = (0..p)
        .map(|j| {
            let s = (x.iter().map(|r| r[j] * r[j]).sum::<f64>() / n as f64).sqrt();
            if s > 0.0 {
                s
            } else {
                1.0
            }
        })
        .collect();
    // Normal equations on the scaled columns.
    let mut a = vec![vec![0.0; p]; p];
    let mut rhs = vec![0.0; p];
    for ((row, &yi), &wi) in x.iter().zip(y).zip(w) {
        for j in 0..p {
            let xj = row[j] / scale[j];
            rhs[j] += wi * xj * yi;
            for k in 0..p {
                a[j][k] += wi * xj * row[k] / scale[k];
            }
        }
    }
    let inv = invert(&a)?;
    let b_scaled: Vec<f64> = (0..p)
        .map(|j| (0..p).map(|k| inv[j][k] * rhs[k]).sum())
        .collect();
    let coef: Vec<f64> = b_scaled.iter().zip(&scale).map(|(b, s)| b / s).collect();
    // Residuals.
    let wsum: f64 = w.iter().sum();
    if wsum <= 0.0 {
        return Err(FitError::Degenerate("all weights are zero".into()));
    }
    let ybar = y.iter().zip(w).map(|(y, w)| y * w).sum::<f64>() / wsum;
    let (mut ssr, mut sst) = (0.0, 0.0);
    for ((row, &yi), &wi) in x.iter().zip(y).zip(w) {
        let r = yi - row.iter().zip(&coef).map(|(x, c)| x * c).sum::<f64>();
        ssr += wi * r * r;
        sst += wi * (yi - ybar) * (yi - ybar);
    }
    let dof = n - p;
    let sigma2 = ssr / dof as f64;
    let cov = (0..p)
        .map(|j| {
            (0..p)
                .map(|k| sigma2 * inv[j][k] / (scale[j] * scale[k]))
                .collect()
        })
        .collect();
    let r2 = if sst > 0.0 { 1.0 - ssr / sst } else { 1.0 };
    Ok(LinearFit {
        coef,
        cov,
        dof,
        t95: t95(dof)?,
        r2,
    })
}

/// Inverse of a small symmetric positive-definite matrix by Gauss-Jordan with partial
/// pivoting; a (numerically) singular matrix is an error.
fn invert(a: &[Vec<f64>]) -> Result<Vec<Vec<f64>>, FitError> {
    let p = a.len();
    let mut m: Vec<Vec<f64>> = a
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut row = r.clone();
            row.extend((0..p).map(|j| if i == j { 1.0 } else { 0.0 }));
            row
        })
        .collect();
    let norm = a.iter().flatten().fold(0.0f64, |acc, v| acc.max(v.abs()));
    for col in 0..p {
        let pivot = (col..p)
            .max_by(|&i, &j| m[i][col].abs().total_cmp(&m[j][col].abs()))
            .unwrap_or(col);
        if m[pivot][col].abs() <= norm * 1e-13 {
            return Err(FitError::Degenerate(
                "the regressors are collinear (the samples do not vary enough to separate the parameters)"
                    .into(),
            ));
        }
        m.swap(col, pivot);
        let d = m[col][col];
        for v in m[col].iter_mut() {
            *v /= d;
        }
        let pivot_row = m[col].clone();
        for (r, row) in m.iter_mut().enumerate() {
            let f = row[col];
            if r != col && f != 0.0 {
                for (v, pv) in row.iter_mut().zip(&pivot_row) {
                    *v -= f * pv;
                }
            }
        }
    }
    Ok(m.into_iter().map(|r| r[p..].to_vec()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_line_is_recovered_with_zero_width_interval() {
        let x: Vec<Vec<f64>> = (0..5).map(|i| vec![1.0, f64::from(i)]).collect();
        let y: Vec<f64> = (0..5).map(|i| 3.0 + 2.0 * f64::from(i)).collect();
        let f = weighted_least_squares(&x, &y, &[1.0; 5]).unwrap();
        assert!((f.coef[0] - 3.0).abs() < 1e-9 && (f.coef[1] - 2.0).abs() < 1e-9);
        assert!(f.se(1) < 1e-9);
        assert!((f.r2 - 1.0).abs() < 1e-12);
        assert_eq!(f.dof, 3);
    }

    #[test]
    fn t_quantile_matches_tables() {
        assert!((t95(1).unwrap() - 12.706).abs() < 1e-3);
        assert!((t95(10).unwrap() - 2.228).abs() < 1e-3);
        assert!((t95(1000).unwrap() - 1.962).abs() < 1e-3);
    }

    #[test]
    fn badly_scaled_columns_still_solve() {
        // Latency steps (1..4) and bytes (1e3..1e9): t = 5e3 * steps + bytes / 1e9 (ns).
        let mut x = Vec::new();
        let mut y = Vec::new();
        for steps in 1..=4 {
            for e in 3..=9 {
                let bytes = 10f64.powi(e);
                x.push(vec![f64::from(steps), bytes]);
                y.push(5e3 * f64::from(steps) + bytes / 1.0);
            }
        }
        let w: Vec<f64> = y.iter().map(|v| 1.0 / (v * v)).collect();
        let f = weighted_least_squares(&x, &y, &w).unwrap();
        assert!((f.coef[0] / 5e3 - 1.0).abs() < 1e-9, "{:?}", f.coef);
        assert!((f.coef[1] - 1.0).abs() < 1e-9);
    }

    #[test]
    fn collinear_and_short_inputs_are_errors() {
        let x = vec![vec![1.0, 2.0], vec![2.0, 4.0], vec![3.0, 6.0]];
        assert!(matches!(
            weighted_least_squares(&x, &[1.0, 2.0, 3.0], &[1.0; 3]),
            Err(FitError::Degenerate(_))
        ));
        assert!(matches!(
            weighted_least_squares(&x[..2], &[1.0, 2.0], &[1.0; 2]),
            Err(FitError::TooFewSamples { .. })
        ));
    }
}
