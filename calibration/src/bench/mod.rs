//! Microbenchmarks on the local machine through the host runtime's own code paths: GEMMs
//! (`compute`), memory passes, copies and allocations (`memory`), per-op overhead of the host
//! backend (`launch`), p2p transfers, collectives and compute/communication overlap over the
//! runtime's TCP transport (`comm`), and fsync'd checkpoint writes (`io`). Each measurement
//! warms up, repeats, and applies the outlier rule of [`crate::sample`]; every kept and
//! dropped sample is returned in [`Samples`] and written beside the profile.

pub mod comm;
pub mod comm_busy;
pub mod compute;
pub mod interrupt;
pub mod io;
pub mod launch;
pub mod memory;
pub mod memory_pair;
pub mod p2p_cpu;
pub mod wake;

use crate::sample::{Kept, Repeats};
use serde::{Deserialize, Serialize};
use twin_sim::schedule::Gemm;

/// How long a calibration runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Under a minute on a 2-core machine.
    Quick,
    /// A few minutes: more shapes, sizes and repeats.
    Full,
    /// The fewest samples every fit still accepts: for tests (`TWIN_CALIBRATE_TINY=1`).
    Tiny,
}

/// What each benchmark sweeps, per mode. Read back from a samples file by `twin calibrate
/// --refit`, where files written before a field existed lack it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Config {
    pub mode: Mode,
    pub gemm_mn: Vec<u64>,
    pub gemm_k: Vec<u64>,
    /// Thin-and-wide shapes beside the square grid: one of m and n from `gemm_thin` (the
    /// tokens of a micro batch), the other from `gemm_wide` (an FFN or fused-QKV width), k
    /// from `gemm_wide_k`. Both orders: a forward GEMM is thin x wide, a weight gradient
    /// wide x thin.
    pub gemm_thin: Vec<u64>,
    pub gemm_wide: Vec<u64>,
    pub gemm_wide_k: Vec<u64>,
    pub gemm: Repeats,
    /// Largest scenario GEMM shapes timed (the most frequent first).
    pub max_scenario_shapes: usize,
    /// Bytes written before each timed GEMM call to evict its operands from the core's private
    /// cache, as a step's ops find them (4x the L2 this machine reports, 1 MiB when it reports
    /// none).
    pub gemm_evict_bytes: u64,
    /// The core's private cache (sysfs L2; 1 MiB when it reports none): the profile's
    /// `gemm.operand_cache_bytes`.
    pub private_cache_bytes: u64,
    /// Bytes written before each timed cold pass: what a rank touches between two uses of
    /// the same memory, at most one step's worth (the optimizer streams state last touched a
    /// step ago). With a scenario, the bytes its busiest rank touches in one step
    /// ([`compute::step_bytes`]); the default, and the cap, is twice the last-level cache.
    pub step_evict_bytes: u64,
    /// Sizes of the memory pass, memcpy and allocation (whose cost does not depend on them): up to 8 MiB, the cache-resident
    /// regime in which the host scenarios' per-op buffers live.
    pub memory_bytes: Vec<u64>,
    /// Larger sizes only the memory pass runs at: where a pass outgrows the caches and streams
    /// from DRAM at a lower rate (`memory.spill_*`, docs/calibration.md).
    pub pass_large_bytes: Vec<u64>,
    /// Sizes of the cold pass: the memory pass with `step_evict_bytes` written first (the
    /// optimizer's pass over state a step old, `memory.cold_efficiency`).
    pub cold_pass_bytes: Vec<u64>,
    /// Sizes of optimizer state the state benchmark updates (`bench::memory::state_update`).
    pub state_bytes: Vec<u64>,
    /// Distinct bytes written before each timed update: the sweep over which the last-level
    /// cache lets the state go (`memory.state_*`), up to twice the L3 sysfs reports, within
    /// 256-512 MiB.
    pub state_evict_bytes: Vec<u64>,
    /// Idle gaps, nothing else written, before each timed update (the core computing from its
    /// private cache meanwhile): how the state leaves a last-level cache other tenants share
    /// with time (`memory.state_decay_after_ns`, `state_lifetime_ns`).
    pub state_gap_ns: Vec<u64>,
    /// Sizes of state the gap sweep updates.
    pub state_gap_bytes: Vec<u64>,
    pub state: Repeats,
    pub memory: Repeats,
    pub launch_ops: Vec<u32>,
    pub launch: Repeats,
    pub comm_bytes: Vec<u64>,
    pub comm: Repeats,
    /// Largest collective group: at most 4, and at most the cores where there are two or more
    /// (a larger group shares cores among its own members, and the fits leave such groups
    /// out where the calibration measured what sharing a core costs, `host::fit_all`). One core:
    /// 2.
    pub max_group: u32,
    pub overlap: Repeats,
    pub checkpoint_bytes: Vec<u64>,
    pub checkpoint: Repeats,
    /// How long the interruption benchmark runs its GEMM back to back (`bench::interrupt`).
    pub interrupt_ns: u64,
    /// Idle gaps before the wake-up benchmark's transfers (`bench::wake`).
    pub wake_idle_ns: Vec<u64>,
    pub wake: Repeats,
}

/// The L2 cache of CPU 0, from sysfs (`1024K`).
/// Size of cpu0's cache `index` in sysfs (2: L2, 3: L3 on x86 and most ARM), when known.
fn cache_bytes(index: u32) -> Option<u64> {
    let path = format!("/sys/devices/system/cpu/cpu0/cache/index{index}/size");
    let text = std::fs::read_to_string(path).ok()?;
    let t = text.trim();
    let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = num.parse().ok()?;
    Some(match unit {
        "K" => n * KIB,
        "M" => n * MIB,
        "" => n,
        _ => return None,
    })
}

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;
const MS: u64 = 1_000_000;

impl Config {
    /// The sweep of `mode` on a machine with `cores` CPU cores.
    pub fn new(mode: Mode, cores: u32) -> Config {
        let max_group = 4.min(cores).max(2);
        let private_cache = cache_bytes(2).unwrap_or(MIB);
        let evict = 4 * private_cache;
        // Twice the last-level cache (4x L2 where sysfs names no L3).
        let step_evict = cache_bytes(3).map_or(evict, |l3| 2 * l3);
        // At least 256 MiB, at most 512: writing a GiB slowed the runs after a calibration
        // by 10% for a while (the kernel reclaiming behind it).
        let state_evict_cap = step_evict.clamp(256 * MIB, 512 * MIB);
        let state_evict = |sizes: &[u64]| -> Vec<u64> {
            sizes
                .iter()
                .map(|m| m * MIB)
                .filter(|&b| b <= state_evict_cap)
                .collect()
        };
        let r = |warmup, timed| Repeats { warmup, timed };
        match mode {
            Mode::Full => Config {
                mode,
                gemm_mn: vec![40, 100, 128, 200, 256, 384],
                gemm_k: vec![16, 32, 64, 128, 256, 512, 1024],
                gemm_thin: vec![40, 128],
                gemm_wide: vec![512, 768, 1024],
                gemm_wide_k: vec![64, 256, 1024],
                gemm: r(2, 9),
                max_scenario_shapes: 64,
                gemm_evict_bytes: evict,
                private_cache_bytes: private_cache,
                step_evict_bytes: step_evict,
                memory_bytes: vec![
                    128 * KIB,
                    256 * KIB,
                    512 * KIB,
                    MIB,
                    2 * MIB,
                    4 * MIB,
                    8 * MIB,
                ],
                pass_large_bytes: vec![16 * MIB, 32 * MIB, 64 * MIB],
                cold_pass_bytes: vec![MIB, 4 * MIB, 16 * MIB, 64 * MIB],
                state_bytes: vec![4 * MIB, 16 * MIB, 32 * MIB],
                state_evict_bytes: state_evict(&[
                    0, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512,
                ]),
                state_gap_ns: [2, 5, 10, 20, 40, 80].map(|ms| ms * MS).to_vec(),
                state_gap_bytes: vec![4 * MIB, 16 * MIB],
                state: r(1, 7),
                memory: r(2, 9),
                launch_ops: vec![64, 128, 256, 512, 1024, 2048],
                launch: r(2, 7),
                comm_bytes: vec![
                    KIB,
                    4 * KIB,
                    16 * KIB,
                    64 * KIB,
                    256 * KIB,
                    MIB,
                    4 * MIB,
                    16 * MIB,
                ],
                comm: r(2, 7),
                max_group,
                overlap: r(2, 15),
                checkpoint_bytes: vec![MIB, 4 * MIB, 16 * MIB, 64 * MIB],
                checkpoint: r(1, 5),
                interrupt_ns: 3_000_000_000,
                wake_idle_ns: vec![0, 50_000, 200_000, 1_000_000, 5_000_000],
                wake: r(5, 60),
            },
            Mode::Quick => Config {
                mode,
                gemm_mn: vec![40, 128, 200],
                gemm_k: vec![32, 128, 512],
                gemm_thin: vec![40],
                gemm_wide: vec![768],
                gemm_wide_k: vec![64, 512],
                gemm: r(1, 5),
                max_scenario_shapes: 16,
                gemm_evict_bytes: evict,
                private_cache_bytes: private_cache,
                step_evict_bytes: step_evict,
                memory_bytes: vec![256 * KIB, MIB, 4 * MIB],
                pass_large_bytes: vec![16 * MIB, 64 * MIB],
                cold_pass_bytes: vec![2 * MIB, 16 * MIB],
                state_bytes: vec![8 * MIB, 32 * MIB],
                state_evict_bytes: state_evict(&[0, 16, 48, 96, 192]),
                state_gap_ns: [5, 20, 60].map(|ms| ms * MS).to_vec(),
                state_gap_bytes: vec![8 * MIB],
                state: r(1, 3),
                memory: r(1, 5),
                launch_ops: vec![64, 256, 1024],
                launch: r(1, 4),
                comm_bytes: vec![4 * KIB, 64 * KIB, MIB, 4 * MIB],
                comm: r(1, 5),
                max_group,
                overlap: r(1, 7),
                checkpoint_bytes: vec![MIB, 8 * MIB, 32 * MIB],
                checkpoint: r(1, 3),
                interrupt_ns: 1_000_000_000,
                wake_idle_ns: vec![0, 200_000, 2_000_000],
                wake: r(3, 25),
            },
            Mode::Tiny => Config {
                mode,
                gemm_mn: vec![24, 64],
                gemm_k: vec![16, 64, 128],
                gemm_thin: Vec::new(),
                gemm_wide: Vec::new(),
                gemm_wide_k: Vec::new(),
                gemm: r(1, 2),
                max_scenario_shapes: 4,
                gemm_evict_bytes: evict,
                private_cache_bytes: private_cache,
                step_evict_bytes: step_evict,
                memory_bytes: vec![64 * KIB, 512 * KIB, 2 * MIB],
                pass_large_bytes: vec![8 * MIB],
                cold_pass_bytes: vec![MIB, 4 * MIB],
                state_bytes: vec![MIB, 4 * MIB],
                state_evict_bytes: vec![0, 4 * MIB, 16 * MIB],
                state_gap_ns: vec![MS, 3 * MS],
                state_gap_bytes: vec![MIB],
                state: r(0, 2),
                memory: r(1, 2),
                launch_ops: vec![16, 64, 128],
                launch: r(1, 2),
                comm_bytes: vec![4 * KIB, 256 * KIB, 2 * MIB],
                comm: r(1, 3),
                max_group: max_group.min(3),
                overlap: r(0, 3),
                checkpoint_bytes: vec![256 * KIB, 2 * MIB, 8 * MIB],
                checkpoint: r(0, 2),
                interrupt_ns: 50_000_000,
                wake_idle_ns: vec![0, 100_000, 400_000],
                wake: r(1, 3),
            },
        }
    }

    /// The sweep's GEMM shapes (every m x n x k of the grid).
    pub fn sweep_shapes(&self) -> Vec<Gemm> {
        let mut out = Vec::new();
        for &m in &self.gemm_mn {
            for &n in &self.gemm_mn {
                for &k in &self.gemm_k {
                    out.push(Gemm::single(m, n, k, 1));
                }
            }
        }
        for &thin in &self.gemm_thin {
            for &wide in &self.gemm_wide {
                for &k in &self.gemm_wide_k {
                    out.push(Gemm::single(thin, wide, k, 1));
                    out.push(Gemm::single(wide, thin, k, 1));
                }
            }
        }
        out
    }
}

/// Told about each finished measurement (the CLI draws a progress bar from it).
pub trait Progress {
    /// `benchmark` names what runs; `done` of `total` measurements are finished.
    fn update(&mut self, benchmark: &str, done: usize, total: usize);
}

/// A progress sink that ignores everything.
pub struct Silent;

impl Progress for Silent {
    fn update(&mut self, _benchmark: &str, _done: usize, _total: usize) {}
}

/// Counts measurements across benchmarks for [`Progress`].
pub struct Counter<'a> {
    pub sink: &'a mut dyn Progress,
    pub done: usize,
    pub total: usize,
}

impl Counter<'_> {
    pub fn tick(&mut self, benchmark: &str) {
        self.done += 1;
        self.sink
            .update(benchmark, self.done.min(self.total), self.total);
    }
}

/// Samples of one measurement at one size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SizedSamples {
    pub bytes: u64,
    pub kept_ns: Vec<f64>,
    pub dropped_ns: Vec<f64>,
}

impl SizedSamples {
    pub fn new(bytes: u64, k: Kept) -> SizedSamples {
        SizedSamples {
            bytes,
            kept_ns: k.kept,
            dropped_ns: k.dropped,
        }
    }
}

/// Samples of one GEMM shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GemmSamples {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    /// Products per timed call (a strided-batched call when > 1; the host times one). Samples
    /// files from before it existed timed one.
    #[serde(default = "one")]
    pub batch: u64,
    /// `sweep` or `scenario`.
    pub origin: String,
    /// Held out of the fit (every fifth sweep shape), to check the curve on unseen shapes.
    pub holdout: bool,
    /// Calls after evicting the private cache (the host), or plain calls (GPUs).
    pub kept_ns: Vec<f64>,
    pub dropped_ns: Vec<f64>,
    /// Calls back to back, operands where the call before left them (the host; empty on
    /// GPUs): with the evicted calls, they part what every call pays for its operands
    /// (packing) from what a cold call pays more (`fit::gemm`).
    #[serde(default)]
    pub warm_kept_ns: Vec<f64>,
    #[serde(default)]
    pub warm_dropped_ns: Vec<f64>,
}

/// Samples of one transfer: `kind` is `p2p` or a collective name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommSamples {
    pub kind: String,
    pub ranks: u32,
    pub bytes: u64,
    /// Slowest rank of each call (a p2p: half the round trip).
    pub kept_ns: Vec<f64>,
    pub dropped_ns: Vec<f64>,
}

/// One two-rank collective's calls with the ranks' cores otherwise idle and with a compute
/// thread beside each rank (`bench::comm_busy`): every call, no outlier rule (a call that
/// waited for a compute op is what is measured).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommBusySamples {
    pub kind: String,
    pub bytes: u64,
    /// The compute thread's GEMM `[m, n, k]` and nice level.
    pub gemm: [u64; 3],
    pub compute_nice: i32,
    pub idle_ns: Vec<f64>,
    pub busy_ns: Vec<f64>,
}

/// The same GEMM alone and while a collective runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OverlapSamples {
    pub gemm: [u64; 3],
    pub collective: String,
    pub collective_bytes: u64,
    pub alone_ns: Vec<f64>,
    pub overlapped_ns: Vec<f64>,
    pub dropped: usize,
}

/// The optimizer's update of `state_bytes` of state (moving `moved_bytes`), timed after
/// `evict_bytes` of other memory were written and then `gap_ns` passed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StateSamples {
    pub state_bytes: u64,
    pub evict_bytes: u64,
    #[serde(default)]
    pub gap_ns: u64,
    /// Median time from the end of one update to the start of the next: the writes and the
    /// gap (`NaN` in older samples files, which did not record it; JSON
    /// writes it `null`).
    #[serde(default = "not_recorded", deserialize_with = "null_as_nan")]
    pub elapsed_ns: f64,
    pub moved_bytes: u64,
    pub kept_ns: Vec<f64>,
    pub dropped_ns: Vec<f64>,
}

fn one() -> u64 {
    1
}

fn not_recorded() -> f64 {
    f64::NAN
}

/// A number JSON may hold as `null` (serde_json writes a NaN so): NaN.
fn null_as_nan<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// Everything one calibration measured. Read back by `twin calibrate refit`: a field a
/// samples file lacks (written before it existed) is empty.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Samples {
    pub gemm: Vec<GemmSamples>,
    /// The core's private cache (`Config::private_cache_bytes`): a back-to-back GEMM call
    /// whose A, B and C outgrow it finds its operands out of it, as an evicted one does.
    pub private_cache_bytes: u64,
    /// axpy pass: bytes moved (12 per element).
    pub memory_pass: Vec<SizedSamples>,
    /// The same pass at `Config::pass_large_bytes`.
    pub memory_pass_large: Vec<SizedSamples>,
    /// The same pass with `Config::step_evict_bytes` written before each sample, at
    /// `Config::cold_pass_bytes` (empty in samples files written before it existed).
    pub memory_pass_cold: Vec<SizedSamples>,
    /// The optimizer's state update after other writes (`memory::state_update`; empty in
    /// older samples files).
    pub state_update: Vec<StateSamples>,
    /// memcpy: bytes moved (read + write).
    pub memcpy: Vec<SizedSamples>,
    /// Allocate and touch a buffer of `bytes`.
    pub alloc: Vec<SizedSamples>,
    /// A chain of `bytes` (= op count) empty ops through the host backend.
    pub launch: Vec<SizedSamples>,
    /// Hand-off chains of real ops (`launch::handoff_chain`): each sample one chain's mean gap
    /// from a compute op's end to the issue of the op it releases on another stream; `bytes`
    /// is the links per chain.
    #[serde(default)]
    pub handoff_gap: Vec<SizedSamples>,
    pub comm: Vec<CommSamples>,
    /// The other rounds of the transfer benchmarks (`rounds`: the profile keeps `comm`, the
    /// fastest round); empty in older samples files.
    #[serde(default)]
    pub comm_rounds_set_aside: Vec<Vec<CommSamples>>,
    /// Two-rank collectives with the cores otherwise idle and beside a compute thread on each
    /// (`comm_busy`; empty in older samples files).
    pub comm_busy: Vec<CommBusySamples>,
    /// Ping-pongs with each rank thread's CPU clock (`p2p_cpu`; empty in older samples
    /// files).
    pub p2p_cpu: Vec<p2p_cpu::P2pCpuSamples>,
    /// The optimizer's update on one core alone and on two at once (`memory_pair`; absent
    /// in older samples files).
    #[serde(default)]
    pub memory_pair: Option<memory_pair::MemoryPairSamples>,
    pub overlap: Option<OverlapSamples>,
    /// Write and fsync a file of `bytes`.
    pub checkpoint: Vec<SizedSamples>,
    pub interruptions: Option<interrupt::InterruptSamples>,
    /// One-way transfer after an idle gap; `bytes` is the gap in ns.
    pub wake: Vec<SizedSamples>,
}
