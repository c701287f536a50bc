//! The `[faults]` section: failure rates, stragglers, recovery and checkpoint policy for the
//! long-horizon mode. Like `[checks]` it is returned beside the [`super::Scenario`]: it says
//! what happens to the job over weeks, not what one step is, so planning never sees it.

use super::error::ErrorKind;
use super::fault_config::{
    parse_duration_ns, seconds_to_ns, CheckpointInterval, CheckpointMode, Distribution,
    FaultConfig, RestartPolicy,
};
use super::keys::{faults as k, Key};
use super::read::{opt, Result, Section};
use super::source::Node;

/// Every key `[faults]` accepts, in the schema's order.
pub fn fault_keys() -> impl Iterator<Item = &'static str> {
    k::ALL.iter().map(|k| k.name)
}

pub(crate) const RESTARTS: [(&str, RestartPolicy); 3] = [
    ("hot_spare", RestartPolicy::HotSpare),
    ("wait_replacement", RestartPolicy::WaitReplacement),
    ("elastic", RestartPolicy::Elastic),
];
pub(crate) const MODES: [(&str, CheckpointMode); 2] = [
    ("sync", CheckpointMode::Sync),
    ("async", CheckpointMode::Async),
];
pub(crate) const DISTRIBUTIONS: [(&str, bool); 2] = [("exponential", false), ("weibull", true)];

/// `horizon` given as a number of seconds: up to 100 years.
const HORIZON_SECONDS: Key = Key {
    kind: super::keys::Kind::Number {
        zero_ok: false,
        max: MAX_SCHEDULED_S,
    },
    ..k::HORIZON
};
/// Times in `scheduled_s`, and a `horizon` in seconds: up to 100 years.
const MAX_SCHEDULED_S: f64 = 100.0 * 365.0 * 86_400.0;

/// Parses `[faults]`; `None` when the scenario has no such section.
pub(crate) fn faults(f: Section<'_>) -> Result<Option<FaultConfig>> {
    if f.table.is_none() {
        return Ok(None);
    }
    f.check_unknown()?;
    let d = FaultConfig::default();
    let secs = |key: &Key| -> Result<u64> { Ok(seconds_to_ns(f.number_or_default(key)?)) };
    let horizon_ns = match f.entry(k::HORIZON.name).map(|e| &e.node) {
        None => d.horizon_ns,
        Some(Node::Str(s)) => parse_duration_ns(s).ok_or_else(|| {
            f.err(
                ErrorKind::Invalid,
                k::HORIZON.name,
                "not a duration",
                "a duration such as \"30d\", \"12h\", \"90m\" or \"3600s\"",
            )
        })?,
        Some(_) => seconds_to_ns(opt(f.number(&HORIZON_SECONDS)?).unwrap_or(0.0)),
    };
    let rate = |per: &Key, mtbf: &Key, scale: f64| -> Result<f64> {
        let r = opt(f.number(per)?);
        let m = opt(f.number(mtbf)?);
        match (r, m) {
            (Some(_), Some(_)) => Err(f.err(
                ErrorKind::Invalid,
                mtbf.name,
                format!("give either `{}` or `{}`, not both", per.name, mtbf.name),
                "",
            )),
            (Some(r), None) => Ok(r),
            (None, Some(m)) => Ok(scale / m),
            (None, None) => f.number_or_default(per),
        }
    };
    let gpu = rate(&k::GPU_FAILURES_PER_GPU_HOUR, &k::GPU_MTBF_HOURS, 1.0)?;
    let node_per_1000 = opt(f.number(&k::NODE_FAILURES_PER_1000_NODE_DAYS)?);
    let node = match node_per_1000 {
        Some(r) if f.has(k::NODE_FAILURES_PER_NODE_DAY.name) || f.has(k::NODE_MTBF_HOURS.name) => {
            let _ = r;
            return Err(f.err(
                ErrorKind::Invalid,
                k::NODE_FAILURES_PER_1000_NODE_DAYS.name,
                "give one node failure rate only",
                "",
            ));
        }
        Some(r) => r / 1000.0,
        None => rate(&k::NODE_FAILURES_PER_NODE_DAY, &k::NODE_MTBF_HOURS, 24.0)?,
    };
    let link = rate(&k::LINK_FAILURES_PER_LINK_DAY, &k::LINK_MTBF_HOURS, 24.0)?;
    let weibull = f.choice_or_default(&k::DISTRIBUTION, &DISTRIBUTIONS)?;
    let shape = opt(f.number(&k::WEIBULL_SHAPE)?);
    let distribution = match (weibull, shape) {
        (true, s) => Distribution::Weibull {
            shape: s.unwrap_or(match k::WEIBULL_SHAPE.default {
                super::keys::Absent::Num(v) => v,
                _ => 0.8,
            }),
        },
        (false, Some(_)) => {
            return Err(f.err(
                ErrorKind::Invalid,
                k::WEIBULL_SHAPE.name,
                "only used with distribution = \"weibull\"",
                "",
            ))
        }
        (false, None) => Distribution::Exponential,
    };
    let slowdown = f.number_or_default(&k::STRAGGLER_SLOWDOWN)?;
    if slowdown < 1.0 {
        return Err(f.err(
            ErrorKind::Invalid,
            k::STRAGGLER_SLOWDOWN.name,
            "a slowdown is at least 1",
            "numbers from 1 to 1000",
        ));
    }
    let bw_fraction = f.number_or_default(&k::LINK_DEGRADATION_BANDWIDTH_FRACTION)?;
    let scheduled = f.array(&k::SCHEDULED_S, |e| match &e.node {
        Node::Int(i) if *i >= 0 => Some(seconds_to_ns(*i as f64).max(u64::from(*i > 0))),
        Node::Float(x) if x.is_finite() && *x >= 0.0 && *x <= MAX_SCHEDULED_S => {
            Some(seconds_to_ns(*x))
        }
        _ => None,
    })?;
    let mut scheduled_ns = scheduled.unwrap_or_default();
    scheduled_ns.sort_unstable();
    let steps = opt(f.uint(&k::CHECKPOINT_EVERY_STEPS)?);
    let minutes = opt(f.number(&k::CHECKPOINT_EVERY_MINUTES)?);
    let checkpoint_interval = match (steps, minutes) {
        (Some(_), Some(_)) => {
            return Err(f.err(
                ErrorKind::Invalid,
                k::CHECKPOINT_EVERY_MINUTES.name,
                "give either `checkpoint_every_steps` or `checkpoint_every_minutes`, not both",
                "",
            ))
        }
        (Some(s), None) => CheckpointInterval::Steps(s),
        (None, Some(m)) => CheckpointInterval::Minutes(m),
        (None, None) => d.checkpoint_interval,
    };
    let bw = |key: &Key| f.number_or_default(key);
    Ok(Some(FaultConfig {
        horizon_ns,
        seeds: f.uint32_or_default(&k::SEEDS)?,
        seed: f.uint_or_default(&k::SEED)?,
        gpu_failures_per_gpu_hour: gpu,
        node_failures_per_node_day: node,
        link_failures_per_link_day: link,
        distribution,
        straggler_per_gpu_hour: f.number_or_default(&k::STRAGGLER_PER_GPU_HOUR)?,
        straggler_slowdown: slowdown,
        straggler_duration_ns: secs(&k::STRAGGLER_DURATION_S)?,
        link_degradation_per_link_day: f.number_or_default(&k::LINK_DEGRADATION_PER_LINK_DAY)?,
        link_degradation_bandwidth_fraction: bw_fraction,
        link_degradation_duration_ns: secs(&k::LINK_DEGRADATION_DURATION_S)?,
        scheduled_ns,
        detection_timeout_ns: secs(&k::DETECTION_TIMEOUT_S)?,
        restart: f.choice_or_default(&k::RESTART, &RESTARTS)?,
        spare_swap_ns: secs(&k::SPARE_SWAP_S)?,
        replacement_wait_ns: secs(&k::REPLACEMENT_WAIT_S)?,
        process_restart_ns: secs(&k::PROCESS_RESTART_S)?,
        comm_init_ns: secs(&k::COMM_INIT_S)?,
        checkpoint_interval,
        checkpoint_mode: f.choice_or_default(&k::CHECKPOINT_MODE, &MODES)?,
        snapshot_bytes_per_s: bw(&k::SNAPSHOT_BYTES_PER_S)?,
        in_memory_replicas: f.boolean_or_default(&k::IN_MEMORY_REPLICAS)?,
        peer_bytes_per_s: bw(&k::PEER_BYTES_PER_S)?,
        storage_write_bytes_per_s: bw(&k::STORAGE_WRITE_BYTES_PER_S)?,
        storage_read_bytes_per_s: bw(&k::STORAGE_READ_BYTES_PER_S)?,
        checkpoint_bytes: opt(f.uint(&k::CHECKPOINT_BYTES)?),
    }))
}
