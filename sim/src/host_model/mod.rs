//! The model of a shared-core CPU machine, the one the runtime's host backend runs on: ranks bound
//! to cores they share, a compute thread that yields after every op and runs at a lower priority
//! than the transfer threads, cores that wake slowly after idling, a machine that interrupts
//! compute, private caches that lose a rank's GEMM operands to other work, and a last-level cache
//! that loses the optimizer's state with time. A GPU has none of this: a host profile's
//! parameters (`[host]`, `memory.state_*`, `gemm.operand_*`, `gemm.shape_factors`) switch each
//! part on, and without them the engine never calls into this module.
//!
//! What is here:
//! - the parameters the cost model hands the engine ([`Wake`], [`Interruptions`],
//!   [`Residency`], [`StateAging`]) and the ones it prices with itself ([`StateCache`],
//!   [`shape_factors`], [`footprint`], [`host_compute_weight`]);
//! - the engine's per-run state of the machine: `Turns` of compute ops on a core, each core's
//!   idle time (`CoreIdle`), the cores' cache contents (`Residencies`), the state's age
//!   (`Agings`), drawn interruptions (`Jitter`) and the waiting within stretched spans that
//!   the accounts move to idle time (`CoreShare`), gathered in `HostRun`, which the engine
//!   holds as an `Option` that is `None` for every GPU profile.

mod aging;
pub mod footprint;
mod jitter;
mod memory;
mod residency;
mod run;
pub mod shape_factors;
mod share;
mod state;
mod threads;
mod turns;
mod wake;

pub(crate) use aging::Agings;
pub use jitter::Interruptions;
pub(crate) use jitter::Jitter;
pub(crate) use memory::alone_rate;
pub(crate) use residency::Residencies;
pub use residency::Residency;
pub(crate) use run::HostRun;
pub(crate) use share::CoreShare;
pub use state::{ramp, survival, StateAging, StateCache, StateDecay};
pub use threads::{cfs_relative_weight, host_compute_weight};
pub(crate) use turns::Turns;
pub(crate) use wake::CoreIdle;
pub use wake::Wake;
