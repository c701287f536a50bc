//! GEMM curves fitted to a public microbenchmark: timed GEMMs of training shapes on normally
//! distributed operands (the layout of data/microbench/h200-2026-11-28.json, PyTorch's
//! `a @ b` in bf16 and `torch._scaled_mm` in FP8 with tensorwise and rowwise scales). A GEMM's
//! throughput depends on its data: operands of one exponent draw less power and hold higher
//! clocks than a training run's, so the bundled Hopper profiles take their GEMM curves from
//! data distributed like training's (docs/measurements/2026-11-28-h200-microbench.md).

use crate::fit::gemm::{fit, GemmFit, GemmPoint, Operands};
use crate::fit::FitError;
use serde::Deserialize;

/// One timed shape; a field is absent where that dtype was not timed.
#[derive(Clone, Debug, Deserialize)]
pub struct GemmTiming {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub bf16_s: Option<f64>,
    pub fp8_tensorwise_s: Option<f64>,
    pub fp8_rowwise_s: Option<f64>,
}

/// The file: the GPU's name and the GEMM timings (other sections are read elsewhere).
#[derive(Clone, Debug, Deserialize)]
pub struct Microbench {
    pub gpu: String,
    pub gemm: Vec<GemmTiming>,
}

/// Which column of the timings to fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmColumn {
    Bf16,
    Fp8Tensorwise,
    Fp8Rowwise,
}

impl GemmColumn {
    fn seconds(self, t: &GemmTiming) -> Option<f64> {
        match self {
            GemmColumn::Bf16 => t.bf16_s,
            GemmColumn::Fp8Tensorwise => t.fp8_tensorwise_s,
            GemmColumn::Fp8Rowwise => t.fp8_rowwise_s,
        }
    }
}

/// Tile sides the fit tries (cuBLAS/cuBLASLt Hopper kernels use 64 to 256).
pub const HOPPER_TILES: [u64; 3] = [64, 128, 256];

/// Parses the microbenchmark JSON.
pub fn parse(text: &str) -> Result<Microbench, serde_json::Error> {
    serde_json::from_str(text)
}

/// The GEMM curve of one column, fitted like a calibration's sweep (crate::fit::gemm).
pub fn fit_column(bench: &Microbench, column: GemmColumn) -> Result<GemmFit, FitError> {
    let points: Vec<GemmPoint> = bench
        .gemm
        .iter()
        .filter_map(|t| {
            let s = column.seconds(t)?;
            Some(GemmPoint {
                m: t.m,
                n: t.n,
                k: t.k,
                batch: 1,
                time_ns: s * 1e9,
                cold: false,
            })
        })
        .collect();
    fit(&points, &HOPPER_TILES, Operands::Free)
}

#[cfg(test)]
mod tests {
    use super::*;
    use twin_sim::profile::{parse_str, Param};

    const H200: &str = include_str!("../../data/microbench/h200-2026-11-28.json");
    const H100_PROFILE: &str = include_str!("../../scenarios/profiles/h100-dgx.toml");
    const H200_PROFILE: &str = include_str!("../../scenarios/profiles/h200-dgx.toml");

    fn close(p: &Param, fitted: f64, rel: f64) {
        assert!(
            (p.value - fitted).abs() <= rel * fitted.abs().max(1.0),
            "profile {} vs refit {fitted}",
            p.value
        );
    }

    /// The bundled Hopper profiles' GEMM curves are the fits to the bundled microbenchmark:
    /// refitting gives them back (to the rounding they are written with).
    #[test]
    fn hopper_profiles_hold_the_microbenchmark_fits() {
        let bench = parse(H200).unwrap();
        assert_eq!(bench.gpu, "NVIDIA H200");
        let bf16 = fit_column(&bench, GemmColumn::Bf16).unwrap();
        let fp8 = fit_column(&bench, GemmColumn::Fp8Tensorwise).unwrap();
        let rowwise = fit_column(&bench, GemmColumn::Fp8Rowwise).unwrap();
        assert_eq!(bf16.quality.samples, 40);
        assert!(bf16.quality.r2 > 0.99 && fp8.quality.r2 > 0.99);
        for text in [H100_PROFILE, H200_PROFILE] {
            let p = parse_str(text, "profile.toml").unwrap();
            let peak_bf16 = p.peak_bf16_flops_per_s.value;
            let rate = p.gemm_curve().max_efficiency * peak_bf16;
            assert!(
                (rate - bf16.rate_flops_per_s.value).abs() < 1e-3 * rate,
                "{rate}"
            );
            close(&p.gemm_k_half, bf16.k_half.value, 0.01);
            close(&p.gemm_ramp_ns, bf16.ramp_ns.value, 0.01);
            assert_eq!(
                (p.gemm_tile_m.value, p.gemm_tile_n.value),
                (bf16.tile_m as f64, bf16.tile_n as f64)
            );
            // Each FP8 section holds its column's fit, its efficiency over the FP8 peak.
            for (c, fit) in [(&p.gemm_fp8, &fp8), (&p.gemm_fp8_rowwise, &rowwise)] {
                let c = c.as_ref().unwrap();
                let rate = c.max_efficiency.value * p.peak_fp8_flops_per_s.value;
                assert!(
                    (rate - fit.rate_flops_per_s.value).abs() < 1e-3 * rate,
                    "{rate}"
                );
                close(&c.k_half, fit.k_half.value, 0.01);
                close(&c.ramp_ns, fit.ramp_ns.value, 0.01);
                assert_eq!(c.tile_m.value, fit.tile_m as f64);
            }
        }
    }

    /// FP8 is not twice bf16: at the same shapes its fitted rate is 1.95x, and a
    /// rowwise-scaled GEMM is slower than a tensorwise one.
    #[test]
    fn fp8_rates_are_their_own_curve() {
        let bench = parse(H200).unwrap();
        let bf16 = fit_column(&bench, GemmColumn::Bf16).unwrap();
        let tensorwise = fit_column(&bench, GemmColumn::Fp8Tensorwise).unwrap();
        let rowwise = fit_column(&bench, GemmColumn::Fp8Rowwise).unwrap();
        let ratio = tensorwise.rate_flops_per_s.value / bf16.rate_flops_per_s.value;
        assert!((1.8..2.0).contains(&ratio), "{ratio}");
        assert!(rowwise.rate_flops_per_s.value < tensorwise.rate_flops_per_s.value);
    }
}
