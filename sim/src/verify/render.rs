//! The comparison as text for people: headline numbers with signed errors, peak memory per
//! rank, then the op groups and single ops with the largest errors.

use super::{Comparison, OpError};
use std::fmt::Write as _;

fn pct(e: Option<f64>) -> String {
    e.map_or_else(|| "n/a".into(), |e| format!("{:+.1}%", e * 100.0))
}

fn ms(s: f64) -> String {
    format!("{:.3} ms", s * 1e3)
}

fn op_line(o: &OpError) -> String {
    format!(
        "rank {} op {} ({}): predicted {}, measured {} ({})",
        o.rank,
        o.op,
        o.name,
        ms(o.predicted_s),
        ms(o.measured_s),
        pct(o.error)
    )
}

impl Comparison {
    /// The comparison for a terminal; errors are (measured - predicted) / measured.
    pub fn to_text(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "                 predicted     measured      error");
        let _ = writeln!(
            o,
            "step time        {:<13} {:<13} {}",
            ms(self.step_time_predicted_s),
            ms(self.step_time_measured_s),
            pct(Some(self.step_time_error))
        );
        let _ = writeln!(
            o,
            "bubble           {:<13} {:<13} {:+.1} points",
            format!("{:.1}%", self.bubble_fraction_predicted * 100.0),
            format!("{:.1}%", self.bubble_fraction_measured * 100.0),
            self.bubble_fraction_error_points
        );
        let _ = writeln!(
            o,
            "exposed comm     {:<13} {:<13} {:+.1} points",
            format!(
                "{:.1}% {}",
                self.exposed_comm_fraction_predicted * 100.0,
                ms(self.exposed_comm_predicted_s)
            ),
            format!(
                "{:.1}% {}",
                self.exposed_comm_fraction_measured * 100.0,
                ms(self.exposed_comm_measured_s)
            ),
            self.exposed_comm_error_points
        );
        for r in &self.peak_memory {
            let _ = writeln!(
                o,
                "peak mem rank {:<3}{:<13} {:<13} {}",
                r.rank,
                format!("{:.2} MiB", r.predicted_bytes as f64 / 1048576.0),
                format!("{:.2} MiB", r.measured_bytes as f64 / 1048576.0),
                pct(Some(r.error))
            );
        }
        if !self.op_groups.is_empty() {
            let _ = writeln!(
                o,
                "ops by kind (largest total |error| first; totals over ranks):"
            );
            if self.op_times_exclude_core_wait {
                let _ = writeln!(
                    o,
                    "  (each op's own time: its span less its waiting for a CPU core shared with other ranks)"
                );
            }
            for g in self.op_groups.iter().take(12) {
                let _ = writeln!(
                    o,
                    "  {:<36} {:>5} ops  predicted {:>12}  measured {:>12}  {}",
                    g.group,
                    g.ops,
                    ms(g.predicted_s),
                    ms(g.measured_s),
                    pct(g.error)
                );
            }
        }
        if !self.largest_op_errors.is_empty() {
            let _ = writeln!(o, "largest op errors:");
            for e in &self.largest_op_errors {
                let _ = writeln!(o, "  {}", op_line(e));
            }
        }
        if self.unmatched_ops > 0 {
            let _ = writeln!(
                o,
                "note: {} ops appear in one trace only",
                self.unmatched_ops
            );
        }
        o
    }
}
