//! Readers of what real training jobs measured, for `twin verify` and `twin calibrate` to
//! compare with and fit to: PyTorch profiler (Kineto) Chrome traces ([`kineto`]) and CUDA
//! caching-allocator memory snapshots ([`snapshot`]). The crate knows nothing of twin's
//! simulator: it turns files into plain figures (kernel time by class, memory over the step),
//! and refuses anything that is not such a file with an error that says why, never a panic.

pub mod kineto;
pub mod snapshot;
