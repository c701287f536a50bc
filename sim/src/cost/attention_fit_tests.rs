//! The fit recovers a curve from its own points, refuses points it cannot fit, and reproduces
//! the Triton defaults from the published ratio and the flash defaults.

use super::*;
use crate::cost::{DEFAULT_FLASH, DEFAULT_TRITON};

/// Rounded as the constants and the profiles write them: four decimals.
fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

#[test]
fn a_curve_is_recovered_from_its_own_points() {
    let truth = AttentionCurve {
        max_efficiency: 0.5,
        keys_half: 256.0,
        head_dim_half: 20.0,
    };
    let points: Vec<(f64, f64)> = [128.0, 512.0, 2048.0, 8192.0]
        .iter()
        .map(|&l| (l, truth.efficiency(l, 64.0)))
        .collect();
    let f = fit_keys_curve(&points, 64.0, 20.0).unwrap();
    assert_eq!(f.curve.keys_half, 256.0);
    assert!((f.curve.max_efficiency - 0.5).abs() < 1e-12, "{f:?}");
    assert!(f.rms_relative_error < 1e-12 && f.max_relative_error < 1e-12);
}

#[test]
fn no_points_or_a_non_positive_point_is_no_fit() {
    assert_eq!(fit_keys_curve(&[], 128.0, 16.0), None);
    assert_eq!(fit_keys_curve(&[(256.0, 0.0)], 128.0, 16.0), None);
    assert_eq!(fit_keys_curve(&[(f64::NAN, 0.1)], 128.0, 16.0), None);
}

/// The derived points are the flash curve times the published ratio: at 512 tokens (256 keys
/// per query) flash forward is 0.4351 * 256/576 * 128/151 = 0.163920 and the ratio 50/99.
#[test]
fn triton_points_are_flash_times_the_published_ratio() {
    let p = triton_points(&DEFAULT_FLASH.forward);
    assert_eq!(p.len(), 6);
    assert_eq!(p[0].0, 256.0);
    let flash = 0.4351 * 256.0 / 576.0 * 128.0 / 151.0;
    assert!((p[0].1 - flash * 50.0 / 99.0).abs() < 1e-15, "{:?}", p[0]);
    assert_eq!(p[5].0, 8192.0);
}

/// `DEFAULT_TRITON` is the fit of the published Triton / FlashAttention-2 ratio applied to
/// `DEFAULT_FLASH`, at the errors its doc states.
#[test]
fn triton_defaults_are_the_fit_of_the_published_ratio() {
    let (fwd, bwd) = triton_curves_from_flash(&DEFAULT_FLASH).unwrap();
    for (fit, default) in [
        (fwd, DEFAULT_TRITON.forward),
        (bwd, DEFAULT_TRITON.backward),
    ] {
        assert_eq!(round4(fit.curve.max_efficiency), default.max_efficiency);
        assert_eq!(fit.curve.keys_half, default.keys_half);
        assert_eq!(fit.curve.head_dim_half, default.head_dim_half);
    }
    assert_eq!((fwd.curve.keys_half, bwd.curve.keys_half), (224.0, 384.0));
    assert!(
        fwd.rms_relative_error < 0.015 && fwd.max_relative_error < 0.020,
        "{fwd:?}"
    );
    assert!(
        bwd.rms_relative_error < 0.019 && bwd.max_relative_error < 0.025,
        "{bwd:?}"
    );
}
