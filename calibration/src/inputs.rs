//! A calibration's inputs as a user names them (a scenario, a base profile, nccl-tests logs,
//! a samples file), read and resolved into what [`crate::calibrate_host`],
//! [`crate::calibrate_cuda`], the refits and [`crate::from_nccl_tests`] take. `twin
//! calibrate` parses its arguments, calls these and prints.

use crate::bench::compute::{scenario_shapes, step_bytes};
use crate::bench::Mode;
use crate::gpu_base::{self, Device, Request, ScenarioGpu, Start};
use crate::nccl_tests::{self, ParseError};
use crate::write::samples_path;
use crate::{CalibError, CudaRun, HostOptions, HostRun, NcclImport};
use std::path::{Path, PathBuf};
use twin_sim::plan::{Plan, PlanError};
use twin_sim::profile::Profile;
use twin_sim::scenario::{Scenario, ScenarioError};
use twin_sim::schedule::{Gemm, Schedule, ScheduleError};

/// Most scenario GEMM calls a GPU calibration times (the most frequent first).
pub const MAX_SCENARIO_CALLS: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// Boxed: a located scenario error is large.
    #[error(transparent)]
    Scenario(Box<ScenarioError>),
    #[error(transparent)]
    Parse(#[from] ParseError),
    #[error(transparent)]
    Calib(#[from] CalibError),
    #[error("cannot plan {origin}")]
    Plan { origin: String, source: PlanError },
    #[error("cannot build the schedule of {origin}")]
    Schedule {
        origin: String,
        source: ScheduleError,
    },
    #[error("no bundled profile for GPU '{gpu}'; give --base-profile FILE (a profile whose other sections the result keeps)")]
    NoBase { gpu: String },
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--refit {}: cannot read it", path.display())]
    ReadSamples {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--refit {} -o {}: the profile would overwrite or sit beside the samples it reads; give another --output", samples.display(), output.display())]
    RefitOverlap { samples: PathBuf, output: PathBuf },
    #[error("--refit {}: --scenario and --base-profile apply to a GPU calibration's samples; these are the host backend's", samples.display())]
    RefitHostOptions { samples: PathBuf },
}

impl From<ScenarioError> for InputError {
    fn from(e: ScenarioError) -> Self {
        InputError::Scenario(Box::new(e))
    }
}

impl InputError {
    /// Whether the input itself is wrong (a scenario, a profile or a log), not the work.
    pub fn is_bad_input(&self) -> bool {
        matches!(self, InputError::Scenario(_) | InputError::Parse(_))
    }
}

/// A scenario and its generated schedule, whose GEMMs a calibration times.
pub struct ScenarioWork {
    /// The scenario file, for citations and errors.
    pub origin: String,
    pub scenario: Scenario,
    pub schedule: Schedule,
}

impl ScenarioWork {
    /// Plans `scenario` (read from `origin`) and generates its schedule.
    pub fn new(scenario: Scenario, origin: String) -> Result<ScenarioWork, InputError> {
        let plan = Plan::new(&scenario).map_err(|source| InputError::Plan {
            origin: origin.clone(),
            source,
        })?;
        let schedule = twin_sim::schedule::generate(&scenario, &plan).map_err(|source| {
            InputError::Schedule {
                origin: origin.clone(),
                source,
            }
        })?;
        Ok(ScenarioWork {
            origin,
            scenario,
            schedule,
        })
    }
}

/// The file name of the samples file beside the profile `output`.
pub fn samples_file_name(output: &Path) -> String {
    samples_path(output)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A host calibration's options: a scenario's GEMM shapes and step traffic when given, and
/// the GPU name (`gpu_name`, else the scenario's GPU, else `cpu-core`).
pub fn host_options(
    mode: Mode,
    scenario: Option<&ScenarioWork>,
    gpu_name: Option<String>,
    seed: u64,
    command: String,
    output: &Path,
) -> HostOptions {
    let scenario_gpu = scenario.map(|s| s.scenario.cluster.gpu.name.clone());
    HostOptions {
        mode,
        extra_shapes: scenario.map_or_else(Vec::new, |s| scenario_shapes(&s.schedule, usize::MAX)),
        step_bytes: scenario.map(|s| step_bytes(&s.schedule)),
        gpu_name: gpu_name
            .or(scenario_gpu)
            .unwrap_or_else(|| "cpu-core".into()),
        seed,
        command,
        samples_file: samples_file_name(output),
    }
}

/// What a GPU calibration starts from (`gpu_name`, the scenario, `base_profile` and
/// `device`), and the scenario's GEMM calls to time.
pub fn gpu_request(
    scenario: Option<&ScenarioWork>,
    gpu_name: Option<String>,
    base_profile: Option<&Path>,
    device: Option<Device>,
) -> Result<(Vec<Gemm>, Request), InputError> {
    let calls = scenario.map_or_else(Vec::new, |s| {
        crate::cuda::scenario_calls(&s.schedule, MAX_SCENARIO_CALLS)
    });
    let scenario = scenario.map(|s| ScenarioGpu {
        origin: s.origin.clone(),
        gpu: s.scenario.cluster.gpu.clone(),
        links: twin_sim::cost::Analytic::new(&s.scenario).links,
    });
    let base = match base_profile {
        Some(p) => Some((twin_sim::profile::load(p)?, p.display().to_string())),
        None => None,
    };
    let req = Request {
        gpu_name,
        scenario,
        base,
        device,
    };
    Ok((calls, req))
}

/// `base_profile`, or the bundled profile for `gpu`; with where it came from.
pub fn base_profile(
    path: Option<&Path>,
    gpu: Option<&str>,
) -> Result<(Profile, String), InputError> {
    if let Some(p) = path {
        return Ok((twin_sim::profile::load(p)?, p.display().to_string()));
    }
    let gpu = gpu.unwrap_or("");
    match gpu_base::bundled_base(gpu) {
        Some((origin, text)) => Ok((
            twin_sim::profile::parse_str(text, origin)?,
            origin.to_string(),
        )),
        None => Err(InputError::NoBase {
            gpu: gpu.to_string(),
        }),
    }
}

/// Reads nccl-tests logs and fits their network tiers over `base_profile` (default: the
/// bundled profile of the first log's GPU); also returns where the base came from.
pub fn import_nccl_tests(
    logs: &[PathBuf],
    base: Option<&Path>,
    min_bytes: u64,
) -> Result<(NcclImport, String), InputError> {
    let mut texts = Vec::new();
    for p in logs {
        let text = std::fs::read_to_string(p).map_err(|source| InputError::Read {
            path: p.clone(),
            source,
        })?;
        texts.push((p.display().to_string(), text));
    }
    // Parsed here first so that a log's error (file, line, what was expected) is what the
    // user sees, not a missing GPU name that the unparsed log could not give.
    let mut first_gpu = None;
    for (origin, text) in &texts {
        let log = nccl_tests::parse(text, origin)?;
        first_gpu = first_gpu.or(log.gpu);
    }
    let (base, origin) = base_profile(base, first_gpu.as_deref())?;
    let out = crate::from_nccl_tests(&texts, &base, &origin, min_bytes)?;
    Ok((out, origin))
}

/// What a refit asks for beside its samples file.
pub struct RefitRequest<'a> {
    pub samples: &'a Path,
    /// Where the profile goes: neither the samples file nor the samples file beside it.
    pub output: &'a Path,
    pub gpu_name: Option<String>,
    /// (GPU samples) the scenario whose GEMM calls were timed.
    pub scenario: Option<&'a ScenarioWork>,
    /// (GPU samples) profile whose other sections the result keeps.
    pub base_profile: Option<&'a Path>,
    /// The command line, for provenance.
    pub command: &'a str,
}

/// A refitted calibration, of the backend its samples came from.
pub enum Refit {
    Host(Box<HostRun>),
    Cuda(Box<(CudaRun, Start)>),
}

/// Fits a calibration's stored samples again, measuring nothing.
pub fn refit(req: &RefitRequest) -> Result<Refit, InputError> {
    let (samples, output) = (req.samples, req.output);
    if samples == output || samples_path(output) == samples {
        return Err(InputError::RefitOverlap {
            samples: samples.to_path_buf(),
            output: output.to_path_buf(),
        });
    }
    let text = std::fs::read_to_string(samples).map_err(|source| InputError::ReadSamples {
        path: samples.to_path_buf(),
        source,
    })?;
    let origin = samples.display().to_string();
    if crate::samples_backend(&text, &origin)? == "cuda" {
        let (_, req_gpu) = gpu_request(req.scenario, req.gpu_name.clone(), req.base_profile, None)?;
        let run = crate::refit_cuda(&text, &origin, req_gpu, req.command)?;
        return Ok(Refit::Cuda(Box::new(run)));
    }
    if req.scenario.is_some() || req.base_profile.is_some() {
        return Err(InputError::RefitHostOptions {
            samples: samples.to_path_buf(),
        });
    }
    let gpu = req.gpu_name.as_deref().unwrap_or("cpu-core");
    let run = crate::refit_host(&text, &origin, gpu, req.command)?;
    Ok(Refit::Host(Box::new(run)))
}
