//! The GPU calibration's fitting and planning, without a GPU: synthetic samples drawn from
//! known parameters with noise must give those parameters back, and the profile written from
//! the fits must carry them.

use super::*;
use crate::fit::TestRng;
use crate::sample::Kept;
use twin_sim::schedule::Schedule;

const RATE: f64 = 800e12;
const K_HALF: f64 = 200.0;
const RAMP_NS: f64 = 6_000.0;
const HBM: f64 = 3.35e12;
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
    let scenario = [
        Gemm {
            m: 2048,
            n: 2048,
            k: 128,
            count: 32,
            batch: 32,
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
    s.memory_bound = sized(&mut rng, &plan.memory_bytes, copy(3_000.0, MEMORY_BW));
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
    let f = fit(&s, HBM).unwrap();
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
    let eff = f.memory_efficiency.value;
    assert!((eff / (MEMORY_BW / HBM) - 1.0).abs() < 0.02, "{eff}");
    assert!(f.memory_efficiency.ci95[0] <= eff && eff <= f.memory_efficiency.ci95[1]);
    assert!(
        (f.launch_ns.value / LAUNCH_NS - 1.0).abs() < 0.03,
        "{:?}",
        f.launch_ns
    );
    let h2d = f.host_to_device.bandwidth_bytes_per_s.value;
    assert!((h2d / 50e9 - 1.0).abs() < 0.03, "{h2d}");
}

#[test]
fn the_profile_carries_the_fits_with_their_intervals_and_provenance() {
    let (_, s) = synthetic(4);
    let f = fit(&s, HBM).unwrap();
    let base = twin_sim::profile::parse_str(
        include_str!("../../scenarios/profiles/h100-dgx.toml"),
        "h100-dgx.toml",
    )
    .unwrap();
    let prov = crate::provenance::here(
        "cuda",
        "quick",
        "twin calibrate --backend cuda",
        "p.samples.json",
    );
    let p = crate::run::cuda_profile(&base, &f, &prov);
    let rate = p.gemm_max_efficiency.value * base.peak_bf16_flops_per_s.value;
    assert!((rate / f.gemm.rate_flops_per_s.value - 1.0).abs() < 1e-9);
    assert_eq!(p.memory_efficiency.value, f.memory_efficiency.value);
    assert_eq!(p.launch_ns.value, f.launch_ns.value);
    assert!(p.gemm_ramp_ns.ci95.is_some() && p.memory_efficiency.ci95.is_some());
    assert!(!p.gemm_ramp_per_product);
    // What it does not measure stays the base's.
    assert_eq!(p.intra, base.intra);
    assert_eq!(p.peak_bf16_flops_per_s, base.peak_bf16_flops_per_s);
    // The written profile loads back to the same numbers.
    let text = crate::write::profile_toml(&p, None, Some(&prov), &[]);
    let back = twin_sim::profile::parse_str(&text, "written.toml").unwrap();
    assert!((back.memory_efficiency.value / p.memory_efficiency.value - 1.0).abs() < 1e-5);
    assert!((back.gemm_ramp_ns.value / p.gemm_ramp_ns.value - 1.0).abs() < 1e-5);
    assert!((back.launch_ns.value / p.launch_ns.value - 1.0).abs() < 1e-5);
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
        assert!(text.contains("--backend host"), "{text}");
    }
}
