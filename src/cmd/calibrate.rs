//! `twin calibrate host|cuda|nccl-tests|refit`: fit a hardware profile to this machine, to
//! nccl-tests logs, or to a calibration's stored samples. The work is in the twin-calibration
//! crate; this module parses arguments, reads the inputs, draws the progress bar and writes
//! the files.

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

/// Fit a hardware profile to this machine, or to nccl-tests logs.
#[derive(clap::Args)]
#[command(
    help_template = super::HELP,
    before_help = "Examples:
  twin calibrate host --quick -o host.toml
  twin calibrate cuda -o gpu.toml
  twin calibrate nccl-tests all_reduce_perf.log -o cluster.toml
  twin calibrate refit host.samples.json -o host2.toml

Details: docs/reference/cli.md#twin-calibrate"
)]
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

impl Bar {
    fn new(no_progress: bool) -> Bar {
        Bar {
            enabled: !no_progress && std::io::stderr().is_terminal(),
            drawn: false,
        }
    }
}

/// Write the profile to `out.output` and print `run` as JSON, or `text`.
fn emit<T: serde::Serialize>(out: &Out, toml: &str, run: &T, text: String) -> Result {
    super::write_atomic(&out.output, toml)?;
    print(out, run, text)
}

/// Print `run` as JSON, or `text`.
fn print<T: serde::Serialize>(out: &Out, run: &T, text: String) -> Result {
    match out.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(run)?),
        Format::Text => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}

type Result = anyhow::Result<ExitCode>;

/// The file name of the samples file beside `output`.
fn samples_file(output: &Path) -> (PathBuf, String) {
    let samples = samples_path(output);
    let name = samples
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    (samples.clone(), name.unwrap_or_default())
}

/// `refit`: the profile of a calibration's stored samples.
fn refit(a: &RefitArgs) -> Result {
    let (samples, output) = (&a.samples, &a.out.output);
    if samples == output || samples_path(output) == *samples {
        bail!(
            "--refit {} -o {}: the profile would overwrite or sit beside the samples it reads; \
             give another --output",
            samples.display(),
            output.display()
        );
    }
    let text = std::fs::read_to_string(samples)
        .with_context(|| format!("--refit {}: cannot read it", samples.display()))?;
    let origin = samples.display().to_string();
    if twin_calibration::samples_backend(&text, &origin)? == "cuda" {
        let (_, req) = gpu_request(
            a.scenario.as_deref(),
            &a.gpu_name,
            a.base_profile.as_deref(),
        )?;
        let req = twin_calibration::gpu_base::Request {
            device: None,
            ..req
        };
        let (run, start) = twin_calibration::refit_cuda(&text, &origin, req, &command_line())?;
        let summary = cuda_text(&run, &start, output, None);
        return emit(&a.out, &run.toml, &run, summary);
    }
    if a.scenario.is_some() || a.base_profile.is_some() {
        bail!(
            "--refit {}: --scenario and --base-profile apply to a GPU calibration's samples; \
             these are the host backend's",
            samples.display()
        );
    }
    let gpu = a.gpu_name.as_deref().unwrap_or("cpu-core");
    let run = twin_calibration::refit_host(&text, &origin, gpu, &command_line())?;
    let files = format!("{} (fitted again from {origin})", output.display());
    emit(&a.out, &run.toml, &run, host_text(&run, &files))
}

fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

pub fn run(args: Args) -> Result {
    let out = match &args.command {
        Kind::Host(a) => &a.out,
        Kind::Cuda(a) => &a.out,
        Kind::NcclTests(a) => &a.out,
        Kind::Refit(a) => &a.out,
    };
    super::output::check_file(Some(&out.output), "--output")?;
    match &args.command {
        Kind::Host(a) => host(a),
        Kind::Cuda(a) => cuda(a),
        Kind::NcclTests(a) => import(a),
        Kind::Refit(a) => refit(a),
    }
}

fn host(a: &HostArgs) -> Result {
    let m = &a.measure;
    let (extra_shapes, step_bytes, scenario_gpu) = match &m.scenario {
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
    let (samples, samples_file) = samples_file(&a.out.output);
    let opts = HostOptions {
        mode: match (a.tiny, m.quick) {
            (true, _) => Mode::Tiny,
            (false, true) => Mode::Quick,
            (false, false) => Mode::Full,
        },
        extra_shapes,
        step_bytes,
        gpu_name: (m.gpu_name.clone().or(scenario_gpu)).unwrap_or_else(|| "cpu-core".into()),
        seed: a.seed,
        command: command_line(),
        samples_file,
    };
    let mut bar = Bar::new(m.no_progress);
    let result = twin_calibration::calibrate_host(&opts, &mut bar);
    bar.finish();
    let run = result?;
    let what = serde_json::json!({ "config": run.config });
    super::write_atomic(&a.out.output, &run.toml)?;
    write_samples(&samples, &run.provenance, &what, &run.samples)?;
    print(
        &a.out,
        &run,
        host_text(&run, &wrote(&a.out.output, &samples)),
    )
}

fn cuda(a: &CudaArgs) -> Result {
    // Fail before anything else when there is no GPU, with what to do instead.
    twin_calibration::cuda::require_gpu()?;
    let m = &a.measure;
    let (scenario_calls, req) = gpu_request(
        m.scenario.as_deref(),
        &m.gpu_name,
        a.base_profile.as_deref(),
    )?;
    let start = twin_calibration::gpu_base::start(req)?;
    let (samples, samples_file) = samples_file(&a.out.output);
    let (cuda_version, nccl_version) = cuda_versions();
    let opts = twin_calibration::CudaOptions {
        quick: m.quick,
        scenario_calls,
        command: command_line(),
        samples_file,
        cuda_version,
        nccl_version,
    };
    let mut bar = Bar::new(m.no_progress);
    let result = twin_calibration::calibrate_cuda(&start, &opts, &mut bar);
    bar.finish();
    let run = result?;
    let what = serde_json::json!({ "plan": run.plan, "device": run.device });
    super::write_atomic(&a.out.output, &run.toml)?;
    write_samples(&samples, &run.provenance, &what, &run.samples)?;
    print(
        &a.out,
        &run,
        cuda_text(&run, &start, &a.out.output, Some(&samples)),
    )
}

/// What a GPU calibration starts from (`--gpu-name`, `--scenario`, `--base-profile` and GPU 0
/// as the driver reports it), and the scenario's GEMM calls to time.
fn gpu_request(
    scenario: Option<&Path>,
    gpu_name: &Option<String>,
    base_profile: Option<&Path>,
) -> anyhow::Result<(
    Vec<twin_sim::schedule::Gemm>,
    twin_calibration::gpu_base::Request,
)> {
    let (scenario_calls, scenario) = match scenario {
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
    let base = match base_profile {
        Some(p) => Some((twin_sim::profile::load(p)?, p.display().to_string())),
        None => None,
    };
    let req = twin_calibration::gpu_base::Request {
        gpu_name: gpu_name.clone(),
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

fn import(a: &NcclArgs) -> Result {
    let mut logs = Vec::new();
    for p in &a.logs {
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
    let (base, origin) = base_profile(a.base_profile.as_deref(), first_gpu.as_deref())?;
    let out = twin_calibration::from_nccl_tests(&logs, &base, &origin, a.min_bytes)?;
    let summary = text::import_text(&out, &origin, &a.out.output);
    emit(&a.out, &out.toml, &out, summary)
}
