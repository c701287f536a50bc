//! The resolved `[faults]` section: failure sources, recovery and checkpoint policy, and the
//! horizon to simulate. Schema only: parsed by `scenario::faults`, and turned into the
//! timeline's nanosecond model by twin-sim's `faults` module (`faults::Model::new`).

use serde::Serialize;

/// How the time between two job-level failures is distributed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Distribution {
    Exponential,
    /// Weibull with this shape (< 1: infant mortality, 1: exponential, > 1: wear-out), scaled
    /// so that its mean equals the configured MTBF.
    Weibull {
        shape: f64,
    },
}

/// What a restart waits for before the job runs again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RestartPolicy {
    /// A hot spare is swapped in (`spare_swap_s`).
    HotSpare,
    /// The job waits for the failed hardware to be replaced (`replacement_wait_s`).
    WaitReplacement,
    /// The job restarts at once with one data-parallel replica fewer, and grows back when the
    /// replacement arrives (`replacement_wait_s` later).
    Elastic,
}

/// Synchronous checkpoints block for the whole write; asynchronous ones block only for a
/// snapshot to host memory and write in the background.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointMode {
    Sync,
    Async,
}

/// The checkpoint interval as written.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointInterval {
    Steps(u64),
    Minutes(f64),
}

/// The `[faults]` section with every default filled in.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FaultConfig {
    pub horizon_ns: u64,
    pub seeds: u32,
    pub seed: u64,
    pub gpu_failures_per_gpu_hour: f64,
    pub node_failures_per_node_day: f64,
    /// One link per node (its network attachment).
    pub link_failures_per_link_day: f64,
    pub distribution: Distribution,
    pub straggler_per_gpu_hour: f64,
    /// Step time multiplier while a straggler is active (>= 1).
    pub straggler_slowdown: f64,
    pub straggler_duration_ns: u64,
    pub link_degradation_per_link_day: f64,
    /// Bandwidth left on a degraded link, as a fraction (0, 1].
    pub link_degradation_bandwidth_fraction: f64,
    pub link_degradation_duration_ns: u64,
    /// Faults at fixed times from the start, sorted.
    pub scheduled_ns: Vec<u64>,
    pub detection_timeout_ns: u64,
    pub restart: RestartPolicy,
    pub spare_swap_ns: u64,
    pub replacement_wait_ns: u64,
    pub process_restart_ns: u64,
    pub comm_init_ns: u64,
    pub checkpoint_interval: CheckpointInterval,
    pub checkpoint_mode: CheckpointMode,
    /// Device-to-host copy bandwidth per GPU for an asynchronous snapshot.
    pub snapshot_bytes_per_s: f64,
    /// Checkpoints are also kept in peer nodes' memory; a reload reads from a peer.
    pub in_memory_replicas: bool,
    /// Per-node bandwidth to a peer's memory (replicas).
    pub peer_bytes_per_s: f64,
    /// Aggregate storage bandwidth of the whole job.
    pub storage_write_bytes_per_s: f64,
    pub storage_read_bytes_per_s: f64,
    /// Overrides the checkpoint size derived from the model and optimizer state.
    pub checkpoint_bytes: Option<u64>,
}

const S: u64 = 1_000_000_000;

impl Default for FaultConfig {
    /// Published RSC-1 node failure rate (Kokolis et al.: 6.50 per 1,000 node-days), hot spare,
    /// synchronous checkpoints every 30 minutes, a 30-day horizon over 100 seeds.
    fn default() -> Self {
        FaultConfig {
            horizon_ns: 30 * 86_400 * S,
            seeds: 100,
            seed: 1,
            gpu_failures_per_gpu_hour: 0.0,
            node_failures_per_node_day: 6.50 / 1000.0,
            link_failures_per_link_day: 0.0,
            distribution: Distribution::Exponential,
            straggler_per_gpu_hour: 0.0,
            straggler_slowdown: 1.5,
            straggler_duration_ns: 600 * S,
            link_degradation_per_link_day: 0.0,
            link_degradation_bandwidth_fraction: 0.5,
            link_degradation_duration_ns: 3600 * S,
            scheduled_ns: Vec::new(),
            detection_timeout_ns: 300 * S,
            restart: RestartPolicy::HotSpare,
            spare_swap_ns: 30 * S,
            replacement_wait_ns: 4 * 3600 * S,
            process_restart_ns: 60 * S,
            comm_init_ns: 30 * S,
            checkpoint_interval: CheckpointInterval::Minutes(30.0),
            checkpoint_mode: CheckpointMode::Sync,
            snapshot_bytes_per_s: 20e9,
            in_memory_replicas: false,
            peer_bytes_per_s: 25e9,
            storage_write_bytes_per_s: 100e9,
            storage_read_bytes_per_s: 200e9,
            checkpoint_bytes: None,
        }
    }
}

/// Parses a duration such as `30d`, `12h`, `90m`, `45s` or `1.5h` (a bare number is seconds)
/// into nanoseconds; `None` when malformed, not positive, or beyond 100 years.
pub fn parse_duration_ns(text: &str) -> Option<u64> {
    let t = text.trim();
    let (num, unit_s) = match t.char_indices().last()? {
        (i, 'd') => (&t[..i], 86_400.0),
        (i, 'h') => (&t[..i], 3_600.0),
        (i, 'm') => (&t[..i], 60.0),
        (i, 's') => (&t[..i], 1.0),
        _ => (t, 1.0),
    };
    let v: f64 = num.trim().parse().ok()?;
    let ns = v * unit_s * 1e9;
    if !(1.0..=100.0 * 365.0 * 86_400.0 * 1e9).contains(&ns) {
        return None;
    }
    Some(ns.round() as u64)
}

/// Seconds (as read from a scenario, already range checked) to nanoseconds.
pub fn seconds_to_ns(seconds: f64) -> u64 {
    let ns = seconds * 1e9;
    if ns.is_finite() && ns > 0.0 {
        ns.min(u64::MAX as f64 / 4.0).round() as u64
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration_ns("30d"), Some(30 * 86_400 * S));
        assert_eq!(parse_duration_ns("1.5h"), Some(5_400 * S));
        assert_eq!(parse_duration_ns("90m"), Some(5_400 * S));
        assert_eq!(parse_duration_ns("45"), Some(45 * S));
        for bad in ["", "d", "-3h", "0s", "1e30d", "nan", "3w"] {
            assert_eq!(parse_duration_ns(bad), None, "{bad}");
        }
    }
}
