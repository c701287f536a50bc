//! The compute stream's thread runs at a lower priority than the rank's communication
//! threads. On a GPU a send or a collective runs on its own engines beside the kernels; on a
//! CPU core the rank's send thread competes with its compute thread, and at equal priority the
//! scheduler let a send that had already handed its data to the receiver wait up to a GEMM's
//! length (0.75 ms in a `pp.toml` trace) before it could record its end. A communication
//! thread is short and mostly blocked, so letting it go first costs compute only the
//! communication's own CPU time.
//!
//! A lower priority is not enough for that on Linux 6.6 and later. Their scheduler (EEVDF)
//! lets the running thread finish its slice (about 3 ms on two cores) before a woken thread of
//! any priority takes the core. A `tp-pp.toml` rank's tensor-parallel thread, woken when its
//! forward op ended, then waited behind the other rank's GEMM: 35-84 µs a step per rank of
//! "runnable without a core" before it even issued its collective, up to 4 ms in one wait,
//! and the two groups' collectives met on the cores where they would not have (docs/journal/
//! 2026-11-25-host-verify.md, 2026-11-24). So communication threads also ask for a short slice
//! ([`prefer_wakeup`]), which since Linux 6.12 lets them preempt at wake-up.

/// The nice value of compute stream threads (others stay at the process's, 0 by default). The
/// simulator weighs compute against transfers on a shared core by the same value, which both
/// read from the shared vocabulary ([`twin_sim::host_backend::COMPUTE_NICE`]).
pub(super) const COMPUTE_NICE: i32 = twin_sim::host_backend::COMPUTE_NICE;

/// Lower the calling thread's priority to `nice` (Linux: per-thread nice). Best effort:
/// raising one's own nice value needs no privilege, and a failure leaves the thread as it was.
pub fn lower_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    // SAFETY: gettid and setpriority take plain integers and touch no memory of ours.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

/// The slice communication threads ask for ([`prefer_wakeup`]): the kernel's shortest (its
/// floor is 0.1 ms). A thread with a shorter slice than the running one's preempts it at
/// wake-up.
pub const TRANSFER_SLICE_NS: u64 = 100_000;

/// Ask the scheduler to run the calling thread as soon as it wakes, ahead of a running compute
/// thread: a slice of [`TRANSFER_SLICE_NS`] for its `SCHED_OTHER` policy, its nice value kept
/// (`sched_setattr`; Linux 6.12 and later honour the slice, older kernels accept and ignore
/// it). Best effort, as [`lower_priority`]: true when the call succeeded.
pub fn prefer_wakeup() -> bool {
    #[cfg(target_os = "linux")]
    {
        /// `struct sched_attr` as of its first version (48 bytes).
        #[repr(C)]
        struct SchedAttr {
            size: u32,
            sched_policy: u32,
            sched_flags: u64,
            sched_nice: i32,
            sched_priority: u32,
            sched_runtime: u64,
            sched_deadline: u64,
            sched_period: u64,
        }
        // SAFETY: gettid and getpriority take plain integers; sched_setattr reads `attr`,
        // which lives until the call returns, for `size` bytes, its exact size.
        unsafe {
            let tid = libc::gettid();
            // getpriority returns the nice value, which may be -1; errno tells a failure.
            *libc::__errno_location() = 0;
            let nice = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
            if nice == -1 && *libc::__errno_location() != 0 {
                return false;
            }
            let attr = SchedAttr {
                size: std::mem::size_of::<SchedAttr>() as u32,
                sched_policy: libc::SCHED_OTHER as u32,
                sched_flags: 0,
                sched_nice: nice,
                sched_priority: 0,
                sched_runtime: TRANSFER_SLICE_NS,
                sched_deadline: 0,
                sched_period: 0,
            };
            libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) == 0
        }
    }
    #[cfg(not(target_os = "linux"))]
    false
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_thread_that_prefers_wake_up_keeps_its_nice_value() {
        let nice_of_this_thread = || {
            #[cfg(target_os = "linux")]
            // SAFETY: as in `prefer_wakeup`.
            unsafe {
                libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t)
            }
            #[cfg(not(target_os = "linux"))]
            0
        };
        std::thread::spawn(move || {
            super::lower_priority(3);
            let before = nice_of_this_thread();
            let ok = super::prefer_wakeup();
            assert_eq!(
                nice_of_this_thread(),
                before,
                "sched_setattr changed the nice value"
            );
            // A sandbox may refuse the call (ENOSYS, EPERM); a malformed request (EINVAL,
            // E2BIG) is this code's fault.
            if cfg!(target_os = "linux") && !ok {
                let e = std::io::Error::last_os_error();
                assert!(
                    matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)),
                    "sched_setattr failed: {e}"
                );
            }
        })
        .join()
        .expect("the test thread");
    }
}
