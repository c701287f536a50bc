//! Assembling a [`Profile`] from a parsed file: every section's keys checked (through
//! [`Checker`]) and put in their places, the optional sections and key families defaulted.
//! Split from `profile::load`, which parses the file and holds the checks themselves.

use super::*;
use crate::scenario::framework::ATTENTION_BACKENDS;

impl Checker<'_> {
    pub(super) fn profile(&self, mut raw: RawProfile) -> Result<Profile> {
        let g = raw.gpu;
        let peak = g.peak_flops_per_s;
        let pk = "gpu.peak_flops_per_s";
        let (nvls_efficiency, nvls_min_bytes) = match raw.network.nvls {
            Some(n) => (
                Some(self.param("network.nvls.efficiency", n.efficiency, Range::Fraction)?),
                Some(self.param("network.nvls.min_bytes", n.min_bytes, Range::NonNegative)?),
            ),
            None => (None, None),
        };
        let (spill_bytes, spill_efficiency) = self.pair(
            (
                "memory.spill_bytes",
                raw.memory.spill_bytes.take(),
                Range::NonNegative,
            ),
            (
                "memory.spill_efficiency",
                raw.memory.spill_efficiency.take(),
                Range::Fraction,
            ),
        )?;
        let state = self.state_cache(&mut raw.memory)?;
        let (operand_bytes_per_s, operand_cache_bytes) = self.pair(
            (
                "gemm.operand_bytes_per_s",
                raw.gemm.operand_bytes_per_s.take(),
                Range::Positive,
            ),
            (
                "gemm.operand_cache_bytes",
                raw.gemm.operand_cache_bytes.take(),
                Range::NonNegative,
            ),
        )?;
        if let (Some(p), None) = (&raw.gemm.pack_bytes_per_s, &operand_bytes_per_s) {
            // Packing without the operand term would be read and then silently not used.
            return Err(self.invalid(
                p.value.span(),
                "gemm.pack_bytes_per_s",
                p.value.get_ref().to_string(),
                "gemm.operand_bytes_per_s and gemm.operand_cache_bytes are missing",
                "gemm.pack_bytes_per_s and gemm.cold_ramp_ns only with the two operand keys",
            ));
        }
        let (pack_bytes_per_s, cold_ramp_ns) = self.pair(
            (
                "gemm.pack_bytes_per_s",
                raw.gemm.pack_bytes_per_s.take(),
                Range::Positive,
            ),
            (
                "gemm.cold_ramp_ns",
                raw.gemm.cold_ramp_ns.take(),
                Range::NonNegative,
            ),
        )?;
        let (wake, per_idle, per_s, mean, handoff, weight, p2p_share) = match raw.host.as_mut() {
            Some(h) => (
                h.wake_ns.take(),
                h.wake_per_idle.take(),
                h.interruptions_per_s.take(),
                h.interruption_mean_ns.take(),
                h.handoff_ns.take(),
                h.compute_weight.take(),
                h.p2p_cpu_share.take(),
            ),
            None => (None, None, None, None, None, None, None),
        };
        let memory_cores = raw
            .host
            .as_mut()
            .and_then(|h| h.memory_cores.take())
            .map(|m| self.param("host.memory_cores", m, Range::AtLeastOne))
            .transpose()?;
        let handoff_ns = handoff
            .map(|h| self.param("host.handoff_ns", h, Range::NonNegative))
            .transpose()?;
        let compute_weight = weight
            .map(|w| self.param("host.compute_weight", w, Range::NonNegative))
            .transpose()?;
        let p2p_cpu_share = p2p_share
            .map(|w| self.param("host.p2p_cpu_share", w, Range::Fraction))
            .transpose()?;
        let (wake_ns, wake_per_idle) = self.pair(
            ("host.wake_ns", wake, Range::NonNegative),
            ("host.wake_per_idle", per_idle, Range::Fraction),
        )?;
        let (interruptions_per_s, interruption_mean_ns) = self.pair(
            ("host.interruptions_per_s", per_s, Range::NonNegative),
            ("host.interruption_mean_ns", mean, Range::NonNegative),
        )?;
        let gemm_shape_factors = self.shape_factors(raw.gemm.shape_factors.take())?;
        let gemm_fp8 = self.gemm_curve("gemm.fp8", raw.gemm.fp8.take())?;
        let gemm_fp8_rowwise = self.gemm_curve("gemm.fp8_rowwise", raw.gemm.fp8_rowwise.take())?;
        let gemm_fp8_blockwise =
            self.gemm_curve("gemm.fp8_blockwise", raw.gemm.fp8_blockwise.take())?;
        let gemm_fp8_fast_accum =
            self.gemm_curve("gemm.fp8_fast_accum", raw.gemm.fp8_fast_accum.take())?;
        let hbm_bandwidth_bytes_per_s = self.param(
            "gpu.hbm_bandwidth_bytes_per_s",
            g.hbm_bandwidth_bytes_per_s,
            Range::Positive,
        )?;
        let peak_bf16_flops_per_s =
            self.param(&format!("{pk}.bf16"), peak.bf16, Range::Positive)?;
        let (gemm_max_efficiency, gemm_bf16_flops_per_s) = self.fraction_or_absolute(
            ("gemm.max_efficiency", raw.gemm.max_efficiency.take()),
            ("gemm.bf16_flops_per_s", raw.gemm.bf16_flops_per_s.take()),
            ("gpu.peak_flops_per_s.bf16", &peak_bf16_flops_per_s),
        )?;
        let (memory_efficiency, memory_bandwidth_bytes_per_s) = self.fraction_or_absolute(
            ("memory.efficiency", raw.memory.efficiency.take()),
            (
                "memory.bandwidth_bytes_per_s",
                raw.memory.bandwidth_bytes_per_s.take(),
            ),
            ("gpu.hbm_bandwidth_bytes_per_s", &hbm_bandwidth_bytes_per_s),
        )?;
        Ok(Profile {
            name: raw.name,
            bundled: None,
            description: raw.description,
            gpu: g.name,
            sm_count: self.param("gpu.sm_count", g.sm_count, Range::Count)?,
            peak_fp32_flops_per_s: self.param(&format!("{pk}.fp32"), peak.fp32, Range::Positive)?,
            peak_tf32_flops_per_s: self.param(&format!("{pk}.tf32"), peak.tf32, Range::Positive)?,
            peak_fp16_flops_per_s: self.param(&format!("{pk}.fp16"), peak.fp16, Range::Positive)?,
            peak_bf16_flops_per_s,
            peak_fp8_flops_per_s: self.param(&format!("{pk}.fp8"), peak.fp8, Range::Positive)?,
            hbm_bandwidth_bytes_per_s,
            gemm_max_efficiency,
            gemm_bf16_flops_per_s,
            gemm_k_half: self.param("gemm.k_half", raw.gemm.k_half, Range::NonNegative)?,
            gemm_tile_m: self.param("gemm.tile_m", raw.gemm.tile_m, Range::Count)?,
            gemm_tile_n: self.param("gemm.tile_n", raw.gemm.tile_n, Range::Count)?,
            gemm_ramp_ns: self.param("gemm.ramp_ns", raw.gemm.ramp_ns, Range::NonNegative)?,
            gemm_ramp_per_product: raw.gemm.ramp_per_product,
            gemm_operand_bytes_per_s: operand_bytes_per_s,
            gemm_operand_cache_bytes: operand_cache_bytes,
            gemm_pack_bytes_per_s: pack_bytes_per_s,
            gemm_cold_ramp_ns: cold_ramp_ns,
            gemm_shape_factors,
            gemm_fp8,
            gemm_fp8_rowwise,
            gemm_fp8_blockwise,
            gemm_fp8_fast_accum,
            memory_efficiency,
            memory_bandwidth_bytes_per_s,
            launch_ns: self.param("kernel.launch_ns", raw.kernel.launch_ns, Range::NonNegative)?,
            launch_per_op: raw.kernel.launch_per_op,
            intra: self.link("network.intra", raw.network.intra)?,
            inter: self.link("network.inter", raw.network.inter)?,
            nvls_efficiency,
            nvls_min_bytes,
            algorithm: self.algorithm(raw.network.algorithm)?,
            overlap_compute_slowdown: raw
                .overlap
                .map(|o| {
                    self.param(
                        "overlap.compute_slowdown",
                        o.compute_slowdown,
                        Range::Slowdown,
                    )
                })
                .transpose()?,
            checkpoint_bandwidth_bytes_per_s: raw
                .checkpoint
                .map(|c| {
                    self.param(
                        "checkpoint.bandwidth_bytes_per_s",
                        c.bandwidth_bytes_per_s,
                        Range::Positive,
                    )
                })
                .transpose()?,
            memory_alloc_bytes_per_s: raw
                .memory
                .alloc_bytes_per_s
                .map(|a| self.param("memory.alloc_bytes_per_s", a, Range::Positive))
                .transpose()?,
            memory_alloc_fixed_ns: raw
                .memory
                .alloc_fixed_ns
                .map(|a| self.param("memory.alloc_fixed_ns", a, Range::NonNegative))
                .transpose()?,
            op_overhead_ns: raw
                .kernel
                .op_overhead_ns
                .map(|o| self.param("kernel.op_overhead_ns", o, Range::NonNegative))
                .transpose()?,
            memory_spill_bytes: spill_bytes,
            memory_spill_efficiency: spill_efficiency,
            memory_state: state,
            memory_cold_efficiency: raw
                .memory
                .cold_efficiency
                .take()
                .map(|c| self.param("memory.cold_efficiency", c, Range::Fraction))
                .transpose()?,
            host_cores: raw
                .host
                .map(|h| self.param("host.cores", h.cores, Range::Count))
                .transpose()?,
            host_interruptions_per_s: interruptions_per_s,
            host_interruption_mean_ns: interruption_mean_ns,
            host_wake_ns: wake_ns,
            host_wake_per_idle: wake_per_idle,
            host_handoff_ns: handoff_ns,
            host_compute_weight: compute_weight,
            host_p2p_cpu_share: p2p_cpu_share,
            host_memory_cores: memory_cores,
            attention: raw.attention.map(|a| self.attention(a)).transpose()?,
            provenance: raw
                .provenance
                .into_iter()
                .map(|(k, v)| match v {
                    toml::Value::String(s) => (k, s),
                    other => (k, other.to_string()),
                })
                .collect(),
            fit: raw.fit.map(|f| FitQuality {
                method: f.method,
                data: f.data,
                samples: f.samples,
                rms_relative_error: f.rms_relative_error,
                max_relative_error: f.max_relative_error,
                holdout_samples: f.holdout_samples,
                holdout_max_relative_error: f.holdout_max_relative_error,
            }),
        })
    }
}

impl Checker<'_> {
    /// A dtype's own GEMM curve (`[gemm.fp8]`, `[gemm.fp8_rowwise]`), each key in its range
    /// and named under `table` in errors.
    fn gemm_curve(&self, table: &str, c: Option<RawGemmCurve>) -> Result<Option<GemmParams>> {
        c.map(|c| -> Result<GemmParams> {
            let key = |k: &str| format!("{table}.{k}");
            Ok(GemmParams {
                max_efficiency: self.param(
                    &key("max_efficiency"),
                    c.max_efficiency,
                    Range::Fraction,
                )?,
                k_half: self.param(&key("k_half"), c.k_half, Range::NonNegative)?,
                tile_m: self.param(&key("tile_m"), c.tile_m, Range::Count)?,
                tile_n: self.param(&key("tile_n"), c.tile_n, Range::Count)?,
                ramp_ns: self.param(&key("ramp_ns"), c.ramp_ns, Range::NonNegative)?,
            })
        })
        .transpose()
    }

    /// `[attention]`: every curve parameter in its range. A `backend` (older profiles: the
    /// cost model now prices the scenario's framework's) must still name a backend the cost
    /// model knows, and is not kept.
    fn attention(&self, a: RawAttention) -> Result<AttentionParams> {
        if let Some(b) = a
            .backend
            .filter(|b| !ATTENTION_BACKENDS.iter().any(|(n, _)| n == b.get_ref()))
        {
            let allowed: Vec<String> = ATTENTION_BACKENDS
                .iter()
                .map(|(n, _)| format!("\"{n}\""))
                .collect();
            return Err(self.invalid(
                b.span(),
                "attention.backend",
                format!("\"{}\"", b.get_ref()),
                "unknown attention backend",
                &allowed.join(", "),
            ));
        }
        let curve =
            |key: &str, c: Option<RawAttentionCurve>| -> Result<Option<AttentionCurveParams>> {
                c.map(|c| {
                    Ok(AttentionCurveParams {
                        max_efficiency: self.param(
                            &format!("{key}.max_efficiency"),
                            c.max_efficiency,
                            Range::Positive,
                        )?,
                        keys_half: self.param(
                            &format!("{key}.keys_half"),
                            c.keys_half,
                            Range::NonNegative,
                        )?,
                        head_dim_half: self.param(
                            &format!("{key}.head_dim_half"),
                            c.head_dim_half,
                            Range::NonNegative,
                        )?,
                    })
                })
                .transpose()
            };
        let none = || RawAttentionBackend {
            forward: None,
            backward: None,
        };
        let flash = a.flash.unwrap_or_else(none);
        let cudnn = a.cudnn.unwrap_or_else(none);
        let triton = a.triton.unwrap_or_else(none);
        Ok(AttentionParams {
            flash_forward: curve("attention.flash.forward", flash.forward)?,
            flash_backward: curve("attention.flash.backward", flash.backward)?,
            cudnn_forward: curve("attention.cudnn.forward", cudnn.forward)?,
            cudnn_backward: curve("attention.cudnn.backward", cudnn.backward)?,
            triton_forward: curve("attention.triton.forward", triton.forward)?,
            triton_backward: curve("attention.triton.backward", triton.backward)?,
        })
    }
}
