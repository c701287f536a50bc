//! GEMM time as a function of shape (m, n, k) and dtype: one general curve whose few
//! parameters a hardware profile sets (from public figures or a calibration fit), instead of
//! per-shape constants.
//!
//! A GEMM `C[m,n] = A[m,k] B[k,n]` is cut into output tiles of `tile_m x tile_n`; each tile
//! runs a main loop over `k` and pays a fixed prologue/epilogue (loading the first stages of
//! the pipeline, writing C). One call costs
//!
//! ```text
//! t = max(padded_flops / (peak(dtype) * max_efficiency * k / (k + k_half)),
//!         (mk + kn + mn) * dtype_bytes / achieved_hbm) + ramp
//! padded_flops = 2 * ceil(m / tile_m) * tile_m * ceil(n / tile_n) * tile_n * k
//! ```
//!
//! - `max_efficiency`: what a large, well-shaped GEMM sustains (tensor-core issue limits,
//!   clocks under load). H100 bf16 cuBLAS: 80-82% (docs/measurements/2026-11-22-h100-cuda-
//!   backend.md).
//! - Tile padding: a dimension that is not a multiple of the tile wastes the rest of the last
//!   tile (NVIDIA, "Matrix Multiplication Background User's Guide", tile quantization).
//! - `k / (k + k_half)`: a short main loop does not amortise the per-tile prologue/epilogue;
//!   this is why per-head attention GEMMs (k = head_dim = 128) run far below peak.
//! - The roofline bound on bytes: skinny GEMMs are memory bound.
//! - [`OperandLoad`] (optional, host profiles). A CPU sgemm packs A and B into its own layout
//!   on every call: `+ (mk + kn) * dtype_bytes / pack_bytes_per_s` per product, part of
//!   [`GemmCurve::gemm_s`]. Operands that must first come in from beyond the private cache
//!   cost `cold_ramp + bytes / bytes_per_s` more ([`GemmCurve::cold_s`]). That is not part of
//!   `gemm_s`: whether an op's operands are still cached depends on the op (the cost model
//!   decides, [`OperandLoad::cache_bytes`]). GPUs leave both out: their operand traffic
//!   overlaps the tensor cores and the roofline bound above covers what does not.
//! - Shape factors (optional, host profiles): the calibration's measured ratio to the curve
//!   for the shapes it timed, interpolated for others ([`crate::host_model::shape_factors`]), multiply
//!   [`GemmCurve::gemm_s`].
//! - `ramp`: per-call fixed cost (launch to first tile, last-wave tail), which dominates
//!   small GEMMs. A batched GEMM (`Gemm::batch` products in one strided-batched call, as the
//!   per-head attention GEMMs run on a GPU) pays it once per call; where each product is its
//!   own call (the host backend's sgemm loop), `ramp_per_product` charges it per product.
//!
//! Wave quantization is left out on purpose: the schedule folds batched GEMMs (attention heads)
//! and repeated calls into one `count`, so the number of tiles in flight per kernel is not
//! known here, and charging a partial last wave per head would be wrong by the batch factor.

use super::positive_rate;
use crate::host_model::shape_factors;
use crate::profile::ShapeFactor;
use crate::schedule::Gemm;
use serde::Serialize;

/// Parameters of the GEMM curve (see the module doc).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GemmCurve {
    /// Fraction of dense peak a large, well-shaped GEMM sustains.
    pub max_efficiency: f64,
    /// Main-loop length (elements of k) at which a tile reaches half of `max_efficiency`.
    pub k_half: u64,
    /// Output tile of the kernels cuBLAS picks for large GEMMs.
    pub tile_m: u64,
    pub tile_n: u64,
    /// Fixed time per GEMM call.
    pub ramp_ns: u64,
    /// Pay `ramp_ns` per product even inside a batched call (a backend without batched GEMM
    /// calls); false: once per call.
    pub ramp_per_product: bool,
    /// Loading A and B from beyond the private cache; `None`: no such term (GPUs).
    pub operands: Option<OperandLoad>,
    /// Measured corrections by shape (host profiles, `gemm.shape_factors`); empty: none.
    /// [`GemmCurve::gemm_s`] multiplies by the one interpolated for its shape.
    pub shape_factors: Vec<ShapeFactor>,
}

/// What a CPU sgemm pays for its operands (host profiles, keys `gemm.operand_bytes_per_s`,
/// `gemm.operand_cache_bytes`, `gemm.pack_bytes_per_s` and `gemm.cold_ramp_ns`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct OperandLoad {
    /// Rate at which A and B come in from beyond the private cache, beyond packing them.
    pub bytes_per_s: f64,
    /// The private cache: an op whose working set is larger finds its operands evicted (the
    /// cost model's rule, `Analytic::compute_ns`).
    pub cache_bytes: u64,
    /// Rate at which every product packs its A and B, cached or not; `None`: not priced apart
    /// (older profiles, whose load rate carries the packing too).
    pub pack_bytes_per_s: Option<f64>,
    /// Fixed cost of a call whose operands are not cached, beyond `ramp_ns`.
    pub cold_ramp_ns: u64,
}

/// Defaults fitted to the A100 per-layer timings of Korthikanti et al. 2022 (Table 4) by
/// [`crate::validate::fit_gemm_curve`]; see scenarios/profiles/a100-dgx.toml for the
/// provenance of each number. The fitted `max_efficiency` is what a training layer's GEMMs
/// sustain (below cuBLAS's best on isolated large shapes: it also carries what the layer model
/// does not itemise, such as kernels slowed by concurrent communication).
pub const DEFAULT_GEMM_CURVE: GemmCurve = GemmCurve {
    max_efficiency: 0.75,
    k_half: 256,
    tile_m: 128,
    tile_n: 128,
    ramp_ns: 2_000,
    ramp_per_product: false,
    operands: None,
    shape_factors: Vec::new(),
};

impl GemmCurve {
    /// Efficiency (fraction of dense peak) of the compute part of one call, before the
    /// memory bound and the ramp: `max_efficiency * k/(k + k_half) * useful/padded`.
    pub fn compute_efficiency(&self, m: u64, n: u64, k: u64) -> f64 {
        if m == 0 || n == 0 || k == 0 {
            return 0.0;
        }
        let kf = k as f64;
        let k_term = kf / (kf + self.k_half as f64);
        let pad = padding_efficiency(m, self.tile_m) * padding_efficiency(n, self.tile_n);
        self.max_efficiency * k_term * pad
    }

    /// Seconds for one call of `m x n x k` at `peak_flops_per_s` and `hbm_bytes_per_s`
    /// (achieved memory bandwidth) with elements of `elem_bytes`.
    pub fn call_s(
        &self,
        m: u64,
        n: u64,
        k: u64,
        elem_bytes: u64,
        peak_flops_per_s: f64,
        hbm_bytes_per_s: f64,
    ) -> f64 {
        if m == 0 || n == 0 || k == 0 {
            return 0.0;
        }
        self.product_s(m, n, k, elem_bytes, peak_flops_per_s, hbm_bytes_per_s) + self.ramp_s()
    }

    /// Seconds for every product of `g`: `count` products plus the ramp once per call (or
    /// per product, see `ramp_per_product`).
    pub fn gemm_s(
        &self,
        g: &Gemm,
        elem_bytes: u64,
        peak_flops_per_s: f64,
        hbm_bytes_per_s: f64,
    ) -> f64 {
        if g.m == 0 || g.n == 0 || g.k == 0 {
            return 0.0;
        }
        let product = self.product_s(g.m, g.n, g.k, elem_bytes, peak_flops_per_s, hbm_bytes_per_s);
        let calls = if self.ramp_per_product {
            g.count
        } else {
            g.calls()
        };
        let pack = self
            .operands
            .and_then(|o| o.pack_bytes_per_s)
            .map_or(0.0, |r| {
                g.operand_bytes(elem_bytes) as f64 / positive_rate(r)
            });
        (f64::from(g.count) * (product + pack) + f64::from(calls) * self.ramp_s())
            * shape_factors::factor(&self.shape_factors, g.m, g.n, g.k)
    }

    fn ramp_s(&self) -> f64 {
        self.ramp_ns as f64 * 1e-9
    }

    /// Seconds a call pays beyond its cached price when `bytes` of operands must come in
    /// from beyond the private cache: the cold fixed cost and the load (0 without
    /// [`OperandLoad`]).
    pub fn cold_s(&self, bytes: u64) -> f64 {
        self.operands.map_or(0.0, |o| {
            o.cold_ramp_ns as f64 * 1e-9 + bytes as f64 / positive_rate(o.bytes_per_s)
        })
    }

    /// One product without the per-call ramp: the compute or the memory bound, whichever is
    /// longer.
    fn product_s(
        &self,
        m: u64,
        n: u64,
        k: u64,
        elem_bytes: u64,
        peak_flops_per_s: f64,
        hbm_bytes_per_s: f64,
    ) -> f64 {
        let (mf, nf, kf) = (m as f64, n as f64, k as f64);
        let flops = 2.0 * mf * nf * kf;
        let rate = positive_rate(peak_flops_per_s * self.compute_efficiency(m, n, k));
        let io = (mf * kf + kf * nf + mf * nf) * elem_bytes as f64;
        (flops / rate).max(io / positive_rate(hbm_bytes_per_s))
    }
}

/// Useful fraction of `dim` padded up to a multiple of `tile`.
fn padding_efficiency(dim: u64, tile: u64) -> f64 {
    if tile <= 1 || dim == 0 {
        return 1.0;
    }
    let tiles = dim.div_ceil(tile);
    dim as f64 / (tiles as f64 * tile as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A100_BF16: f64 = 312e12;
    const A100_HBM: f64 = 2.039e12 * 0.8;

    fn tflops(c: &GemmCurve, m: u64, n: u64, k: u64) -> f64 {
        2.0 * (m * n * k) as f64 / c.call_s(m, n, k, 2, A100_BF16, A100_HBM) / 1e12
    }

    #[test]
    fn large_square_gemm_approaches_max_efficiency() {
        let c = DEFAULT_GEMM_CURVE;
        let tf = tflops(&c, 8192, 8192, 8192);
        let ceiling = A100_BF16 * c.max_efficiency / 1e12;
        // Only the short-k term (k / (k + k_half)) and the ramp stand between them.
        let k_term = 8192.0 / (8192.0 + c.k_half as f64);
        assert!(
            tf < ceiling * k_term && tf > 0.999 * ceiling * k_term,
            "{tf} vs {ceiling}"
        );
        assert!(k_term > 0.95);
    }

    #[test]
    fn short_k_runs_below_long_k() {
        let c = DEFAULT_GEMM_CURVE;
        // Same FLOPs, same output size class: k = 128 (a head) vs k = 4096.
        let short = c.compute_efficiency(4096, 4096, 128);
        let long = c.compute_efficiency(4096, 4096, 4096);
        assert!(short < 0.85 * long, "{short} {long}");
    }

    #[test]
    fn padding_wastes_the_last_tile() {
        let c = DEFAULT_GEMM_CURVE;
        let full = c.compute_efficiency(1024, 1024, 4096);
        let ragged = c.compute_efficiency(1024 + 1, 1024, 4096);
        // 1025 rows fill 9 tiles of 128: 1025 / 1152 of the work is useful.
        let expect = full * 1025.0 / 1152.0;
        assert!((ragged - expect).abs() < 1e-12, "{ragged} vs {expect}");
    }

    #[test]
    fn skinny_gemm_is_memory_bound() {
        let c = DEFAULT_GEMM_CURVE;
        let s = c.call_s(1, 16384, 16384, 2, A100_BF16, A100_HBM);
        let bytes = (16384.0 * 16384.0 + 2.0 * 16384.0) * 2.0;
        let expect = bytes / A100_HBM + 2e-6;
        assert!((s - expect).abs() < 1e-12, "{s} vs {expect}");
    }

    #[test]
    fn small_gemms_are_ramp_bound() {
        let c = DEFAULT_GEMM_CURVE;
        let small = tflops(&c, 256, 256, 256);
        let big = tflops(&c, 4096, 4096, 4096);
        assert!(small < 0.1 * big, "{small} {big}");
    }

    #[test]
    fn a_batched_call_pays_the_ramp_once() {
        let c = DEFAULT_GEMM_CURVE;
        let (m, n, k) = (2048, 2048, 128);
        let one = c.call_s(m, n, k, 2, A100_BF16, A100_HBM);
        let ramp = c.ramp_ns as f64 * 1e-9;
        let batched = Gemm {
            batch: 32,
            ..Gemm::single(m, n, k, 32)
        };
        let s = c.gemm_s(&batched, 2, A100_BF16, A100_HBM);
        assert!((s - (32.0 * (one - ramp) + ramp)).abs() < 1e-12, "{s}");
        // 64 products in calls of 32: two ramps; 33 products: two calls, the second partial.
        let two = Gemm {
            count: 64,
            ..batched
        };
        assert!(
            (c.gemm_s(&two, 2, A100_BF16, A100_HBM) - (64.0 * (one - ramp) + 2.0 * ramp)).abs()
                < 1e-12
        );
        assert_eq!(
            Gemm {
                count: 33,
                ..batched
            }
            .calls(),
            2
        );
        // Separate calls, or a backend that pays per product: one ramp each.
        let separate = c.gemm_s(&Gemm::single(m, n, k, 32), 2, A100_BF16, A100_HBM);
        assert!((separate - 32.0 * one).abs() < 1e-12);
        let per_product = GemmCurve {
            ramp_per_product: true,
            ..DEFAULT_GEMM_CURVE
        };
        assert!((per_product.gemm_s(&batched, 2, A100_BF16, A100_HBM) - separate).abs() < 1e-12);
    }

    #[test]
    fn a_cold_load_is_the_bytes_of_a_and_b_over_the_rate() {
        let g = Gemm::single(64, 1024, 256, 3);
        let bytes = g.operand_bytes(4);
        assert_eq!(DEFAULT_GEMM_CURVE.cold_s(bytes), 0.0);
        let loaded = GemmCurve {
            operands: Some(OperandLoad {
                bytes_per_s: 10e9,
                cache_bytes: 1 << 20,
                pack_bytes_per_s: None,
                cold_ramp_ns: 0,
            }),
            ..DEFAULT_GEMM_CURVE
        };
        let want = (64.0 * 256.0 + 256.0 * 1024.0) * 4.0 / 10e9;
        assert!((loaded.cold_s(bytes) / want - 1.0).abs() < 1e-12);
        // Not part of the call's own time.
        assert_eq!(
            loaded.gemm_s(&g, 4, A100_BF16, A100_HBM),
            DEFAULT_GEMM_CURVE.gemm_s(&g, 4, A100_BF16, A100_HBM)
        );
        // A broken rate neither panics nor goes negative.
        let broken = GemmCurve {
            operands: Some(OperandLoad {
                bytes_per_s: 0.0,
                cache_bytes: 0,
                pack_bytes_per_s: Some(0.0),
                cold_ramp_ns: 0,
            }),
            ..DEFAULT_GEMM_CURVE
        };
        assert!(broken.cold_s(bytes) >= 0.0);
        assert!(broken.gemm_s(&g, 4, A100_BF16, A100_HBM) >= 0.0);
    }

    #[test]
    fn packing_is_paid_per_product_and_a_cold_call_adds_its_ramp_and_load() {
        let g = Gemm::single(64, 1024, 256, 3);
        let bytes = (64 * 256 + 256 * 1024) * 4;
        assert_eq!(g.operand_bytes(4), bytes);
        assert_eq!(g.working_set_bytes(4), bytes + 64 * 1024 * 4);
        let load = OperandLoad {
            bytes_per_s: 10e9,
            cache_bytes: 1 << 20,
            pack_bytes_per_s: None,
            cold_ramp_ns: 0,
        };
        let unpacked = GemmCurve {
            operands: Some(load),
            ..DEFAULT_GEMM_CURVE
        };
        let packed = GemmCurve {
            operands: Some(OperandLoad {
                pack_bytes_per_s: Some(40e9),
                cold_ramp_ns: 1_500,
                ..load
            }),
            ..DEFAULT_GEMM_CURVE
        };
        let pack_s = 3.0 * bytes as f64 / 40e9;
        let d =
            packed.gemm_s(&g, 4, A100_BF16, A100_HBM) - unpacked.gemm_s(&g, 4, A100_BF16, A100_HBM);
        assert!((d / pack_s - 1.0).abs() < 1e-9, "{d} {pack_s}");
        assert!((unpacked.cold_s(bytes) - bytes as f64 / 10e9).abs() < 1e-15);
        assert!((packed.cold_s(bytes) - (1.5e-6 + bytes as f64 / 10e9)).abs() < 1e-15);
        assert_eq!(DEFAULT_GEMM_CURVE.cold_s(bytes), 0.0);
    }

    #[test]
    fn empty_and_broken_inputs_do_not_panic() {
        let c = DEFAULT_GEMM_CURVE;
        assert_eq!(c.call_s(0, 5, 5, 2, A100_BF16, A100_HBM), 0.0);
        let s = c.call_s(u64::MAX, u64::MAX, u64::MAX, 2, f64::NAN, 0.0);
        assert!(s > 0.0);
    }
}
