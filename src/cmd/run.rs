//! `twin run`: execute a scenario's schedule for real and print the measured report (the
//! simulator's field names). `--backend host` launches one `twin worker` process per rank on
//! this machine (CPU compute, TCP collectives); `twin worker` is also what a user starts by
//! hand or with Slurm on several machines (see docs/runtime.md). `--backend cuda` runs a
//! one-rank schedule on the local GPU.

use super::{load_scenario, write_atomic, Format};
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use twin_runtime::launch::{self, LaunchOptions, RankEnv, ScaleFactor, WorkerOptions};
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
    /// run that makes no progress (no op starts or ends) for this long plus 5 s.
    #[arg(long, default_value_t = 60.0)]
    pub timeout_s: f64,
    /// Write every rank's raw measurements (JSON) here (used by `twin verify`).
    #[arg(long, hide = true, value_name = "FILE")]
    pub measures: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    Host,
    Cuda,
}

/// Execute a scenario for real and report what was measured.
///
/// host: one process per rank on this machine, real f32 GEMMs of the planned shapes, real
/// buffers per Alloc, real TCP transfers and ring collectives with checked results.
///
/// Examples:
///   twin run scenarios/host/pp.toml --backend host
///   twin run scenarios/host/tp-pp.toml --backend host --format json --trace run.trace.json
///   twin run scenarios/small.toml --backend host --scale hidden=0.5
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[command(flatten)]
    pub common: Common,
    /// host: CPU processes over TCP (any machine); cuda: the local GPU (one-rank scenarios).
    #[arg(long, value_enum, default_value = "host")]
    pub backend: BackendKind,
    /// Port of the bootstrap store (default: a free one).
    #[arg(long)]
    pub master_port: Option<u16>,
}

/// One rank of a host run (started by `twin run`, by hand or by srun; reads RANK,
/// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT or SLURM_PROCID/NTASKS/LOCALID).
#[derive(clap::Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub common: Common,
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
    anyhow::ensure!(
        c.timeout_s.is_finite() && c.timeout_s > 0.0,
        "--timeout-s must be a positive number of seconds"
    );
    Ok(Duration::from_secs_f64(c.timeout_s))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let c = &args.common;
    let (scenario, _notes, staged) = stage(c)?;
    match args.backend {
        BackendKind::Cuda => run_cuda(&scenario, &staged, c),
        BackendKind::Host => {
            check_fits_host(&scenario, &staged, c)?;
            let out = launch_host(c, &staged, args.master_port)?;
            print!("{out}");
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Start one `twin worker` per rank of `staged` on this machine with `c`'s arguments (its
/// format, trace and measurements file included), wait for all, and return what rank 0
/// printed. `twin run` prints it; `twin verify` reads the measurements file instead.
pub(crate) fn launch_host(
    c: &Common,
    staged: &Staged,
    master_port: Option<u16>,
) -> anyhow::Result<String> {
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
    let progress = std::env::temp_dir().join(format!("twin-run-{}", std::process::id()));
    std::fs::create_dir_all(&progress)
        .with_context(|| format!("cannot create {}", progress.display()))?;
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
        progress_dir: Some(progress.clone()),
    };
    let name = |rank: u32, op: u32| {
        staged
            .schedule
            .get_op(rank, op)
            .map_or_else(|| "?".to_string(), |o| o.name())
    };
    let out = launch::launch(&opts, &name);
    let _ = std::fs::remove_dir_all(&progress);
    let out = out?;
    Ok(out
        .stdout
        .first()
        .map(|o| String::from_utf8_lossy(o).into_owned())
        .unwrap_or_default())
}

/// Run `steps` steps of a one-rank schedule on the local GPU; the rank's measurements.
pub(crate) fn measure_cuda(
    scenario: &Scenario,
    staged: &Staged,
    steps: u32,
) -> anyhow::Result<launch::RankMeasure> {
    anyhow::ensure!(
        staged.plan.world == 1,
        "the scenario plans {} ranks: `--backend cuda` runs one-rank schedules only (multi-GPU launch is future work); use --backend host, or set parallel sizes to 1",
        staged.plan.world
    );
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
    let merged = launch::merge(&staged.schedule, std::slice::from_ref(&measure));
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
    let opts = WorkerOptions {
        steps: c.steps,
        timeout: timeout(c)?,
        fault: twin_runtime::backend::host::Fault::from_env()?,
    };
    let Some(all) = launch::run_worker(&env, &staged.plan, &staged.schedule, &opts)? else {
        return Ok(ExitCode::SUCCESS);
    };
    if let Some(path) = &c.measures {
        write_atomic(path, &serde_json::to_string(&all)?)?;
    }
    let merged = launch::merge(&staged.schedule, &all);
    if let Some(path) = &c.trace {
        if let Some(trace) = &merged.result.trace {
            write_atomic(path, &trace.to_chrome_json(&staged.plan, &staged.schedule))?;
        }
    }
    let report = launch::report(
        &scenario,
        &staged.plan,
        &staged.schedule,
        &all,
        &merged,
        started.elapsed().as_secs_f64(),
        notes,
    );
    match c.format {
        Format::Json => println!("{}", report.to_json()),
        Format::Text => print!("{}", report.to_text()),
    }
    Ok(ExitCode::SUCCESS)
}
