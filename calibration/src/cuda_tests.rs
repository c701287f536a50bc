//! The GPU calibration's fitting and planning, without a GPU: synthetic samples drawn from
//! known parameters with noise must give those parameters back, and the profile written from
//! the fits must carry them.

use super::*;
use crate::fit::TestRng;
use crate::gpu_base::{Device, Request, ScenarioGpu};
use crate::sample::Kept;
use twin_sim::profile::{Profile, Source};
use twin_sim::schedule::Schedule;

const RATE: f64 = 800e12;
const K_HALF: f64 = 200.0;
const RAMP_NS: f64 = 6_000.0;
const MEMORY_BW: f64 = 3.0e12;
const LAUNCH_NS: f64 = 2_200.0;

fn gemm_ns(m: u64, n: u64, k: u64, batch: u64) -> f64 {
    let kf = k as f64;
    gemm::padded_flops(m, n, k, 128, 128) * batch as f64 / (RATE * kf / (kf + K_HALF)) * 1e9
        + RAMP_NS
}

fn noisy(rng: &mut TestRng, t: f64, reps: usize) -> Kept {
    let xs: Vec<f64> = (0..reps).map(|_| t * (1.0 + 0.01 * rng.normal())).collect();
    reject_outliers(&xs)
}

fn sized(rng: &mut TestRng, sizes: &[u64], f: impl Fn(u64) -> f64) -> Vec<SizedSamples> {
    sizes
        .iter()
        .map(|&b| SizedSamples::new(b, noisy(rng, f(b), 7)))
        .collect()
}

/// Samples of the quick plan plus two batched scenario calls, from the constants above.
fn synthetic(seed: u64) -> (Plan, CudaSamples) {
    synthetic_with(seed, MEMORY_BW)
}

/// [`synthetic`] with memory-bound copies at `memory_bw` bytes per second.
fn synthetic_with(seed: u64, memory_bw: f64) -> (Plan, CudaSamples) {
    let scenario = [
        Gemm {
            m: 2048,
            n: 2048,
            k: 128,
            count: 32,
            batch: 32,
            dtype: None,
        },
        Gemm::single(2048, 14336, 4096, 1),
    ];
    let plan = Plan::new(true, &scenario);
    let mut rng = TestRng::new(seed);
    let mut s = CudaSamples::default();
    for (i, (g, origin)) in plan.gemms.iter().enumerate() {
        let batch = u64::from(g.count);
        let k = noisy(&mut rng, gemm_ns(g.m, g.n, g.k, batch), 7);
        s.gemm.push(GemmSamples {
            m: g.m,
            n: g.n,
            k: g.k,
            batch,
            origin: (*origin).to_string(),
            holdout: *origin == "sweep" && i % 5 == 4,
            kept_ns: k.kept,
            dropped_ns: k.dropped,
            warm_kept_ns: Vec::new(),
            warm_dropped_ns: Vec::new(),
        });
    }
    let copy = |lat: f64, bw: f64| move |b: u64| lat + b as f64 / bw * 1e9;
    s.memory_bound = sized(&mut rng, &plan.memory_bytes, copy(3_000.0, memory_bw));
    s.host_to_device = sized(&mut rng, &plan.copy_bytes, copy(8_000.0, 50e9));
    s.device_to_host = sized(&mut rng, &plan.copy_bytes, copy(8_000.0, 52e9));
    s.launch_chain = sized(&mut rng, &plan.chain_launches, |n| {
        4_000.0 + n as f64 * LAUNCH_NS
    });
    (plan, s)
}

#[test]
fn fits_recover_the_parameters_the_samples_were_drawn_from() {
    let (plan, s) = synthetic(3);
    let f = fit(&s).unwrap();
    assert!(
        (f.gemm.rate_flops_per_s.value / RATE - 1.0).abs() < 0.03,
        "{:?}",
        f.gemm
    );
    assert!(
        (f.gemm.k_half.value / K_HALF - 1.0).abs() < 0.15,
        "{:?}",
        f.gemm
    );
    assert!(
        (f.gemm.ramp_ns.value / RAMP_NS - 1.0).abs() < 0.15,
        "{:?}",
        f.gemm
    );
    // The tile is identified only up to what the ragged shapes (1000) tell apart: the
    // interval of tiles the F-test does not reject holds the truth.
    let covers = |ci: [u64; 2]| ci[0] <= 128 && 128 <= ci[1];
    assert!(
        covers(f.gemm.tile_m_ci95) && covers(f.gemm.tile_n_ci95),
        "{:?}",
        f.gemm
    );
    // Every fifth sweep shape is held out; the curve predicts them within the noise.
    let sweep = plan.gemms.iter().filter(|(_, o)| *o == "sweep").count();
    assert_eq!(f.gemm_holdout_samples, sweep / 5);
    assert!(f.gemm_holdout_max_relative_error < 0.03);
    let bw = &f.memory_bound.bandwidth_bytes_per_s;
    assert!((bw.value / MEMORY_BW - 1.0).abs() < 0.02, "{bw:?}");
    assert!(bw.covers(bw.value));
    assert!(
        (f.launch_ns.value / LAUNCH_NS - 1.0).abs() < 0.03,
        "{:?}",
        f.launch_ns
    );
    let h2d = f.host_to_device.bandwidth_bytes_per_s.value;
    assert!((h2d / 50e9 - 1.0).abs() < 0.03, "{h2d}");
}

fn bundled(path: &str) -> Profile {
    let (origin, text) = crate::gpu_base::BUNDLED
        .iter()
        .find(|(p, _)| p.ends_with(path))
        .unwrap();
    twin_sim::profile::parse_str(text, origin).unwrap()
}

fn provenance() -> crate::write::Provenance {
    crate::provenance::here("cuda", "quick", "twin calibrate cuda", "p.samples.json")
}

fn h200_device() -> Device {
    Device {
        name: "NVIDIA H200".into(),
        sm_count: 132,
        memory_bytes: 150_109_880_320,
    }
}

/// The profile a calibration from `req` writes for samples `s`, as text and loaded back.
fn written(req: Request, s: &CudaSamples) -> (Profile, Profile) {
    let start = crate::gpu_base::start(req).unwrap();
    let f = fit(s).unwrap();
    let prov = provenance();
    let p = crate::run::cuda_profile(&start, &f, &prov);
    let text = crate::write::profile_toml(&p, None, Some(&prov), &[]);
    let back = twin_sim::profile::parse_str(&text, "written.toml").unwrap();
    (p, back)
}

fn close(a: f64, b: f64) -> bool {
    (a / b - 1.0).abs() < 1e-5
}

#[test]
fn the_profile_carries_the_fits_with_their_intervals_and_provenance() {
    let (_, s) = synthetic(4);
    let f = fit(&s).unwrap();
    let base = bundled("h100-dgx.toml");
    let start = crate::gpu_base::start(Request {
        gpu_name: Some("h100-sxm-80gb".into()),
        ..Request::default()
    })
    .unwrap();
    assert_eq!(start.base, base);
    let p = crate::run::cuda_profile(&start, &f, &provenance());
    let rate = p.gemm_bf16_flops_per_s.as_ref().unwrap();
    assert_eq!(rate.value, f.gemm.rate_flops_per_s.value);
    assert_eq!(rate.ci95, Some(f.gemm.rate_flops_per_s.ci95));
    let eff = p.gemm_max_efficiency.value * base.peak_bf16_flops_per_s.value;
    assert!((eff / f.gemm.rate_flops_per_s.value - 1.0).abs() < 1e-9);
    let bw = p.memory_bandwidth_bytes_per_s.as_ref().unwrap();
    assert_eq!(bw.value, f.memory_bound.bandwidth_bytes_per_s.value);
    assert_eq!(p.launch_ns.value, f.launch_ns.value);
    assert!(p.gemm_ramp_ns.ci95.is_some() && bw.ci95.is_some());
    assert!(!p.gemm_ramp_per_product);
    // What it does not measure stays the base's.
    assert_eq!(p.intra, base.intra);
    assert_eq!(p.peak_bf16_flops_per_s, base.peak_bf16_flops_per_s);
    assert_eq!(p.sm_count, base.sm_count);
    // The written profile loads back to the same numbers.
    let text = crate::write::profile_toml(&p, None, Some(&provenance()), &[]);
    let back = twin_sim::profile::parse_str(&text, "written.toml").unwrap();
    let back_bw = back.memory_bandwidth_bytes_per_s.as_ref().unwrap();
    assert!(close(back_bw.value, bw.value));
    assert!(close(
        back.memory_efficiency.value,
        p.memory_efficiency.value
    ));
    assert!(close(back.gemm_ramp_ns.value, p.gemm_ramp_ns.value));
    assert!(close(back.launch_ns.value, p.launch_ns.value));
}

/// The case an H200 met: `--gpu-name h200-141gb --base-profile h100-dgx.toml`, copies at
/// 4.26 TB/s, above the H100's datasheet 3.35 TB/s.
#[test]
fn an_h200_over_the_h100_profile_is_named_for_the_h200_and_keeps_its_full_bandwidth() {
    let measured_bw = 4.262e12;
    let (_, s) = synthetic_with(5, measured_bw);
    let h100 = bundled("h100-dgx.toml");
    let (p, back) = written(
        Request {
            gpu_name: Some("h200-141gb".into()),
            base: Some((h100.clone(), "h100-dgx.toml".into())),
            device: Some(h200_device()),
            ..Request::default()
        },
        &s,
    );
    assert_eq!(back.gpu, "h200-141gb");
    assert!(back.name.contains("h200-141gb"), "{}", back.name);
    // The GPU section is the H200's preset, the SM count the device's, the network the base's.
    let h200 = twin_sim::scenario::gpu_preset("h200-141gb").unwrap();
    assert_eq!(
        back.hbm_bandwidth_bytes_per_s.value,
        h200.hbm_bandwidth_bytes_per_s
    );
    assert_eq!(back.peak_bf16_flops_per_s.value, h200.peak.bf16_flops_per_s);
    assert_eq!(back.sm_count.value, 132.0);
    assert_eq!(back.intra, h100.intra);
    assert_eq!(back.inter, h100.inter);
    // The bandwidth is stored whole, above the base's datasheet, with its interval.
    let bw = back.memory_bandwidth_bytes_per_s.as_ref().unwrap();
    assert!((bw.value / measured_bw - 1.0).abs() < 0.02, "{bw:?}");
    assert!(bw.value > h100.hbm_bandwidth_bytes_per_s.value);
    let [lo, hi] = bw.ci95.unwrap();
    assert!(lo < bw.value && bw.value < hi && lo > h100.hbm_bandwidth_bytes_per_s.value);
    assert!(close(
        bw.value,
        p.memory_bandwidth_bytes_per_s.unwrap().value
    ));
    // The cost model prices memory-bound work at the fitted bandwidth.
    let mut scenario = twin_sim::testing::small_scenario(1, 1, 1, 1);
    scenario.cluster.gpu = h200;
    twin_sim::profile::check_matches(&scenario, &back).unwrap();
    let cost = twin_sim::cost::Analytic::from_profile(&scenario, &back);
    let secs = cost.memory_pass_s(twin_sim::schedule::Phase::Forward, 1 << 30);
    assert!(((1u64 << 30) as f64 / secs / bw.value - 1.0).abs() < 1e-9);
}

/// A GPU with no preset and no bundled profile: a scenario's inline `cluster.gpu` gives the
/// figures and its node the network tiers.
#[test]
fn a_gpu_without_a_bundled_profile_starts_from_the_scenario() {
    let (_, s) = synthetic(6);
    let mut scenario = twin_sim::testing::small_scenario(1, 1, 1, 1);
    scenario.cluster.gpu.name = "lab-gpu".into();
    scenario.cluster.gpu.peak.bf16_flops_per_s = 1.2e15;
    scenario.cluster.gpu.hbm_bandwidth_bytes_per_s = 2.5e12;
    let links = twin_sim::cost::Analytic::new(&scenario).links;
    let (_, back) = written(
        Request {
            scenario: Some(ScenarioGpu {
                origin: "lab.toml".into(),
                gpu: scenario.cluster.gpu.clone(),
                links: links.clone(),
            }),
            device: Some(Device {
                name: "Lab GPU".into(),
                sm_count: 96,
                memory_bytes: 1 << 36,
            }),
            ..Request::default()
        },
        &s,
    );
    assert_eq!(back.gpu, "lab-gpu");
    twin_sim::profile::check_matches(&scenario, &back).unwrap();
    assert_eq!(back.peak_bf16_flops_per_s.value, 1.2e15);
    assert_eq!(back.hbm_bandwidth_bytes_per_s.value, 2.5e12);
    assert_eq!(back.sm_count.value, 96.0);
    assert_eq!(
        back.intra.bandwidth_bytes_per_s.value,
        links.intra_bandwidth_bytes_per_s
    );
    assert_eq!(back.inter.latency_ns.value, links.inter_latency_ns as f64);
    let rate = back.gemm_bf16_flops_per_s.as_ref().unwrap();
    assert!((rate.value / RATE - 1.0).abs() < 0.03, "{rate:?}");
}

/// Nothing known of the GPU but what the device reports: the fits stand in for the bf16 peak
/// and the HBM bandwidth, and say so.
#[test]
fn a_gpu_known_only_by_its_device_takes_its_peaks_from_the_fits() {
    let (_, s) = synthetic(7);
    let scenario = twin_sim::testing::small_scenario(1, 1, 1, 1);
    let (_, back) = written(
        Request {
            gpu_name: Some("nvidia-lab".into()),
            scenario: Some(ScenarioGpu {
                origin: "s.toml".into(),
                gpu: scenario.cluster.gpu.clone(),
                links: twin_sim::cost::Analytic::new(&scenario).links,
            }),
            device: Some(Device {
                name: "NVIDIA Lab".into(),
                sm_count: 80,
                memory_bytes: 1 << 35,
            }),
            ..Request::default()
        },
        &s,
    );
    assert_eq!(back.gpu, "nvidia-lab");
    let rate = back.gemm_bf16_flops_per_s.as_ref().unwrap().value;
    let bw = back.memory_bandwidth_bytes_per_s.as_ref().unwrap().value;
    assert!(close(back.peak_bf16_flops_per_s.value, rate));
    assert!(close(back.hbm_bandwidth_bytes_per_s.value, bw));
    assert_eq!(back.peak_bf16_flops_per_s.source, Source::Fitted);
    assert!(back
        .peak_bf16_flops_per_s
        .reference
        .contains("no datasheet figure"));
}

#[test]
fn an_alias_names_the_preset_and_finds_its_bundled_profile() {
    let (_, s) = synthetic(8);
    let start = crate::gpu_base::start(Request {
        gpu_name: Some("h200-sxm-141gb".into()),
        device: Some(h200_device()),
        ..Request::default()
    })
    .unwrap();
    assert_eq!(start.gpu, "h200-141gb");
    assert_eq!(start.origin, "scenarios/profiles/h200-dgx.toml");
    assert!(!start.replace_gpu);
    let p = crate::run::cuda_profile(&start, &fit(&s).unwrap(), &provenance());
    assert_eq!(p.gpu, "h200-141gb");
    assert_eq!(p.name, "h200-141gb-calibrated");
}

#[test]
fn scenario_calls_are_the_batched_calls_the_backend_issues() {
    let s = twin_sim::testing::small_scenario(2, 2, 1, 4);
    let plan = twin_sim::plan::Plan::new(&s).unwrap();
    let schedule: Schedule = twin_sim::schedule::generate(&s, &plan).unwrap();
    let calls = scenario_calls(&schedule, usize::MAX);
    assert!(!calls.is_empty());
    // One call each: count == batch, and the attention products are batched.
    assert!(calls.iter().all(|g| g.count == g.batch && g.calls() == 1));
    assert!(calls.iter().any(|g| g.batch > 1), "{calls:?}");
    // Every GEMM shape of the schedule is there, and none twice.
    let mut keys: Vec<_> = calls.iter().map(|g| (g.m, g.n, g.k, g.batch)).collect();
    let n = keys.len();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), n);
    assert_eq!(scenario_calls(&schedule, 2).len(), 2.min(n));
}

#[test]
fn quick_plan_is_small_and_full_plan_larger() {
    let quick = Plan::new(true, &[]);
    let full = Plan::new(false, &[]);
    assert!(quick.total() < full.total());
    assert!(quick.repeats < full.repeats);
    // Enough distinct sizes for a line with an interval (two parameters, more points).
    for p in [&quick, &full] {
        assert!(
            p.memory_bytes.len() >= 3 && p.copy_bytes.len() >= 3 && p.chain_launches.len() >= 3
        );
    }
}

#[test]
fn without_a_gpu_measuring_is_an_error_not_a_panic() {
    // This machine may or may not have a GPU; without one the error says what to do.
    if let Err(e) = require_gpu() {
        let text = e.to_string();
        assert!(text.contains("`twin calibrate host`"), "{text}");
    }
}

const FP8_RATE: f64 = 1_500e12;
const FP8_K_HALF: f64 = 400.0;
const FP8_RAMP_NS: f64 = 11_000.0;

/// [`synthetic`] with an FP8 column drawn from the FP8 constants (tile 128) over the plan's
/// FP8 shapes.
fn synthetic_fp8(seed: u64) -> (Plan, CudaSamples) {
    let (plan, mut s) = synthetic(seed);
    let plan = plan.with_fp8();
    let mut rng = TestRng::new(seed.wrapping_add(100));
    s.gemm_fp8 = fp8_column(&plan.fp8_gemms, &mut rng, FP8_RATE, FP8_K_HALF, FP8_RAMP_NS);
    (plan, s)
}

/// One FP8 column's samples over `shapes`, drawn from a curve of tile 128 with 1% noise,
/// every fifth sweep shape held out.
fn fp8_column(
    shapes: &[(Gemm, &'static str)],
    rng: &mut TestRng,
    rate: f64,
    k_half: f64,
    ramp_ns: f64,
) -> Vec<GemmSamples> {
    shapes
        .iter()
        .enumerate()
        .map(|(i, (g, origin))| {
            let kf = g.k as f64;
            let t = gemm::padded_flops(g.m, g.n, g.k, 128, 128) / (rate * kf / (kf + k_half)) * 1e9
                + ramp_ns;
            let k = noisy(rng, t, 7);
            GemmSamples {
                m: g.m,
                n: g.n,
                k: g.k,
                batch: 1,
                origin: (*origin).to_string(),
                holdout: *origin == "sweep" && i % 5 == 4,
                kept_ns: k.kept,
                dropped_ns: k.dropped,
                warm_kept_ns: Vec::new(),
                warm_dropped_ns: Vec::new(),
            }
        })
        .collect()
}

/// The FP8 column takes the shapes cuBLASLt's FP8 kernels run (k a multiple of 16, n of 8, one
/// product per call) and no others.
#[test]
fn the_fp8_column_takes_the_shapes_fp8_runs() {
    assert!(fp8_shape(&Gemm::single(100, 1000, 64, 1)));
    // n = 1004 is not a multiple of 8; k = 72 not of 16.
    assert!(!fp8_shape(&Gemm::single(100, 1004, 64, 1)));
    assert!(!fp8_shape(&Gemm::single(100, 1000, 72, 1)));
    let (plan, _) = synthetic(8);
    assert!(plan.fp8_gemms.is_empty());
    let with = plan.clone().with_fp8();
    // Every quick sweep shape aligns; of the two scenario calls the batched one is left out.
    assert_eq!(with.fp8_gemms.len(), plan.gemms.len() - 1);
    assert!(with.fp8_gemms.iter().all(|(g, _)| g.batch == 1));
    // The FP8 column, and the back-to-back run in FP8 as well as bf16.
    assert_eq!(with.sustained_columns().len(), 2);
    assert_eq!(with.total(), plan.total() + with.fp8_gemms.len() + 1);
}

/// An FP8 column is fitted as its own curve and written as `[gemm.fp8]`: efficiency against
/// the FP8 peak, which the loader reads back.
#[test]
fn the_fp8_column_is_written_as_its_own_curve() {
    let (_, s) = synthetic_fp8(9);
    let f = fit(&s).unwrap();
    let f8 = f.gemm_fp8.as_ref().unwrap();
    assert!(
        (f8.rate_flops_per_s.value / FP8_RATE - 1.0).abs() < 0.03,
        "{f8:?}"
    );
    assert!((f8.k_half.value / FP8_K_HALF - 1.0).abs() < 0.15, "{f8:?}");
    assert!(
        (f8.ramp_ns.value / FP8_RAMP_NS - 1.0).abs() < 0.15,
        "{f8:?}"
    );
    assert!(f.gemm_fp8_holdout_samples > 0);
    assert!(f.gemm_fp8_holdout_max_relative_error < 0.03);
    // The bf16 curve is unchanged by the FP8 column.
    assert!((f.gemm.rate_flops_per_s.value / RATE - 1.0).abs() < 0.03);
    let base = bundled("h100-dgx.toml");
    let (p, back) = written(
        Request {
            gpu_name: Some("h100-sxm-80gb".into()),
            ..Request::default()
        },
        &s,
    );
    let c = back.gemm_fp8.as_ref().unwrap();
    let rate = c.max_efficiency.value * base.peak_fp8_flops_per_s.value;
    assert!(
        (rate / f8.rate_flops_per_s.value - 1.0).abs() < 1e-5,
        "{rate}"
    );
    let [lo, hi] = c.max_efficiency.ci95.unwrap();
    assert!(lo < c.max_efficiency.value && c.max_efficiency.value < hi);
    assert!(close(c.k_half.value, f8.k_half.value));
    assert!(close(c.ramp_ns.value, f8.ramp_ns.value));
    assert_eq!(c.tile_m.value, f8.tile_m as f64);
    assert_eq!(back.peak_fp8_flops_per_s, base.peak_fp8_flops_per_s);
    assert!(p.gemm_fp8.unwrap().max_efficiency.reference.contains("FP8"));
    // The cost model prices an FP8 GEMM by this curve.
    let scenario = twin_sim::testing::small_scenario(1, 1, 1, 1);
    let cost = twin_sim::cost::Analytic::from_profile(&scenario, &back);
    assert!(cost.gemm_fp8.is_some());
}

/// Without an FP8 column the profile keeps its base's `[gemm.fp8]`; older samples files (no
/// `gemm_fp8` key) still read.
#[test]
fn without_fp8_samples_the_base_fp8_curve_stays() {
    let (_, s) = synthetic(10);
    let f = fit(&s).unwrap();
    assert!(f.gemm_fp8.is_none());
    let start = crate::gpu_base::start(Request {
        gpu_name: Some("h100-sxm-80gb".into()),
        ..Request::default()
    })
    .unwrap();
    let p = crate::run::cuda_profile(&start, &f, &provenance());
    assert_eq!(p.gemm_fp8, start.base.gemm_fp8);
    let json = serde_json::to_string(&s).unwrap();
    assert!(!json.contains("gemm_fp8"));
    let back: CudaSamples = serde_json::from_str(&json).unwrap();
    assert!(back.gemm_fp8.is_empty());
}

/// A GPU known only by its device: the fitted FP8 rate stands in for its FP8 peak, so the
/// curve's efficiency is 1 and the profile loads.
#[test]
fn a_gpu_without_figures_takes_its_fp8_peak_from_the_fit() {
    let (_, s) = synthetic_fp8(11);
    let scenario = twin_sim::testing::small_scenario(1, 1, 1, 1);
    let (_, back) = written(
        Request {
            gpu_name: Some("nvidia-lab".into()),
            scenario: Some(ScenarioGpu {
                origin: "s.toml".into(),
                gpu: scenario.cluster.gpu.clone(),
                links: twin_sim::cost::Analytic::new(&scenario).links,
            }),
            device: Some(h200_device()),
            ..Request::default()
        },
        &s,
    );
    let c = back.gemm_fp8.as_ref().unwrap();
    assert!(close(c.max_efficiency.value, 1.0));
    assert!((back.peak_fp8_flops_per_s.value / FP8_RATE - 1.0).abs() < 0.03);
}

const ROWWISE_RATE: f64 = 1_300e12;
const ROWWISE_K_HALF: f64 = 600.0;
const ROWWISE_RAMP_NS: f64 = 14_000.0;

/// [`synthetic_fp8`] with a rowwise column over the same shapes, drawn from the rowwise
/// constants.
fn synthetic_rowwise(seed: u64) -> (Plan, CudaSamples) {
    let (plan, mut s) = synthetic_fp8(seed);
    let plan = plan.with_fp8_rowwise();
    let mut rng = TestRng::new(seed.wrapping_add(200));
    s.gemm_fp8_rowwise = fp8_column(
        &plan.fp8_rowwise_gemms,
        &mut rng,
        ROWWISE_RATE,
        ROWWISE_K_HALF,
        ROWWISE_RAMP_NS,
    );
    (plan, s)
}

/// The backend runs rowwise and block scales as they are only on Hopper (compute capability
/// 9.x); elsewhere it would run them per tensor, which their columns must not measure. The
/// per-tensor recipes have no scales of their own to check.
#[test]
fn own_scales_are_measured_only_where_the_backend_runs_them() {
    for recipe in [Fp8Recipe::Rowwise, Fp8Recipe::Blockwise] {
        assert_eq!(scales_run_on((9, 0), recipe), Ok(()), "{recipe:?}");
        for cc in [(8, 9), (10, 0), (12, 0)] {
            let why = scales_run_on(cc, recipe).unwrap_err();
            assert!(why.contains("per-tensor"), "{recipe:?} {cc:?}: {why}");
        }
    }
    // No FP8 tensor cores at all.
    let why = scales_run_on((8, 0), Fp8Recipe::Rowwise).unwrap_err();
    assert!(why.contains("no FP8 tensor cores"), "{why}");
    let why = scales_run_on((9, 0), Fp8Recipe::Tensorwise).unwrap_err();
    assert!(why.contains("no scales of its own"), "{why}");
}

/// The rowwise column is the FP8 column's shapes again, and the progress bar counts it.
#[test]
fn the_rowwise_column_repeats_the_fp8_shapes_and_is_counted() {
    let quick = Plan::new(true, &[]);
    // The quick plan: 4 x 4 x 3 = 48 sweep shapes (all FP8-aligned: k in {64, 512, 4096} are
    // multiples of 16, n in {512, 1000, 2048, 8192} of 8), 4 memory-bound sizes, 3 copy sizes
    // each way, 4 launch chains, and the back-to-back run in bf16 (in FP8 too with an FP8
    // column).
    assert_eq!(quick.total(), 48 + 4 + 2 * 3 + 4 + 1);
    let fp8 = quick.clone().with_fp8();
    assert_eq!(fp8.total(), 63 + 48 + 1);
    assert!(fp8.fp8_rowwise_gemms.is_empty());
    let both = fp8.clone().with_fp8_rowwise();
    assert_eq!(both.fp8_rowwise_gemms, both.fp8_gemms);
    assert_eq!(both.total(), 63 + 48 + 1 + 48);
    // The plan's JSON lists the rowwise shapes only when there are some.
    let json = |p: &Plan| serde_json::to_value(p).unwrap();
    assert!(json(&fp8).get("fp8_rowwise_gemms").is_none());
    assert_eq!(
        json(&both)["fp8_rowwise_gemms"].as_array().map(Vec::len),
        Some(48)
    );
}

/// A rowwise column is fitted as its own curve and written as `[gemm.fp8_rowwise]`, its
/// efficiency the fitted rate over the FP8 peak; `[gemm.fp8]` stays the tensorwise curve.
#[test]
fn the_rowwise_column_is_written_as_its_own_curve() {
    let (plan, s) = synthetic_rowwise(12);
    let f = fit(&s).unwrap();
    let r = f.gemm_fp8_rowwise.as_ref().unwrap();
    assert!(
        (r.rate_flops_per_s.value / ROWWISE_RATE - 1.0).abs() < 0.03,
        "{r:?}"
    );
    assert!(
        (r.k_half.value / ROWWISE_K_HALF - 1.0).abs() < 0.15,
        "{r:?}"
    );
    assert!(
        (r.ramp_ns.value / ROWWISE_RAMP_NS - 1.0).abs() < 0.15,
        "{r:?}"
    );
    // Every fifth FP8 sweep shape is held out (48 quick sweep shapes: 9 of them).
    let sweep = plan
        .fp8_rowwise_gemms
        .iter()
        .filter(|(_, o)| *o == "sweep")
        .count();
    assert_eq!(f.gemm_fp8_rowwise_holdout_samples, sweep / 5);
    assert!(f.gemm_fp8_rowwise_holdout_max_relative_error < 0.03);
    // The tensorwise curve is the one its own column gives.
    let tensorwise = fit(&CudaSamples {
        gemm_fp8_rowwise: Vec::new(),
        ..s.clone()
    })
    .unwrap();
    assert_eq!(f.gemm_fp8, tensorwise.gemm_fp8);
    let base = bundled("h100-dgx.toml");
    let (p, back) = written(
        Request {
            gpu_name: Some("h100-sxm-80gb".into()),
            ..Request::default()
        },
        &s,
    );
    let peak = base.peak_fp8_flops_per_s.value;
    let c = back.gemm_fp8_rowwise.as_ref().unwrap();
    assert!(close(
        c.max_efficiency.value * peak,
        r.rate_flops_per_s.value
    ));
    let [lo, hi] = c.max_efficiency.ci95.unwrap();
    assert!(close(lo * peak, r.rate_flops_per_s.ci95[0]));
    assert!(close(hi * peak, r.rate_flops_per_s.ci95[1]));
    assert!(close(c.k_half.value, r.k_half.value));
    assert!(close(c.ramp_ns.value, r.ramp_ns.value));
    assert_eq!(
        (c.tile_m.value, c.tile_n.value),
        (r.tile_m as f64, r.tile_n as f64)
    );
    assert_eq!(c.max_efficiency.source, Source::Fitted);
    assert!(c.max_efficiency.reference.contains("rowwise"));
    let t = back.gemm_fp8.as_ref().unwrap();
    let tw = f.gemm_fp8.as_ref().unwrap();
    assert!(close(
        t.max_efficiency.value * peak,
        tw.rate_flops_per_s.value
    ));
    assert!(p
        .gemm_fp8
        .unwrap()
        .max_efficiency
        .reference
        .contains("tensorwise"));
    // The cost model prices rowwise FP8 GEMMs by the rowwise curve, other recipes by
    // [gemm.fp8].
    use twin_sim::scenario::Fp8Recipe;
    let eff = |recipe| back.gemm_fp8_curve_for(recipe).unwrap().max_efficiency;
    assert_eq!(eff(Fp8Recipe::Rowwise), c.max_efficiency.value);
    assert_eq!(eff(Fp8Recipe::Tensorwise), t.max_efficiency.value);
}

/// Without a rowwise column the profile keeps its base's `[gemm.fp8_rowwise]` (the bundled
/// Hopper profiles have one), and writes none over a base without it.
#[test]
fn without_rowwise_samples_no_rowwise_curve_is_fitted() {
    let (_, s) = synthetic_fp8(13);
    let f = fit(&s).unwrap();
    assert!(f.gemm_fp8_rowwise.is_none());
    assert_eq!(f.gemm_fp8_rowwise_holdout_samples, 0);
    let start = crate::gpu_base::start(Request {
        gpu_name: Some("h100-sxm-80gb".into()),
        ..Request::default()
    })
    .unwrap();
    assert!(start.base.gemm_fp8_rowwise.is_some());
    let p = crate::run::cuda_profile(&start, &f, &provenance());
    assert_eq!(p.gemm_fp8_rowwise, start.base.gemm_fp8_rowwise);
    // A GPU whose base is built from a scenario has no rowwise curve to keep.
    let mut scenario = twin_sim::testing::small_scenario(1, 1, 1, 1);
    scenario.cluster.gpu.name = "lab-gpu".into();
    let start = crate::gpu_base::start(Request {
        scenario: Some(ScenarioGpu {
            origin: "lab.toml".into(),
            gpu: scenario.cluster.gpu.clone(),
            links: twin_sim::cost::Analytic::new(&scenario).links,
        }),
        device: Some(h200_device()),
        ..Request::default()
    })
    .unwrap();
    let p = crate::run::cuda_profile(&start, &f, &provenance());
    assert!(p.gemm_fp8_rowwise.is_none() && p.gemm_fp8.is_some());
    let text = crate::write::profile_toml(&p, None, Some(&provenance()), &[]);
    assert!(text.contains("[gemm.fp8]"), "{text}");
    assert!(!text.contains("[gemm.fp8_rowwise]"), "{text}");
}

/// A samples file written before the rowwise column (no `gemm_fp8_rowwise` key) reads back
/// and refits as it did: the same fits, no rowwise curve, the base's section kept.
#[test]
fn an_older_samples_file_without_rowwise_refits_unchanged() {
    let (_, s) = synthetic_fp8(14);
    let prov = provenance();
    let file = serde_json::json!({
        "provenance": prov,
        "plan": null,
        "device": null,
        "samples": s,
    })
    .to_string();
    assert!(!file.contains("gemm_fp8_rowwise"), "{file}");
    assert!(file.contains("\"gemm_fp8\""));
    let req = || Request {
        gpu_name: Some("h100-sxm-80gb".into()),
        ..Request::default()
    };
    let (run, start) = crate::refit::refit_cuda(&file, "old.samples.json", req(), "refit").unwrap();
    assert_eq!(run.samples, s);
    assert_eq!(run.fits, fit(&s).unwrap());
    assert!(run.fits.gemm_fp8_rowwise.is_none());
    assert_eq!(run.profile.gemm_fp8_rowwise, start.base.gemm_fp8_rowwise);
    assert_eq!(
        run.profile,
        crate::run::cuda_profile(&start, &run.fits, &run.provenance)
    );
    // A file with the column refits to the rowwise curve.
    let (_, with) = synthetic_rowwise(14);
    let file = serde_json::json!({
        "provenance": prov,
        "plan": null,
        "device": null,
        "samples": with,
    })
    .to_string();
    let (run, _) = crate::refit::refit_cuda(&file, "new.samples.json", req(), "refit").unwrap();
    assert_eq!(run.samples.gemm_fp8_rowwise, with.gemm_fp8_rowwise);
    assert!(run.profile.gemm_fp8_rowwise != start.base.gemm_fp8_rowwise);
    assert!(run.toml.contains("rowwise outer-vector scales"));
}

/// A GPU known only by its device: the fastest fitted FP8 rate stands in for its FP8 peak, so
/// both curves load (efficiency at most 1), the faster one at exactly 1.
#[test]
fn a_gpu_without_figures_takes_the_fastest_fp8_rate_as_its_peak() {
    let (plan, mut s) = synthetic_rowwise(15);
    let scenario = twin_sim::testing::small_scenario(1, 1, 1, 1);
    let req = || Request {
        gpu_name: Some("nvidia-lab".into()),
        scenario: Some(ScenarioGpu {
            origin: "s.toml".into(),
            gpu: scenario.cluster.gpu.clone(),
            links: twin_sim::cost::Analytic::new(&scenario).links,
        }),
        device: Some(h200_device()),
        ..Request::default()
    };
    // Rowwise slower: the tensorwise rate is the peak.
    let (_, back) = written(req(), &s);
    assert!(close(
        back.gemm_fp8.as_ref().unwrap().max_efficiency.value,
        1.0
    ));
    let r = back.gemm_fp8_rowwise.as_ref().unwrap().max_efficiency.value;
    assert!((r / (ROWWISE_RATE / FP8_RATE) - 1.0).abs() < 0.05, "{r}");
    // Rowwise faster (drawn at 1.2x the tensorwise rate): the rowwise rate is the peak.
    let mut rng = TestRng::new(315);
    s.gemm_fp8_rowwise = fp8_column(
        &plan.fp8_rowwise_gemms,
        &mut rng,
        1.2 * FP8_RATE,
        FP8_K_HALF,
        FP8_RAMP_NS,
    );
    let (_, back) = written(req(), &s);
    assert!(close(
        back.gemm_fp8_rowwise.as_ref().unwrap().max_efficiency.value,
        1.0
    ));
    let t = back.gemm_fp8.as_ref().unwrap().max_efficiency.value;
    assert!((t * 1.2 - 1.0).abs() < 0.05, "{t}");
}

/// The text summary prints the rowwise curve's line where it was fitted, and not otherwise.
#[test]
fn the_text_summary_has_a_rowwise_line_where_one_was_fitted() {
    let start = crate::gpu_base::start(Request {
        gpu_name: Some("h100-sxm-80gb".into()),
        ..Request::default()
    })
    .unwrap();
    let summary = |s: &CudaSamples| {
        let fits = fit(s).unwrap();
        let run = crate::CudaRun {
            plan: None,
            device: None,
            refit_of: None,
            profile: crate::run::cuda_profile(&start, &fits, &provenance()),
            fits,
            provenance: provenance(),
            elapsed_s: 0.0,
            samples: s.clone(),
            toml: String::new(),
        };
        crate::text::cuda_text(&run, &start, std::path::Path::new("p.toml"), None)
    };
    let title = "cuBLASLt FP8 GEMM curve (e4m3, rowwise scales)";
    let with = summary(&synthetic_rowwise(16).1);
    assert_eq!(with.matches(title).count(), 1, "{with}");
    assert!(with.contains("cuBLASLt FP8 GEMM curve (e4m3, tensorwise scales)"));
    let without = summary(&synthetic_fp8(16).1);
    assert!(!without.contains(title), "{without}");
}

/// Records every progress update.
struct Updates(Vec<(String, usize, usize)>);

impl Progress for Updates {
    fn update(&mut self, benchmark: &str, done: usize, total: usize) {
        self.0.push((benchmark.to_string(), done, total));
    }
}

/// The FP8 columns are timed shape by shape; a column cuBLASLt cannot run as asked is left
/// out whole with a note, the other kept, and the progress bar still reaches the columns' end.
#[test]
fn an_fp8_column_that_cannot_run_as_asked_is_left_out_with_a_note() {
    let plan = Plan::new(true, &[]).with_fp8().with_fp8_rowwise();
    let (n8, nr) = (plan.fp8_gemms.len(), plan.fp8_rowwise_gemms.len());
    let mut calls = Vec::new();
    let time = |g: &Gemm, recipe: twin_sim::scenario::Fp8Recipe| {
        calls.push(recipe);
        match recipe {
            twin_sim::scenario::Fp8Recipe::Rowwise if calls.len() == n8 + 3 => Err(
                twin_runtime::RuntimeError::Unsupported("no outer-vector kernel".into()),
            ),
            _ => Ok(vec![vec![g.k * 10; 7]]),
        }
    };
    let mut progress = Updates(Vec::new());
    let mut done = 5;
    let mut out = CudaSamples::default();
    let notes = fp8_columns(&plan, time, &mut progress, &mut done, &mut out).unwrap();
    // The tensorwise column whole, one sample per shape, every fifth sweep shape held out.
    assert_eq!(out.gemm_fp8.len(), n8);
    assert_eq!(out.gemm_fp8.iter().filter(|s| s.holdout).count(), n8 / 5);
    assert!(out
        .gemm_fp8
        .iter()
        .all(|s| s.kept_ns == vec![s.k as f64 * 10.0; 7]));
    // The rowwise column stopped at its third shape and was dropped.
    assert_eq!(calls.len(), n8 + 3);
    assert!(out.gemm_fp8_rowwise.is_empty());
    assert_eq!(notes.len(), 1);
    let g = plan.fp8_rowwise_gemms[2].0;
    let at = format!("{}x{}x{}", g.m, g.n, g.k);
    for part in [
        "rowwise FP8 GEMM",
        "no outer-vector kernel",
        "[gemm.fp8_rowwise]",
        &at,
    ] {
        assert!(notes[0].contains(part), "{part}: {}", notes[0]);
    }
    // Every measurement of both columns counted, from where `done` started.
    assert_eq!(done, 5 + n8 + nr);
    assert!(progress
        .0
        .iter()
        .all(|(_, d, t)| *d < *t && *t == plan.total()));
    assert_eq!(progress.0.len(), n8 + 3);
}

/// An error other than "unsupported" (a CUDA failure) stops the calibration.
#[test]
fn a_cuda_failure_in_an_fp8_column_is_an_error() {
    let plan = Plan::new(true, &[]).with_fp8();
    let time = |_: &Gemm, _| {
        Err(twin_runtime::RuntimeError::Cuda {
            call: "cuLaunchKernel",
            message: "CUDA_ERROR_LAUNCH_FAILED".into(),
        })
    };
    let mut done = 0;
    let e = fp8_columns(
        &plan,
        time,
        &mut crate::bench::Silent,
        &mut done,
        &mut CudaSamples::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("CUDA_ERROR_LAUNCH_FAILED"), "{e}");
}

fn sustained_samples(times_ns: Vec<u64>) -> SustainedSamples {
    SustainedSamples {
        column: SUSTAINED_BF16.to_string(),
        m: 8192,
        n: 8192,
        k: 8192,
        idle_ns: 1_000_000_000,
        times_ns,
    }
}

/// A run that throttles: 40 calls of 1 ms, then 60 of 1.2 ms. The early rate is the first
/// 20 ms' median call, the late one the last third's; the throttle starts where five calls in
/// a row first have a median slower than halfway between (call 38, 38 ms in).
#[test]
fn a_back_to_back_run_gives_its_early_and_late_rates() {
    let mut t = vec![1_000_000u64; 40];
    t.extend(vec![1_200_000u64; 60]);
    let b = Sustained::of(&sustained_samples(t)).unwrap();
    let flops = 2.0 * 8192f64.powi(3);
    assert!((b.early_flops_per_s - flops / 1e-3).abs() < 1.0, "{b:?}");
    assert!((b.late_flops_per_s - flops / 1.2e-3).abs() < 1.0, "{b:?}");
    assert!((b.late_fraction - 1.0 / 1.2).abs() < 1e-12, "{b:?}");
    assert_eq!(b.throttled_after_ns, Some(38_000_000));
    assert_eq!(b.calls, 100);
    // Nothing throttled: the same rate throughout, no throttle time.
    let b = Sustained::of(&sustained_samples(vec![1_000_000; 50])).unwrap();
    assert_eq!(b.late_fraction, 1.0);
    assert_eq!(b.throttled_after_ns, None);
    // Too few calls to tell.
    assert!(Sustained::of(&sustained_samples(vec![1_000_000; 5])).is_none());
}

/// The back-to-back shape is the scenario's largest one-product call (8192^3 without one); it
/// runs in bf16, and in FP8 too where the plan has an FP8 column; the progress total counts it.
#[test]
fn the_plan_times_its_largest_call_back_to_back() {
    let plan = Plan::new(true, &[]);
    assert_eq!(plan.sustained, Gemm::single(8192, 8192, 8192, 1));
    assert_eq!(plan.sustained_columns(), vec![SUSTAINED_BF16]);
    let calls = [
        Gemm::single(2048, 4096, 4096, 1),
        Gemm::single(4096, 14336, 4096, 1),
        // Batched: not one product per call, so not the back-to-back shape.
        Gemm {
            batch: 32,
            count: 32,
            ..Gemm::single(8192, 8192, 128, 1)
        },
    ];
    let with = Plan::new(true, &calls).with_fp8();
    assert_eq!(with.sustained, Gemm::single(4096, 14336, 4096, 1));
    assert_eq!(
        with.sustained_columns(),
        vec![SUSTAINED_BF16, SUSTAINED_FP8]
    );
    let without = Plan::new(true, &calls);
    assert_eq!(with.total() - without.total(), with.fp8_gemms.len() + 1);
}

/// Samples files written before the back-to-back runs read as none of them; the fits carry
/// one per run, and the note reports its fraction.
#[test]
fn back_to_back_runs_travel_through_the_samples_and_the_fits() {
    let mut s = CudaSamples::default();
    let old = serde_json::to_value(&s).unwrap();
    assert!(old.get("sustained").is_none());
    let back: CudaSamples = serde_json::from_value(old).unwrap();
    assert!(back.sustained.is_empty());
    let mut t = vec![1_000_000u64; 40];
    t.extend(vec![1_250_000u64; 60]);
    s.sustained.push(sustained_samples(t));
    let text = serde_json::to_string(&s).unwrap();
    let back: CudaSamples = serde_json::from_str(&text).unwrap();
    assert_eq!(back.sustained, s.sustained);
    let found: Vec<Sustained> = back.sustained.iter().filter_map(Sustained::of).collect();
    let note = crate::run::power_cap_note(&found);
    assert!(note.contains("bf16 0.80"), "{note}");
    assert!(crate::run::power_cap_note(&[]).contains("0.83-0.86"));
}

const BLOCKWISE_RATE: f64 = 1_200e12;
const BLOCKWISE_K_HALF: f64 = 400.0;
const BLOCKWISE_RAMP_NS: f64 = 9_000.0;

/// A blockwise column repeats the FP8 shapes, is counted by the progress bar, is fitted as
/// its own curve and written as `[gemm.fp8_blockwise]`, which the cost model prices blockwise
/// FP8 GEMMs by; the tensorwise and rowwise curves stay their own columns'.
#[test]
fn the_blockwise_column_is_written_as_its_own_curve() {
    let (plan, mut s) = synthetic_rowwise(14);
    let before = plan.total();
    let plan = plan.with_fp8_blockwise();
    assert_eq!(plan.fp8_blockwise_gemms, plan.fp8_gemms);
    assert_eq!(plan.total(), before + plan.fp8_gemms.len());
    let mut rng = TestRng::new(314);
    s.gemm_fp8_blockwise = fp8_column(
        &plan.fp8_blockwise_gemms,
        &mut rng,
        BLOCKWISE_RATE,
        BLOCKWISE_K_HALF,
        BLOCKWISE_RAMP_NS,
    );
    let f = fit(&s).unwrap();
    let b = f.gemm_fp8_blockwise.as_ref().unwrap();
    assert!(
        (b.rate_flops_per_s.value / BLOCKWISE_RATE - 1.0).abs() < 0.03,
        "{b:?}"
    );
    assert!(
        (b.ramp_ns.value / BLOCKWISE_RAMP_NS - 1.0).abs() < 0.15,
        "{b:?}"
    );
    let sweep = plan
        .fp8_blockwise_gemms
        .iter()
        .filter(|(_, o)| *o == "sweep")
        .count();
    assert_eq!(f.gemm_fp8_blockwise_holdout_samples, sweep / 5);
    let without = fit(&CudaSamples {
        gemm_fp8_blockwise: Vec::new(),
        ..s.clone()
    })
    .unwrap();
    assert_eq!(f.gemm_fp8, without.gemm_fp8);
    assert_eq!(f.gemm_fp8_rowwise, without.gemm_fp8_rowwise);
    assert!(without.gemm_fp8_blockwise.is_none());
    let (_, back) = written(
        Request {
            gpu_name: Some("h100-sxm-80gb".into()),
            ..Request::default()
        },
        &s,
    );
    let peak = back.peak_fp8_flops_per_s.value;
    let c = back.gemm_fp8_blockwise.as_ref().unwrap();
    assert!(close(
        c.max_efficiency.value * peak,
        b.rate_flops_per_s.value
    ));
    assert!(c.max_efficiency.reference.contains("block scales"));
    use twin_sim::scenario::Fp8Recipe;
    let eff = |recipe| back.gemm_fp8_curve_for(recipe).unwrap().max_efficiency;
    assert_eq!(eff(Fp8Recipe::Blockwise), c.max_efficiency.value);
    assert_ne!(eff(Fp8Recipe::Blockwise), eff(Fp8Recipe::Tensorwise));
    // The FP8 column is timed with the forward's fast accumulation: it prices forward and
    // backward alike, so the base's fast-accumulation curve (under the power cap) is dropped.
    assert!(bundled("h100-dgx.toml").gemm_fp8_fast_accum.is_some());
    assert!(back.gemm_fp8_fast_accum.is_none());
    // Without a blockwise column the base's curve (the bundled H100 profile has one) stays.
    let start = crate::gpu_base::start(Request {
        gpu_name: Some("h100-sxm-80gb".into()),
        ..Request::default()
    })
    .unwrap();
    assert!(start.base.gemm_fp8_blockwise.is_some());
    let p = crate::run::cuda_profile(&start, &without, &provenance());
    assert_eq!(p.gemm_fp8_blockwise, start.base.gemm_fp8_blockwise);
}
