//! A real host calibration with the fewest samples (Tiny mode): every benchmark runs through
//! the runtime's code paths, every fit succeeds, and the written profile loads with twin's
//! profile loader (with the host-only keys removed, as the current loader does not know them
//! yet) and describes the fitted values.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_calibration::bench::{Mode, Silent};
use twin_calibration::write::without_host_keys;
use twin_calibration::{calibrate_host, HostOptions};
use twin_sim::profile::{parse_str, Source};

#[test]
fn tiny_host_calibration_writes_a_loadable_profile() {
    let opts = HostOptions {
        mode: Mode::Tiny,
        extra_shapes: vec![twin_sim::schedule::Gemm {
            m: 48,
            n: 96,
            k: 80,
            count: 1,
            batch: 1,
            dtype: None,
        }],
        step_bytes: Some(3 << 20),
        gpu_name: "cpu-core".into(),
        seed: 3,
        command: "test".into(),
        samples_file: "t.samples.json".into(),
    };
    let run = calibrate_host(&opts, &mut Silent).unwrap();
    assert!(run
        .samples
        .gemm
        .iter()
        .any(|g| g.origin == "scenario" && g.k == 80));
    // The scenario's step traffic bounds the eviction before cold passes.
    assert!(run.config.step_evict_bytes <= 3 << 20);
    assert_eq!(
        run.samples.memory_pass_cold.len(),
        run.config.cold_pass_bytes.len()
    );
    let kinds: std::collections::BTreeSet<&str> =
        run.samples.comm.iter().map(|c| c.kind.as_str()).collect();
    for k in [
        "p2p",
        "all-reduce",
        "all-gather",
        "reduce-scatter",
        "all-to-all",
        "broadcast",
    ] {
        assert!(kinds.contains(k), "{k} not measured");
    }
    for needle in [
        "[host]",
        "cores = {",
        "alloc_fixed_ns = {",
        "cold_efficiency = {",
        "[provenance]",
        "algorithm = \"ring\"",
    ] {
        assert!(run.toml.contains(needle), "{needle} missing:\n{}", run.toml);
    }
    let p = parse_str(&without_host_keys(&run.toml), "tiny").unwrap();
    assert_eq!(p.gpu, "cpu-core");
    assert_eq!(p.gemm_max_efficiency.source, Source::Fitted);
    assert!(p.gemm_max_efficiency.ci95.is_some());
    assert!(p.intra.latency_ns.ci95.is_some());
    // The profile says what was fitted: the sustained GEMM rate is rate = peak * efficiency.
    let rate = p.peak_fp32_flops_per_s.value * p.gemm_max_efficiency.value;
    let fitted = run.fits.gemm.rate_flops_per_s.value;
    assert!((rate / fitted - 1.0).abs() < 1e-4, "{rate} vs {fitted}");
    assert!(p.fit.as_ref().unwrap().samples > 50);
    let cold = p
        .memory_cold_efficiency
        .as_ref()
        .expect("a cold pass was fitted");
    assert_eq!(cold.source, Source::Fitted);
    // Samples serialise for the file beside the profile.
    let json = serde_json::to_string(&run.samples).unwrap();
    assert!(json.contains("\"kept_ns\""));
}
