//! The compute stream's thread runs at a lower priority than the rank's communication
//! threads. On a GPU a send or a collective runs on its own engines beside the kernels; on a
//! CPU core the rank's send thread competes with its compute thread, and at equal priority the
//! scheduler let a send that had already handed its data to the receiver wait up to a GEMM's
//! length (0.75 ms in a `pp.toml` trace) before it could record its end. A communication
//! thread is short and mostly blocked, so letting it go first costs compute only the
//! communication's own CPU time.

/// The nice value of compute stream threads (others stay at the process's, 0 by default). The
/// simulator weighs compute against transfers on a shared core by the same value
/// (`twin_sim::cost::host_compute_weight`), so the two must not part.
pub(super) const COMPUTE_NICE: i32 = twin_sim::cost::HOST_COMPUTE_NICE;

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
