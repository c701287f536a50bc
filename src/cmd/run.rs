//! `twin run`: execute a scenario's schedule for real and print the measured report (the
//! simulator's field names). `--backend host` launches one `twin worker` process per rank on
//! this machine (CPU compute, TCP collectives); `twin worker` is also what a user starts by
//! hand or with Slurm on several machines (see docs/runtime.md). `--backend cuda` runs a
//! one-rank schedule on the local GPU in this process, or one `twin worker --backend cuda`
//! per GPU. With `--checkpoint-dir` or `--inject`, a run on either backend goes through the
//! launcher: real checkpoints, injected kills, restarts and reloads (docs/faults.md).

use super::{load_scenario, write_atomic, Format};
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use twin_runtime::checkpoint::CheckpointOptions;
use twin_runtime::launch::worker::Durability;
use twin_runtime::launch::{self, Injection, LaunchOptions, RankEnv, ScaleFactor, WorkerOptions};
use twin_sim::scenario::Scenario;
use twin_sim::Staged;

/// Arguments shared by the launcher and its workers.
#[derive(clap::Args, Clone)]
pub struct Common {
    /// Scenario TOML file (see docs/scenarios.md; CPU-sized ones are in scenarios/host/).
    pub scenario: PathBuf,
    /// Override a scenario key (TOML value syntax), e.g. --set parallel.pp=2. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// Shrink the scenario before planning so it fits a CPU: KEY=FACTOR with KEY one of
    /// hidden, seq, layers, batch (e.g. --scale hidden=0.125). Repeatable; reported.
    #[arg(long, value_name = "KEY=FACTOR")]
    pub scale: Vec<String>,
    /// Steps to run; the last is reported, earlier ones warm up.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub steps: u32,
    /// Output format: readable text, or one JSON object with the simulator's report fields.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Write the merged Chrome/Perfetto trace of the last step (same format as `simulate`).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Longest a rank waits for a peer or the store before giving up; the launcher stops a
    /// run that makes no progress (no op starts or ends) for this long plus 5 s. More than 0
    /// and at most 86400 (a day).
    #[arg(long, default_value_t = 60.0, value_parser = parse_timeout_s)]
    pub timeout_s: f64,
    /// Write every rank's raw measurements (JSON) here (used by `twin verify`).
    #[arg(long, hide = true, value_name = "FILE")]
    pub measures: Option<PathBuf>,
}

/// Checkpoint arguments shared by the launcher and its workers.
#[derive(clap::Args, Clone)]
pub struct CheckpointArgs {
    /// Write real checkpoints of every rank's weights and optimizer state here
    /// (DIR/step-NNNNNN/rank-NNNNN.ckpt + COMPLETE); a failed run restarts from them.
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Checkpoint after every K completed steps (the last step excepted).
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..), requires = "checkpoint_dir")]
    pub checkpoint_every: u64,
    /// Snapshot to memory and write in the background (the next checkpoint waits for it).
    #[arg(long, requires = "checkpoint_dir")]
    pub checkpoint_async: bool,
    /// Continue from the newest complete checkpoint in --checkpoint-dir.
    #[arg(long)]
    pub resume: bool,
}

impl CheckpointArgs {
    fn options(&self) -> Option<CheckpointOptions> {
        self.checkpoint_dir.as_ref().map(|dir| CheckpointOptions {
            dir: dir.clone(),
            every_steps: self.checkpoint_every,
            asynchronous: self.checkpoint_async,
            resume: self.resume,
        })
    }

    fn worker_args(&self) -> Vec<String> {
        let mut a = Vec::new();
        if let Some(d) = &self.checkpoint_dir {
            a.extend([
                "--checkpoint-dir".into(),
                d.display().to_string(),
                "--checkpoint-every".into(),
                self.checkpoint_every.to_string(),
            ]);
            if self.checkpoint_async {
                a.push("--checkpoint-async".into());
            }
        }
        a
    }
}

/// Longest `--timeout-s`: a day without progress is a hung run. Every wait and deadline of the
/// ranks and the launcher stays far inside what `Duration` and `Instant` can hold, and a poll
/// timeout in milliseconds still fits an `i32`.
pub const MAX_TIMEOUT_S: f64 = 86_400.0;

/// A `--timeout-s` value: seconds, more than 0 and at most [`MAX_TIMEOUT_S`].
pub fn parse_timeout_s(text: &str) -> Result<f64, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .and_then(|v| timeout_duration(v).ok())
        .map(|d| d.as_secs_f64())
        .ok_or_else(|| format!("allowed: seconds, more than 0 and at most {MAX_TIMEOUT_S} (a day)"))
}

/// `seconds` as a timeout, or why it is none.
fn timeout_duration(seconds: f64) -> Result<Duration, String> {
    if seconds > 0.0 && seconds <= MAX_TIMEOUT_S {
        Ok(Duration::from_secs_f64(seconds))
    } else {
        Err(format!(
            "--timeout-s {seconds} is not more than 0 and at most {MAX_TIMEOUT_S} seconds (a day)"
        ))
    }
}

/// One `--inject` value.
#[derive(Clone, Debug)]
pub enum InjectArg {
    Random,
    One(String, Injection),
}

fn parse_inject(text: &str) -> Result<InjectArg, String> {
    if text.trim() == "random" {
        return Ok(InjectArg::Random);
    }
    Injection::parse(text)
        .map(|i| InjectArg::One(text.to_string(), i))
        .map_err(|e| e.to_string())
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

impl BackendKind {
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Host => "host",
            BackendKind::Cuda => "cuda",
            BackendKind::DummyCuda => "dummy-cuda",
        }
    }
}

/// Execute a scenario for real and report what was measured.
///
/// host: one process per rank on this machine, real f32 GEMMs of the planned shapes, real
/// buffers per Alloc, real TCP transfers and ring collectives with checked results.
/// TWIN_TRANSPORT=unix connects ranks on one host over Unix sockets instead (faster small
/// transfers; calibrate with the same setting you verify with).
///
/// Examples:
///   twin run scenarios/host/pp.toml --backend host
///   twin run scenarios/host/tp-pp.toml --backend host --format json --trace run.trace.json
///   twin run scenarios/small.toml --backend host --scale hidden=0.5
///   twin run scenarios/host/faults.toml --steps 12 --checkpoint-dir ckpt --checkpoint-every 3 \
///       --inject "kill rank=1 at=step:7"
///   twin run scenarios/gpu/llama3-8b-1gpu.toml --backend cuda --steps 6 --checkpoint-dir ckpt \
///       --checkpoint-every 2 --inject "kill rank=0 at=step:4"
#[derive(clap::Args)]
// A worker may be restarted with --resume and no checkpoints (kills alone); `twin run` refuses it.
#[command(verbatim_doc_comment, mut_arg("resume", |a| a.requires("checkpoint_dir")))]
pub struct Args {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub checkpoint: CheckpointArgs,
    /// Kill a rank (SIGKILL) and recover: "kill rank=R at=step:S", "at=step:S,op:I",
    /// "at=op:I" (first step), "at=time:SECONDS" (since launch), or "random". Repeatable.
    #[arg(long, value_name = "SPEC", value_parser = parse_inject)]
    pub inject: Vec<InjectArg>,
    /// Seed of `--inject random`.
    #[arg(long, default_value_t = 1)]
    pub inject_seed: u64,
    /// Kills drawn by `--inject random`.
    #[arg(long, default_value_t = 1)]
    pub inject_count: u32,
    /// Most restarts after failures before the run gives up.
    #[arg(long, default_value_t = 10)]
    pub max_restarts: u32,
    /// host: CPU processes over TCP (any machine); cuda: the local GPUs, one process per GPU
    /// (a one-rank run without checkpoints or --inject runs in this process).
    #[arg(long, value_enum, default_value = "host")]
    pub backend: BackendKind,
    /// Port of the bootstrap store, 1-65535 (default: a free one).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub master_port: Option<u16>,
}

/// One rank of a host run (started by `twin run`, by hand or by srun; reads RANK,
/// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT or SLURM_PROCID/NTASKS/LOCALID).
#[derive(clap::Args)]
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

fn timeout(c: &Common) -> anyhow::Result<Duration> {
    timeout_duration(c.timeout_s).map_err(anyhow::Error::msg)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let c = &args.common;
    super::output::check_file(c.trace.as_deref(), "--trace")?;
    super::output::check_file(c.measures.as_deref(), "--measures")?;
    super::output::prepare_dir(
        args.checkpoint.checkpoint_dir.as_deref(),
        "--checkpoint-dir",
    )?;
    let (scenario, _notes, staged) = stage(c)?;
    let durable = args.checkpoint.checkpoint_dir.is_some() || !args.inject.is_empty();
    match args.backend {
        BackendKind::Cuda => {
            check_fits_device(&scenario, &staged)?;
            check_gpus(staged.plan.world)?;
        }
        BackendKind::Host => check_fits_host(&scenario, &staged, c)?,
        BackendKind::DummyCuda => {}
    }
    if durable {
        // Every backend: the launcher's workers keep checkpoints and the launcher restarts them.
        let (mut opts, run_dir) = host_launch_options(c, &staged, args.master_port)?;
        opts.args.extend(backend_args(args.backend));
        opts.args.extend(args.checkpoint.worker_args());
        let name = |rank: u32, op: u32| op_name(&staged, rank, op);
        return run_recovering(&args, &staged, &opts, &run_dir, &name);
    }
    if args.backend == BackendKind::Cuda && staged.plan.world == 1 {
        return run_cuda(&scenario, &staged, c);
    }
    let out = launch_local(c, &staged, args.master_port, args.backend)?;
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

/// The worker arguments that choose `backend` (the host backend is the workers' default).
fn backend_args(backend: BackendKind) -> Vec<String> {
    match backend {
        BackendKind::Host => Vec::new(),
        b => vec!["--backend".to_string(), b.name().to_string()],
    }
}

/// Start one `twin worker` per rank of `staged` on this machine with `c`'s arguments (its
/// format, trace and measurements file included) on `backend` (cuda: rank i on GPU i), wait
/// for all, and return what rank 0 printed. `twin run` prints it; `twin verify` reads the
/// measurements file instead.
pub(crate) fn launch_local(
    c: &Common,
    staged: &Staged,
    master_port: Option<u16>,
    backend: BackendKind,
) -> anyhow::Result<String> {
    let (mut opts, run_dir) = host_launch_options(c, staged, master_port)?;
    opts.args.extend(backend_args(backend));
    let name = |rank: u32, op: u32| op_name(staged, rank, op);
    let out = launch::launch(&opts, &name);
    drop(run_dir);
    let out = out?;
    Ok(out
        .stdout
        .first()
        .map(|o| String::from_utf8_lossy(o).into_owned())
        .unwrap_or_default())
}

/// How `twin run` starts this machine's workers for `staged` with `c`'s arguments, and the
/// temp folder it made for their progress files (removed when the guard drops). From here on
/// SIGINT, SIGTERM and SIGHUP stop the workers and end the launch (`launch::interrupt`).
fn host_launch_options(
    c: &Common,
    staged: &Staged,
    master_port: Option<u16>,
) -> anyhow::Result<(LaunchOptions, launch::RunDir)> {
    let exe = std::env::current_exe().context("cannot find the twin executable")?;
    let mut wargs = vec!["worker".to_string(), c.scenario.display().to_string()];
    for o in &c.overrides {
        wargs.extend(["--set".into(), o.clone()]);
    }
    for s in &c.scale {
        wargs.extend(["--scale".into(), s.clone()]);
    }
    wargs.extend([
        "--steps".into(),
        c.steps.to_string(),
        "--timeout-s".into(),
        c.timeout_s.to_string(),
        "--format".into(),
        match c.format {
            Format::Json => "json".into(),
            Format::Text => "text".into(),
        },
    ]);
    if let Some(t) = &c.trace {
        wargs.extend(["--trace".into(), t.display().to_string()]);
    }
    if let Some(m) = &c.measures {
        wargs.extend(["--measures".into(), m.display().to_string()]);
    }
    let t = timeout(c)?;
    launch::interrupt::install().map_err(anyhow::Error::msg)?;
    let run_dir = launch::RunDir::create(launch::rundir::RUN_PREFIX).with_context(|| {
        format!(
            "cannot create the run's folder in {}",
            std::env::temp_dir().display()
        )
    })?;
    let opts = LaunchOptions {
        exe,
        args: wargs,
        world: staged.plan.world,
        master_addr: "127.0.0.1".into(),
        master_port,
        // Workers give up on a silent peer after `t`; the launcher allows them to
        // report that before it kills anything.
        timeout: t + Duration::from_secs(5),
        env: vec![],
        progress_dir: Some(run_dir.path().to_path_buf()),
    };
    Ok((opts, run_dir))
}

/// Op `op` of `rank`'s program by name, for failure reports.
fn op_name(staged: &Staged, rank: u32, op: u32) -> String {
    staged
        .schedule
        .get_op(rank, op)
        .map_or_else(|| "?".to_string(), |o| o.name())
}

/// The injections of `--inject`, checked against the run.
fn injections(args: &Args, staged: &Staged) -> anyhow::Result<Vec<Injection>> {
    let world = staged.plan.world;
    let steps = u64::from(args.common.steps);
    let ops_of = |rank: u32| {
        staged
            .schedule
            .get_program(rank)
            .map_or(0, |p| p.ops.len() as u32)
    };
    let mut out = Vec::new();
    for a in &args.inject {
        match a {
            InjectArg::Random => out.extend(launch::inject::random(
                args.inject_seed,
                args.inject_count,
                world,
                steps,
                &ops_of,
            )),
            InjectArg::One(text, i) => {
                i.check(text, world, steps, &ops_of)?;
                out.push(*i);
            }
        }
    }
    Ok(out)
}

/// A run with checkpoints and/or injected faults: restart on failure, report recoveries.
fn run_recovering(
    args: &Args,
    staged: &Staged,
    opts: &LaunchOptions,
    run_dir: &launch::RunDir,
    name: launch::launcher::OpNamer,
) -> anyhow::Result<ExitCode> {
    let c = &args.checkpoint;
    let injections = injections(args, staged)?;
    if let Some(dir) = &c.checkpoint_dir {
        anyhow::ensure!(
            c.resume || !twin_runtime::checkpoint::dir::has_checkpoints(dir),
            "{} already holds checkpoints: pass --resume to continue from them, or choose an empty directory",
            dir.display()
        );
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let rec = launch::RecoveryOptions {
        max_restarts: args.max_restarts,
        injections,
        resume_first: c.resume,
        events_dir: run_dir.path().join("events"),
    };
    let out = launch::launch_with_recovery(opts, &rec, name)?;
    let warnings = out.warnings(c.resume, c.checkpoint_dir.as_deref());
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    let report = out
        .output
        .stdout
        .first()
        .map(|o| String::from_utf8_lossy(o).into_owned())
        .unwrap_or_default();
    match args.common.format {
        Format::Json => {
            let mut v: serde_json::Value =
                serde_json::from_str(&report).context("rank 0 printed no JSON report")?;
            if let Some(m) = v.as_object_mut() {
                m.insert("recoveries".into(), serde_json::to_value(&out.recoveries)?);
                m.insert(
                    "checkpoints".into(),
                    serde_json::to_value(&out.checkpoints)?,
                );
                m.insert("startup".into(), serde_json::to_value(&out.startup)?);
                m.insert("warnings".into(), serde_json::to_value(&warnings)?);
            }
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        Format::Text => {
            print!("{report}{}", launch::recover::to_text(&out));
            for w in &warnings {
                println!("warning         {w}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Run `steps` steps of a one-rank schedule on the local GPU; the rank's measurements.
pub(crate) fn measure_cuda(
    scenario: &Scenario,
    staged: &Staged,
    steps: u32,
) -> anyhow::Result<launch::RankMeasure> {
    anyhow::ensure!(
        staged.plan.world == 1,
        "the scenario plans {} ranks: a single-process CUDA run takes one-rank schedules; `twin run --backend cuda` starts one process per GPU for more",
        staged.plan.world
    );
    check_fits_device(scenario, staged)?;
    let run = twin_runtime::backend::cuda::run_single_gpu(
        scenario,
        &staged.plan,
        &staged.schedule,
        steps,
    )?;
    Ok(launch::RankMeasure::from_rank_run(&run))
}

fn run_cuda(scenario: &Scenario, staged: &Staged, c: &Common) -> anyhow::Result<ExitCode> {
    let start = std::time::Instant::now();
    // The same merge and report as the host backend, so the fields mean the same.
    let measure = measure_cuda(scenario, staged, c.steps)?;
    let merged = launch::merge(
        &staged.plan,
        &staged.schedule,
        std::slice::from_ref(&measure),
    );
    let mut report = launch::report(
        scenario,
        &staged.plan,
        &staged.schedule,
        std::slice::from_ref(&measure),
        &merged,
        start.elapsed().as_secs_f64(),
        Vec::new(),
    );
    report.backend = "cuda".into();
    if let Some(path) = &c.trace {
        if let Some(trace) = &merged.result.trace {
            super::write_atomic(path, &trace.to_chrome_json(&staged.plan, &staged.schedule))?;
        }
    }
    match c.format {
        Format::Json => println!("{}", report.to_json()),
        Format::Text => print!("{}", report.to_text()),
    }
    Ok(ExitCode::SUCCESS)
}

/// Refuse a multi-GPU CUDA run this machine cannot hold, before any process starts: no
/// driver is the "no CUDA driver found (searched: ...)" error, too few GPUs names both counts.
fn check_gpus(world: u32) -> anyhow::Result<()> {
    let gpus = twin_runtime::backend::cuda::CudaBackend::device_count()?;
    anyhow::ensure!(
        world <= gpus,
        "the scenario plans {world} ranks but this machine has {gpus} GPU(s): `twin run --backend cuda` starts one process per GPU; use a smaller layout (--set parallel.dp=1 ...), start workers on several machines (docs/runtime.md), or --backend host"
    );
    Ok(())
}

/// Refuse a CUDA run whose schedule peak plus the runtime's workspaces exceed the GPU's usable
/// bytes, before any device memory is touched (docs/memory.md, "Device memory of a run").
fn check_fits_device(scenario: &Scenario, staged: &Staged) -> anyhow::Result<()> {
    use twin_runtime::backend::cuda::{footprint::DeviceFit, CudaOptions};
    let prediction = twin_sim::predict(scenario, &twin_sim::PredictOptions::default())?;
    let peaks = prediction.result.ranks.iter().map(|r| r.peak_memory_bytes);
    let fit = DeviceFit::of(
        scenario,
        &staged.schedule,
        peaks,
        CudaOptions::default().allow_tf32,
    );
    fit.check()?;
    Ok(())
}

/// Most ranks `twin run` starts on one machine.
const MAX_LOCAL_RANKS: u32 = 64;
/// A rough single-core f32 GEMM rate, only to warn about runs that would take very long.
const CPU_FLOPS_PER_S: f64 = 2e10;

/// Refuse runs this machine cannot hold, and warn about slow ones, suggesting --scale.
pub(crate) fn check_fits_host(
    scenario: &Scenario,
    staged: &Staged,
    c: &Common,
) -> anyhow::Result<()> {
    let world = staged.plan.world;
    anyhow::ensure!(
        world <= MAX_LOCAL_RANKS,
        "the scenario plans {world} ranks; `twin run --backend host` starts one process per rank on this machine (at most {MAX_LOCAL_RANKS}): use a smaller layout (--set parallel.dp=1 ...) or start workers on several machines (docs/runtime.md)"
    );
    let prediction = twin_sim::predict(scenario, &twin_sim::PredictOptions::default())?;
    let need = prediction
        .result
        .ranks
        .iter()
        .map(|r| r.peak_memory_bytes + r.host_memory_peak_bytes)
        .sum::<u64>();
    if let Some(avail) = mem_available_bytes() {
        anyhow::ensure!(
            need <= avail,
            "the ranks would hold {:.2} GiB together but {:.2} GiB of memory is available: shrink the scenario, e.g. --scale hidden=0.25",
            need as f64 / (1u64 << 30) as f64,
            avail as f64 / (1u64 << 30) as f64
        );
    }
    let flops = prediction
        .result
        .ranks
        .iter()
        .map(|r| r.flops)
        .max()
        .unwrap_or(0);
    let est_s = flops as f64 / CPU_FLOPS_PER_S * f64::from(c.steps);
    if est_s > 60.0 {
        eprintln!(
            "notice: the busiest rank has {:.1} TFLOP per step: expect about {est_s:.0} s or more on CPU cores; --scale hidden=0.25 shrinks it about 16x",
            flops as f64 / 1e12
        );
    }
    Ok(())
}

/// MemAvailable from /proc/meminfo (Linux); `None` elsewhere.
fn mem_available_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

pub fn worker(args: WorkerArgs) -> anyhow::Result<ExitCode> {
    let c = &args.common;
    let started = Instant::now();
    let env = RankEnv::from_env()?;
    let (scenario, notes, staged) = stage(c)?;
    let kills = match std::env::var(launch::inject::INJECT_VAR) {
        Ok(v) => launch::inject::decode_kills(&v)?,
        Err(_) => Vec::new(),
    };
    let opts = WorkerOptions {
        steps: c.steps,
        timeout: timeout(c)?,
        fault: twin_runtime::backend::host::Fault::from_env()?,
        durable: Durability {
            seed: scenario.run.seed,
            checkpoint: args.checkpoint.options(),
            kills,
        },
    };
    let device = launch::DeviceWorkerOptions {
        steps: opts.steps,
        timeout: opts.timeout,
        durable: opts.durable.clone(),
    };
    if args.backend != BackendKind::Host {
        anyhow::ensure!(
            opts.fault.is_none(),
            "{} is read by the host backend only; inject faults on the {} backend with `twin run --inject`",
            twin_runtime::backend::host::fault::FAULT_VAR,
            args.backend.name()
        );
    }
    let all = match args.backend {
        BackendKind::Host => launch::run_worker(&env, &staged.plan, &staged.schedule, &opts)?,
        BackendKind::Cuda => twin_runtime::backend::cuda::run_cuda_worker(
            &env,
            &staged.plan,
            &staged.schedule,
            &device,
        )?,
        BackendKind::DummyCuda => {
            let seed = device.durable.seed;
            launch::run_device_worker(&env, &staged.plan, &staged.schedule, &device, |s| {
                Ok(twin_runtime::backend::dummy::DummyDevice::new(seed, s.rank))
            })?
        }
    };
    let Some(all) = all else {
        return Ok(ExitCode::SUCCESS);
    };
    if let Some(path) = &c.measures {
        write_atomic(path, &serde_json::to_string(&all)?)?;
    }
    let merged = launch::merge(&staged.plan, &staged.schedule, &all);
    if let Some(path) = &c.trace {
        if let Some(trace) = &merged.result.trace {
            write_atomic(path, &trace.to_chrome_json(&staged.plan, &staged.schedule))?;
        }
    }
    let mut report = launch::report(
        &scenario,
        &staged.plan,
        &staged.schedule,
        &all,
        &merged,
        started.elapsed().as_secs_f64(),
        notes,
    );
    if args.backend != BackendKind::Host {
        report.backend = args.backend.name().into();
    }
    match c.format {
        Format::Json => println!("{}", report.to_json()),
        Format::Text => print!("{}", report.to_text()),
    }
    Ok(ExitCode::SUCCESS)
}
