//! One rank of a run (`twin worker`, started by the launcher, by hand or by srun): read the
//! rank's environment, run its program on the backend, and on rank 0 merge every rank's
//! measurements into the report.

use super::{fit, Backend, CheckpointSpec, JobError, RunSpec, Work};
use crate::launch::worker::Durability;
use crate::launch::{self, RankEnv, WorkerOptions};

/// Run this process's rank of `work` with `spec`'s arguments on `backend`. `notes` are the
/// scale factors applied, for the report; `started` is when the process began its work. Rank 0 writes the measurements and trace files and
/// returns the report in `spec.format`; other ranks return `None`.
pub fn run(
    spec: &RunSpec,
    work: &Work<'_>,
    notes: Vec<String>,
    checkpoint: &CheckpointSpec,
    backend: Backend,
    started: std::time::Instant,
) -> Result<Option<String>, JobError> {
    let env = RankEnv::from_env()?;
    let kills = match std::env::var(launch::inject::INJECT_VAR) {
        Ok(v) => launch::inject::decode_kills(&v)?,
        Err(_) => Vec::new(),
    };
    let opts = WorkerOptions {
        steps: spec.steps,
        timeout: fit::timeout(spec.timeout_s)?,
        fault: crate::backend::host::Fault::from_env()?,
        durable: Durability {
            seed: work.scenario.run.seed,
            checkpoint: checkpoint.options(),
            kills,
        },
    };
    let device = launch::DeviceWorkerOptions {
        steps: opts.steps,
        timeout: opts.timeout,
        durable: opts.durable.clone(),
    };
    if backend != Backend::Host && opts.fault.is_some() {
        return Err(JobError::Refused(format!(
            "{} is read by the host backend only; inject faults on the {} backend with `twin run --inject`",
            crate::backend::host::fault::FAULT_VAR,
            backend.name()
        )));
    }
    let (plan, schedule) = (work.plan, work.schedule);
    let all = match backend {
        Backend::Host => launch::run_worker(&env, plan, schedule, &opts)?,
        Backend::Cuda => cuda_worker(&env, work, &device)?,
        Backend::DummyCuda => {
            let seed = device.durable.seed;
            launch::run_device_worker(&env, plan, schedule, &device, |s| {
                Ok(crate::backend::dummy::DummyDevice::new(seed, s.rank))
            })?
        }
    };
    let Some(all) = all else {
        return Ok(None);
    };
    if let Some(path) = &spec.measures {
        let json = serde_json::to_string(&all)
            .map_err(JobError::json("cannot write the measurements as JSON"))?;
        super::write_atomic(path, &json)?;
    }
    let merged = launch::merge(plan, schedule, &all);
    if let (Some(path), Some(t)) = (&spec.trace, &merged.result.trace) {
        super::write_atomic(path, &t.to_chrome_json(plan, schedule))?;
    }
    let mut report = launch::report(
        work.scenario,
        plan,
        schedule,
        &all,
        &merged,
        started.elapsed().as_secs_f64(),
        notes,
    );
    if backend != Backend::Host {
        report.backend = backend.name().into();
    }
    Ok(Some(super::measure::render(&report, spec.format)))
}

#[cfg(feature = "cuda")]
fn cuda_worker(
    env: &RankEnv,
    work: &Work<'_>,
    device: &launch::DeviceWorkerOptions,
) -> Result<Option<Vec<launch::RankMeasure>>, JobError> {
    Ok(crate::backend::cuda::run_cuda_worker(
        env,
        work.plan,
        work.schedule,
        device,
    )?)
}

#[cfg(not(feature = "cuda"))]
fn cuda_worker(
    _env: &RankEnv,
    _work: &Work<'_>,
    _device: &launch::DeviceWorkerOptions,
) -> Result<Option<Vec<launch::RankMeasure>>, JobError> {
    Err(crate::RuntimeError::Unsupported(
        "this build of twin has no CUDA backend (feature `cuda`)".into(),
    )
    .into())
}
