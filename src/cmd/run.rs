//! `twin run` and `twin worker`: execute a scenario's schedule for real and print the measured
//! report. This module parses the arguments and stages the scenario; the launch, recovery,
//! CUDA run and the worker's life are `twin_runtime::job`.

use super::{load_scenario, Format};
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use twin_runtime::job::{self, inject::InjectSpec, output, Backend, InjectArg, RankDemand, Work};
use twin_runtime::launch::{self, ScaleFactor};
use twin_sim::scenario::Scenario;
use twin_sim::Staged;

/// Arguments shared by the launcher and its workers.
#[derive(clap::Args, Clone)]
pub struct Common {
    /// Scenario TOML file (CPU-sized ones are in scenarios/host/).
    pub scenario: PathBuf,
    /// Override a scenario key (TOML value syntax). Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// Shrink before planning: hidden|seq|layers|batch=FACTOR. Repeatable.
    #[arg(long, value_name = "KEY=FACTOR")]
    pub scale: Vec<String>,
    /// Steps to run; the last is reported.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub steps: u32,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Write the merged Chrome/Perfetto trace of the last step.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Longest a rank waits for a peer (at most 86400).
    #[arg(long, default_value_t = 60.0, value_parser = job::fit::parse_timeout_s)]
    pub timeout_s: f64,
    /// Write every rank's raw measurements (JSON) here (used by `twin verify step`).
    #[arg(long, hide = true, value_name = "FILE")]
    pub measures: Option<PathBuf>,
}

/// Checkpoint arguments shared by the launcher and its workers.
#[derive(clap::Args, Clone)]
pub struct CheckpointArgs {
    /// Write real checkpoints here; a failed run restarts from them.
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Checkpoint after every K completed steps.
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..), requires = "checkpoint_dir")]
    pub checkpoint_every: u64,
    /// Snapshot to memory and write in the background.
    #[arg(long, requires = "checkpoint_dir")]
    pub checkpoint_async: bool,
    /// Continue from the newest complete checkpoint.
    #[arg(long)]
    pub resume: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    Host,
    Cuda,
    /// The CUDA worker's path on a device that does no work and keeps its state in host
    /// memory (`twin_runtime::backend::dummy`): tests the CUDA fault path without a GPU.
    #[value(name = "dummy-cuda", hide = true)]
    DummyCuda,
}

impl From<BackendKind> for Backend {
    fn from(b: BackendKind) -> Backend {
        match b {
            BackendKind::Host => Backend::Host,
            BackendKind::Cuda => Backend::Cuda,
            BackendKind::DummyCuda => Backend::DummyCuda,
        }
    }
}

impl From<Format> for job::Format {
    fn from(f: Format) -> job::Format {
        match f {
            Format::Text => job::Format::Text,
            Format::Json => job::Format::Json,
        }
    }
}

impl Common {
    /// The resolved arguments the job and its workers are given.
    pub fn spec(&self) -> job::RunSpec {
        job::RunSpec {
            scenario: self.scenario.clone(),
            overrides: self.overrides.clone(),
            scale: self.scale.clone(),
            steps: self.steps,
            format: self.format.into(),
            trace: self.trace.clone(),
            timeout_s: self.timeout_s,
            measures: self.measures.clone(),
        }
    }
}

impl CheckpointArgs {
    fn spec(&self) -> job::CheckpointSpec {
        job::CheckpointSpec {
            dir: self.checkpoint_dir.clone(),
            every_steps: self.checkpoint_every,
            asynchronous: self.checkpoint_async,
            resume: self.resume,
        }
    }
}

/// Execute a scenario for real and report what was measured.
#[derive(clap::Args)]
// A worker may be restarted with --resume and no checkpoints (kills alone); `twin run` refuses it.
#[command(
    help_template = super::HELP,
    before_help = "Examples:
  twin run scenarios/host/pp.toml --backend host
  twin run scenarios/host/tp-pp.toml --backend host --format json --trace run.trace.json
  twin run scenarios/small.toml --backend host --scale hidden=0.5
  twin run scenarios/host/faults.toml --steps 12 --checkpoint-dir ckpt --inject random
  twin run scenarios/gpu/llama3-8b-1gpu.toml --backend cuda --steps 6

Details: docs/reference/cli.md#twin-run",
    mut_arg("resume", |a| a.requires("checkpoint_dir"))
)]
pub struct Args {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub checkpoint: CheckpointArgs,
    /// Kill a rank and recover: "kill rank=R at=step:S[,op:I]", "at=time:S", or "random".
    #[arg(long, value_name = "SPEC", value_parser = InjectArg::parse)]
    pub inject: Vec<InjectArg>,
    /// Seed of `--inject random`.
    #[arg(long, default_value_t = 1)]
    pub inject_seed: u64,
    /// Kills drawn by `--inject random`.
    #[arg(long, default_value_t = 1)]
    pub inject_count: u32,
    /// Most restarts before the run gives up.
    #[arg(long, default_value_t = 10)]
    pub max_restarts: u32,
    /// host: CPU processes over TCP; cuda: one process per local GPU.
    #[arg(long, value_enum, default_value = "host")]
    pub backend: BackendKind,
    /// Port of the bootstrap store (default: a free one).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub master_port: Option<u16>,
}

/// One rank of a run (started by `twin run`, by hand or by srun).
#[derive(clap::Args)]
#[command(
    help_template = super::HELP,
    before_help = "Examples:
  RANK=0 WORLD_SIZE=2 MASTER_ADDR=node0 MASTER_PORT=29500 twin worker scenarios/host/pp.toml
  srun -n 4 twin worker scenarios/host/tp-pp.toml

Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT or SLURM_PROCID/NTASKS/LOCALID.
Details: docs/runtime.md"
)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub checkpoint: CheckpointArgs,
    /// host: CPU compute and TCP collectives; cuda: GPU LOCAL_RANK with cuBLAS and NCCL
    /// (communicator ids travel over the store), its model state in device buffers that
    /// checkpoints copy.
    #[arg(long, value_enum, default_value = "host")]
    pub backend: BackendKind,
}

/// Load, scale, plan, generate and validate.
fn stage(c: &Common) -> anyhow::Result<(Scenario, Vec<String>, Staged)> {
    let scenario = load_scenario(&c.scenario, &c.overrides)?;
    let factors = c
        .scale
        .iter()
        .map(|s| ScaleFactor::parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    let (scaled, notes) = launch::scale::apply(&scenario, &factors);
    let staged =
        Staged::new(&scaled).with_context(|| format!("planning {}", c.scenario.display()))?;
    staged.validate()?;
    Ok((scaled, notes, staged))
}

/// The simulator's prediction of each rank of `scenario`.
fn demand(scenario: &Scenario) -> anyhow::Result<Vec<RankDemand>> {
    Ok(twin_calibration::verify::demand(scenario)?)
}

/// The staged work as the runtime takes it.
pub fn work<'a>(scenario: &'a Scenario, staged: &'a Staged) -> Work<'a> {
    Work {
        scenario,
        plan: &staged.plan,
        schedule: &staged.schedule,
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let c = &args.common;
    output::check_file(c.trace.as_deref(), "--trace")?;
    output::check_file(c.measures.as_deref(), "--measures")?;
    output::prepare_dir(
        args.checkpoint.checkpoint_dir.as_deref(),
        "--checkpoint-dir",
    )?;
    let (scenario, _notes, staged) = stage(c)?;
    let work = work(&scenario, &staged);
    let spec = c.spec();
    let backend = Backend::from(args.backend);
    let mut cuda_demand = Vec::new();
    match args.backend {
        BackendKind::Cuda => {
            cuda_demand = demand(&scenario)?;
            job::fit::check_fits_device(&work, &cuda_demand)?;
            job::fit::check_gpus(staged.plan.world)?;
        }
        BackendKind::Host => {
            job::fit::check_local_ranks(staged.plan.world)?;
            if let Some(n) = job::fit::check_host_memory(&demand(&scenario)?, c.steps)? {
                eprintln!("notice: {n}");
            }
        }
        BackendKind::DummyCuda => {}
    }
    if args.checkpoint.checkpoint_dir.is_some() || !args.inject.is_empty() {
        let inject = InjectSpec {
            inject: args.inject.clone(),
            seed: args.inject_seed,
            count: args.inject_count,
            max_restarts: args.max_restarts,
        };
        let ck = args.checkpoint.spec();
        let out = job::recover::run(&spec, &work, &ck, &inject, args.master_port, backend)?;
        for w in &out.warnings {
            eprintln!("warning: {w}");
        }
        print!("{}", out.render(spec.format)?);
    } else if backend == Backend::Cuda && staged.plan.world == 1 {
        let trace = c.trace.as_deref();
        let out = job::measure::run_cuda(&work, &cuda_demand, c.steps, trace, spec.format)?;
        print!("{out}");
    } else {
        print!(
            "{}",
            job::launch::launch_local(&spec, &work, args.master_port, backend)?
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn worker(args: WorkerArgs) -> anyhow::Result<ExitCode> {
    let started = std::time::Instant::now();
    let (scenario, notes, staged) = stage(&args.common)?;
    let (spec, ck) = (args.common.spec(), args.checkpoint.spec());
    let w = work(&scenario, &staged);
    if let Some(out) = job::worker::run(&spec, &w, notes, &ck, args.backend.into(), started)? {
        print!("{out}");
    }
    Ok(ExitCode::SUCCESS)
}
