//! How much longer one compute op of a scenario runs after other traffic evicted its operands
//! (docs/journal/2026-11-validation-history.md, 2026-11-23: the evidence for the engine's operand
//! residency model). The op runs through the host backend's own `Workspace` on a pinned core: once
//! to warm it, then, after X bytes of other traffic, timed; 60 rounds over every X. The traffic is
//! one of:
//! - `write` (the default): writing X bytes of a buffer that stays allocated;
//! - `alloc`: allocating and touching a fresh X-byte buffer, held over the op, as the host
//!   backend's `Alloc` does;
//! - `alloc-free`: the same buffer, dropped before the op (a `Free` between the two);
//! - `idle`: no traffic, the thread sleeps X µs instead (the sizes read as microseconds), as a
//!   rank's compute thread sleeps while it waits for a transfer.
//!
//!   cargo run --release --manifest-path lab/Cargo.toml --example evict_probe -- scenarios/host/single.toml 1 alloc
//!
//! The second argument picks the compute op of rank 0's program (0-based, compute ops only),
//! the third the traffic.

mod common;

use std::error::Error;
use std::time::Instant;

const ROUNDS: usize = 60;
const SIZES_KIB: [usize; 11] = [0, 256, 512, 768, 1024, 1536, 2048, 3072, 4096, 8192, 65536];
const IDLE_US: [usize; 9] = [0, 20, 50, 100, 200, 500, 1000, 2000, 5000];

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: evict_probe SCENARIO [COMPUTE_OP]")?;
    let which: usize = match args.next() {
        Some(s) => s.parse().map_err(|e| format!("COMPUTE_OP {s:?}: {e}"))?,
        None => 0,
    };
    let mode = args.next().unwrap_or_else(|| "write".into());
    if !["write", "alloc", "alloc-free", "idle"].contains(&mode.as_str()) {
        return Err(format!("traffic {mode:?}: one of write, alloc, alloc-free, idle").into());
    }
    let sizes: &[usize] = if mode == "idle" { &IDLE_US } else { &SIZES_KIB };
    let program = common::rank0_program(&path)?;
    let op = common::compute_op(&program, which)?;
    let shapes: Vec<_> = op.gemms.iter().map(|g| (g.m, g.n, g.k, g.count)).collect();
    println!(
        "compute op {which}: GEMMs (m, n, k, count) {shapes:?}, memory pass {} B",
        op.memory_bytes
    );
    let mut ws = twin_calibration::bench::compute::workspace_for(std::slice::from_ref(&op));
    twin_runtime::launch::affinity::pin_rank(0);
    let mut other = vec![0u8; SIZES_KIB[SIZES_KIB.len() - 1] << 10];
    let mut times_us = vec![Vec::with_capacity(ROUNDS); sizes.len()];
    for round in 0..ROUNDS {
        for (i, &kib) in sizes.iter().enumerate() {
            ws.run(&op);
            let mut held = Vec::new();
            if mode == "idle" {
                if kib > 0 {
                    std::thread::sleep(std::time::Duration::from_micros(kib as u64));
                }
            } else if mode == "write" {
                for (j, x) in other[..kib << 10].iter_mut().enumerate().step_by(64) {
                    *x = (j + round) as u8;
                }
                std::hint::black_box(&other);
            } else {
                // A new buffer, as `Held::alloc` takes when it keeps none of the size.
                held = twin_runtime::backend::host::fresh(kib << 10)?;
                if mode == "alloc-free" {
                    held = Vec::new();
                }
            }
            let t = Instant::now();
            ws.run(&op);
            times_us[i].push(t.elapsed().as_nanos() as f64 / 1e3);
            drop(held);
        }
    }
    let unit = if mode == "idle" { "us" } else { "KiB" };
    for (kib, mut v) in sizes.iter().zip(times_us) {
        v.sort_by(f64::total_cmp);
        let q = |f: f64| v[((v.len() - 1) as f64 * f) as usize];
        println!(
            "after {kib:6} {unit} ({mode}): median {:7.1} us (quartiles {:.1}-{:.1})",
            q(0.5),
            q(0.25),
            q(0.75)
        );
    }
    Ok(())
}
