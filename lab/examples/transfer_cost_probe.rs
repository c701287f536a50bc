//! How much compute a transfer takes from the cores it runs on
//! (docs/journal/2026-11-validation-history.md, 2026-11-24). On each of two cores a thread at
//! the compute thread's priority (nice 5) counts work units, as a rank's compute thread keeps
//! its core busy in a run. Rank 0 (pinned to core 0) sends one message to rank 1 (core 1) every
//! PERIOD µs over the runtime's TCP mesh, or, with `allreduce`, both run a two-rank all-reduce of
//! that size; in the other blocks they only wake up on the same clock. The work lost per message on
//! each core, against those blocks, is what a transfer costs the compute beside it; the engine
//! charges a transfer's modelled duration to both cores, shared 1024:335 with compute.
//!
//!   cargo run --release --manifest-path lab/Cargo.toml --example transfer_cost_probe [p2p|allreduce]

use std::error::Error;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use twin_runtime::transport::collective::{self, Ring, Work};
use twin_sim::schedule::CollectiveKind;

const SIZES: [u64; 4] = [1024, 32 << 10, 256 << 10, 1 << 20];
const BLOCKS: usize = 24;
const MESSAGES: usize = 100;
const PERIOD_US: u64 = 600;
const LANE: u8 = 5;
const UNIT: u64 = 256;

/// Counts work units at nice 5 on `core` until `stop`.
/// With PROBE_WORKER_BYTES=N each unit also adds 1 to 4 KiB of an N-byte buffer, in turn,
/// so the worker keeps the core's caches full of its own data as a GEMM does.
fn worker(core: u32, count: &AtomicU64, stop: &AtomicBool) {
    twin_runtime::launch::affinity::pin_rank(core);
    twin_runtime::backend::host::priority::lower_priority(twin_sim::host_backend::COMPUTE_NICE);
    let bytes: usize = std::env::var("PROBE_WORKER_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut buf = vec![0u32; bytes / 4];
    let chunks = buf.len() / 1024;
    let mut at = 0;
    let mut x = 1u64;
    while !stop.load(Ordering::Relaxed) {
        if chunks > 0 {
            for v in &mut buf[at * 1024..(at + 1) * 1024] {
                *v = v.wrapping_add(1);
            }
            at = (at + 1) % chunks;
            std::hint::black_box(&mut buf);
        } else {
            for _ in 0..UNIT {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            std::hint::black_box(x);
        }
        count.fetch_add(1, Ordering::Relaxed);
    }
}

/// Sleeps until `start + k * PERIOD_US`.
fn tick(start: Instant, k: usize) {
    let at = start + Duration::from_micros(PERIOD_US * k as u64);
    let now = Instant::now();
    if at > now {
        std::thread::sleep(at - now);
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let allreduce = std::env::args().nth(1).as_deref() == Some("allreduce");
    // PROBE_IDLE_CORE=N: no worker on core N, which then idles between transfers.
    let idle_core: Option<usize> = std::env::var("PROBE_IDLE_CORE")
        .ok()
        .and_then(|v| v.parse().ok());
    let meshes = twin_runtime::microbench::local_meshes(2, Duration::from_secs(30))?;
    let mut seq = 0u64;
    for &bytes in &SIZES {
        let payload = vec![7u8; bytes as usize];
        // Per mode (0: clock only, 1: transfers), per core: units per ns, summed over blocks.
        let mut rates = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
        let send_us = std::sync::Mutex::new(Vec::<f64>::new());
        for block in 0..2 * BLOCKS {
            let send = block % 2 == 1;
            let stop = AtomicBool::new(false);
            let counts = [AtomicU64::new(0), AtomicU64::new(0)];
            let base = seq;
            seq += MESSAGES as u64 + 1;
            let got: Result<(f64, [u64; 2]), String> = std::thread::scope(|s| {
                for core in 0..2u32 {
                    if idle_core != Some(core as usize) {
                        let (c, stop) = (&counts[core as usize], &stop);
                        s.spawn(move || worker(core, c, stop));
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
                let start = Instant::now() + Duration::from_micros(PERIOD_US);
                let (meshes, payload, send_us) = (&meshes, &payload, &send_us);
                let run = move |rank: u32| -> Result<(), String> {
                    twin_runtime::launch::affinity::pin_rank(rank);
                    let m = &meshes[rank as usize];
                    let elems = (bytes / 4) as usize;
                    let data = vec![1.0f32; elems];
                    let mut work = Work::default();
                    for k in 0..MESSAGES {
                        tick(start, k);
                        if !send {
                            continue;
                        }
                        let tag = base + k as u64;
                        if allreduce {
                            let ring = Ring::new(m, &[0, 1], 1, (1 << 41) | tag)
                                .map_err(|e| e.to_string())?;
                            collective::execute_into(
                                CollectiveKind::AllReduce,
                                &ring,
                                &data,
                                &mut work,
                            )
                            .map_err(|e| e.to_string())?;
                        } else if rank == 0 {
                            let t = Instant::now();
                            m.send(1, LANE, tag, payload, false)
                                .map_err(|e| e.to_string())?;
                            if let Ok(mut w) = send_us.lock() {
                                w.push(t.elapsed().as_nanos() as f64 / 1e3);
                            }
                        } else {
                            m.recv(0, LANE, tag, bytes).map_err(|e| e.to_string())?;
                        }
                    }
                    Ok(())
                };
                // PROBE_READER=1: rank 0 also has a thread blocked reading the same socket
                // (rank 1 to rank 0, lane 5) for the whole block, as a pipeline rank's receive
                // stream does; rank 1 releases it after the block.
                let reader = std::env::var("PROBE_READER").is_ok_and(|v| v == "1") && !allreduce;
                let release = base + MESSAGES as u64;
                let blocked = reader.then(|| {
                    s.spawn(move || {
                        twin_runtime::launch::affinity::pin_rank(0);
                        meshes[0].recv(1, LANE, release, 8).map(|_| ())
                    })
                });
                let c0 = counts[0].load(Ordering::Relaxed);
                let c1 = counts[1].load(Ordering::Relaxed);
                let t0 = Instant::now();
                let peer = s.spawn(move || run(1));
                let mine = run(0);
                let theirs = peer.join().map_err(|_| "peer panicked".to_string())?;
                if let Some(h) = blocked {
                    meshes[1]
                        .send(0, LANE, release, &[0u8; 8], false)
                        .map_err(|e| e.to_string())?;
                    h.join()
                        .map_err(|_| "reader panicked".to_string())?
                        .map_err(|e| e.to_string())?;
                }
                let wall = t0.elapsed().as_nanos() as f64;
                let d = [
                    counts[0].load(Ordering::Relaxed) - c0,
                    counts[1].load(Ordering::Relaxed) - c1,
                ];
                stop.store(true, Ordering::Relaxed);
                mine?;
                theirs?;
                Ok((wall, d))
            });
            let (wall, d) = got?;
            let mode = usize::from(send);
            for core in 0..2 {
                rates[mode][core].push(d[core] as f64 / wall);
            }
        }
        let mut line = format!(
            "{:>8} B {}:",
            bytes,
            if allreduce { "all-reduce" } else { "send" }
        );
        for core in (0..2).filter(|&c| idle_core != Some(c)) {
            // Per pair of neighbouring blocks, work lost per message as ns of the worker's
            // time at the clock-only rate; the median and quartiles over pairs.
            let period_ns = (PERIOD_US * 1000) as f64;
            let mut lost: Vec<f64> = rates[0][core]
                .iter()
                .zip(&rates[1][core])
                .map(|(idle, busy)| (idle - busy) / idle * period_ns / 1e3)
                .collect();
            lost.sort_by(f64::total_cmp);
            let q = |f: f64| lost[((lost.len() - 1) as f64 * f) as usize];
            line += &format!(
                "  core {core} loses {:6.1} us/message [{:6.1}, {:6.1}]",
                q(0.5),
                q(0.25),
                q(0.75)
            );
        }
        if let Ok(mut w) = send_us.lock() {
            if !w.is_empty() {
                w.sort_by(f64::total_cmp);
                line += &format!("  send call median {:.1} us", w[w.len() / 2]);
            }
        }
        println!("{line}");
    }
    Ok(())
}
