//! The time to train on `training.tokens`: each horizon trial's goodput (the fraction of wall
//! time that ends as full-speed work kept) carries the work of the run's steps at that trial's
//! step time (a `[variability]` sample's, or the prediction's) to a wall time. The spread over
//! the trials gives P10, P50 and P90 of the time, and of the goodput and ETTR beside it.
//!
//! This treats failures as a renewal process over the horizon: the trial's goodput holds for
//! the whole run. That is exact without failures (goodput is then the checkpoint stalls' share
//! alone, the same in every trial) and accurate when the horizon holds many failures.

use super::{ettr, goodput, Outcome};
use serde::Serialize;

/// Three percentiles of a quantity over the trials.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Percentiles<T> {
    pub p10: T,
    pub p50: T,
    pub p90: T,
}

/// The run's length in steps and wall time.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimeToTrain {
    pub tokens: u64,
    pub tokens_per_step: u64,
    pub steps: u64,
    /// Wall time to finish the steps, P10, P50 and P90 over the trials; `None` where the
    /// trials at that percentile kept no work at all (the run never finishes at their rate).
    pub time_p10_ns: Option<u64>,
    pub time_p50_ns: Option<u64>,
    pub time_p90_ns: Option<u64>,
    pub mean_time_ns: Option<u64>,
    pub goodput: Percentiles<f64>,
    pub ettr: Percentiles<f64>,
    pub trials: u32,
}

/// Nearest-rank percentile `p` (0-100) of `sorted` (ascending); `None` when empty.
fn nearest_rank<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    sorted.get(rank.clamp(1, n) - 1).copied()
}

fn percentiles_f64(mut v: Vec<f64>) -> Percentiles<f64> {
    v.sort_by(f64::total_cmp);
    let at = |p| nearest_rank(&v, p).unwrap_or(0.0);
    Percentiles {
        p10: at(10.0),
        p50: at(50.0),
        p90: at(90.0),
    }
}

/// The time to train on `tokens` from the horizon trials `outs` (over `horizon_ns`), with
/// trial `i` stepping at `step_ns[i % step_ns.len()]` (one entry: the same step for all).
pub fn time_to_train(
    tokens: u64,
    tokens_per_step: u64,
    outs: &[Outcome],
    horizon_ns: u64,
    step_ns: &[u64],
) -> TimeToTrain {
    let steps = tokens.div_ceil(tokens_per_step.max(1));
    let times: Vec<Option<u64>> = outs
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let step = step_ns.get(i % step_ns.len().max(1)).copied().unwrap_or(0);
            let g = goodput(o, horizon_ns);
            let t = steps as f64 * step as f64 / g;
            (g > 0.0 && t.is_finite() && t < u64::MAX as f64).then(|| t.round() as u64)
        })
        .collect();
    // Unfinished trials sort last: they are the slowest.
    let mut sorted: Vec<u64> = times.iter().map(|t| t.unwrap_or(u64::MAX)).collect();
    sorted.sort_unstable();
    let at = |p| nearest_rank(&sorted, p).filter(|&t| t != u64::MAX);
    let finished: Vec<u64> = times.iter().flatten().copied().collect();
    let mean_time_ns = (finished.len() == times.len() && !finished.is_empty()).then(|| {
        (finished.iter().map(|&t| u128::from(t)).sum::<u128>() / finished.len() as u128) as u64
    });
    TimeToTrain {
        tokens,
        tokens_per_step,
        steps,
        time_p10_ns: at(10.0),
        time_p50_ns: at(50.0),
        time_p90_ns: at(90.0),
        mean_time_ns,
        goodput: percentiles_f64(outs.iter().map(|o| goodput(o, horizon_ns)).collect()),
        ettr: percentiles_f64(outs.iter().map(|o| ettr(o, horizon_ns)).collect()),
        trials: outs.len() as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(work_ns: u64) -> Outcome {
        Outcome {
            work_ns,
            useful_wall_ns: work_ns,
            ..Outcome::default()
        }
    }

    #[test]
    fn without_loss_every_percentile_is_steps_times_the_step() {
        let h = 1_000_000;
        let outs = vec![out(h); 20];
        let t = time_to_train(1_000, 100, &outs, h, &[7_000]);
        assert_eq!(t.steps, 10);
        assert_eq!(t.time_p10_ns, Some(70_000));
        assert_eq!(t.time_p50_ns, Some(70_000));
        assert_eq!(t.time_p90_ns, Some(70_000));
        assert_eq!(t.mean_time_ns, Some(70_000));
        assert_eq!(t.goodput.p50, 1.0);
    }

    #[test]
    fn each_trial_carries_its_own_goodput_and_step() {
        let h = 1_000;
        // Goodputs 0.5 .. 1.0 over ten trials, steps alternating 10 and 20 ns.
        let outs: Vec<Outcome> = (0..10)
            .map(|i| out(500 + 50 * i + u64::from(i == 9) * 50))
            .collect();
        let t = time_to_train(40, 10, &outs, h, &[10, 20]);
        assert_eq!(t.steps, 4);
        let mut want: Vec<u64> = outs
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let step = if i % 2 == 0 { 10.0 } else { 20.0 };
                (4.0 * step / (o.work_ns as f64 / 1000.0)).round() as u64
            })
            .collect();
        want.sort_unstable();
        assert_eq!(t.time_p10_ns, Some(want[0]));
        assert_eq!(t.time_p50_ns, Some(want[4]));
        assert_eq!(t.time_p90_ns, Some(want[8]));
        assert!(t.goodput.p10 <= t.goodput.p50 && t.goodput.p50 <= t.goodput.p90);
    }

    #[test]
    fn a_trial_that_keeps_nothing_never_finishes() {
        let h = 1_000;
        let mut outs = vec![out(1_000); 9];
        outs.push(out(0));
        let t = time_to_train(10, 1, &outs, h, &[5]);
        assert_eq!(t.time_p50_ns, Some(50));
        assert_eq!(t.time_p90_ns, Some(50));
        assert_eq!(t.mean_time_ns, None);
        let all_lost = time_to_train(10, 1, &[out(0)], h, &[5]);
        assert_eq!(all_lost.time_p50_ns, None);
    }
}
