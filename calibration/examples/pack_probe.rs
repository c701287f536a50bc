//! Whether where the sgemm's packing buffer lands moves a compute op's time (docs/validation.md,
//! session 17). `matrixmultiply` allocates its packing buffer on every call; this probe's
//! global allocator serves those allocations (64 KiB or more, on the probe's thread, while a
//! flag is set) from one arena at a chosen offset, and times rank 0's forward and backward ops
//! with the buffer at each offset, 20 runs each after 3 to warm up, medians in µs.
//!
//!   cargo run --release -p twin-calibration --example pack_probe -- scenarios/host/pp-wide.toml

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::error::Error;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use twin_sim::schedule::OpKind;

const ARENA_BYTES: usize = 16 << 20;
static ARENA: AtomicUsize = AtomicUsize::new(0);
static OFFSET: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    static IN_USE: Cell<bool> = const { Cell::new(false) };
}

struct Arena;

unsafe impl GlobalAlloc for Arena {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let base = ARENA.load(Ordering::Relaxed);
        if base != 0 && l.size() >= 64 << 10 && ACTIVE.with(Cell::get) && !IN_USE.with(Cell::get) {
            let off = OFFSET.load(Ordering::Relaxed);
            let p = (base + off).next_multiple_of(l.align());
            if p + l.size() <= base + ARENA_BYTES {
                IN_USE.with(|u| u.set(true));
                return p as *mut u8;
            }
        }
        // SAFETY: delegated with the caller's layout.
        unsafe { System.alloc(l) }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        let base = ARENA.load(Ordering::Relaxed);
        let a = p as usize;
        if base != 0 && a >= base && a < base + ARENA_BYTES {
            IN_USE.with(|u| u.set(false));
            return;
        }
        // SAFETY: p came from System.alloc with this layout.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Arena = Arena;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: pack_probe SCENARIO")?;
    let program = common::rank0_program(&path)?;
    let layout = Layout::from_size_align(ARENA_BYTES, 1 << 21)?;
    // SAFETY: a non-zero size; the arena lives for the whole process.
    let arena = unsafe { System.alloc(layout) };
    if arena.is_null() {
        return Err("cannot allocate the arena".into());
    }
    // Touch it so no page faults land in a timed call.
    // SAFETY: the arena is ARENA_BYTES long.
    unsafe { std::ptr::write_bytes(arena, 1, ARENA_BYTES) };
    ARENA.store(arena as usize, Ordering::Relaxed);
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
            OFFSET.store(off, Ordering::Relaxed);
            let mut t = [Vec::new(), Vec::new()];
            ACTIVE.with(|a| a.set(true));
            for (k, (_, op)) in [fwd, bwd].iter().enumerate() {
                for i in 0..23 {
                    let s = Instant::now();
                    ws.run_gemms(op);
                    if i >= 3 {
                        t[k].push(s.elapsed().as_nanos() as f64 / 1e3);
                    }
                }
            }
            ACTIVE.with(|a| a.set(false));
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
