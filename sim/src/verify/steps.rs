//! The measured step of a verification: several runs of several steps each, reduced to one
//! step time (the median of the steps after warm-up, over every run), its spread, and the run
//! that stands for the others (whose median step is the median of the runs' median steps),
//! whose trace and report the op-by-op comparison uses.

use serde::Serialize;

/// Step times of several runs after warm-up, reduced.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepSummary {
    /// Every step after warm-up, run after run.
    pub steps_s: Vec<f64>,
    pub median_s: f64,
    /// Fastest and slowest of `steps_s`.
    pub spread_s: [f64; 2],
    /// Index of the run whose median step (after warm-up) is the median of the runs' median
    /// steps (the lower middle for an even count; ties by run order).
    pub representative_run: usize,
}

/// The median (mean of the middle two for an even count); 0 when empty.
pub use crate::stats::median_or_zero as median;

/// The median of every step after warm-up, each multiplied by its run's entry of `factors`
/// (a run without one counts unscaled); 0 when there are no steps.
pub fn scaled_median(runs: &[Vec<f64>], warmup: usize, factors: &[f64]) -> f64 {
    let steps: Vec<f64> = runs
        .iter()
        .enumerate()
        .flat_map(|(i, r)| {
            let f = factors.get(i).copied().unwrap_or(1.0);
            r.iter().skip(warmup).map(move |s| s * f)
        })
        .collect();
    median(&steps)
}

/// Reduce `runs` (each run's step times, warm-up included) leaving out the first `warmup`
/// steps of each run. A run with no steps after warm-up counts as a median step of 0.
pub fn summarize_steps(runs: &[Vec<f64>], warmup: usize) -> StepSummary {
    let steps_s: Vec<f64> = runs
        .iter()
        .flat_map(|r| r.iter().skip(warmup))
        .copied()
        .collect();
    let spread_s = if steps_s.is_empty() {
        [0.0, 0.0]
    } else {
        [
            steps_s.iter().copied().fold(f64::INFINITY, f64::min),
            steps_s.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ]
    };
    let mid: Vec<f64> = runs
        .iter()
        .map(|r| median(r.get(warmup..).unwrap_or_default()))
        .collect();
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|&a, &b| mid[a].total_cmp(&mid[b]).then(a.cmp(&b)));
    let representative_run = order
        .get(order.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or(0);
    StepSummary {
        median_s: median(&steps_s),
        spread_s,
        steps_s,
        representative_run,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_median_scales_each_run_by_its_factor() {
        // Two runs, one warm-up step each; the second run's steps halved.
        let runs = vec![vec![9.0, 2.0, 4.0], vec![9.0, 8.0, 10.0]];
        // Steps after warm-up: 2, 4 and 4, 5 (scaled): median of [2, 4, 4, 5] = 4.
        assert_eq!(scaled_median(&runs, 1, &[1.0, 0.5]), 4.0);
        // Unscaled: median of [2, 4, 8, 10] = 6; a missing factor counts as 1.
        assert_eq!(scaled_median(&runs, 1, &[1.0]), 6.0);
        assert_eq!(scaled_median(&[], 1, &[]), 0.0);
    }

    #[test]
    fn warm_up_is_left_out_and_the_median_spans_runs() {
        let runs = vec![
            vec![9.0, 1.0, 3.0],
            vec![8.0, 2.0, 5.0],
            vec![7.0, 4.0, 6.0],
        ];
        let s = summarize_steps(&runs, 1);
        assert_eq!(s.steps_s, vec![1.0, 3.0, 2.0, 5.0, 4.0, 6.0]);
        assert_eq!(s.median_s, 3.5);
        assert_eq!(s.spread_s, [1.0, 6.0]);
        // Median steps 2, 3.5, 5: the median is run 1's.
        assert_eq!(s.representative_run, 1);
        // A run is judged by its median step, not its last: run 0's last step is slow (9)
        // and run 1's fast (2), but run 0's steps are mostly 1 (lower middle of medians 1, 5).
        let s = summarize_steps(&[vec![1.0, 1.0, 9.0], vec![5.0, 5.0, 2.0]], 0);
        assert_eq!(s.representative_run, 0);
    }

    #[test]
    fn odd_counts_and_edges() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[]), 0.0);
        let s = summarize_steps(&[vec![5.0]], 0);
        assert_eq!(
            (s.median_s, s.spread_s, s.representative_run),
            (5.0, [5.0, 5.0], 0)
        );
        // Warm-up longer than the run: nothing measured, nothing panics.
        let s = summarize_steps(&[vec![5.0]], 3);
        assert_eq!((s.median_s, s.spread_s), (0.0, [0.0, 0.0]));
        let s = summarize_steps(&[], 0);
        assert_eq!(s.representative_run, 0);
        // Two runs: the lower middle.
        let s = summarize_steps(&[vec![4.0], vec![2.0]], 0);
        assert_eq!(s.representative_run, 1);
    }
}
