//! How fast the memory pass runs over data last touched before E bytes of other data
//! (docs/journal/2026-11-validation-history.md, 2026-11-24): the shape of the last-level cache as
//! the optimizer sees it (its state is last touched a step earlier, and everything the node's ranks
//! touch in a step comes between). A pass moving P bytes (the axpy of `Workspace::run_memory`, 12
//! bytes per element over x and y: footprint 2/3 P) runs once, then E bytes of a separate buffer
//! are written, then the pass is timed again; 15 rounds per (P, E), medians in GB/s moved.
//!
//!   cargo run --release -p twin-calibration --example llc_probe

use std::error::Error;
use std::time::Instant;

const MIB: u64 = 1 << 20;
const ROUNDS: usize = 15;

fn main() -> Result<(), Box<dyn Error>> {
    twin_runtime::launch::affinity::pin_rank(0);
    let evict_mib: [u64; 12] = [0, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512];
    let mut evict = vec![0u8; (evict_mib[evict_mib.len() - 1] * MIB) as usize];
    print!("{:>10}", "P \\ E MiB");
    for e in evict_mib {
        print!("{e:>7}");
    }
    println!();
    for p_mib in [3u64, 12, 48] {
        let op = twin_calibration::bench::compute::compute_op(Vec::new(), p_mib * MIB);
        let mut ws = twin_calibration::bench::compute::workspace_for(std::slice::from_ref(&op));
        print!("{:>10}", format!("{p_mib} MiB"));
        for e in evict_mib {
            let mut v = Vec::new();
            for round in 0..ROUNDS {
                ws.run_memory(&op);
                let n = (e * MIB) as usize;
                for (j, x) in evict[..n].iter_mut().enumerate().step_by(64) {
                    *x = (j + round) as u8;
                }
                let t = Instant::now();
                ws.run_memory(&op);
                v.push((p_mib * MIB) as f64 / t.elapsed().as_nanos() as f64);
            }
            v.sort_by(f64::total_cmp);
            print!("{:7.1}", v[v.len() / 2]);
        }
        println!();
    }
    Ok(())
}
