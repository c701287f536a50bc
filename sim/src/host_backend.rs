//! What the runtime's host backend does when it runs the IR, as far as the simulator's model of
//! a CPU machine must know it to price the same work. The runtime executes these choices and
//! the cost model reads them; both import them from here, so the two cannot part and the
//! runtime needs nothing of the cost model.

/// The nice value of the host backend's compute stream threads; its other threads (sends,
/// receives, collectives, allocations off the compute stream) stay at the process's, 0.
/// Linux's scheduler (CFS) shares a core among runnable threads by weights fixed by their
/// nice values, and the simulator shares a core in the same proportions.
pub const COMPUTE_NICE: i32 = 5;

/// Bytes per element of the host backend's memory-bound pass, an axpy: x read, y read and y
/// written, 4 bytes each. The runtime sizes its pass by it; the cost model's working set
/// counts its two vectors.
pub const PASS_BYTES_PER_ELEM: u64 = 12;
