//! Allocated device memory over a step, predicted against measured (a CUDA memory snapshot's
//! replay), where the two do not share a clock: each side's step is mapped onto [0, 1] and
//! cut into the same number of equal bins, and each bin compares the most memory each side
//! held in it (the value carried into the bin counts, so a bin without a change still holds
//! what the step held there). The largest difference is named by the predicted op running
//! then. Allocated bytes are what `torch.cuda.memory_allocated` counts; the predicted side
//! leaves out twin's `reserved` category (CUDA context, allocator slack), as the peak does.

use serde::Serialize;

/// Bins a step is cut into by default.
pub const TIMELINE_BINS: usize = 20;

/// One bin of the step.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimelineBin {
    /// The bin's start and end as fractions of each side's step.
    pub from: f64,
    pub to: f64,
    /// The most allocated bytes each side held in the bin.
    pub predicted_bytes: u64,
    pub measured_bytes: u64,
    /// What the predicted rank ran at the predicted maximum of the bin (e.g.
    /// "backward mb 1 layers 3-3"), when the caller knows.
    pub predicted_op: Option<String>,
}

impl TimelineBin {
    /// measured - predicted, in bytes.
    pub fn difference_bytes(&self) -> i128 {
        i128::from(self.measured_bytes) - i128::from(self.predicted_bytes)
    }
}

/// The two timelines side by side.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemoryTimeline {
    pub bins: Vec<TimelineBin>,
    /// The mean over bins of |measured - predicted| / measured peak.
    pub mean_abs_error: f64,
    /// The bin of the largest |measured - predicted| (index into `bins`).
    pub largest: usize,
}

/// A timeline as (time, allocated bytes) after each change, in time order, over a step
/// from `start` to `end` (any unit, the same for both).
pub struct Samples<'a> {
    pub points: &'a [(f64, u64)],
    pub start: f64,
    pub end: f64,
}

impl Samples<'_> {
    /// The most bytes held in each of `bins` equal bins of the step, and the index of the
    /// sample that reached it (`None`: the value carried in from before the bin).
    fn bin_max(&self, bins: usize) -> Vec<(u64, Option<usize>)> {
        let span = self.end - self.start;
        let frac = |t: f64| {
            if span > 0.0 {
                ((t - self.start) / span).clamp(0.0, 1.0)
            } else {
                0.0
            }
        };
        let mut out = vec![(0u64, None); bins];
        // The value held before the first sample of each bin.
        let mut held = self.points.first().map_or(0, |p| p.1);
        let mut i = 0;
        for (b, slot) in out.iter_mut().enumerate() {
            let hi = (b + 1) as f64 / bins as f64;
            *slot = (held, None);
            while let Some(&(t, bytes)) = self.points.get(i) {
                let f = frac(t);
                if f >= hi && b + 1 < bins {
                    break;
                }
                if bytes > slot.0 {
                    *slot = (bytes, Some(i));
                }
                held = bytes;
                i += 1;
            }
        }
        out
    }
}

/// Compares the two timelines in `bins` bins (module doc). `name_predicted` names the
/// predicted op at a sample's time. `None` when either side has no samples or `bins` is 0.
pub fn compare_memory_timelines(
    predicted: &Samples,
    measured: &Samples,
    bins: usize,
    name_predicted: impl Fn(f64) -> Option<String>,
) -> Option<MemoryTimeline> {
    if bins == 0 || predicted.points.is_empty() || measured.points.is_empty() {
        return None;
    }
    let p = predicted.bin_max(bins);
    let m = measured.bin_max(bins);
    let peak = m.iter().map(|x| x.0).max().unwrap_or(0).max(1) as f64;
    let rows: Vec<TimelineBin> = p
        .iter()
        .zip(&m)
        .enumerate()
        .map(|(b, (&(pb, pi), &(mb, _)))| {
            let t = match pi.and_then(|i| predicted.points.get(i)) {
                Some(&(t, _)) => t,
                None => {
                    predicted.start
                        + (predicted.end - predicted.start) * (b as f64 + 0.5) / bins as f64
                }
            };
            TimelineBin {
                from: b as f64 / bins as f64,
                to: (b + 1) as f64 / bins as f64,
                predicted_bytes: pb,
                measured_bytes: mb,
                predicted_op: name_predicted(t),
            }
        })
        .collect();
    let mean_abs_error = rows
        .iter()
        .map(|r| r.difference_bytes().unsigned_abs() as f64 / peak)
        .sum::<f64>()
        / bins as f64;
    // The first of equal differences.
    let largest = rows
        .iter()
        .enumerate()
        .fold((0, 0u128), |(bi, bd), (i, r)| {
            let d = r.difference_bytes().unsigned_abs();
            if d > bd {
                (i, d)
            } else {
                (bi, bd)
            }
        })
        .0;
    Some(MemoryTimeline {
        bins: rows,
        mean_abs_error,
        largest,
    })
}

impl MemoryTimeline {
    /// The comparison as a table for people, the largest difference named.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\n{:<14} {:>14} {:>14} {:>10}",
            "memory, step", "predicted GiB", "measured GiB", "diff GiB"
        );
        for r in &self.bins {
            let _ = writeln!(
                out,
                "{:>5.0}-{:<3.0}%    {:>14.2} {:>14.2} {:>+10.2}",
                100.0 * r.from,
                100.0 * r.to,
                gib(r.predicted_bytes),
                gib(r.measured_bytes),
                r.difference_bytes() as f64 / f64::from(1u32 << 30)
            );
        }
        if let Some(r) = self.bins.get(self.largest) {
            let _ = writeln!(
                out,
                "largest divergence {:+.2} GiB at {:.0}-{:.0}% of the step{}; mean |error| {:.1}% \
                 of the measured peak",
                r.difference_bytes() as f64 / f64::from(1u32 << 30),
                100.0 * r.from,
                100.0 * r.to,
                r.predicted_op
                    .as_deref()
                    .map_or(String::new(), |o| format!(" (predicted: {o})")),
                100.0 * self.mean_abs_error
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_hold_the_most_each_side_held_and_name_the_largest_difference() {
        // Predicted over 0..100: 10 until 30, 50 until 60, then 20.
        let p = [(0.0, 10), (30.0, 50), (60.0, 20)];
        // Measured over 1000..2000 (another clock): 10, 80 from 1300 to 1600, then 20.
        let m = [(1000.0, 10), (1300.0, 80), (1600.0, 20)];
        let t = compare_memory_timelines(
            &Samples {
                points: &p,
                start: 0.0,
                end: 100.0,
            },
            &Samples {
                points: &m,
                start: 1000.0,
                end: 2000.0,
            },
            4,
            |t| Some(format!("op at {t}")),
        )
        .unwrap();
        // Bins of 25: [0,25) 10 | 10; [25,50) 50 | 80; [50,75) 50 (carried in) | 80; [75,100] 20 | 20.
        let got: Vec<(u64, u64)> = t
            .bins
            .iter()
            .map(|b| (b.predicted_bytes, b.measured_bytes))
            .collect();
        assert_eq!(got, vec![(10, 10), (50, 80), (50, 80), (20, 20)]);
        // Two bins differ by 30; the first is named, by the sample that reached 50 (t = 30).
        assert_eq!(t.largest, 1);
        assert_eq!(t.bins[1].predicted_op.as_deref(), Some("op at 30"));
        // Carried in: named at the bin's middle, 62.5.
        assert_eq!(t.bins[2].predicted_op.as_deref(), Some("op at 62.5"));
        // Mean |error|: (0 + 30 + 30 + 0) / 4 over the measured peak 80.
        assert!((t.mean_abs_error - 60.0 / 4.0 / 80.0).abs() < 1e-12);
        assert!(t.to_text().contains("largest divergence"));
    }

    #[test]
    fn empty_sides_and_no_bins_give_nothing() {
        let s = Samples {
            points: &[(0.0, 1)],
            start: 0.0,
            end: 1.0,
        };
        let e = Samples {
            points: &[],
            start: 0.0,
            end: 1.0,
        };
        assert!(compare_memory_timelines(&s, &e, 4, |_| None).is_none());
        assert!(compare_memory_timelines(&e, &s, 4, |_| None).is_none());
        assert!(compare_memory_timelines(&s, &s, 0, |_| None).is_none());
        // A zero-length step puts everything in the first bin.
        let z = Samples {
            points: &[(5.0, 7)],
            start: 5.0,
            end: 5.0,
        };
        let t = compare_memory_timelines(&z, &z, 2, |_| None).unwrap();
        assert_eq!(t.bins[0].predicted_bytes, 7);
        assert_eq!(t.bins[1].predicted_bytes, 7);
    }
}
