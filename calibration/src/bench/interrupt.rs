//! How often and how long the machine interrupts running compute (the profile's `[host]
//! interruptions_per_s` and `interruption_mean_ns`; `twin_sim::engine::jitter`). One GEMM of
//! a typical host op's size runs back to back on a pinned core for `Config::interrupt_ns`;
//! a call that takes more than [`THRESHOLD`] times the median call was interrupted, by its
//! excess over the median. On the development VM: 435-1,914 such calls a second, 58-77 µs
//! each (docs/validation.md, session 6). Every other benchmark drops these calls as outliers;
//! a step meets them, and ranks that meet at transfers meet each other's.

use super::compute::{compute_op, workspace_for};
use super::{Config, Counter};
use serde::Serialize;
use twin_runtime::launch::affinity::pin_rank;
use twin_sim::schedule::Gemm;

/// A call this many times the median was interrupted.
pub const THRESHOLD: f64 = 1.2;

/// The GEMM timed: about 90 µs here, the size of a host scenario's per-layer GEMMs.
const GEMM: Gemm = Gemm {
    m: 64,
    n: 512,
    k: 128,
    count: 1,
    batch: 1,
};

/// What the benchmark saw: every interrupted call's excess, and the totals.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct InterruptSamples {
    pub gemm: [u64; 3],
    pub calls: u64,
    /// Sum of every call's time.
    pub busy_ns: f64,
    pub median_ns: f64,
    /// Excess over the median of each call above [`THRESHOLD`] x median, in order.
    pub excess_ns: Vec<f64>,
}

/// Runs the GEMM back to back for `cfg.interrupt_ns` on a thread pinned as rank 0 is.
pub fn interruptions(cfg: &Config, progress: &mut Counter) -> InterruptSamples {
    let budget_ns = cfg.interrupt_ns;
    let out = std::thread::scope(|s| {
        s.spawn(move || {
            pin_rank(0);
            let op = compute_op(vec![GEMM], 0);
            let mut ws = workspace_for(std::slice::from_ref(&op));
            for _ in 0..20 {
                ws.run_gemms(&op);
            }
            let mut times = Vec::new();
            let start = std::time::Instant::now();
            // Bounded: the budget in time, and at most 10 million calls.
            while (start.elapsed().as_nanos() as u64) < budget_ns && times.len() < 10_000_000 {
                let t = std::time::Instant::now();
                ws.run_gemms(&op);
                times.push(t.elapsed().as_nanos() as f64);
            }
            summarize(&times)
        })
        .join()
        .unwrap_or_default()
    });
    progress.tick("interruptions");
    out
}

/// The samples of one run of call times.
pub fn summarize(times: &[f64]) -> InterruptSamples {
    let median_ns = crate::sample::median(times).unwrap_or(0.0);
    InterruptSamples {
        gemm: [GEMM.m, GEMM.n, GEMM.k],
        calls: times.len() as u64,
        busy_ns: times.iter().sum(),
        median_ns,
        excess_ns: times
            .iter()
            .filter(|&&t| t > THRESHOLD * median_ns)
            .map(|t| t - median_ns)
            .collect(),
    }
}
