//! Prediction against measurement: a predicted and a measured step of the same schedule (each
//! a [`Report`] and a [`Trace`]) in, one [`Comparison`] out: step time, bubble, exposed
//! communication and peak memory per rank side by side with signed errors, and the ops with
//! the largest errors grouped by kind (GEMM compute by phase, collectives by kind and size,
//! p2p by direction and size), matched op by op through (rank, op index). Pure: no I/O, so
//! `twin verify` and the TUI compute the same thing.
//!
//! Sign convention, everywhere: error = (measured - predicted) / measured, so a positive
//! error means the run took longer (or held more) than predicted; bubble and exposed
//! communication errors are (measured - predicted) in percentage points.

mod classes;
mod cores;
mod critical;
mod groups;
mod meetings;
mod memory_timeline;
mod render;
mod steps;
#[cfg(test)]
mod tests;

pub use classes::{
    compare_classes, predicted_classes, ClassComparison, ClassRow, ClassTimes, CollectiveCall,
    CollectiveRow, WorkClass,
};
pub use cores::{core_activity, CoreActivities, CoreActivity, Holes, HolesByThreads};
pub use critical::{critical_path, CriticalPath, CriticalPaths};
pub use groups::{group_of, size_bucket};
pub use meetings::{collective_meetings, CollectiveMeetings, CollectiveMeetingsBoth};
pub use memory_timeline::{
    compare_memory_timelines, MemoryTimeline, Samples, TimelineBin, TIMELINE_BINS,
};
pub use steps::{median, scaled_median, summarize_steps, StepSummary};

use crate::report::Report;
use crate::schedule::Schedule;
use crate::trace::Trace;
use serde::Serialize;
use std::collections::BTreeMap;

/// One side of a comparison: a step's report and its trace.
#[derive(Clone, Copy)]
pub struct Side<'a> {
    pub report: &'a Report,
    pub trace: &'a Trace,
}

/// How to compare.
#[derive(Clone, Debug, PartialEq)]
pub struct CompareOptions {
    /// How many individual ops with the largest absolute errors to list.
    pub top_ops: usize,
    /// The measured step time to compare with, when it is not the measured report's own
    /// (`twin verify` uses the median of the steps after warm-up).
    pub measured_step_time_s: Option<f64>,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            top_ops: 10,
            measured_step_time_s: None,
        }
    }
}

/// Peak device memory of one rank, both ways.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankMemory {
    pub rank: u32,
    pub predicted_bytes: u64,
    pub measured_bytes: u64,
    /// (measured - predicted) / measured.
    pub error: f64,
}

/// One op, both ways.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpError {
    pub rank: u32,
    pub op: u32,
    pub name: String,
    pub group: String,
    pub predicted_s: f64,
    pub measured_s: f64,
    /// (measured - predicted) / measured; `None` when the measured duration is zero.
    pub error: Option<f64>,
}

/// The ops of one kind, both ways.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpGroup {
    /// "gemm fwd", "all-reduce Tp 64.0KiB-256.0KiB", "p2p recv 16.0KiB-64.0KiB", ...
    pub group: String,
    /// "gemm", "memory-bound", "collective", "p2p", "alloc", "free", "checkpoint".
    pub kind: String,
    pub ops: u64,
    pub predicted_s: f64,
    pub measured_s: f64,
    /// (measured - predicted) / measured of the totals; `None` when nothing was measured.
    pub error: Option<f64>,
    /// Sum over the group's ops of |measured - predicted|: what the table is sorted by.
    pub abs_error_s: f64,
    /// The op of the group with the largest absolute error.
    pub worst: Option<OpError>,
}

/// A predicted step against a measured one. JSON field names are stable.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    pub step_time_predicted_s: f64,
    pub step_time_measured_s: f64,
    /// (measured - predicted) / measured; 0 when nothing was measured.
    pub step_time_error: f64,
    pub bubble_fraction_predicted: f64,
    pub bubble_fraction_measured: f64,
    /// (measured - predicted) * 100.
    pub bubble_fraction_error_points: f64,
    pub exposed_comm_fraction_predicted: f64,
    pub exposed_comm_fraction_measured: f64,
    /// (measured - predicted) * 100.
    pub exposed_comm_error_points: f64,
    /// Exposed communication time per step (fraction times step time).
    pub exposed_comm_predicted_s: f64,
    pub exposed_comm_measured_s: f64,
    /// The per-rank peak error of largest magnitude (the overall peaks when the reports list
    /// no ranks).
    pub peak_memory_error: f64,
    pub peak_memory: Vec<RankMemory>,
    /// Sorted by `abs_error_s`, largest first.
    pub op_groups: Vec<OpGroup>,
    /// The individual ops with the largest |measured - predicted|, largest first.
    pub largest_op_errors: Vec<OpError>,
    /// Ops present in one trace only.
    pub unmatched_ops: u64,
    /// True when `op_groups` and `largest_op_errors` time some op by less than its span: its
    /// own time, without what it waited for a CPU core that other ranks shared (host profiles;
    /// the traces' `solo_ns`).
    pub op_times_exclude_core_wait: bool,
}

/// (measured - predicted) / measured, 0 when both are zero and `None` when only the measured
/// value is zero.
pub fn relative_error(predicted: f64, measured: f64) -> Option<f64> {
    if measured > 0.0 {
        Some((measured - predicted) / measured)
    } else if predicted == 0.0 {
        Some(0.0)
    } else {
        None
    }
}

/// Which thresholds a comparison must meet (`None`: not checked).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Thresholds {
    /// Largest allowed |step_time_error| (a fraction).
    pub step_time_error: Option<f64>,
    /// Largest allowed |peak_memory_error| (a fraction).
    pub peak_memory_error: Option<f64>,
    /// Largest allowed |bubble_fraction_error_points|.
    pub bubble_error_points: Option<f64>,
}

impl Comparison {
    /// Every threshold the comparison exceeds, as a sentence naming it (empty: all met).
    pub fn violations(&self, t: &Thresholds) -> Vec<String> {
        // NaN never passes a threshold.
        let exceeds = |v: f64, max: f64| v.is_nan() || v.abs() > max;
        let mut out = Vec::new();
        if let Some(max) = t.step_time_error {
            if exceeds(self.step_time_error, max) {
                out.push(format!(
                    "step time error {:+.1}% exceeds --max-step-time-error {max}",
                    self.step_time_error * 100.0
                ));
            }
        }
        if let Some(max) = t.peak_memory_error {
            if exceeds(self.peak_memory_error, max) {
                out.push(format!(
                    "peak memory error {:+.1}% exceeds --max-peak-memory-error {max}",
                    self.peak_memory_error * 100.0
                ));
            }
        }
        if let Some(max) = t.bubble_error_points {
            if exceeds(self.bubble_fraction_error_points, max) {
                out.push(format!(
                    "bubble error {:+.1} points exceeds --max-bubble-error-points {max}",
                    self.bubble_fraction_error_points
                ));
            }
        }
        out
    }
}

/// Ranks listed by a report's memory entries ("3", or ranges such as "0-7,16-23").
fn rank_peaks(report: &Report) -> BTreeMap<u32, u64> {
    let mut out = BTreeMap::new();
    for e in &report.ranks {
        if let Some(r) = e.rank {
            out.insert(r, e.peak_memory_bytes);
        }
        for part in e.ranks.iter().flat_map(|s| s.split(',')) {
            let mut ends = part.trim().splitn(2, '-');
            let lo = ends.next().and_then(|x| x.trim().parse::<u32>().ok());
            let hi = ends.next().and_then(|x| x.trim().parse::<u32>().ok());
            match (lo, hi) {
                (Some(lo), Some(hi)) if hi >= lo && hi - lo < 1 << 20 => {
                    for r in lo..=hi {
                        out.insert(r, e.peak_memory_bytes);
                    }
                }
                (Some(lo), None) => {
                    out.insert(lo, e.peak_memory_bytes);
                }
                _ => {}
            }
        }
    }
    out
}

/// Compare a predicted step with a measured step of `schedule`.
pub fn compare(
    schedule: &Schedule,
    predicted: Side,
    measured: Side,
    opts: &CompareOptions,
) -> Comparison {
    let (p, m) = (predicted.report, measured.report);
    let step_p = p.step_time_s;
    let step_m = opts.measured_step_time_s.unwrap_or(m.step_time_s);
    let pred_peaks = rank_peaks(p);
    let meas_peaks = rank_peaks(m);
    let peak_memory: Vec<RankMemory> = pred_peaks
        .iter()
        .filter_map(|(&rank, &pb)| {
            let mb = *meas_peaks.get(&rank)?;
            Some(RankMemory {
                rank,
                predicted_bytes: pb,
                measured_bytes: mb,
                error: relative_error(pb as f64, mb as f64).unwrap_or(-1.0),
            })
        })
        .collect();
    let peak_memory_error = peak_memory
        .iter()
        .map(|r| r.error)
        .fold(None, |acc: Option<f64>, e| match acc {
            Some(a) if a.abs() >= e.abs() => Some(a),
            _ => Some(e),
        })
        .unwrap_or_else(|| {
            relative_error(p.peak_memory_bytes as f64, m.peak_memory_bytes as f64).unwrap_or(-1.0)
        });
    let (op_groups, largest_op_errors, unmatched_ops) =
        groups::compare_ops(schedule, predicted.trace, measured.trace, opts.top_ops);
    Comparison {
        step_time_predicted_s: step_p,
        step_time_measured_s: step_m,
        step_time_error: relative_error(step_p, step_m).unwrap_or(0.0),
        bubble_fraction_predicted: p.bubble_fraction,
        bubble_fraction_measured: m.bubble_fraction,
        bubble_fraction_error_points: (m.bubble_fraction - p.bubble_fraction) * 100.0,
        exposed_comm_fraction_predicted: p.exposed_comm_fraction,
        exposed_comm_fraction_measured: m.exposed_comm_fraction,
        exposed_comm_error_points: (m.exposed_comm_fraction - p.exposed_comm_fraction) * 100.0,
        exposed_comm_predicted_s: p.exposed_comm_fraction * step_p,
        exposed_comm_measured_s: m.exposed_comm_fraction * m.step_time_s,
        peak_memory_error,
        peak_memory,
        op_groups,
        largest_op_errors,
        unmatched_ops,
        op_times_exclude_core_wait: groups::any_core_wait(predicted.trace, measured.trace),
    }
}
