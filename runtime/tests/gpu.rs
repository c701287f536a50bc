//! Real-GPU checks, run only with TWIN_GPU_TESTS=1 on a machine with an NVIDIA GPU.
#![cfg(feature = "cuda")]
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

mod common;
use common::{predict_with_trace, predicted};

use twin_runtime::backend::cuda::{
    doctor, dtype::GemmDtype, gemm_sweep, run_scenario_single_gpu, run_single_gpu, CudaOptions,
    Item,
};
use twin_sim::schedule::{Gemm, OpKind, Stream};

fn enabled() -> bool {
    let on = std::env::var("TWIN_GPU_TESTS").is_ok_and(|v| v == "1");
    if !on {
        eprintln!("note: GPU test skipped; set TWIN_GPU_TESTS=1 on a GPU machine to run it");
    }
    on
}

#[test]
fn doctor_sees_a_gpu() {
    if !enabled() {
        return;
    }
    let r = doctor();
    println!("{r}");
    let Item::Found(gpus) = &r.gpus else {
        panic!("no GPUs: {r}")
    };
    assert!(!gpus.is_empty());
    assert!(gpus[0].total_bytes > gpus[0].free_bytes);
    assert!(matches!(r.cublas_version, Item::Found(_)), "{r}");
    assert!(matches!(r.nccl_version, Item::Found(_)), "{r}");
}

#[test]
fn gemm_flops_are_positive_and_below_the_bf16_peak() {
    if !enabled() {
        return;
    }
    let g = Gemm {
        dtype: None,
        m: 4096,
        n: 4096,
        k: 4096,
        count: 1,
        batch: 1,
    };
    let s = gemm_sweep(&[g], GemmDtype::Bf16, 10).unwrap();
    let tflops = s[0].achieved_flops_per_s / 1e12;
    println!("bf16 4096^3: {tflops:.1} TFLOP/s");
    // No real GPU of 2026 exceeds 5 PFLOP/s dense bf16 on one die; zero means nothing ran.
    assert!(tflops > 1.0 && tflops < 5000.0, "{tflops}");
}

#[test]
fn single_gpu_probe_runs_with_real_overlap_and_memory() {
    if !enabled() {
        return;
    }
    let (s, plan, sched) = twin_runtime::probe::llama_probe(2, 2, true).unwrap();
    let run = run_single_gpu(&s, &plan, &sched, 2).unwrap();
    assert_eq!(run.events.len(), sched.programs[0].ops.len());
    // The pool handed out at least what the schedule held at its peak.
    let pool_peak = run.device_memory.allocator_peak_bytes.unwrap();
    assert!(
        pool_peak >= run.memory.peak_bytes,
        "{pool_peak} < {}",
        run.memory.peak_bytes
    );
    // Every op ends no earlier than each of its deps.
    let ops = &sched.programs[0].ops;
    for (i, op) in ops.iter().enumerate() {
        for &d in &op.deps {
            assert!(
                run.events[i].end_ns >= run.events[d as usize].end_ns,
                "op {i} before dep {d}"
            );
        }
    }
    // Compute took real time.
    let fwd = ops
        .iter()
        .position(|o| matches!(o.kind, OpKind::Compute(_)) && o.stream == Stream::Compute)
        .unwrap();
    assert!(run.events[fwd].end_ns > run.events[fwd].start_ns);
}

#[test]
fn more_ranks_than_gpus_is_a_clear_error() {
    if !enabled() {
        return;
    }
    let s = twin_sim::testing::small_scenario(1, 64, 1, 64);
    let plan = twin_sim::plan::Plan::new(&s).unwrap();
    let sched = twin_sim::schedule::Schedule {
        programs: vec![twin_sim::schedule::Program::default()],
        program_of: vec![0; 64],
    };
    let e = run_single_gpu(&s, &plan, &sched, 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("the schedule has 64 ranks but only"), "{e}");
}

#[test]
fn generated_single_gpu_schedule_runs_and_the_pool_keeps_its_memory() {
    if !enabled() {
        return;
    }
    assert!(doctor().missing().is_empty(), "{}", doctor());
    // TWIN_GPU_SCENARIO: where the scenario is when the test binary runs outside the tree.
    let path = std::env::var_os("TWIN_GPU_SCENARIO")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../scenarios/gpu/llama3-8b-1gpu.toml")
        });
    // Two layers keep the test short; the example runs the whole scenario.
    let s = twin_sim::setup::load(&path, &["model.layers=2".to_string()]).unwrap();
    let p = predict_with_trace(&s);
    let r = run_scenario_single_gpu(&predicted(&p), 3, CudaOptions::default()).unwrap();
    let c = &r.comparison;
    assert_eq!(c.measured_step_times_ns.len(), 3);
    assert!(c.measured_step_time_ns > 0 && c.predicted_step_time_ns > 0);
    // The runtime's account of the generated schedule is the simulator's peak.
    assert_eq!(c.schedule_memory.peak_bytes, c.predicted_peak_memory_bytes);
    let d = &c.device_memory;
    // The framework reserve is accounted, not allocated (the real CUDA context holds it), so
    // the pool holds the schedule's peak less the reserve.
    let pooled = c.schedule_memory.peak_bytes - c.schedule_memory.peak_breakdown.reserved;
    assert!(c.schedule_memory.peak_breakdown.reserved > 0);
    let peak = d.allocator_peak_bytes.unwrap();
    assert!(
        peak >= pooled,
        "allocator peak {peak} < pooled schedule peak {pooled}"
    );
    // The pool kept the previous step's memory: the last step started with at least the
    // schedule's pooled peak in reserve, so its Alloc ops mapped nothing new.
    let kept = d.allocator_reserved_at_start_bytes.unwrap();
    assert!(kept >= pooled, "{kept} < {pooled}");
}

#[test]
fn multi_gpu_scenarios_are_refused_before_device_work() {
    if !enabled() {
        return;
    }
    let s = twin_sim::testing::small_scenario(2, 2, 2, 4);
    let p = predict_with_trace(&s);
    let e = run_scenario_single_gpu(&predicted(&p), 1, CudaOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("not a single-GPU scenario"), "{e}");
}

/// FP8 through cuBLASLt on a GPU that has it (compute capability 8.9+): a large GEMM runs
/// faster than bf16, below twice the bf16 rate's ceiling of 5 PFLOP/s.
#[test]
fn fp8_gemms_run_through_cublaslt_where_the_gpu_has_fp8() {
    if !enabled() {
        return;
    }
    use twin_runtime::backend::cuda::{fp8_device, fp8_gemm_sweep_times};
    use twin_sim::scenario::Fp8Recipe;
    if let Err(why) = fp8_device(Fp8Recipe::Tensorwise).unwrap() {
        eprintln!("note: FP8 GEMM test skipped: {why}");
        return;
    }
    let g = Gemm::single(8192, 8192, 8192, 1);
    let bf16 = gemm_sweep(&[g], GemmDtype::Bf16, 10).unwrap()[0].achieved_flops_per_s;
    let mut times = fp8_gemm_sweep_times(&[g], Fp8Recipe::Tensorwise, 10).unwrap();
    let t = &mut times[0];
    t.sort_unstable();
    let fp8 = g.flops() as f64 / (t[t.len() / 2] as f64 * 1e-9);
    println!(
        "8192^3: bf16 {:.0}, fp8 {:.0} TFLOP/s",
        bf16 / 1e12,
        fp8 / 1e12
    );
    assert!(fp8 > bf16 && fp8 < 1e16, "{fp8} vs {bf16}");
}

/// The FP8 scenario runs its linears in FP8 on an FP8 GPU: no bf16 fallback note.
#[test]
fn the_fp8_scenario_runs_without_a_bf16_fallback() {
    if !enabled() {
        return;
    }
    use twin_runtime::backend::cuda::fp8_device;
    use twin_sim::scenario::Fp8Recipe;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/gpu/llama3-8b-1gpu-fp8.toml");
    let mut sets = vec!["model.layers=2".to_string()];
    if let Some(gpu) = std::env::var_os("TWIN_GPU_PRESET") {
        sets.push(format!("cluster.gpu={}", gpu.to_string_lossy()));
    }
    let s = twin_sim::setup::load(&path, &sets).unwrap();
    let p = predict_with_trace(&s);
    let r = run_scenario_single_gpu(&predicted(&p), 2, CudaOptions::default()).unwrap();
    let notes = &r.run.device_memory.notes;
    println!("{notes:#?}");
    match fp8_device(Fp8Recipe::Delayed).unwrap() {
        Ok(_) => assert!(notes.iter().all(|n| !n.contains("bf16")), "{notes:#?}"),
        Err(why) => assert!(notes.iter().any(|n| n.contains(&why)), "{notes:#?}"),
    }
}

/// GEMMs back to back after an idle: one time per call, in order, each positive; the run is
/// what `twin calibrate cuda` reads the power cap's throttle from.
#[test]
fn back_to_back_gemms_time_every_call() {
    if !enabled() {
        return;
    }
    use twin_runtime::backend::cuda::gemm_back_to_back_times;
    let g = Gemm::single(4096, 4096, 4096, 1);
    let idle = std::time::Duration::from_millis(200);
    let t = gemm_back_to_back_times(&g, GemmDtype::Bf16, 300, idle).unwrap();
    assert_eq!(t.len(), 300);
    assert!(t.iter().all(|&x| x > 0));
    let first = g.flops() as f64 / (t[5] as f64 * 1e-9) / 1e12;
    let last = g.flops() as f64 / (t[299] as f64 * 1e-9) / 1e12;
    println!("4096^3 back to back: call 5 {first:.0}, call 300 {last:.0} TFLOP/s");
    assert!(first > 1.0 && first < 5000.0 && last > 1.0 && last < 5000.0);
}
