//! How often and how long the machine interrupts running compute (the profile's `[host]
//! interruptions_per_s` and `interruption_mean_ns`; twin-sim's `host_model::jitter`). One GEMM of
//! a typical host op's size runs back to back on a pinned core for `Config::interrupt_ns`.
//! A call the calibration's one outlier rule drops (`sample::reject_outliers`) was interrupted,
//! by its excess over the mean of the calls the rule keeps. Every other benchmark drops those
//! calls and prices the kept ones, so base price plus interruptions is the mean call: a step
//! meets them, and ranks that meet at transfers meet each other's. A threshold of 1.2x the
//! median misses about half the excess (1.2% of busy time
//! counted where the calls' mean ran 2.9% over their median;
//! docs/journal/2026-11-validation-history.md, 2026-11-24).

use super::compute::{compute_op, workspace_for};
use super::{Config, Counter};
use serde::{Deserialize, Serialize};
use twin_runtime::launch::affinity::pin_rank;
use twin_sim::schedule::Gemm;

/// The GEMM timed: about 90 µs here, the size of a host scenario's per-layer GEMMs.
const GEMM: Gemm = Gemm {
    dtype: None,
    m: 64,
    n: 512,
    k: 128,
    count: 1,
    batch: 1,
};

/// What the benchmark saw: every interrupted call's excess, and the totals.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct InterruptSamples {
    pub gemm: [u64; 3],
    pub calls: u64,
    /// Sum of every call's time.
    pub busy_ns: f64,
    pub median_ns: f64,
    /// Mean of the calls the outlier rule keeps: what the other benchmarks price.
    pub base_ns: f64,
    /// Excess over `base_ns` of each call the outlier rule drops, in order.
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
    let split = crate::sample::reject_outliers(times);
    let base_ns = if split.kept.is_empty() {
        0.0
    } else {
        split.kept.iter().sum::<f64>() / split.kept.len() as f64
    };
    InterruptSamples {
        gemm: [GEMM.m, GEMM.n, GEMM.k],
        calls: times.len() as u64,
        busy_ns: times.iter().sum(),
        median_ns: crate::sample::median(times).unwrap_or(0.0),
        base_ns,
        excess_ns: split.dropped.iter().map(|t| t - base_ns).collect(),
    }
}
