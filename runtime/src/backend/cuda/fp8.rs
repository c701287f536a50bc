//! How the CUDA backend runs a compute op's GEMMs under FP8 training, decided without a device:
//! which GEMMs run in FP8 (the linear layers; the attention core and the output layer keep the
//! op's high precision, as the simulator prices them), each FP8 GEMM's cuBLASLt layout, formats,
//! scale modes and accumulation, the scales of the recipe, and the fallbacks (with a note naming
//! the shape or the recipe) where the hardware or a shape rules FP8 out.
//!
//! cuBLASLt's FP8 rules on Hopper (NVIDIA cuBLAS documentation, `cublasLtMatmul`, "FP8
//! requirements" and "Tensor Core Usage"; the CUDALibrarySamples `LtFp8Matmul` sample):
//! A transposed and B not ("TN"), every leading dimension a multiple of 16 bytes, compute
//! `CUBLAS_COMPUTE_32F` with fp32 scale type, per-tensor dequantisation scales through
//! `CUBLASLT_MATMUL_DESC_{A,B}_SCALE_POINTER` (device fp32), e4m3 for both operands or e5m2
//! for one of them. Transformer Engine applies the same checks before its FP8 GEMMs
//! (NVIDIA/TransformerEngine@d0067d0da6cb01811b8072a7d304f0e00344ce2b:
//! transformer_engine/common/gemm/cublaslt_gemm.cu: `transA = CUBLAS_OP_T`, `lda % 16 == 0`,
//! "Divisibility of 8 derived from FP8 (m * CTypeSize) % 16 == 0").
//!
//! Twin's GEMM is `C[m,n] = A[m,k] B[k,n]` with A the activations (or the output gradient) and
//! B the weight. cuBLASLt computes `D = op(A') op(B')` in column-major; Transformer Engine puts
//! the weight in A' and the activations (or the gradient, `grad_output`) in B'
//! (transformer_engine/pytorch/module/linear.py: `general_gemm(weight, inputmat)` forward,
//! `general_gemm(weight, grad_output)` for dgrad, `general_gemm(inputmat, grad_output)` for
//! wgrad). Twin runs every FP8 GEMM that way round: `m' = n`, `n' = m`, `k' = k`, A' = twin's
//! B stored `k x m'` and transposed, B' = twin's A stored `k x n'`, D `m' x n'` bf16; so
//! `lda = ldb = k` and `ldc = m' = n`. The gradient of a backward GEMM is B', as Transformer
//! Engine passes it (a wgrad runs with its output transposed relative to Transformer Engine's,
//! the same product: a full-backward op merges dgrads and wgrads, which twin's ops do not tell
//! apart).

use super::dtype::{gemm_dtype, GemmDtype};
use float8::{F8E4M3, F8E5M2};
use serde::Serialize;
use twin_sim::scenario::{Fp8Recipe, Precision};
use twin_sim::schedule::{ComputeOp, Gemm, Phase};

/// Largest finite e4m3 value (OCP FP8: 1.75 x 2^8).
pub const E4M3_MAX: f32 = 448.0;
/// Largest finite e5m2 value (1.75 x 2^15).
pub const E5M2_MAX: f32 = 57344.0;

/// The lowest compute capability with FP8 tensor cores (Ada, sm_89; Hopper is 9.0).
pub const FP8_MIN_COMPUTE_CAPABILITY: (u32, u32) = (8, 9);

/// cuBLASLt workspace of an FP8 GEMM, as Transformer Engine sizes it: 32 MiB plus 1 KiB on
/// compute capability 9.0 and later, 4 MiB before
/// (transformer_engine/pytorch/cpp_extensions/gemm.py: `get_cublas_workspace_size_bytes`).
pub fn lt_workspace_bytes(compute_capability: (u32, u32)) -> u64 {
    if compute_capability.0 >= 9 {
        32 * 1024 * 1024 + 1024
    } else {
        4 * 1024 * 1024
    }
}

/// An 8-bit float format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fp8Format {
    E4m3,
    E5m2,
}

impl Fp8Format {
    pub fn name(self) -> &'static str {
        match self {
            Fp8Format::E4m3 => "e4m3",
            Fp8Format::E5m2 => "e5m2",
        }
    }

    /// Largest finite value.
    pub fn max(self) -> f32 {
        match self {
            Fp8Format::E4m3 => E4M3_MAX,
            Fp8Format::E5m2 => E5M2_MAX,
        }
    }

    /// Code of the largest finite magnitude (e4m3: 0x7E, its 0x7F is NaN; e5m2: 0x7B, above
    /// it infinity and NaN).
    fn max_code(self) -> u8 {
        match self {
            Fp8Format::E4m3 => 0x7E,
            Fp8Format::E5m2 => 0x7B,
        }
    }

    /// The value of a code at or below [`Fp8Format::max_code`] (sign bit honoured).
    pub fn decode(self, code: u8) -> f32 {
        match self {
            Fp8Format::E4m3 => F8E4M3::from_bits(code).to_f32(),
            Fp8Format::E5m2 => F8E5M2::from_bits(code).to_f32(),
        }
    }

    /// The nearest code to `x` (ties to the even code), saturating at the largest finite
    /// magnitude as Transformer Engine's casts do; NaN maps to zero, a signed zero keeps its sign.
    pub fn encode(self, x: f32) -> u8 {
        if x.is_nan() {
            return 0;
        }
        let sign = if x.is_sign_negative() { 0x80 } else { 0 };
        if x.abs() >= self.max() {
            return sign | self.max_code();
        }
        match self {
            Fp8Format::E4m3 => F8E4M3::from_f32(x).to_bits(),
            Fp8Format::E5m2 => F8E5M2::from_f32(x).to_bits(),
        }
    }
}

/// The quantisation scale of a tensor of absolute maximum `amax` (the factor that maps it
/// onto the format's range; the GEMM is given its inverse): `fp8_max / amax`, 1 for an amax of
/// zero or not finite, the largest f32 where the quotient overflows. Transformer Engine's
/// `compute_scale_from_amax` with no epsilon and no power-of-two rounding
/// (transformer_engine/common/recipe/recipe_common.cuh).
pub fn scale_from_amax(amax: f32, fp8_max: f32) -> f32 {
    if amax == 0.0 || !amax.is_finite() {
        return 1.0;
    }
    let scale = fp8_max / amax;
    if scale.is_infinite() {
        f32::MAX
    } else {
        scale
    }
}

/// Delayed scaling's scale: from the largest amax of the history (`amax_compute_algo =
/// "max"`, Transformer Engine's default `DelayedScaling`), over `fp8_max * 2^-margin`
/// (transformer_engine/common/recipe/delayed_scaling.cu: `scaled_max = fp8_dtype_max *
/// pow(2, -margin)`). The amax of the tensor being cast is not read: that is what keeps an
/// amax reduction off the critical path.
pub fn delayed_scale(history: &[f32], fp8_max: f32, margin: i32) -> f32 {
    let amax = history
        .iter()
        .copied()
        .filter(|a| a.is_finite())
        .fold(0.0f32, f32::max);
    scale_from_amax(amax, fp8_max * 2f32.powi(-margin))
}

/// An MX block scale (E8M0, a biased power of two) for a block of absolute maximum `amax` in
/// e4m3: `2^(floor(log2 amax) - 8)` (OCP Microscaling Formats v1.0, section 6.3: the shared
/// exponent is the block's largest exponent less the element format's largest, 8 for e4m3).
pub fn mx_scale_code(amax: f32) -> u8 {
    if amax == 0.0 || !amax.is_finite() {
        return 127;
    }
    let e = amax.log2().floor() as i32 - 8;
    (e + 127).clamp(0, 254) as u8
}

/// How a GEMM operand's scales cover it (cuBLASLt's `CUBLASLT_MATMUL_MATRIX_SCALE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScaleMode {
    /// One fp32 scale for the tensor (`SCALAR_32F`).
    Tensor,
    /// One fp32 scale per row of the operand, along its outer dimension (`OUTER_VEC_32F`).
    OuterVector,
    /// One fp32 scale per 1 x 128 run along k (`VEC128_32F`).
    Vec128,
    /// One fp32 scale per 128 x 128 block (`BLK128x128_32F`).
    Block128,
    /// One E8M0 scale per 32 elements along k (`VEC32_UE8M0`, MXFP8).
    Mx32,
}

impl ScaleMode {
    pub fn name(self) -> &'static str {
        match self {
            ScaleMode::Tensor => "per-tensor",
            ScaleMode::OuterVector => "outer-vector",
            ScaleMode::Vec128 => "1x128",
            ScaleMode::Block128 => "128x128",
            ScaleMode::Mx32 => "mx-32",
        }
    }

    /// Bytes of one scale.
    pub fn element_bytes(self) -> u64 {
        match self {
            ScaleMode::Mx32 => 1,
            _ => 4,
        }
    }

    /// Scales an operand of `outer` rows of `k` elements needs (MX's swizzled layout pads
    /// rows to 128 and scale columns to 4, cuBLAS documentation "1D Block Scaling Factors
    /// Layout").
    pub fn scales(self, outer: u64, k: u64) -> u64 {
        match self {
            ScaleMode::Tensor => 1,
            ScaleMode::OuterVector => outer,
            ScaleMode::Vec128 => outer.saturating_mul(k.div_ceil(128)),
            ScaleMode::Block128 => outer.div_ceil(128).saturating_mul(k.div_ceil(128)),
            ScaleMode::Mx32 => outer
                .div_ceil(128)
                .saturating_mul(128)
                .saturating_mul(k.div_ceil(32).div_ceil(4).saturating_mul(4)),
        }
    }

    /// Bytes of the scales of such an operand.
    pub fn scale_bytes(self, outer: u64, k: u64) -> u64 {
        self.scales(outer, k).saturating_mul(self.element_bytes())
    }

    pub const ALL: [ScaleMode; 5] = [
        ScaleMode::Tensor,
        ScaleMode::OuterVector,
        ScaleMode::Vec128,
        ScaleMode::Block128,
        ScaleMode::Mx32,
    ];
}

/// Which pass a GEMM belongs to, for its formats, scales and accumulation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Forward (and its recomputation).
    Forward,
    /// Input gradients, or a full backward (dgrads and wgrads together).
    Backward,
    /// Weight gradients only (a zero-bubble schedule's "W" pass).
    WeightGradient,
}

impl Role {
    /// The role of an op's linear GEMMs; `None` for phases without FP8 GEMMs.
    pub fn of(phase: Phase) -> Option<Role> {
        match phase {
            Phase::Forward | Phase::Recompute => Some(Role::Forward),
            Phase::Backward | Phase::BackwardInput => Some(Role::Backward),
            Phase::BackwardWeight => Some(Role::WeightGradient),
            Phase::Optimizer | Phase::Compress | Phase::Copy => None,
        }
    }
}

/// What the backend knows of the GPU it runs FP8 GEMMs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fp8Device {
    pub compute_capability: (u32, u32),
    pub recipe: Fp8Recipe,
}

impl Fp8Device {
    /// FP8 GEMMs need FP8 tensor cores; `Err` is the reason, for the fallback note.
    pub fn check(compute_capability: (u32, u32), recipe: Fp8Recipe) -> Result<Fp8Device, String> {
        if compute_capability < FP8_MIN_COMPUTE_CAPABILITY {
            return Err(format!(
                "this GPU (compute capability {}.{}) has no FP8 tensor cores (they need {}.{} or later)",
                compute_capability.0,
                compute_capability.1,
                FP8_MIN_COMPUTE_CAPABILITY.0,
                FP8_MIN_COMPUTE_CAPABILITY.1
            ));
        }
        Ok(Fp8Device {
            compute_capability,
            recipe,
        })
    }
}

/// One FP8 cuBLASLt call as the backend issues it, in cuBLASLt's terms (see the module
/// docs): `D[m,n] = A^T B`, A stored `k x m` (`lda = k`), B stored `k x n` (`ldb = k`), D bf16
/// (`ldc = m`), compute fp32, scale type fp32, one product per call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Fp8GemmPlan {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub lda: u64,
    pub ldb: u64,
    pub ldc: u64,
    pub a_format: Fp8Format,
    pub b_format: Fp8Format,
    pub a_scale: ScaleMode,
    pub b_scale: ScaleMode,
    /// `CUBLASLT_MATMUL_DESC_FAST_ACCUM`: accumulate in the tensor cores' reduced precision
    /// without promoting partial sums to fp32 every few k-steps.
    pub fast_accum: bool,
    /// Calls of one product each (the GEMM's `count`).
    pub calls: u32,
}

impl Fp8GemmPlan {
    /// Bytes of A (the weight) and B (activations or gradient) of one call.
    pub fn operand_bytes(&self) -> [u64; 2] {
        [self.k.saturating_mul(self.m), self.k.saturating_mul(self.n)]
    }

    /// Bytes of the A and B scales.
    pub fn scale_bytes(&self) -> [u64; 2] {
        [
            self.a_scale.scale_bytes(self.m, self.k),
            self.b_scale.scale_bytes(self.n, self.k),
        ]
    }

    /// The same call with one scale per tensor (the fallback when cuBLASLt has no kernel for
    /// the recipe's scale mode).
    pub fn per_tensor(self) -> Fp8GemmPlan {
        Fp8GemmPlan {
            a_scale: ScaleMode::Tensor,
            b_scale: ScaleMode::Tensor,
            ..self
        }
    }
}

/// The recipe's operand formats: Transformer Engine's delayed and current (tensorwise)
/// scaling default to `Format.HYBRID`, e4m3 forward and e5m2 for gradients; its block scaling
/// and MXFP8 recipes, and torchao's rowwise recipe, use e4m3 throughout
/// (transformer_engine/common/recipe/__init__.py: `fp8_format` of `DelayedScaling`,
/// `Float8CurrentScaling`, `MXFP8BlockScaling`, `Float8BlockScaling`).
fn gradient_format(recipe: Fp8Recipe) -> Fp8Format {
    match recipe {
        Fp8Recipe::Delayed | Fp8Recipe::Tensorwise => Fp8Format::E5m2,
        Fp8Recipe::Rowwise | Fp8Recipe::Blockwise | Fp8Recipe::Mxfp8 => Fp8Format::E4m3,
    }
}

/// Fast accumulation: Transformer Engine runs the forward GEMM with it and the dgrad and
/// wgrad without (transformer_engine/pytorch/module/base.py: `_2X_ACC_FPROP = False`,
/// `_2X_ACC_DGRAD = True`, `_2X_ACC_WGRAD = True`; `use_split_accumulator` is the opposite
/// of fast accumulation, cublaslt_gemm.cu: `fastAccuMode = use_split_accumulator ? 0 :
/// use_fp8`); its block-scaling recipe requires split accumulation everywhere
/// (`Float8BlockScaling.__post_init__`).
fn fast_accum(recipe: Fp8Recipe, role: Role) -> bool {
    role == Role::Forward && recipe != Fp8Recipe::Blockwise
}

/// The scale modes of A (weight, or the gradient's partner) and B, and a note where the recipe
/// runs per tensor instead. Rowwise and blockwise scaling are cuBLASLt modes of Hopper
/// (compute capability 9.x, cuBLAS 12.9+); MXFP8 needs Blackwell (10.0+). Blockwise scaling is
/// DeepSeek-V3's and Transformer Engine's `Float8BlockScaling`: 128 x 128 blocks for weights,
/// 1 x 128 for activations and gradients (a wgrad has no weight operand: 1 x 128 on both).
fn scale_modes(
    recipe: Fp8Recipe,
    role: Role,
    cc: (u32, u32),
    k: u64,
) -> (ScaleMode, ScaleMode, Option<String>) {
    let tensor = |why: String| (ScaleMode::Tensor, ScaleMode::Tensor, Some(why));
    let cc_text = format!("{}.{}", cc.0, cc.1);
    match recipe {
        Fp8Recipe::Delayed | Fp8Recipe::Tensorwise => (ScaleMode::Tensor, ScaleMode::Tensor, None),
        Fp8Recipe::Rowwise | Fp8Recipe::Blockwise if cc.0 != 9 => tensor(format!(
            "fp8_recipe = \"{}\" needs cuBLASLt's Hopper scale modes (compute capability 9.x); this GPU is {cc_text}: its FP8 GEMMs run with per-tensor scales",
            recipe.as_str()
        )),
        Fp8Recipe::Rowwise => (ScaleMode::OuterVector, ScaleMode::OuterVector, None),
        Fp8Recipe::Blockwise => match role {
            Role::WeightGradient => (ScaleMode::Vec128, ScaleMode::Vec128, None),
            Role::Forward | Role::Backward => (ScaleMode::Block128, ScaleMode::Vec128, None),
        },
        Fp8Recipe::Mxfp8 if cc.0 < 10 => tensor(format!(
            "fp8_recipe = \"mxfp8\" needs Blackwell's MX scaling (compute capability 10.0 or later); this GPU is {cc_text}: its FP8 GEMMs run with per-tensor scales"
        )),
        Fp8Recipe::Mxfp8 if !k.is_multiple_of(32) => tensor(format!(
            "fp8_recipe = \"mxfp8\" scales blocks of 32 along k; a GEMM with k = {k} runs with per-tensor scales"
        )),
        Fp8Recipe::Mxfp8 => (ScaleMode::Mx32, ScaleMode::Mx32, None),
    }
}

/// The FP8 call of twin's GEMM `g` in `role`, or the note saying why it runs in bf16.
pub fn plan_fp8_gemm(
    g: &Gemm,
    role: Role,
    device: &Fp8Device,
) -> Result<(Fp8GemmPlan, Option<String>), String> {
    let shape = format!("{}x{}x{} (m x n x k)", g.m, g.n, g.k);
    if g.batch > 1 && g.count > 1 {
        return Err(format!(
            "the batched fp8 GEMM {shape} ({} products per call) runs in bf16: twin issues FP8 GEMMs one product per call",
            g.batch
        ));
    }
    if !g.k.is_multiple_of(16) || !g.n.is_multiple_of(8) {
        return Err(format!(
            "the fp8 GEMM {shape} runs in bf16: cuBLASLt's FP8 kernels need k a multiple of 16 (both operands' leading dimension, 1-byte elements) and n a multiple of 8 (the bf16 output's leading dimension, 16 bytes)"
        ));
    }
    let (m, n, k) = (g.n, g.m, g.k);
    let (a_scale, b_scale, note) = scale_modes(device.recipe, role, device.compute_capability, k);
    let b_format = match role {
        Role::Forward => Fp8Format::E4m3,
        Role::Backward | Role::WeightGradient => gradient_format(device.recipe),
    };
    Ok((
        Fp8GemmPlan {
            m,
            n,
            k,
            lda: k,
            ldb: k,
            ldc: m,
            a_format: Fp8Format::E4m3,
            b_format,
            a_scale,
            b_scale,
            fast_accum: fast_accum(device.recipe, role),
            calls: g.count,
        },
        note,
    ))
}

/// How one GEMM runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Exec {
    /// cuBLAS `GemmEx`, in this dtype.
    Blas(GemmDtype),
    /// cuBLASLt FP8.
    Fp8(Fp8GemmPlan),
}

/// One executed GEMM of an op and how it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PlannedGemm {
    pub gemm: Gemm,
    pub exec: Exec,
}

/// An op's GEMMs as the backend runs them, with the notes of any fallback.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpPlan {
    pub gemms: Vec<PlannedGemm>,
    pub notes: Vec<String>,
}

/// Whether `g` of op `c` is an FP8 GEMM in the schedule: FP8 precision (its own or the op's),
/// and not the attention kernel (`attention_part`), which FP8 training keeps in bf16.
pub fn is_fp8(c: &ComputeOp, g: &Gemm, attention_part: bool) -> bool {
    !attention_part && g.dtype.unwrap_or(c.dtype) == Precision::Fp8
}

/// Plans every executed GEMM of `c`: the op's own GEMMs, then its attention kernel's
/// equivalents (`ComputeOp::executed_gemms`). FP8 GEMMs run through cuBLASLt on `device`;
/// with no FP8 device (`Err`: the reason), or a shape or phase FP8 cannot run, in bf16 with a
/// note. The attention core runs in bf16 under FP8 training, whatever its GEMM says.
pub fn plan_op(c: &ComputeOp, device: Result<&Fp8Device, &str>, allow_tf32: bool) -> OpPlan {
    let mut out = OpPlan::default();
    let high = |p: Precision| match p {
        Precision::Fp8 => GemmDtype::Bf16,
        other => gemm_dtype(other, allow_tf32).dtype,
    };
    let own = c.gemms.iter().map(|g| (*g, false));
    let attention = c
        .attention
        .into_iter()
        .flat_map(|a| a.parts())
        .map(|a| (a.equivalent_gemm(), true));
    for (g, attention_part) in own.chain(attention) {
        let exec = if !is_fp8(c, &g, attention_part) {
            Exec::Blas(high(g.dtype.unwrap_or(c.dtype)))
        } else {
            let planned = match (device, Role::of(c.phase)) {
                (Err(why), _) => Err(format!(
                    "fp8 GEMMs run as bf16 ({why}); times are bf16 times"
                )),
                (Ok(_), None) => Err(format!("fp8 GEMMs of {} ops run as bf16", c.phase.short())),
                (Ok(d), Some(role)) => plan_fp8_gemm(&g, role, d),
            };
            match planned {
                Ok((plan, note)) => {
                    out.notes.extend(note);
                    Exec::Fp8(plan)
                }
                Err(note) => {
                    out.notes.push(note);
                    Exec::Blas(GemmDtype::Bf16)
                }
            }
        };
        out.gemms.push(PlannedGemm { gemm: g, exec });
    }
    out
}

/// The sizes an op's FP8 GEMMs need, whatever the recipe and device (the largest scales of
/// any mode): bytes of A, of B, and of each operand's scales. Zero when it has none.
pub fn fp8_workspace(c: &ComputeOp) -> [u64; 3] {
    let mut w = [0u64; 3];
    let any = Fp8Device {
        compute_capability: (9, 0),
        recipe: Fp8Recipe::Tensorwise,
    };
    for g in c.gemms.iter().filter(|g| is_fp8(c, g, false)) {
        let Ok((plan, _)) = plan_fp8_gemm(g, Role::Forward, &any) else {
            continue;
        };
        let [a, b] = plan.operand_bytes();
        let scales = ScaleMode::ALL
            .iter()
            .map(|s| {
                s.scale_bytes(plan.m, plan.k)
                    .max(s.scale_bytes(plan.n, plan.k))
            })
            .max()
            .unwrap_or(4);
        w[0] = w[0].max(a);
        w[1] = w[1].max(b);
        w[2] = w[2].max(scales);
    }
    w
}

/// Standard normal values, `count` of them, from splitmix64 and Box-Muller (two per draw),
/// seeded: the distribution of a training run's weights and activations.
pub fn standard_normals(count: usize, seed: u64) -> Vec<f32> {
    let mut state = seed ^ 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        // splitmix64
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut out = Vec::with_capacity(count + 1);
    while out.len() < count {
        // Two uniforms in (0, 1] and [0, 1), 32 bits each, give two normals.
        let z = next();
        let u1 = ((z >> 32) as f64 + 1.0) / 4_294_967_296.0;
        let u2 = (z & 0xFFFF_FFFF) as f64 / 4_294_967_296.0;
        let r = (-2.0 * u1.ln()).sqrt();
        let angle = std::f64::consts::TAU * u2;
        out.push((r * angle.cos()) as f32);
        out.push((r * angle.sin()) as f32);
    }
    out.truncate(count);
    out
}

/// Absolute maximum of `xs`.
pub fn amax(xs: &[f32]) -> f32 {
    xs.iter().fold(0.0f32, |a, x| a.max(x.abs()))
}

/// How many earlier steps' amaxes the delayed scale of a filled operand comes from (each step
/// is a fresh draw of the same distribution; Transformer Engine keeps 1,024 by default, whose
/// maximum a few draws of a normal tensor already approach).
pub const DELAYED_HISTORY: u64 = 4;

/// An FP8 operand's contents and its dequantisation scale, as the recipe casts it: values drawn
/// like training data (`standard_normals`, `count` of them, seeded), multiplied by the recipe's
/// scale and rounded to `format`. Tensorwise (current) scaling takes the scale from this
/// tensor's amax; delayed scaling from the amaxes of [`DELAYED_HISTORY`] earlier draws (so
/// values beyond them saturate, as in training); rowwise, blockwise and MX scaling would give
/// each row or block its own scale: the data is one distribution, so each gets the tensor's
/// (block maxima of a normal tensor lie a little below its maximum).
pub struct QuantizedBlock {
    pub codes: Vec<u8>,
    /// `1 / scale`: what cuBLASLt multiplies the product by (the `*_SCALE_POINTER` value).
    pub scale_inv: f32,
    /// The E8M0 code of the same scale, rounded down to a power of two (MX scales).
    pub mx_code: u8,
}

pub fn quantize_block(
    count: usize,
    seed: u64,
    format: Fp8Format,
    recipe: Fp8Recipe,
) -> QuantizedBlock {
    let values = standard_normals(count, seed);
    let own = amax(&values);
    let scale = match recipe {
        Fp8Recipe::Delayed => {
            let history: Vec<f32> = (1..=DELAYED_HISTORY)
                .map(|i| amax(&standard_normals(count, seed.wrapping_add(i << 32))))
                .collect();
            delayed_scale(&history, format.max(), 0)
        }
        Fp8Recipe::Mxfp8 => {
            // A power-of-two scale: the E8M0 code's value, inverted.
            1.0 / 2f32.powi(i32::from(mx_scale_code(own)) - 127)
        }
        _ => scale_from_amax(own, format.max()),
    };
    QuantizedBlock {
        codes: values.iter().map(|v| format.encode(v * scale)).collect(),
        scale_inv: 1.0 / scale,
        mx_code: mx_scale_code(own),
    }
}

#[cfg(test)]
#[path = "fp8_tests.rs"]
mod tests;
