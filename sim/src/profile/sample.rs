//! Drawing a profile from its uncertainty: every fitted parameter (`source = "fitted"`) that
//! carries a 95% confidence interval is drawn from a normal distribution with sd = (hi - lo) /
//! 3.92, clamped to the values the loader accepts for it. Seeded (splitmix64 + Box-Muller), so
//! the same seed gives the same draws. `crate::uncertainty` simulates a step per draw.

use super::load::Range;
use super::{Param, Profile, Source};

/// Draws by default (`twin simulate --samples`).
pub const DEFAULT_SAMPLES: u32 = 64;

/// A small seeded generator: splitmix64, and normals by Box-Muller.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1).
    pub fn open01(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// A standard normal draw.
    pub fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.open01(), self.open01());
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// The interval a parameter is drawn from: fitted parameters with a `ci95` only.
fn sampled(p: &Param) -> Option<[f64; 2]> {
    p.ci95.filter(|_| p.source == Source::Fitted)
}

/// The value a draw may take for a parameter of this range.
fn clamp(range: Range, v: f64, value: f64) -> f64 {
    match range {
        Range::Positive => v.max(value.abs() * 1e-3).max(f64::MIN_POSITIVE),
        Range::NonNegative => v.max(0.0),
        Range::Fraction => v.clamp(1e-6, 1.0),
        Range::Slowdown => v.clamp(0.0, 0.999),
        Range::Count => v.round().max(1.0),
        Range::AtLeastOne => v.max(1.0),
    }
}

impl Profile {
    /// Every number of the profile with its key and the range the loader enforces, in a
    /// fixed order (draws are made in this order).
    pub(super) fn params_mut(&mut self) -> Vec<(&mut Param, Range)> {
        use Range::*;
        let mut v: Vec<(&mut Param, Range)> = vec![
            (&mut self.sm_count, Count),
            (&mut self.peak_fp32_flops_per_s, Positive),
            (&mut self.peak_tf32_flops_per_s, Positive),
            (&mut self.peak_fp16_flops_per_s, Positive),
            (&mut self.peak_bf16_flops_per_s, Positive),
            (&mut self.peak_fp8_flops_per_s, Positive),
            (&mut self.hbm_bandwidth_bytes_per_s, Positive),
            (&mut self.gemm_max_efficiency, Fraction),
            (&mut self.gemm_k_half, NonNegative),
            (&mut self.gemm_tile_m, Count),
            (&mut self.gemm_tile_n, Count),
            (&mut self.gemm_ramp_ns, NonNegative),
            (&mut self.memory_efficiency, Fraction),
            (&mut self.launch_ns, NonNegative),
        ];
        for c in [
            &mut self.gemm_fp8,
            &mut self.gemm_fp8_rowwise,
            &mut self.gemm_fp8_blockwise,
            &mut self.gemm_fp8_fast_accum,
        ]
        .into_iter()
        .flatten()
        {
            v.push((&mut c.max_efficiency, Fraction));
            v.push((&mut c.k_half, NonNegative));
            v.push((&mut c.tile_m, Count));
            v.push((&mut c.tile_n, Count));
            v.push((&mut c.ramp_ns, NonNegative));
        }
        for link in [&mut self.intra, &mut self.inter] {
            v.push((&mut link.bandwidth_bytes_per_s, Positive));
            v.push((&mut link.latency_ns, NonNegative));
            v.push((&mut link.efficiency, Fraction));
            if let Some(p) = link.p2p_latency_ns.as_mut() {
                v.push((p, NonNegative));
            }
            if let Some(p) = link.p2p_bandwidth_bytes_per_s.as_mut() {
                v.push((p, Positive));
            }
        }
        let optional = [
            (self.gemm_bf16_flops_per_s.as_mut(), Positive),
            (self.memory_bandwidth_bytes_per_s.as_mut(), Positive),
            (self.nvls_efficiency.as_mut(), Fraction),
            (self.nvls_min_bytes.as_mut(), NonNegative),
            (self.overlap_compute_slowdown.as_mut(), Slowdown),
            (self.checkpoint_bandwidth_bytes_per_s.as_mut(), Positive),
            (self.memory_alloc_bytes_per_s.as_mut(), Positive),
            (self.memory_alloc_fixed_ns.as_mut(), NonNegative),
            (self.op_overhead_ns.as_mut(), NonNegative),
            (self.host_interruptions_per_s.as_mut(), NonNegative),
            (self.host_interruption_mean_ns.as_mut(), NonNegative),
            (self.host_wake_ns.as_mut(), NonNegative),
            (self.host_wake_per_idle.as_mut(), Fraction),
            (self.host_handoff_ns.as_mut(), NonNegative),
            (self.host_compute_weight.as_mut(), NonNegative),
            (self.host_p2p_cpu_share.as_mut(), Fraction),
            (self.host_memory_cores.as_mut(), AtLeastOne),
            (self.memory_spill_bytes.as_mut(), NonNegative),
            (self.memory_spill_efficiency.as_mut(), Fraction),
            (self.memory_cold_efficiency.as_mut(), Fraction),
            (self.gemm_operand_bytes_per_s.as_mut(), Positive),
            (self.gemm_operand_cache_bytes.as_mut(), NonNegative),
            (self.gemm_pack_bytes_per_s.as_mut(), Positive),
            (self.gemm_cold_ramp_ns.as_mut(), NonNegative),
            (self.host_cores.as_mut(), Count),
        ];
        v.extend(optional.into_iter().filter_map(|(p, r)| p.map(|p| (p, r))));
        if let Some(s) = self.memory_state.as_mut() {
            if let Some(w) = s.weight.as_mut() {
                v.push((w, Positive));
            }
            v.push((&mut s.resident_bytes, NonNegative));
            v.push((&mut s.evicted_bytes, Positive));
            v.push((&mut s.resident_efficiency, Positive));
            v.push((&mut s.evicted_efficiency, Positive));
            if let Some(a) = s.decay_after_ns.as_mut() {
                v.push((a, NonNegative));
            }
            if let Some(l) = s.lifetime_ns.as_mut() {
                v.push((l, Positive));
            }
        }
        v
    }

    /// True when at least one fitted parameter carries a confidence interval (a published
    /// spread on a datasheet or published figure is not sampled).
    pub fn has_intervals(&self) -> bool {
        self.clone()
            .params_mut()
            .iter()
            .any(|(p, _)| sampled(p).is_some())
    }

    /// A copy with every fitted parameter that has a `ci95` replaced by a draw (see the
    /// module doc).
    pub fn sample(&self, rng: &mut Rng) -> Profile {
        let mut out = self.clone();
        for (p, range) in out.params_mut() {
            if let Some([lo, hi]) = sampled(p) {
                let sd = (hi - lo) / 3.92;
                let v = p.value + sd * rng.normal();
                p.value = clamp(range, v, p.value);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A100: &str = include_str!("../../../scenarios/profiles/a100-dgx.toml");

    #[test]
    fn draws_stay_in_range() {
        let mut p = super::super::parse_str(A100, "a100-dgx.toml").unwrap();
        p.gemm_max_efficiency.source = Source::Fitted;
        // An interval far wider than the valid range: draws are clamped, never invalid.
        p.gemm_max_efficiency.ci95 = Some([-5.0, 5.0]);
        let mut rng = Rng::new(3);
        for _ in 0..200 {
            let v = p.sample(&mut rng).gemm_max_efficiency.value;
            assert!(v > 0.0 && v <= 1.0, "{v}");
        }
        // Normal draws: mean about 0 and sd about 1.
        let mut rng = Rng::new(11);
        let xs: Vec<f64> = (0..4000).map(|_| rng.normal()).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert!(
            mean.abs() < 0.06 && (var.sqrt() - 1.0).abs() < 0.06,
            "{mean} {var}"
        );
    }
}
