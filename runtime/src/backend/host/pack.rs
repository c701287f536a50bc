//! A home for the sgemm's packing buffer. `matrixmultiply` allocates that buffer (up to about
//! 1.1 MiB) on every call and frees it on return, so where the process's allocator puts it
//! depends on everything else the process holds. With mimalloc, the `twin` binary's allocator,
//! that cost `pp-wide.toml`'s forward ops about 10% in the runtime: a one-rank run's forward
//! ops took 850-874 µs, and 755-793 with the buffer served from one pre-touched arena per
//! thread (five interleaved pairs; docs/journal/2026-11-validation-history.md, 2026-11-24). A probe
//! linked with mimalloc ran the same GEMMs 5-9% slower than one on the system allocator.
//!
//! While [`with_arena`] runs, the calling thread's allocations of [`MIN_BYTES`] or more are
//! served from that thread's arena, one at a time, if the `twin` binary's global allocator asks
//! ([`take`], [`give_back`]); anything that does not fit, or a second allocation while the
//! first is out, goes to the allocator as usual. Without that global allocator (the library's
//! tests, the probes) nothing changes. An arena is never freed: a thread keeps its largest one
//! for its life, so no address of one can be handed out again by the allocator.

use std::alloc::Layout;
use std::cell::Cell;

/// Smallest allocation served from the arena: packing buffers of real GEMMs, not the small
/// allocations around them.
pub const MIN_BYTES: usize = 64 << 10;

/// Alignment of an arena (a huge page, where the allocator gives one).
const ARENA_ALIGN: usize = 2 << 20;

thread_local! {
    /// This thread's arena: base address and length (0, 0 before the first use).
    static ARENA: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
    /// Whether allocations may come from the arena now.
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    /// Whether the arena's one slot is handed out.
    static IN_USE: Cell<bool> = const { Cell::new(false) };
}

/// Run `f` with this thread's arena at least `bytes` long serving its large allocations.
pub fn with_arena<R>(bytes: usize, f: impl FnOnce() -> R) -> R {
    ensure(bytes);
    let was = ACTIVE.with(|a| a.replace(true));
    let out = f();
    ACTIVE.with(|a| a.set(was));
    out
}

/// Make this thread's arena at least `bytes` long (rounded up to [`ARENA_ALIGN`]), touched so
/// no call pays its page faults. A smaller old arena is kept (never freed), see the module doc.
fn ensure(bytes: usize) {
    let (_, len) = ARENA.with(Cell::get);
    if len >= bytes || bytes == 0 {
        return;
    }
    let want = bytes.next_multiple_of(ARENA_ALIGN);
    let Ok(layout) = Layout::from_size_align(want, ARENA_ALIGN) else {
        return;
    };
    // Not served from an arena itself: ACTIVE is false outside `with_arena`, and `ensure`
    // runs before it is set.
    // SAFETY: a non-zero size and a valid power-of-two alignment.
    let base = unsafe { std::alloc::alloc(layout) };
    if base.is_null() {
        return;
    }
    // SAFETY: `base` is valid for `want` bytes.
    unsafe { std::ptr::write_bytes(base, 0, want) };
    ARENA.with(|a| a.set((base as usize, want)));
}

/// For the global allocator: a block for `layout` from the calling thread's arena, when one is
/// active, free, large enough and the request is at least [`MIN_BYTES`]; `None` otherwise.
pub fn take(layout: Layout) -> Option<*mut u8> {
    if layout.size() < MIN_BYTES || layout.align() > ARENA_ALIGN {
        return None;
    }
    // `try_with`: during a thread's teardown the thread-locals may be gone.
    let active = ACTIVE.try_with(Cell::get).unwrap_or(false);
    let in_use = IN_USE.try_with(Cell::get).unwrap_or(true);
    if !active || in_use {
        return None;
    }
    let (base, len) = ARENA.try_with(Cell::get).ok()?;
    if base == 0 || layout.size() > len {
        return None;
    }
    IN_USE.with(|u| u.set(true));
    Some(base as *mut u8)
}

/// For the global allocator: whether `ptr` is the calling thread's arena block (which is then
/// free again); `false` means the allocator owns it.
pub fn give_back(ptr: *mut u8) -> bool {
    let Ok((base, len)) = ARENA.try_with(Cell::get) else {
        return false;
    };
    let p = ptr as usize;
    if base == 0 || p < base || p >= base + len {
        return false;
    }
    IN_USE.with(|u| u.set(false));
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_large_block_at_a_time_and_only_inside_the_scope() {
        // These tests run on their own thread, with the default allocator: the functions are
        // called directly, as the twin binary's global allocator calls them.
        std::thread::spawn(|| {
            let big = Layout::from_size_align(1 << 20, 64).unwrap();
            assert_eq!(take(big), None, "no scope yet");
            with_arena(3 << 20, || {
                let p = take(big).expect("served from the arena");
                assert_eq!(p as usize % 64, 0);
                assert_eq!(take(big), None, "the slot is out");
                assert!(!give_back(std::ptr::null_mut::<u8>().wrapping_add(8)));
                assert!(give_back(p));
                let q = take(big).expect("free again");
                assert_eq!(p, q, "the same address every time");
                assert!(give_back(q));
                // Small requests, and ones larger than the arena, go to the allocator.
                assert_eq!(take(Layout::from_size_align(4096, 8).unwrap()), None);
                assert_eq!(take(Layout::from_size_align(8 << 20, 64).unwrap()), None);
            });
            assert_eq!(take(big), None, "the scope ended");
            // A larger scope keeps the old arena and takes a new one.
            let before = ARENA.with(Cell::get);
            with_arena(5 << 20, || {
                let p = take(Layout::from_size_align(4 << 20, 64).unwrap()).unwrap();
                assert!(give_back(p));
            });
            let after = ARENA.with(Cell::get);
            assert!(after.1 >= 5 << 20 && after.0 != before.0);
        })
        .join()
        .unwrap();
    }
}
