//! Verification of a step: simulate a scenario with a hardware profile, run the same schedule
//! for real through the runtime, and say how far the prediction is from the measurement
//! (step time, bubble, exposed communication, peak memory per rank, and the op kinds with the
//! largest errors). The comparison itself is `twin_sim::verify`, shared with the TUI.

use super::machine_check::{gemm_check, MachineCheck};
use super::VerifyError;
use std::path::{Path, PathBuf};
use std::time::Instant;
use twin_runtime::job::{self, fit, Backend, Format, RankDemand, RunSpec, Work};
use twin_runtime::launch::{self, RankMeasure, RunReport};
use twin_sim::scenario::Scenario;
use twin_sim::verify::{
    compare, summarize_steps, CollectiveMeetingsBoth, CompareOptions, Comparison, CoreActivities,
    CriticalPaths, Side, StepSummary, Thresholds,
};

/// What a step verification compares, resolved from `twin verify step`'s arguments.
#[derive(Clone, Debug)]
pub struct StepSpec {
    /// The scenario file as the user named it (the workers read it again).
    pub scenario: PathBuf,
    /// `--set KEY=VALUE` overrides.
    pub overrides: Vec<String>,
    pub backend: Backend,
    /// Steps run first and left out of the measurement.
    pub warmup: u32,
    /// Measured steps per run, after the warm-up.
    pub steps: u32,
    /// Runs (each a fresh launch); the step median is taken over all of them.
    pub repeat: u32,
    /// Longest a rank waits for a peer (seconds).
    pub timeout_s: f64,
    pub format: Format,
    /// Where to write the predicted and measured traces and the JSON output.
    pub trace_dir: Option<PathBuf>,
    pub thresholds: Thresholds,
}

/// A step verification made: its output in the spec's format, and the thresholds it broke
/// (none: it passed).
pub struct StepOutcome {
    pub output: String,
    pub violations: Vec<String>,
    /// The comparison the output shows (what `--report` draws).
    pub comparison: Comparison,
}

/// One real run: its measured report and merged measurement.
struct Measured {
    report: RunReport,
    merged: launch::Merged,
    /// The step whose op times the per-op comparison and the measured trace show (the
    /// median-length measured step), when the ranks kept them.
    shown_step: Option<usize>,
}

/// Verify `scenario` (loaded from `spec.scenario` with its overrides) against a real run,
/// its prediction costed by `profile`; `on_run(i, n)` is called before run i of n.
pub fn verify_step(
    spec: &StepSpec,
    scenario: &Scenario,
    profile: &twin_sim::profile::Profile,
    on_run: &mut dyn FnMut(u32, u32),
) -> Result<StepOutcome, VerifyError> {
    let prediction = twin_sim::predict_with(
        scenario,
        &twin_sim::PredictOptions {
            trace: true,
            reproducible: true,
            ..Default::default()
        },
        Some(profile),
    )
    .map_err(|source| VerifyError::Simulate {
        scenario: spec.scenario.display().to_string(),
        source,
    })?;
    let staged = &prediction.staged;
    // What the runtime's fit checks read (host: memory; cuda: the device's).
    let demand = match spec.backend {
        Backend::Host | Backend::Cuda => super::demand(scenario)?,
        Backend::DummyCuda => Vec::new(),
    };
    let demand = demand.as_slice();
    let tmp_dir =
        launch::RunDir::create(launch::rundir::VERIFY_PREFIX).map_err(VerifyError::io(format!(
            "cannot create verify's folder in {}",
            std::env::temp_dir().display()
        )))?;
    let run = RunSpec {
        scenario: spec.scenario.clone(),
        overrides: spec.overrides.clone(),
        scale: vec![],
        steps: spec.warmup + spec.steps,
        format: Format::Json,
        trace: None,
        timeout_s: spec.timeout_s,
        measures: Some(tmp_dir.path().join("measures.json")),
    };
    let mut runs = Vec::with_capacity(spec.repeat as usize);
    let mut check = MachineCheck::default();
    let host = spec.backend == Backend::Host;
    let result = (|| {
        if host {
            fit::check_local_ranks(staged.plan.world)?;
            if let Some(n) = fit::check_host_memory(demand, run.steps)? {
                eprintln!("notice: {n}");
            }
        }
        for i in 0..spec.repeat {
            on_run(i, spec.repeat);
            if host {
                if i == 0 {
                    check.optimizer_before =
                        crate::check::state_check(&staged.schedule, &staged.cost);
                    check.transfer_before =
                        crate::check::transfer_check(&staged.schedule, &staged.cost);
                }
                check.before_run(gemm_check(staged));
            }
            let clock = twin_runtime::transport::store::Clock::new();
            let before = crate::load::cpu_times(&clock);
            runs.push(measure_once(spec, scenario, staged, demand, &run)?);
            check.load.push(
                before
                    .zip(crate::load::cpu_times(&clock))
                    .and_then(|(b, a)| crate::load::load_between(&b, &a)),
            );
        }
        if host {
            check.after = gemm_check(staged);
            check.optimizer_after = crate::check::state_check(&staged.schedule, &staged.cost);
            check.transfer_after = crate::check::transfer_check(&staged.schedule, &staged.cost);
        }
        Ok::<(), VerifyError>(())
    })();
    drop(tmp_dir);
    result?;
    let steps: Vec<Vec<f64>> = runs.iter().map(|r| r.report.step_times_s.clone()).collect();
    let summary = summarize_steps(&steps, spec.warmup as usize);
    check.adjust(&steps, spec.warmup as usize, prediction.report.step_time_s);
    let (steps_s, median_s, spread_s) = (&summary.steps_s, summary.median_s, summary.spread_s);
    let m = runs
        .get(summary.representative_run)
        .ok_or_else(|| VerifyError::Refused("no run was measured".into()))?;
    let empty = twin_sim::trace::Trace::default();
    let predicted_trace = prediction.result.trace.as_ref().unwrap_or(&empty);
    let measured_trace = m.merged.result.trace.as_ref().unwrap_or(&empty);
    let comparison = compare(
        &staged.schedule,
        Side {
            report: &prediction.report,
            trace: predicted_trace,
        },
        Side {
            report: &m.report.report,
            trace: measured_trace,
        },
        &CompareOptions {
            top_ops: 10,
            measured_step_time_s: Some(median_s),
        },
    );
    let violations = comparison.violations(&spec.thresholds);
    let host_cores = profile
        .host_cores
        .as_ref()
        .map(|c| c.value.clamp(1.0, f64::from(u32::MAX)) as u32);
    let paths = CriticalPaths::new(
        &staged.plan,
        &staged.schedule,
        predicted_trace,
        measured_trace,
        host_cores,
    );
    // On a host profile, how each core spent the step between ops and which collectives met
    // another group's on a core, both ways.
    let cores = host_cores.map(|c| SharedCores {
        activity: CoreActivities::new(&staged.plan, predicted_trace, measured_trace, c),
        meetings: CollectiveMeetingsBoth::new(
            &staged.plan,
            &staged.schedule,
            predicted_trace,
            measured_trace,
            c,
        ),
    });
    let json = to_json(
        spec,
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
    )
    .map_err(VerifyError::json("cannot write the comparison as JSON"))?;
    if let Some(dir) = &spec.trace_dir {
        write_traces(dir, &prediction, m, &json)?;
    }
    let output = match spec.format {
        Format::Json => format!("{json}\n"),
        Format::Text => to_text(
            spec,
            &profile.name,
            &comparison,
            &summary,
            &format!(
                "{}{}{}{}",
                shown_step_text(m.shown_step),
                core_sharing_note(staged).unwrap_or_default(),
                cores.as_ref().map(SharedCores::to_text).unwrap_or_default(),
                backend_notes_text(&m.report.report.notes)
            ),
            &check,
            &paths,
        ),
    };
    Ok(StepOutcome {
        output,
        violations,
        comparison,
    })
}

/// One launch (host) or one GPU run (cuda), merged and reported as `twin run` does.
fn measure_once(
    spec: &StepSpec,
    scenario: &Scenario,
    staged: &twin_sim::Staged,
    demand: &[RankDemand],
    run: &RunSpec,
) -> Result<Measured, VerifyError> {
    let start = Instant::now();
    let work = Work {
        scenario,
        plan: &staged.plan,
        schedule: &staged.schedule,
    };
    let (mut all, backend) = match spec.backend {
        Backend::Cuda if staged.plan.world == 1 => (
            vec![job::measure::measure_cuda(&work, demand, run.steps)?],
            "cuda",
        ),
        backend => {
            let path = run
                .measures
                .as_deref()
                .ok_or_else(|| VerifyError::Refused("no measurements file".into()))?;
            job::launch::launch_local(run, &work, None, backend)?;
            let text = std::fs::read_to_string(path).map_err(VerifyError::io(format!(
                "cannot read the run's measurements {}",
                path.display()
            )))?;
            let all: Vec<RankMeasure> = serde_json::from_str(&text)
                .map_err(VerifyError::json("the run's measurements are not valid"))?;
            let _ = std::fs::remove_file(path);
            (all, backend.name())
        }
    };
    let shown_step = launch::measure::select_step(&mut all, spec.warmup as usize);
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
    spec: &StepSpec,
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
) -> Result<String, serde_json::Error> {
    let mut v = serde_json::to_value(c)?;
    let mut extra = serde_json::Map::new();
    let obj = v.as_object_mut().unwrap_or(&mut extra);
    obj.insert("layout".into(), serde_json::to_value(predicted.layout)?);
    obj.insert("predicted".into(), serde_json::to_value(predicted)?);
    obj.insert("measured".into(), serde_json::to_value(measured)?);
    obj.insert(
        "scenario".into(),
        spec.scenario.display().to_string().into(),
    );
    obj.insert("profile".into(), profile.into());
    obj.insert("warmup".into(), spec.warmup.into());
    obj.insert("steps".into(), spec.steps.into());
    obj.insert("repeat".into(), spec.repeat.into());
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
    twin_sim::json::document("verify-step", &v)
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
    spec: &StepSpec,
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
        spec.scenario.display(),
        spec.backend.name(),
        steps.steps_s.len(),
        spec.warmup,
        spec.repeat,
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
) -> Result<(), VerifyError> {
    std::fs::create_dir_all(dir)
        .map_err(VerifyError::io(format!("cannot create {}", dir.display())))?;
    let st = &prediction.staged;
    if let Some(t) = prediction.trace_json() {
        job::write_atomic(&dir.join("predicted.trace.json"), &t)?;
    }
    if let Some(t) = &m.merged.result.trace {
        job::write_atomic(
            &dir.join("measured.trace.json"),
            &t.to_chrome_json(&st.plan, &st.schedule),
        )?;
    }
    Ok(job::write_atomic(&dir.join("verify.json"), json)?)
}

/// The backend's notes on what it ran (`measured: ...`, a fallback such as FP8 GEMMs run with
/// per-tensor scales), one `note` line each: a measurement that ran otherwise than the
/// scenario says must say so beside its numbers.
fn backend_notes_text(notes: &[String]) -> String {
    notes
        .iter()
        .filter(|n| n.starts_with(launch::BACKEND_NOTE_PREFIX))
        .map(|n| format!("note: {n}\n"))
        .collect()
}
