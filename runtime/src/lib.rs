//! twin-runtime: executes a [`twin_sim::schedule::Schedule`] for real. `exec` walks one rank's
//! program and hands each op to a [`backend::Backend`], which does the op's real work (GEMMs of
//! the planned shapes, real allocations, real collectives) and measures its time. Nothing here
//! reads a modelled duration. Backends: `backend::host` (CPU processes over TCP, any machine)
//! and `backend::cuda`. `transport` is the host's networking (store, mesh, collectives) and
//! `launch` runs a host job: launcher, worker, and the merge into the simulator's report;
//! `checkpoint` saves and restores the ranks' model state, and `launch::recover` restarts a
//! failed job from it.

pub mod backend;
pub mod checkpoint;
pub mod error;
pub mod exec;
pub mod job;
pub mod launch;
pub mod microbench;
#[cfg(test)]
mod testkit;
pub mod transport;

pub use backend::{Backend, MemoryReport, OpContext, OpTiming};
pub use error::RuntimeError;
pub use exec::{run_step, RankRun, TraceEvent};
pub mod probe;
