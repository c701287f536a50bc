//! Small statistics every crate of the workspace shares, defined once.

/// The median of `values`: the middle value, or the mean of the middle two for an even
/// count; `None` when there are none or one is NaN.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.iter().any(|v| v.is_nan()) {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let hi = *v.get(n / 2)?;
    if n % 2 == 1 {
        Some(hi)
    } else {
        Some((v.get(n / 2 - 1)? + hi) / 2.0)
    }
}

/// [`median`], 0 for no values (or a NaN among them).
pub fn median_or_zero(values: &[f64]) -> f64 {
    median(values).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_counts_take_the_middle_and_even_counts_the_mean_of_the_middle_two() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[7.0]), Some(7.0));
    }

    #[test]
    fn none_for_no_values_or_a_nan() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[1.0, f64::NAN]), None);
        assert_eq!(median_or_zero(&[]), 0.0);
    }
}
