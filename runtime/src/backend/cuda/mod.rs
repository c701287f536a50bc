//! The CUDA backend: cuBLAS GEMMs (FP8 ones through cuBLASLt), device-to-device copies for memory-bound work, stream-ordered
//! allocations and NCCL collectives, one CUDA stream per schedule stream and CUDA events for
//! every op's time. Every library is loaded at run time from paths twin discovers itself, so
//! twin builds and tests on machines without CUDA; only discovery, dtype, FP8 planning (`fp8`), communicator mapping
//! and the single-GPU scenario mapping (`single`) are compiled without the `cuda` feature.

pub mod comm;
pub mod discover;
pub mod dtype;
pub mod footprint;
pub mod fp8;
pub mod single;

#[cfg(feature = "cuda")]
mod backend;
#[cfg(feature = "cuda")]
pub mod bench;
#[cfg(feature = "cuda")]
mod device;
#[cfg(feature = "cuda")]
mod doctor;
#[cfg(feature = "cuda")]
mod entry;
#[cfg(feature = "cuda")]
mod host_side;
#[cfg(feature = "cuda")]
mod libs;
#[cfg(feature = "cuda")]
mod lt;
#[cfg(feature = "cuda")]
mod nccl;
#[cfg(feature = "cuda")]
mod pool;
#[cfg(feature = "cuda")]
mod worker;

#[cfg(feature = "cuda")]
pub use backend::{CudaBackend, CudaOptions};
#[cfg(feature = "cuda")]
pub use doctor::{doctor, DoctorReport, GpuInfo, Item, LibraryItem, PeerAccess};
#[cfg(feature = "cuda")]
pub use entry::{
    fp8_device, fp8_gemm_back_to_back_times, fp8_gemm_sweep_times, gemm_back_to_back_times,
    gemm_sweep, gemm_sweep_times, run_scenario_single_gpu, run_single_gpu, run_single_gpu_with,
    GemmSample, ScenarioRun,
};
#[cfg(feature = "cuda")]
pub use worker::run_cuda_worker;
