//! Does the optimizer's state leave the last-level cache with time alone
//! (docs/journal/2026-11-validation-history.md, 2026-11-24)? A state of S MiB is updated
//! (`ModelState::apply_optimizer`), then E MiB of other data are written, then the core waits T ms,
//! then the update is timed again. 15 rounds per (S, E, T), medians in GB/s moved. While it waits
//! the core spins on 256 KiB (a core computing from its private cache), or with `PROBE_SLEEP=1`
//! sleeps, or with `PROBE_GEMM=1` runs `single.toml`'s forward GEMMs through the host workspace.
//! `PROBE_CORE` picks the core (two at once, on cores 0 and 1, show what a second rank changes);
//! `PROBE_STATE_MIB`, `PROBE_EVICT_MIB` and `PROBE_GAP_MS` the sweep (comma-separated).
//!
//!   cargo run --release -p twin-calibration --example idle_probe

use std::error::Error;
use std::time::{Duration, Instant};
use twin_runtime::backend::host::ModelState;
use twin_sim::schedule::{Device, MemCategory};

const ROUNDS: usize = 15;

fn env_list(name: &str, default: &[u64]) -> Vec<u64> {
    std::env::var(name)
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

fn main() -> Result<(), Box<dyn Error>> {
    let core = std::env::var("PROBE_CORE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    twin_runtime::launch::affinity::pin_rank(core);
    let sleep = std::env::var("PROBE_SLEEP").is_ok();
    let states = env_list("PROBE_STATE_MIB", &[8, 20, 40]);
    let evicts = env_list("PROBE_EVICT_MIB", &[0, 16]);
    let gaps = env_list("PROBE_GAP_MS", &[0, 2, 5, 10, 20, 50, 100]);
    let mut evict = vec![0u8; (evicts.iter().copied().max().unwrap_or(0) << 20) as usize];
    let mut spin = vec![0u32; 64 << 10];
    // PROBE_GEMM=1: the gap runs single.toml's forward GEMMs through the host workspace
    // instead of spinning on 256 KiB.
    let gemm = std::env::var("PROBE_GEMM").is_ok();
    let op = twin_calibration::bench::compute::compute_op(
        vec![
            twin_sim::schedule::Gemm::single(64, 384, 128, 1),
            twin_sim::schedule::Gemm::single(64, 512, 128, 1),
            twin_sim::schedule::Gemm::single(64, 128, 512, 1),
        ],
        96 << 10,
    );
    let mut ws = twin_calibration::bench::compute::workspace_for(std::slice::from_ref(&op));
    println!(
        "GB/s moved by the update; rows S/E MiB, columns gap ms ({})",
        if gemm {
            "GEMMs"
        } else if sleep {
            "sleep"
        } else {
            "spin on 256 KiB"
        }
    );
    print!("{:>10}", "S/E");
    for g in &gaps {
        print!("{g:>8}");
    }
    println!();
    for &s in &states {
        let mut st = ModelState::new(1, 0);
        st.ensure(0, MemCategory::Optimizer, Device::Gpu, s << 20)?;
        let moved = st.update_bytes() as f64;
        for &e in &evicts {
            print!("{:>10}", format!("{s}/{e}"));
            let mut round = 0u64;
            for &g in &gaps {
                let mut v = Vec::new();
                for _ in 0..ROUNDS {
                    round += 1;
                    st.apply_optimizer(round);
                    let n = (e << 20) as usize;
                    for (j, x) in evict[..n].iter_mut().enumerate().step_by(64) {
                        *x = (j as u64 + round) as u8;
                    }
                    let until = Instant::now() + Duration::from_millis(g);
                    if gemm {
                        while Instant::now() < until {
                            ws.run(&op);
                        }
                    } else if sleep {
                        std::thread::sleep(Duration::from_millis(g));
                    } else {
                        while Instant::now() < until {
                            for x in spin.iter_mut() {
                                *x = x.wrapping_add(1);
                            }
                        }
                    }
                    round += 1;
                    let t = Instant::now();
                    st.apply_optimizer(round);
                    v.push(moved / t.elapsed().as_nanos() as f64);
                }
                v.sort_by(f64::total_cmp);
                print!("{:8.1}", v[v.len() / 2]);
            }
            println!();
        }
    }
    std::hint::black_box(&spin);
    Ok(())
}
