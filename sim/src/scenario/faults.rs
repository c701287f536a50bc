//! The `[faults]` section: failure rates, stragglers, recovery and checkpoint policy for the
//! long-horizon mode. Like `[checks]` it is returned beside the [`super::Scenario`]: it says
//! what happens to the job over weeks, not what one step is, so planning never sees it.

use super::error::ErrorKind;
use super::fault_config::{
    parse_duration_ns, seconds_to_ns, CheckpointInterval, CheckpointMode, Distribution,
    FaultConfig, RestartPolicy,
};
use super::read::{opt, Result, Section};
use super::source::Node;

/// Every key `[faults]` accepts.
pub const FAULT_KEYS: &[&str] = &[
    "horizon",
    "seeds",
    "seed",
    "gpu_failures_per_gpu_hour",
    "gpu_mtbf_hours",
    "node_failures_per_node_day",
    "node_failures_per_1000_node_days",
    "node_mtbf_hours",
    "link_failures_per_link_day",
    "link_mtbf_hours",
    "distribution",
    "weibull_shape",
    "straggler_per_gpu_hour",
    "straggler_slowdown",
    "straggler_duration_s",
    "link_degradation_per_link_day",
    "link_degradation_bandwidth_fraction",
    "link_degradation_duration_s",
    "scheduled_s",
    "detection_timeout_s",
    "restart",
    "spare_swap_s",
    "replacement_wait_s",
    "process_restart_s",
    "comm_init_s",
    "checkpoint_every_steps",
    "checkpoint_every_minutes",
    "checkpoint_mode",
    "snapshot_bytes_per_s",
    "in_memory_replicas",
    "peer_bytes_per_s",
    "storage_write_bytes_per_s",
    "storage_read_bytes_per_s",
    "checkpoint_bytes",
];

const RESTARTS: [(&str, RestartPolicy); 3] = [
    ("hot_spare", RestartPolicy::HotSpare),
    ("wait_replacement", RestartPolicy::WaitReplacement),
    ("elastic", RestartPolicy::Elastic),
];
const MODES: [(&str, CheckpointMode); 2] = [
    ("sync", CheckpointMode::Sync),
    ("async", CheckpointMode::Async),
];
const DISTRIBUTIONS: [(&str, bool); 2] = [("exponential", false), ("weibull", true)];

/// Rates far beyond any hardware; durations up to a year.
const MAX_RATE: f64 = 1e6;
const MAX_SECONDS: f64 = 365.0 * 86_400.0;
const MAX_BANDWIDTH: f64 = 1e15;

/// Parses `[faults]`; `None` when the scenario has no such section.
pub(crate) fn faults(f: Section<'_>) -> Result<Option<FaultConfig>> {
    if f.table.is_none() {
        return Ok(None);
    }
    f.check_unknown()?;
    let d = FaultConfig::default();
    let secs = |key: &str, default_ns: u64| -> Result<u64> {
        Ok(opt(f.non_negative(key, MAX_SECONDS)?)
            .map(seconds_to_ns)
            .unwrap_or(default_ns))
    };
    let horizon_ns = match f.entry("horizon").map(|e| &e.node) {
        None => d.horizon_ns,
        Some(Node::Str(s)) => parse_duration_ns(s).ok_or_else(|| {
            f.err(
                ErrorKind::Invalid,
                "horizon",
                "not a duration",
                "a duration such as \"30d\", \"12h\", \"90m\" or \"3600s\"",
            )
        })?,
        Some(_) => seconds_to_ns(opt(f.positive("horizon", MAX_SECONDS * 100.0)?).unwrap_or(0.0)),
    };
    let rate = |per: &str, mtbf: &str, scale: f64, default: f64| -> Result<f64> {
        let r = opt(f.non_negative(per, MAX_RATE)?);
        let m = opt(f.positive(mtbf, 1e12)?);
        match (r, m) {
            (Some(_), Some(_)) => Err(f.err(
                ErrorKind::Invalid,
                mtbf,
                format!("give either `{per}` or `{mtbf}`, not both"),
                "",
            )),
            (Some(r), None) => Ok(r),
            (None, Some(m)) => Ok(scale / m),
            (None, None) => Ok(default),
        }
    };
    let gpu = rate(
        "gpu_failures_per_gpu_hour",
        "gpu_mtbf_hours",
        1.0,
        d.gpu_failures_per_gpu_hour,
    )?;
    let node_per_1000 = opt(f.non_negative("node_failures_per_1000_node_days", MAX_RATE)?);
    let node = match node_per_1000 {
        Some(r) if f.has("node_failures_per_node_day") || f.has("node_mtbf_hours") => {
            let _ = r;
            return Err(f.err(
                ErrorKind::Invalid,
                "node_failures_per_1000_node_days",
                "give one node failure rate only",
                "",
            ));
        }
        Some(r) => r / 1000.0,
        None => rate(
            "node_failures_per_node_day",
            "node_mtbf_hours",
            24.0,
            d.node_failures_per_node_day,
        )?,
    };
    let link = rate(
        "link_failures_per_link_day",
        "link_mtbf_hours",
        24.0,
        d.link_failures_per_link_day,
    )?;
    let weibull = f
        .choice("distribution", "distribution", &DISTRIBUTIONS)?
        .unwrap_or(false);
    let shape = opt(f.positive("weibull_shape", 100.0)?);
    let distribution = match (weibull, shape) {
        (true, s) => Distribution::Weibull {
            shape: s.unwrap_or(0.8),
        },
        (false, Some(_)) => {
            return Err(f.err(
                ErrorKind::Invalid,
                "weibull_shape",
                "only used with distribution = \"weibull\"",
                "",
            ))
        }
        (false, None) => Distribution::Exponential,
    };
    let slowdown = opt(f.positive("straggler_slowdown", 1000.0)?).unwrap_or(d.straggler_slowdown);
    if slowdown < 1.0 {
        return Err(f.err(
            ErrorKind::Invalid,
            "straggler_slowdown",
            "a slowdown is at least 1",
            "numbers from 1 to 1000",
        ));
    }
    let bw_fraction = opt(f.positive("link_degradation_bandwidth_fraction", 1.0)?)
        .unwrap_or(d.link_degradation_bandwidth_fraction);
    let scheduled = f.array(
        "scheduled_s",
        "an array of times in seconds",
        |e| match &e.node {
            Node::Int(i) if *i >= 0 => Some(seconds_to_ns(*i as f64).max(u64::from(*i > 0))),
            Node::Float(x) if x.is_finite() && *x >= 0.0 && *x <= MAX_SECONDS * 100.0 => {
                Some(seconds_to_ns(*x))
            }
            _ => None,
        },
    )?;
    let mut scheduled_ns = scheduled.unwrap_or_default();
    scheduled_ns.sort_unstable();
    let steps = opt(f.uint("checkpoint_every_steps", 1, 1 << 40)?);
    let minutes = opt(f.positive("checkpoint_every_minutes", MAX_SECONDS / 60.0)?);
    let checkpoint_interval = match (steps, minutes) {
        (Some(_), Some(_)) => {
            return Err(f.err(
                ErrorKind::Invalid,
                "checkpoint_every_minutes",
                "give either `checkpoint_every_steps` or `checkpoint_every_minutes`, not both",
                "",
            ))
        }
        (Some(s), None) => CheckpointInterval::Steps(s),
        (None, Some(m)) => CheckpointInterval::Minutes(m),
        (None, None) => d.checkpoint_interval,
    };
    let bw = |key: &str, default: f64| -> Result<f64> {
        Ok(opt(f.positive(key, MAX_BANDWIDTH)?).unwrap_or(default))
    };
    Ok(Some(FaultConfig {
        horizon_ns,
        seeds: opt(f.uint32("seeds", 1, 1_000_000)?).unwrap_or(d.seeds),
        seed: opt(f.uint("seed", 0, i64::MAX as u64)?).unwrap_or(d.seed),
        gpu_failures_per_gpu_hour: gpu,
        node_failures_per_node_day: node,
        link_failures_per_link_day: link,
        distribution,
        straggler_per_gpu_hour: opt(f.non_negative("straggler_per_gpu_hour", MAX_RATE)?)
            .unwrap_or(d.straggler_per_gpu_hour),
        straggler_slowdown: slowdown,
        straggler_duration_ns: secs("straggler_duration_s", d.straggler_duration_ns)?,
        link_degradation_per_link_day: opt(
            f.non_negative("link_degradation_per_link_day", MAX_RATE)?
        )
        .unwrap_or(d.link_degradation_per_link_day),
        link_degradation_bandwidth_fraction: bw_fraction,
        link_degradation_duration_ns: secs(
            "link_degradation_duration_s",
            d.link_degradation_duration_ns,
        )?,
        scheduled_ns,
        detection_timeout_ns: secs("detection_timeout_s", d.detection_timeout_ns)?,
        restart: f
            .choice("restart", "restart policy", &RESTARTS)?
            .unwrap_or(d.restart),
        spare_swap_ns: secs("spare_swap_s", d.spare_swap_ns)?,
        replacement_wait_ns: secs("replacement_wait_s", d.replacement_wait_ns)?,
        process_restart_ns: secs("process_restart_s", d.process_restart_ns)?,
        comm_init_ns: secs("comm_init_s", d.comm_init_ns)?,
        checkpoint_interval,
        checkpoint_mode: f
            .choice("checkpoint_mode", "checkpoint mode", &MODES)?
            .unwrap_or(d.checkpoint_mode),
        snapshot_bytes_per_s: bw("snapshot_bytes_per_s", d.snapshot_bytes_per_s)?,
        in_memory_replicas: f
            .boolean("in_memory_replicas")?
            .unwrap_or(d.in_memory_replicas),
        peer_bytes_per_s: bw("peer_bytes_per_s", d.peer_bytes_per_s)?,
        storage_write_bytes_per_s: bw("storage_write_bytes_per_s", d.storage_write_bytes_per_s)?,
        storage_read_bytes_per_s: bw("storage_read_bytes_per_s", d.storage_read_bytes_per_s)?,
        checkpoint_bytes: opt(f.uint("checkpoint_bytes", 1, 1 << 56)?),
    }))
}
