//! The outcome of one executed training step: its step time, what each rank did (busy,
//! exposed and idle time, FLOPs, memory) and the optional trace. The simulator's engine
//! produces it from modelled time and the runtime's measurement from measured time, so the
//! report and the comparisons read one type whichever executor ran the step.

use crate::schedule::MemCategory;
use crate::trace::Trace;
use serde::Serialize;

/// What one rank did during the step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RankStats {
    pub rank: u32,
    /// When the rank's last op finished.
    pub finish_ns: u64,
    /// Time with at least one compute op running. The three times below partition
    /// [0, step_time_ns] of the whole simulation.
    pub compute_busy_ns: u64,
    /// Time with no compute running but a transfer (or checkpoint write) in progress.
    pub comm_exposed_ns: u64,
    /// Time with neither: pipeline bubbles, waiting at rendezvous, and the tail after this
    /// rank finished.
    pub idle_ns: u64,
    /// FLOPs of every compute op (hardware FLOPs, recompute included).
    pub flops: u64,
    /// FLOPs of phases that count as model work ([`crate::schedule::Phase::is_model_work`]).
    pub model_flops: u64,
    /// Of `model_flops`, the attention cores' full squares, and the same products counted over
    /// the pairs their masks leave ([`crate::schedule::ComputeOp::attention_model_flops`]): what
    /// a framework's own FLOP count needs ([`crate::report::Summary`]).
    #[serde(skip_serializing)]
    pub model_attention_flops: (u64, u64),
    /// Highest live device memory.
    pub peak_memory_bytes: u64,
    /// When the peak was first reached.
    pub peak_time_ns: u64,
    /// The alloc op that first reached the peak; `None` when nothing was allocated.
    pub peak_op: Option<u32>,
    /// Live device memory per category at the peak, indexed by [`MemCategory`].
    pub memory_at_peak: [u64; MemCategory::COUNT],
    /// Highest live host memory (offload).
    pub host_memory_peak_bytes: u64,
    /// The alloc at which live device memory first exceeded
    /// [`crate::engine::SimOptions::memory_capacity_bytes`], and when; `None` if it never did.
    pub over_capacity_op: Option<u32>,
    pub over_capacity_time_ns: u64,
    /// Live device and host memory after the rank's last op: zero, since the engine rejects
    /// programs that leave an allocation unfreed; kept as a measured check.
    pub end_memory_bytes: u64,
}

/// The outcome of simulating one step.
#[derive(Clone, Debug, PartialEq)]
pub struct SimResult {
    /// When the last op of any rank finished.
    pub step_time_ns: u64,
    /// Processed events: one per op completion of every simulated rank.
    pub events: u64,
    /// Only one representative per pipeline stage was simulated; `ranks` still holds every
    /// rank (each a copy of its representative's statistics) and the trace only the
    /// representatives.
    pub collapsed: bool,
    /// Indexed by rank.
    pub ranks: Vec<RankStats>,
    pub trace: Option<Trace>,
}

impl SimResult {
    /// Mean over ranks of idle time over step time.
    pub fn bubble_fraction(&self) -> f64 {
        self.mean_fraction(|r| r.idle_ns)
    }

    /// Mean over ranks of exposed communication time over step time.
    pub fn exposed_comm_fraction(&self) -> f64 {
        self.mean_fraction(|r| r.comm_exposed_ns)
    }

    fn mean_fraction(&self, f: impl Fn(&RankStats) -> u64) -> f64 {
        if self.ranks.is_empty() || self.step_time_ns == 0 {
            return 0.0;
        }
        let sum: f64 = self.ranks.iter().map(|r| f(r) as f64).sum();
        sum / self.ranks.len() as f64 / self.step_time_ns as f64
    }
}
