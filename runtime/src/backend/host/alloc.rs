//! The allocator the `twin` binary installs, and its tuning for sweeps. It lives beside the
//! host backend's packing arena ([`super::pack`]), whose one block per thread it hands out
//! and takes back.

/// The `twin` binary's global allocator: mimalloc instead of the system allocator, since
/// schedule generation and simulation allocate and free many short-lived vectors, and sweeps
/// do so on every core at once. A host rank's GEMMs take their packing buffer from a
/// per-thread arena instead ([`super::pack`]), so where mimalloc would put it stops moving the
/// op's time.
pub struct TwinAlloc;

// SAFETY: every block comes from mimalloc or from the calling thread's packing arena, and goes
// back to where it came from: `pack::give_back` recognises the arena's one block by address
// (an arena is never freed, so mimalloc can never hand out an address inside one).
unsafe impl std::alloc::GlobalAlloc for TwinAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        if let Some(p) = super::pack::take(layout) {
            return p;
        }
        // SAFETY: the caller's layout, passed on.
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: as above; the arena is not zeroed, so zeroed blocks always come from mimalloc.
        unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        if super::pack::give_back(ptr) {
            return;
        }
        // SAFETY: not the arena's block, so mimalloc's, with the layout it was allocated with.
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        if super::pack::give_back(ptr) {
            // Move the arena's block to mimalloc (the sgemm never grows its buffer; this only
            // keeps the allocator correct for any caller). The block stays intact until the
            // copy: nothing else runs on this thread in between.
            // SAFETY: `layout` with the new size is valid (the caller's contract).
            let new_layout =
                unsafe { std::alloc::Layout::from_size_align_unchecked(new_size, layout.align()) };
            // SAFETY: as `alloc`.
            let q = unsafe { mimalloc::MiMalloc.alloc(new_layout) };
            if !q.is_null() {
                // SAFETY: both blocks hold at least min(old, new) bytes and do not overlap.
                unsafe { std::ptr::copy_nonoverlapping(ptr, q, layout.size().min(new_size)) };
            }
            return q;
        }
        // SAFETY: mimalloc's block, passed on with its layout.
        unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
    }
}

/// mimalloc's `mi_option_purge_delay` (position in `mi_option_t` of the bundled mimalloc v3,
/// `libmimalloc-sys` 0.1.49: `include/mimalloc.h`; a test checks it).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

extern "C" {
    /// From the mimalloc library the global allocator above links in.
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
    #[cfg(test)]
    fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
}

/// Keeps freed memory mapped instead of handing it back to the OS, for sweeps: a sweep frees
/// and reallocates similar schedules thousands of times per thread, and every purged page
/// came back as a page fault plus kernel zeroing (about a tenth of a layout search's CPU
/// time). Only for sweeps: single large simulations (`twin bench` at 16,384 GPUs) measured
/// no gain and possibly a small loss. A user's own `MIMALLOC_PURGE_DELAY` still wins;
/// nothing in the environment is changed.
///
/// Also turns transparent huge pages off for the sweep's process (Linux; a user's
/// `MIMALLOC_ALLOW_THP` wins): with THP on, every first touch of a 2 MiB region zeroes all of
/// it, and a search's scattered per-thread heaps touched 150 MB where 110 MB were used; the
/// kernel's page zeroing was 14% of a search's profile. Off, a search took 5-7% less CPU
/// (2.54-2.65 s against 2.76-2.78 s, four interleaved pairs;
/// docs/journal/2026-11-performance-history.md).
pub fn tune_memory_for_sweeps() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: mi_option_set only stores the value in mimalloc's option table (it checks
        // the index range itself); the purge code reads it on its next purge.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    }
    #[cfg(target_os = "linux")]
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // SAFETY: PR_SET_THP_DISABLE only sets a flag on this process's address space; later
        // page faults in it get base pages. Failure (an old kernel) leaves THP as it was.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    }
}

#[cfg(test)]
mod tests {
    /// `MI_OPTION_PURGE_DELAY` is a bare index into mimalloc's option enum; a mimalloc update
    /// that moves it would make `tune_memory_for_sweeps` set some other option. The option at that
    /// index must hold purge_delay's documented default (1000 ms in the bundled mimalloc v3),
    /// which no neighbouring option has (14 is deprecated and 0, 16 is use_numa_nodes, 0).
    #[test]
    fn the_purge_delay_index_names_mimallocs_purge_delay() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return; // the user's value, not the default
        }
        // SAFETY: mi_option_get only reads mimalloc's option table (it checks the index).
        let v = unsafe { super::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        assert_eq!(
            v,
            1000,
            "option {} is not purge_delay",
            super::MI_OPTION_PURGE_DELAY
        );
    }
}
