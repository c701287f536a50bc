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

mod text;
use text::{ab_line, cuda_text, est, host_text, wrote};

/// Fit a hardware profile to this machine, or to nccl-tests logs.
///
///   twin calibrate --backend host -o host.toml            microbenchmarks, a few minutes
///   twin calibrate --backend host --quick -o host.toml    under a minute
///   twin calibrate --backend host --scenario s.toml ...   also time every GEMM shape of s,
///                                                        and evict a step of s's traffic
///                                                        before allocations and cold passes
///   twin calibrate --from-nccl-tests all_reduce_perf.log ... -o cluster.toml
///   twin calibrate --refit host.samples.json -o host2.toml
///                                                        fit a host calibration's raw
///                                                        samples again, measuring nothing
///
/// The raw samples are written beside the profile (PROFILE.samples.json). docs/calibration.md
/// says what is measured, the outlier rule, the fits and their confidence intervals.
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Which backend to measure.
    #[arg(long, value_enum, required_unless_present_any = ["from_nccl_tests", "refit"])]
    pub backend: Option<Backend>,
    /// Fewer shapes, sizes and repeats: under a minute.
    #[arg(long)]
    pub quick: bool,
    /// Where to write the profile.
    #[arg(short, long, default_value = "profile.toml")]
    pub output: PathBuf,
    /// Also time every GEMM shape of this scenario's schedule, and (host) write the bytes its
    /// busiest rank touches in a step, at most twice the last-level cache, before each
    /// allocation and cold-pass sample (without it: twice the last-level cache); its GPU names
    /// the profile.
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// The GPU name the profile describes: its `[gpu] name`, under the preset's own name for
    /// an alias, and its name NAME-calibrated on a GPU (default: the scenario's GPU; on a GPU
    /// without a scenario the device's name; "cpu-core" on the host).
    #[arg(long)]
    pub gpu_name: Option<String>,
    /// Seed of the benchmark order shuffle.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// nccl-tests output files (all_reduce_perf, all_gather_perf, reduce_scatter_perf,
    /// alltoall_perf, broadcast_perf, sendrecv_perf) to fit the network tiers to.
    #[arg(long, num_args = 1.., conflicts_with = "backend")]
    pub from_nccl_tests: Vec<PathBuf>,
    /// Profile whose other sections the result keeps (default: the bundled profile of the GPU
    /// calibrated or of the logs' GPU; --backend cuda for a GPU with none builds one from the
    /// --scenario's node links). On a GPU, its GPU section is replaced when it describes
    /// another GPU than the one calibrated (docs/calibration.md).
    #[arg(long)]
    pub base_profile: Option<PathBuf>,
    /// nccl-tests rows below this many bytes are left out of the fit.
    #[arg(long, default_value_t = 0)]
    pub min_bytes: u64,
    /// Fit the raw samples a host calibration wrote (PROFILE.samples.json) again, measuring
    /// nothing: the same measurements through this twin's fits and profile keys. The profile's
    /// provenance keeps where and when they were taken.
    /// A GPU calibration's samples are fitted over --gpu-name, --scenario and --base-profile as
    /// when measured (the GPU the file recorded stands in for the device).
    #[arg(long, value_name = "SAMPLES_JSON", conflicts_with_all = ["backend", "from_nccl_tests", "quick", "tiny"])]
    pub refit: Option<PathBuf>,
    /// The fewest samples every fit accepts (tests).
    #[arg(long, hide = true)]
    pub tiny: bool,
    /// Never draw the progress bar (it is drawn only when standard error is a terminal).
    #[arg(long)]
    pub no_progress: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Host,
    Cuda,
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
fn refit(args: &Args, samples: &Path) -> anyhow::Result<ExitCode> {
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

/// Writes the raw samples beside the profile: where they were taken, what was measured (the
/// keys of `what`: the host's `config`, the GPU's `plan` and `device`), the outlier rule and
/// every sample.
fn write_samples<S: serde::Serialize>(
    path: &Path,
    provenance: &twin_calibration::write::Provenance,
    what: &serde_json::Value,
    samples: &S,
) -> anyhow::Result<()> {
    #[derive(serde::Serialize)]
    struct SamplesFile<'a, S> {
        provenance: &'a twin_calibration::write::Provenance,
        #[serde(flatten)]
        what: &'a serde_json::Value,
        outlier_rule: &'static str,
        samples: &'a S,
    }
    let file = SamplesFile {
        provenance,
        what,
        outlier_rule: "drop samples above median + 3 * 1.4826 * MAD (docs/calibration.md)",
        samples,
    };
    super::write_atomic(path, &serde_json::to_string_pretty(&file)?)
}

/// `profile.toml` → `profile.samples.json`.
pub fn samples_path(profile: &Path) -> PathBuf {
    profile.with_extension("samples.json")
}

fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    super::output::check_file(Some(&args.output), "--output")?;
    if let Some(samples) = &args.refit {
        return refit(&args, samples);
    }
    if !args.from_nccl_tests.is_empty() {
        return import(&args);
    }
    match args.backend {
        Some(Backend::Cuda) => cuda(&args),
        Some(Backend::Host) => host(&args),
        None => bail!("give --backend host|cuda or --from-nccl-tests LOG..."),
    }
}

fn host(args: &Args) -> anyhow::Result<ExitCode> {
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

fn cuda(args: &Args) -> anyhow::Result<ExitCode> {
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
        samples_file: file_name(&samples),
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
    args: &Args,
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

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Driver, CUDA and cuBLAS versions, and NCCL's, as `twin doctor` finds them.
fn cuda_versions() -> (Option<String>, Option<String>) {
    use twin_runtime::backend::cuda::Item;
    let d = twin_runtime::backend::cuda::doctor();
    let found = |i: &Item<String>| match i {
        Item::Found(v) => Some(v.clone()),
        Item::NotFound(_) => None,
    };
    let cuda = format!(
        "driver {} (CUDA {}), cuBLAS {}",
        found(&d.driver_version).unwrap_or_else(|| "?".into()),
        found(&d.driver_cuda_version).unwrap_or_else(|| "?".into()),
        found(&d.cublas_version).unwrap_or_else(|| "?".into()),
    );
    (Some(cuda), found(&d.nccl_version))
}

/// GPU 0 as the CUDA driver reports it (`twin doctor`), when it does.
fn device() -> Option<twin_calibration::gpu_base::Device> {
    use twin_runtime::backend::cuda::Item;
    match twin_runtime::backend::cuda::doctor().gpus {
        Item::Found(gpus) => gpus
            .into_iter()
            .next()
            .map(|g| twin_calibration::gpu_base::Device {
                name: g.name,
                sm_count: g.multiprocessors,
                memory_bytes: g.total_bytes,
            }),
        Item::NotFound(_) => None,
    }
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

fn import(args: &Args) -> anyhow::Result<ExitCode> {
    let mut logs = Vec::new();
    for p in &args.from_nccl_tests {
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
        Format::Text => {
            let mut o =
                format!("nccl-tests import over {origin}; values with 95% confidence intervals\n");
            for f in &out.fits {
                o.push_str(&format!(
                    "  {:<22} {:>3} ranks {} node(s) {:?}: {} per rank{}, latency {}, R² {:.4}, rms {:.1}%\n",
                    f.test.binary(),
                    f.ranks,
                    f.nodes,
                    f.tier,
                    est(&f.link_bandwidth_bytes_per_s, "B/s"),
                    if f.nodes > 1 { " (per rail)" } else { "" },
                    est(&f.fit.latency_ns, "ns"),
                    f.fit.quality.r2,
                    f.fit.quality.rms_relative_error * 100.0
                ));
            }
            for (tier, f) in &out.tiers {
                o.push_str(&ab_line(&format!("{tier:?} tier"), f, "step "));
            }
            o.push_str(&format!("wrote {}\n", args.output.display()));
            print!("{o}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
