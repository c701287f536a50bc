//! FP8 GEMMs through cuBLASLt: a handle with its workspace and the prepared descriptors of
//! each planned call ([`super::fp8::Fp8GemmPlan`]), and the FP8 operands a stream works on,
//! filled as the recipe casts training data. What each call looks like (layout, formats,
//! scale modes, accumulation) is decided in `fp8`, without a device; here it is issued.

use super::device::DeviceBuffer;
use super::fp8::{quantize_block, Fp8Format, Fp8GemmPlan, ScaleMode};
use super::libs::cu;
use crate::error::RuntimeError;
use cudarc::cublaslt::{result as lt, sys as lt_sys};
use cudarc::driver::{result as drv, sys as drv_sys};
use std::collections::HashMap;
use std::ffi::c_void;
use twin_sim::scenario::Fp8Recipe;

fn blas_lt(call: &'static str, e: lt::CublasError) -> RuntimeError {
    RuntimeError::Cublas {
        call,
        message: format!("{:?}", e.0),
    }
}

/// Values per host block of an operand fill (repeated over the buffer).
const FILL_VALUES: usize = 1 << 20;

/// Copies `pattern` over `buf` from its start, repeating it (in host blocks of at least
/// [`FILL_VALUES`] bytes, so a short pattern is not one copy per repetition).
fn fill_repeating(buf: &DeviceBuffer, pattern: &[u8]) -> Result<(), RuntimeError> {
    if pattern.is_empty() {
        return Ok(());
    }
    let reps = FILL_VALUES.div_ceil(pattern.len()).max(1);
    let block = pattern.repeat(reps);
    let mut off = 0u64;
    while off < buf.bytes {
        let n = (buf.bytes - off).min(block.len() as u64) as usize;
        // SAFETY: off + n <= bytes, inside the allocation.
        unsafe { drv::memcpy_htod_sync(buf.ptr + off, &block[..n]) }
            .map_err(|e| cu("cuMemcpyHtoD", e))?;
        off += n as u64;
    }
    Ok(())
}

/// One FP8 operand: its codes, and its dequantisation scales as fp32 (per-tensor, vector and
/// block modes read as many as they need, all the tensor's scale) and, for MXFP8, as E8M0.
pub struct Fp8Operand {
    pub data: DeviceBuffer,
    pub scales: DeviceBuffer,
    pub mx_scales: Option<DeviceBuffer>,
}

impl Fp8Operand {
    /// `bytes` of codes and `scale_bytes` of scales, filled from `seed` as `recipe` casts.
    pub fn new(
        bytes: u64,
        scale_bytes: u64,
        format: Fp8Format,
        recipe: Fp8Recipe,
        seed: u64,
    ) -> Result<Fp8Operand, RuntimeError> {
        let block = quantize_block(FILL_VALUES, seed, format, recipe);
        let data = DeviceBuffer::new(bytes.max(1))?;
        fill_repeating(&data, &block.codes)?;
        let scale_bytes = scale_bytes.max(4).next_multiple_of(4);
        let scales = DeviceBuffer::new(scale_bytes)?;
        fill_repeating(&scales, &block.scale_inv.to_le_bytes())?;
        let mx_scales = if recipe == Fp8Recipe::Mxfp8 {
            let b = DeviceBuffer::new(scale_bytes)?;
            fill_repeating(&b, &[block.mx_code])?;
            Some(b)
        } else {
            None
        };
        Ok(Fp8Operand {
            data,
            scales,
            mx_scales,
        })
    }

    fn scale_ptr(&self, mode: ScaleMode) -> Result<*const c_void, RuntimeError> {
        match mode {
            ScaleMode::Mx32 => self
                .mx_scales
                .as_ref()
                .map(|b| b.as_ptr() as *const c_void)
                .ok_or_else(|| RuntimeError::Unsupported("MX scales were not filled".into())),
            _ => Ok(self.scales.as_ptr() as *const c_void),
        }
    }
}

/// The FP8 operands of one stream: the weight side (A, e4m3), activations (B, e4m3) and
/// gradients (B, e5m2), each sized for the stream's largest FP8 GEMM.
pub struct Fp8Operands {
    pub a: Fp8Operand,
    pub b: Fp8Operand,
    pub grad: Fp8Operand,
}

impl Fp8Operands {
    /// `sizes`: bytes of A, of B, and of the largest scales (`fp8::fp8_workspace`).
    pub fn new(sizes: [u64; 3], recipe: Fp8Recipe, seed: u64) -> Result<Fp8Operands, RuntimeError> {
        let [a, b, scales] = sizes;
        Ok(Fp8Operands {
            a: Fp8Operand::new(a, scales, Fp8Format::E4m3, recipe, seed.wrapping_add(11))?,
            b: Fp8Operand::new(b, scales, Fp8Format::E4m3, recipe, seed.wrapping_add(12))?,
            grad: Fp8Operand::new(b, scales, Fp8Format::E5m2, recipe, seed.wrapping_add(13))?,
        })
    }

    pub fn bytes(&self) -> u64 {
        [&self.a, &self.b, &self.grad]
            .iter()
            .map(|o| o.data.bytes + o.scales.bytes + o.mx_scales.as_ref().map_or(0, |b| b.bytes))
            .sum()
    }

    fn b_for(&self, format: Fp8Format) -> &Fp8Operand {
        match format {
            Fp8Format::E4m3 => &self.b,
            Fp8Format::E5m2 => &self.grad,
        }
    }
}

fn lt_type(f: Fp8Format) -> lt_sys::cudaDataType {
    match f {
        Fp8Format::E4m3 => lt_sys::cudaDataType::CUDA_R_8F_E4M3,
        Fp8Format::E5m2 => lt_sys::cudaDataType::CUDA_R_8F_E5M2,
    }
}

fn lt_scale_mode(m: ScaleMode) -> lt_sys::cublasLtMatmulMatrixScale_t {
    use lt_sys::cublasLtMatmulMatrixScale_t as S;
    match m {
        ScaleMode::Tensor => S::CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F,
        ScaleMode::OuterVector => S::CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F,
        ScaleMode::Vec128 => S::CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
        ScaleMode::Block128 => S::CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
        ScaleMode::Mx32 => S::CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0,
    }
}

/// A matmul descriptor, its layouts and the algorithm cuBLASLt's heuristic chose.
struct Prepared {
    desc: lt_sys::cublasLtMatmulDesc_t,
    a: lt_sys::cublasLtMatrixLayout_t,
    b: lt_sys::cublasLtMatrixLayout_t,
    c: lt_sys::cublasLtMatrixLayout_t,
    algo: lt_sys::cublasLtMatmulAlgo_t,
    /// The plan it runs (the asked one, or its per-tensor fallback).
    plan: Fp8GemmPlan,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        // SAFETY: created once each, destroyed once; nothing can be reported from drop.
        unsafe {
            let _ = lt::destroy_matrix_layout(self.c);
            let _ = lt::destroy_matrix_layout(self.b);
            let _ = lt::destroy_matrix_layout(self.a);
            let _ = lt::destroy_matmul_desc(self.desc);
        }
    }
}

/// What became of an FP8 call.
#[derive(Clone, Debug, PartialEq)]
pub enum Fp8Outcome {
    /// Ran as planned, or (with a note) with per-tensor scales where cuBLASLt had no kernel
    /// for the recipe's.
    Ran(Option<String>),
    /// cuBLASLt has no FP8 kernel for it: the caller runs it in bf16, with this note.
    Unsupported(String),
}

/// A cuBLASLt handle, its workspace, and the calls prepared so far.
pub struct LtHandle {
    raw: lt_sys::cublasLtHandle_t,
    workspace: DeviceBuffer,
    prepared: HashMap<Fp8GemmPlan, Result<(Prepared, Option<String>), String>>,
}

impl LtHandle {
    /// A handle with a workspace of `workspace_bytes` (`fp8::lt_workspace_bytes`).
    pub fn new(workspace_bytes: u64) -> Result<LtHandle, RuntimeError> {
        let raw = lt::create_handle().map_err(|e| blas_lt("cublasLtCreate", e))?;
        let workspace = match DeviceBuffer::new(workspace_bytes) {
            Ok(w) => w,
            Err(e) => {
                // SAFETY: created above, destroyed once.
                let _ = unsafe { lt::destroy_handle(raw) };
                return Err(e);
            }
        };
        Ok(LtHandle {
            raw,
            workspace,
            prepared: HashMap::new(),
        })
    }

    pub fn workspace_bytes(&self) -> u64 {
        self.workspace.bytes
    }

    /// Descriptors and algorithm of `plan`; `Ok(Err(status))` where cuBLASLt refuses it.
    fn try_prepare(&self, plan: &Fp8GemmPlan) -> Result<Result<Prepared, String>, RuntimeError> {
        use lt_sys::cublasLtMatmulDescAttributes_t as D;
        let desc = lt::create_matmul_desc(
            lt_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            lt_sys::cudaDataType::CUDA_R_32F,
        )
        .map_err(|e| blas_lt("cublasLtMatmulDescCreate", e))?;
        let op_t = cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T as i32;
        let op_n = cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N as i32;
        let fast = i8::from(plan.fast_accum);
        let set = |attr: D, ptr: *const c_void, size: usize| {
            // SAFETY: `ptr` points at `size` bytes of the attribute's type, live for the call.
            unsafe { lt::set_matmul_desc_attribute(desc, attr, ptr, size) }
        };
        let i32_size = std::mem::size_of::<i32>();
        let mut attrs = vec![
            set(
                D::CUBLASLT_MATMUL_DESC_TRANSA,
                (&op_t as *const i32).cast(),
                i32_size,
            ),
            set(
                D::CUBLASLT_MATMUL_DESC_TRANSB,
                (&op_n as *const i32).cast(),
                i32_size,
            ),
            set(
                D::CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                (&fast as *const i8).cast(),
                1,
            ),
        ];
        if plan.a_scale != ScaleMode::Tensor || plan.b_scale != ScaleMode::Tensor {
            let a_mode = lt_scale_mode(plan.a_scale) as u32 as i32;
            let b_mode = lt_scale_mode(plan.b_scale) as u32 as i32;
            attrs.push(set(
                D::CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                (&a_mode as *const i32).cast(),
                i32_size,
            ));
            attrs.push(set(
                D::CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                (&b_mode as *const i32).cast(),
                i32_size,
            ));
        }
        let refuse = |desc, why: String| -> Result<Result<Prepared, String>, RuntimeError> {
            // SAFETY: created above, destroyed once.
            let _ = unsafe { lt::destroy_matmul_desc(desc) };
            Ok(Err(why))
        };
        if let Some(Err(e)) = attrs.into_iter().find(Result::is_err) {
            return refuse(desc, format!("cublasLtMatmulDescSetAttribute: {:?}", e.0));
        }
        // The layouts made so far, destroyed with the descriptor if a later step fails.
        let mut made: Vec<lt_sys::cublasLtMatrixLayout_t> = Vec::with_capacity(3);
        let specs = [
            (lt_type(plan.a_format), plan.k, plan.m, plan.lda),
            (lt_type(plan.b_format), plan.k, plan.n, plan.ldb),
            (lt_sys::cudaDataType::CUDA_R_16BF, plan.m, plan.n, plan.ldc),
        ];
        for (t, rows, cols, ld) in specs {
            match lt::create_matrix_layout(t, rows, cols, ld as i64) {
                Ok(l) => made.push(l),
                Err(e) => {
                    // SAFETY: created above, destroyed once.
                    unsafe {
                        for l in made {
                            let _ = lt::destroy_matrix_layout(l);
                        }
                        let _ = lt::destroy_matmul_desc(desc);
                    }
                    return Err(blas_lt("cublasLtMatrixLayoutCreate", e));
                }
            }
        }
        let [a, b, c] = [made[0], made[1], made[2]];
        let pref = match lt::create_matmul_pref() {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: created above, destroyed once.
                unsafe {
                    for l in made {
                        let _ = lt::destroy_matrix_layout(l);
                    }
                    let _ = lt::destroy_matmul_desc(desc);
                }
                return Err(blas_lt("cublasLtMatmulPreferenceCreate", e));
            }
        };
        let ws: u64 = self.workspace.bytes;
        // SAFETY: live preference; the value is one u64.
        let heuristic = unsafe {
            lt::set_matmul_pref_attribute(
                pref,
                lt_sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&ws as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
            .and_then(|()| lt::get_matmul_algo_heuristic(self.raw, desc, a, b, c, c, pref))
        };
        // SAFETY: created above, destroyed once.
        let _ = unsafe { lt::destroy_matmul_pref(pref) };
        match heuristic {
            Ok(h) => Ok(Ok(Prepared {
                desc,
                a,
                b,
                c,
                algo: h.algo,
                plan: *plan,
            })),
            Err(e) => {
                // SAFETY: created above, destroyed once.
                unsafe {
                    let _ = lt::destroy_matrix_layout(c);
                    let _ = lt::destroy_matrix_layout(b);
                    let _ = lt::destroy_matrix_layout(a);
                }
                refuse(desc, format!("cublasLtMatmulAlgoGetHeuristic: {:?}", e.0))
            }
        }
    }

    /// `plan` prepared, falling back to per-tensor scales where cuBLASLt has no kernel for its
    /// scale modes (with the note saying so); `Err`: the note of a call it cannot run at all.
    fn prepare(&mut self, plan: &Fp8GemmPlan) -> Result<(), RuntimeError> {
        if self.prepared.contains_key(plan) {
            return Ok(());
        }
        let shape = format!("{}x{}x{}", plan.m, plan.n, plan.k);
        let entry = match self.try_prepare(plan)? {
            Ok(p) => Ok((p, None)),
            Err(why) if plan.a_scale != ScaleMode::Tensor || plan.b_scale != ScaleMode::Tensor => {
                match self.try_prepare(&plan.per_tensor())? {
                    Ok(p) => Ok((
                        p,
                        Some(format!(
                            "cuBLASLt has no FP8 kernel with {} x {} scales for {shape} (m x n x k, cuBLASLt's) on this GPU and library ({why}): it ran with per-tensor scales",
                            plan.a_scale.name(),
                            plan.b_scale.name()
                        )),
                    )),
                    Err(why) => Err(why),
                }
            }
            Err(why) => Err(why),
        };
        let entry = entry.map_err(|why| {
            format!(
                "cuBLASLt has no FP8 kernel for {shape} (m x n x k, cuBLASLt's; {} x {}) on this GPU and library ({why}): it ran in bf16",
                plan.a_format.name(),
                plan.b_format.name()
            )
        });
        self.prepared.insert(*plan, entry);
        Ok(())
    }

    /// Issues `plan` (all its calls) on `stream`, writing bf16 into `out`.
    pub fn run(
        &mut self,
        ops: &Fp8Operands,
        out: &DeviceBuffer,
        plan: &Fp8GemmPlan,
        stream: drv_sys::CUstream,
    ) -> Result<Fp8Outcome, RuntimeError> {
        let [a_bytes, b_bytes] = plan.operand_bytes();
        let out_bytes = plan.m.saturating_mul(plan.n).saturating_mul(2);
        let b_op = ops.b_for(plan.b_format);
        if a_bytes > ops.a.data.bytes || b_bytes > b_op.data.bytes || out_bytes > out.bytes {
            return Err(RuntimeError::Unsupported(format!(
                "FP8 GEMM {}x{}x{} needs {a_bytes}/{b_bytes}/{out_bytes} bytes, the workspace holds {}/{}/{}",
                plan.m, plan.n, plan.k, ops.a.data.bytes, b_op.data.bytes, out.bytes
            )));
        }
        self.prepare(plan)?;
        let (p, note) = match self.prepared.get(plan) {
            Some(Ok((p, note))) => (p, note.clone()),
            Some(Err(why)) => return Ok(Fp8Outcome::Unsupported(why.clone())),
            None => return Err(RuntimeError::Unsupported("FP8 call not prepared".into())),
        };
        let [sa, sb] = [
            ops.a.scale_ptr(p.plan.a_scale)?,
            b_op.scale_ptr(p.plan.b_scale)?,
        ];
        let ptr_size = std::mem::size_of::<*const c_void>();
        use lt_sys::cublasLtMatmulDescAttributes_t as D;
        // SAFETY: live descriptor; each value is one device pointer.
        unsafe {
            lt::set_matmul_desc_attribute(
                p.desc,
                D::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                (&sa as *const *const c_void).cast(),
                ptr_size,
            )
            .and_then(|()| {
                lt::set_matmul_desc_attribute(
                    p.desc,
                    D::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                    (&sb as *const *const c_void).cast(),
                    ptr_size,
                )
            })
        }
        .map_err(|e| blas_lt("cublasLtMatmulDescSetAttribute", e))?;
        let alpha: f32 = 1.0;
        let beta: f32 = 0.0;
        for _ in 0..plan.calls {
            // SAFETY: operands, scales and output hold what the plan reads and writes (checked
            // above); alpha/beta are host f32 (the default pointer mode, fp32 scale type).
            unsafe {
                lt::matmul(
                    self.raw,
                    p.desc,
                    (&alpha as *const f32).cast(),
                    (&beta as *const f32).cast(),
                    ops.a.data.as_ptr(),
                    p.a,
                    b_op.data.as_ptr(),
                    p.b,
                    out.as_ptr(),
                    p.c,
                    out.as_ptr(),
                    p.c,
                    &p.algo,
                    self.workspace.as_ptr(),
                    self.workspace.bytes as usize,
                    stream as _,
                )
            }
            .map_err(|e| blas_lt("cublasLtMatmul", e))?;
        }
        Ok(Fp8Outcome::Ran(note))
    }
}

impl Drop for LtHandle {
    fn drop(&mut self) {
        self.prepared.clear();
        // SAFETY: created by create_handle, destroyed once.
        let _ = unsafe { lt::destroy_handle(self.raw) };
    }
}
