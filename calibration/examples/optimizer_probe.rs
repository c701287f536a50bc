//! How fast the host backend's optimizer update runs against the axpy pass the cost model
//! prices it by (docs/journal/2026-11-validation-history.md, 2026-11-23). For each state size,
//! after writing 52 MB of other data (a step's traffic), untimed: (a) `ModelState::apply_optimizer`
//! over a state of that size, as the Optimizer op runs it; (b) the axpy pass (`Workspace::run`)
//! over the same bytes moved (the update reads and writes every state byte once). 30 rounds,
//! medians.
//!
//!   cargo run --release -p twin-calibration --example optimizer_probe

use std::error::Error;
use std::time::Instant;
use twin_runtime::backend::host::ModelState;
use twin_sim::schedule::{Device, MemCategory};

const ROUNDS: usize = 30;
const EVICT_BYTES: usize = 52 << 20;

fn main() -> Result<(), Box<dyn Error>> {
    twin_runtime::launch::affinity::pin_rank(0);
    let evict_bytes: usize = std::env::var("PROBE_EVICT_MIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(EVICT_BYTES, |m| m << 20);
    let mut evict = vec![0u8; evict_bytes];
    println!("state bytes   update GB/s   axpy GB/s   (bytes moved / time, medians)");
    let sizes: Vec<u64> = std::env::var("PROBE_STATE_MIB")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 2, 4, 8, 16, 32]);
    for state_mib in sizes {
        let bytes = state_mib << 20;
        let mut st = ModelState::new(1, 0);
        st.ensure(0, MemCategory::Optimizer, Device::Gpu, bytes)?;
        let moved = st.update_bytes();
        let op = twin_calibration::bench::compute::compute_op(Vec::new(), moved);
        let mut ws = twin_calibration::bench::compute::workspace_for(std::slice::from_ref(&op));
        let (mut upd, mut pass) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            for (j, x) in evict.iter_mut().enumerate().step_by(64) {
                *x = (j + round) as u8;
            }
            let t = Instant::now();
            st.apply_optimizer(round as u64);
            upd.push(moved as f64 / t.elapsed().as_nanos() as f64);
            for (j, x) in evict.iter_mut().enumerate().step_by(64) {
                *x = (j + round + 1) as u8;
            }
            let t = Instant::now();
            ws.run(&op);
            pass.push(moved as f64 / t.elapsed().as_nanos() as f64);
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "{:8} MiB   {:10.1}   {:9.1}",
            state_mib,
            med(&mut upd),
            med(&mut pass)
        );
    }
    Ok(())
}
