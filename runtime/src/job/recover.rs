//! A run with checkpoints and/or injected faults, on any backend: the launcher's workers keep
//! checkpoints, the launcher restarts them after a failure, and the report says what each
//! recovery cost.

use super::inject::{injections, InjectSpec};
use super::launch::{options, rank0_stdout};
use super::{Backend, CheckpointSpec, Format, JobError, RunSpec, Work};
use crate::launch::{self, Recovered};

/// A recovering run that finished: what it took, what rank 0 reported, and what the report
/// must say loudly.
pub struct RecoveredRun {
    pub recovered: Recovered,
    /// Rank 0's report (in the run's format), without the recoveries.
    pub rank0: String,
    /// A `--resume` that restored nothing, kills that never fired.
    pub warnings: Vec<String>,
}

impl RecoveredRun {
    /// The run's report with its recoveries, checkpoints, startup and warnings, in `format`.
    pub fn render(&self, format: Format) -> Result<String, JobError> {
        let out = &self.recovered;
        match format {
            Format::Json => {
                let mut v: serde_json::Value = serde_json::from_str(&self.rank0)
                    .map_err(JobError::json("rank 0 printed no JSON report"))?;
                let json = |e| JobError::json("cannot write the report as JSON")(e);
                if let Some(m) = v.as_object_mut() {
                    // Written again first, below.
                    m.remove("schema");
                    m.insert(
                        "recoveries".into(),
                        serde_json::to_value(&out.recoveries).map_err(json)?,
                    );
                    m.insert(
                        "checkpoints".into(),
                        serde_json::to_value(&out.checkpoints).map_err(json)?,
                    );
                    m.insert(
                        "startup".into(),
                        serde_json::to_value(&out.startup).map_err(json)?,
                    );
                    m.insert(
                        "warnings".into(),
                        serde_json::to_value(&self.warnings).map_err(json)?,
                    );
                }
                let text = twin_sim::json::document("run", &v).map_err(json)?;
                Ok(format!("{text}\n"))
            }
            Format::Text => {
                let mut o = format!("{}{}", self.rank0, launch::recover::to_text(out));
                for w in &self.warnings {
                    o.push_str(&format!("warning         {w}\n"));
                }
                Ok(o)
            }
        }
    }
}

/// Run `work` with `spec`'s arguments on `backend` through the launcher: checkpoints in
/// `checkpoint`'s folder, `inject`'s kills, restarts until the run completes.
pub fn run(
    spec: &RunSpec,
    work: &Work<'_>,
    checkpoint: &CheckpointSpec,
    inject: &InjectSpec,
    master_port: Option<u16>,
    backend: Backend,
) -> Result<RecoveredRun, JobError> {
    let (mut opts, run_dir) = options(spec, work, master_port, backend)?;
    opts.args.extend(checkpoint.worker_args());
    let name = |rank: u32, op: u32| work.op_name(rank, op);
    let injections = injections(inject, work, spec.steps)?;
    if let Some(dir) = &checkpoint.dir {
        if !checkpoint.resume && crate::checkpoint::dir::has_checkpoints(dir) {
            return Err(JobError::Refused(format!(
                "{} already holds checkpoints: pass --resume to continue from them, or choose an empty directory",
                dir.display()
            )));
        }
        std::fs::create_dir_all(dir)
            .map_err(JobError::io(format!("cannot create {}", dir.display())))?;
    }
    let rec = launch::RecoveryOptions {
        max_restarts: inject.max_restarts,
        injections,
        resume_first: checkpoint.resume,
        events_dir: run_dir.path().join("events"),
    };
    let recovered = launch::launch_with_recovery(&opts, &rec, &name)?;
    drop(run_dir);
    let warnings = recovered.warnings(checkpoint.resume, checkpoint.dir.as_deref());
    let rank0 = rank0_stdout(&recovered.output.stdout);
    Ok(RecoveredRun {
        recovered,
        rank0,
        warnings,
    })
}
