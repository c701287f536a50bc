//! Running a backend as a job: the rank environment, the local launcher (one process per
//! rank), the worker's life (bootstrap, steps, checkpoints, results; `worker` for the host
//! backend, `device` for CUDA and the dummy device), scale factors for CPU-sized runs, and the
//! merge of the ranks' measurements into the simulator's trace and report.

pub mod affinity;
pub mod device;
pub mod env;
pub mod events;
pub mod inject;
pub mod interrupt;
pub mod launcher;
pub mod measure;
pub mod progress;
pub mod recover;
pub mod rendezvous;
pub mod rundir;
pub mod scale;
pub mod session;
pub mod worker;

pub use device::{run_device_worker, DeviceBackend, DeviceWorkerOptions};
pub use env::RankEnv;
pub use inject::{At, InjectError, Injection, KillPoint};
pub use launcher::{launch, LaunchError, LaunchOptions, LaunchOutput};
pub use measure::{merge, report, GapStats, Merged, RankMeasure, RunReport, BACKEND_NOTE_PREFIX};
pub use recover::{launch_with_recovery, CheckpointSummary, Recovered, Recovery, RecoveryOptions};
pub use rundir::RunDir;
pub use scale::{ScaleError, ScaleFactor, ScaleKey};
pub use session::Session;
pub use worker::{run_worker, WorkerOptions};

/// How far ahead of the last rank's arrival every step starts (see
/// `StoreClient::start_together`): long enough for the start time to reach every rank through
/// the store on a loaded machine, short against a step.
pub const STEP_START_MARGIN: std::time::Duration = std::time::Duration::from_millis(2);
