//! Conversions between the models' floating-point rates and times and the integer nanoseconds
//! of the schedule and the engine. Every model (the alpha-beta link tiers, the cost model, the
//! host model) converts the same way, so they live below all of them.

/// A rate (bytes or FLOPs per second) safe to divide by: NaN, or 1 and below, becomes 1, so a
/// broken profile value gives huge times and never a panic or a negative time.
pub(crate) fn positive_rate(r: f64) -> f64 {
    if r.is_nan() || r <= 1.0 {
        1.0
    } else {
        r
    }
}

/// Seconds (f64) to whole nanoseconds, rounded to nearest but at least 1 for any positive
/// time (so no real work takes zero time); saturates instead of overflowing, and maps NaN or
/// negative input to zero.
pub(crate) fn secs_to_ns(secs: f64) -> u64 {
    let ns = (secs * 1e9).round();
    if ns.is_nan() || secs <= 0.0 {
        0
    } else if ns >= u64::MAX as f64 {
        u64::MAX
    } else {
        (ns as u64).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secs_to_ns_rounds_and_saturates() {
        assert_eq!(secs_to_ns(2.4e-9), 2);
        assert_eq!(secs_to_ns(0.2e-9), 1);
        assert_eq!(secs_to_ns(0.0), 0);
        assert_eq!(secs_to_ns(-1.0), 0);
        assert_eq!(secs_to_ns(f64::NAN), 0);
        assert_eq!(secs_to_ns(1e30), u64::MAX);
    }

    #[test]
    fn positive_rate_keeps_a_divisor_at_least_one() {
        assert_eq!(positive_rate(5e9), 5e9);
        assert_eq!(positive_rate(0.5), 1.0);
        assert_eq!(positive_rate(-3.0), 1.0);
        assert_eq!(positive_rate(f64::NAN), 1.0);
    }
}
