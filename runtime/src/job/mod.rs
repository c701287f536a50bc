//! A job: what `twin run` and `twin worker` do with a staged scenario, as library calls with
//! resolved arguments, so that a caller (the binary, `twin_calibration::verify`) parses
//! arguments and prints, and nothing else. `launch` starts one worker process per rank on
//! this machine, `recover` runs with checkpoints and injected kills, `measure` runs a one-rank
//! schedule on the local GPU in this process, `inject` turns `--inject` values into kills,
//! `fit` refuses runs this machine cannot hold, `worker` is one rank's life, and `output`
//! checks and writes the files a job produces.
//!
//! The job takes the simulator's prediction as numbers the caller hands in ([`RankDemand`]):
//! the runtime executes schedules and never predicts them.

pub mod fit;
pub mod inject;
pub mod launch;
pub mod measure;
pub mod output;
pub mod recover;
pub mod worker;

use crate::checkpoint::CheckpointOptions;
use std::path::PathBuf;
use twin_sim::plan::Plan;
use twin_sim::scenario::Scenario;
use twin_sim::schedule::Schedule;

pub use fit::RankDemand;
pub use inject::InjectArg;
pub use output::{write_atomic, write_atomic_with, OutputError};

/// Why a job failed. Each variant reads as the failure itself; `Launch`, `Inject`, `Runtime`,
/// `Fit` and `Output` are the runtime's own errors, passed on unchanged.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(transparent)]
    Launch(#[from] crate::launch::LaunchError),
    #[error(transparent)]
    Inject(#[from] crate::launch::InjectError),
    #[error(transparent)]
    Runtime(#[from] crate::RuntimeError),
    #[error(transparent)]
    Fit(#[from] crate::backend::cuda::footprint::DoesNotFit),
    #[error(transparent)]
    Output(#[from] OutputError),
    /// The job cannot run as asked (too many ranks, too little memory, a used checkpoint
    /// folder); the message says what to do instead.
    #[error("{0}")]
    Refused(String),
    /// A file or folder of the job could not be made, read or written.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A report or measurements file that is not the JSON expected.
    #[error("{what}")]
    Json {
        what: String,
        #[source]
        source: serde_json::Error,
    },
}

impl JobError {
    /// The signal that stopped the launch (SIGINT, SIGTERM, SIGHUP), if one did.
    pub fn interrupted_by(&self) -> Option<i32> {
        match self {
            JobError::Launch(crate::launch::LaunchError::Interrupted(sig)) => Some(*sig),
            _ => None,
        }
    }

    /// Whether the user's input was at fault (an `--inject` value or an output path).
    pub fn is_bad_input(&self) -> bool {
        matches!(self, JobError::Inject(_) | JobError::Output(_))
    }

    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> JobError {
        let what = what.into();
        move |source| JobError::Io { what, source }
    }

    pub(crate) fn json(what: impl Into<String>) -> impl FnOnce(serde_json::Error) -> JobError {
        let what = what.into();
        move |source| JobError::Json { what, source }
    }
}

/// Which backend runs the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// CPU processes over TCP (or Unix sockets).
    Host,
    /// The local GPUs, one process per GPU.
    Cuda,
    /// The CUDA worker's path on a device that does no work and keeps its state in host
    /// memory (`backend::dummy`): tests the CUDA fault path without a GPU.
    DummyCuda,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Host => "host",
            Backend::Cuda => "cuda",
            Backend::DummyCuda => "dummy-cuda",
        }
    }
}

/// Output for people (`Text`) or for machines (`Json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// The staged work: the (scaled) scenario, its plan and its schedule.
#[derive(Clone, Copy)]
pub struct Work<'a> {
    pub scenario: &'a Scenario,
    pub plan: &'a Plan,
    pub schedule: &'a Schedule,
}

impl Work<'_> {
    /// Op `op` of `rank`'s program by name, for failure reports.
    pub fn op_name(&self, rank: u32, op: u32) -> String {
        self.schedule
            .get_op(rank, op)
            .map_or_else(|| "?".to_string(), |o| o.name())
    }

    /// How many ops `rank`'s program has.
    pub fn ops_of(&self, rank: u32) -> u32 {
        self.schedule
            .get_program(rank)
            .map_or(0, |p| p.ops.len() as u32)
    }
}

/// What a run and each of its workers are given: the scenario file as the user named it
/// (workers read it again), and how to run and report it.
#[derive(Clone, Debug)]
pub struct RunSpec {
    pub scenario: PathBuf,
    /// `--set KEY=VALUE` overrides.
    pub overrides: Vec<String>,
    /// `--scale KEY=FACTOR` values.
    pub scale: Vec<String>,
    /// Steps to run; the last is reported.
    pub steps: u32,
    pub format: Format,
    /// Where to write the merged trace of the last step.
    pub trace: Option<PathBuf>,
    /// Longest a rank waits for a peer (seconds, checked by [`fit::timeout`]).
    pub timeout_s: f64,
    /// Where rank 0 writes every rank's raw measurements (JSON).
    pub measures: Option<PathBuf>,
}

/// Checkpoints of a run: where, how often, and whether to continue from them.
#[derive(Clone, Debug, Default)]
pub struct CheckpointSpec {
    pub dir: Option<PathBuf>,
    /// Checkpoint after every this many completed steps.
    pub every_steps: u64,
    /// Snapshot to memory and write in the background.
    pub asynchronous: bool,
    /// Continue from the newest complete checkpoint in `dir`.
    pub resume: bool,
}

impl CheckpointSpec {
    /// The worker's checkpoint options, when there is a folder.
    pub fn options(&self) -> Option<CheckpointOptions> {
        self.dir.as_ref().map(|dir| CheckpointOptions {
            dir: dir.clone(),
            every_steps: self.every_steps,
            asynchronous: self.asynchronous,
            resume: self.resume,
        })
    }

    /// The worker command-line arguments that pass these checkpoints on (`--resume` is the
    /// launcher's to add per attempt).
    pub fn worker_args(&self) -> Vec<String> {
        let mut a = Vec::new();
        if let Some(d) = &self.dir {
            a.extend([
                "--checkpoint-dir".into(),
                d.display().to_string(),
                "--checkpoint-every".into(),
                self.every_steps.to_string(),
            ]);
            if self.asynchronous {
                a.push("--checkpoint-async".into());
            }
        }
        a
    }
}
