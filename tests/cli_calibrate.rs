//! End to end: `twin calibrate` on the host backend (hidden --tiny sample count), the
//! nccl-tests import, and `--backend cuda` on a machine without a GPU.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

mod common;
use common::twin_env as twin;
use std::path::{Path, PathBuf};
use std::process::Output;

fn scratch(name: &str) -> PathBuf {
    let d = common::scratch_dir("calibrate").join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn repo(p: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(p)
        .display()
        .to_string()
}

/// `twin calibrate ARGS -o OUT` with `env` set.
fn calibrate_to(out: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut a = vec!["calibrate"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", out.to_str().unwrap()]);
    twin(&a, env)
}

#[test]
fn host_calibration_writes_profile_and_samples() {
    let dir = scratch("host");
    let out = dir.join("host.toml");
    let single = repo("scenarios/host/single.toml");
    let o = calibrate_to(
        &out,
        &["host", "--tiny", "--scenario", &single, "--format", "json"],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // The documents' tags and keys (docs/reference/json.md; the other documents are checked
    // by cli_json_schema.rs).
    assert_eq!(json["schema"], "twin.calibrate-host/1");
    for key in [
        "config",
        "fits",
        "profile",
        "host",
        "provenance",
        "elapsed_s",
        "step_bytes",
        "refit_of",
    ] {
        assert!(json.get(key).is_some(), "{key}");
    }
    assert_eq!(json["profile"]["gpu"], "cpu-core");
    assert!(
        json["fits"]["gemm"]["rate_flops_per_s"]["value"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    let toml = std::fs::read_to_string(&out).unwrap();
    let loadable = twin_calibration::write::without_host_keys(&toml);
    let p = twin_sim::profile::parse_str(&loadable, "host.toml").unwrap();
    assert_eq!(p.gpu, "cpu-core");
    assert!(toml.contains("[provenance]") && toml.contains("[host]"));
    let samples: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("host.samples.json")).unwrap())
            .unwrap();
    assert_eq!(samples["schema"], "twin.calibration-samples/1");
    for key in ["provenance", "outlier_rule", "samples"] {
        assert!(samples.get(key).is_some(), "{key}");
    }
    let gemms = samples["samples"]["gemm"].as_array().unwrap();
    assert!(
        gemms.iter().any(|g| g["origin"] == "scenario"),
        "scenario shapes timed"
    );
    assert!(samples["provenance"]["hostname"].is_string());
    // Allocations and cold passes were timed after the scenario's step traffic.
    let scenario = twin_sim::setup::load(
        std::path::Path::new(&repo("scenarios/host/single.toml")),
        &[],
    )
    .unwrap();
    let plan = twin_sim::plan::Plan::new(&scenario).unwrap();
    let schedule = twin_sim::schedule::generate(&scenario, &plan).unwrap();
    let step = twin_calibration::bench::compute::step_bytes(&schedule);
    assert_eq!(json["step_bytes"].as_u64(), Some(step));
    let evict = json["config"]["step_evict_bytes"].as_u64().unwrap();
    assert!(evict > 0 && evict <= step, "{evict} vs {step}");
    assert!(!samples["samples"]["memory_pass_cold"]
        .as_array()
        .unwrap()
        .is_empty());
    shape_factors_price_each_timed_shape_at_its_measured_time(&toml, &samples);
    refit_gives_the_same_profile(&dir, &out, &toml);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The profile's curve with its shape factors prices every timed shape's back-to-back call at
/// its measured median (up to the six digits the profile is written with).
fn shape_factors_price_each_timed_shape_at_its_measured_time(
    toml: &str,
    samples: &serde_json::Value,
) {
    let p =
        twin_sim::profile::parse_str(&twin_calibration::write::without_host_keys(toml), "h.toml")
            .unwrap();
    assert!(!p.gemm_shape_factors.is_empty(), "{toml}");
    let curve = p.gemm_curve();
    let mut plain = curve.clone();
    plain.shape_factors.clear();
    let peak = p.peak_fp32_flops_per_s.value;
    let hbm = p.hbm_bandwidth_bytes_per_s.value * p.memory_efficiency.value;
    // A tiny calibration's operand terms may not fit (a note says so): then no call is cold.
    let cache = curve.operands.map_or(0, |o| o.cache_bytes);
    let mut checked = 0;
    for g in samples["samples"]["gemm"].as_array().unwrap() {
        let warm: Vec<f64> = g["warm_kept_ns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        if g["holdout"].as_bool().unwrap() || warm.is_empty() {
            continue;
        }
        let dim = |k: &str| g[k].as_u64().unwrap();
        let shape = twin_sim::schedule::Gemm::single(dim("m"), dim("n"), dim("k"), 1);
        let cold = cache > 0 && shape.working_set_bytes(4) > cache;
        let load_s = if cold {
            curve.cold_s(shape.operand_bytes(4))
        } else {
            0.0
        };
        let priced_ns = (curve.gemm_s(&shape, 4, peak, hbm) + load_s) * 1e9;
        let plain_ns = (plain.gemm_s(&shape, 4, peak, hbm) + load_s) * 1e9;
        let measured_ns = twin_calibration::sample::median(&warm).unwrap();
        // The measured time, unless the curve is off by more than the factors' limit (a tiny
        // calibration on a busy machine can be): then the limit.
        let limit = twin_sim::cost::shape_factors::LIMIT;
        let want_ns = plain_ns * (measured_ns / plain_ns).clamp(1.0 / limit, limit);
        assert!(
            (priced_ns / want_ns - 1.0).abs() < 1e-3,
            "{shape:?}: priced {priced_ns} measured {measured_ns} by the curve {plain_ns}"
        );
        checked += 1;
    }
    assert_eq!(checked, p.gemm_shape_factors.len());
}

/// `twin calibrate refit INPUT -o OUTPUT`.
fn refit_to(input: &Path, output: &Path) -> Output {
    twin(
        &[
            "calibrate",
            "refit",
            input.to_str().unwrap(),
            "-o",
            output.to_str().unwrap(),
        ],
        &[],
    )
}

/// `--refit` of the samples beside `profile` (whose text is `toml`): the same fitted values,
/// with the provenance of the measurement and of the refit; refused on a file that is not a
/// samples file, and where the profile would overwrite them.
fn refit_gives_the_same_profile(dir: &Path, profile: &Path, toml: &str) {
    let samples = dir.join("host.samples.json");
    let again = dir.join("again.toml");
    let o = refit_to(&samples, &again);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("fitted again from"), "{}", text(&o));
    let refit = std::fs::read_to_string(&again).unwrap();
    // Every fitted value is the same: only the references to the run and the provenance move.
    let values = |t: &str| -> Vec<String> {
        t.lines()
            .take_while(|l| !l.starts_with("[provenance]"))
            .filter(|l| {
                !l.starts_with('#') && !l.starts_with("description") && !l.starts_with("data")
            })
            .map(|l| match (l.find(", ref = \""), l.find("\", ci95")) {
                (Some(a), Some(b)) => format!("{}{}", &l[..a], &l[b + 1..]),
                (Some(a), None) => l[..a].to_string(),
                _ => l.to_string(),
            })
            .collect()
    };
    assert_eq!(values(&refit), values(toml));
    assert!(refit.contains("twin calibrate refit at"), "{refit}");
    assert!(refit.contains("measured by: "), "{refit}");
    assert!(
        !dir.join("again.samples.json").exists(),
        "a refit measures nothing"
    );
    // A file that is not a samples file: named, with what to give instead.
    let o = refit_to(profile, &again);
    assert!(!o.status.success());
    assert!(
        text(&o).contains(profile.to_str().unwrap()) && text(&o).contains("samples.json"),
        "{}",
        text(&o)
    );
    // A samples file of another backend, or without samples: said so, no panic.
    let other = dir.join("other.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&samples).unwrap()).unwrap();
    v["samples"] = serde_json::json!({});
    std::fs::write(&other, v.to_string()).unwrap();
    let o = refit_to(&other, &again);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("no GEMM samples"), "{}", text(&o));
    v["provenance"]["backend"] = "cuda".into();
    std::fs::write(&other, v.to_string()).unwrap();
    // Marked as a GPU calibration's, it is read as one, and found wanting.
    let o = refit_to(&other, &again);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("not a GPU calibration's samples file"),
        "{}",
        text(&o)
    );
    // Writing the profile beside the samples it reads would overwrite them.
    let o = refit_to(&samples, &dir.join("host.toml"));
    assert!(!o.status.success());
    assert!(text(&o).contains("another --output"), "{}", text(&o));
    // It measures nothing, so the measuring flags are refused.
    let o = twin(
        &["calibrate", "refit", samples.to_str().unwrap(), "--quick"],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn host_calibration_text_names_the_cold_pass_and_its_eviction() {
    let dir = scratch("host-text");
    let out = dir.join("host.toml");
    let o = calibrate_to(&out, &["host", "--tiny", "--no-progress"], &[]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("cold pass"), "{t}");
    // Without --scenario the eviction is twice the last-level cache, and it says how to
    // bound it.
    assert!(
        t.contains("of other traffic: twice the last-level cache; --scenario bounds it"),
        "{t}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn nccl_tests_import_writes_a_loadable_profile() {
    let dir = scratch("nccl");
    let out = dir.join("cluster.toml");
    let (one, two) = (
        repo("calibration/tests/data/all_reduce_perf-8xA100.log"),
        repo("calibration/tests/data/all_reduce_perf-2x8xA100.log"),
    );
    let o = calibrate_to(&out, &["nccl-tests", &one, &two], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("all_reduce_perf") && t.contains("Inter tier"),
        "{t}"
    );
    let p = twin_sim::profile::load(&out).unwrap();
    assert_eq!(p.gpu, "a100-sxm-80gb");
    assert_eq!(p.intra.latency_ns.source, twin_sim::profile::Source::Fitted);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cuda_without_a_gpu_is_an_actionable_error() {
    // An empty library search path: no CUDA driver can be found, as on a machine without a GPU.
    let dir = scratch("cuda");
    let o = calibrate_to(
        &dir.join("gpu.toml"),
        &["cuda", "--quick"],
        &[
            ("TWIN_CUDA_LIB_DIR", dir.to_str().unwrap()),
            ("LD_LIBRARY_PATH", dir.to_str().unwrap()),
            ("CUDA_HOME", dir.to_str().unwrap()),
        ],
    );
    if o.status.success() {
        // A machine with a GPU: the calibration ran; nothing to check here.
        return;
    }
    let t = text(&o);
    assert!(!t.contains("panicked"), "{t}");
    assert!(
        t.contains("`twin calibrate cuda` needs an NVIDIA GPU"),
        "{t}"
    );
    assert!(t.contains("`twin calibrate host`"), "{t}");
    assert!(!dir.join("gpu.toml").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--backend cuda` for a GPU with no bundled profile of its own at the time the issue was
/// filed (H200), named by an alias, over another GPU's base: without a driver it is still the
/// one clear no-GPU error (no panic, no "no bundled profile", no file written).
#[test]
fn cuda_for_a_gpu_asked_by_name_without_a_gpu_is_the_no_gpu_error() {
    let dir = scratch("cuda-h200");
    let out = dir.join("h200.toml");
    let o = calibrate_to(
        &out,
        &[
            "cuda",
            "--quick",
            "--scenario",
            &repo("scenarios/gpu/llama3-8b-1gpu.toml"),
            "--gpu-name",
            "h200-sxm-141gb",
            "--base-profile",
            &repo("scenarios/profiles/h100-dgx.toml"),
        ],
        &[
            ("TWIN_CUDA_LIB_DIR", dir.to_str().unwrap()),
            ("LD_LIBRARY_PATH", dir.to_str().unwrap()),
            ("CUDA_HOME", dir.to_str().unwrap()),
        ],
    );
    if o.status.success() {
        // A machine with a GPU: the profile names the GPU asked for, under its preset's name.
        let p = std::fs::read_to_string(&out).unwrap();
        assert!(p.contains("name = \"h200-141gb\""), "{p}");
        return;
    }
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        !t.contains("panicked") && !t.contains("no bundled profile"),
        "{t}"
    );
    assert!(
        t.contains("`twin calibrate cuda` needs an NVIDIA GPU"),
        "{t}"
    );
    assert!(!out.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The bundled H200 profile costs a scenario on the H200, by its preset name or its alias,
/// and is refused for another GPU.
#[test]
fn the_bundled_h200_profile_costs_h200_scenarios() {
    let profile = repo("scenarios/profiles/h200-dgx.toml");
    let scenario = repo("scenarios/gpu/llama3-8b-1gpu.toml");
    for gpu in ["cluster.gpu=h200-141gb", "cluster.gpu=h200-sxm-141gb"] {
        let o = twin(
            &[
                "simulate",
                &scenario,
                "--set",
                gpu,
                "--profile",
                &profile,
                "--format",
                "json",
            ],
            &[],
        );
        assert!(o.status.success(), "{}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["gpu"], "h200-141gb", "{v}");
        assert!(v["step_time_s"].as_f64().unwrap() > 0.0, "{v}");
    }
    let o = twin(&["simulate", &scenario, "--profile", &profile], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("describes GPU 'h200-141gb' but the scenario runs on 'h100-sxm-80gb'"),
        "{}",
        text(&o)
    );
}

/// A GPU calibration's samples file, drawn from a known GPU: GEMMs at `rate` FLOP/s
/// (k_half 170, 16 us per call), memory-bound copies at `memory_bw` bytes/s, 5.5 us launches,
/// each measurement 7 times with a fixed +-1% spread. `device` is what the file records of
/// GPU 0.
fn gpu_samples_file(path: &Path, rate: f64, memory_bw: f64, device: Option<serde_json::Value>) {
    use twin_calibration::bench::{GemmSamples, SizedSamples};
    use twin_calibration::sample::reject_outliers;
    let spread = |t: f64| -> Vec<f64> {
        (0..7)
            .map(|i| t * (1.0 + 0.01 * (f64::from(i) - 3.0) / 3.0))
            .collect()
    };
    let plan = twin_calibration::cuda::Plan::new(true, &[]);
    let mut s = twin_calibration::cuda::CudaSamples::default();
    for (i, (g, origin)) in plan.gemms.iter().enumerate() {
        let k = g.k as f64;
        let flops = twin_calibration::fit::gemm::padded_flops(g.m, g.n, g.k, 128, 128);
        let t = flops / (rate * k / (k + 170.0)) * 1e9 + 16_000.0;
        let kept = reject_outliers(&spread(t));
        s.gemm.push(GemmSamples {
            m: g.m,
            n: g.n,
            k: g.k,
            batch: 1,
            origin: (*origin).to_string(),
            holdout: i % 5 == 4,
            kept_ns: kept.kept,
            dropped_ns: kept.dropped,
            warm_kept_ns: Vec::new(),
            warm_dropped_ns: Vec::new(),
        });
    }
    let sized = |sizes: &[u64], f: &dyn Fn(u64) -> f64| -> Vec<SizedSamples> {
        sizes
            .iter()
            .map(|&b| SizedSamples::new(b, reject_outliers(&spread(f(b)))))
            .collect()
    };
    s.memory_bound = sized(&plan.memory_bytes, &|b| {
        7_000.0 + b as f64 / memory_bw * 1e9
    });
    s.host_to_device = sized(&plan.copy_bytes, &|b| 9_000.0 + b as f64 / 53.3e9 * 1e9);
    s.device_to_host = sized(&plan.copy_bytes, &|b| 9_000.0 + b as f64 / 55.3e9 * 1e9);
    s.launch_chain = sized(&plan.chain_launches, &|n| 4_000.0 + n as f64 * 5_500.0);
    let provenance = twin_calibration::write::Provenance {
        hostname: "gpu-box".into(),
        date_utc: "2026-11-28T12:00:00Z".into(),
        backend: "cuda".into(),
        mode: "quick".into(),
        command: "twin calibrate cuda --quick".into(),
        ..Default::default()
    };
    let file = serde_json::json!({
        "provenance": provenance,
        "plan": null,
        "device": device,
        "samples": s,
    });
    std::fs::write(path, serde_json::to_string_pretty(&file).unwrap()).unwrap();
}

/// The H200 case end to end without a GPU: its samples fitted again over the H100 profile
/// with `--gpu-name h200-141gb` give a profile for the H200 that keeps the measured
/// 4.26 TB/s, and that profile costs an H200 scenario.
#[test]
fn refitting_gpu_samples_names_the_gpu_asked_for_and_keeps_the_bandwidth() {
    let dir = scratch("refit-gpu");
    let samples = dir.join("h200.samples.json");
    let device = serde_json::json!({
        "name": "NVIDIA H200", "sm_count": 132, "memory_bytes": 150_109_880_320u64
    });
    gpu_samples_file(&samples, 875e12, 4.262e12, Some(device));
    let out = dir.join("h200-refit.toml");
    let o = calibrate_to(
        &out,
        &[
            "refit",
            samples.to_str().unwrap(),
            "--gpu-name",
            "h200-sxm-141gb",
            "--base-profile",
            &repo("scenarios/profiles/h100-dgx.toml"),
        ],
        &[],
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("as 'h200-141gb'"), "{t}");
    let p = twin_sim::profile::load(&out).unwrap();
    assert_eq!(
        (p.gpu.as_str(), p.name.as_str()),
        ("h200-141gb", "h200-141gb-calibrated")
    );
    assert_eq!(p.sm_count.value, 132.0);
    let bw = p.memory_bandwidth_bytes_per_s.as_ref().unwrap();
    assert!((bw.value / 4.262e12 - 1.0).abs() < 0.02, "{bw:?}");
    assert!(bw.ci95.unwrap()[0] > 3.35e12, "{bw:?}");
    let rate = p.gemm_bf16_flops_per_s.as_ref().unwrap();
    assert!((rate.value / 875e12 - 1.0).abs() < 0.03, "{rate:?}");
    // The H100 base's network stays; the GPU section is the H200's.
    assert_eq!(p.hbm_bandwidth_bytes_per_s.value, 4.8e12);
    assert_eq!(p.intra.bandwidth_bytes_per_s.value, 450e9);
    let o = twin(
        &[
            "simulate",
            &repo("scenarios/gpu/llama3-8b-1gpu.toml"),
            "--set",
            "cluster.gpu=h200-141gb",
            "--profile",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without the device in the file and another GPU's base, the refit cannot know the SM count:
/// an error that says so. Without any base, a GPU with no bundled profile needs a scenario.
#[test]
fn refitting_gpu_samples_without_what_it_needs_says_what_is_missing() {
    let dir = scratch("refit-gpu-missing");
    let samples = dir.join("gpu.samples.json");
    gpu_samples_file(&samples, 800e12, 3e12, None);
    let out = dir.join("gpu-refit.toml");
    let o = calibrate_to(
        &out,
        &[
            "refit",
            samples.to_str().unwrap(),
            "--gpu-name",
            "h200-141gb",
            "--base-profile",
            &repo("scenarios/profiles/h100-dgx.toml"),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("SM count of GPU 'h200-141gb' is unknown"),
        "{}",
        text(&o)
    );
    let o = calibrate_to(
        &out,
        &["refit", samples.to_str().unwrap(), "--gpu-name", "lab-gpu"],
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("'lab-gpu' has no bundled profile"),
        "{}",
        text(&o)
    );
    // With a scenario for the node's links, the same samples and a device give a profile for
    // that GPU.
    let device =
        serde_json::json!({ "name": "Lab GPU", "sm_count": 64, "memory_bytes": 1u64 << 35 });
    gpu_samples_file(&samples, 800e12, 3e12, Some(device));
    let o = calibrate_to(
        &out,
        &[
            "refit",
            samples.to_str().unwrap(),
            "--gpu-name",
            "lab-gpu",
            "--scenario",
            &repo("scenarios/gpu/llama3-8b-1gpu.toml"),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let p = twin_sim::profile::load(&out).unwrap();
    assert_eq!((p.gpu.as_str(), p.sm_count.value), ("lab-gpu", 64.0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A log that is not nccl-tests output, or that reports wrong results, is bad input (exit
/// 2) named by file and line, and nothing is written.
#[test]
fn nccl_tests_bad_input_is_named_and_exits_2() {
    let dir = scratch("nccl-bad");
    let out = dir.join("cluster.toml");
    let junk = dir.join("all_reduce_perf.log");
    std::fs::write(&junk, "hello\nworld\n").unwrap();
    let o = calibrate_to(&out, &["nccl-tests", junk.to_str().unwrap()], &[]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains(junk.to_str().unwrap()) && t.contains("Rank"),
        "{t}"
    );
    assert!(!t.contains("bundled profile"), "{t}");
    let good =
        std::fs::read_to_string(repo("calibration/tests/data/all_reduce_perf-8xA100.log")).unwrap();
    let row = "    22.53    0.00    0.00      0    21.92    0.00    0.00      0";
    let wrong = dir.join("all_reduce_perf-wrong.log");
    std::fs::write(
        &wrong,
        good.replace(
            row,
            "    22.53    0.00    0.00      7    21.92    0.00    0.00      0",
        ),
    )
    .unwrap();
    let o = calibrate_to(&out, &["nccl-tests", wrong.to_str().unwrap()], &[]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains(&format!("{}:17:", wrong.display())) && t.contains("#wrong = 7"),
        "{t}"
    );
    assert!(!out.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `calibrate trace` on the bundled H200 trace: the GEMM curve fitted to its GEMM kernels one
/// by one prices the step's GEMMs as they ran in total, the profile it writes loads and costs
/// the scenario, and with it the scenario's step is the one measured unprofiled (326.4 ms, the
/// fixture's README) within 5%.
#[test]
fn a_profile_fitted_to_a_pytorch_trace_prices_its_job() {
    let dir = scratch("trace");
    let out = dir.join("h200-hf.toml");
    let fixture =
        repo("measured/tests/data/h200-hf-llama/hf-llama-L8-mb1-gb4-s2048-h200.trace.json.gz");
    let scenario = repo("scenarios/gpu/hf-llama-8layers-h200.toml");
    let base = repo("scenarios/profiles/h200-dgx.toml");
    let o = calibrate_to(
        &out,
        &[
            "trace",
            &fixture,
            "--scenario",
            &scenario,
            "--base-profile",
            &base,
            "--step-time-s",
            "0.3264",
            "--format",
            "json",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let fit: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(fit["gemm_kernels"].as_u64().unwrap() >= 100);
    assert!(fit["memory_kernels"].as_u64().unwrap() >= 100);
    let fitted = fit["step_fitted_s"].as_f64().unwrap();
    assert!((fitted - 0.3264).abs() <= 0.05 * 0.3264, "{fitted}");
    // With the fitted profile the predicted GEMM class is the trace's, within 5%.
    let o = twin(
        &[
            "verify",
            "step",
            &scenario,
            "--profile",
            out.to_str().unwrap(),
            "--measured",
            &fixture,
            "--format",
            "json",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let gemm = &v["classes"][0];
    assert_eq!(gemm["class"], "gemm");
    let (p, m) = (
        gemm["predicted_s"].as_f64().unwrap(),
        gemm["measured_s"].as_f64().unwrap(),
    );
    assert!(
        (p - m).abs() <= 0.05 * m,
        "GEMMs predicted {p} s, measured {m} s"
    );
    // And the attention class, its curve scaled per direction by the trace's cuDNN calls.
    let attention = &v["classes"][1];
    assert_eq!(attention["class"], "attention");
    let (p, m) = (
        attention["predicted_s"].as_f64().unwrap(),
        attention["measured_s"].as_f64().unwrap(),
    );
    assert!(
        (p - m).abs() <= 0.05 * m,
        "attention predicted {p} s, measured {m} s"
    );
    assert_eq!(
        fit["attention"][0]["calls"], 32,
        "one forward per layer and micro batch"
    );
    assert_eq!(fit["attention"][1]["calls"], 32);
    // The profile simulates the scenario (and names what it fitted).
    let toml = std::fs::read_to_string(&out).unwrap();
    assert!(toml.contains("twin calibrate trace"), "{toml}");
    let o = twin(
        &[
            "simulate",
            &scenario,
            "--profile",
            out.to_str().unwrap(),
            "--format",
            "json",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    // The host time per kernel: fitted to the step where the work alone is shorter, an upper
    // bound where it is not; either way it goes into the framework file written beside the
    // profile, which a scenario takes as its framework_file and which keeps the step.
    let without = fit["step_without_launch_s"].as_f64().unwrap();
    assert_eq!(fit["host_bound"].as_bool().unwrap(), without < 0.3264);
    assert_eq!(fit["host_key"], "host_per_kernel_ns");
    let host_ns = fit["host_per_kernel_ns"].as_u64().unwrap();
    let fw_path = dir.join("h200-hf.framework.toml");
    let fw = std::fs::read_to_string(&fw_path).unwrap();
    assert!(
        fw.contains(&format!("host_per_kernel_ns = {{ value = {host_ns},")),
        "{fw}"
    );
    assert!(fw.contains("fitted by twin calibrate trace"), "{fw}");
    // Everything else of the bundled file is kept, comments included.
    assert!(fw.contains("name = \"hf\""), "{fw}");
    assert!(fw.contains("# Framework: the Hugging Face Trainer"), "{fw}");
    let own = dir.join("hf-own.toml");
    let body = std::fs::read_to_string(&scenario).unwrap().replace(
        "framework = \"hf\"",
        "framework_file = \"h200-hf.framework.toml\"",
    );
    std::fs::write(&own, body).unwrap();
    let o = twin(
        &[
            "simulate",
            own.to_str().unwrap(),
            "--profile",
            out.to_str().unwrap(),
            "--format",
            "json",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let step = v["step_time_s"].as_f64().unwrap();
    assert!((step - 0.3264).abs() <= 0.05 * 0.3264, "{step}");
    // A trace without the shapes the fits need is refused with what to do.
    let o = calibrate_to(
        &dir.join("none.toml"),
        &[
            "trace",
            &scenario,
            "--scenario",
            &scenario,
            "--base-profile",
            &base,
        ],
        &[],
    );
    assert!(!o.status.success());
    assert!(!text(&o).contains("panicked"), "{}", text(&o));
}
