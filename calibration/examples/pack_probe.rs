//! Whether where the sgemm's packing buffer lands moves a compute op's time
//! (docs/journal/2026-11-validation-history.md, 2026-11-24). `matrixmultiply` allocates its packing
//! buffer on every call; this probe's global allocator serves those allocations (64 KiB or more, on
//! the probe's thread, while a flag is set) from one arena at a chosen offset, and times rank 0's
//! forward and backward ops with the buffer at each offset, 20 runs each after 3 to warm up,
//! medians in µs.
//!
//!   cargo run --release -p twin-calibration --example pack_probe -- scenarios/host/pp-wide.toml

mod common;

use std::error::Error;
use std::time::Instant;
use twin_sim::schedule::OpKind;

#[global_allocator]
static GLOBAL: common::arena::Arena = common::arena::Arena;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: pack_probe SCENARIO")?;
    let program = common::rank0_program(&path)?;
    let arena = common::arena::install()? as *const u8;
    let mut ws = twin_runtime::backend::host::Workspace::for_program(&program);
    twin_runtime::launch::affinity::pin_rank(0);
    let ops: Vec<_> = program
        .ops
        .iter()
        .filter_map(|o| match &o.kind {
            OpKind::Compute(c) if c.phase != twin_sim::schedule::Phase::Optimizer => {
                Some((o.name(), c.clone()))
            }
            _ => None,
        })
        .collect();
    let fwd = ops
        .iter()
        .find(|(n, _)| n.starts_with("fwd"))
        .ok_or("no forward op")?;
    let bwd = ops
        .iter()
        .find(|(n, _)| n.starts_with("bwd"))
        .ok_or("no backward op")?;
    println!("offset (bytes)   fwd gemms   bwd gemms   (medians, us; arena at {arena:p})");
    let offsets = [
        0usize,
        64,
        512,
        1024,
        2048,
        2112,
        3072,
        4032,
        8192 + 2048,
        1 << 20,
    ];
    for round in 0..2 {
        for &off in &offsets {
            common::arena::set_offset(off);
            let mut t = [Vec::new(), Vec::new()];
            common::arena::set_active(true);
            for (k, (_, op)) in [fwd, bwd].iter().enumerate() {
                for i in 0..23 {
                    let s = Instant::now();
                    ws.run_gemms(op);
                    if i >= 3 {
                        t[k].push(s.elapsed().as_nanos() as f64 / 1e3);
                    }
                }
            }
            common::arena::set_active(false);
            let [mut f, mut b] = t;
            println!(
                "{round} {off:>12} {:11.1} {:11.1}",
                median(&mut f),
                median(&mut b)
            );
        }
    }
    Ok(())
}
