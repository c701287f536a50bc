//! The CUDA backend on whatever machine runs the tests: without a driver, every entry point
//! returns the clear "no CUDA driver found (searched: ...)" error instead of panicking; with
//! one (TWIN_GPU_TESTS=1), the real checks in gpu.rs run.
#![cfg(feature = "cuda")]
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_runtime::backend::cuda::discover::{CudaLib, Discovery, SearchEnv};
use twin_runtime::backend::cuda::{
    doctor, dtype::GemmDtype, fp8_device, fp8_gemm_sweep_times, gemm_sweep, run_single_gpu,
    CudaBackend, CudaOptions, Item,
};
use twin_runtime::RuntimeError;
use twin_sim::scenario::Fp8Recipe;

fn driver_present() -> bool {
    Discovery::run(&SearchEnv::from_process())
        .path(CudaLib::Driver)
        .is_some()
}

#[test]
fn without_a_driver_entry_points_say_what_is_missing() {
    if driver_present() {
        eprintln!("note: a CUDA driver is present; the no-driver error path is not exercised here");
        return;
    }
    let check = |e: RuntimeError| {
        let msg = e.to_string();
        assert!(msg.starts_with("no CUDA driver found (searched: "), "{msg}");
        assert!(msg.contains("TWIN_CUDA_LIB_DIR"), "{msg}");
    };
    check(
        CudaBackend::new(CudaOptions::default())
            .err()
            .expect("no driver, so no backend"),
    );
    check(gemm_sweep(&[], GemmDtype::Bf16, 1).unwrap_err());
    check(fp8_gemm_sweep_times(&[], Fp8Recipe::Tensorwise, 1).unwrap_err());
    check(fp8_device(Fp8Recipe::Delayed).unwrap_err());
    let (s, plan, sched) = twin_runtime::probe::llama_probe(1, 1, false).unwrap();
    check(run_single_gpu(&s, &plan, &sched, 1).unwrap_err());
    let report = doctor();
    assert!(
        matches!(report.gpus, Item::NotFound(ref why) if why.starts_with("no CUDA driver found"))
    );
    let text = report.to_string();
    assert!(
        text.contains("CUDA driver  not found (no CUDA driver found (searched: "),
        "{text}"
    );
}
