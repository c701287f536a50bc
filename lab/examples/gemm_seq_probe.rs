//! Each GEMM of one compute op timed three ways against the profile's price for it
//! (docs/journal/2026-11-validation-history.md, 2026-11-24): inside the op's GEMM sequence (the
//! backend's workspace, the op's GEMMs in order, again and again), alone back to back (operands
//! warm when they fit the private cache), and alone after evicting the private cache (as the
//! calibration's GEMM sweep times it). The profile's side: the compute part (`gemm_s`) and the
//! operand load the model adds to one call whose operands are out of the cache (`cold_s`: the cold
//! ramp and the load).
//!
//!   cargo run --release --manifest-path lab/Cargo.toml --example gemm_seq_probe -- scenarios/host/pp-wide.toml PROFILE 3

mod common;

use std::error::Error;
use std::time::Instant;
use twin_sim::cost::Analytic;
use twin_sim::schedule::ComputeOp;

const ROUNDS: usize = 40;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn Error>> {
    let usage = "usage: gemm_seq_probe SCENARIO PROFILE [COMPUTE_OP]";
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or(usage)?;
    let profile_path = args.next().ok_or(usage)?;
    let which: usize = match args.next() {
        Some(s) => s.parse().map_err(|e| format!("COMPUTE_OP {s:?}: {e}"))?,
        None => 0,
    };
    let scenario = twin_sim::setup::load(std::path::Path::new(&path), &[])?;
    let profile = twin_sim::profile::load(std::path::Path::new(&profile_path))?;
    let cost = Analytic::from_profile(&scenario, &profile);
    let program = common::rank0_program(&path)?;
    let op = common::compute_op(&program, which)?;
    let singles: Vec<ComputeOp> = op
        .gemms
        .iter()
        .map(|g| ComputeOp {
            attention: None,
            gemms: vec![*g].into(),
            memory_bytes: 0,
            ..op.clone()
        })
        .collect();
    let mut ws = twin_runtime::backend::host::Workspace::for_program(&program);
    twin_runtime::launch::affinity::pin_rank(0);
    let mut evict = vec![0u8; 64 << 20];
    let mut in_seq = vec![Vec::new(); singles.len()];
    for round in 0..ROUNDS + 3 {
        for (j, s) in singles.iter().enumerate() {
            let t = Instant::now();
            ws.run_gemms(s);
            if round >= 3 {
                in_seq[j].push(t.elapsed().as_nanos() as f64 / 1e3);
            }
        }
        ws.run_memory(&op);
    }
    let elem = op.dtype.bytes();
    let peak = cost.peak_flops_per_s(op.dtype);
    // The GEMM's memory bound never binds on the host (its shapes are compute-bound).
    let hbm = cost.hbm_bandwidth_bytes_per_s;
    println!(
        "{:22} {:>9} {:>9} {:>9} | {:>9} {:>9}",
        "gemm (us, medians)", "in seq", "warm", "evicted", "compute", "load"
    );
    let mut sums = [0.0f64; 5];
    for (j, s) in singles.iter().enumerate() {
        let g = s.gemms[0];
        let warm = {
            let mut v: Vec<f64> = (0..ROUNDS)
                .map(|_| {
                    let t = Instant::now();
                    ws.run_gemms(s);
                    t.elapsed().as_nanos() as f64 / 1e3
                })
                .collect();
            median(&mut v)
        };
        let evicted = {
            let mut v: Vec<f64> = (0..ROUNDS)
                .map(|_| {
                    for line in evict.chunks_mut(64) {
                        line[0] = line[0].wrapping_add(1);
                    }
                    std::hint::black_box(&evict);
                    let t = Instant::now();
                    ws.run_gemms(s);
                    t.elapsed().as_nanos() as f64 / 1e3
                })
                .collect();
            median(&mut v)
        };
        let compute = cost.gemm.gemm_s(&g, elem, peak, hbm) * 1e6;
        let load = cost.gemm.cold_s(g.operand_bytes(elem)) * 1e6;
        let seq = median(&mut in_seq[j]);
        for (acc, x) in sums.iter_mut().zip([seq, warm, evicted, compute, load]) {
            *acc += x;
        }
        println!(
            "{:22} {:9.1} {:9.1} {:9.1} | {:9.1} {:9.1}",
            format!("{}x{}x{} x{}", g.m, g.n, g.k, g.count),
            seq,
            warm,
            evicted,
            compute,
            load
        );
    }
    println!(
        "{:22} {:9.1} {:9.1} {:9.1} | {:9.1} {:9.1}",
        "sum", sums[0], sums[1], sums[2], sums[3], sums[4]
    );
    Ok(())
}
