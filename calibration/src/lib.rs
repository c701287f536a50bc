//! twin-calibration: measures the local hardware through twin's own runtime (the host
//! backend's GEMMs, memory passes, allocations and TCP collectives; cuBLAS on a GPU) and fits
//! the simulator's cost-model parameters to the samples, each with a 95% confidence interval,
//! into a hardware profile (docs/reference/profiles.md, docs/calibration.md). It also imports
//! nccl-tests logs, which users often have from their clusters.

pub mod bench;
pub mod check;
pub mod cuda;
pub mod fit;
pub mod gpu_base;
pub mod host;
pub mod host_profile;
pub mod inputs;
pub mod load;
pub mod microbench;
pub mod nccl_tests;
pub mod provenance;
pub mod refit;
pub mod rounds;
pub mod run;
pub mod sample;
pub mod text;
pub mod trace;
pub mod verify;
pub mod write;

pub use refit::{refit_cuda, refit_host, samples_backend};
pub use run::{
    calibrate_cuda, calibrate_host, from_nccl_tests, CudaOptions, CudaRun, HostOptions, HostRun,
    NcclImport,
};

/// Why a calibration failed.
#[derive(Debug, thiserror::Error)]
pub enum CalibError {
    #[error(
        "`twin calibrate cuda` needs an NVIDIA GPU and its driver: {0}. On a machine without a \
         GPU, calibrate the host backend (`twin calibrate host`), or import nccl-tests logs \
         from your cluster (`twin calibrate nccl-tests LOG...`)"
    )]
    NoGpu(String),
    #[error("setting up the calibration: {0}")]
    Setup(String),
    #[error("benchmark failed: {0}")]
    Bench(String),
    #[error(transparent)]
    Fit(#[from] fit::FitError),
    #[error(transparent)]
    Parse(#[from] nccl_tests::ParseError),
    #[error("{0}")]
    Profile(String),
}
