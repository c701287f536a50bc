//! `--backend cuda`: microbenchmarks through the runtime's CUDA code on GPU 0 (cuBLAS GEMMs
//! over a shape sweep plus a scenario's own calls, the same shapes as cuBLASLt FP8 GEMMs where
//! the GPU has FP8 (compute capability 8.9+), with tensorwise scales and, where the backend
//! runs them (compute capability 9.x), rowwise scales, the backend's memory-bound copies, pinned
//! host<->device copies, chains of tiny launches), fitted with the same models as the host
//! (GEMM curve with batched calls paying the ramp once, alpha-beta lines). Measuring needs the
//! `cuda` feature and a GPU; fitting is plain arithmetic, tested without one. Without a GPU
//! this is a clear error, not a panic, and says what to do instead.

use crate::bench::{GemmSamples, Progress, SizedSamples};
use crate::fit::alpha_beta::AlphaBeta;
use crate::fit::gemm::{self, GemmFit};
use crate::fit::{Estimate, FitError};
use crate::host::{gemm_points, holdout_errors, named, sized_points};
use crate::sample::reject_outliers;
use crate::CalibError;
use serde::Serialize;
use twin_runtime::RuntimeError;
use twin_sim::scenario::Fp8Recipe;
use twin_sim::schedule::Gemm;

/// Tile sides the GEMM fit tries.
const TILES: [u64; 5] = [16, 32, 64, 128, 256];

/// Checks that a CUDA GPU can be used; returns how many there are.
pub fn require_gpu() -> Result<u32, CalibError> {
    device_count().and_then(|n| {
        if n == 0 {
            Err(CalibError::NoGpu(
                "the CUDA driver loaded but reports no GPU".into(),
            ))
        } else {
            Ok(n)
        }
    })
}

#[cfg(feature = "cuda")]
fn device_count() -> Result<u32, CalibError> {
    twin_runtime::backend::cuda::CudaBackend::device_count()
        .map_err(|e| CalibError::NoGpu(e.to_string()))
}

#[cfg(not(feature = "cuda"))]
fn device_count() -> Result<u32, CalibError> {
    Err(CalibError::NoGpu(
        "this twin was built without the `cuda` feature".into(),
    ))
}

/// GEMM shapes of a GPU sweep (large enough to reach the tensor-core plateau), one product
/// per call.
pub fn sweep_shapes(quick: bool) -> Vec<Gemm> {
    let mn: &[u64] = if quick {
        &[512, 1000, 2048, 8192]
    } else {
        &[256, 512, 1000, 2048, 4096, 8192]
    };
    let k: &[u64] = if quick {
        &[64, 512, 4096]
    } else {
        &[64, 128, 256, 512, 1024, 4096, 8192]
    };
    let mut out = Vec::new();
    for &m in mn {
        for &n in mn {
            for &kk in k {
                out.push(Gemm::single(m, n, kk, 1));
            }
        }
    }
    out
}

/// What one GPU calibration measures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// Timed repetitions per measurement (after 3 untimed ones).
    pub repeats: u32,
    /// Sweep shapes then the scenario's calls; each entry is one call (`count` = `batch`).
    pub gemms: Vec<(Gemm, &'static str)>,
    /// The same shapes as FP8 GEMMs through cuBLASLt (tensorwise scales, the forward's fast
    /// accumulation), where the GPU has FP8 ([`Plan::with_fp8`]) and the shape meets
    /// cuBLASLt's FP8 alignment (`fp8_shape`); empty otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fp8_gemms: Vec<(Gemm, &'static str)>,
    /// The same FP8 shapes with rowwise scales (one per row of each operand, cuBLASLt's
    /// outer-vector mode), where GPU 0 runs them ([`Plan::with_fp8_rowwise`]); empty otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fp8_rowwise_gemms: Vec<(Gemm, &'static str)>,
    /// The same FP8 shapes with block scales (1 x 128 for activations, 128 x 128 for
    /// weights, cuBLASLt's VEC128 and BLK128x128 modes), where GPU 0 runs them
    /// ([`Plan::with_fp8_blockwise`]); empty otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fp8_blockwise_gemms: Vec<(Gemm, &'static str)>,
    /// Bytes moved (read + write) by the backend's memory-bound copies.
    pub memory_bytes: Vec<u64>,
    /// Bytes of each pinned host<->device copy.
    pub copy_bytes: Vec<u64>,
    /// Launches per chain.
    pub chain_launches: Vec<u64>,
    /// The shape timed back to back for [`SUSTAINED_S`] after [`SUSTAINED_IDLE_S`] idle, in
    /// bf16 and, with an FP8 column, in FP8: how far a power cap throttles long GEMM runs.
    pub sustained: Gemm,
}

/// Seconds of back-to-back GEMMs in the power-cap measurement.
pub const SUSTAINED_S: f64 = 0.6;
/// Seconds the GPU idles before it, so that the run starts below the power cap's throttle.
pub const SUSTAINED_IDLE_S: f64 = 1.0;

/// The shape timed back to back: the scenario's largest one-product call, else 8192^3 (the
/// size of a large training GEMM, a millisecond or two on a Hopper GPU).
pub fn sustained_shape(scenario: &[Gemm]) -> Gemm {
    scenario
        .iter()
        .filter(|g| g.batch <= 1 && g.m > 0 && g.n > 0 && g.k > 0)
        .max_by_key(|g| g.flops())
        .map(|g| Gemm::single(g.m, g.n, g.k, 1))
        .unwrap_or_else(|| Gemm::single(8192, 8192, 8192, 1))
}

impl Plan {
    /// `--quick` (well under a minute) or the full plan, with `scenario` calls added.
    pub fn new(quick: bool, scenario: &[Gemm]) -> Plan {
        const MIB: u64 = 1 << 20;
        let sustained = sustained_shape(scenario);
        let gemms = sweep_shapes(quick)
            .into_iter()
            .map(|g| (g, "sweep"))
            .chain(scenario.iter().map(|g| (*g, "scenario")))
            .collect();
        if quick {
            Plan {
                repeats: 7,
                fp8_gemms: Vec::new(),
                fp8_rowwise_gemms: Vec::new(),
                fp8_blockwise_gemms: Vec::new(),
                gemms,
                memory_bytes: [2, 16, 128, 1024].iter().map(|m| m * MIB).collect(),
                copy_bytes: [1, 16, 256].iter().map(|m| m * MIB).collect(),
                chain_launches: vec![1, 16, 64, 256],
                sustained,
            }
        } else {
            Plan {
                repeats: 20,
                fp8_gemms: Vec::new(),
                fp8_rowwise_gemms: Vec::new(),
                fp8_blockwise_gemms: Vec::new(),
                gemms,
                memory_bytes: [1, 4, 16, 64, 256, 1024, 4096]
                    .iter()
                    .map(|m| m * MIB)
                    .collect(),
                copy_bytes: [1, 4, 16, 64, 256, 1024].iter().map(|m| m * MIB).collect(),
                chain_launches: vec![1, 4, 16, 64, 256, 1024],
                sustained,
            }
        }
    }

    /// The plan with an FP8 GEMM column: every planned GEMM cuBLASLt can run in FP8, one
    /// product per call (a batched scenario call is left out: twin issues FP8 GEMMs one
    /// product per call).
    pub fn with_fp8(mut self) -> Plan {
        self.fp8_gemms = self.fp8_column();
        self
    }

    /// The plan with a rowwise FP8 column: the FP8 column's shapes again, with rowwise scales.
    pub fn with_fp8_rowwise(mut self) -> Plan {
        self.fp8_rowwise_gemms = self.fp8_column();
        self
    }

    /// The plan with a blockwise FP8 column: the FP8 column's shapes again, with block scales.
    pub fn with_fp8_blockwise(mut self) -> Plan {
        self.fp8_blockwise_gemms = self.fp8_column();
        self
    }

    fn fp8_column(&self) -> Vec<(Gemm, &'static str)> {
        self.gemms
            .iter()
            .filter(|(g, _)| fp8_shape(g))
            .copied()
            .collect()
    }

    /// Measurements in all (what the progress bar counts).
    pub fn total(&self) -> usize {
        self.gemms.len()
            + self.fp8_gemms.len()
            + self.fp8_rowwise_gemms.len()
            + self.fp8_blockwise_gemms.len()
            + self.memory_bytes.len()
            + 2 * self.copy_bytes.len()
            + self.chain_launches.len()
            + self.sustained_columns().len()
    }

    /// The columns the sustained shape is timed back to back in: bf16, and FP8 tensorwise
    /// where the plan has an FP8 column and the shape runs in FP8.
    pub fn sustained_columns(&self) -> Vec<&'static str> {
        let mut out = vec![SUSTAINED_BF16];
        if !self.fp8_gemms.is_empty() && fp8_shape(&self.sustained) {
            out.push(SUSTAINED_FP8);
        }
        out
    }
}

/// Whether the CUDA backend runs `g` as an FP8 GEMM (`fp8::plan_fp8_gemm`: cuBLASLt's
/// alignment, one product per call).
pub fn fp8_shape(g: &Gemm) -> bool {
    use twin_runtime::backend::cuda::fp8::{plan_fp8_gemm, Fp8Device, Role};
    let any = Fp8Device {
        compute_capability: (9, 0),
        recipe: Fp8Recipe::Tensorwise,
    };
    g.m > 0 && g.batch <= 1 && plan_fp8_gemm(g, Role::Forward, &any).is_ok()
}

/// Whether the CUDA backend runs `recipe`'s own scales (rowwise: outer-vector on both
/// operands; blockwise: 128 x 128 weights and 1 x 128 activations) on a GPU of compute
/// capability `cc` as they are, not as the per-tensor fallback (`fp8::plan_fp8_gemm` decides):
/// `Err` says why not. cuBLASLt may still lack the kernels (before cuBLAS 12.9, or for block
/// scales cuBLAS 13.1 on an H200), which only a call finds out ([`fp8_scales_available`]
/// makes one). Only rowwise and blockwise have scales of their own to check.
pub fn scales_run_on(cc: (u32, u32), recipe: Fp8Recipe) -> Result<(), String> {
    use twin_runtime::backend::cuda::fp8::{plan_fp8_gemm, Fp8Device, Role, ScaleMode};
    let (want, what) = match recipe {
        Fp8Recipe::Rowwise => (
            (ScaleMode::OuterVector, ScaleMode::OuterVector),
            "outer-vector",
        ),
        Fp8Recipe::Blockwise => ((ScaleMode::Block128, ScaleMode::Vec128), "block"),
        other => {
            return Err(format!(
                "fp8_recipe = \"{}\" has no scales of its own to check",
                other.as_str()
            ))
        }
    };
    let device = Fp8Device::check(cc, recipe)?;
    let (plan, note) = plan_fp8_gemm(&SCALES_PROBE, Role::Forward, &device)?;
    match note {
        Some(why) => Err(why),
        None if (plan.a_scale, plan.b_scale) == want => Ok(()),
        None => Err(format!(
            "{} FP8 runs with {} x {} scales on this GPU, not {what} ones",
            recipe.as_str(),
            plan.a_scale.name(),
            plan.b_scale.name()
        )),
    }
}

/// The GEMM [`fp8_scales_available`] runs to find out whether cuBLASLt has the kernels.
const SCALES_PROBE: Gemm = Gemm {
    dtype: None,
    m: 256,
    n: 256,
    k: 256,
    count: 1,
    batch: 1,
};

/// The distinct GEMM calls of a schedule as the CUDA backend issues them: one call of
/// `batch` products per shape (`count` = `batch`), most frequent first, at most `max`.
pub fn scenario_calls(schedule: &twin_sim::schedule::Schedule, max: usize) -> Vec<Gemm> {
    use std::collections::BTreeMap;
    use twin_sim::schedule::OpKind;
    let mut freq: BTreeMap<(u64, u64, u64, u32), u64> = BTreeMap::new();
    for p in &schedule.programs {
        for o in &p.ops {
            if let OpKind::Compute(c) = &o.kind {
                // The backend runs a fused attention kernel as its equivalent GEMM.
                for g in c.executed_gemms().filter(|g| g.m > 0 && g.n > 0 && g.k > 0) {
                    let batch = g.batch.clamp(1, g.count.max(1));
                    *freq.entry((g.m, g.n, g.k, batch)).or_default() += u64::from(g.calls());
                }
            }
        }
    }
    let mut v: Vec<_> = freq.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v.into_iter()
        .take(max)
        .map(|((m, n, k, batch), _)| Gemm {
            dtype: None,
            m,
            n,
            k,
            count: batch,
            batch,
        })
        .collect()
}

/// Every sample of a GPU calibration, after the outlier rule (crate::sample).
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct CudaSamples {
    pub gemm: Vec<GemmSamples>,
    /// FP8 GEMMs through cuBLASLt (tensorwise scales); empty where the GPU has no FP8.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gemm_fp8: Vec<GemmSamples>,
    /// FP8 GEMMs through cuBLASLt with rowwise scales; empty where GPU 0 does not run them
    /// (and in samples files written before they were measured).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gemm_fp8_rowwise: Vec<GemmSamples>,
    /// FP8 GEMMs through cuBLASLt with block scales; empty where GPU 0 does not run them
    /// (and in samples files written before they were measured).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gemm_fp8_blockwise: Vec<GemmSamples>,
    /// `bytes`: read + write bytes of the backend's memory-bound copies.
    pub memory_bound: Vec<SizedSamples>,
    pub host_to_device: Vec<SizedSamples>,
    pub device_to_host: Vec<SizedSamples>,
    /// `bytes` here counts launches.
    pub launch_chain: Vec<SizedSamples>,
    /// GEMMs timed back to back (the power cap's throttle); empty in samples files written
    /// before they were measured.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sustained: Vec<SustainedSamples>,
}

/// The bf16 and FP8 names of the back-to-back columns.
pub const SUSTAINED_BF16: &str = "bf16";
pub const SUSTAINED_FP8: &str = "fp8-tensorwise";

/// One shape issued back to back after the GPU idled: every call's time, in order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct SustainedSamples {
    /// [`SUSTAINED_BF16`] or [`SUSTAINED_FP8`].
    pub column: String,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub idle_ns: u64,
    pub times_ns: Vec<u64>,
}

/// What a back-to-back run shows: the rate at its start, below the power cap's throttle, and
/// at its end, throttled.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sustained {
    pub column: String,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    /// FLOP/s of the median call among those starting in the first [`SUSTAINED_EARLY_NS`].
    pub early_flops_per_s: f64,
    /// FLOP/s of the median call of the last third.
    pub late_flops_per_s: f64,
    /// `late / early`: 1 where nothing throttled.
    pub late_fraction: f64,
    /// When the calls first ran slower than halfway from the early time to the late one (the
    /// median of five in a row), from the first call's start; `None` where they never did.
    pub throttled_after_ns: Option<u64>,
    pub calls: usize,
    /// How long the GPU idled before the first call.
    pub idle_ns: u64,
}

/// The early window of [`Sustained::early_flops_per_s`].
pub const SUSTAINED_EARLY_NS: u64 = 20_000_000;

impl Sustained {
    /// `s`'s early and late rates; `None` with fewer than six calls.
    pub fn of(s: &SustainedSamples) -> Option<Sustained> {
        let t = &s.times_ns;
        if t.len() < 6 {
            return None;
        }
        let median = |xs: &[u64]| {
            let v: Vec<f64> = xs.iter().map(|&x| x as f64).collect();
            twin_sim::stats::median_or_zero(&v).max(1.0)
        };
        let mut starts = Vec::with_capacity(t.len());
        let mut at = 0u64;
        for &x in t {
            starts.push(at);
            at = at.saturating_add(x);
        }
        let early_n = starts
            .iter()
            .take_while(|&&a| a < SUSTAINED_EARLY_NS)
            .count()
            .max(3);
        let early = median(&t[..early_n]);
        let late = median(&t[t.len() - t.len() / 3..]);
        let mid = (early + late) / 2.0;
        let throttled_after_ns = (late > early)
            .then(|| {
                t.windows(5)
                    .position(|w| median(w) > mid)
                    .map(|i| starts[i])
            })
            .flatten();
        let flops = 2.0 * s.m as f64 * s.n as f64 * s.k as f64;
        Some(Sustained {
            column: s.column.clone(),
            m: s.m,
            n: s.n,
            k: s.k,
            early_flops_per_s: flops / (early * 1e-9),
            late_flops_per_s: flops / (late * 1e-9),
            late_fraction: early / late,
            throttled_after_ns,
            calls: t.len(),
            idle_ns: s.idle_ns,
        })
    }
}

/// The fits of a GPU calibration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CudaFits {
    /// bf16 GEMM curve over the non-held-out calls.
    pub gemm: GemmFit,
    pub gemm_holdout_samples: usize,
    pub gemm_holdout_max_relative_error: f64,
    /// FP8 GEMM curve (cuBLASLt, tensorwise scales) over the non-held-out calls, where FP8
    /// was measured.
    pub gemm_fp8: Option<GemmFit>,
    pub gemm_fp8_holdout_samples: usize,
    pub gemm_fp8_holdout_max_relative_error: f64,
    /// FP8 GEMM curve with rowwise scales over the non-held-out calls, where they were
    /// measured.
    pub gemm_fp8_rowwise: Option<GemmFit>,
    pub gemm_fp8_rowwise_holdout_samples: usize,
    pub gemm_fp8_rowwise_holdout_max_relative_error: f64,
    /// FP8 GEMM curve with block scales over the non-held-out calls, where they were
    /// measured.
    pub gemm_fp8_blockwise: Option<GemmFit>,
    pub gemm_fp8_blockwise_holdout_samples: usize,
    pub gemm_fp8_blockwise_holdout_max_relative_error: f64,
    /// Memory-bound copies: bandwidth counts bytes read + written.
    pub memory_bound: AlphaBeta,
    pub host_to_device: AlphaBeta,
    pub device_to_host: AlphaBeta,
    /// Chains of launches: "bandwidth" is launches per second.
    pub launch_chain: AlphaBeta,
    /// GPU time per back-to-back launch.
    pub launch_ns: Estimate,
    pub dropped_samples: usize,
    /// The back-to-back runs, where measured.
    pub sustained: Vec<Sustained>,
    pub notes: Vec<String>,
}

/// Fits `s`. Rates stay absolute: the profile relates them to a datasheet
/// (`run::cuda_profile`), never clipping them against it.
pub fn fit(s: &CudaSamples) -> Result<CudaFits, FitError> {
    let g = gemm::fit(
        &gemm_points(&s.gemm, false, 0),
        &TILES,
        gemm::Operands::Free,
    )
    .map_err(|e| FitError::Degenerate(format!("GEMM curve: {e}")))?;
    let holdout = holdout_errors(&g, &s.gemm, 0);
    let (gemm_fp8, fp8_holdout) = fp8_fit(&s.gemm_fp8, "FP8 GEMM curve")?;
    let (gemm_fp8_rowwise, rowwise_holdout) =
        fp8_fit(&s.gemm_fp8_rowwise, "rowwise FP8 GEMM curve")?;
    let (gemm_fp8_blockwise, blockwise_holdout) =
        fp8_fit(&s.gemm_fp8_blockwise, "blockwise FP8 GEMM curve")?;
    let mut notes = Vec::new();
    let memory_bound = named("memory-bound", &sized_points(&s.memory_bound), &mut notes)?;
    let launch_chain = named("launch chain", &sized_points(&s.launch_chain), &mut notes)?;
    let sized = [
        &s.memory_bound,
        &s.host_to_device,
        &s.device_to_host,
        &s.launch_chain,
    ];
    let dropped = [
        &s.gemm,
        &s.gemm_fp8,
        &s.gemm_fp8_rowwise,
        &s.gemm_fp8_blockwise,
    ]
    .iter()
    .flat_map(|v| v.iter())
    .map(|x| x.dropped_ns.len())
    .sum::<usize>()
        + sized
            .iter()
            .flat_map(|v| v.iter())
            .map(|x| x.dropped_ns.len())
            .sum::<usize>();
    Ok(CudaFits {
        gemm_holdout_samples: holdout.len(),
        gemm_holdout_max_relative_error: holdout.iter().fold(0.0, |a: f64, b| a.max(*b)),
        gemm: g,
        gemm_fp8,
        gemm_fp8_holdout_samples: fp8_holdout.len(),
        gemm_fp8_holdout_max_relative_error: fp8_holdout.iter().fold(0.0, |a: f64, b| a.max(*b)),
        gemm_fp8_rowwise,
        gemm_fp8_rowwise_holdout_samples: rowwise_holdout.len(),
        gemm_fp8_rowwise_holdout_max_relative_error: rowwise_holdout
            .iter()
            .fold(0.0, |a: f64, b| a.max(*b)),
        gemm_fp8_blockwise,
        gemm_fp8_blockwise_holdout_samples: blockwise_holdout.len(),
        gemm_fp8_blockwise_holdout_max_relative_error: blockwise_holdout
            .iter()
            .fold(0.0, |a: f64, b| a.max(*b)),
        memory_bound,
        host_to_device: named(
            "host-to-device",
            &sized_points(&s.host_to_device),
            &mut notes,
        )?,
        device_to_host: named(
            "device-to-host",
            &sized_points(&s.device_to_host),
            &mut notes,
        )?,
        launch_ns: launch_chain
            .bandwidth_bytes_per_s
            .map_monotone(|per_s| 1e9 / per_s),
        launch_chain,
        dropped_samples: dropped,
        sustained: s.sustained.iter().filter_map(Sustained::of).collect(),
        notes,
    })
}

/// One FP8 column's curve and its held-out calls' relative errors; `None` for an empty column.
fn fp8_fit(column: &[GemmSamples], what: &str) -> Result<(Option<GemmFit>, Vec<f64>), FitError> {
    if column.is_empty() {
        return Ok((None, Vec::new()));
    }
    let f = gemm::fit(&gemm_points(column, false, 0), &TILES, gemm::Operands::Free)
        .map_err(|e| FitError::Degenerate(format!("{what}: {e}")))?;
    let h = holdout_errors(&f, column, 0);
    Ok((Some(f), h))
}

/// Keeps the samples of one measurement after the outlier rule.
fn kept(times_ns: &[u64]) -> crate::sample::Kept {
    let xs: Vec<f64> = times_ns.iter().map(|&t| t as f64).collect();
    reject_outliers(&xs)
}

/// One GEMM shape's measured times, outliers set apart.
fn gemm_samples(
    g: &twin_sim::schedule::Gemm,
    batch: u64,
    origin: &str,
    holdout: bool,
    times_ns: &[u64],
) -> GemmSamples {
    let k = kept(times_ns);
    GemmSamples {
        m: g.m,
        n: g.n,
        k: g.k,
        batch,
        origin: origin.to_string(),
        holdout,
        kept_ns: k.kept,
        dropped_ns: k.dropped,
        warm_kept_ns: Vec::new(),
        warm_dropped_ns: Vec::new(),
    }
}

/// Times the plan's FP8 columns (tensorwise, rowwise, then blockwise) with `time` (one shape
/// in one recipe: its repetitions' times), into `out`'s `gemm_fp8`, `gemm_fp8_rowwise` and
/// `gemm_fp8_blockwise`, every
/// fifth sweep shape of a column held out. A column a call of which is
/// `RuntimeError::Unsupported` (cuBLASLt has no FP8 kernel for it, or would run it with other
/// scales than the recipe's) is left out whole, the profile keeping its base's section, and
/// the returned notes say why; any other error stops. `done` counts measurements for the
/// progress bar, a left-out column's untimed ones included.
pub fn fp8_columns<T>(
    plan: &Plan,
    mut time: T,
    progress: &mut dyn Progress,
    done: &mut usize,
    out: &mut CudaSamples,
) -> Result<Vec<String>, CalibError>
where
    T: FnMut(&Gemm, Fp8Recipe) -> Result<Vec<Vec<u64>>, RuntimeError>,
{
    let total = plan.total();
    let mut notes = Vec::new();
    let columns = [
        (
            &plan.fp8_gemms,
            Fp8Recipe::Tensorwise,
            "cuBLASLt FP8 GEMM",
            ("FP8 GEMM", "[gemm.fp8]"),
            &mut out.gemm_fp8,
        ),
        (
            &plan.fp8_rowwise_gemms,
            Fp8Recipe::Rowwise,
            "cuBLASLt FP8 GEMM, rowwise",
            ("rowwise FP8 GEMM", "[gemm.fp8_rowwise]"),
            &mut out.gemm_fp8_rowwise,
        ),
        (
            &plan.fp8_blockwise_gemms,
            Fp8Recipe::Blockwise,
            "cuBLASLt FP8 GEMM, blockwise",
            ("blockwise FP8 GEMM", "[gemm.fp8_blockwise]"),
            &mut out.gemm_fp8_blockwise,
        ),
    ];
    for (shapes, recipe, label, (what, section), into) in columns {
        let mut column = Vec::new();
        for (i, (g, origin)) in shapes.iter().enumerate() {
            progress.update(label, *done, total);
            match time(g, recipe) {
                Ok(times) => {
                    let holdout = *origin == "sweep" && i % 5 == 4;
                    column.extend(times.iter().map(|t| gemm_samples(g, 1, origin, holdout, t)));
                    *done += 1;
                }
                Err(RuntimeError::Unsupported(why)) => {
                    notes.push(format!(
                        "the {what} column was left out at {}x{}x{} (m x n x k) ({why}): the \
                         profile keeps its base's {section}, if any",
                        g.m, g.n, g.k
                    ));
                    column.clear();
                    *done += shapes.len() - i;
                    break;
                }
                Err(e) => return Err(CalibError::Bench(e.to_string())),
            }
        }
        *into = column;
    }
    Ok(notes)
}

/// Runs `plan` on GPU 0: the samples, and notes on FP8 columns left out ([`fp8_columns`]).
#[cfg(feature = "cuda")]
pub fn measure(
    plan: &Plan,
    progress: &mut dyn Progress,
) -> Result<(CudaSamples, Vec<String>), CalibError> {
    use twin_runtime::backend::cuda::bench::{micro_sweep, Micro, SizedTimes};
    use twin_runtime::backend::cuda::{dtype::GemmDtype, fp8_gemm_sweep_times, gemm_sweep_times};
    let total = plan.total();
    let mut done = 0usize;
    let bench = |e: twin_runtime::RuntimeError| CalibError::Bench(e.to_string());
    let mut out = CudaSamples::default();
    // Holds every fifth sweep shape out of the fit, to check the curve on unseen shapes.
    for (i, (g, origin)) in plan.gemms.iter().enumerate() {
        progress.update("cuBLAS GEMM", done, total);
        let times = gemm_sweep_times(std::slice::from_ref(g), GemmDtype::Bf16, plan.repeats)
            .map_err(bench)?;
        let holdout = *origin == "sweep" && i % 5 == 4;
        let batch = u64::from(g.count.max(1));
        out.gemm.extend(
            times
                .iter()
                .map(|t| gemm_samples(g, batch, origin, holdout, t)),
        );
        done += 1;
    }
    let time = |g: &Gemm, recipe: Fp8Recipe| {
        fp8_gemm_sweep_times(std::slice::from_ref(g), recipe, plan.repeats)
    };
    let notes = fp8_columns(plan, time, progress, &mut done, &mut out)?;
    sustained_runs(plan, progress, &mut done, &mut out)?;
    let mut sized = |what: Micro,
                     label: &str,
                     sizes: &[u64],
                     into: &mut Vec<SizedSamples>|
     -> Result<(), CalibError> {
        for &size in sizes {
            progress.update(label, done, total);
            let r: Vec<SizedTimes> = micro_sweep(what, &[size], plan.repeats).map_err(bench)?;
            for t in r {
                into.push(SizedSamples::new(t.size, kept(&t.times_ns)));
            }
            done += 1;
        }
        Ok(())
    };
    sized(
        Micro::MemoryBound,
        "memory-bound copies",
        &plan.memory_bytes,
        &mut out.memory_bound,
    )?;
    sized(
        Micro::HostToDevice,
        "host-to-device",
        &plan.copy_bytes,
        &mut out.host_to_device,
    )?;
    sized(
        Micro::DeviceToHost,
        "device-to-host",
        &plan.copy_bytes,
        &mut out.device_to_host,
    )?;
    sized(
        Micro::LaunchChain,
        "launch chains",
        &plan.chain_launches,
        &mut out.launch_chain,
    )?;
    progress.update("done", total, total);
    Ok((out, notes))
}

/// Times the plan's sustained shape back to back in each of its columns
/// ([`Plan::sustained_columns`]) after the GPU idled, into `out.sustained`: the calls for about
/// [`SUSTAINED_S`], from one call's time. An FP8 column cuBLASLt cannot run is left out.
#[cfg(feature = "cuda")]
fn sustained_runs(
    plan: &Plan,
    progress: &mut dyn Progress,
    done: &mut usize,
    out: &mut CudaSamples,
) -> Result<(), CalibError> {
    use std::time::Duration;
    use twin_runtime::backend::cuda::{
        dtype::GemmDtype, fp8_gemm_back_to_back_times, fp8_gemm_sweep_times,
        gemm_back_to_back_times, gemm_sweep_times,
    };
    let total = plan.total();
    let g = plan.sustained;
    let idle = Duration::from_secs_f64(SUSTAINED_IDLE_S);
    let calls = |one: Vec<Vec<u64>>| {
        let ns = one
            .first()
            .and_then(|t| t.iter().min())
            .copied()
            .unwrap_or(1);
        (SUSTAINED_S * 1e9 / ns.max(1) as f64)
            .ceil()
            .clamp(6.0, 20_000.0) as u32
    };
    for column in plan.sustained_columns() {
        progress.update("back-to-back GEMMs", *done, total);
        let times = if column == SUSTAINED_FP8 {
            let r = Fp8Recipe::Tensorwise;
            fp8_gemm_sweep_times(&[g], r, 3)
                .and_then(|one| fp8_gemm_back_to_back_times(&g, r, calls(one), idle))
        } else {
            gemm_sweep_times(&[g], GemmDtype::Bf16, 3)
                .and_then(|one| gemm_back_to_back_times(&g, GemmDtype::Bf16, calls(one), idle))
        };
        match times {
            Ok(times_ns) => out.sustained.push(SustainedSamples {
                column: column.to_string(),
                m: g.m,
                n: g.n,
                k: g.k,
                idle_ns: idle.as_nanos() as u64,
                times_ns,
            }),
            Err(RuntimeError::Unsupported(_)) => {}
            Err(e) => return Err(CalibError::Bench(e.to_string())),
        }
        *done += 1;
    }
    Ok(())
}

/// Whether GPU 0 runs FP8 GEMMs (`Err`: why not, for the run's notes).
#[cfg(feature = "cuda")]
pub fn fp8_available() -> Result<(), String> {
    match twin_runtime::backend::cuda::fp8_device(Fp8Recipe::Tensorwise) {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(why)) => Err(why),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(not(feature = "cuda"))]
pub fn fp8_available() -> Result<(), String> {
    Err("this twin was built without the `cuda` feature".into())
}

/// Whether GPU 0 runs FP8 GEMMs with `recipe`'s own scales as they are (`Err`: why not, for
/// the run's notes): compute capability 9.x ([`scales_run_on`]), and one call that cuBLASLt
/// runs without falling back to per-tensor scales.
#[cfg(feature = "cuda")]
pub fn fp8_scales_available(recipe: Fp8Recipe) -> Result<(), String> {
    use twin_runtime::backend::cuda::{fp8_device, fp8_gemm_sweep_times};
    let device = match fp8_device(recipe) {
        Ok(Ok(d)) => d,
        Ok(Err(why)) => return Err(why),
        Err(e) => return Err(e.to_string()),
    };
    scales_run_on(device.compute_capability, recipe)?;
    fp8_gemm_sweep_times(&[SCALES_PROBE], recipe, 1)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[cfg(not(feature = "cuda"))]
pub fn fp8_scales_available(_recipe: Fp8Recipe) -> Result<(), String> {
    Err("this twin was built without the `cuda` feature".into())
}

#[cfg(not(feature = "cuda"))]
pub fn measure(
    _plan: &Plan,
    _progress: &mut dyn Progress,
) -> Result<(CudaSamples, Vec<String>), CalibError> {
    device_count().map(|_| (CudaSamples::default(), Vec::new()))
}

#[cfg(test)]
#[path = "cuda_tests.rs"]
mod tests;

/// Driver, CUDA and cuBLAS versions, and NCCL's, as `twin doctor` finds them.
#[cfg(feature = "cuda")]
pub fn versions() -> (Option<String>, Option<String>) {
    use twin_runtime::backend::cuda::Item;
    let d = twin_runtime::backend::cuda::doctor();
    let found = |i: &Item<String>| match i {
        Item::Found(v) => Some(v.clone()),
        Item::NotFound(_) => None,
    };
    let cuda = format!(
        "driver {} (CUDA {}), cuBLAS {}",
        found(&d.driver_version).unwrap_or_else(|| "?".into()),
        found(&d.driver_cuda_version).unwrap_or_else(|| "?".into()),
        found(&d.cublas_version).unwrap_or_else(|| "?".into()),
    );
    (Some(cuda), found(&d.nccl_version))
}

/// GPU 0 as the CUDA driver reports it (`twin doctor`), when it does.
#[cfg(feature = "cuda")]
pub fn device() -> Option<crate::gpu_base::Device> {
    use twin_runtime::backend::cuda::Item;
    match twin_runtime::backend::cuda::doctor().gpus {
        Item::Found(gpus) => gpus.into_iter().next().map(|g| crate::gpu_base::Device {
            name: g.name,
            sm_count: g.multiprocessors,
            memory_bytes: g.total_bytes,
        }),
        Item::NotFound(_) => None,
    }
}
