//! GEMM curves fitted to a public microbenchmark: timed GEMMs of training shapes on normally
//! distributed operands (the layout of data/microbench/*.json, PyTorch's `a @ b` in bf16 and
//! `torch._scaled_mm` in FP8 with tensorwise and rowwise scales). A GEMM's throughput depends
//! on its data and on its GPU's power cap: operands of one exponent draw less power, and the
//! first ~35 ms of back-to-back GEMMs after idle run before the cap binds. So the bundled Hopper
//! profiles take the curve's shape (`k_half`, tile, ramp) from GPU-timed calls on data
//! distributed like training's, and its level from rates measured once the cap binds
//! ([`capped_fraction`]; data/microbench/README.md).

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
    /// One scale per tensor, fast accumulation (the forward GEMMs' curve,
    /// `[gemm.fp8_fast_accum]`).
    #[serde(default)]
    pub fp8_tensorwise_fast_s: Option<f64>,
    /// 1 x 128 scales for A, 128 x 128 for B (1 x 128 for both in weight-gradient shapes).
    #[serde(default)]
    pub fp8_blockwise_s: Option<f64>,
}

/// One shape timed back to back long enough for the power cap to bind: its rate in the first
/// 20 ms after idle and once capped.
#[derive(Clone, Debug, Deserialize)]
pub struct SustainedTiming {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    /// `bf16`, `fp8_tensorwise`, `fp8_rowwise`, `fp8_blockwise` (or another column's name).
    pub dtype: String,
    pub first_20ms_tflops: f64,
    pub capped_tflops: f64,
}

/// The file: the GPU's name, the GEMM timings and, where measured, the sustained rates (other
/// sections are read elsewhere).
#[derive(Clone, Debug, Deserialize)]
pub struct Microbench {
    pub gpu: String,
    pub gemm: Vec<GemmTiming>,
    #[serde(default)]
    pub sustained: Vec<SustainedTiming>,
}

/// Which column of the timings to fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmColumn {
    Bf16,
    Fp8Tensorwise,
    Fp8Rowwise,
    Fp8Blockwise,
    /// Tensorwise scales with fast accumulation (forward GEMMs, as Transformer Engine and
    /// torchao run them).
    Fp8TensorwiseFast,
}

impl GemmColumn {
    /// The `dtype` a sustained timing of this column names.
    fn dtype(self) -> &'static str {
        match self {
            GemmColumn::Bf16 => "bf16",
            GemmColumn::Fp8Tensorwise => "fp8_tensorwise",
            GemmColumn::Fp8Rowwise => "fp8_rowwise",
            GemmColumn::Fp8Blockwise => "fp8_blockwise",
            GemmColumn::Fp8TensorwiseFast => "fp8_tensorwise_fast",
        }
    }

    fn seconds(self, t: &GemmTiming) -> Option<f64> {
        match self {
            GemmColumn::Bf16 => t.bf16_s,
            GemmColumn::Fp8Tensorwise => t.fp8_tensorwise_s,
            GemmColumn::Fp8Rowwise => t.fp8_rowwise_s,
            GemmColumn::Fp8Blockwise => t.fp8_blockwise_s,
            GemmColumn::Fp8TensorwiseFast => t.fp8_tensorwise_fast_s,
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

/// Fraction of a fitted curve's rate the GPU holds once its power cap binds: the median, over
/// the file's sustained timings of `column`, of the capped rate over the curve's rate at that
/// shape. `None` where the file has no sustained timing of the column.
///
/// A curve fitted to short, GPU-timed calls describes the GPU before the cap binds; scaling its
/// rate by this fraction gives the rate of a job whose GEMMs run for longer than the GPU's
/// power budget lasts (docs/measurements/2026-11-30-h200-fp8-and-power.md).
pub fn capped_fraction(bench: &Microbench, column: GemmColumn, fit: &GemmFit) -> Option<f64> {
    let ratios: Vec<f64> = bench
        .sustained
        .iter()
        .filter(|t| t.dtype == column.dtype() && t.capped_tflops > 0.0)
        .map(|t| {
            let flops = 2.0 * t.m as f64 * t.n as f64 * t.k as f64;
            let curve_tflops = flops / fit.call_ns(t.m, t.n, t.k) * 1e9 / 1e12;
            t.capped_tflops / curve_tflops
        })
        .filter(|r| r.is_finite())
        .collect();
    twin_sim::stats::median(&ratios)
}

#[cfg(test)]
mod tests {
    use super::*;
    use twin_sim::profile::{parse_str, Param};

    const H200: &str = include_str!("../../data/microbench/h200-2026-11-28.json");
    const H200_GRAPH: &str = include_str!("../../data/microbench/h200-2026-11-30-graph.json");
    const H100_PROFILE: &str = include_str!("../../scenarios/profiles/h100-dgx.toml");
    const H200_PROFILE: &str = include_str!("../../scenarios/profiles/h200-dgx.toml");
    const GRAND_TETON_PROFILE: &str =
        include_str!("../../scenarios/profiles/h100-grand-teton.toml");

    fn close(p: &Param, fitted: f64, rel: f64) {
        assert!(
            (p.value - fitted).abs() <= rel * fitted.abs().max(1.0),
            "profile {} vs refit {fitted}",
            p.value
        );
    }

    /// A column's curve under the power cap: the fit to the GPU-timed calls, its rate (and
    /// the rate's interval) scaled by the capped fraction of the same file.
    fn capped_fit(bench: &Microbench, column: GemmColumn) -> GemmFit {
        let mut fit = fit_column(bench, column).unwrap();
        let cap = capped_fraction(bench, column, &fit).unwrap();
        fit.rate_flops_per_s.value *= cap;
        fit.rate_flops_per_s.ci95 = fit.rate_flops_per_s.ci95.map(|r| r * cap);
        fit
    }

    /// The bundled Hopper profiles' GEMM curves are the fits to the GPU-timed calls of
    /// 2026-11-30 at the capped rate (bf16, and FP8 with tensorwise, rowwise and blockwise
    /// scales, and tensorwise with fast accumulation). Refitting gives them back (to the
    /// rounding they are written with).
    #[test]
    fn hopper_profiles_hold_the_microbenchmark_fits() {
        let graph = parse(H200_GRAPH).unwrap();
        assert_eq!(graph.gpu, "NVIDIA H200");
        let bf16 = capped_fit(&graph, GemmColumn::Bf16);
        let fp8 = capped_fit(&graph, GemmColumn::Fp8Tensorwise);
        assert_eq!(bf16.quality.samples, 152);
        assert!(bf16.quality.r2 > 0.97 && fp8.quality.r2 > 0.97);
        let rowwise = capped_fit(&graph, GemmColumn::Fp8Rowwise);
        let blockwise = capped_fit(&graph, GemmColumn::Fp8Blockwise);
        let fast = capped_fit(&graph, GemmColumn::Fp8TensorwiseFast);
        for text in [H100_PROFILE, H200_PROFILE, GRAND_TETON_PROFILE] {
            let p = parse_str(text, "profile.toml").unwrap();
            let peak_bf16 = p.peak_bf16_flops_per_s.value;
            let rate = p.gemm_curve().max_efficiency * peak_bf16;
            // The Grand Teton part's peak is its own; its curves are the same fractions of it.
            let scale = peak_bf16 / 989e12;
            let want = bf16.rate_flops_per_s.value * scale;
            assert!((rate - want).abs() < 1e-3 * rate, "{rate} vs {want}");
            close(&p.gemm_k_half, bf16.k_half.value, 0.01);
            close(&p.gemm_ramp_ns, bf16.ramp_ns.value, 0.01);
            assert_eq!(
                (p.gemm_tile_m.value, p.gemm_tile_n.value),
                (bf16.tile_m as f64, bf16.tile_n as f64)
            );
            // Each FP8 section holds its column's fit, its efficiency over the FP8 peak.
            for (c, fit) in [
                (&p.gemm_fp8, &fp8),
                (&p.gemm_fp8_rowwise, &rowwise),
                (&p.gemm_fp8_blockwise, &blockwise),
                (&p.gemm_fp8_fast_accum, &fast),
            ] {
                let c = c.as_ref().unwrap();
                let rate = c.max_efficiency.value * p.peak_fp8_flops_per_s.value;
                let want = fit.rate_flops_per_s.value * p.peak_fp8_flops_per_s.value / 1979e12;
                assert!((rate - want).abs() < 1e-3 * rate, "{rate} vs {want}");
                close(&c.k_half, fit.k_half.value, 0.01);
                close(&c.ramp_ns, fit.ramp_ns.value, 0.01);
                assert_eq!(
                    (c.tile_m.value, c.tile_n.value),
                    (fit.tile_m as f64, fit.tile_n as f64)
                );
            }
        }
    }

    /// Under the power cap a GEMM runs at 0.83-0.93 of the short-call curve: the capped
    /// fraction is measured, not assumed, and lies there for both dtypes.
    #[test]
    fn the_capped_fraction_is_below_one() {
        let graph = parse(H200_GRAPH).unwrap();
        for column in [
            GemmColumn::Bf16,
            GemmColumn::Fp8Tensorwise,
            GemmColumn::Fp8Rowwise,
            GemmColumn::Fp8TensorwiseFast,
        ] {
            let fit = fit_column(&graph, column).unwrap();
            let cap = capped_fraction(&graph, column, &fit).unwrap();
            assert!((0.83..0.93).contains(&cap), "{column:?}: {cap}");
        }
        // No sustained timing of a column: no fraction.
        let means = parse(H200).unwrap();
        let fit = fit_column(&means, GemmColumn::Bf16).unwrap();
        assert_eq!(capped_fraction(&means, GemmColumn::Bf16, &fit), None);
    }

    /// Scales per block cost FP8 GEMMs speed: at the same shapes, timed the same way, the
    /// blockwise curve's rate is below rowwise's, and rowwise's below tensorwise's.
    #[test]
    fn finer_fp8_scales_run_slower() {
        let graph = parse(H200_GRAPH).unwrap();
        let rate = |c| fit_column(&graph, c).unwrap().rate_flops_per_s.value;
        let (tensorwise, rowwise, blockwise) = (
            rate(GemmColumn::Fp8Tensorwise),
            rate(GemmColumn::Fp8Rowwise),
            rate(GemmColumn::Fp8Blockwise),
        );
        assert!(
            blockwise < rowwise && rowwise < tensorwise,
            "{blockwise} {rowwise} {tensorwise}"
        );
    }

    /// The GPU-timed fit prices a call's fixed cost at a few microseconds: the 2026-11-28
    /// means, timed from the host, carried PyTorch's dispatch of small calls in their ramp.
    #[test]
    fn gpu_timed_calls_have_a_smaller_ramp_than_host_timed_means() {
        let graph = fit_column(&parse(H200_GRAPH).unwrap(), GemmColumn::Fp8Tensorwise).unwrap();
        let means = fit_column(&parse(H200).unwrap(), GemmColumn::Fp8Tensorwise).unwrap();
        assert!(graph.ramp_ns.value < 5_000.0, "{:?}", graph.ramp_ns);
        assert!(
            graph.ramp_ns.ci95[1] < means.ramp_ns.ci95[0],
            "{graph:?} {means:?}"
        );
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
