//! How much of a transfer's time its thread spends on the CPU
//! (docs/journal/2026-11-validation-history.md, 2026-11-24; the calibration measures the p2p half
//! as `[host] p2p_cpu_share`, `bench::p2p_cpu`). The engine runs a host transfer
//! as CPU work on every member's core for its whole priced time, ahead of compute; in the runs a
//! compute op beside a transfer is hardly slowed (`pp`: 22 µs of waiting per step against 190 µs
//! predicted). This probe times the two ranks' threads, each pinned to its own core, over one-way
//! p2p messages (ping-pong) and two-rank ring all-gathers of a few sizes, with the thread's CPU
//! clock (user and system time in its context) beside the wall clock, and prints each rank's CPU
//! time over the wall time. What the kernel does for the transfer in other contexts (softirqs on
//! another core, the loopback device) is not counted.
//!
//!   cargo run --release -p twin-calibration --example transfer_cpu_probe

use std::error::Error;
use std::time::{Duration, Instant};
use twin_runtime::transport::collective::{self, Ring, Work};
use twin_sim::schedule::CollectiveKind;

const SIZES: [u64; 4] = [4 << 10, 16 << 10, 32 << 10, 64 << 10];
/// Calls (or round trips) per sample, and samples per size after one warm-up sample.
const CALLS: u32 = 50;
const SAMPLES: usize = 20;
const P2P_LANE: u8 = 5;
const COLL_LANE: u8 = 6;

/// This thread's CPU time so far, in ns (0 where the clock cannot be read).
fn thread_cpu_ns() -> u64 {
    twin_calibration::bench::p2p_cpu::thread_cpu_ns().unwrap_or(0)
}

/// One rank's share of `samples` samples of `CALLS` calls each: per sample, (wall ns, CPU ns).
fn rank_side(
    mesh: &twin_runtime::transport::mesh::Mesh,
    bytes: u64,
    p2p: bool,
) -> Result<Vec<(f64, f64)>, String> {
    twin_runtime::launch::affinity::pin_rank(mesh.rank);
    // As the runtime's transfer threads: preempting compute at wake-up.
    twin_runtime::backend::host::priority::prefer_wakeup();
    let payload = vec![7u8; bytes as usize];
    let peer = 1 - mesh.rank;
    let members = [0u32, 1];
    let elems = (bytes / 4) as usize;
    let mut work = Work::default();
    let data = {
        let ring = Ring::new(mesh, &members, COLL_LANE, 1 << 40).map_err(|e| e.to_string())?;
        collective::input(CollectiveKind::AllGather, &ring, elems, 1 << 40)
    };
    let mut out = Vec::with_capacity(SAMPLES);
    let mut tag = 0u64;
    for k in 0..=SAMPLES {
        let (t, c) = (Instant::now(), thread_cpu_ns());
        for _ in 0..CALLS {
            tag += 1;
            if p2p {
                if mesh.rank == 0 {
                    mesh.send(peer, P2P_LANE, tag, &payload, false)
                        .map_err(|e| e.to_string())?;
                    mesh.recv(peer, P2P_LANE, tag, bytes)
                        .map_err(|e| e.to_string())?;
                } else {
                    mesh.recv(peer, P2P_LANE, tag, bytes)
                        .map_err(|e| e.to_string())?;
                    mesh.send(peer, P2P_LANE, tag, &payload, false)
                        .map_err(|e| e.to_string())?;
                }
            } else {
                let ring = Ring::new(mesh, &members, COLL_LANE, tag).map_err(|e| e.to_string())?;
                collective::execute_into(CollectiveKind::AllGather, &ring, &data, &mut work)
                    .map_err(|e| e.to_string())?;
            }
        }
        let (wall, cpu) = (t.elapsed().as_nanos() as f64, (thread_cpu_ns() - c) as f64);
        if k > 0 {
            out.push((wall, cpu));
        }
    }
    Ok(out)
}

fn main() -> Result<(), Box<dyn Error>> {
    let meshes = twin_runtime::microbench::local_meshes(2, Duration::from_secs(30))?;
    for p2p in [true, false] {
        for &bytes in &SIZES {
            let sides: Vec<Result<Vec<(f64, f64)>, String>> = std::thread::scope(|s| {
                let hs: Vec<_> = meshes
                    .iter()
                    .map(|m| s.spawn(move || rank_side(m, bytes, p2p)))
                    .collect();
                hs.into_iter()
                    .map(|h| h.join().unwrap_or_else(|_| Err("a rank panicked".into())))
                    .collect()
            });
            let mut line = format!(
                "{:>10} {:>6} B:",
                if p2p { "p2p" } else { "all-gather" },
                bytes
            );
            for (r, side) in sides.into_iter().enumerate() {
                let mut v = side?;
                // Per call: a p2p round trip is two one-way messages.
                let per = if p2p {
                    2.0 * f64::from(CALLS)
                } else {
                    f64::from(CALLS)
                };
                v.sort_by(|a, b| (a.1 / a.0).total_cmp(&(b.1 / b.0)));
                let (wall, cpu) = v[v.len() / 2];
                line.push_str(&format!(
                    "  rank {r}: {:6.1} us wall, {:6.1} us CPU per {} ({:4.0}% on the CPU)",
                    wall / per / 1e3,
                    cpu / per / 1e3,
                    if p2p { "message" } else { "call" },
                    100.0 * cpu / wall
                ));
            }
            println!("{line}");
        }
    }
    Ok(())
}
