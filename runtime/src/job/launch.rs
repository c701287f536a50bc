//! Starting one `twin worker` process per rank on this machine: the workers' command line
//! (the run's arguments passed on), the run's temp folder, and the launch itself.

use super::{fit, Backend, Format, JobError, RunSpec, Work};
use crate::launch::{self, LaunchOptions};
use std::time::Duration;

/// The worker arguments that choose `backend` (the host backend is the workers' default).
pub fn backend_args(backend: Backend) -> Vec<String> {
    match backend {
        Backend::Host => Vec::new(),
        b => vec!["--backend".to_string(), b.name().to_string()],
    }
}

/// How this machine's workers for `work` start with `spec`'s arguments on `backend`, and the
/// temp folder made for their progress files (removed when the guard drops). From here on
/// SIGINT, SIGTERM and SIGHUP stop the workers and end the launch (`launch::interrupt`).
pub fn options(
    spec: &RunSpec,
    work: &Work<'_>,
    master_port: Option<u16>,
    backend: Backend,
) -> Result<(LaunchOptions, launch::RunDir), JobError> {
    let exe = std::env::current_exe().map_err(JobError::io("cannot find the twin executable"))?;
    let mut wargs = vec!["worker".to_string(), spec.scenario.display().to_string()];
    for o in &spec.overrides {
        wargs.extend(["--set".into(), o.clone()]);
    }
    for s in &spec.scale {
        wargs.extend(["--scale".into(), s.clone()]);
    }
    wargs.extend([
        "--steps".into(),
        spec.steps.to_string(),
        "--timeout-s".into(),
        spec.timeout_s.to_string(),
        "--format".into(),
        match spec.format {
            Format::Json => "json".into(),
            Format::Text => "text".into(),
        },
    ]);
    if let Some(t) = &spec.trace {
        wargs.extend(["--trace".into(), t.display().to_string()]);
    }
    if let Some(m) = &spec.measures {
        wargs.extend(["--measures".into(), m.display().to_string()]);
    }
    wargs.extend(backend_args(backend));
    let t = fit::timeout(spec.timeout_s)?;
    launch::interrupt::install().map_err(JobError::Refused)?;
    let run_dir =
        launch::RunDir::create(launch::rundir::RUN_PREFIX).map_err(JobError::io(format!(
            "cannot create the run's folder in {}",
            std::env::temp_dir().display()
        )))?;
    let opts = LaunchOptions {
        exe,
        args: wargs,
        world: work.plan.world,
        master_addr: "127.0.0.1".into(),
        master_port,
        // Workers give up on a silent peer after `t`; the launcher allows them to
        // report that before it kills anything.
        timeout: t + Duration::from_secs(5),
        env: vec![],
        progress_dir: Some(run_dir.path().to_path_buf()),
    };
    Ok((opts, run_dir))
}

/// Start one worker per rank of `work` on this machine with `spec`'s arguments (its format,
/// trace and measurements file included) on `backend` (cuda: rank i on GPU i), wait for all,
/// and return what rank 0 printed.
pub fn launch_local(
    spec: &RunSpec,
    work: &Work<'_>,
    master_port: Option<u16>,
    backend: Backend,
) -> Result<String, JobError> {
    let (opts, run_dir) = options(spec, work, master_port, backend)?;
    let name = |rank: u32, op: u32| work.op_name(rank, op);
    let out = launch::launch(&opts, &name);
    drop(run_dir);
    Ok(rank0_stdout(&out?.stdout))
}

/// What rank 0 printed, as text.
pub(crate) fn rank0_stdout(stdout: &[Vec<u8>]) -> String {
    stdout
        .first()
        .map(|o| String::from_utf8_lossy(o).into_owned())
        .unwrap_or_default()
}
