//! Verification of a recovery: inject one kill into real host runs and compare the measured
//! recovery (detection + restart + reload) and lost work with what the simulator's recovery
//! model (`twin_sim::faults::Model`) predicts for the same fault. The model's host parameters
//! never come from the runs being verified: detection is the launcher's documented poll
//! interval, and restart and reload are calibrated by separate short runs with another fault
//! (the same rank at step 2), medians over repeats. Every run is a `twin_runtime::job`
//! launch made in this process; its recoveries are read as typed values.

use super::{median, VerifyError};
use serde::Serialize;
use std::path::{Path, PathBuf};
use twin_runtime::job::{self, inject::InjectSpec, Backend, Format, InjectArg, RunSpec, Work};
use twin_runtime::launch::{At, Injection, Recovery};
use twin_sim::faults::{JobFacts, Model};
use twin_sim::scenario::{
    seconds_to_ns, CheckpointInterval, CheckpointMode, FaultConfig, RestartPolicy, Scenario,
};

/// The launcher polls its children this often: a death is noticed within one interval.
pub const LAUNCHER_POLL_S: f64 = 0.005;

/// What a recovery verification compares, resolved from `twin verify recovery`'s arguments.
#[derive(Clone, Debug)]
pub struct RecoverySpec {
    /// The scenario file as the user named it (the workers read it again).
    pub scenario: PathBuf,
    /// `--set KEY=VALUE` overrides.
    pub overrides: Vec<String>,
    /// Steps of each fault run.
    pub steps: u32,
    /// Checkpoint interval in steps (synchronous checkpoints).
    pub checkpoint_every: u64,
    /// The fault: a step kill, "kill rank=R at=step:S[,op:I]".
    pub inject: String,
    /// Fault runs (and calibration runs) to take the median of.
    pub repeats: u32,
    /// Longest a rank waits for a peer (seconds).
    pub timeout_s: f64,
    /// Largest accepted relative error of the recovery time.
    pub tolerance: f64,
}

/// Predicted and measured recovery of one fault.
#[derive(Debug, Serialize)]
pub struct FaultComparison {
    pub inject: String,
    pub at_step: u64,
    /// Host parameters of the recovery model and where they came from.
    pub detection_timeout_s: f64,
    pub process_restart_s: f64,
    pub storage_read_bytes_per_s: f64,
    pub checkpoint_bytes: u64,
    pub step_time_s: f64,
    pub predicted: Side,
    pub measured: Side,
    /// (measured - predicted) / measured, of the recovery time.
    pub recovery_error: f64,
    pub tolerance: f64,
    pub pass: bool,
}

#[derive(Debug, Default, Serialize)]
pub struct Side {
    pub detection_s: f64,
    pub restart_s: f64,
    pub reload_s: f64,
    /// detection + restart + reload.
    pub recovery_s: f64,
    pub steps_lost: f64,
    pub lost_s: f64,
}

/// One recovering host run's first recovery and its step times.
struct RecoveringRun {
    recovery: Recovery,
    step_times_s: Vec<f64>,
}

/// The part of rank 0's JSON report a recovery verification reads.
#[derive(serde::Deserialize)]
struct StepTimes {
    step_times_s: Vec<f64>,
}

/// Run `work` for `steps` steps with checkpoints every `every` steps in `dir` and the kill
/// `inject`, and read its first recovery.
fn recovering_run(
    spec: &RecoverySpec,
    work: &Work<'_>,
    steps: u32,
    every: u64,
    dir: PathBuf,
    inject: &str,
) -> Result<RecoveringRun, VerifyError> {
    let run = RunSpec {
        scenario: spec.scenario.clone(),
        overrides: spec.overrides.clone(),
        scale: vec![],
        steps,
        format: Format::Json,
        trace: None,
        timeout_s: spec.timeout_s,
        measures: None,
    };
    let checkpoint = job::CheckpointSpec {
        dir: Some(dir),
        every_steps: every,
        asynchronous: false,
        resume: false,
    };
    let kill = InjectArg::parse(inject).map_err(VerifyError::Refused)?;
    let faults = InjectSpec {
        inject: vec![kill],
        seed: 1,
        count: 1,
        max_restarts: 10,
    };
    let out = job::recover::run(&run, work, &checkpoint, &faults, None, Backend::Host)?;
    let recovery = out.recovered.recoveries.first().cloned().ok_or_else(|| {
        VerifyError::Refused(format!(
            "the run with --inject {inject:?} recovered from nothing"
        ))
    })?;
    let report: StepTimes = serde_json::from_str(&out.rank0)
        .map_err(VerifyError::json("rank 0 printed no JSON report"))?;
    Ok(RecoveringRun {
        recovery,
        step_times_s: report.step_times_s,
    })
}

/// A measured time of a recovery, or the error that names it.
fn measured(v: Option<f64>, name: &str) -> Result<f64, VerifyError> {
    v.ok_or_else(|| VerifyError::Refused(format!("the run report has no number at {name}")))
}

fn fresh_dir(base: &Path, name: &str) -> Result<PathBuf, VerifyError> {
    let d = base.join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d)
        .map_err(VerifyError::io(format!("cannot create {}", d.display())))?;
    Ok(d)
}

/// Verify the recovery from `spec.inject` on `scenario` (loaded from `spec.scenario` with its
/// overrides), on the host backend; `on_run(i, n)` is called before pair i of n (a calibration
/// run and a fault run).
pub fn verify_recovery(
    spec: &RecoverySpec,
    scenario: &Scenario,
    on_run: &mut dyn FnMut(u32, u32),
) -> Result<FaultComparison, VerifyError> {
    let inj = Injection::parse(&spec.inject)?;
    let At::Step { step: at_step, op } = inj.at else {
        return Err(VerifyError::Refused(
            "--inject: verify recovery needs a step kill (at=step:S[,op:I])".into(),
        ));
    };
    let staged = twin_sim::Staged::new(scenario)?;
    let work = Work {
        scenario,
        plan: &staged.plan,
        schedule: &staged.schedule,
    };
    // As `twin run` refuses a host run this machine cannot hold (its notice of a slow run is
    // left out: every run here is short).
    job::fit::check_local_ranks(staged.plan.world)?;
    job::fit::check_host_memory(&super::demand(scenario)?, spec.steps)?;
    let ops = work.ops_of(inj.rank);
    inj.check(
        &spec.inject,
        staged.plan.world,
        u64::from(spec.steps),
        &|_| ops,
    )?;
    if spec.steps < 3 {
        return Err(VerifyError::Refused(
            "--steps: at least 3 (the calibration runs kill at step 2)".into(),
        ));
    }
    let base =
        twin_runtime::launch::RunDir::create(twin_runtime::launch::rundir::VERIFY_FAULTS_PREFIX)
            .map_err(VerifyError::io(format!(
                "cannot create verify's folder in {}",
                std::env::temp_dir().display()
            )))?;
    let out = compare(spec, &work, inj.rank, at_step, op, ops, base.path(), on_run);
    drop(base);
    out
}

#[allow(clippy::too_many_arguments)]
fn compare(
    spec: &RecoverySpec,
    work: &Work<'_>,
    rank: u32,
    at_step: u64,
    op: u32,
    ops: u32,
    base: &Path,
    on_run: &mut dyn FnMut(u32, u32),
) -> Result<FaultComparison, VerifyError> {
    // Calibration runs (short, recovering from the same rank's kill at step 2, right after a
    // checkpoint) and the measured fault runs, interleaved so that a change in the machine's
    // load affects both alike.
    let k = spec.checkpoint_every.max(1);
    let calibration_kill = format!("kill rank={rank} at=step:2");
    let (mut restart, mut reload, mut step) = (Vec::new(), Vec::new(), Vec::new());
    let mut runs = Vec::new();
    for i in 0..spec.repeats {
        on_run(i, spec.repeats);
        let d = fresh_dir(base, &format!("calibration-{i}"))?;
        let c = recovering_run(spec, work, 3, 1, d, &calibration_kill)?;
        restart.push(measured(c.recovery.restart_s, "restart_s")?);
        reload.push(measured(c.recovery.reload_s, "reload_s")?);
        step.extend(c.step_times_s);
        let d = fresh_dir(base, &format!("fault-{i}"))?;
        let r = recovering_run(spec, work, spec.steps, k, d, &spec.inject)?.recovery;
        runs.push(Side {
            detection_s: r.detection_s,
            restart_s: measured(r.restart_s, "restart_s")?,
            reload_s: measured(r.reload_s, "reload_s")?,
            recovery_s: 0.0,
            steps_lost: measured(r.steps_lost.map(|s| s as f64), "steps_lost")?,
            lost_s: measured(r.lost_s, "lost_s")?,
        });
    }
    let step_time_s = median(&step);
    // The simulator's recovery model with the host parameters.
    let facts = JobFacts::from_scenario(work.scenario, work.plan, seconds_to_ns(step_time_s), 0.0);
    let reload_s = median(&reload).max(1e-6);
    let restart_s = median(&restart);
    let cfg = FaultConfig {
        detection_timeout_ns: seconds_to_ns(LAUNCHER_POLL_S),
        restart: RestartPolicy::HotSpare,
        spare_swap_ns: 0,
        process_restart_ns: seconds_to_ns(restart_s),
        comm_init_ns: 0,
        checkpoint_interval: CheckpointInterval::Steps(spec.checkpoint_every),
        checkpoint_mode: CheckpointMode::Sync,
        storage_read_bytes_per_s: facts.checkpoint_bytes as f64 / reload_s,
        ..FaultConfig::default()
    };
    let model = Model::new(&cfg, &facts);
    let s = |ns: u64| ns as f64 * 1e-9;
    let steps_lost = at_step % k;
    let partial = f64::from(op) / f64::from(ops.max(1));
    let recovery = s(model.detection_ns) + s(model.restart_ns) + s(model.reload_ns);
    let predicted = Side {
        detection_s: s(model.detection_ns),
        restart_s: s(model.restart_ns),
        reload_s: s(model.reload_ns),
        recovery_s: recovery,
        steps_lost: steps_lost as f64,
        lost_s: recovery + (steps_lost as f64 + partial) * s(model.step_time_ns),
    };
    let mid = |f: fn(&Side) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
    let measured = Side {
        detection_s: mid(|r| r.detection_s),
        restart_s: mid(|r| r.restart_s),
        reload_s: mid(|r| r.reload_s),
        recovery_s: mid(|r| r.detection_s + r.restart_s + r.reload_s),
        steps_lost: mid(|r| r.steps_lost),
        lost_s: mid(|r| r.lost_s),
    };
    let recovery_error =
        (measured.recovery_s - predicted.recovery_s) / measured.recovery_s.max(1e-9);
    Ok(FaultComparison {
        inject: Injection {
            rank,
            at: At::Step { step: at_step, op },
        }
        .describe(),
        at_step,
        detection_timeout_s: LAUNCHER_POLL_S,
        process_restart_s: restart_s,
        storage_read_bytes_per_s: cfg.storage_read_bytes_per_s,
        checkpoint_bytes: facts.checkpoint_bytes,
        step_time_s,
        pass: recovery_error.abs() <= spec.tolerance
            && (measured.steps_lost - predicted.steps_lost).abs() < 1e-9,
        predicted,
        measured,
        recovery_error,
        tolerance: spec.tolerance,
    })
}

impl FaultComparison {
    /// The comparison as `twin verify recovery` prints it.
    pub fn to_text(&self) -> String {
        to_text(self)
    }
}

fn to_text(c: &FaultComparison) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(o, "fault           {} (in step {})", c.inject, c.at_step);
    let _ = writeln!(
        o,
        "host model      detection {:.3} s (launcher poll), restart {:.3} s and reload at {:.1} MB/s of {:.2} MB (calibrated by other faults' recoveries), step {:.3} s",
        c.detection_timeout_s,
        c.process_restart_s,
        c.storage_read_bytes_per_s / 1e6,
        c.checkpoint_bytes as f64 / 1e6,
        c.step_time_s
    );
    let _ = writeln!(
        o,
        "                detection   restart    reload  recovery  steps lost    lost"
    );
    for (name, s) in [("predicted", &c.predicted), ("measured", &c.measured)] {
        let _ = writeln!(
            o,
            "{name:<15} {:>7.3} s {:>7.3} s {:>7.3} s {:>7.3} s {:>11.1} {:>7.3} s",
            s.detection_s, s.restart_s, s.reload_s, s.recovery_s, s.steps_lost, s.lost_s
        );
    }
    let _ = writeln!(
        o,
        "recovery error  {:+.1}% (tolerance {:.0}%): {}",
        c.recovery_error * 100.0,
        c.tolerance * 100.0,
        if c.pass { "PASS" } else { "FAIL" }
    );
    o
}
