//! How long each compute op of a one-rank scenario runs inside its step's op sequence, by how
//! the step's `Alloc` ops get their memory (docs/journal/2026-11-validation-history.md,
//! 2026-11-23). Rank 0's program runs op by op on one pinned thread, with no stream threads;
//! compute ops run through the backend's `Workspace` and are timed. The step runs three ways,
//! interleaved, 40 times each after 5 to warm up:
//! - `fresh`: every `Alloc` takes a new buffer and writes every byte (as an allocator
//!   without reuse does), every `Free` drops it;
//! - `kept`: through the backend's allocator (`Held`), which keeps freed buffers for reuse;
//! - `none`: no allocations at all.
//!
//! `PROBE_ARENA=1` serves the sgemm's packing buffer from one pre-touched arena
//! (`common::arena`), as the runtime's `backend::host::pack` does (`kept` 798-815 µs
//! without, 775-777 with, on 2026-11-24). `PROBE_MODE=fresh|kept|none` runs that mode alone
//! (`pp-wide.toml`'s forward ops ran 757-761 µs with `none` alone, 794-795 with `kept` alone, and
//! 818-823 in `none` steps interleaved with the other two).
//!
//!   cargo run --release --manifest-path lab/Cargo.toml --example step_probe -- scenarios/host/single.toml

mod common;

use std::collections::BTreeMap;
use std::error::Error;
use std::time::Instant;
use twin_runtime::backend::host::Held;
use twin_runtime::backend::Allocation;
use twin_sim::schedule::OpKind;

#[global_allocator]
static GLOBAL: common::arena::Arena = common::arena::Arena;

const STEPS: usize = 40;
const WARMUP: usize = 5;
const MODES: [&str; 3] = ["fresh", "kept", "none"];

fn main() -> Result<(), Box<dyn Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: step_probe SCENARIO")?;
    let program = &common::rank0_program(&path)?;
    let arena = std::env::var_os("PROBE_ARENA").is_some();
    if arena {
        common::arena::install()?;
    }
    let mut ws = twin_runtime::backend::host::Workspace::for_program(program);
    twin_runtime::launch::affinity::pin_rank(0);
    // Per mode: op index -> times.
    let mut times_us: Vec<BTreeMap<usize, Vec<f64>>> = vec![BTreeMap::new(); MODES.len()];
    let mut held = Held::default();
    let only: Option<usize> = std::env::var("PROBE_MODE")
        .ok()
        .and_then(|m| MODES.iter().position(|x| *x == m));
    for step in 0..MODES.len() * (STEPS + WARMUP) {
        let (mode, n) = (step % MODES.len(), step / MODES.len());
        if only.is_some_and(|o| o != mode) {
            continue;
        }
        let mut fresh: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
        held.reset();
        for (i, op) in program.ops.iter().enumerate() {
            match (&op.kind, MODES[mode]) {
                (
                    OpKind::Alloc {
                        category,
                        device,
                        bytes,
                        tag,
                    },
                    m,
                ) => {
                    let a = Allocation {
                        tag: *tag,
                        category: *category,
                        device: *device,
                        bytes: *bytes,
                    };
                    if m == "fresh" {
                        let buf = twin_runtime::backend::host::fresh(*bytes as usize)?;
                        fresh.insert(*tag, buf);
                    } else if m == "kept" {
                        held.alloc(a, i as u32, 0)?;
                    }
                }
                (OpKind::Free { tag }, m) => {
                    if m == "fresh" {
                        fresh.remove(tag);
                    } else if m == "kept" {
                        held.free(*tag)?;
                    }
                }
                (OpKind::Compute(c), _) => {
                    let t = Instant::now();
                    common::arena::set_active(arena);
                    ws.run(c);
                    common::arena::set_active(false);
                    if n >= WARMUP {
                        let us = t.elapsed().as_nanos() as f64 / 1e3;
                        times_us[mode].entry(i).or_default().push(us);
                    }
                }
                _ => {}
            }
        }
    }
    let median = |v: Option<&Vec<f64>>| {
        let mut v = v.cloned().unwrap_or_default();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    println!("op  name                                 fresh      kept      none  (median us)");
    for i in times_us[only.unwrap_or(0)].keys() {
        let name = program.ops[*i].name();
        let m: Vec<String> = times_us
            .iter()
            .map(|t| format!("{:9.1}", median(t.get(i))))
            .collect();
        println!("{i:3} {name:36} {}", m.join(" "));
    }
    Ok(())
}
