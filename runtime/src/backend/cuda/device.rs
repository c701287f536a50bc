//! Owned device resources (buffers, pinned host buffers, cuBLAS handles) that free themselves,
//! and the GEMM and memory-bound kernels that both the backend and the GEMM sweep issue, so a
//! sweep measures exactly what a schedule runs.

use super::dtype::{cublas_dim, cuda_types, GemmDtype};
use super::libs::{blas, cu};
use crate::error::RuntimeError;
use cudarc::cublas::{result as cublas, sys as cublas_sys};
use cudarc::driver::{result as drv, sys as drv_sys};
use std::ffi::c_void;
use twin_sim::schedule::Gemm;

pub use super::footprint::{batch_per_call, operand_bytes};

/// A device allocation outside the stream-ordered pool (workspaces), freed on drop.
pub struct DeviceBuffer {
    pub ptr: drv_sys::CUdeviceptr,
    pub bytes: u64,
}

impl DeviceBuffer {
    pub fn new(bytes: u64) -> Result<DeviceBuffer, RuntimeError> {
        let n = usize::try_from(bytes.max(1))
            .map_err(|_| RuntimeError::Unsupported(format!("buffer of {bytes} bytes")))?;
        // SAFETY: plain allocation; the memory is initialised by its users.
        let ptr = unsafe { drv::malloc_sync(n) }.map_err(|e| cu("cuMemAlloc", e))?;
        Ok(DeviceBuffer { ptr, bytes })
    }

    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr as usize as *mut c_void
    }

    /// Fill with normally distributed values, finite in every float dtype (see
    /// [`fill_pattern`]).
    pub fn fill_random(&self, seed: u64) -> Result<(), RuntimeError> {
        const BLOCK: usize = 1 << 20;
        let block = fill_pattern(BLOCK, seed);
        let mut off = 0u64;
        while off < self.bytes {
            let n = (self.bytes - off).min(BLOCK as u64) as usize;
            // SAFETY: off + n <= bytes, inside the allocation.
            unsafe { drv::memcpy_htod_sync(self.ptr + off, &block[..n]) }
                .map_err(|e| cu("cuMemcpyHtoD", e))?;
            off += n as u64;
        }
        Ok(())
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by malloc_sync, freed once; nothing can be reported from drop.
        let _ = unsafe { drv::free_sync(self.ptr) };
    }
}

/// The smallest and largest magnitude [`fill_pattern`] writes: inside them a bf16 word also
/// reads as a normal fp16 value (fp16's smallest normal is 2^-14; below 4 its exponent field
/// stays under 31, which would be infinity).
const FILL_MIN_MAGNITUDE: f32 = 1.0 / 16384.0;
const FILL_MAX_MAGNITUDE: f32 = 3.99;

/// bf16 words of standard normal values (`fp8::standard_normals`), their magnitudes held
/// in [2^-14, 3.99]: distributed as a training run's weights and activations are, where a
/// GEMM's rate depends on its data under a power cap (an H200 at 700 W, back to back: 765-783
/// TFLOP/s bf16 on values of one exponent, 669-690 on normal ones, within 3% of it on
/// std-0.02 weights, SwiGLU outputs and small gradients, and on this fill;
/// docs/measurements/2026-11-30-h200-fp8-and-power.md). Read as fp16 every word is a normal
/// number of magnitude 2^-14..4, and read in pairs as fp32 about the same value as its upper
/// word: finite in every float dtype.
pub fn fill_pattern(bytes: usize, seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes + 2);
    for v in super::fp8::standard_normals(bytes.div_ceil(2), seed) {
        let magnitude = v.abs().clamp(FILL_MIN_MAGNITUDE, FILL_MAX_MAGNITUDE);
        let word = (magnitude.copysign(v).to_bits() >> 16) as u16;
        out.extend_from_slice(&word.to_le_bytes());
    }
    out.truncate(bytes);
    out
}

/// Pinned host memory (offloaded optimizer state or parameters), freed on drop.
pub struct HostBuffer {
    ptr: *mut c_void,
}

impl HostBuffer {
    pub fn new(bytes: u64) -> Result<HostBuffer, RuntimeError> {
        let n = usize::try_from(bytes.max(1))
            .map_err(|_| RuntimeError::Unsupported(format!("host buffer of {bytes} bytes")))?;
        // SAFETY: plain pinned allocation.
        let ptr = unsafe { drv::malloc_host(n, 0) }.map_err(|e| cu("cuMemHostAlloc", e))?;
        Ok(HostBuffer { ptr })
    }

    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by malloc_host, freed once.
        let _ = unsafe { drv::free_host(self.ptr) };
    }
}

/// A cuBLAS handle bound to one stream.
pub struct BlasHandle {
    pub raw: cublas_sys::cublasHandle_t,
}

impl BlasHandle {
    pub fn new(stream: drv_sys::CUstream) -> Result<BlasHandle, RuntimeError> {
        let raw = cublas::create_handle().map_err(|e| blas("cublasCreate", e))?;
        let h = BlasHandle { raw };
        // SAFETY: live handle and stream.
        unsafe { cublas::set_stream(h.raw, stream as _) }
            .map_err(|e| blas("cublasSetStream", e))?;
        Ok(h)
    }

    /// cuBLAS's version as "13.1.0" (from cublasGetVersion's integer).
    pub fn version(&self) -> Result<String, RuntimeError> {
        let mut v: std::ffi::c_int = 0;
        // SAFETY: writes one int.
        unsafe { cublas_sys::cublasGetVersion_v2(self.raw, &mut v) }
            .result()
            .map_err(|e| blas("cublasGetVersion", e))?;
        Ok(format!("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100))
    }
}

impl Drop for BlasHandle {
    fn drop(&mut self) {
        // SAFETY: created by create_handle, destroyed once.
        let _ = unsafe { cublas::destroy_handle(self.raw) };
    }
}

/// Operand buffers of one stream.
pub struct GemmOperands {
    pub a: DeviceBuffer,
    pub b: DeviceBuffer,
    pub c: DeviceBuffer,
}

/// Issue `g` (all `count` repetitions) on the handle's stream: C[m,n] = A[m,k] * B[k,n],
/// column-major, fp32 accumulate.
pub fn run_gemm(
    h: &BlasHandle,
    ops: &GemmOperands,
    g: &Gemm,
    dtype: GemmDtype,
) -> Result<(), RuntimeError> {
    if g.m == 0 || g.n == 0 || g.k == 0 || g.count == 0 {
        return Ok(());
    }
    let need = operand_bytes(g, dtype);
    if need[0] > ops.a.bytes || need[1] > ops.b.bytes || need[2] > ops.c.bytes {
        return Err(RuntimeError::Unsupported(format!(
            "GEMM {}x{}x{} needs operands {need:?} bytes, workspace holds {}/{}/{}",
            g.m, g.n, g.k, ops.a.bytes, ops.b.bytes, ops.c.bytes
        )));
    }
    let dim = |v: u64, what: &str| cublas_dim(v, what).map_err(RuntimeError::Unsupported);
    let (m, n, k) = (dim(g.m, "m")?, dim(g.n, "n")?, dim(g.k, "k")?);
    let (ty, compute) = cuda_types(dtype);
    let alpha: f32 = 1.0;
    let beta: f32 = 0.0;
    let op_n = cublas_sys::cublasOperation_t::CUBLAS_OP_N;
    let algo = cublas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT;
    let per_call = batch_per_call(g, dtype);
    let mut left = u64::from(g.count);
    while left > 0 {
        let batch = left.min(per_call);
        left -= batch;
        // SAFETY: the operand buffers hold `batch` strided matrices of these shapes (checked
        // above); alpha/beta are host f32 as CUBLAS_COMPUTE_32F* requires.
        unsafe {
            if batch == 1 {
                cublas::gemm_ex(
                    h.raw,
                    op_n,
                    op_n,
                    m,
                    n,
                    k,
                    (&alpha as *const f32).cast(),
                    ops.a.as_ptr(),
                    ty,
                    m,
                    ops.b.as_ptr(),
                    ty,
                    k,
                    (&beta as *const f32).cast(),
                    ops.c.as_ptr(),
                    ty,
                    m,
                    compute,
                    algo,
                )
                .map_err(|e| blas("cublasGemmEx", e))?;
            } else {
                cublas::gemm_strided_batched_ex(
                    h.raw,
                    op_n,
                    op_n,
                    m,
                    n,
                    k,
                    (&alpha as *const f32).cast(),
                    ops.a.as_ptr(),
                    ty,
                    m,
                    (g.m * g.k) as i64,
                    ops.b.as_ptr(),
                    ty,
                    k,
                    (g.k * g.n) as i64,
                    (&beta as *const f32).cast(),
                    ops.c.as_ptr(),
                    ty,
                    m,
                    (g.m * g.n) as i64,
                    batch as i32,
                    compute,
                    algo,
                )
                .map_err(|e| blas("cublasGemmStridedBatchedEx", e))?;
            }
        }
    }
    Ok(())
}

/// Memory-bound work moving `bytes` through HBM in `launches` kernels (at least one):
/// device-to-device copies of `bytes / 2` in all (each copied byte is read once and written
/// once) between the halves of `scratch`, split evenly over the launches, so a layer's
/// elementwise kernels pay their launches as the cost model charges them.
pub fn run_memory_bound(
    scratch: &DeviceBuffer,
    bytes: u64,
    launches: u32,
    stream: drv_sys::CUstream,
) -> Result<(), RuntimeError> {
    let half = scratch.bytes / 2;
    let mut left = bytes.div_ceil(2);
    if left > 0 && half == 0 {
        return Err(RuntimeError::Unsupported(
            "memory-bound work without a scratch buffer".into(),
        ));
    }
    let piece = left.div_ceil(u64::from(launches.max(1))).max(1);
    while left > 0 {
        let n = left.min(half).min(piece);
        // SAFETY: both ranges lie inside scratch (n <= half).
        unsafe { drv::memcpy_dtod_async(scratch.ptr + half, scratch.ptr, n as usize, stream) }
            .map_err(|e| cu("cuMemcpyDtoDAsync", e))?;
        left -= n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cuda::footprint::MAX_OPERAND_BYTES;

    #[test]
    fn pattern_is_finite_in_every_dtype_and_seeded() {
        let p = fill_pattern(4096, 7);
        assert_eq!(p, fill_pattern(4096, 7));
        assert_ne!(p, fill_pattern(4096, 8));
        let mut sum = 0.0f64;
        let mut sum_sq = 0.0f64;
        for w in p.chunks_exact(2) {
            let bits = u16::from_le_bytes([w[0], w[1]]);
            let bf16 = f32::from_bits(u32::from(bits) << 16);
            assert!(
                (FILL_MIN_MAGNITUDE * 0.99..4.0).contains(&bf16.abs()),
                "bf16 {bf16}"
            );
            sum += f64::from(bf16);
            sum_sq += f64::from(bf16) * f64::from(bf16);
            // fp16: exponent field 1..=16, a normal number below 4.
            let exponent = (bits >> 10) & 0x1F;
            assert!((1..=16).contains(&exponent), "fp16 exponent {exponent}");
        }
        for w in p.chunks_exact(4) {
            let f = f32::from_le_bytes([w[0], w[1], w[2], w[3]]).abs();
            assert!(f.is_normal() && f < 4.0, "fp32 {f}");
        }
        // Standard normal: mean near 0, variance near 1 (2,048 draws; 5 sigma bounds).
        let n = (p.len() / 2) as f64;
        let mean = sum / n;
        let variance = sum_sq / n - mean * mean;
        assert!(mean.abs() < 5.0 / n.sqrt(), "mean {mean}");
        assert!(
            (variance - 1.0).abs() < 5.0 * (2.0 / n).sqrt(),
            "variance {variance}"
        );
    }

    #[test]
    fn long_batches_are_split_to_bound_operands() {
        let g = Gemm {
            dtype: None,
            m: 2048,
            n: 14336,
            k: 4096,
            count: 32,
            batch: 32,
        };
        let per_call = batch_per_call(&g, GemmDtype::Bf16);
        // B of one repetition is 4096*14336*2 = 112 MiB: 9 fit in 1 GiB.
        assert_eq!(per_call, 9);
        let [a, b, c] = operand_bytes(&g, GemmDtype::Bf16);
        assert!(a.max(b).max(c) <= MAX_OPERAND_BYTES);
        assert_eq!(b, 4096 * 14336 * 2 * 9);
        let small = Gemm {
            dtype: None,
            m: 128,
            n: 128,
            k: 64,
            count: 32,
            batch: 32,
        };
        assert_eq!(batch_per_call(&small, GemmDtype::Fp32), 32);
        // Separate calls (layers folded into one op) stay separate; a batch of 8 in 32
        // products is four calls of 8.
        assert_eq!(
            batch_per_call(&Gemm { batch: 1, ..small }, GemmDtype::Fp32),
            1
        );
        assert_eq!(
            batch_per_call(&Gemm { batch: 8, ..small }, GemmDtype::Fp32),
            8
        );
    }
}
