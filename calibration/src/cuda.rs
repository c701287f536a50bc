//! `--backend cuda`: GEMMs through the runtime's cuBLAS path (`gemm_sweep`) on GPU 0, fitted
//! with the same GEMM curve as the host; every other section is taken from a base profile
//! (the GPU's bundled one). Without a GPU (or without the driver) this is a clear error, not a
//! panic, and says what to do instead.

use crate::CalibError;

/// Checks that a CUDA GPU can be used; returns how many there are.
pub fn require_gpu() -> Result<u32, CalibError> {
    device_count().and_then(|n| {
        if n == 0 {
            Err(CalibError::NoGpu(
                "the CUDA driver loaded but reports no GPU".into(),
            ))
        } else {
            Ok(n)
        }
    })
}

#[cfg(feature = "cuda")]
fn device_count() -> Result<u32, CalibError> {
    twin_runtime::backend::cuda::CudaBackend::device_count()
        .map_err(|e| CalibError::NoGpu(e.to_string()))
}

#[cfg(not(feature = "cuda"))]
fn device_count() -> Result<u32, CalibError> {
    Err(CalibError::NoGpu(
        "this twin was built without the `cuda` feature".into(),
    ))
}

/// GEMM shapes of a GPU sweep (large enough to reach the tensor-core plateau).
pub fn sweep_shapes(quick: bool) -> Vec<twin_sim::schedule::Gemm> {
    let mn: &[u64] = if quick {
        &[512, 2048, 8192]
    } else {
        &[256, 512, 1000, 2048, 4096, 8192]
    };
    let k: &[u64] = if quick {
        &[64, 512, 4096]
    } else {
        &[64, 128, 256, 512, 1024, 4096, 8192]
    };
    let mut out = Vec::new();
    for &m in mn {
        for &n in mn {
            for &kk in k {
                out.push(twin_sim::schedule::Gemm {
                    m,
                    n,
                    k: kk,
                    count: 1,
                });
            }
        }
    }
    out
}

/// Times `shapes` in bf16 on GPU 0; returns (m, n, k, median ns) per shape.
#[cfg(feature = "cuda")]
pub fn gemm_medians(
    shapes: &[twin_sim::schedule::Gemm],
    reps: u32,
) -> Result<Vec<crate::fit::gemm::GemmPoint>, CalibError> {
    use twin_runtime::backend::cuda::{dtype::GemmDtype, gemm_sweep};
    let samples =
        gemm_sweep(shapes, GemmDtype::Bf16, reps).map_err(|e| CalibError::Bench(e.to_string()))?;
    Ok(samples
        .iter()
        .map(|s| crate::fit::gemm::GemmPoint {
            m: s.gemm.m,
            n: s.gemm.n,
            k: s.gemm.k,
            time_ns: s.median_ns as f64,
        })
        .collect())
}

#[cfg(not(feature = "cuda"))]
pub fn gemm_medians(
    _shapes: &[twin_sim::schedule::Gemm],
    _reps: u32,
) -> Result<Vec<crate::fit::gemm::GemmPoint>, CalibError> {
    device_count().map(|_| Vec::new())
}
