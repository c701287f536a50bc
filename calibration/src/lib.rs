//! twin-calibration: measures the local hardware through twin's own runtime (the host
//! backend's GEMMs, memory passes, allocations and TCP collectives; cuBLAS on a GPU) and fits
//! the simulator's cost-model parameters to the samples, each with a 95% confidence interval,
//! into a hardware profile (docs/profiles.md, docs/calibration.md). It also imports
//! nccl-tests logs, which users often have from their clusters.

pub mod fit;
pub mod sample;
