//! Two-rank all-gather and reduce-scatter calls over the runtime's TCP mesh with the two cores
//! idle, and with a compute-like thread on each core (nice 5, as the host backend's compute
//! thread, spinning in 100 µs "ops" with a yield between them), as the other pipeline stage's
//! rank keeps a core busy in `tp-pp.toml`. Ranks are threads pinned to cores 0 and 1; a sample
//! is one call from its last member's start to its last end, after a barrier, as the
//! calibration times it. Blocks of 20 calls alternate between the modes. Also the time of the
//! result check the host runtime runs after each call's recorded end (`collective::check`).
//!
//!   cargo run --release -p twin-calibration --example coll_busy_probe

use std::error::Error;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};
use twin_runtime::transport::collective::{self, Ring, Work};
use twin_sim::schedule::CollectiveKind;

const SIZES: [u64; 3] = [16 << 10, 32 << 10, 64 << 10];
const BLOCKS: usize = 10;
const CALLS: usize = 20;
const LANE: u8 = 1;

/// One rank's timed calls (start, end) and result checks (µs).
type RankTimes = (Vec<(Instant, Instant)>, Vec<f64>);

/// A compute-like thread on `core` at nice `nice` until `stop`: spins in ops of `op_us`, with
/// a yield after each.
fn busy(core: u32, nice: i32, op_us: u64, stop: &AtomicBool) {
    twin_runtime::launch::affinity::pin_rank(core);
    twin_runtime::backend::host::priority::lower_priority(nice);
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        while t.elapsed() < Duration::from_micros(op_us) {
            std::hint::spin_loop();
        }
        std::thread::yield_now();
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let meshes = twin_runtime::microbench::local_meshes(2, Duration::from_secs(30))?;
    let nice: i32 = std::env::var("PROBE_NICE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let op_us: u64 = std::env::var("PROBE_OP_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let members = [0u32, 1];
    let mut tag = 0u64;
    for kind in [CollectiveKind::AllGather, CollectiveKind::ReduceScatter] {
        for &bytes in &SIZES {
            let mut samples_us = [Vec::new(), Vec::new()];
            let mut check_us: Vec<f64> = Vec::new();
            for block in 0..2 * BLOCKS {
                let is_busy = block % 2 == 1;
                let stop = AtomicBool::new(false);
                let barrier = Barrier::new(2);
                let base = tag;
                tag += 2 * CALLS as u64 + 2;
                let spans: Result<Vec<RankTimes>, String> = std::thread::scope(|s| {
                    if is_busy {
                        s.spawn(|| busy(0, nice, op_us, &stop));
                        s.spawn(|| busy(1, nice, op_us, &stop));
                    }
                    let hs: Vec<_> = meshes
                        .iter()
                        .map(|m| {
                            let barrier = &barrier;
                            s.spawn(move || -> Result<RankTimes, String> {
                                twin_runtime::launch::affinity::pin_rank(m.rank);
                                let elems = (bytes / 4) as usize;
                                let mut work = Work::default();
                                let mut out = Vec::new();
                                let mut checks = Vec::new();
                                for c in 0..=CALLS as u64 {
                                    let ring = Ring::new(m, &members, LANE, base + c)
                                        .map_err(|e| e.to_string())?;
                                    let data = collective::input(kind, &ring, elems, base + c);
                                    barrier.wait();
                                    let want = collective::expected(kind, &ring, elems, base + c);
                                    let t = Instant::now();
                                    collective::execute_into(kind, &ring, &data, &mut work)
                                        .map_err(|e| e.to_string())?;
                                    let end = Instant::now();
                                    // What the runtime does after a call's recorded end.
                                    collective::check(kind, &ring, work.output(), &want)
                                        .map_err(|e| e.to_string())?;
                                    if c > 0 {
                                        out.push((t, end));
                                        checks.push(end.elapsed().as_nanos() as f64 / 1e3);
                                    }
                                }
                                Ok((out, checks))
                            })
                        })
                        .collect();
                    let r: Result<Vec<_>, String> = hs
                        .into_iter()
                        .map(|h| h.join().map_err(|_| "rank panicked".to_string())?)
                        .collect();
                    stop.store(true, Ordering::Relaxed);
                    r
                });
                let spans = spans?;
                check_us.extend(spans.iter().flat_map(|r| r.1.iter().copied()));
                for (a, b) in spans[0].0.iter().zip(&spans[1].0) {
                    let start = a.0.max(b.0);
                    let end = a.1.max(b.1);
                    samples_us[usize::from(is_busy)]
                        .push(end.saturating_duration_since(start).as_nanos() as f64 / 1e3);
                }
            }
            let q = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                let mean = v.iter().sum::<f64>() / v.len() as f64;
                (v[v.len() / 2], v[v.len() / 10], v[9 * v.len() / 10], mean)
            };
            let (i, b) = (q(&mut samples_us[0]), q(&mut samples_us[1]));
            let c = q(&mut check_us);
            println!(
                "{:>14} {:>6} B: idle median {:6.1} us (p10 {:5.1}, p90 {:6.1}, mean {:6.1}); busy {:6.1} us (p10 {:5.1}, p90 {:6.1}, mean {:6.1}); result check after the call {:4.1} us median",
                kind.name(), bytes, i.0, i.1, i.2, i.3, b.0, b.1, b.2, b.3, c.0
            );
        }
    }
    Ok(())
}
