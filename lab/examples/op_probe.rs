//! Each compute op of a one-rank scenario timed four ways against what a profile prices it at
//! (docs/journal/2026-11-validation-history.md, 2026-11-24): inside its step's op sequence (rank
//! 0's program, op by op on one pinned thread, as `step_probe`'s `none` mode), back to back (the
//! same op again and again: operands warm), and its GEMMs and its memory pass alone, back to back.
//! The profile's side: the op warm (`compute_ns`), its GEMMs with operands loaded
//! (`compute_evicted_ns`), and the reload the engine adds once other work evicted them.
//!
//!   cargo run --release --manifest-path lab/Cargo.toml --example op_probe -- scenarios/host/single.toml PROFILE

mod common;

use std::error::Error;
use std::time::Instant;
use twin_sim::cost::{Analytic, CostModel};
use twin_sim::schedule::{ComputeOp, OpKind};

const STEPS: usize = 30;
const REPEATS: usize = 30;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: op_probe SCENARIO PROFILE")?;
    let profile_path = args.next().ok_or("usage: op_probe SCENARIO PROFILE")?;
    let scenario = twin_sim::setup::load(std::path::Path::new(&path), &[])?;
    let profile = twin_sim::profile::load(std::path::Path::new(&profile_path))?;
    let cost = Analytic::from_profile(&scenario, &profile);
    let program = common::rank0_program(&path)?;
    let ops: Vec<(usize, String, ComputeOp)> = program
        .ops
        .iter()
        .enumerate()
        .filter_map(|(i, o)| match &o.kind {
            OpKind::Compute(c) => Some((i, o.name(), c.clone())),
            _ => None,
        })
        .collect();
    let mut ws = twin_runtime::backend::host::Workspace::for_program(&program);
    twin_runtime::launch::affinity::pin_rank(0);
    let mut in_step = vec![Vec::new(); ops.len()];
    for step in 0..STEPS + 3 {
        for (j, (_, _, op)) in ops.iter().enumerate() {
            let t = Instant::now();
            ws.run(op);
            if step >= 3 {
                in_step[j].push(t.elapsed().as_nanos() as f64 / 1e3);
            }
        }
    }
    println!(
        "{:32} {:>8} {:>8} {:>8} {:>8} | {:>8} {:>8} {:>8}",
        "op (us, medians)", "in step", "repeat", "gemms", "memory", "pred", "evicted", "reload"
    );
    for (j, (_, name, op)) in ops.iter().enumerate() {
        let time = |f: &mut dyn FnMut()| {
            let mut v: Vec<f64> = (0..REPEATS + 2)
                .map(|_| {
                    let t = Instant::now();
                    f();
                    t.elapsed().as_nanos() as f64 / 1e3
                })
                .skip(2)
                .collect();
            median(&mut v)
        };
        let repeat = time(&mut || ws.run(op));
        let gemms = time(&mut || ws.run_gemms(op));
        let memory = time(&mut || ws.run_memory(op));
        let reload = cost.operand_residency(op).map_or(0, |r| r.reload_ns);
        println!(
            "{:32} {:8.1} {:8.1} {:8.1} {:8.1} | {:8.1} {:8.1} {:8.1}",
            name,
            median(&mut in_step[j]),
            repeat,
            gemms,
            memory,
            cost.compute_ns(0, op) as f64 / 1e3,
            cost.compute_evicted_ns(op) as f64 / 1e3,
            reload as f64 / 1e3
        );
    }
    Ok(())
}
