//! Hardware profiles: every cost-model parameter of one GPU + node + network in one TOML file,
//! each number with its provenance (datasheet, published measurement, or a calibration fit
//! with its confidence interval). A profile replaces the defaults of
//! [`crate::cost::Analytic`] wholesale, so a calibrated machine is one file, and the
//! calibration (issue 6) writes this same format. The format is documented in
//! docs/reference/profiles.md; bundled profiles live in scenarios/profiles/.

// Errors are ScenarioErrors (the one located input-error type), large by design; they are the
// cold path of reading a file once, so boxing them would buy nothing.
#![allow(clippy::result_large_err)]

pub mod bundled;
mod load;
pub(crate) mod sample;

pub use load::{load, parse_str};
pub use sample::{Rng, DEFAULT_SAMPLES};

use crate::scenario::{PeakFlops, Scenario};
use crate::topology::Algorithm;
use serde::Serialize;
use std::collections::BTreeMap;

/// Where a number comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// A vendor datasheet (line rates, peak FLOP/s).
    Datasheet,
    /// A published measurement (papers, vendor engineers' benchmark figures).
    Published,
    /// Fitted by a calibration to measurements; `ci95` should then be given.
    Fitted,
}

/// One number with its provenance.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Param {
    pub value: f64,
    pub source: Source,
    /// Citation: document, table, URL or the calibration run that produced the value.
    pub reference: String,
    /// 95% confidence interval `[lo, hi]`, when known.
    pub ci95: Option<[f64; 2]>,
}

/// Quality of the calibration fit that produced a profile (absent for hand-made profiles).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FitQuality {
    /// How the parameters were fitted (e.g. "grid search, least squares on log time").
    pub method: String,
    /// What was fitted against.
    pub data: String,
    /// Number of measurements used.
    pub samples: u64,
    /// Root-mean-square relative error of the fitted model over those measurements.
    pub rms_relative_error: f64,
    /// Largest relative error over those measurements.
    pub max_relative_error: f64,
    /// Measurements held out of the fit, and the model's largest relative error on them.
    pub holdout_samples: u64,
    pub holdout_max_relative_error: f64,
}

/// One link tier (per GPU, per direction).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LinkParams {
    pub bandwidth_bytes_per_s: Param,
    pub latency_ns: Param,
    /// Achieved fraction of line rate for large collectives (protocol overhead).
    pub efficiency: Param,
    /// Latency of a point-to-point transfer when it differs from `latency_ns` (the per-step
    /// latency of collectives); absent = `latency_ns`.
    pub p2p_latency_ns: Option<Param>,
    /// Achieved rate of a point-to-point transfer when it differs from the collectives'
    /// (`bandwidth_bytes_per_s` x `efficiency`); absent = that rate. The host backend's
    /// sends are one socket write, which moves bytes faster than a ring step does.
    pub p2p_bandwidth_bytes_per_s: Option<Param>,
}

/// One row of `gemm.shape_factors`, a timed shape: measured back-to-back time over the GEMM
/// curve's price for it (how the host model uses it: `host_model::shape_factors`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ShapeFactor {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub factor: f64,
}

/// `memory.state_*`: see [`crate::cost::StateCache`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StateParams {
    /// `memory.state_weight`; absent: 1 (the distance is the distinct bytes).
    pub weight: Option<Param>,
    /// `memory.state_decay_after_ns` and `state_lifetime_ns` (both or neither; see
    /// [`crate::cost::StateDecay`]); absent: the state does not leave the cache with time.
    pub decay_after_ns: Option<Param>,
    pub lifetime_ns: Option<Param>,
    pub resident_bytes: Param,
    pub evicted_bytes: Param,
    pub resident_efficiency: Param,
    pub evicted_efficiency: Param,
}

/// `[attention.<backend>.<direction>]`: one curve of `cost::AttentionCurve`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AttentionCurveParams {
    pub max_efficiency: Param,
    pub keys_half: Param,
    pub head_dim_half: Param,
}

/// `[attention]`: the curves of each fused-attention backend (see `cost::attention`); a curve
/// left out keeps the default fit. Which backend is priced is the scenario's framework's
/// (`cost::scenario_backend`); a `backend` key, which older profiles carry, is checked and not
/// kept.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AttentionParams {
    pub flash_forward: Option<AttentionCurveParams>,
    pub flash_backward: Option<AttentionCurveParams>,
    pub cudnn_forward: Option<AttentionCurveParams>,
    pub cudnn_backward: Option<AttentionCurveParams>,
    pub triton_forward: Option<AttentionCurveParams>,
    pub triton_backward: Option<AttentionCurveParams>,
}

/// A whole hardware profile; see docs/reference/profiles.md for the meaning of each field.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Profile {
    pub name: String,
    /// The bundled file's path when this is the copy built into the binary
    /// ([`bundled::Bundled::profile`]); `None` for a profile read from a file.
    #[serde(skip)]
    pub bundled: Option<&'static str>,
    pub description: String,
    /// The GPU preset name the profile describes (`a100-sxm-80gb`, ...); a scenario on another
    /// GPU is rejected by [`check_matches`].
    pub gpu: String,
    pub sm_count: Param,
    pub peak_fp32_flops_per_s: Param,
    pub peak_tf32_flops_per_s: Param,
    pub peak_fp16_flops_per_s: Param,
    pub peak_bf16_flops_per_s: Param,
    pub peak_fp8_flops_per_s: Param,
    pub hbm_bandwidth_bytes_per_s: Param,
    /// `gemm.max_efficiency`: the sustained rate of a large GEMM as a fraction of the dtype's
    /// peak. Derived as `gemm_bf16_flops_per_s / peak bf16` (no interval) when the file gives
    /// the absolute rate instead.
    pub gemm_max_efficiency: Param,
    /// `gemm.bf16_flops_per_s`: the sustained bf16 rate of a large GEMM as an absolute number
    /// (a GPU calibration's fit); when present the curve's efficiency is this over the bf16
    /// peak, whatever the datasheet says. Exclusive with `gemm.max_efficiency` in the file.
    pub gemm_bf16_flops_per_s: Option<Param>,
    pub gemm_k_half: Param,
    pub gemm_tile_m: Param,
    pub gemm_tile_n: Param,
    pub gemm_ramp_ns: Param,
    /// `gemm.ramp_per_product`: the backend runs each product of a batched GEMM as its own
    /// call (the host backend), so the ramp is paid per product (default false: once per
    /// strided-batched call, as cuBLAS runs them).
    pub gemm_ramp_per_product: bool,
    /// `gemm.operand_bytes_per_s` / `gemm.operand_cache_bytes`: a GEMM of an op whose working
    /// set exceeds `operand_cache_bytes` also loads its A and B at `operand_bytes_per_s` (host
    /// profiles; see `cost::gemm::OperandLoad`). Both or neither; absent: no such term.
    pub gemm_operand_bytes_per_s: Option<Param>,
    pub gemm_operand_cache_bytes: Option<Param>,
    /// `gemm.pack_bytes_per_s` / `gemm.cold_ramp_ns`: every product packs its A and B at
    /// `pack_bytes_per_s`, cached or not, and a call whose operands are not cached pays
    /// `cold_ramp_ns` beyond `gemm.ramp_ns` (current host profiles). Both or
    /// neither, and only with the two operand keys; absent: the load rate carries the packing.
    pub gemm_pack_bytes_per_s: Option<Param>,
    pub gemm_cold_ramp_ns: Option<Param>,
    /// `gemm.shape_factors`: the calibration's measured ratio to the curve per timed shape
    /// (current host profiles; see `host_model::shape_factors`); empty: none.
    pub gemm_shape_factors: Vec<ShapeFactor>,
    /// `[gemm.fp8]`: FP8 GEMMs' own curve (their efficiency against the FP8 peak differs
    /// from bf16's against the bf16 peak); absent: FP8 GEMMs follow the bf16 curve at the FP8
    /// peak.
    pub gemm_fp8: Option<GemmParams>,
    /// `[gemm.fp8_rowwise]`: FP8 GEMMs with one scale per row of each operand
    /// (`fp8_recipe = "rowwise"`); absent: they follow `[gemm.fp8]`.
    pub gemm_fp8_rowwise: Option<GemmParams>,
    /// `[gemm.fp8_blockwise]`: FP8 GEMMs with a scale per block, 1 x 128 for activations and
    /// gradients and 128 x 128 for weights (`fp8_recipe = "blockwise"`); absent: they follow
    /// `[gemm.fp8]`.
    pub gemm_fp8_blockwise: Option<GemmParams>,
    /// `[gemm.fp8_fast_accum]`: FP8 GEMMs with per-tensor scales and fast accumulation, the
    /// forward GEMMs of the per-tensor recipes as Transformer Engine and torchao run them;
    /// absent: forward GEMMs follow `[gemm.fp8]` as the backward's do.
    pub gemm_fp8_fast_accum: Option<GemmParams>,
    /// Achieved fraction of HBM bandwidth for streaming (memory-bound) kernels. Derived as
    /// `memory_bandwidth_bytes_per_s / hbm_bandwidth_bytes_per_s` (no interval) when the file
    /// gives the absolute bandwidth instead.
    pub memory_efficiency: Param,
    /// `memory.bandwidth_bytes_per_s`: the achieved bandwidth of memory-bound kernels as an
    /// absolute number (a GPU calibration's fit, bytes read + written per second); when
    /// present the cost model uses it instead of the datasheet times `memory_efficiency`.
    /// Exclusive with `memory.efficiency` in the file.
    pub memory_bandwidth_bytes_per_s: Option<Param>,
    /// `memory.spill_bytes` / `memory.spill_efficiency`: the bytes of one memory-bound pass
    /// beyond `spill_bytes` move at `spill_efficiency` of the bandwidth (host profiles: a pass
    /// larger than the caches). Both or neither; absent: one efficiency for every size.
    pub memory_spill_bytes: Option<Param>,
    pub memory_spill_efficiency: Option<Param>,
    /// `memory.cold_efficiency`: the optimizer's pass, over parameters, gradients and state last
    /// touched a step earlier, moves at this fraction of the bandwidth whatever its size (host
    /// profiles: a step's traffic evicts that state from the caches). Absent: as any pass.
    pub memory_cold_efficiency: Option<Param>,
    /// `memory.state_*`: the optimizer's update by how much of its state the node's
    /// last-level cache still holds (host profiles; see [`crate::cost::StateCache`]). All four
    /// or none; absent: `memory.cold_efficiency` or as any pass.
    pub memory_state: Option<StateParams>,
    pub launch_ns: Param,
    pub intra: LinkParams,
    pub inter: LinkParams,
    /// NVLink SHARP, where the NVSwitch has it.
    pub nvls_efficiency: Option<Param>,
    pub nvls_min_bytes: Option<Param>,
    /// A fixed collective algorithm; `None` lets the model pick the cheapest per call.
    pub algorithm: Option<Algorithm>,
    /// Fractional slowdown of compute that overlaps communication (SM and HBM contention);
    /// absent means none (the documented default). The engine slows the overlapping part of
    /// a compute op by it (`Analytic::overlap_compute_slowdown`, docs/reference/profiles.md).
    pub overlap_compute_slowdown: Option<Param>,
    /// Per-rank checkpoint write bandwidth; absent means
    /// [`crate::cost::DEFAULT_CHECKPOINT_BANDWIDTH_BYTES_PER_S`].
    pub checkpoint_bandwidth_bytes_per_s: Option<Param>,
    /// Rate at which an `Alloc` op allocates and touches its bytes (older host profiles, of a
    /// backend that wrote every byte of every Alloc); absent means an
    /// allocation's time does not grow with its bytes (a caching allocator).
    pub memory_alloc_bytes_per_s: Option<Param>,
    /// `memory.alloc_fixed_ns`: fixed time of each `Alloc` of a step buffer (the host
    /// backend's allocator call), with or without `alloc_bytes_per_s`; absent means none.
    pub memory_alloc_fixed_ns: Option<Param>,
    /// `kernel.op_overhead_ns`: the runtime's own time per op that is not a compute op
    /// (allocations, frees, transfers, checkpoints: the host backend's stream loop runs each
    /// like a compute op); absent means none (compute ops pay `launch_ns`).
    pub op_overhead_ns: Option<Param>,
    /// `kernel.launch_per_op`: the backend runs a compute op as one call, whatever its kernel
    /// count (the host backend), so the op pays `launch_ns` once; default false: once per
    /// kernel, as a GPU launches them.
    pub launch_per_op: bool,
    /// `[host] cores`: CPU cores the ranks of one node share for compute (host backend);
    /// absent means every rank has its own device.
    pub host_cores: Option<Param>,
    /// `[host] interruptions_per_s` / `interruption_mean_ns`: how often and how long the
    /// machine takes the core from running compute (both or neither; `host_model::jitter`).
    pub host_interruptions_per_s: Option<Param>,
    pub host_interruption_mean_ns: Option<Param>,
    /// `[host] wake_ns` / `wake_per_idle`: a transfer whose receiving core idled takes
    /// `wake_ns + wake_per_idle x idle` longer than back to back (both or neither;
    /// `host_model::wake`).
    pub host_wake_ns: Option<Param>,
    pub host_wake_per_idle: Option<Param>,
    /// `[host] handoff_ns`: how long after an op of one of a rank's threads releases an op of
    /// another the released op is issued (that thread waking and getting the core; the
    /// engine's hand-off); absent means at once.
    pub host_handoff_ns: Option<Param>,
    /// `[host] compute_weight`: the share of a core a compute op takes against a transfer's
    /// work beside it (a transfer then runs `1 + compute_weight` times its solo time); absent
    /// means the kernel's weight for the compute thread's nice level
    /// ([`crate::cost::host_compute_weight`]).
    pub host_compute_weight: Option<Param>,
    /// `[host] p2p_cpu_share`: the share of a p2p message's time each end's thread spends on
    /// its CPU (the rest it sleeps in a blocking read); absent means all of it
    /// (`cost::CostModel::p2p_cpu_share`).
    pub host_p2p_cpu_share: Option<Param>,
    /// `[host] memory_cores`: how many cores' worth of memory-bound work the machine's caches
    /// and memory serve at once (>= 1): memory-bound ops running on several cores share it
    /// (`engine::flow`); absent means every core has its own.
    pub host_memory_cores: Option<Param>,
    /// `[attention]`: fused-attention curves per backend; absent: the defaults on a GPU, and
    /// attention as GEMMs on a host profile (`[host]`), as the host backend runs it.
    pub attention: Option<AttentionParams>,
    /// `[provenance]`: where the profile was measured (machine, date, backend, versions).
    pub provenance: BTreeMap<String, String>,
    pub fit: Option<FitQuality>,
}

/// The fraction of a datasheet figure that an absolute rate is (`gemm.max_efficiency` from
/// `gemm.bf16_flops_per_s`, `memory.efficiency` from `memory.bandwidth_bytes_per_s`): derived,
/// with no interval of its own (the absolute rate carries it, and is what is sampled), and
/// not capped at 1.
pub fn derived_fraction(
    absolute: &Param,
    absolute_key: &str,
    datasheet: &Param,
    datasheet_key: &str,
) -> Param {
    Param {
        value: absolute.value / datasheet.value,
        source: absolute.source,
        reference: format!("{absolute_key} / {datasheet_key} (derived)"),
        ci95: None,
    }
}

/// A profile was made for another GPU than the scenario's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "profile '{profile}' describes GPU '{profile_gpu}' but the scenario runs on '{scenario_gpu}'; \
     use a profile for that GPU or --set cluster.gpu=\"{profile_gpu}\""
)]
pub struct GpuMismatch {
    pub profile: String,
    pub profile_gpu: String,
    pub scenario_gpu: String,
}

/// Checks that `profile` describes the scenario's GPU. A preset's alias in the profile
/// (`h200-sxm-141gb`) names the preset, as it does in a scenario's `cluster.gpu`.
pub fn check_matches(s: &Scenario, profile: &Profile) -> Result<(), GpuMismatch> {
    let profile_gpu =
        crate::scenario::gpu_preset(&profile.gpu).map_or_else(|| profile.gpu.clone(), |g| g.name);
    if s.cluster.gpu.name == profile_gpu {
        Ok(())
    } else {
        Err(GpuMismatch {
            profile: profile.name.clone(),
            profile_gpu: profile.gpu.clone(),
            scenario_gpu: s.cluster.gpu.name.clone(),
        })
    }
}

/// A loaded value as a whole number (validation has made it finite and non-negative).
pub(crate) fn whole(p: &Param) -> u64 {
    let v = p.value.round();
    if v.is_nan() || v <= 0.0 {
        0
    } else if v >= u64::MAX as f64 {
        u64::MAX
    } else {
        v as u64
    }
}

/// One dtype's GEMM curve parameters (`[gemm.fp8]`, `[gemm.fp8_rowwise]`; the meaning of each is
/// [`crate::cost::GemmCurve`]'s).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GemmParams {
    pub max_efficiency: Param,
    pub k_half: Param,
    pub tile_m: Param,
    pub tile_n: Param,
    pub ramp_ns: Param,
}

impl Profile {
    /// Sets `gemm.bf16_flops_per_s` to an absolute rate, with `gemm.max_efficiency` derived
    /// from it over the bf16 peak ([`derived_fraction`]): the two always move together.
    pub fn set_gemm_bf16_flops_per_s(&mut self, rate: Param) {
        self.gemm_max_efficiency = derived_fraction(
            &rate,
            "gemm.bf16_flops_per_s",
            &self.peak_bf16_flops_per_s,
            "gpu.peak_flops_per_s.bf16",
        );
        self.gemm_bf16_flops_per_s = Some(rate);
    }

    /// Sets `memory.bandwidth_bytes_per_s` to an absolute bandwidth, with `memory.efficiency`
    /// derived from it over the HBM datasheet figure.
    pub fn set_memory_bandwidth_bytes_per_s(&mut self, bandwidth: Param) {
        self.memory_efficiency = derived_fraction(
            &bandwidth,
            "memory.bandwidth_bytes_per_s",
            &self.hbm_bandwidth_bytes_per_s,
            "gpu.hbm_bandwidth_bytes_per_s",
        );
        self.memory_bandwidth_bytes_per_s = Some(bandwidth);
    }

    /// Dense peaks per dtype.
    pub fn peak(&self) -> PeakFlops {
        PeakFlops {
            fp32_flops_per_s: self.peak_fp32_flops_per_s.value,
            tf32_flops_per_s: self.peak_tf32_flops_per_s.value,
            fp16_flops_per_s: self.peak_fp16_flops_per_s.value,
            bf16_flops_per_s: self.peak_bf16_flops_per_s.value,
            fp8_flops_per_s: self.peak_fp8_flops_per_s.value,
        }
    }
}

#[cfg(test)]
mod tests;
