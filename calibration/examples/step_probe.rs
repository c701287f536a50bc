//! How long each compute op of a one-rank scenario runs inside its step's op sequence, with and
//! without the step's allocations between the ops (docs/validation.md, session 12). Rank 0's
//! program runs op by op on one pinned thread, with no stream threads: an `Alloc` takes and
//! touches a buffer as the host backend's does, a `Free` drops it, a compute op runs through
//! the backend's `Workspace` and is timed. 40 steps each way, after 5 to warm up.
//!
//!   cargo run --release -p twin-calibration --example step_probe -- scenarios/host/single.toml

use std::collections::BTreeMap;
use std::error::Error;
use std::time::Instant;
use twin_sim::schedule::OpKind;

const STEPS: usize = 40;
const WARMUP: usize = 5;

fn main() -> Result<(), Box<dyn Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: step_probe SCENARIO")?;
    let s = twin_sim::scenario::load(std::path::Path::new(&path), &[])?;
    let plan = twin_sim::plan::Plan::new(&s)?;
    let schedule = twin_sim::schedule::generate(&s, &plan)?;
    let program = schedule
        .programs
        .first()
        .ok_or("the schedule has no program")?;
    let mut ws = twin_runtime::backend::host::Workspace::for_program(program);
    twin_runtime::launch::affinity::pin_rank(0);
    // (op index) -> times, for [with allocations, without].
    let mut times_us: [BTreeMap<usize, Vec<f64>>; 2] = Default::default();
    let reuse = std::env::var("STEP_PROBE_ALLOC").is_ok_and(|v| v == "reuse");
    let mut pool = vec![1u8; 64 << 20];
    for step in 0..2 * (STEPS + WARMUP) {
        let (mode, n) = (step % 2, step / 2);
        let mut live: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
        for (i, op) in program.ops.iter().enumerate() {
            match &op.kind {
                OpKind::Alloc { bytes, .. } if mode == 0 && reuse => {
                    let n = (*bytes as usize).min(pool.len());
                    pool[..n].fill(step as u8);
                    std::hint::black_box(&mut pool);
                }
                OpKind::Alloc { bytes, tag, .. } if mode == 0 => {
                    let mut buf: Vec<u8> = Vec::new();
                    buf.reserve_exact(*bytes as usize);
                    buf.resize(*bytes as usize, 0);
                    std::hint::black_box(&mut buf);
                    live.insert(*tag, buf);
                }
                OpKind::Free { tag } => {
                    live.remove(tag);
                }
                OpKind::Compute(c) => {
                    let t = Instant::now();
                    ws.run(c);
                    if n >= WARMUP {
                        let us = t.elapsed().as_nanos() as f64 / 1e3;
                        times_us[mode].entry(i).or_default().push(us);
                    }
                }
                _ => {}
            }
        }
    }
    let median = |v: &Vec<f64>| {
        let mut v = v.clone();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!("op  name                               with allocs   without (median us)");
    for (i, with) in &times_us[0] {
        let without = times_us[1].get(i).map_or(f64::NAN, median);
        let name = program.ops[*i].name();
        println!("{i:3} {name:36} {:9.1}   {without:9.1}", median(with));
    }
    Ok(())
}
