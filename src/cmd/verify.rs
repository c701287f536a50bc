//! `twin verify`: simulate a scenario with a hardware profile, run the same schedule for real
//! through the runtime, and print how far the prediction is from the measurement (step time,
//! bubble, exposed communication, peak memory per rank, and the op kinds with the largest
//! errors). The comparison itself is `twin_sim::verify`, shared with the TUI.

use super::run::{self as runcmd, BackendKind, Common};
use super::{load_scenario, write_atomic, Format};
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use twin_calibration::load;
use twin_runtime::launch::{self, RankMeasure, RunReport};
use twin_sim::verify::{
    compare, summarize_steps, CollectiveMeetingsBoth, CompareOptions, Comparison, CoreActivities,
    CriticalPaths, Side, StepSummary, Thresholds,
};

mod machine_check;
use machine_check::{gemm_check, MachineCheck};

/// Compare a prediction with a real run of the same schedule.
///
/// Simulates SCENARIO costed by --profile, runs the same schedule through the runtime
/// (warm-up steps, then measured steps, --repeat times), and compares: the measured step time
/// is the median of the steps after warm-up (the spread is printed); bubble, exposed
/// communication, peak memory, the op table and the measured trace come from the run whose
/// median step is the median of the runs', and from that run's median-length step (host; a
/// GPU run shows its last step). Errors are (measured - predicted) / measured: positive means
/// slower than predicted. The op table times each op by its own time: on a CPU core shared
/// by ranks, its span less what it waited for the core.
/// On the host backend it also times the scenario's most frequent GEMM shapes before each run
/// and after the last and compares them with the profile ("machine check", `machine_check` in
/// the JSON): a shared machine's speed drifts, and a step-time error of about the size the
/// check reports is that drift, not the schedule's model. Recalibrate when it is large. It
/// also prints the step-time error with each run scaled to the profile's speed by its check,
/// and how much of the cores other processes and the hypervisor took during each run.
/// Both steps' critical paths close the report: time in ops and time waiting between them, by
/// kind (`critical_path` in the JSON); the simulator starts an op as soon as it can, so the
/// measured waits are where a real run loses time the model does not have. On the host, an
/// "issue" wait is time before the runtime's stream thread noticed that the op's inputs were
/// ready (the trace's `issued_us`); the other kinds are waits after it noticed.
/// With a host profile it also shows how long each CPU core sat idle between its ranks' ops,
/// both ways, split by whether the same thread, another thread of the rank or another rank
/// ran next (`core_activity` in the JSON): on cores shared by ranks, the time the model is
/// short of. It also counts the collective calls that ran on a core at the same time as
/// another group's (`collective_meetings`): on shared cores such calls cost far more than
/// calls alone, and the prediction's timeline may have none.
/// Exits 1 when an error exceeds a --max-* threshold, naming it. The host ranks talk over TCP,
/// or over Unix sockets with TWIN_TRANSPORT=unix: calibrate with the same setting.
///
/// Examples:
///   twin verify scenarios/host/pp.toml --backend host --profile scenarios/profiles/host-example.toml
///   twin verify scenarios/host/tp-pp.toml --profile P --format json --trace-dir out/
///   twin verify scenarios/host/pp.toml --profile P --max-step-time-error 0.05 --max-bubble-error-points 2
///
/// With --faults it verifies recovery instead: the same fault (--inject) is injected in the
/// simulator's recovery model and in a real host run with checkpoints, and the recovery time
/// and lost work are compared (docs/faults.md):
///   twin verify scenarios/host/faults.toml --faults --inject "kill rank=3 at=step:7"
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Scenario TOML file (CPU-sized ones are in scenarios/host/).
    pub scenario: PathBuf,
    /// host: CPU processes over TCP; cuda: the local GPU (one-rank scenarios).
    #[arg(long, value_enum, default_value = "host")]
    pub backend: BackendKind,
    /// Hardware profile TOML that costs the prediction (docs/profiles.md). Not used by
    /// --faults, whose host parameters come from calibration runs (docs/faults.md).
    #[arg(long, value_name = "FILE", required_unless_present = "faults")]
    pub profile: Option<PathBuf>,
    /// Measured steps per run, after the warm-up [default: 10; with --faults, 12: the steps of
    /// each recovering run].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub steps: Option<u32>,
    /// Steps run first and left out of the measurement. A run's first steps are slower than
    /// its steady state (the allocator's heap, socket buffers and the transfer data are built
    /// then: on the host, steps 1-5 of pp.toml took 1.5-3x the later ones), and the simulator
    /// predicts the steady state.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub warmup: u32,
    /// Runs (each a fresh launch); the step median is taken over all of them [default: 1;
    /// with --faults, 9 fault runs and as many calibration runs].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: Option<u32>,
    /// Override a scenario key (TOML value syntax). Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Write DIR/predicted.trace.json, DIR/measured.trace.json (Chrome/Perfetto, as
    /// `twin simulate --trace`) and DIR/verify.json (the JSON output).
    #[arg(long, value_name = "DIR")]
    pub trace_dir: Option<PathBuf>,
    /// Fail (exit 1) when |step time error| exceeds this fraction (0.05 = 5%).
    #[arg(long, value_name = "F", value_parser = non_negative)]
    pub max_step_time_error: Option<f64>,
    /// Fail (exit 1) when the largest |peak memory error| over ranks exceeds this fraction.
    #[arg(long, value_name = "F", value_parser = non_negative)]
    pub max_peak_memory_error: Option<f64>,
    /// Fail (exit 1) when |bubble error| exceeds this many percentage points.
    #[arg(long, value_name = "P", value_parser = non_negative)]
    pub max_bubble_error_points: Option<f64>,
    /// Longest a rank waits for a peer before giving up (as `twin run`; at most 86400).
    #[arg(long, default_value_t = 60.0, value_parser = runcmd::parse_timeout_s)]
    pub timeout_s: f64,
    /// Verify recovery from a fault instead of a step (host backend).
    #[arg(long)]
    pub faults: bool,
    /// With --faults: the fault, "kill rank=R at=step:S[,op:I]".
    #[arg(long, default_value = "kill rank=3 at=step:7", requires = "faults")]
    pub inject: String,
    /// With --faults: checkpoint interval in steps (synchronous checkpoints).
    #[arg(long, default_value_t = 3, requires = "faults")]
    pub checkpoint_every: u64,
    /// With --faults: fail (exit 1) when |recovery time error| exceeds this fraction.
    #[arg(long, value_name = "F", default_value_t = 0.20, value_parser = non_negative, requires = "faults")]
    pub max_recovery_error: f64,
}

impl Args {
    /// Measured steps per run of a step verification.
    fn steps(&self) -> u32 {
        self.steps.unwrap_or(10)
    }
    /// Runs of a step verification.
    fn repeat(&self) -> u32 {
        self.repeat.unwrap_or(1)
    }
}

/// One real run: its measured report and merged measurement.
struct Measured {
    report: RunReport,
    merged: launch::Merged,
    /// The step whose op times the per-op comparison and the measured trace show (the
    /// median-length measured step), when the ranks kept them.
    shown_step: Option<usize>,
}

/// A threshold: a finite number >= 0.
fn non_negative(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("`{text}` is not a number >= 0")),
    }
}

fn thresholds(a: &Args) -> Thresholds {
    Thresholds {
        step_time_error: a.max_step_time_error,
        peak_memory_error: a.max_peak_memory_error,
        bubble_error_points: a.max_bubble_error_points,
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.faults {
        anyhow::ensure!(
            args.backend == BackendKind::Host,
            "verify --faults measures recoveries on the host backend only (its recovery model is calibrated by host runs), not --backend {}; run a CUDA recovery with `twin run --backend cuda --checkpoint-dir DIR --inject SPEC`",
            args.backend.name()
        );
        return super::verify_faults::run(super::verify_faults::VerifyFaultsArgs {
            scenario: args.scenario,
            overrides: args.overrides,
            steps: args.steps.unwrap_or(12),
            checkpoint_every: args.checkpoint_every,
            inject: args.inject,
            repeats: args.repeat.unwrap_or(9),
            tolerance: args.max_recovery_error,
            format: args.format,
        });
    }
    super::output::prepare_dir(args.trace_dir.as_deref(), "--trace-dir")?;
    let thresholds = thresholds(&args);
    let scenario = load_scenario(&args.scenario, &args.overrides)?;
    let profile_path = args
        .profile
        .as_deref()
        .context("--profile is required (a hardware profile, docs/profiles.md)")?;
    let profile = twin_sim::profile::load(profile_path)?;
    let prediction = twin_sim::predict_with(
        &scenario,
        &twin_sim::PredictOptions {
            trace: true,
            reproducible: true,
            ..Default::default()
        },
        Some(&profile),
    )
    .with_context(|| format!("simulating {}", args.scenario.display()))?;
    let staged = &prediction.staged;
    let total_steps = args.warmup + args.steps();
    let tmp_dir = launch::RunDir::create(launch::rundir::VERIFY_PREFIX).with_context(|| {
        format!(
            "cannot create verify's folder in {}",
            std::env::temp_dir().display()
        )
    })?;
    let tmp = tmp_dir.path();
    let common = Common {
        scenario: args.scenario.clone(),
        overrides: args.overrides.clone(),
        scale: vec![],
        steps: total_steps,
        format: Format::Json,
        trace: None,
        timeout_s: args.timeout_s,
        measures: Some(tmp.join("measures.json")),
    };
    let mut runs = Vec::with_capacity(args.repeat() as usize);
    let mut check = MachineCheck::default();
    let result = (|| {
        if args.backend == BackendKind::Host {
            runcmd::check_fits_host(&scenario, staged, &common)?;
        }
        for i in 0..args.repeat() {
            if args.format == Format::Text && args.repeat() > 1 {
                eprintln!("run {}/{}", i + 1, args.repeat());
            }
            if args.backend == BackendKind::Host {
                if i == 0 {
                    check.optimizer_before =
                        twin_calibration::check::state_check(&staged.schedule, &staged.cost);
                    check.transfer_before =
                        twin_calibration::check::transfer_check(&staged.schedule, &staged.cost);
                }
                check.before_run(gemm_check(staged));
            }
            let clock = twin_runtime::transport::store::Clock::new();
            let before = load::cpu_times(&clock);
            runs.push(measure_once(&args, &scenario, staged, &common)?);
            check.load.push(
                before
                    .zip(load::cpu_times(&clock))
                    .and_then(|(b, a)| load::load_between(&b, &a)),
            );
        }
        if args.backend == BackendKind::Host {
            check.after = gemm_check(staged);
            check.optimizer_after =
                twin_calibration::check::state_check(&staged.schedule, &staged.cost);
            check.transfer_after =
                twin_calibration::check::transfer_check(&staged.schedule, &staged.cost);
        }
        anyhow::Ok(())
    })();
    drop(tmp_dir);
    result?;
    let steps: Vec<Vec<f64>> = runs.iter().map(|r| r.report.step_times_s.clone()).collect();
    let summary = summarize_steps(&steps, args.warmup as usize);
    check.adjust(&steps, args.warmup as usize, prediction.report.step_time_s);
    let (steps_s, median_s, spread_s) = (&summary.steps_s, summary.median_s, summary.spread_s);
    let m = runs
        .get(summary.representative_run)
        .context("no run was measured")?;
    let empty = twin_sim::trace::Trace::default();
    let comparison = compare(
        &staged.schedule,
        Side {
            report: &prediction.report,
            trace: prediction.result.trace.as_ref().unwrap_or(&empty),
        },
        Side {
            report: &m.report.report,
            trace: m.merged.result.trace.as_ref().unwrap_or(&empty),
        },
        &CompareOptions {
            top_ops: 10,
            measured_step_time_s: Some(median_s),
        },
    );
    let violations = comparison.violations(&thresholds);
    let host_cores = profile
        .host_cores
        .as_ref()
        .map(|c| c.value.clamp(1.0, f64::from(u32::MAX)) as u32);
    let paths = CriticalPaths::new(
        &staged.plan,
        &staged.schedule,
        prediction.result.trace.as_ref().unwrap_or(&empty),
        m.merged.result.trace.as_ref().unwrap_or(&empty),
        host_cores,
    );
    // On a host profile, how each core spent the step between ops and which collectives met
    // another group's on a core, both ways.
    let cores = host_cores.map(|c| {
        let (predicted, measured) = (
            prediction.result.trace.as_ref().unwrap_or(&empty),
            m.merged.result.trace.as_ref().unwrap_or(&empty),
        );
        SharedCores {
            activity: CoreActivities::new(&staged.plan, predicted, measured, c),
            meetings: CollectiveMeetingsBoth::new(
                &staged.plan,
                &staged.schedule,
                predicted,
                measured,
                c,
            ),
        }
    });
    let json = to_json(
        &args,
        &profile.name,
        &prediction.report,
        &m.report,
        &comparison,
        steps_s,
        median_s,
        spread_s,
        &violations,
        &check,
        &paths,
        cores.as_ref(),
    )?;
    if let Some(dir) = &args.trace_dir {
        write_traces(dir, &prediction, m, &json)?;
    }
    match args.format {
        Format::Json => println!("{json}"),
        Format::Text => print!(
            "{}",
            to_text(
                &args,
                &profile.name,
                &comparison,
                &summary,
                &format!(
                    "{}{}{}",
                    shown_step_text(m.shown_step),
                    core_sharing_note(staged).unwrap_or_default(),
                    cores.as_ref().map(SharedCores::to_text).unwrap_or_default()
                ),
                &check,
                &paths,
            )
        ),
    }
    if violations.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        for v in &violations {
            eprintln!("verify failed: {v}");
        }
        Ok(ExitCode::from(1))
    }
}

/// One launch (host) or one GPU run (cuda), merged and reported as `twin run` does.
fn measure_once(
    args: &Args,
    scenario: &twin_sim::scenario::Scenario,
    staged: &twin_sim::Staged,
    common: &Common,
) -> anyhow::Result<Measured> {
    let start = Instant::now();
    let (mut all, backend) = match args.backend {
        BackendKind::Cuda if staged.plan.world == 1 => (
            vec![runcmd::measure_cuda(scenario, staged, common.steps)?],
            "cuda",
        ),
        backend => {
            let path = common.measures.as_deref().context("no measurements file")?;
            runcmd::launch_local(common, staged, None, backend)?;
            let text = std::fs::read_to_string(path).with_context(|| {
                format!("cannot read the run's measurements {}", path.display())
            })?;
            let all: Vec<RankMeasure> =
                serde_json::from_str(&text).context("the run's measurements are not valid")?;
            let _ = std::fs::remove_file(path);
            (all, backend.name())
        }
    };
    let shown_step = launch::measure::select_step(&mut all, args.warmup as usize);
    let merged = launch::merge(&staged.plan, &staged.schedule, &all);
    // The staged scenario: with the profile's peaks, so both sides' MFU divide by the same.
    let mut report = launch::report(
        &staged.scenario,
        &staged.plan,
        &staged.schedule,
        &all,
        &merged,
        start.elapsed().as_secs_f64(),
        Vec::new(),
    );
    report.backend = backend.into();
    Ok(Measured {
        report,
        merged,
        shown_step,
    })
}

/// What a host profile's shared cores add to the comparison (`core_activity` and
/// `collective_meetings` in the JSON).
struct SharedCores {
    activity: CoreActivities,
    meetings: CollectiveMeetingsBoth,
}

impl SharedCores {
    fn to_text(&self) -> String {
        format!("{}{}", self.activity.to_text(), self.meetings.to_text())
    }
}

#[allow(clippy::too_many_arguments)]
fn to_json(
    args: &Args,
    profile: &str,
    predicted: &twin_sim::report::Report,
    measured: &RunReport,
    c: &Comparison,
    steps_s: &[f64],
    median_s: f64,
    spread_s: [f64; 2],
    violations: &[String],
    check: &MachineCheck,
    paths: &CriticalPaths,
    cores: Option<&SharedCores>,
) -> anyhow::Result<String> {
    let mut v = serde_json::to_value(c)?;
    let obj = v
        .as_object_mut()
        .context("the comparison is not a JSON object")?;
    obj.insert("predicted".into(), serde_json::to_value(predicted)?);
    obj.insert("measured".into(), serde_json::to_value(measured)?);
    obj.insert(
        "scenario".into(),
        args.scenario.display().to_string().into(),
    );
    obj.insert("profile".into(), profile.into());
    obj.insert("warmup".into(), args.warmup.into());
    obj.insert("steps".into(), args.steps().into());
    obj.insert("repeat".into(), args.repeat().into());
    obj.insert(
        "measured_step_times_s".into(),
        serde_json::to_value(steps_s)?,
    );
    obj.insert("measured_step_time_median_s".into(), median_s.into());
    obj.insert(
        "measured_step_time_spread_s".into(),
        serde_json::to_value(spread_s)?,
    );
    obj.insert("violations".into(), serde_json::to_value(violations)?);
    obj.insert("machine_check".into(), serde_json::to_value(check)?);
    obj.insert("critical_path".into(), serde_json::to_value(paths)?);
    if let Some(c) = cores {
        obj.insert("core_activity".into(), serde_json::to_value(&c.activity)?);
        obj.insert(
            "collective_meetings".into(),
            serde_json::to_value(&c.meetings)?,
        );
    }
    Ok(serde_json::to_string_pretty(&v)?)
}

/// Which measured step the op table and the trace show, as a line of the text output.
fn shown_step_text(shown_step: Option<usize>) -> String {
    match shown_step {
        Some(k) => format!(
            "ops and trace: step {} of the run nearest the median (its median-length step)\n",
            k + 1
        ),
        None => "ops and trace: the last step of the run nearest the median\n".into(),
    }
}

/// A line for the text output when the profile has ranks share cores (a host profile with
/// fewer `host.cores` than ranks per node): what the prediction models of the sharing, and
/// what it leaves out, so that a larger error on such a scenario reads for what it is.
fn core_sharing_note(staged: &twin_sim::Staged) -> Option<String> {
    use twin_sim::cost::CostModel;
    let cores = staged.cost.shared_cores()?;
    let per_node = staged.plan.gpus_per_node.clamp(1, staged.plan.world.max(1));
    (per_node > cores).then(|| {
        format!(
            "ranks share cores: {per_node} ranks per node on {cores} cores; the prediction \
             shares each core by thread priority and lets compute ops take turns, but has none \
             of the OS scheduler's run-queue delays (time slices, wake-up order), which the \
             measured critical path below shows as issue waits (a thread that noticed its \
             op's inputs late) and start, stream and dependency waits (a wait for another \
             rank's compute on the core is a turn wait)\n"
        )
    })
}

fn to_text(
    args: &Args,
    profile: &str,
    c: &Comparison,
    steps: &StepSummary,
    shown: &str,
    check: &MachineCheck,
    paths: &CriticalPaths,
) -> String {
    format!(
        "verify {} with profile '{profile}' on the {} backend\n\
         measured step = median of {} steps after {} warm-up (x{} runs): {:.3} ms, spread {:.3}-{:.3} ms\n\
         {shown}{}errors are (measured - predicted) / measured\n{}{}",
        args.scenario.display(),
        args.backend.name(),
        steps.steps_s.len(),
        args.warmup,
        args.repeat(),
        steps.median_s * 1e3,
        steps.spread_s[0] * 1e3,
        steps.spread_s[1] * 1e3,
        check.to_text(),
        c.to_text(),
        paths.to_text()
    )
}

fn write_traces(
    dir: &Path,
    prediction: &twin_sim::Prediction,
    m: &Measured,
    json: &str,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let st = &prediction.staged;
    if let Some(t) = prediction.trace_json() {
        write_atomic(&dir.join("predicted.trace.json"), &t)?;
    }
    if let Some(t) = &m.merged.result.trace {
        write_atomic(
            &dir.join("measured.trace.json"),
            &t.to_chrome_json(&st.plan, &st.schedule),
        )?;
    }
    write_atomic(&dir.join("verify.json"), json)
}
