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
use twin_calibration::fit::alpha_beta::AlphaBeta;
use twin_calibration::fit::Estimate;
use twin_calibration::HostOptions;

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
    /// The GPU name the profile describes (default: the scenario's; "cpu-core" on the host).
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
    /// Profile whose other sections the result keeps (default: the bundled profile of the
    /// logs' GPU).
    #[arg(long)]
    pub base_profile: Option<PathBuf>,
    /// nccl-tests rows below this many bytes are left out of the fit.
    #[arg(long, default_value_t = 0)]
    pub min_bytes: u64,
    /// Fit the raw samples a host calibration wrote (PROFILE.samples.json) again, measuring
    /// nothing: the same measurements through this twin's fits and profile keys. The profile's
    /// provenance keeps where and when they were taken.
    #[arg(long, value_name = "SAMPLES_JSON", conflicts_with_all = ["backend", "from_nccl_tests", "quick", "scenario", "tiny"])]
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

/// Writes the raw samples beside the profile: where they were taken, what was measured (under
/// `what_key`: the host's `config`, the GPU's `plan`), the outlier rule and every sample.
fn write_samples<W: serde::Serialize, S: serde::Serialize>(
    path: &Path,
    provenance: &twin_calibration::write::Provenance,
    what_key: &'static str,
    what: &W,
    samples: &S,
) -> anyhow::Result<()> {
    #[derive(serde::Serialize)]
    struct SamplesFile<'a, W, S> {
        provenance: &'a twin_calibration::write::Provenance,
        #[serde(flatten)]
        what: std::collections::BTreeMap<&'static str, &'a W>,
        outlier_rule: &'static str,
        samples: &'a S,
    }
    let file = SamplesFile {
        provenance,
        what: std::collections::BTreeMap::from([(what_key, what)]),
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
    write_samples(
        &samples,
        &run.provenance,
        "config",
        &run.config,
        &run.samples,
    )?;
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&run)?),
        Format::Text => print!("{}", host_text(&run, &wrote(&args.output, &samples))),
    }
    Ok(ExitCode::SUCCESS)
}

fn si(v: f64, unit: &str) -> String {
    let (d, p) = match v.abs() {
        x if x >= 1e12 => (1e12, "T"),
        x if x >= 1e9 => (1e9, "G"),
        x if x >= 1e6 => (1e6, "M"),
        x if x >= 1e3 => (1e3, "k"),
        _ => (1.0, ""),
    };
    format!("{:.3} {p}{unit}", v / d)
}

fn est(e: &Estimate, unit: &str) -> String {
    format!(
        "{} [{} .. {}]",
        si(e.value, unit),
        if e.ci95[0].is_finite() {
            si(e.ci95[0], unit)
        } else {
            "-inf".into()
        },
        if e.ci95[1].is_finite() {
            si(e.ci95[1], unit)
        } else {
            "inf".into()
        }
    )
}

fn ab_line(name: &str, f: &AlphaBeta, latency: &str) -> String {
    format!(
        "  {name:<16} {:<44} {latency} {:<36} R² {:.4}  rms {:.1}%  n {}\n",
        est(&f.bandwidth_bytes_per_s, "B/s"),
        est(&f.latency_ns, "ns"),
        f.quality.r2,
        f.quality.rms_relative_error * 100.0,
        f.quality.samples
    )
}

/// A calibration summary's last lines: the fits' notes, then the files written.
/// The files a calibration wrote, for its closing line.
fn wrote(profile: &Path, samples: &Path) -> String {
    format!("{} and {}", profile.display(), samples.display())
}

/// The notes, then "wrote `files`".
fn closing_lines(notes: &[String], files: &str) -> String {
    let mut o: String = notes.iter().map(|n| format!("note: {n}\n")).collect();
    o.push_str(&format!("\nwrote {files}\n"));
    o
}

/// The GEMM curve's two summary lines (quality, then the fitted values).
fn gemm_lines(
    title: &str,
    g: &twin_calibration::fit::gemm::GemmFit,
    holdout_samples: usize,
    holdout_max_relative_error: f64,
) -> String {
    let operands = g
        .operand_bytes_per_s
        .as_ref()
        .map(|b| format!("   operands {}", est(b, "B/s")))
        .unwrap_or_default();
    format!(
        "{title}: R² {:.4}, rms {:.1}%, max {:.1}%, n {}; held-out shapes: {} with max error {:.1}%\n  rate {}   k_half {}   ramp {}   tile {}x{} (not rejected: m {:?}, n {:?}){operands}\n\n",
        g.quality.r2,
        g.quality.rms_relative_error * 100.0,
        g.quality.max_relative_error * 100.0,
        g.quality.samples,
        holdout_samples,
        holdout_max_relative_error * 100.0,
        est(&g.rate_flops_per_s, "FLOP/s"),
        est(&g.k_half, ""),
        est(&g.ramp_ns, "ns"),
        g.tile_m,
        g.tile_n,
        g.tile_m_ci95,
        g.tile_n_ci95
    )
}

fn host_text(run: &twin_calibration::HostRun, files: &str) -> String {
    let f = &run.fits;
    let g = &f.gemm;
    let mut o = if run.refit_of.is_some() {
        format!(
            "fitted again: the samples taken on {} ({} cores, {}) at {}; values with 95% \
             confidence intervals\n\n",
            run.provenance.hostname, f.cores, run.provenance.cpu_model, run.provenance.date_utc
        )
    } else {
        format!(
            "calibrated {} ({} cores, {}) in {:.1} s; values with 95% confidence intervals\n\n",
            run.provenance.hostname, f.cores, run.provenance.cpu_model, run.elapsed_s
        )
    };
    o.push_str(&gemm_lines(
        "GEMM curve (f32, one thread)",
        g,
        f.gemm_holdout_samples,
        f.gemm_holdout_max_relative_error,
    ));
    if !f.gemm_shape_factors.is_empty() {
        let (lo, hi) = f
            .gemm_shape_factors
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(lo, hi), s| {
                (lo.min(s.factor), hi.max(s.factor))
            });
        o.push_str(&format!(
            "  shape factors    {} timed shapes run {:.2}x to {:.2}x the curve back to back; \
             held-out shapes: rms {:.1}% by the curve, {:.1}% with the factors interpolated\n",
            f.gemm_shape_factors.len(),
            lo,
            hi,
            f.gemm_holdout_rms_error * 100.0,
            f.gemm_holdout_rms_error_with_factors * 100.0
        ));
    }
    o.push_str("bandwidth + fixed cost per call (alpha-beta: per step for transfers)\n");
    o.push_str(&ab_line("memory pass", &f.memory_pass, "fixed"));
    if let Some(sp) = &f.memory_spill {
        o.push_str(&format!(
            "  pass beyond {:<5} {:<44} (below it {}; knee model R² {:.4}, rms {:.1}%, n {})\n",
            si(sp.knee_bytes as f64, "B"),
            est(&sp.spill_bandwidth_bytes_per_s, "B/s"),
            est(&sp.bandwidth_bytes_per_s, "B/s"),
            sp.quality.r2,
            sp.quality.rms_relative_error * 100.0,
            sp.quality.samples
        ));
    }
    if let Some(c) = &f.memory_cold {
        o.push_str(&ab_line("cold pass", c, "fixed"));
    }
    if let Some(s) = &f.memory_state {
        o.push_str(&format!(
            "  optimizer state  {} resident, {} evicted; resident up to a distance of {}, \
             none from {}, a state byte counting {} (R² {:.4}, rms {:.1}%, n {})\n",
            est(&s.resident_bandwidth_bytes_per_s, "B/s"),
            est(&s.evicted_bandwidth_bytes_per_s, "B/s"),
            est(&s.resident_bytes, "B"),
            est(&s.evicted_bytes, "B"),
            est(&s.state_weight, ""),
            s.quality.r2,
            s.quality.rms_relative_error * 100.0,
            s.quality.samples
        ));
        match &s.decay {
            Some((after, lifetime)) => o.push_str(&format!(
                "                   and with time: all of it kept for {}, then a lifetime of {} \
                 (the machine's other tenants)\n",
                est(&after.map_monotone(|ns| ns * 1e-6), "ms"),
                est(&lifetime.map_monotone(|ns| ns * 1e-6), "ms"),
            )),
            None => {
                o.push_str("                   and with time: no decay fits better than none\n")
            }
        }
    }
    o.push_str(&format!(
        "  (cold passes each after {} of other traffic: {})\n",
        si(run.config.step_evict_bytes as f64, "B"),
        match run.step_bytes {
            Some(b) if b <= run.config.step_evict_bytes =>
                "the bytes the scenario's busiest rank touches per step",
            Some(_) => "twice the last-level cache, below the scenario's step",
            None => "twice the last-level cache; --scenario bounds it by a step's traffic",
        }
    ));
    o.push_str(&ab_line("memcpy", &f.memcpy, "fixed"));
    o.push_str(&format!(
        "  {:<16} {:<44} fixed {:<36} rms {:.1}%  n {}  (a kept buffer reused: no cost per byte)\n",
        "alloc",
        "",
        est(&f.alloc.value, "ns"),
        f.alloc.quality.rms_relative_error * 100.0,
        f.alloc.quality.samples
    ));
    o.push_str(&ab_line("checkpoint", &f.checkpoint, "fixed"));
    o.push_str(&ab_line("p2p", &f.p2p, "step "));
    for c in &f.collectives {
        match (&c.fit, &c.error) {
            (Some(fit), _) => o.push_str(&ab_line(&c.name, fit, "step ")),
            (None, e) => o.push_str(&format!(
                "  {:<16} not fitted: {}\n",
                c.name,
                e.as_deref().unwrap_or("")
            )),
        }
    }
    o.push_str(&ab_line("ring (profile)", &f.ring, "step "));
    o.push_str(&format!(
        "\nop overhead {}{}   overlap compute slowdown {:.3} [{:.3} .. {:.3}]   outliers dropped {}\n",
        est(&f.launch_ns, "ns"),
        f.handoff_ns
            .as_ref()
            .map(|h| format!("   stream hand-off {}", est(h, "ns")))
            .unwrap_or_default(),
        f.overlap_slowdown.value,
        f.overlap_slowdown.ci95[0],
        f.overlap_slowdown.ci95[1],
        f.dropped_samples
    ));
    if let Some((rate, mean)) = &f.interruptions {
        o.push_str(&format!(
            "interruptions of running compute {:.0}/s [{:.0} .. {:.0}], {} each
",
            rate.value,
            rate.ci95[0],
            rate.ci95[1],
            est(mean, "ns")
        ));
    }
    if let Some((jump, per_idle)) = &f.wake {
        o.push_str(&format!(
            "a transfer into a core that idled takes {} + {:.4} [{:.4} .. {:.4}] x the idle time longer\n",
            est(jump, "ns"),
            per_idle.value,
            per_idle.ci95[0],
            per_idle.ci95[1]
        ));
    }
    o.push_str(&closing_lines(&f.notes, files));
    o
}

fn cuda(args: &Args) -> anyhow::Result<ExitCode> {
    // Fail before anything else when there is no GPU, with what to do instead.
    twin_calibration::cuda::require_gpu()?;
    let (scenario_calls, scenario_gpu) = match &args.scenario {
        Some(path) => {
            let (s, schedule) = scenario_schedule(path)?;
            (
                twin_calibration::cuda::scenario_calls(&schedule, MAX_SCENARIO_CALLS),
                Some(s.cluster.gpu.name),
            )
        }
        None => (Vec::new(), None),
    };
    let (base, origin) = base_profile(
        args.base_profile.as_deref(),
        args.gpu_name.as_deref().or(scenario_gpu.as_deref()),
    )?;
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
    let result = twin_calibration::calibrate_cuda(&base, &opts, &mut bar);
    bar.finish();
    let run = result?;
    super::write_atomic(&args.output, &run.toml)?;
    write_samples(&samples, &run.provenance, "plan", &run.plan, &run.samples)?;
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&run)?),
        Format::Text => print!("{}", cuda_text(&run, &origin, &args.output, &samples)),
    }
    Ok(ExitCode::SUCCESS)
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

fn cuda_text(
    run: &twin_calibration::CudaRun,
    origin: &str,
    profile: &Path,
    samples: &Path,
) -> String {
    let f = &run.fits;
    let g = &f.gemm;
    let mut o = format!(
        "calibrated GPU 0 of {} ({}) in {:.1} s over {origin}; values with 95% confidence intervals\n\n",
        run.provenance.hostname,
        run.provenance.cuda_version.as_deref().unwrap_or("versions unknown"),
        run.elapsed_s
    );
    o.push_str(&gemm_lines(
        "cuBLAS bf16 GEMM curve",
        g,
        f.gemm_holdout_samples,
        f.gemm_holdout_max_relative_error,
    ));
    o.push_str("bandwidth + fixed cost per call\n");
    o.push_str(&ab_line("memory-bound", &f.memory_bound, "fixed"));
    o.push_str(&ab_line("host-to-device", &f.host_to_device, "fixed"));
    o.push_str(&ab_line("device-to-host", &f.device_to_host, "fixed"));
    o.push_str(&format!(
        "\nmemory efficiency {}   launch {}   outliers dropped {}\n",
        est(&f.memory_efficiency, ""),
        est(&f.launch_ns, "ns"),
        f.dropped_samples
    ));
    o.push_str(&closing_lines(&f.notes, &wrote(profile, samples)));
    o
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
    match twin_calibration::run::bundled_base(gpu) {
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
    let first_gpu = logs
        .iter()
        .find_map(|(o, t)| twin_calibration::nccl_tests::parse(t, o).ok()?.gpu);
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
