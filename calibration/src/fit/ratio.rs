//! Compute slowdown under overlapping communication: the same GEMM timed alone and while a
//! collective runs on other threads; `slowdown = 1 - mean(alone) / mean(overlapped)` (the
//! profile's `overlap.compute_slowdown`, a fraction of the rate lost). The interval comes from
//! the delta method on the ratio of two independent means, with Welch-Satterthwaite degrees of
//! freedom for the Student-t quantile.

use super::{linear::t95, Estimate, FitError};

fn mean_var(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let m = xs.iter().sum::<f64>() / n;
    let v = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0);
    (m, v)
}

/// Slowdown of `overlapped` timings relative to `alone` timings (both of the same work).
pub fn slowdown(alone: &[f64], overlapped: &[f64]) -> Result<Estimate, FitError> {
    for (what, xs) in [("alone", alone), ("overlapped", overlapped)] {
        if xs.len() < 2 {
            return Err(FitError::TooFewSamples {
                have: xs.len(),
                need: 2,
            });
        }
        if xs.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
            return Err(FitError::Degenerate(format!("non-positive {what} timing")));
        }
    }
    let (ma, va) = mean_var(alone);
    let (mo, vo) = mean_var(overlapped);
    let (na, no) = (alone.len() as f64, overlapped.len() as f64);
    let r = ma / mo;
    let (ea, eo) = (va / na / (ma * ma), vo / no / (mo * mo));
    let se = r * (ea + eo).sqrt();
    // Welch-Satterthwaite on the relative variances.
    let dof = if ea + eo > 0.0 {
        ((ea + eo).powi(2) / (ea * ea / (na - 1.0) + eo * eo / (no - 1.0))).max(1.0)
    } else {
        na + no - 2.0
    };
    let t = t95(dof.floor() as usize)?;
    let s = 1.0 - r;
    Ok(Estimate {
        value: s,
        ci95: [s - t * se, s + t * se],
    })
}

/// The share of a core a compute thread takes against a transfer beside it, from the same
/// transfers timed with their cores otherwise idle and beside a compute thread: shared by
/// weight, the transfer gets `1 / (1 + w)` of the core, so `busy = idle x (1 + w)` and
/// `w = s / (1 - s)` for the [`slowdown`] `s` of busy against idle. Rows (`(idle, busy)`, one
/// per transfer and size) are pooled after dividing each by its own idle mean; the interval
/// is the slowdown's, mapped.
pub fn sharing_weight(rows: &[(&[f64], &[f64])]) -> Result<Estimate, FitError> {
    let mut idle = Vec::new();
    let mut busy = Vec::new();
    for (i, b) in rows.iter().filter(|(i, _)| !i.is_empty()) {
        let m = i.iter().sum::<f64>() / i.len() as f64;
        if !(m.is_finite() && m > 0.0) {
            return Err(FitError::Degenerate("non-positive idle timing".into()));
        }
        idle.extend(i.iter().map(|x| x / m));
        busy.extend(b.iter().map(|x| x / m));
    }
    let s = slowdown(&idle, &busy)?;
    let w = |s: f64| {
        if s < 1.0 {
            s / (1.0 - s)
        } else {
            f64::INFINITY
        }
    };
    if s.value >= 1.0 {
        return Err(FitError::Degenerate(
            "the transfers beside compute never finished faster than it".into(),
        ));
    }
    Ok(Estimate {
        value: w(s.value),
        ci95: [w(s.ci95[0]), w(s.ci95[1])],
    })
}

/// The share of its wall time a thread spent on the CPU, from samples of both (`wall[i]` and
/// `cpu[i]` of one sample, `bench::p2p_cpu`): the mean of the per-sample ratios, with a
/// Student-t interval, both clipped to [0, 1] (a thread is on one core at most).
pub fn busy_share(wall: &[f64], cpu: &[f64]) -> Result<Estimate, FitError> {
    if wall.len() != cpu.len() {
        return Err(FitError::Degenerate(format!(
            "{} wall times against {} CPU times",
            wall.len(),
            cpu.len()
        )));
    }
    if wall.len() < 2 {
        return Err(FitError::TooFewSamples {
            have: wall.len(),
            need: 2,
        });
    }
    if wall.iter().any(|w| !(w.is_finite() && *w > 0.0))
        || cpu.iter().any(|c| !(c.is_finite() && *c >= 0.0))
    {
        return Err(FitError::Degenerate(
            "a non-positive wall time or a negative CPU time".into(),
        ));
    }
    let ratios: Vec<f64> = wall.iter().zip(cpu).map(|(w, c)| c / w).collect();
    let (m, v) = mean_var(&ratios);
    let half = t95(ratios.len() - 1)? * (v / ratios.len() as f64).sqrt();
    Ok(Estimate {
        value: m,
        ci95: [m - half, m + half],
    }
    .clamp(0.0, 1.0))
}

/// Cores' worth of memory-bound work a machine serves at once, from the same work timed on
/// one core (`alone`) and on two at once (`pair`, both cores' timings): two cores each run at
/// `1 - s` of their solo rate for the [`slowdown`] `s`, so the machine serves `2 (1 - s)`.
/// The value and its interval are clipped to [1, 2]: one core alone is never slowed, two are
/// never faster than alone (`bench::memory_pair`, the profile's `[host] memory_cores`).
pub fn memory_cores(alone: &[f64], pair: &[f64]) -> Result<Estimate, FitError> {
    Ok(slowdown(alone, pair)?
        .map_monotone(|s| 2.0 * (1.0 - s))
        .clamp(1.0, 2.0))
}

#[cfg(test)]
mod tests {
    use super::super::TestRng;
    use super::*;

    fn sample(rng: &mut TestRng, mean: f64, sd: f64, n: usize) -> Vec<f64> {
        (0..n).map(|_| mean + sd * rng.normal()).collect()
    }

    #[test]
    fn recovers_slowdown_and_covers_it() {
        // Alone 10 ms, overlapped 12.5 ms: slowdown 1 - 10/12.5 = 0.2.
        let mut rng = TestRng::new(5);
        let datasets = 200;
        let mut hits = 0;
        for _ in 0..datasets {
            let a = sample(&mut rng, 10e6, 0.4e6, 12);
            let o = sample(&mut rng, 12.5e6, 0.6e6, 12);
            let s = slowdown(&a, &o).unwrap();
            assert!((s.value - 0.2).abs() < 0.06, "{s:?}");
            hits += usize::from(s.covers(0.2));
        }
        let r = hits as f64 / f64::from(datasets);
        assert!((0.90..=0.99).contains(&r), "coverage {r}");
    }

    #[test]
    fn too_few_samples_is_an_error() {
        assert!(slowdown(&[1.0], &[1.0, 2.0]).is_err());
        assert!(slowdown(&[1.0, -1.0], &[1.0, 2.0]).is_err());
    }

    #[test]
    fn recovers_a_sharing_weight_over_rows_of_different_sizes() {
        // Transfers of 20 and 80 us slowed by 1 + w with w = 0.25, noise 5%; 200 trials.
        let mut rng = TestRng::new(7);
        let mut covered = 0;
        for _ in 0..200 {
            let rows: Vec<(Vec<f64>, Vec<f64>)> = [20.0, 80.0]
                .iter()
                .map(|&t| {
                    (
                        sample(&mut rng, t, 0.05 * t, 40),
                        sample(&mut rng, 1.25 * t, 0.05 * 1.25 * t, 40),
                    )
                })
                .collect();
            let refs: Vec<(&[f64], &[f64])> = rows.iter().map(|(i, b)| (&i[..], &b[..])).collect();
            let w = sharing_weight(&refs).unwrap();
            assert!((w.value - 0.25).abs() < 0.05, "{w:?}");
            assert!(w.ci95[0] <= w.value && w.value <= w.ci95[1]);
            covered += usize::from(w.ci95[0] <= 0.25 && 0.25 <= w.ci95[1]);
        }
        assert!((180..=200).contains(&covered), "covered {covered} of 200");
        // No slowdown: a weight near zero, its interval around it.
        let i = sample(&mut rng, 50.0, 2.0, 60);
        let b = sample(&mut rng, 50.0, 2.0, 60);
        let w = sharing_weight(&[(&i, &b)]).unwrap();
        assert!(w.value.abs() < 0.05 && w.ci95[0] < 0.0, "{w:?}");
        // Too few samples is an error, not a number.
        assert!(sharing_weight(&[(&[1.0], &[2.0])]).is_err());
    }

    #[test]
    fn recovers_memory_cores_and_covers_them() {
        // Alone 100 us, a pair 125 us each: 2 x 100 / 125 = 1.6 cores' worth; noise 6%, 36
        // alone and 72 pair samples (two cores), as `bench::memory_pair` takes; 200 trials.
        let mut rng = TestRng::new(13);
        let mut covered = 0;
        for _ in 0..200 {
            let a = sample(&mut rng, 100e3, 6e3, 36);
            let p = sample(&mut rng, 125e3, 7.5e3, 72);
            let c = memory_cores(&a, &p).unwrap();
            assert!((c.value - 1.6).abs() < 0.08, "{c:?}");
            covered += usize::from(c.covers(1.6));
        }
        assert!((180..=199).contains(&covered), "covered {covered} of 200");
        // No contention: two cores' worth, the interval clipped at 2.
        let a = sample(&mut rng, 100e3, 3e3, 36);
        let c = memory_cores(&a, &a).unwrap();
        assert!(c.value <= 2.0 && c.ci95[1] <= 2.0 && c.value > 1.9, "{c:?}");
        // Worse than taking turns: clipped at one core.
        let p = sample(&mut rng, 300e3, 3e3, 72);
        assert_eq!(memory_cores(&a, &p).unwrap().value, 1.0);
        assert!(memory_cores(&[1.0], &[1.0, 2.0]).is_err());
    }

    #[test]
    fn recovers_a_busy_share_and_covers_it() {
        // Samples of 0.5-2 ms of which 45% on the CPU, the ratio's noise 0.04; 200 trials of
        // 36 samples.
        let mut rng = TestRng::new(11);
        let mut covered = 0;
        for _ in 0..200 {
            let wall: Vec<f64> = (0..36)
                .map(|i| 0.5e6 + 1.5e6 * f64::from(i % 4) / 3.0)
                .collect();
            let cpu: Vec<f64> = wall
                .iter()
                .map(|w| w * (0.45 + 0.04 * rng.normal()))
                .collect();
            let s = busy_share(&wall, &cpu).unwrap();
            assert!((s.value - 0.45).abs() < 0.03, "{s:?}");
            covered += usize::from(s.covers(0.45));
        }
        assert!((180..=199).contains(&covered), "covered {covered} of 200");
        // A thread always on the CPU: the share and its interval stay within [0, 1].
        let s = busy_share(&[1.0, 2.0, 3.0], &[1.0, 2.05, 2.95]).unwrap();
        assert!(
            s.value <= 1.0 && s.ci95[1] <= 1.0 && s.covers(s.value),
            "{s:?}"
        );
        // Mismatched, too few or impossible samples are errors.
        assert!(busy_share(&[1.0, 2.0], &[1.0]).is_err());
        assert!(busy_share(&[1.0], &[0.5]).is_err());
        assert!(busy_share(&[1.0, 0.0], &[0.5, 0.5]).is_err());
        assert!(busy_share(&[1.0, 2.0], &[0.5, -0.5]).is_err());
    }
}
