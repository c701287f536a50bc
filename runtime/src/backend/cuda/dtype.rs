//! Maps the schedule's precisions to what cuBLAS and NCCL run. bf16/fp16 accumulate in fp32;
//! fp32 runs as true fp32 or, when chosen, TF32 tensor cores. FP8 GEMMs run through cuBLASLt
//! where the GPU has FP8 tensor cores (`fp8`); here fp8 maps to bf16, the dtype of its
//! cuBLAS fallback and of its operand buffers' sizing.

use serde::Serialize;
use twin_sim::scenario::{PeakFlops, Precision};

/// Element type of a GEMM as twin runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GemmDtype {
    Fp32,
    /// fp32 storage, TF32 tensor-core math.
    Tf32,
    Fp16,
    Bf16,
}

impl GemmDtype {
    pub fn name(self) -> &'static str {
        match self {
            GemmDtype::Fp32 => "fp32",
            GemmDtype::Tf32 => "tf32",
            GemmDtype::Fp16 => "fp16",
            GemmDtype::Bf16 => "bf16",
        }
    }
    pub fn element_bytes(self) -> u64 {
        match self {
            GemmDtype::Fp32 | GemmDtype::Tf32 => 4,
            GemmDtype::Fp16 | GemmDtype::Bf16 => 2,
        }
    }
    /// The dense peak this dtype is measured against.
    pub fn peak_flops_per_s(self, peak: &PeakFlops) -> f64 {
        match self {
            GemmDtype::Fp32 => peak.fp32_flops_per_s,
            GemmDtype::Tf32 => peak.tf32_flops_per_s,
            GemmDtype::Fp16 => peak.fp16_flops_per_s,
            GemmDtype::Bf16 => peak.bf16_flops_per_s,
        }
    }
}

/// The dtype a schedule precision runs as, and a note when it is not the one asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DtypeChoice {
    pub dtype: GemmDtype,
    pub fallback_note: Option<String>,
}

pub fn gemm_dtype(p: Precision, allow_tf32: bool) -> DtypeChoice {
    let (dtype, fallback_note) = match p {
        Precision::Fp32 if allow_tf32 => (GemmDtype::Tf32, None),
        Precision::Fp32 => (GemmDtype::Fp32, None),
        Precision::Fp16 => (GemmDtype::Fp16, None),
        Precision::Bf16 => (GemmDtype::Bf16, None),
        Precision::Fp8 => (
            GemmDtype::Bf16,
            Some("fp8 GEMMs run as bf16 outside cuBLASLt; times are bf16 times".to_string()),
        ),
    };
    DtypeChoice {
        dtype,
        fallback_note,
    }
}

/// NCCL element types twin uses (values of `ncclDataType_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NcclDtype {
    Uint8 = 1,
    Bfloat16 = 9,
}

/// Element type and count carrying `bytes` of a collective. Reductions add bf16 elements
/// (as gradient reductions do) when the size allows; data movement uses bytes.
pub fn nccl_elements(bytes: u64, reduces: bool) -> (NcclDtype, u64) {
    if reduces && bytes.is_multiple_of(2) {
        (NcclDtype::Bfloat16, bytes / 2)
    } else {
        (NcclDtype::Uint8, bytes)
    }
}

/// cuBLAS sizes are 32-bit; a planned dimension that does not fit is an error, not a wrap.
pub fn cublas_dim(v: u64, what: &str) -> Result<i32, String> {
    i32::try_from(v).map_err(|_| format!("GEMM {what} = {v} exceeds cuBLAS's 32-bit limit"))
}

#[cfg(feature = "cuda")]
pub(crate) fn cuda_types(
    d: GemmDtype,
) -> (
    cudarc::cublas::sys::cudaDataType,
    cudarc::cublas::sys::cublasComputeType_t,
) {
    use cudarc::cublas::sys::cublasComputeType_t as C;
    use cudarc::cublas::sys::cudaDataType as T;
    match d {
        GemmDtype::Fp32 => (T::CUDA_R_32F, C::CUBLAS_COMPUTE_32F),
        GemmDtype::Tf32 => (T::CUDA_R_32F, C::CUBLAS_COMPUTE_32F_FAST_TF32),
        GemmDtype::Fp16 => (T::CUDA_R_16F, C::CUBLAS_COMPUTE_32F),
        GemmDtype::Bf16 => (T::CUDA_R_16BF, C::CUBLAS_COMPUTE_32F),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precisions_map_to_gemm_dtypes() {
        assert_eq!(gemm_dtype(Precision::Bf16, true).dtype, GemmDtype::Bf16);
        assert_eq!(gemm_dtype(Precision::Fp16, false).dtype, GemmDtype::Fp16);
        assert_eq!(gemm_dtype(Precision::Fp32, false).dtype, GemmDtype::Fp32);
        assert_eq!(gemm_dtype(Precision::Fp32, true).dtype, GemmDtype::Tf32);
        let fp8 = gemm_dtype(Precision::Fp8, false);
        assert_eq!(fp8.dtype, GemmDtype::Bf16);
        assert!(fp8.fallback_note.unwrap().contains("fp8"));
        assert!(gemm_dtype(Precision::Bf16, false).fallback_note.is_none());
        assert_eq!(GemmDtype::Tf32.element_bytes(), 4);
        assert_eq!(GemmDtype::Bf16.element_bytes(), 2);
    }

    #[test]
    fn peaks_follow_the_dtype() {
        let peak = twin_sim::testing::a100().peak;
        assert_eq!(GemmDtype::Tf32.peak_flops_per_s(&peak), 156e12);
        assert_eq!(GemmDtype::Fp32.peak_flops_per_s(&peak), 19.5e12);
    }

    #[test]
    fn collective_elements_cover_the_bytes() {
        assert_eq!(nccl_elements(48, true), (NcclDtype::Bfloat16, 24));
        assert_eq!(nccl_elements(49, true), (NcclDtype::Uint8, 49));
        assert_eq!(nccl_elements(48, false), (NcclDtype::Uint8, 48));
    }

    #[test]
    fn oversized_dims_are_errors() {
        assert_eq!(cublas_dim(4096, "m"), Ok(4096));
        assert!(cublas_dim(1 << 31, "k")
            .unwrap_err()
            .contains("k = 2147483648"));
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_types_accumulate_in_fp32() {
        use cudarc::cublas::sys::cublasComputeType_t as C;
        use cudarc::cublas::sys::cudaDataType as T;
        assert_eq!(
            cuda_types(GemmDtype::Bf16),
            (T::CUDA_R_16BF, C::CUBLAS_COMPUTE_32F)
        );
        assert_eq!(
            cuda_types(GemmDtype::Tf32).1,
            C::CUBLAS_COMPUTE_32F_FAST_TF32
        );
    }
}
