//! The machine check of `twin verify step`: the scenario's GEMMs, optimizer update and transfer
//! timed on this machine around the runs, and the load other work put on it, so that a
//! step-time error can be told apart from the machine's drift. Beside `verify::step`,
//! which runs and compares.

use crate::check::{GemmCheck, StateCheck, TransferCheck};
use crate::load::CpuLoad;

/// The profile's prediction of the scenario's GEMMs against this machine now: before each run
/// and after the last (host backend; `crate::check`).
#[derive(Default, serde::Serialize)]
pub(crate) struct MachineCheck {
    /// Before the first run (`runs[0]`).
    before: Option<GemmCheck>,
    pub(crate) after: Option<GemmCheck>,
    /// Before each run.
    runs: Vec<Option<GemmCheck>>,
    /// The scenario's largest optimizer update against the profile's price at the model's
    /// cache distance, before the first run and after the last (profiles with
    /// `memory.state_*`; `crate::check::state_check`).
    pub(crate) optimizer_before: Option<StateCheck>,
    pub(crate) optimizer_after: Option<StateCheck>,
    /// A two-rank call of the scenario's most frequent ring collective against the profile's
    /// price, before the first run and after the last (`crate::check::
    /// transfer_check`; null on one core).
    pub(crate) transfer_before: Option<TransferCheck>,
    pub(crate) transfer_after: Option<TransferCheck>,
    /// During each run: CPU time other processes used, and time the hypervisor stole, as
    /// fractions of the machine's cores (`crate::load`; null off Linux).
    pub(crate) load: Vec<Option<CpuLoad>>,
    /// The step-time error with each run's steps scaled to the profile's machine speed by the
    /// check before it (steps x predicted / measured GEMM time): the model's error with the
    /// machine's drift taken out, assuming the whole step moves with its GEMMs.
    step_time_error_at_profile_speed: Option<f64>,
}

impl MachineCheck {
    /// Records the check before run `i` (the first is also `before`).
    pub(crate) fn before_run(&mut self, c: Option<GemmCheck>) {
        if self.runs.is_empty() {
            self.before = c.clone();
        }
        self.runs.push(c);
    }

    /// Sets `step_time_error_at_profile_speed` when every run was checked.
    pub(crate) fn adjust(&mut self, steps: &[Vec<f64>], warmup: usize, predicted_s: f64) {
        let factors: Option<Vec<f64>> = self
            .runs
            .iter()
            .map(|c| {
                c.as_ref()
                    .filter(|c| c.measured_s > 0.0)
                    .map(|c| c.predicted_s / c.measured_s)
            })
            .collect();
        self.step_time_error_at_profile_speed = factors
            .filter(|f| f.len() == steps.len() && !f.is_empty())
            .map(|f| twin_sim::verify::scaled_median(steps, warmup, &f))
            .filter(|&m| m > 0.0)
            .map(|m| (m - predicted_s) / m);
    }

    /// Two lines, or nothing when there was no check.
    pub(crate) fn to_text(&self) -> String {
        let (Some(b), Some(a)) = (&self.before, &self.after) else {
            return String::new();
        };
        let way = |e: f64| if e >= 0.0 { "slower" } else { "faster" };
        let mut t = format!(
            "machine check: the scenario's {} most frequent GEMM shapes ran {:.1}% {} than the \
             profile predicts before the runs, {:.1}% {} after (a step-time error of about this \
             size is the machine's speed now, not the schedule's model)\n",
            b.shapes,
            b.error.abs() * 100.0,
            way(b.error),
            a.error.abs() * 100.0,
            way(a.error),
        );
        if let (Some(b), Some(a)) = (&self.optimizer_before, &self.optimizer_after) {
            t.push_str(&format!(
                "optimizer check: the update of {:.1} MiB of state after {:.1} MiB of other \
                 writes ({:.1} ms) ran {:.1}% {} than the profile prices it before the runs, \
                 {:.1}% {} after (the last-level cache this machine gets now)\n",
                b.state_bytes as f64 / 1048576.0,
                b.other_bytes as f64 / 1048576.0,
                b.elapsed_ns as f64 / 1e6,
                b.error.abs() * 100.0,
                way(b.error),
                a.error.abs() * 100.0,
                way(a.error),
            ));
        }
        if let (Some(b), Some(a)) = (&self.transfer_before, &self.transfer_after) {
            t.push_str(&format!(
                "transfer check: a two-rank {} of {} per call ran {:.1}% {} than the profile \
                 prices it before the runs, {:.1}% {} after (this machine's transfers now)\n",
                b.kind,
                twin_sim::schedule::fmt_bytes(b.bytes),
                b.error.abs() * 100.0,
                way(b.error),
                a.error.abs() * 100.0,
                way(a.error),
            ));
        }
        let loads: Vec<&CpuLoad> = self.load.iter().flatten().collect();
        if !loads.is_empty() {
            let most = |f: fn(&CpuLoad) -> f64| loads.iter().map(|l| f(l)).fold(0.0, f64::max);
            let (other, steal) = (most(|l| l.other_fraction), most(|l| l.steal_fraction));
            t.push_str(&format!(
                "other work during the runs: at most {:.1}% of the cores used by other processes, \
                 {:.1}% stolen by the hypervisor{}\n",
                other * 100.0,
                steal * 100.0,
                if other + steal > BUSY_MACHINE_FRACTION {
                    " (a busy machine: measured times include its interference)"
                } else {
                    ""
                }
            ));
        }
        if let Some(e) = self.step_time_error_at_profile_speed {
            t.push_str(&format!(
                "at the profile's machine speed (each run's steps scaled by the check before it): \
                 step time error {:+.1}%\n",
                e * 100.0
            ));
        }
        t
    }
}

/// Other work above this fraction of the cores during a run is called out in the text output.
const BUSY_MACHINE_FRACTION: f64 = 0.05;

/// [`crate::check::gemm_check`] with the prediction's cost model.
pub(crate) fn gemm_check(staged: &twin_sim::Staged) -> Option<GemmCheck> {
    crate::check::gemm_check(&staged.schedule, &staged.cost)
}
