//! How much of a p2p message's time its threads spend on the CPU. The engine runs a host
//! transfer as CPU work on its members' cores; for a collective that is right (its ring
//! polls for its peers, 100% on the CPU), but a p2p's two threads sleep in their blocking
//! reads for part of each message: over 4-64 KiB ping-pongs each end was on the CPU 38-51%
//! of the one-way time on the AMD development VM (docs/journal/2026-11-validation-history.md,
//! 2026-11-24). Two ranks, each a thread pinned to its own core as the runtime pins a rank,
//! ping-pong messages the way `comm` times p2p; each sample records both threads' CPU clocks
//! (`CLOCK_THREAD_CPUTIME_ID`: user and system time in the thread's context) against the wall
//! clock. The profile's `[host] p2p_cpu_share` is the mean of those ratios
//! (`fit::ratio::busy_share`).

use super::comm::Barrier;
use super::{Config, Counter, Mode};
use crate::CalibError;
use serde::{Deserialize, Serialize};
use std::time::Instant;
use twin_runtime::launch::affinity::pin_rank;
use twin_runtime::transport::mesh::Mesh;

/// Message sizes: the host scenarios' pipeline sends (16 KiB) and around them.
const SIZES: [u64; 3] = [4 << 10, 16 << 10, 64 << 10];
/// Round trips per sample.
const ROUNDS: u32 = 20;
/// The lane `comm` sends p2p messages on (any below `mesh::LANES` would do).
const LANE: u8 = 5;

/// One message size's samples: per sample and rank, the wall time of the sample's round trips
/// and the rank thread's CPU time in them (`wall_ns[i]` and `cpu_ns[i]` belong together).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct P2pCpuSamples {
    pub bytes: u64,
    pub round_trips: u32,
    pub wall_ns: Vec<f64>,
    pub cpu_ns: Vec<f64>,
}

/// Timed samples per size (after one untimed).
fn samples(mode: Mode) -> usize {
    match mode {
        Mode::Full => 12,
        Mode::Quick => 6,
        Mode::Tiny => 2,
    }
}

/// How many measurements [`p2p_cpu`] reports (0 on fewer than two cores, where it does not
/// run: two ranks on one core would time each other's turns).
pub fn measurement_count(cores: u32) -> usize {
    if cores < 2 {
        0
    } else {
        SIZES.len()
    }
}

/// The calling thread's CPU time so far, in ns (`CLOCK_THREAD_CPUTIME_ID`, exact at the call;
/// the scheduler's `/proc/thread-self/schedstat` is only brought up to date when the thread
/// is switched out or the tick comes). `None` where the clock cannot be read.
pub fn thread_cpu_ns() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes only the timespec it is given.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        if rc != 0 {
            return None;
        }
        Some(u64::try_from(ts.tv_sec).ok()? * 1_000_000_000 + u64::try_from(ts.tv_nsec).ok()?)
    }
    #[cfg(not(unix))]
    None
}

/// One rank's side: `n + 1` samples of [`ROUNDS`] round trips of `bytes`, the first untimed;
/// per timed sample (wall ns, CPU ns).
fn rank_side(
    mesh: &Mesh,
    bytes: u64,
    n: usize,
    barrier: &Barrier,
) -> Result<Vec<(f64, f64)>, CalibError> {
    let r = ping_pong(mesh, bytes, n, barrier);
    if r.is_err() {
        // Release the peer, wherever it waits: at the barrier or in a transfer.
        barrier.abort();
        mesh.shutdown_all();
    }
    r
}

fn ping_pong(
    mesh: &Mesh,
    bytes: u64,
    n: usize,
    barrier: &Barrier,
) -> Result<Vec<(f64, f64)>, CalibError> {
    pin_rank(mesh.rank);
    // A transfer thread, as the runtime's are (it preempts compute when it wakes).
    twin_runtime::backend::host::priority::prefer_wakeup();
    let payload = vec![7u8; usize::try_from(bytes).unwrap_or(usize::MAX)];
    let sum = Some(twin_runtime::transport::frame::wire_sum(&payload));
    let peer = 1 - mesh.rank;
    let mut out = Vec::with_capacity(n);
    let mut tag = 0u64;
    for k in 0..=n {
        barrier.wait(2)?;
        let (t, c) = (Instant::now(), thread_cpu_ns());
        for _ in 0..ROUNDS {
            tag += 1;
            super::comm::round_trip(mesh, peer, (LANE, tag), &payload, sum)?;
        }
        let wall = t.elapsed().as_nanos() as f64;
        let cpu = match (c, thread_cpu_ns()) {
            (Some(a), Some(b)) => b.saturating_sub(a) as f64,
            _ => {
                return Err(CalibError::Bench(
                    "p2p CPU share: no thread CPU clock".into(),
                ))
            }
        };
        if k > 0 {
            out.push((wall, cpu));
        }
    }
    Ok(out)
}

/// The measurement; empty on fewer than two cores.
pub fn p2p_cpu(
    cfg: &Config,
    cores: u32,
    progress: &mut Counter,
) -> Result<Vec<P2pCpuSamples>, CalibError> {
    if cores < 2 {
        return Ok(Vec::new());
    }
    let meshes = super::comm::two_ranks()?;
    let n = samples(cfg.mode);
    let mut out = Vec::with_capacity(SIZES.len());
    for &bytes in &SIZES {
        let barrier = Barrier::default();
        let sides = std::thread::scope(|s| {
            let hs: Vec<_> = meshes
                .iter()
                .map(|m| {
                    let barrier = &barrier;
                    s.spawn(move || rank_side(m, bytes, n, barrier))
                })
                .collect();
            super::comm::join_ranks(hs)
        })?;
        let mut row = P2pCpuSamples {
            bytes,
            round_trips: ROUNDS,
            wall_ns: Vec::new(),
            cpu_ns: Vec::new(),
        };
        for (wall, cpu) in sides.into_iter().flatten() {
            row.wall_ns.push(wall);
            row.cpu_ns.push(cpu);
        }
        out.push(row);
        progress.tick("p2p CPU share");
    }
    Ok(out)
}
