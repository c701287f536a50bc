//! Compute ops of the ranks bound to one core take turns, in the order they became ready.
//! A GPU runs one rank's kernels; a host core bound to two ranks (four ranks on two cores)
//! must choose between their compute ops, and the kernel's scheduler chose by its own account
//! of each thread's past service: the same `tp-pp.toml` run settled into steps of 17 ms or of
//! 21 ms depending on the launch, and a rank's optimizer waited behind two GEMMs of the other
//! rank although it had been ready first (docs/journal/2026-11-validation-history.md, 2026-11-23).
//! Here each core has a ticket lock in memory shared by the ranks' processes: a compute op takes a
//! ticket when its deps are done and runs when its number is served, so the order is the one the
//! simulator's host model gives (`twin_sim::engine`, "turns"), whatever the scheduler's history.
//!
//! The launcher creates the shared memory (an anonymous `memfd`, one slot per rank: a rank
//! uses the slot of its core) and passes its descriptor in [`TURNS_FD_VAR`]. A rank started
//! any other way, or with `TWIN_HOST_TURNS=off`, runs without turns. Only compute ops take
//! turns: transfers and allocations run on their own threads at once, as the model shares the
//! core between them and the op holding the turn.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The environment variable that carries the shared memory's descriptor to a rank.
pub const TURNS_FD_VAR: &str = "TWIN_HOST_TURNS_FD";
/// Bytes per core slot: one cache line, so two cores' locks never share one.
const SLOT_BYTES: usize = 64;
/// How long a waiter sleeps before it checks whether the step was abandoned.
const WAIT_SLICE: Duration = Duration::from_millis(50);

/// The shared memory of every core's lock, as the launcher creates it.
pub struct TurnsFile {
    fd: i32,
}

impl TurnsFile {
    /// Shared memory for `slots` cores' locks, inherited by the processes the caller spawns
    /// next (the descriptor is not closed on exec). `None` where that is not possible.
    pub fn create(slots: u32) -> Option<TurnsFile> {
        if !enabled() {
            return None;
        }
        sys::create(slots as usize * SLOT_BYTES).map(|fd| TurnsFile { fd })
    }

    /// The environment entry that hands this memory to a rank.
    pub fn env(&self) -> (&'static str, String) {
        (TURNS_FD_VAR, self.fd.to_string())
    }
}

impl Drop for TurnsFile {
    fn drop(&mut self) {
        sys::close(self.fd);
    }
}

fn enabled() -> bool {
    !std::env::var("TWIN_HOST_TURNS").is_ok_and(|v| v == "off" || v == "0")
}

/// One core's lock, mapped into this process.
pub struct CoreTurns {
    map: sys::Map,
}

impl CoreTurns {
    /// The lock of core slot `slot`, from the memory named by [`TURNS_FD_VAR`]; `None` when
    /// the variable is absent or unusable, or turns are off.
    pub fn from_env(slot: u32) -> Option<CoreTurns> {
        if !enabled() {
            return None;
        }
        let fd: i32 = std::env::var(TURNS_FD_VAR).ok()?.trim().parse().ok()?;
        CoreTurns::open(fd, slot)
    }

    /// One core's lock in memory of its own (the mapping outlives the descriptor): for a
    /// benchmark that runs one rank's ops as a launched rank runs them, turns included
    /// (`twin_calibration`'s hand-off benchmark). `None` where shared memory cannot be made.
    pub fn private() -> Option<CoreTurns> {
        let fd = sys::create(SLOT_BYTES)?;
        let t = CoreTurns::open(fd, 0);
        sys::close(fd);
        t
    }

    fn open(fd: i32, slot: u32) -> Option<CoreTurns> {
        let map = sys::Map::new(fd, slot as usize * SLOT_BYTES, SLOT_BYTES)?;
        Some(CoreTurns { map })
    }

    fn next(&self) -> &AtomicU32 {
        self.map.word(0)
    }

    fn serving(&self) -> &AtomicU32 {
        self.map.word(1)
    }

    /// Take this core's next ticket: the op's place in line, from the moment it became ready.
    /// The holder must [`Ticket::wait`] for it: the tickets after it are served only once its
    /// turn has come and gone.
    pub fn ticket(&self) -> Ticket<'_> {
        Ticket {
            core: self,
            number: self.next().fetch_add(1, Ordering::AcqRel),
        }
    }

    /// The ticket numbered `number`, taken earlier with [`CoreTurns::ticket`] (by another
    /// thread of the rank: `backend::host::lineup`). The caller must hold the only claim to it.
    pub fn numbered(&self, number: u32) -> Ticket<'_> {
        Ticket { core: self, number }
    }

    /// Take a ticket and wait for its turn (see [`Ticket::wait`]).
    pub fn acquire(&self, stop: impl Fn() -> bool) -> Option<Turn<'_>> {
        self.ticket().wait(stop)
    }
}

/// A place in a core's line (see [`CoreTurns::ticket`]).
pub struct Ticket<'a> {
    core: &'a CoreTurns,
    number: u32,
}

impl<'a> Ticket<'a> {
    /// Its place in line.
    pub fn number(&self) -> u32 {
        self.number
    }

    /// Wait for this ticket's turn: returns the turn (held until dropped), or `None` once
    /// `stop` says the step was abandoned (the lock is then left to the run's teardown).
    pub fn wait(self, stop: impl Fn() -> bool) -> Option<Turn<'a>> {
        loop {
            let serving = self.core.serving().load(Ordering::Acquire);
            if serving == self.number {
                return Some(Turn { core: self.core });
            }
            if stop() {
                return None;
            }
            sys::wait(self.core.serving(), serving, WAIT_SLICE);
        }
    }
}

/// A core's turn, passed to the next ticket when dropped.
pub struct Turn<'a> {
    core: &'a CoreTurns,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.core.serving().fetch_add(1, Ordering::AcqRel);
        sys::wake_all(self.core.serving());
    }
}

#[cfg(target_os = "linux")]
mod sys {
    use std::sync::atomic::AtomicU32;
    use std::time::Duration;

    pub fn create(bytes: usize) -> Option<i32> {
        // SAFETY: memfd_create reads the NUL-terminated name; ftruncate and close take
        // plain integers.
        unsafe {
            let fd = libc::memfd_create(c"twin-turns".as_ptr(), 0);
            if fd < 0 {
                return None;
            }
            if libc::ftruncate(fd, bytes as libc::off_t) != 0 {
                libc::close(fd);
                return None;
            }
            Some(fd)
        }
    }

    pub fn close(fd: i32) {
        // SAFETY: closes a descriptor this module created and owns.
        unsafe {
            libc::close(fd);
        }
    }

    /// A shared mapping of a descriptor's memory up to the end of the slot at `offset`.
    pub struct Map {
        base: *mut u8,
        len: usize,
        offset: usize,
    }

    // SAFETY: the mapping is only accessed through atomics.
    unsafe impl Send for Map {}
    unsafe impl Sync for Map {}

    impl Map {
        /// Maps the memory of `fd` through the slot of `slot_bytes` at `offset`; `None` when
        /// the memory is smaller or cannot be mapped.
        pub fn new(fd: i32, offset: usize, slot_bytes: usize) -> Option<Map> {
            let len = offset.checked_add(slot_bytes)?;
            // SAFETY: fstat fills `st`; mmap maps `len` bytes of a descriptor whose size was
            // checked to cover them, shared, and the result is checked.
            unsafe {
                let mut st: libc::stat = std::mem::zeroed();
                if fd < 0 || libc::fstat(fd, &mut st) != 0 || (st.st_size as u64) < len as u64 {
                    return None;
                }
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                );
                if p == libc::MAP_FAILED {
                    return None;
                }
                Some(Map {
                    base: p.cast(),
                    len,
                    offset,
                })
            }
        }

        /// The `i`-th 32-bit word of the slot.
        pub fn word(&self, i: usize) -> &AtomicU32 {
            assert!(
                self.offset + 4 * (i + 1) <= self.len,
                "word {i} is outside the slot"
            );
            // SAFETY: in bounds of the mapping (checked above), 4-aligned (page-aligned base,
            // offsets multiples of 4), and the memory is only ever used as atomics.
            unsafe { &*self.base.add(self.offset + 4 * i).cast::<AtomicU32>() }
        }
    }

    impl Drop for Map {
        fn drop(&mut self) {
            // SAFETY: unmaps the region `new` mapped, once.
            unsafe {
                libc::munmap(self.base.cast(), self.len);
            }
        }
    }

    pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: FUTEX_WAIT on a valid, aligned word of shared memory, with a timeout that
        // outlives the call; it returns at once if the word no longer holds `expected`.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT,
                expected,
                &ts as *const libc::timespec,
                std::ptr::null::<u32>(),
                0u32,
            );
        }
    }

    pub fn wake_all(word: &AtomicU32) {
        // SAFETY: FUTEX_WAKE on a valid, aligned word; wakes waiters of other processes too
        // (not FUTEX_PRIVATE, as the memory is shared).
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAKE,
                i32::MAX,
                std::ptr::null::<libc::timespec>(),
                std::ptr::null::<u32>(),
                0u32,
            );
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    //! Turns need shared memory and futexes: elsewhere there are none, and ranks run
    //! as the scheduler places them.
    use std::sync::atomic::AtomicU32;
    use std::time::Duration;

    pub fn create(_bytes: usize) -> Option<i32> {
        None
    }
    pub fn close(_fd: i32) {}
    pub struct Map;
    impl Map {
        pub fn new(_fd: i32, _offset: usize, _slot_bytes: usize) -> Option<Map> {
            None
        }
        pub fn word(&self, _i: usize) -> &AtomicU32 {
            unreachable!("no mapping exists off Linux")
        }
    }
    pub fn wait(_word: &AtomicU32, _expected: u32, _timeout: Duration) {}
    pub fn wake_all(_word: &AtomicU32) {}
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Mutex};

    #[test]
    fn turns_are_exclusive_and_served_in_ticket_order() {
        let file = TurnsFile::create(2).expect("memfd");
        let a = Arc::new(CoreTurns::open(file.fd, 1).unwrap());
        // A second mapping of the same slot, as another process has.
        let b = Arc::new(CoreTurns::open(file.fd, 1).unwrap());
        let inside = Arc::new(AtomicBool::new(false));
        let order = Arc::new(Mutex::new(Vec::new()));
        let first = a.acquire(|| false).unwrap();
        let mut threads = Vec::new();
        for (i, t) in [&a, &b, &a].into_iter().enumerate() {
            let (t, inside, order) = (Arc::clone(t), Arc::clone(&inside), Arc::clone(&order));
            threads.push(std::thread::spawn(move || {
                let turn = t.acquire(|| false).unwrap();
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                order.lock().unwrap().push(i);
                std::thread::sleep(Duration::from_millis(2));
                inside.store(false, Ordering::SeqCst);
                drop(turn);
            }));
            // Each takes its ticket before the next thread starts.
            while a.next().load(Ordering::SeqCst) < i as u32 + 2 {
                std::thread::yield_now();
            }
        }
        drop(first);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
        // Slot 0 is another core's lock: untouched.
        let c = CoreTurns::open(file.fd, 0).unwrap();
        assert_eq!(c.next().load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_ticket_keeps_its_place_from_when_it_was_taken() {
        let file = TurnsFile::create(1).expect("memfd");
        let a = CoreTurns::open(file.fd, 0).unwrap();
        let b = Arc::new(CoreTurns::open(file.fd, 0).unwrap());
        let held = a.acquire(|| false).unwrap();
        // `a` gets in line for its next op before `b`'s op is ready, but waits for its
        // turn only after `b` has started waiting.
        let early = a.ticket();
        let order = Arc::new(Mutex::new(Vec::new()));
        let (b2, order2) = (Arc::clone(&b), Arc::clone(&order));
        let late = std::thread::spawn(move || {
            let turn = b2.acquire(|| false).unwrap();
            order2.lock().unwrap().push("b");
            drop(turn);
        });
        // Three tickets out: the held turn's, `a`'s early one and `b`'s.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while a.next().load(Ordering::SeqCst) < 3 {
            assert!(
                std::time::Instant::now() < deadline,
                "the early ticket was not taken when asked for"
            );
            std::thread::yield_now();
        }
        drop(held);
        std::thread::sleep(Duration::from_millis(5));
        let turn = early.wait(|| false).unwrap();
        order.lock().unwrap().push("a");
        drop(turn);
        late.join().unwrap();
        assert_eq!(*order.lock().unwrap(), vec!["a", "b"]);
    }

    #[test]
    fn a_waiter_gives_up_when_told_to_stop() {
        let file = TurnsFile::create(1).expect("memfd");
        let t = CoreTurns::open(file.fd, 0).unwrap();
        let held = t.acquire(|| false).unwrap();
        assert!(t.acquire(|| true).is_none());
        drop(held);
    }

    #[test]
    fn a_slot_beyond_the_memory_is_refused() {
        let file = TurnsFile::create(2).expect("memfd");
        assert!(CoreTurns::open(file.fd, 2).is_none());
        assert!(CoreTurns::open(-1, 0).is_none());
    }
}
