//! The cost model a hardware profile describes: every parameter of [`Analytic`] from one
//! profile file, read at the bottom layer (`crate::profile`) and turned into prices here.

use super::{
    host_issue_ns, kernel_gap_ns, scenario_backend, Analytic, AttentionCurve, AttentionModel,
    BackendCurves, GemmCurve, MemorySpill, OperandLoad, StateCache, StateDecay, DEFAULT_ATTENTION,
    DEFAULT_CHECKPOINT_BANDWIDTH_BYTES_PER_S, DEFAULT_CUDNN, DEFAULT_FLASH, DEFAULT_TRITON,
};
use crate::host_model::{Interruptions, Wake};
use crate::profile::{whole, AttentionCurveParams, GemmParams, Profile};
use crate::scenario::{Fp8Recipe, Scenario};
use crate::topology::{NvlsModel, TierModel};

impl Profile {
    /// FP8 GEMMs' own curve (`[gemm.fp8]`), with the bf16 curve's operand and shape terms
    /// (GPU profiles have none); `None` without one.
    pub fn gemm_fp8_curve(&self) -> Option<GemmCurve> {
        self.dtype_curve(self.gemm_fp8.as_ref()?)
    }

    /// The curve FP8 GEMMs of a recipe run on: `[gemm.fp8_rowwise]` for rowwise scales and
    /// `[gemm.fp8_blockwise]` for block scales where the profile has them, else `[gemm.fp8]`
    /// (the per-tensor recipes' curve, and MXFP8's: Blackwell's tensor cores apply its 1 x 32
    /// scales in the MMA at the FP8 rate, and no MXFP8 GEMM has been timed for a curve of its
    /// own); `None` without any.
    pub fn gemm_fp8_curve_for(&self, recipe: Fp8Recipe) -> Option<GemmCurve> {
        let own = match recipe {
            Fp8Recipe::Rowwise => self.gemm_fp8_rowwise.as_ref(),
            Fp8Recipe::Blockwise => self.gemm_fp8_blockwise.as_ref(),
            Fp8Recipe::Delayed | Fp8Recipe::Tensorwise | Fp8Recipe::Mxfp8 => None,
        };
        match own {
            Some(c) => self.dtype_curve(c),
            None => self.gemm_fp8_curve(),
        }
    }

    /// The curve a recipe's forward FP8 GEMMs run on where it is not the backward's:
    /// `[gemm.fp8_fast_accum]` for the per-tensor recipes (delayed and current scaling), whose
    /// forward GEMMs Transformer Engine and torchao run with fast accumulation
    /// (NVIDIA/TransformerEngine@d0067d0da6cb01811b8072a7d304f0e00344ce2b:transformer_engine/pytorch/module/base.py
    /// `_2X_ACC_FPROP = False`; pytorch/ao@36027d82d1ad9949597ea16002ff4940374b1b94:torchao/float8/config.py
    /// `gemm_config_output = Float8GemmConfig(use_fast_accum=True)`, the gradients' GEMMs
    /// without); `None` for the others (block scaling needs split accumulation everywhere,
    /// `Float8BlockScaling`; rowwise has no fast-accumulation curve) or without the section.
    pub fn gemm_fp8_forward_curve_for(&self, recipe: Fp8Recipe) -> Option<GemmCurve> {
        match recipe {
            Fp8Recipe::Delayed | Fp8Recipe::Tensorwise => {
                self.dtype_curve(self.gemm_fp8_fast_accum.as_ref()?)
            }
            Fp8Recipe::Rowwise | Fp8Recipe::Blockwise | Fp8Recipe::Mxfp8 => None,
        }
    }

    fn dtype_curve(&self, c: &GemmParams) -> Option<GemmCurve> {
        Some(GemmCurve {
            max_efficiency: c.max_efficiency.value,
            k_half: whole(&c.k_half),
            tile_m: whole(&c.tile_m),
            tile_n: whole(&c.tile_n),
            ramp_ns: whole(&c.ramp_ns),
            ..self.gemm_curve()
        })
    }

    /// The fused-attention model this profile sets: its `[attention]` curves over the defaults
    /// on a GPU; `None` (attention as GEMMs) on a host profile without `[attention]`. Its
    /// `backend` is the default's: the cost model prices the scenario's framework's
    /// ([`super::scenario_backend`]).
    pub fn attention_model(&self) -> Option<AttentionModel> {
        let a = match (&self.attention, &self.host_cores) {
            (None, Some(_)) => return None,
            (None, None) => return Some(DEFAULT_ATTENTION),
            (Some(a), _) => a,
        };
        let curve = |p: &Option<AttentionCurveParams>, d: AttentionCurve| {
            p.as_ref().map_or(d, |c| AttentionCurve {
                max_efficiency: c.max_efficiency.value,
                keys_half: c.keys_half.value,
                head_dim_half: c.head_dim_half.value,
            })
        };
        Some(AttentionModel {
            backend: DEFAULT_ATTENTION.backend,
            flash: BackendCurves {
                forward: curve(&a.flash_forward, DEFAULT_FLASH.forward),
                backward: curve(&a.flash_backward, DEFAULT_FLASH.backward),
            },
            cudnn: BackendCurves {
                forward: curve(&a.cudnn_forward, DEFAULT_CUDNN.forward),
                backward: curve(&a.cudnn_backward, DEFAULT_CUDNN.backward),
            },
            triton: BackendCurves {
                forward: curve(&a.triton_forward, DEFAULT_TRITON.forward),
                backward: curve(&a.triton_backward, DEFAULT_TRITON.backward),
            },
        })
    }

    /// The GEMM curve this profile sets.
    pub fn gemm_curve(&self) -> GemmCurve {
        GemmCurve {
            max_efficiency: self
                .gemm_bf16_flops_per_s
                .as_ref()
                .map_or(self.gemm_max_efficiency.value, |r| {
                    r.value / self.peak_bf16_flops_per_s.value
                }),
            k_half: whole(&self.gemm_k_half),
            tile_m: whole(&self.gemm_tile_m),
            tile_n: whole(&self.gemm_tile_n),
            ramp_ns: whole(&self.gemm_ramp_ns),
            ramp_per_product: self.gemm_ramp_per_product,
            operands: match (
                &self.gemm_operand_bytes_per_s,
                &self.gemm_operand_cache_bytes,
            ) {
                (Some(b), Some(c)) => Some(OperandLoad {
                    bytes_per_s: b.value,
                    cache_bytes: whole(c),
                    pack_bytes_per_s: self.gemm_pack_bytes_per_s.as_ref().map(|p| p.value),
                    cold_ramp_ns: self.gemm_cold_ramp_ns.as_ref().map_or(0, whole),
                }),
                _ => None,
            },
            shape_factors: self.gemm_shape_factors.clone(),
        }
    }

    /// The link tiers this profile sets.
    pub fn tiers(&self) -> TierModel {
        let nvls = self.nvls_efficiency.as_ref().map(|e| NvlsModel {
            efficiency: e.value,
            min_bytes: self.nvls_min_bytes.as_ref().map_or(0, whole),
        });
        TierModel {
            intra_bandwidth_bytes_per_s: self.intra.bandwidth_bytes_per_s.value,
            intra_latency_ns: whole(&self.intra.latency_ns),
            inter_bandwidth_bytes_per_s: self.inter.bandwidth_bytes_per_s.value,
            inter_latency_ns: whole(&self.inter.latency_ns),
            nvlink_efficiency: self.intra.efficiency.value,
            network_efficiency: self.inter.efficiency.value,
            nvls,
            algorithm: self.algorithm,
        }
    }
}

impl Analytic {
    /// The model of `s` priced by `profile` ([`Analytic::from_profile`]), or the defaults
    /// ([`Analytic::new`]) without one.
    pub fn priced(s: &Scenario, profile: Option<&Profile>) -> Analytic {
        match profile {
            Some(p) => Analytic::from_profile(s, p),
            None => Analytic::new(s),
        }
    }

    /// `s` with the dense peak this model prices with, which a report's MFU and HFU divide
    /// by: a profile's measured or stated peak where one priced it (a host scenario's nominal
    /// 50 GFLOP/s core against a calibrated 225 put `pp-wide.toml` at an MFU of 237%);
    /// borrowed where it is the scenario's own.
    pub fn with_priced_peak<'a>(&self, s: &'a Scenario) -> std::borrow::Cow<'a, Scenario> {
        if self.peak == s.cluster.gpu.peak {
            std::borrow::Cow::Borrowed(s)
        } else {
            let mut priced = s.clone();
            priced.cluster.gpu.peak = self.peak.clone();
            std::borrow::Cow::Owned(priced)
        }
    }

    /// The cost model a profile describes. Every parameter comes from the profile, except
    /// that the scenario's `cuda_graphs` may shorten the kernel gap ([`super::kernel_gap_ns`]); the
    /// scenario must be on the profile's GPU (see [`crate::profile::check_matches`]; the
    /// predict pipeline enforces it).
    pub fn from_profile(s: &Scenario, p: &Profile) -> Analytic {
        let (host, _) = crate::scenario::host_side(&s.cluster);
        Analytic {
            peak: p.peak(),
            hbm_bandwidth_bytes_per_s: p.hbm_bandwidth_bytes_per_s.value,
            gemm: p.gemm_curve(),
            gemm_fp8: p.gemm_fp8_curve_for(s.training.fp8_recipe),
            gemm_fp8_forward: p.gemm_fp8_forward_curve_for(s.training.fp8_recipe),
            attention: p.attention_model().map(|m| AttentionModel {
                backend: scenario_backend(s),
                ..m
            }),
            memory_efficiency: p.memory_efficiency.value,
            memory_bandwidth_bytes_per_s: p.memory_bandwidth_bytes_per_s.as_ref().map(|b| b.value),
            memory_spill: match (&p.memory_spill_bytes, &p.memory_spill_efficiency) {
                (Some(b), Some(e)) => Some(MemorySpill {
                    bytes: whole(b),
                    efficiency: e.value,
                }),
                _ => None,
            },
            memory_cold_efficiency: p.memory_cold_efficiency.as_ref().map(|c| c.value),
            state_cache: p.memory_state.as_ref().map(|s| StateCache {
                state_weight: s.weight.as_ref().map_or(1.0, |w| w.value),
                resident_bytes: whole(&s.resident_bytes),
                evicted_bytes: whole(&s.evicted_bytes).max(whole(&s.resident_bytes) + 1),
                resident_efficiency: s.resident_efficiency.value,
                evicted_efficiency: s.evicted_efficiency.value,
                decay: match (&s.decay_after_ns, &s.lifetime_ns) {
                    (Some(a), Some(l)) => Some(StateDecay {
                        after_ns: whole(a),
                        lifetime_ns: whole(l).max(1),
                    }),
                    _ => None,
                },
            }),
            node_step_bytes: None,
            wake: match (&p.host_wake_ns, &p.host_wake_per_idle) {
                (Some(w), Some(r)) => Some(Wake {
                    ns: w.value,
                    per_idle: r.value,
                }),
                _ => None,
            },
            launch_ns: kernel_gap_ns(s, whole(&p.launch_ns)),
            launch_per_op: p.launch_per_op,
            // The host backend runs an op as one call on its own thread: no eager host.
            host_issue_ns: if p.launch_per_op { 0 } else { host_issue_ns(s) },
            links: p.tiers(),
            checkpoint_bandwidth_bytes_per_s: p
                .checkpoint_bandwidth_bytes_per_s
                .as_ref()
                .map_or(DEFAULT_CHECKPOINT_BANDWIDTH_BYTES_PER_S, |c| c.value),
            host_link_bandwidth_bytes_per_s: host.link_bandwidth_bytes_per_s,
            host_memory_bandwidth_bytes_per_s: host.memory_bandwidth_bytes_per_s,
            alloc_bytes_per_s: p.memory_alloc_bytes_per_s.as_ref().map(|a| a.value),
            alloc_fixed_ns: p.memory_alloc_fixed_ns.as_ref().map_or(0, whole),
            op_overhead_ns: p.op_overhead_ns.as_ref().map_or(0, whole),
            handoff_ns: p.host_handoff_ns.as_ref().map_or(0, whole),
            compute_weight: p.host_compute_weight.as_ref().map(|w| w.value),
            p2p_cpu_share: p.host_p2p_cpu_share.as_ref().map(|w| w.value),
            memory_cores: p.host_memory_cores.as_ref().map(|m| m.value),
            interruptions: match (&p.host_interruptions_per_s, &p.host_interruption_mean_ns) {
                (Some(r), Some(m)) => Some(Interruptions {
                    rate_per_ns: r.value * 1e-9,
                    mean_ns: m.value,
                }),
                _ => None,
            },
            p2p_latency_ns: [&p.intra, &p.inter].map(|l| l.p2p_latency_ns.as_ref().map(whole)),
            p2p_bandwidth_bytes_per_s: [&p.intra, &p.inter]
                .map(|l| l.p2p_bandwidth_bytes_per_s.as_ref().map(|b| b.value)),
            host_cores: p
                .host_cores
                .as_ref()
                .map(|c| u32::try_from(whole(c)).unwrap_or(u32::MAX)),
            overlap_compute_slowdown: p.overlap_compute_slowdown.as_ref().map_or(0.0, |o| o.value),
            sm_count: Some(crate::profile::whole(&p.sm_count)).filter(|&n| n > 0),
            expert_dispatch: crate::topology::dispatch::NodeDedup::of(s),
        }
    }
}
