//! One-way p2p time over the runtime's TCP mesh, back to back, with the cores idle between
//! messages and with a nice-19 thread spinning on each rank's core, as a compute thread keeps a
//! shared core busy in a run (docs/journal/2026-11-validation-history.md, 2026-11-24). Two ranks as
//! threads, each pinned to its own core; half of the mean round trip of 8 ping-pongs is one sample,
//! 200 samples per size and mode, modes alternating in blocks. PROBE_GAP_US=N makes rank 0 sleep N
//! µs after each sample (both cores idle, as between a calibration's calls).
//!
//!   cargo run --release --manifest-path lab/Cargo.toml --example p2p_busy_probe

use std::error::Error;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const SIZES: [u64; 4] = [1024, 16 << 10, 32 << 10, 256 << 10];
const BLOCKS: usize = 10;
const SAMPLES: usize = 20;
const ROUNDS: u32 = 8;
const LANE: u8 = 5;

/// Spin at nice 19 on the calling thread's core until `stop`.
fn spinner(core: u32, stop: &AtomicBool) {
    twin_runtime::launch::affinity::pin_rank(core);
    twin_runtime::backend::host::priority::lower_priority(19);
    while !stop.load(Ordering::Relaxed) {
        std::hint::spin_loop();
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let meshes = twin_runtime::microbench::local_meshes(2, Duration::from_secs(30))?;
    // PROBE_GAP_US: rank 0 sleeps this long after each sample, as a barrier between calls
    // leaves both cores idle.
    let gap_us: Option<u64> = std::env::var("PROBE_GAP_US")
        .ok()
        .and_then(|v| v.parse().ok());
    let (m0, m1) = (&meshes[0], &meshes[1]);
    for &bytes in &SIZES {
        let payload = vec![7u8; bytes as usize];
        let mut samples_us = [Vec::new(), Vec::new()];
        for block in 0..2 * BLOCKS {
            let busy = block % 2 == 1;
            let stop = AtomicBool::new(false);
            let got: Result<Vec<f64>, String> = std::thread::scope(|s| {
                if busy {
                    s.spawn(|| spinner(0, &stop));
                    s.spawn(|| spinner(1, &stop));
                }
                let peer = s.spawn(|| -> Result<(), String> {
                    twin_runtime::launch::affinity::pin_rank(1);
                    for i in 0..(SAMPLES as u32 + 1) * ROUNDS {
                        let tag = u64::from(i);
                        m1.recv(0, LANE, tag, bytes).map_err(|e| e.to_string())?;
                        m1.send(0, LANE, tag, &payload, false)
                            .map_err(|e| e.to_string())?;
                    }
                    Ok(())
                });
                twin_runtime::launch::affinity::pin_rank(0);
                let mut out = Vec::with_capacity(SAMPLES);
                let mut i = 0u32;
                for k in 0..=SAMPLES {
                    let t = Instant::now();
                    for _ in 0..ROUNDS {
                        let tag = u64::from(i);
                        i += 1;
                        m0.send(1, LANE, tag, &payload, false)
                            .map_err(|e| e.to_string())?;
                        m0.recv(1, LANE, tag, bytes).map_err(|e| e.to_string())?;
                    }
                    // The first sample of a block is a warm-up.
                    if k > 0 {
                        out.push(t.elapsed().as_nanos() as f64 / 1e3 / (2.0 * f64::from(ROUNDS)));
                    }
                    if let Some(us) = gap_us {
                        std::thread::sleep(Duration::from_micros(us));
                    }
                }
                stop.store(true, Ordering::Relaxed);
                peer.join().map_err(|_| "peer panicked".to_string())??;
                Ok(out)
            });
            samples_us[usize::from(busy)].extend(got?);
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            (v[v.len() / 2], v[v.len() / 10], v[9 * v.len() / 10])
        };
        let (i, b) = (
            med(&mut samples_us[0].clone()),
            med(&mut samples_us[1].clone()),
        );
        println!(
            "{:>7} B one way: idle cores median {:6.1} us (p10 {:5.1}, p90 {:6.1}); busy cores {:6.1} us (p10 {:5.1}, p90 {:6.1})",
            bytes, i.0, i.1, i.2, b.0, b.1, b.2
        );
    }
    Ok(())
}
