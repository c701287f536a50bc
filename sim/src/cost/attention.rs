//! Time of a fused attention kernel ([`crate::schedule::Attention`]): its causal work at an
//! efficiency that follows one general curve in the mean keys per query `L` (the kernel's
//! inner-loop length) and the head dimension `d`, per backend and direction:
//!
//! ```text
//! t = work_flops / (peak(dtype) * eff)
//! eff = min(1, max_efficiency * L / (L + keys_half) * d / (d + head_dim_half))
//! ```
//!
//! A short inner loop does not amortise a query tile's prologue and epilogue (loading Q,
//! rescaling and writing O), and a small head dimension makes each tile's two products short
//! against its softmax, so both terms rise to the backend's plateau. `L` is `s/2` for a causal
//! sequence of `s` (the benchmarks' causal rows) and `s` without a mask, so one curve covers
//! both. The defaults are fitted to causal `scaled_dot_product_attention` on one H200 (bf16,
//! head_dim 64 and 128, sequence 1k-64k, 32k tokens per call; backward counted as 2.5x the
//! forward's FLOPs): docs/measurements/2026-11-28-h200-attention.md. An H200 has the H100 SXM's
//! SMs and clocks (989 TFLOP/s dense bf16 both), so the fractions serve the H100 too. The
//! Triton backend's defaults are derived from the flash curve by a published ratio
//! ([`super::attention_fit`]).
//!
//! The backend priced is the one the scenario's framework file names for the scenario's GPU
//! ([`scenario_backend`]); a profile supplies the curves. A kernel computes over the head
//! dimension it was compiled for, the next one at least the model's
//! ([`AttentionBackend::kernel_head_dim`]: FlashAttention-2 runs heads of 112 in its 128
//! kernel), so `work_flops` and `d` are the kernel's; the op's `flops` keep the model's count.

use super::secs_to_ns;
pub use crate::scenario::framework::{AttentionBackend, ATTENTION_BACKENDS};
use crate::scenario::{gpu_compute_capability, Precision, Scenario};
use crate::schedule::Attention;
use serde::Serialize;

/// The attention kernel `s` runs: its framework file's backend for its GPU's compute
/// capability (`Framework::attention_backend_on`; a GPU that is no preset takes the file's
/// `backend`).
pub fn scenario_backend(s: &Scenario) -> AttentionBackend {
    s.training
        .framework
        .attention_backend_on(gpu_compute_capability(&s.cluster.gpu.name))
}

/// One direction's curve (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct AttentionCurve {
    pub max_efficiency: f64,
    pub keys_half: f64,
    pub head_dim_half: f64,
}

impl AttentionCurve {
    /// Fraction of the dtype's dense peak the kernel sustains at `keys` mean keys per query
    /// and head dimension `head_dim`.
    pub fn efficiency(&self, keys: f64, head_dim: f64) -> f64 {
        let l = keys.max(0.0);
        let d = head_dim.max(0.0);
        let shape = |x: f64, half: f64| {
            if x + half.max(0.0) > 0.0 {
                x / (x + half.max(0.0))
            } else {
                0.0
            }
        };
        (self.max_efficiency * shape(l, self.keys_half) * shape(d, self.head_dim_half)).min(1.0)
    }
}

/// Forward and backward curves of one backend.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct BackendCurves {
    pub forward: AttentionCurve,
    pub backward: AttentionCurve,
}

/// The attention part of the cost model: the backend in use and every backend's curves.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct AttentionModel {
    pub backend: AttentionBackend,
    pub flash: BackendCurves,
    pub cudnn: BackendCurves,
    pub triton: BackendCurves,
}

/// Fitted on one H200, causal SDPA, least squares on relative error over a grid of the two
/// half points (`lab/attention_fit.py`): flash forward rms 8.0% (max 20%, head_dim 64 at 1k), backward rms 2.5% (max
/// 7.3%); docs/measurements/2026-11-28-h200-attention.md.
pub const DEFAULT_FLASH: BackendCurves = BackendCurves {
    forward: AttentionCurve {
        max_efficiency: 0.4351,
        keys_half: 320.0,
        head_dim_half: 23.0,
    },
    backward: AttentionCurve {
        max_efficiency: 0.3673,
        keys_half: 512.0,
        head_dim_half: 16.0,
    },
};

/// Fitted as [`DEFAULT_FLASH`], cuDNN backend: forward rms 3.0% (max 5.5%), backward rms 1.7%
/// (max 3.0%).
pub const DEFAULT_CUDNN: BackendCurves = BackendCurves {
    forward: AttentionCurve {
        max_efficiency: 1.0233,
        keys_half: 152.0,
        head_dim_half: 74.5,
    },
    backward: AttentionCurve {
        max_efficiency: 0.6960,
        keys_half: 504.0,
        head_dim_half: 37.0,
    },
};

/// The 2022 Triton FlashAttention on an H100/H200: [`DEFAULT_FLASH`] times the Triton /
/// FlashAttention-2 throughput ratio measured on A100 at each sequence length (both kernels
/// are Ampere-style, mma.sync, so the ratio is carried to Hopper), refitted
/// ([`super::attention_fit::triton_from_flash`], which a test checks against these values);
/// `head_dim_half` is flash's, the published ratio being at head dimension 128 only.
/// Forward rms 1.5% (max 2.0%), backward rms 1.9% (max 2.4%) against the derived points.
pub const DEFAULT_TRITON: BackendCurves = BackendCurves {
    forward: AttentionCurve {
        max_efficiency: 0.1800,
        keys_half: 224.0,
        head_dim_half: 23.0,
    },
    backward: AttentionCurve {
        max_efficiency: 0.1508,
        keys_half: 384.0,
        head_dim_half: 16.0,
    },
};

/// The default: every backend's fitted curves, pricing flash until the scenario's framework
/// names its backend ([`scenario_backend`]).
pub const DEFAULT_ATTENTION: AttentionModel = AttentionModel {
    backend: AttentionBackend::Flash,
    flash: DEFAULT_FLASH,
    cudnn: DEFAULT_CUDNN,
    triton: DEFAULT_TRITON,
};

impl AttentionModel {
    /// The curve `a` runs on.
    pub fn curve(&self, a: &Attention) -> AttentionCurve {
        let b = match self.backend {
            AttentionBackend::Flash => self.flash,
            AttentionBackend::Cudnn => self.cudnn,
            AttentionBackend::Triton => self.triton,
        };
        if a.backward {
            b.backward
        } else {
            b.forward
        }
    }

    /// Seconds of `a`'s calls at `peak` FLOP/s of its dtype.
    pub fn attention_s(&self, a: &Attention, peak: f64) -> f64 {
        // Full and windowed calls each at the efficiency of their own keys per query, over
        // the head dimension of the kernel that runs them.
        a.parts()
            .map(|part| {
                let kernel = Attention {
                    head_dim: self.backend.kernel_head_dim(part.head_dim),
                    ..part
                };
                let eff = self
                    .curve(&kernel)
                    .efficiency(kernel.keys_per_query(), kernel.head_dim as f64);
                let rate = super::positive_rate(peak * eff);
                kernel.work_flops() as f64 / rate
            })
            .sum()
    }

    /// [`AttentionModel::attention_s`] in whole nanoseconds.
    pub fn attention_ns(&self, a: &Attention, peak: f64) -> u64 {
        secs_to_ns(self.attention_s(a, peak))
    }
}

/// The dtype the attention core runs in: fp8 training keeps it in bf16 (Transformer Engine
/// runs FP8 only in its linear layers unless FP8 attention is asked for).
pub fn attention_dtype(op_dtype: Precision) -> Precision {
    match op_dtype {
        Precision::Fp8 => Precision::Bf16,
        other => other,
    }
}

#[cfg(test)]
#[path = "attention_tests.rs"]
mod tests;
