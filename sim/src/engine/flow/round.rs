//! Rounding of flow completion times to whole nanoseconds, on the flow model's hot path.

/// `x.round()` for `x >= 0` (half away from zero) without the libm call that `f64::round`
/// compiles to on baseline x86-64: the integer part by conversion, then the fraction, which
/// is exact to subtract below 2^53 (above it every f64 is an integer and the fraction is 0).
#[inline]
pub(super) fn round_non_negative(x: f64) -> f64 {
    if x.is_nan() || x >= 9.0e15 {
        return x.round();
    }
    let t = x as u64 as f64;
    if x - t >= 0.5 {
        t + 1.0
    } else {
        t
    }
}

#[cfg(test)]
mod tests {
    use super::round_non_negative;
    use proptest::prelude::*;

    #[test]
    fn rounding_matches_f64_round_at_the_edges() {
        let halves = (0..64u32).map(|k| f64::from(k) + 0.5);
        let near = [
            0.0,
            0.49999999999999994,
            0.5,
            1.0 - f64::EPSILON,
            2.5,
            1e15 + 0.5,
        ];
        let big = [4503599627370495.5, 9.0e15, 1.0e300, f64::INFINITY];
        for x in halves.chain(near).chain(big) {
            assert_eq!(round_non_negative(x).to_bits(), x.round().to_bits(), "{x}");
        }
    }

    proptest! {
        #[test]
        fn rounding_matches_f64_round(x in 0.0f64..1e17) {
            prop_assert_eq!(round_non_negative(x).to_bits(), x.round().to_bits());
        }
    }
}
