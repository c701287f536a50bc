//! Fits an attention curve's plateau and key half point to efficiency points, and derives the
//! curve of a kernel that was only ever published as a throughput ratio to FlashAttention-2:
//! the 2022 Triton FlashAttention that llm-foundry runs. The defaults in [`super::attention`]
//! and the bundled profiles' `[attention.triton.*]` sections come out of these functions, so the
//! numbers can be reproduced (a test checks them).
//!
//! The fit is the one `lab/scripts/attention_fit.py` made for the measured curves, with the head
//! dimension's half point held: for each `keys_half` on a grid of 8 keys, `max_efficiency` is
//! the geometric mean of `measured / shape`; the pick minimises the rms relative error.

use super::attention::{AttentionCurve, BackendCurves};

/// Forward + backward throughput of the Triton FlashAttention and of FlashAttention-2, causal,
/// head dimension 128, bf16, on one A100 80GB SXM4, by sequence length: (sequence, Triton
/// TFLOP/s, FlashAttention-2 TFLOP/s).
/// Dao-AILab/flash-attention@4f285b354796fb17df8636485b9a04df3ebbb7dc:assets/flash2_a100_fwd_bwd_benchmark.png
/// panel (d), the bars labelled "FlashAttention Triton" and "FlashAttention-2" (the same figure
/// is Figure 4 (d) of Dao 2023, FlashAttention-2, arXiv:2307.08691).
pub const TRITON_VS_FLASH2_A100: [(u64, f64, f64); 6] = [
    (512, 50.0, 99.0),
    (1024, 61.0, 133.0),
    (2048, 68.0, 155.0),
    (4096, 74.0, 173.0),
    (8192, 78.0, 182.0),
    (16384, 80.0, 189.0),
];

/// The head dimension of [`TRITON_VS_FLASH2_A100`].
pub const TRITON_VS_FLASH2_HEAD_DIM: f64 = 128.0;

/// A fitted curve and how far it is from the points it was fitted to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CurveFit {
    pub curve: AttentionCurve,
    pub rms_relative_error: f64,
    pub max_relative_error: f64,
}

/// Grid of `keys_half` candidates: 0, 8, ..., 1592 keys (the script's grid).
const KEYS_HALF_STEP: f64 = 8.0;
const KEYS_HALF_STEPS: u32 = 200;

/// Fits `max_efficiency` and `keys_half` to `(keys per query, efficiency)` points at one
/// `head_dim`, holding `head_dim_half`. `None` without a point, or with a point whose keys or
/// efficiency is not positive and finite.
pub fn fit_keys_curve(
    points: &[(f64, f64)],
    head_dim: f64,
    head_dim_half: f64,
) -> Option<CurveFit> {
    let valid = |x: f64| x.is_finite() && x > 0.0;
    if points.is_empty() || points.iter().any(|&(l, e)| !(valid(l) && valid(e))) {
        return None;
    }
    let n = points.len() as f64;
    let head = head_dim / (head_dim + head_dim_half);
    let mut best: Option<CurveFit> = None;
    for step in 0..KEYS_HALF_STEPS {
        let keys_half = f64::from(step) * KEYS_HALF_STEP;
        let shape = |l: f64| l / (l + keys_half) * head;
        let max_efficiency = (points
            .iter()
            .map(|&(l, e)| (e / shape(l)).ln())
            .sum::<f64>()
            / n)
            .exp();
        let errors = points
            .iter()
            .map(|&(l, e)| max_efficiency * shape(l) / e - 1.0);
        let rms = (errors.clone().map(|x| x * x).sum::<f64>() / n).sqrt();
        let max = errors.map(f64::abs).fold(0.0, f64::max);
        if best.is_none_or(|b| rms < b.rms_relative_error) {
            best = Some(CurveFit {
                curve: AttentionCurve {
                    max_efficiency,
                    keys_half,
                    head_dim_half,
                },
                rms_relative_error: rms,
                max_relative_error: max,
            });
        }
    }
    best
}

/// The Triton points derived from a flash curve: at each published sequence `s` (causal, so
/// `s / 2` keys per query), the flash curve's efficiency times the Triton / FlashAttention-2
/// ratio there.
pub fn triton_points(flash: &AttentionCurve) -> Vec<(f64, f64)> {
    TRITON_VS_FLASH2_A100
        .iter()
        .map(|&(s, triton, flash2)| {
            let keys = s as f64 / 2.0;
            let eff = flash.efficiency(keys, TRITON_VS_FLASH2_HEAD_DIM) * triton / flash2;
            (keys, eff)
        })
        .collect()
}

/// The Triton curve of one direction, fitted to [`triton_points`] of that direction's flash
/// curve; its `head_dim_half` is flash's.
pub fn triton_from_flash(flash: &AttentionCurve) -> Option<CurveFit> {
    fit_keys_curve(
        &triton_points(flash),
        TRITON_VS_FLASH2_HEAD_DIM,
        flash.head_dim_half,
    )
}

/// Both directions of [`triton_from_flash`].
pub fn triton_curves_from_flash(flash: &BackendCurves) -> Option<(CurveFit, CurveFit)> {
    Some((
        triton_from_flash(&flash.forward)?,
        triton_from_flash(&flash.backward)?,
    ))
}

#[cfg(test)]
#[path = "attention_fit_tests.rs"]
mod tests;
