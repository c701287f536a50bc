//! `twin calibrate`: measures this machine (host backend, or a GPU through cuBLAS) and fits a
//! hardware profile with a 95% confidence interval on every fitted number, or imports
//! nccl-tests logs into a profile's network tiers. The work is in the twin-calibration
//! crate; this module parses arguments, draws the progress bar and writes the files.

use super::Format;
use anyhow::{bail, Context};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use twin_calibration::bench::{Mode, Progress};
use twin_calibration::HostOptions;

use twin_calibration::cuda::{device, versions as cuda_versions};
use twin_calibration::text::{self, cuda_text, host_text, wrote};
use twin_calibration::write::{samples_path, write_samples};

/// Fit a hardware profile to this machine, or to nccl-tests logs (docs/calibration.md).
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Kind,
}

#[derive(clap::Subcommand)]
pub enum Kind {
    Host(HostArgs),
    Cuda(CudaArgs),
    NcclTests(NcclArgs),
    Refit(RefitArgs),
}

/// Where the profile goes and how the result is printed.
#[derive(clap::Args)]
pub struct Out {
    /// Where to write the profile (its raw samples go beside it, PROFILE.samples.json).
    #[arg(short, long, default_value = "profile.toml")]
    pub output: PathBuf,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

/// What a measured calibration times and how.
#[derive(clap::Args)]
pub struct Measure {
    /// Fewer shapes, sizes and repeats: under a minute.
    #[arg(long)]
    pub quick: bool,
    /// Also time every GEMM shape of this scenario's schedule (and, on the host, evict a step
    /// of its traffic before allocations and cold passes); its GPU names the profile.
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// The GPU name the profile describes (default: the scenario's GPU, the device's name on
    /// a GPU, "cpu-core" on the host).
    #[arg(long)]
    pub gpu_name: Option<String>,
    /// Never draw the progress bar (drawn only when standard error is a terminal).
    #[arg(long)]
    pub no_progress: bool,
}

/// Measure this machine's CPU cores, memory and transfers (host backend) into a profile.
#[derive(clap::Args)]
#[command(
    help_template = super::HELP,
    before_help = "Examples:
  twin calibrate host -o host.toml                         a few minutes
  twin calibrate host --quick -o host.toml                 under a minute
  twin calibrate host --scenario s.toml -o host.toml       also s's GEMM shapes"
)]
pub struct HostArgs {
    #[command(flatten)]
    pub measure: Measure,
    /// Seed of the benchmark order shuffle.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The fewest samples every fit accepts (tests).
    #[arg(long, hide = true)]
    pub tiny: bool,
    #[command(flatten)]
    pub out: Out,
}

/// Measure the local GPU (cuBLAS, memory, NCCL) into a profile.
#[derive(clap::Args)]
#[command(
    help_template = super::HELP,
    before_help = "Examples:
  twin calibrate cuda -o h100.toml
  twin calibrate cuda --quick --scenario scenarios/gpu/llama3-8b-1gpu.toml -o gpu.toml"
)]
pub struct CudaArgs {
    #[command(flatten)]
    pub measure: Measure,
    /// Profile whose other sections the result keeps (default: the bundled profile of the
    /// GPU calibrated).
    #[arg(long)]
    pub base_profile: Option<PathBuf>,
    #[command(flatten)]
    pub out: Out,
}

/// Fit a profile's network tiers to nccl-tests logs (all_reduce_perf, all_gather_perf, ...).
#[derive(clap::Args)]
#[command(
    help_template = super::HELP,
    before_help = "Examples:
  twin calibrate nccl-tests all_reduce_perf.log all_gather_perf.log -o cluster.toml
  twin calibrate nccl-tests logs/*.log --base-profile a100.toml --min-bytes 1048576"
)]
pub struct NcclArgs {
    /// nccl-tests output files.
    #[arg(required = true, num_args = 1..)]
    pub logs: Vec<PathBuf>,
    /// Profile whose other sections the result keeps (default: the bundled profile of the
    /// logs' GPU).
    #[arg(long)]
    pub base_profile: Option<PathBuf>,
    /// Rows below this many bytes are left out of the fit.
    #[arg(long, default_value_t = 0)]
    pub min_bytes: u64,
    #[command(flatten)]
    pub out: Out,
}

/// Fit a calibration's raw samples (PROFILE.samples.json) again, measuring nothing.
#[derive(clap::Args)]
#[command(
    help_template = super::HELP,
    before_help = "Examples:
  twin calibrate refit host.samples.json -o host2.toml
  twin calibrate refit gpu.samples.json --scenario s.toml -o gpu2.toml

A GPU calibration's samples are fitted over --gpu-name, --scenario and --base-profile as when
measured; the profile's provenance keeps where and when they were taken."
)]
pub struct RefitArgs {
    /// The samples file a calibration wrote.
    pub samples: PathBuf,
    /// The GPU name the profile describes.
    #[arg(long)]
    pub gpu_name: Option<String>,
    /// (GPU samples) the scenario whose GEMM calls were timed.
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// (GPU samples) profile whose other sections the result keeps.
    #[arg(long)]
    pub base_profile: Option<PathBuf>,
    #[command(flatten)]
    pub out: Out,
}

/// The resolved settings of any calibration, which the steps below read.
struct Settings {
    quick: bool,
    tiny: bool,
    output: PathBuf,
    scenario: Option<PathBuf>,
    gpu_name: Option<String>,
    seed: u64,
    format: Format,
    base_profile: Option<PathBuf>,
    min_bytes: u64,
    no_progress: bool,
}

impl Settings {
    fn new(out: Out) -> Settings {
        Settings {
            quick: false,
            tiny: false,
            output: out.output,
            scenario: None,
            gpu_name: None,
            seed: 1,
            format: out.format,
            base_profile: None,
            min_bytes: 0,
            no_progress: false,
        }
    }

    fn measured(m: Measure, out: Out) -> Settings {
        Settings {
            quick: m.quick,
            scenario: m.scenario,
            gpu_name: m.gpu_name,
            no_progress: m.no_progress,
            ..Settings::new(out)
        }
    }
}

/// A one-line progress bar on stderr: benchmark name, done/total.
struct Bar {
    enabled: bool,
    drawn: bool,
}

impl Progress for Bar {
    fn update(&mut self, benchmark: &str, done: usize, total: usize) {
        if !self.enabled {
            return;
        }
        let total = total.max(1);
        let filled = done.min(total) * 30 / total;
        eprint!(
            "\r  calibrate [{}{}] {done}/{total} {benchmark:<16}",
            "#".repeat(filled),
            " ".repeat(30 - filled)
        );
        self.drawn = true;
    }
}

impl Bar {
    fn finish(&self) {
        if self.drawn {
            eprintln!();
        }
    }
}

/// `--refit`: the profile of a host calibration's stored samples.
fn refit(args: &Settings, samples: &Path) -> anyhow::Result<ExitCode> {
    if samples == args.output || samples_path(&args.output) == samples {
        bail!(
            "--refit {} -o {}: the profile would overwrite or sit beside the samples it reads; \
             give another --output",
            samples.display(),
            args.output.display()
        );
    }
    let text = std::fs::read_to_string(samples)
        .with_context(|| format!("--refit {}: cannot read it", samples.display()))?;
    let origin = samples.display().to_string();
    if twin_calibration::samples_backend(&text, &origin)? == "cuda" {
        let req = twin_calibration::gpu_base::Request {
            device: None,
            ..gpu_request(args)?.1
        };
        let (run, start) = twin_calibration::refit_cuda(&text, &origin, req, &command_line())?;
        super::write_atomic(&args.output, &run.toml)?;
        match args.format {
            Format::Json => println!("{}", serde_json::to_string_pretty(&run)?),
            Format::Text => print!("{}", cuda_text(&run, &start, &args.output, None)),
        }
        return Ok(ExitCode::SUCCESS);
    }
    if args.scenario.is_some() || args.base_profile.is_some() {
        bail!(
            "--refit {}: --scenario and --base-profile apply to a GPU calibration's samples; \
             these are the host backend's",
            samples.display()
        );
    }
    let run = twin_calibration::refit_host(
        &text,
        &samples.display().to_string(),
        args.gpu_name.as_deref().unwrap_or("cpu-core"),
        &command_line(),
    )?;
    super::write_atomic(&args.output, &run.toml)?;
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&run)?),
        Format::Text => print!(
            "{}",
            host_text(
                &run,
                &format!(
                    "{} (fitted again from {})",
                    args.output.display(),
                    samples.display()
                )
            )
        ),
    }
    Ok(ExitCode::SUCCESS)
}

fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (settings, kind) = match args.command {
        Kind::Host(a) => {
            let s = Settings {
                seed: a.seed,
                tiny: a.tiny,
                ..Settings::measured(a.measure, a.out)
            };
            (s, Job::Host)
        }
        Kind::Cuda(a) => {
            let s = Settings {
                base_profile: a.base_profile,
                ..Settings::measured(a.measure, a.out)
            };
            (s, Job::Cuda)
        }
        Kind::NcclTests(a) => {
            let s = Settings {
                base_profile: a.base_profile,
                min_bytes: a.min_bytes,
                ..Settings::new(a.out)
            };
            (s, Job::Import(a.logs))
        }
        Kind::Refit(a) => {
            let s = Settings {
                gpu_name: a.gpu_name,
                scenario: a.scenario,
                base_profile: a.base_profile,
                ..Settings::new(a.out)
            };
            (s, Job::Refit(a.samples))
        }
    };
    super::output::check_file(Some(&settings.output), "--output")?;
    match kind {
        Job::Host => host(&settings),
        Job::Cuda => cuda(&settings),
        Job::Import(logs) => import(&settings, &logs),
        Job::Refit(samples) => refit(&settings, &samples),
    }
}

/// Which calibration the subcommand asked for.
enum Job {
    Host,
    Cuda,
    Import(Vec<PathBuf>),
    Refit(PathBuf),
}

fn host(args: &Settings) -> anyhow::Result<ExitCode> {
    let (extra_shapes, step_bytes, scenario_gpu) = match &args.scenario {
        Some(path) => {
            let (s, schedule) = scenario_schedule(path)?;
            (
                twin_calibration::bench::compute::scenario_shapes(&schedule, usize::MAX),
                Some(twin_calibration::bench::compute::step_bytes(&schedule)),
                Some(s.cluster.gpu.name.clone()),
            )
        }
        None => (Vec::new(), None, None),
    };
    let samples = samples_path(&args.output);
    let opts = HostOptions {
        mode: if args.tiny {
            Mode::Tiny
        } else if args.quick {
            Mode::Quick
        } else {
            Mode::Full
        },
        extra_shapes,
        step_bytes,
        gpu_name: args
            .gpu_name
            .clone()
            .or(scenario_gpu)
            .unwrap_or_else(|| "cpu-core".into()),
        seed: args.seed,
        command: command_line(),
        samples_file: samples
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    let mut bar = Bar {
        enabled: !args.no_progress && std::io::stderr().is_terminal(),
        drawn: false,
    };
    let result = twin_calibration::calibrate_host(&opts, &mut bar);
    bar.finish();
    let run = result?;
    super::write_atomic(&args.output, &run.toml)?;
    let what = serde_json::json!({ "config": run.config });
    write_samples(&samples, &run.provenance, &what, &run.samples)?;
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&run)?),
        Format::Text => print!("{}", host_text(&run, &wrote(&args.output, &samples))),
    }
    Ok(ExitCode::SUCCESS)
}

fn cuda(args: &Settings) -> anyhow::Result<ExitCode> {
    // Fail before anything else when there is no GPU, with what to do instead.
    twin_calibration::cuda::require_gpu()?;
    let (scenario_calls, req) = gpu_request(args)?;
    let start = twin_calibration::gpu_base::start(req)?;
    let samples = samples_path(&args.output);
    let (cuda_version, nccl_version) = cuda_versions();
    let opts = twin_calibration::CudaOptions {
        quick: args.quick,
        scenario_calls,
        command: command_line(),
        samples_file: samples
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        cuda_version,
        nccl_version,
    };
    let mut bar = Bar {
        enabled: !args.no_progress && std::io::stderr().is_terminal(),
        drawn: false,
    };
    let result = twin_calibration::calibrate_cuda(&start, &opts, &mut bar);
    bar.finish();
    let run = result?;
    super::write_atomic(&args.output, &run.toml)?;
    let what = serde_json::json!({ "plan": run.plan, "device": run.device });
    write_samples(&samples, &run.provenance, &what, &run.samples)?;
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&run)?),
        Format::Text => print!("{}", cuda_text(&run, &start, &args.output, Some(&samples))),
    }
    Ok(ExitCode::SUCCESS)
}

/// What a GPU calibration starts from (`--gpu-name`, `--scenario`, `--base-profile` and GPU 0
/// as the driver reports it), and the scenario's GEMM calls to time.
fn gpu_request(
    args: &Settings,
) -> anyhow::Result<(
    Vec<twin_sim::schedule::Gemm>,
    twin_calibration::gpu_base::Request,
)> {
    let (scenario_calls, scenario) = match &args.scenario {
        Some(path) => {
            let (s, schedule) = scenario_schedule(path)?;
            let links = twin_sim::cost::Analytic::new(&s).links;
            (
                twin_calibration::cuda::scenario_calls(&schedule, MAX_SCENARIO_CALLS),
                Some(twin_calibration::gpu_base::ScenarioGpu {
                    origin: path.display().to_string(),
                    gpu: s.cluster.gpu,
                    links,
                }),
            )
        }
        None => (Vec::new(), None),
    };
    let base = match &args.base_profile {
        Some(p) => Some((twin_sim::profile::load(p)?, p.display().to_string())),
        None => None,
    };
    let req = twin_calibration::gpu_base::Request {
        gpu_name: args.gpu_name.clone(),
        scenario,
        base,
        device: device(),
    };
    Ok((scenario_calls, req))
}

/// Most scenario GEMM calls a GPU calibration times (the most frequent first).
const MAX_SCENARIO_CALLS: usize = 32;

/// A scenario and its generated schedule.
fn scenario_schedule(
    path: &Path,
) -> anyhow::Result<(twin_sim::scenario::Scenario, twin_sim::schedule::Schedule)> {
    let s = super::load_scenario(path, &[])?;
    let plan =
        twin_sim::plan::Plan::new(&s).with_context(|| format!("cannot plan {}", path.display()))?;
    let schedule = twin_sim::schedule::generate(&s, &plan)
        .with_context(|| format!("cannot build the schedule of {}", path.display()))?;
    Ok((s, schedule))
}

/// `--base-profile`, or the bundled profile for `gpu`.
fn base_profile(
    path: Option<&Path>,
    gpu: Option<&str>,
) -> anyhow::Result<(twin_sim::profile::Profile, String)> {
    if let Some(p) = path {
        return Ok((twin_sim::profile::load(p)?, p.display().to_string()));
    }
    let gpu = gpu.unwrap_or("");
    match twin_calibration::gpu_base::bundled_base(gpu) {
        Some((origin, text)) => Ok((
            twin_sim::profile::parse_str(text, origin)?,
            origin.to_string(),
        )),
        None => bail!(
            "no bundled profile for GPU '{gpu}'; give --base-profile FILE (a profile whose other sections the result keeps)"
        ),
    }
}

fn import(args: &Settings, paths: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let mut logs = Vec::new();
    for p in paths {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
        logs.push((p.display().to_string(), text));
    }
    // Parsed here first so that a log's error (file, line, what was expected) is what the
    // user sees, not a missing GPU name that the unparsed log could not give.
    let mut first_gpu = None;
    for (origin, text) in &logs {
        let log = twin_calibration::nccl_tests::parse(text, origin)?;
        first_gpu = first_gpu.or(log.gpu);
    }
    let (base, origin) = base_profile(args.base_profile.as_deref(), first_gpu.as_deref())?;
    let out = twin_calibration::from_nccl_tests(&logs, &base, &origin, args.min_bytes)?;
    super::write_atomic(&args.output, &out.toml)?;
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&out)?),
        Format::Text => print!("{}", text::import_text(&out, &origin, &args.output)),
    }
    Ok(ExitCode::SUCCESS)
}
