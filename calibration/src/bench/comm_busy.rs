//! What a compute op beside a transfer on the same core costs the transfer. In a run with
//! more ranks than cores (`tp-pp.toml`: four ranks on two), a rank's collective shares its
//! core with another rank's compute thread; the engine shares the core between the two by
//! weight (`[host] compute_weight`, the compute thread's share against the transfer's 1). The
//! kernel's weights for the two threads' nice levels say 0.33; the AMD development VM's runs
//! showed the transfers barely slowed (docs/journal/2026-11-validation-history.md, 2026-11-24). So
//! it is measured: two-rank all-gathers and reduce-scatters, each rank pinned to its own core,
//! timed in blocks that alternate between cores otherwise idle and a compute thread on each core
//! (the host backend's compute priority, a GEMM op at a time with a yield after each, as the
//! runtime's compute thread runs). A call is timed as `comm` times it, from its last member's start
//! to its last end after a barrier.

use super::comm::{run_world, task_samples, Task};
use super::compute::{compute_op, workspace_for};
use super::{CommBusySamples, Config, Counter, Mode};
use crate::CalibError;
use std::sync::atomic::{AtomicBool, Ordering};
use twin_runtime::launch::affinity::pin_rank;
use twin_sim::schedule::{CollectiveKind, Gemm};

/// The compute thread's op: about 100 µs of one core's sgemm, as a host scenario's layer op.
const BUSY_GEMM: Gemm = Gemm {
    dtype: None,
    m: 128,
    n: 256,
    k: 384,
    count: 1,
    batch: 1,
};

/// The collectives and sizes timed: the tensor-parallel calls of the host scenarios.
const KINDS: [CollectiveKind; 2] = [CollectiveKind::AllGather, CollectiveKind::ReduceScatter];
const SIZES: [u64; 2] = [16 << 10, 64 << 10];

/// Blocks per mode (idle, busy, idle, ...).
fn blocks(mode: Mode) -> u32 {
    match mode {
        Mode::Full => 4,
        Mode::Quick => 2,
        Mode::Tiny => 1,
    }
}

fn tasks() -> Vec<Task> {
    KINDS
        .iter()
        .flat_map(|&k| {
            SIZES.iter().map(move |&bytes| Task {
                kind: Some(k),
                bytes,
            })
        })
        .collect()
}

/// Calls per block and task.
fn calls(cfg: &Config) -> u32 {
    cfg.comm.warmup + cfg.comm.timed.max(1)
}

/// How many measurements [`comm_busy`] reports (0 on fewer than two cores, where it does not
/// run).
pub fn measurement_count(cfg: &Config, cores: u32) -> usize {
    if cores < 2 {
        return 0;
    }
    (2 * blocks(cfg.mode) * calls(cfg)) as usize * tasks().len()
}

/// A compute thread on `core` until `stop`: the GEMM op, a yield after each, at the host
/// backend's compute priority.
fn compute_thread(core: u32, stop: &AtomicBool) {
    pin_rank(core);
    twin_runtime::backend::host::priority::lower_priority(twin_sim::host_backend::COMPUTE_NICE);
    let op = compute_op(vec![BUSY_GEMM], 0);
    let mut ws = workspace_for(std::slice::from_ref(&op));
    while !stop.load(Ordering::Relaxed) {
        ws.run_gemms(&op);
        std::thread::yield_now();
    }
}

/// The measurement; empty on fewer than two cores (two ranks would share one).
pub fn comm_busy(
    cfg: &Config,
    cores: u32,
    progress: &mut Counter,
) -> Result<Vec<CommBusySamples>, CalibError> {
    if cores < 2 {
        return Ok(Vec::new());
    }
    let meshes = super::comm::two_ranks()?;
    let members = [0u32, 1];
    let tasks = tasks();
    let calls = calls(cfg);
    let mut out: Vec<CommBusySamples> = tasks
        .iter()
        .map(|t| CommBusySamples {
            kind: t.kind.map_or("p2p", CollectiveKind::name).to_string(),
            bytes: t.bytes,
            gemm: [BUSY_GEMM.m, BUSY_GEMM.n, BUSY_GEMM.k],
            compute_nice: twin_sim::host_backend::COMPUTE_NICE,
            idle_ns: Vec::new(),
            busy_ns: Vec::new(),
        })
        .collect();
    for block in 0..2 * blocks(cfg.mode) {
        let busy = block % 2 == 1;
        let stop = AtomicBool::new(false);
        let per_rank = std::thread::scope(|s| {
            if busy {
                for core in 0..2 {
                    let stop = &stop;
                    s.spawn(move || compute_thread(core, stop));
                }
            }
            let r = run_world(&meshes, &members, &tasks, calls, Some(&mut *progress));
            stop.store(true, Ordering::Relaxed);
            r
        })?;
        for (i, row) in out.iter_mut().enumerate() {
            let times = task_samples(&per_rank, i, cfg.comm.warmup..calls);
            if busy {
                row.busy_ns.extend(times);
            } else {
                row.idle_ns.extend(times);
            }
        }
    }
    Ok(out)
}
