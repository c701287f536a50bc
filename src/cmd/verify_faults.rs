//! `twin verify --faults`: injects one kill into a real host
//! run and compares its measured recovery (detection + restart + reload) and lost work with
//! what the simulator's recovery model (`twin_sim::faults::Model`) predicts for the same fault.
//! The model's host parameters never come from the runs being verified: detection is the
//! launcher's documented poll interval, and restart and reload are calibrated by separate
//! short runs with another fault (a different rank and step), medians over repeats.

use super::{load_scenario, Format};
use anyhow::Context;
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use twin_runtime::launch::{At, Injection};
use twin_sim::faults::{JobFacts, Model};
use twin_sim::scenario::{CheckpointInterval, CheckpointMode, FaultConfig, RestartPolicy};

/// The launcher polls its children this often: a death is noticed within one interval.
pub const LAUNCHER_POLL_S: f64 = 0.005;

/// What `twin verify --faults` compares (its arguments there). Calibrates restart (teardown, spawn, bootstrap) and checkpoint reload on this machine with
/// separate short runs that recover from another fault, predicts the recovery with the
/// simulator's recovery model, then measures it in `repeats` runs (`--repeat`) with the injected kill
/// (medians on both sides: the host is often shared).
#[derive(Clone, Debug)]
pub struct VerifyFaultsArgs {
    /// Scenario TOML (a CPU-sized one, e.g. scenarios/host/faults.toml).
    pub scenario: PathBuf,
    /// Override a scenario key (TOML value syntax). Repeatable.
    pub overrides: Vec<String>,
    /// Steps of each run.
    pub steps: u32,
    /// Checkpoint interval in steps (synchronous checkpoints).
    pub checkpoint_every: u64,
    /// The fault: a step kill, "kill rank=R at=step:S[,op:I]".
    pub inject: String,
    /// Fault runs (and calibration runs) to take the median of.
    pub repeats: u32,
    /// Largest accepted relative error of the recovery time.
    pub tolerance: f64,
    pub format: Format,
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

fn twin_json(args: &[String]) -> anyhow::Result<Value> {
    let exe = std::env::current_exe().context("cannot find the twin executable")?;
    let o = std::process::Command::new(exe)
        .args(args)
        .output()
        .context("cannot start twin run")?;
    anyhow::ensure!(
        o.status.success(),
        "twin {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr).trim()
    );
    serde_json::from_slice(&o.stdout).context("twin run printed no JSON report")
}

fn num(v: &Value, path: &[&str]) -> anyhow::Result<f64> {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64()
        .with_context(|| format!("the run report has no number at {}", path.join(".")))
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v.get(n / 2).copied().unwrap_or(0.0),
        n => {
            (v.get(n / 2 - 1).copied().unwrap_or(0.0) + v.get(n / 2).copied().unwrap_or(0.0)) / 2.0
        }
    }
}

fn fresh_dir(base: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let d = base.join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).with_context(|| format!("cannot create {}", d.display()))?;
    Ok(d)
}

pub fn run(args: VerifyFaultsArgs) -> anyhow::Result<ExitCode> {
    let inj = Injection::parse(&args.inject)?;
    let At::Step { step: at_step, op } = inj.at else {
        anyhow::bail!("--inject: verify --faults needs a step kill (at=step:S[,op:I])");
    };
    let scenario = load_scenario(&args.scenario, &args.overrides)?;
    let staged = twin_sim::Staged::new(&scenario)?;
    let ops = staged
        .schedule
        .get_program(inj.rank)
        .map_or(0, |p| p.ops.len() as u32);
    inj.check(
        &args.inject,
        staged.plan.world,
        u64::from(args.steps),
        &|_| ops,
    )?;
    anyhow::ensure!(
        args.steps >= 3,
        "--steps: at least 3 (the calibration runs kill at step 2)"
    );
    // The calibration fault: the same rank at step 2 (right after a checkpoint), in runs of
    // its own.
    let cal_rank = inj.rank;
    let base =
        twin_runtime::launch::RunDir::create(twin_runtime::launch::rundir::VERIFY_FAULTS_PREFIX)
            .with_context(|| {
                format!(
                    "cannot create verify's folder in {}",
                    std::env::temp_dir().display()
                )
            })?;
    let out = compare(
        &args,
        &scenario,
        &staged,
        inj.rank,
        at_step,
        op,
        ops,
        cal_rank,
        base.path(),
    );
    drop(base);
    let c = out?;
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&c)?),
        Format::Text => print!("{}", to_text(&c)),
    }
    Ok(if c.pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[allow(clippy::too_many_arguments)]
fn compare(
    args: &VerifyFaultsArgs,
    scenario: &twin_sim::scenario::Scenario,
    staged: &twin_sim::Staged,
    rank: u32,
    at_step: u64,
    op: u32,
    ops: u32,
    cal_rank: u32,
    base: &Path,
) -> anyhow::Result<FaultComparison> {
    let common = |steps: u32| -> Vec<String> {
        let mut a = vec![
            "run".to_string(),
            args.scenario.display().to_string(),
            "--steps".into(),
            steps.to_string(),
            "--format".into(),
            "json".into(),
        ];
        for o in &args.overrides {
            a.extend(["--set".into(), o.clone()]);
        }
        a
    };
    // Calibration runs (short, recovering from another fault) and the measured fault runs,
    // interleaved so that a change in the machine's load affects both alike.
    let k = args.checkpoint_every.max(1);
    let (mut restart, mut reload, mut step) = (Vec::new(), Vec::new(), Vec::new());
    let mut runs = Vec::new();
    for i in 0..args.repeats {
        let d = fresh_dir(base, &format!("calibration-{i}"))?;
        let mut a = common(3);
        a.extend([
            "--checkpoint-dir".into(),
            d.display().to_string(),
            "--checkpoint-every".into(),
            "1".into(),
            "--inject".into(),
            format!("kill rank={cal_rank} at=step:2"),
        ]);
        let v = twin_json(&a)?;
        let r = &v["recoveries"][0];
        restart.push(num(r, &["restart_s"])?);
        reload.push(num(r, &["reload_s"])?);
        if let Some(ts) = v["step_times_s"].as_array() {
            step.extend(ts.iter().filter_map(Value::as_f64));
        }
        let d = fresh_dir(base, &format!("fault-{i}"))?;
        let mut a = common(args.steps);
        a.extend([
            "--checkpoint-dir".into(),
            d.display().to_string(),
            "--checkpoint-every".into(),
            k.to_string(),
            "--inject".into(),
            args.inject.clone(),
        ]);
        let v = twin_json(&a)?;
        let r = &v["recoveries"][0];
        runs.push(Side {
            detection_s: num(r, &["detection_s"])?,
            restart_s: num(r, &["restart_s"])?,
            reload_s: num(r, &["reload_s"])?,
            recovery_s: 0.0,
            steps_lost: num(r, &["steps_lost"])?,
            lost_s: num(r, &["lost_s"])?,
        });
    }
    let step_time_s = median(&step);
    // The simulator's recovery model with the host parameters.
    let facts = JobFacts::from_scenario(
        scenario,
        &staged.plan,
        twin_sim::scenario::seconds_to_ns(step_time_s),
        0.0,
    );
    let reload_s = median(&reload).max(1e-6);
    let restart_s = median(&restart);
    let cfg = FaultConfig {
        detection_timeout_ns: twin_sim::scenario::seconds_to_ns(LAUNCHER_POLL_S),
        restart: RestartPolicy::HotSpare,
        spare_swap_ns: 0,
        process_restart_ns: twin_sim::scenario::seconds_to_ns(restart_s),
        comm_init_ns: 0,
        checkpoint_interval: CheckpointInterval::Steps(args.checkpoint_every),
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
        pass: recovery_error.abs() <= args.tolerance
            && (measured.steps_lost - predicted.steps_lost).abs() < 1e-9,
        predicted,
        measured,
        recovery_error,
        tolerance: args.tolerance,
    })
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
