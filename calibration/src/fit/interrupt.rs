//! Interruption rate and mean length from the interruption benchmark
//! (`bench::interrupt`): `rate = interrupted calls / busy seconds`, with the 95% interval of a
//! Poisson count (normal approximation, `count ± 1.96 sqrt(count)`, at least 0); `mean = mean
//! excess`, with Student's t interval over the interrupted calls.

use super::Estimate;
use crate::bench::interrupt::InterruptSamples;
use statrs::distribution::{ContinuousCDF, StudentsT};

/// (interruptions per second of busy time, mean interruption in ns).
pub fn fit(s: &InterruptSamples) -> (Estimate, Estimate) {
    let busy_s = s.busy_ns * 1e-9;
    let n = s.excess_ns.len() as f64;
    let rate = |count: f64| if busy_s > 0.0 { count / busy_s } else { 0.0 };
    let half = 1.96 * n.sqrt();
    let per_s = Estimate {
        value: rate(n),
        ci95: [rate((n - half).max(0.0)), rate(n + half)],
    };
    let mean = if n > 0.0 {
        s.excess_ns.iter().sum::<f64>() / n
    } else {
        0.0
    };
    let mean_ns = if n >= 2.0 {
        let var = s.excess_ns.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        let t = StudentsT::new(0.0, 1.0, n - 1.0)
            .map(|d| d.inverse_cdf(0.975))
            .unwrap_or(1.96);
        let h = t * (var / n).sqrt();
        Estimate {
            value: mean,
            ci95: [(mean - h).max(0.0), mean + h],
        }
    } else {
        Estimate {
            value: mean,
            ci95: [0.0, f64::INFINITY],
        }
    };
    (per_s, mean_ns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::interrupt::summarize;
    use crate::sample::SplitMix;

    #[test]
    fn recovers_a_known_rate_and_length_with_covering_intervals() {
        // 100 us calls with +-1% noise; one in 50 interrupted by an exponential of mean 70 us.
        let mut rng = SplitMix::new(11);
        let times: Vec<f64> = (0..50_000)
            .map(|_| {
                let base = 100_000.0 * (1.0 + 0.01 * (rng.uniform() - 0.5));
                if rng.uniform() < 0.02 {
                    base + 30_000.0 - 70_000.0 * rng.uniform().ln()
                } else {
                    base
                }
            })
            .collect();
        let s = summarize(&times);
        let (per_s, mean_ns) = fit(&s);
        // 1,000 interruptions over ~5.1 s of busy time: ~196 a second.
        let busy_s = s.busy_ns * 1e-9;
        assert!(per_s.covers(1000.0 / busy_s), "{per_s:?}");
        // Excess over the median: 30 us + exponential(70 us) = 100 us on average.
        assert!(mean_ns.covers(100_000.0), "{mean_ns:?}");
        assert!((mean_ns.value - 100_000.0).abs() < 10_000.0, "{mean_ns:?}");
    }

    #[test]
    fn base_price_plus_interruptions_is_the_mean_call_slowdowns_of_ten_percent_included() {
        // 100 us calls with +-0.5% noise; one in 20 runs 10% slow (a neighbour's burst, not a
        // descheduling): 0.5% of busy time, which a 1.2x-median threshold never counted.
        let mut rng = SplitMix::new(5);
        let times: Vec<f64> = (0..20_000)
            .map(|_| {
                let base = 100_000.0 * (1.0 + 0.01 * (rng.uniform() - 0.5));
                if rng.uniform() < 0.05 {
                    base * 1.1
                } else {
                    base
                }
            })
            .collect();
        let s = summarize(&times);
        let (per_s, mean_ns) = fit(&s);
        let interrupted_ns = per_s.value * mean_ns.value * s.busy_ns * 1e-9;
        let mean_call_ns = s.busy_ns / s.calls as f64;
        let modelled_ns = s.base_ns + interrupted_ns / s.calls as f64;
        assert!(
            (modelled_ns - mean_call_ns).abs() < 1e-6 * mean_call_ns,
            "{modelled_ns} {mean_call_ns}"
        );
        let fraction = interrupted_ns / s.busy_ns;
        assert!((fraction - 0.05 * 0.1 / 1.005).abs() < 0.001, "{fraction}");
        assert!((mean_ns.value - 10_000.0).abs() < 500.0, "{mean_ns:?}");
    }

    #[test]
    fn an_uninterrupted_machine_fits_no_interruptions() {
        let s = summarize(&vec![100_000.0; 1000]);
        let (per_s, mean_ns) = fit(&s);
        assert_eq!(per_s.value, 0.0);
        assert_eq!(mean_ns.value, 0.0);
    }
}
