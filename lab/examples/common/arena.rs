//! A global allocator for probes that serves the sgemm's packing buffer from one pre-touched
//! arena (docs/journal/2026-11-validation-history.md, 2026-11-24), the probes' stand-in for the
//! runtime's `backend::host::pack`. Until [`install`] runs, and outside [`set_active`], every
//! allocation goes to the system allocator. While active, the calling thread's allocations of 64
//! KiB or more are served from the arena at [`set_offset`], one at a time.
#![allow(dead_code)] // each probe uses the part it needs

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

const ARENA_BYTES: usize = 16 << 20;
static ARENA: AtomicUsize = AtomicUsize::new(0);
static OFFSET: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    static IN_USE: Cell<bool> = const { Cell::new(false) };
}

pub struct Arena;

unsafe impl GlobalAlloc for Arena {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let base = ARENA.load(Ordering::Relaxed);
        if base != 0 && l.size() >= 64 << 10 && ACTIVE.with(Cell::get) && !IN_USE.with(Cell::get) {
            let p = (base + OFFSET.load(Ordering::Relaxed)).next_multiple_of(l.align());
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

/// Allocate and touch the arena (never freed); returns its address.
pub fn install() -> Result<usize, String> {
    let layout = Layout::from_size_align(ARENA_BYTES, 1 << 21).map_err(|e| e.to_string())?;
    // SAFETY: a non-zero size; the arena lives for the whole process.
    let arena = unsafe { System.alloc(layout) };
    if arena.is_null() {
        return Err("cannot allocate the arena".into());
    }
    // Touched, so no page faults land in a timed call.
    // SAFETY: the arena is ARENA_BYTES long.
    unsafe { std::ptr::write_bytes(arena, 1, ARENA_BYTES) };
    ARENA.store(arena as usize, Ordering::Relaxed);
    Ok(arena as usize)
}

/// Where in the arena the next block starts (rounded up to its alignment).
pub fn set_offset(bytes: usize) {
    OFFSET.store(bytes, Ordering::Relaxed);
}

/// Serve the calling thread's large allocations from the arena, or stop.
pub fn set_active(on: bool) {
    ACTIVE.with(|a| a.set(on));
}
