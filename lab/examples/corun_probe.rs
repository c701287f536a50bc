//! Whether a compute op runs slower while the other core computes too
//! (docs/journal/2026-11-validation-history.md, 2026-11-23). One scenario op runs on core 0 through
//! the backend's `Workspace`, timed, while core 1 either idles or runs the same op back to back on
//! a workspace of its own; the two ways alternate in blocks of 20 calls, 10 blocks each. OTHER_OP
//! names another compute op for core 1 to run instead (the last, `pp.toml`'s optimizer, is a memory
//! pass over the state).
//!
//!   cargo run --release --manifest-path lab/Cargo.toml --example corun_probe -- scenarios/host/pp.toml 4
//!   cargo run --release --manifest-path lab/Cargo.toml --example corun_probe -- scenarios/host/pp.toml 4 8

mod common;

use std::error::Error;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Instant;

const BLOCKS: usize = 10;
const CALLS: usize = 20;

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: corun_probe SCENARIO [COMPUTE_OP [OTHER_OP]]")?;
    let which: usize = match args.next() {
        Some(s) => s.parse().map_err(|e| format!("COMPUTE_OP {s:?}: {e}"))?,
        None => 0,
    };
    let other_which: usize = match args.next() {
        Some(s) => s.parse().map_err(|e| format!("OTHER_OP {s:?}: {e}"))?,
        None => which,
    };
    let program = common::rank0_program(&path)?;
    let op = common::compute_op(&program, which)?;
    let other = common::compute_op(&program, other_which)?;
    // 0: the other core idles; 1: it computes; 2: stop.
    let mode = AtomicU32::new(0);
    let busy = AtomicBool::new(false);
    let mut times_us = [Vec::new(), Vec::new()];
    std::thread::scope(|sc| {
        sc.spawn(|| {
            twin_runtime::launch::affinity::pin_rank(1);
            let mut ws =
                twin_calibration::bench::compute::workspace_for(std::slice::from_ref(&other));
            loop {
                match mode.load(Ordering::Acquire) {
                    1 => {
                        busy.store(true, Ordering::Release);
                        ws.run(&other);
                    }
                    2 => break,
                    _ => {
                        busy.store(false, Ordering::Release);
                        std::thread::sleep(std::time::Duration::from_micros(200));
                    }
                }
            }
        });
        twin_runtime::launch::affinity::pin_rank(0);
        let mut ws = twin_calibration::bench::compute::workspace_for(std::slice::from_ref(&op));
        for block in 0..2 * BLOCKS {
            let m = block % 2;
            mode.store(m as u32, Ordering::Release);
            while busy.load(Ordering::Acquire) != (m == 1) {
                std::hint::spin_loop();
            }
            ws.run(&op);
            for _ in 0..CALLS {
                let t = Instant::now();
                ws.run(&op);
                times_us[m].push(t.elapsed().as_nanos() as f64 / 1e3);
            }
        }
        mode.store(2, Ordering::Release);
    });
    for (m, v) in times_us.iter_mut().enumerate() {
        v.sort_by(f64::total_cmp);
        let q = |f: f64| v[((v.len() - 1) as f64 * f) as usize];
        println!(
            "other core {}: median {:7.1} us (quartiles {:.1}-{:.1})",
            if m == 0 { "idle     " } else { "computing" },
            q(0.5),
            q(0.25),
            q(0.75)
        );
    }
    Ok(())
}
