//! Refusing runs this machine cannot hold, before any process starts or any device memory is
//! touched, and the limits of a run's timeout. The caller hands in the simulator's prediction
//! of each rank ([`RankDemand`]).

use super::JobError;
use std::time::Duration;

/// What the simulator predicts one rank needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RankDemand {
    /// Peak device (or, on the host backend, model) memory.
    pub peak_memory_bytes: u64,
    /// Peak host memory besides the model's (buffers of the runtime).
    pub host_memory_peak_bytes: u64,
    /// Floating-point operations per step.
    pub flops: u64,
}

/// Longest `--timeout-s`: a day without progress is a hung run. Every wait and deadline of the
/// ranks and the launcher stays far inside what `Duration` and `Instant` can hold, and a poll
/// timeout in milliseconds still fits an `i32`.
pub const MAX_TIMEOUT_S: f64 = 86_400.0;

/// A `--timeout-s` value: seconds, more than 0 and at most [`MAX_TIMEOUT_S`].
pub fn parse_timeout_s(text: &str) -> Result<f64, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .and_then(|v| timeout(v).ok())
        .map(|d| d.as_secs_f64())
        .ok_or_else(|| format!("allowed: seconds, more than 0 and at most {MAX_TIMEOUT_S} (a day)"))
}

/// `seconds` as a timeout, or why it is none.
pub fn timeout(seconds: f64) -> Result<Duration, JobError> {
    if seconds > 0.0 && seconds <= MAX_TIMEOUT_S {
        Ok(Duration::from_secs_f64(seconds))
    } else {
        Err(JobError::Refused(format!(
            "--timeout-s {seconds} is not more than 0 and at most {MAX_TIMEOUT_S} seconds (a day)"
        )))
    }
}

/// Most ranks `twin run` starts on one machine.
pub const MAX_LOCAL_RANKS: u32 = 64;
/// A rough single-core f32 GEMM rate, only to warn about runs that would take very long.
const CPU_FLOPS_PER_S: f64 = 2e10;

/// Refuse a host run with more ranks than one machine starts.
pub fn check_local_ranks(world: u32) -> Result<(), JobError> {
    if world <= MAX_LOCAL_RANKS {
        return Ok(());
    }
    Err(JobError::Refused(format!(
        "the scenario plans {world} ranks; `twin run --backend host` starts one process per rank on this machine (at most {MAX_LOCAL_RANKS}): use a smaller layout (--set parallel.dp=1 ...) or start workers on several machines (docs/runtime.md)"
    )))
}

/// Refuse a host run whose ranks together need more memory than is available; returns a
/// notice when the busiest rank's `steps` would take very long on CPU cores.
pub fn check_host_memory(ranks: &[RankDemand], steps: u32) -> Result<Option<String>, JobError> {
    let need = ranks
        .iter()
        .map(|r| r.peak_memory_bytes + r.host_memory_peak_bytes)
        .sum::<u64>();
    if let Some(avail) = mem_available_bytes() {
        if need > avail {
            return Err(JobError::Refused(format!(
                "the ranks would hold {:.2} GiB together but {:.2} GiB of memory is available: shrink the scenario, e.g. --scale hidden=0.25",
                need as f64 / (1u64 << 30) as f64,
                avail as f64 / (1u64 << 30) as f64
            )));
        }
    }
    let flops = ranks.iter().map(|r| r.flops).max().unwrap_or(0);
    let est_s = flops as f64 / CPU_FLOPS_PER_S * f64::from(steps);
    Ok((est_s > 60.0).then(|| {
        format!(
            "the busiest rank has {:.1} TFLOP per step: expect about {est_s:.0} s or more on CPU cores; --scale hidden=0.25 shrinks it about 16x",
            flops as f64 / 1e12
        )
    }))
}

/// MemAvailable from /proc/meminfo (Linux); `None` elsewhere.
fn mem_available_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Refuse a CUDA run whose schedule peak plus the runtime's workspaces exceed the GPU's usable
/// bytes, before any device memory is touched (docs/memory.md, "Device memory of a run").
#[cfg(feature = "cuda")]
pub fn check_fits_device(work: &super::Work<'_>, ranks: &[RankDemand]) -> Result<(), JobError> {
    use crate::backend::cuda::{footprint::DeviceFit, CudaOptions};
    let fit = DeviceFit::of(
        work.scenario,
        work.schedule,
        ranks.iter().map(|r| r.peak_memory_bytes),
        CudaOptions::default().allow_tf32,
    );
    fit.check()?;
    Ok(())
}

/// Refuse a multi-GPU CUDA run this machine cannot hold, before any process starts: no
/// driver is the "no CUDA driver found (searched: ...)" error, too few GPUs names both counts.
#[cfg(feature = "cuda")]
pub fn check_gpus(world: u32) -> Result<(), JobError> {
    let gpus = crate::backend::cuda::CudaBackend::device_count()?;
    if world <= gpus {
        return Ok(());
    }
    Err(JobError::Refused(format!(
        "the scenario plans {world} ranks but this machine has {gpus} GPU(s): `twin run --backend cuda` starts one process per GPU; use a smaller layout (--set parallel.dp=1 ...), start workers on several machines (docs/runtime.md), or --backend host"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_is_more_than_zero_and_at_most_a_day() {
        assert_eq!(parse_timeout_s(" 2.5 "), Ok(2.5));
        assert_eq!(parse_timeout_s("86400"), Ok(MAX_TIMEOUT_S));
        for bad in ["0", "-1", "86400.5", "inf", "NaN", "x"] {
            let e = parse_timeout_s(bad).unwrap_err();
            assert!(e.contains("at most 86400"), "{bad}: {e}");
        }
    }

    #[test]
    fn more_ranks_than_one_machine_starts_are_refused_with_what_to_do() {
        assert!(check_local_ranks(MAX_LOCAL_RANKS).is_ok());
        let e = check_local_ranks(MAX_LOCAL_RANKS + 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("plans 65 ranks"), "{e}");
        assert!(e.contains("docs/runtime.md"), "{e}");
    }

    #[test]
    fn a_slow_run_gets_a_notice_and_a_quick_one_none() {
        let quick = [RankDemand {
            flops: 1_000_000,
            ..RankDemand::default()
        }];
        assert_eq!(check_host_memory(&quick, 2).unwrap(), None);
        let slow = [RankDemand {
            flops: 2_000_000_000_000,
            ..RankDemand::default()
        }];
        let n = check_host_memory(&slow, 2).unwrap().unwrap();
        assert!(n.contains("2.0 TFLOP per step"), "{n}");
        assert!(n.contains("about 200 s"), "{n}");
    }
}
