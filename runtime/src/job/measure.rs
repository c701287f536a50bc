//! A one-rank schedule on the local GPU, in this process: measured, merged and reported as a
//! launched run is, so that the fields mean the same.

use super::{fit, Format, JobError, RankDemand, Work};
use crate::launch::{self, RankMeasure};

/// Run `steps` steps of a one-rank schedule on the local GPU; the rank's measurements.
/// `demand` is the simulator's prediction of the rank, for the fit check before the run.
#[cfg(feature = "cuda")]
pub fn measure_cuda(
    work: &Work<'_>,
    demand: &[RankDemand],
    steps: u32,
) -> Result<RankMeasure, JobError> {
    if work.plan.world != 1 {
        return Err(JobError::Refused(format!(
            "the scenario plans {} ranks: a single-process CUDA run takes one-rank schedules; `twin run --backend cuda` starts one process per GPU for more",
            work.plan.world
        )));
    }
    fit::check_fits_device(work, demand)?;
    let run = crate::backend::cuda::run_single_gpu(work.scenario, work.plan, work.schedule, steps)?;
    Ok(RankMeasure::from_rank_run(&run))
}

/// Without the CUDA backend built in, no GPU run.
#[cfg(not(feature = "cuda"))]
pub fn measure_cuda(
    _work: &Work<'_>,
    _demand: &[RankDemand],
    _steps: u32,
) -> Result<RankMeasure, JobError> {
    Err(crate::RuntimeError::Unsupported(
        "this build of twin has no CUDA backend (feature `cuda`)".into(),
    )
    .into())
}

/// `twin run --backend cuda` of a one-rank schedule: run it, write the merged trace to
/// `trace` when given, and return the report in `format`.
pub fn run_cuda(
    work: &Work<'_>,
    demand: &[RankDemand],
    steps: u32,
    trace: Option<&std::path::Path>,
    format: Format,
) -> Result<String, JobError> {
    let start = std::time::Instant::now();
    let measure = measure_cuda(work, demand, steps)?;
    let merged = launch::merge(work.plan, work.schedule, std::slice::from_ref(&measure));
    let mut report = launch::report(
        work.scenario,
        work.plan,
        work.schedule,
        std::slice::from_ref(&measure),
        &merged,
        start.elapsed().as_secs_f64(),
        Vec::new(),
    );
    report.backend = "cuda".into();
    if let (Some(path), Some(t)) = (trace, &merged.result.trace) {
        super::write_atomic(path, &t.to_chrome_json(work.plan, work.schedule))?;
    }
    Ok(render(&report, format))
}

/// A measured report as `twin run` prints it.
pub fn render(report: &launch::RunReport, format: Format) -> String {
    match format {
        Format::Json => format!("{}\n", report.to_json()),
        Format::Text => report.to_text(),
    }
}
