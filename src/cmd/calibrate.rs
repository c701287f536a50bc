//! `twin calibrate host|cuda|nccl-tests|refit`: fit a hardware profile to this machine, to
//! nccl-tests logs, or to a calibration's stored samples. The work is in the twin-calibration
//! crate; this module parses arguments, reads the inputs, draws the progress bar and writes
//! the files.

use super::Format;
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use twin_calibration::bench::{Mode, Progress};
use twin_calibration::inputs::{self, Refit, ScenarioWork};

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
  twin calibrate trace step.trace.json.gz --scenario s.toml --base-profile h200.toml -o h200-hf.toml

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
    Trace(TraceArgs),
}

/// Fit a profile to a framework's PyTorch profiler trace (GEMMs, copies, host time per kernel).
#[derive(clap::Args)]
#[command(
    help_template = super::HELP,
    before_help = "Examples:
  twin calibrate trace step.trace.json.gz --scenario s.toml --base-profile h200.toml -o out.toml
  twin calibrate trace run/ --scenario s.toml --base-profile h200.toml --step-time-s 0.3264

The GEMM curve comes from the trace's GEMM kernels, the memory-bound bandwidth from its copy
kernels, the host time per kernel from the step (written to OUT-STEM.framework.toml).
Details: docs/reference/cli.md#twin-calibrate-trace"
)]
pub struct TraceArgs {
    /// A PyTorch profiler trace (.json[.gz], recorded with record_shapes), or a directory.
    pub trace: PathBuf,
    /// The scenario of the traced job (its GPU must be the base profile's).
    #[arg(long)]
    pub scenario: PathBuf,
    /// Profile whose other sections the result keeps.
    #[arg(long)]
    pub base_profile: PathBuf,
    /// The step measured without the profiler, in seconds (the profiler slows the host);
    /// default: the trace's step.
    #[arg(long, value_name = "S")]
    pub step_time_s: Option<f64>,
    /// The rank of the trace to fit.
    #[arg(long, default_value_t = 0)]
    pub rank: u32,
    /// The trace's step to fit (0-based; default: the last).
    #[arg(long, value_name = "N")]
    pub step: Option<usize>,
    #[command(flatten)]
    pub out: Out,
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
    /// The same as --quiet: never draw the progress bar.
    #[arg(long, hide = true)]
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

/// The calibration's progress: benchmark name, done/total.
struct Bar(super::progress::Bar);

impl Progress for Bar {
    fn update(&mut self, benchmark: &str, done: usize, total: usize) {
        self.0.set(done, total, benchmark);
    }
}

impl Bar {
    fn new(no_progress: bool) -> Bar {
        Bar(super::progress::Bar::new("calibrate", 0, no_progress))
    }

    fn finish(&self) {
        self.0.finish();
    }
}

/// Write the profile to `out.output` and print `run` as JSON, or `text`.
fn emit<T: serde::Serialize>(kind: &str, out: &Out, toml: &str, run: &T, text: String) -> Result {
    super::write_atomic(&out.output, toml)?;
    print(kind, out, run, text)
}

/// Print `run` as the JSON document `twin.<kind>/1`, or `text`.
fn print<T: serde::Serialize>(kind: &str, out: &Out, run: &T, text: String) -> Result {
    match out.format {
        Format::Json => println!("{}", twin_sim::json::document(kind, run)?),
        Format::Text => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}

type Result = anyhow::Result<ExitCode>;

/// `--scenario`: the scenario (warning of what it sets that twin does not model) and its
/// schedule.
fn scenario_work(path: Option<&Path>) -> anyhow::Result<Option<ScenarioWork>> {
    let Some(path) = path else { return Ok(None) };
    let s = super::load_scenario(path, &[])?;
    Ok(Some(ScenarioWork::new(s, path.display().to_string())?))
}

/// `refit`: the profile of a calibration's stored samples.
fn refit(a: &RefitArgs) -> Result {
    let scenario = scenario_work(a.scenario.as_deref())?;
    let output = &a.out.output;
    let req = inputs::RefitRequest {
        samples: &a.samples,
        output,
        gpu_name: a.gpu_name.clone(),
        scenario: scenario.as_ref(),
        base_profile: a.base_profile.as_deref(),
        command: &command_line(),
    };
    match inputs::refit(&req)? {
        Refit::Cuda(run) => {
            let (run, start) = *run;
            let summary = cuda_text(&run, &start, output, None);
            emit("calibrate-cuda", &a.out, &run.toml, &run, summary)
        }
        Refit::Host(run) => {
            let files = format!(
                "{} (fitted again from {})",
                output.display(),
                a.samples.display()
            );
            emit(
                "calibrate-host",
                &a.out,
                &run.toml,
                &run,
                host_text(&run, &files),
            )
        }
    }
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
        Kind::Trace(a) => &a.out,
    };
    super::output::check_file(Some(&out.output), "--output")?;
    match &args.command {
        Kind::Host(a) => host(a),
        Kind::Cuda(a) => cuda(a),
        Kind::NcclTests(a) => import(a),
        Kind::Refit(a) => refit(a),
        Kind::Trace(a) => from_trace(a),
    }
}

/// Where `calibrate trace` writes the framework file: beside the profile, `P.framework.toml`
/// for the profile `P.toml`.
fn framework_path(profile: &Path) -> PathBuf {
    let stem = profile
        .file_stem()
        .map_or_else(|| "profile".into(), |s| s.to_string_lossy().into_owned());
    profile.with_file_name(format!("{stem}.framework.toml"))
}

/// `trace`: a profile fitted to a PyTorch profiler trace (twin_calibration::trace).
fn from_trace(a: &TraceArgs) -> Result {
    if let Some(s) = a.step_time_s {
        anyhow::ensure!(
            s.is_finite() && s > 0.0,
            "--step-time-s {s}: give the measured step in seconds, a number > 0"
        );
    }
    let scenario = super::load_scenario(&a.scenario, &[])?;
    let base = twin_sim::profile::load(&a.base_profile)?;
    let traces = twin_measured::kineto::read_traces(&a.trace)?;
    let trace = twin_measured::kineto::trace_of_rank(&traces, a.rank).ok_or_else(|| {
        anyhow::anyhow!(
            "--rank {}: {} holds no trace of that rank",
            a.rank,
            a.trace.display()
        )
    })?;
    let step = a.step.unwrap_or(trace.steps.len().saturating_sub(1));
    let (profile, fit) = twin_calibration::trace::calibrate_trace(
        trace,
        step,
        &scenario,
        &base,
        a.rank,
        a.step_time_s,
    )?;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let provenance = twin_calibration::provenance::here(
        "trace",
        "trace",
        &command,
        &a.trace.display().to_string(),
    );
    let toml = twin_calibration::write::profile_toml(
        &profile,
        None,
        Some(&provenance),
        &[format!(
            "Written by twin calibrate trace from {} (rank {}, step {step}) over {}.",
            a.trace.display(),
            a.rank,
            a.base_profile.display()
        )],
    );
    // The framework file with the fitted host time, beside the profile.
    let fw = &scenario.training.framework;
    let fw_text = match &fw.origin {
        twin_sim::scenario::framework::Origin::Bundled(b) => b.text().to_string(),
        twin_sim::scenario::framework::Origin::File(path) => std::fs::read_to_string(path)
            .with_context(|| format!("reading the scenario's framework file {path}"))?,
    };
    let fw_path = framework_path(&a.out.output);
    let fw_toml = twin_calibration::trace::framework_toml(
        &fw_text,
        &fit.host_key,
        fit.host_per_kernel_ns,
        &fit.host_reference(&a.trace.display().to_string()),
    )?;
    super::write_atomic(&fw_path, &fw_toml)?;
    let text = format!(
        "{}wrote {} and {} (a scenario takes it as [training] framework_file, in place of framework)\n",
        fit.to_text(),
        a.out.output.display(),
        fw_path.display()
    );
    let fit = twin_sim::json::WithLayout {
        layout: twin_sim::json::Layout::of(&scenario),
        body: &fit,
    };
    emit("calibrate-trace", &a.out, &toml, &fit, text)
}

fn host(a: &HostArgs) -> Result {
    let m = &a.measure;
    let scenario = scenario_work(m.scenario.as_deref())?;
    let mode = match (a.tiny, m.quick) {
        (true, _) => Mode::Tiny,
        (false, true) => Mode::Quick,
        (false, false) => Mode::Full,
    };
    let opts = inputs::host_options(
        mode,
        scenario.as_ref(),
        m.gpu_name.clone(),
        a.seed,
        command_line(),
        &a.out.output,
    );
    let mut bar = Bar::new(m.no_progress);
    let result = twin_calibration::calibrate_host(&opts, &mut bar);
    bar.finish();
    let run = result?;
    let samples = samples_path(&a.out.output);
    let what = serde_json::json!({ "config": run.config });
    super::write_atomic(&a.out.output, &run.toml)?;
    write_samples(&samples, &run.provenance, &what, &run.samples)?;
    print(
        "calibrate-host",
        &a.out,
        &run,
        host_text(&run, &wrote(&a.out.output, &samples)),
    )
}

fn cuda(a: &CudaArgs) -> Result {
    // Fail before anything else when there is no GPU, with what to do instead.
    twin_calibration::cuda::require_gpu()?;
    let m = &a.measure;
    let scenario = scenario_work(m.scenario.as_deref())?;
    let (scenario_calls, req) = inputs::gpu_request(
        scenario.as_ref(),
        m.gpu_name.clone(),
        a.base_profile.as_deref(),
        device(),
    )?;
    let start = twin_calibration::gpu_base::start(req)?;
    let (cuda_version, nccl_version) = cuda_versions();
    let opts = twin_calibration::CudaOptions {
        quick: m.quick,
        scenario_calls,
        command: command_line(),
        samples_file: inputs::samples_file_name(&a.out.output),
        cuda_version,
        nccl_version,
    };
    let mut bar = Bar::new(m.no_progress);
    let result = twin_calibration::calibrate_cuda(&start, &opts, &mut bar);
    bar.finish();
    let run = result?;
    let samples = samples_path(&a.out.output);
    let what = serde_json::json!({ "plan": run.plan, "device": run.device });
    super::write_atomic(&a.out.output, &run.toml)?;
    write_samples(&samples, &run.provenance, &what, &run.samples)?;
    print(
        "calibrate-cuda",
        &a.out,
        &run,
        cuda_text(&run, &start, &a.out.output, Some(&samples)),
    )
}

fn import(a: &NcclArgs) -> Result {
    let (out, origin) = inputs::import_nccl_tests(&a.logs, a.base_profile.as_deref(), a.min_bytes)?;
    let summary = text::import_text(&out, &origin, &a.out.output);
    emit("calibrate-nccl-tests", &a.out, &out.toml, &out, summary)
}
