//! The pre-flight memory check of a CUDA run, without a GPU: the runtime's workspaces are a
//! pure function of the program, and schedule peak plus workspaces against the GPU's usable
//! bytes decides the edges measured on an H200 (29 layers ran, 30 ran out of memory) and on
//! an H100 (docs/measurements/2026-11-28-h200-memory-edge.md).
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use std::path::PathBuf;
use twin_runtime::backend::cuda::footprint::{
    workspace_bytes, DeviceFit, MAX_MEMORY_SCRATCH_BYTES,
};
use twin_sim::scenario::Scenario;
use twin_sim::setup::load;
use twin_sim::Staged;

fn scenario(gpu: &str, layers: u32) -> Scenario {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenarios/gpu/llama3-8b-1gpu.toml");
    load(
        &path,
        &[
            format!("cluster.gpu={gpu}"),
            format!("model.layers={layers}"),
        ],
    )
    .unwrap()
}

/// The fit as `twin run --backend cuda` checks it: the simulator's schedule peak of every rank,
/// then the runtime's workspaces.
fn fit(gpu: &str, layers: u32) -> DeviceFit {
    let s = scenario(gpu, layers);
    let p = twin_sim::predict(&s, &twin_sim::PredictOptions::default()).unwrap();
    let peaks = p.result.ranks.iter().map(|r| r.peak_memory_bytes);
    DeviceFit::of(&s, &p.staged.schedule, peaks, false)
}

#[test]
fn workspaces_are_what_the_h100_run_allocated() {
    // docs/measurements/2026-11-22-h100-cuda-backend.md: device_memory.workspace_bytes of the
    // probe schedule (8 layers, 4 micro batches, gradient all-reduce) on an H100.
    let (_, _, probe) = twin_runtime::probe::llama_probe(8, 4, true).unwrap();
    assert_eq!(workspace_bytes(&probe.programs[0], false), 2_181_070_848);
}

#[test]
fn the_scenario_workspace_is_the_output_head_and_the_copy_scratch() {
    // The largest GEMMs are the output head's (tokens t = 2048, hidden h = 4096, vocabulary
    // v = 128,256, bf16): A up to t x v (the dgrad's), B and C up to h x v; the cross entropy's
    // memory-bound bytes fill the 512 MiB copy scratch. One GPU has no collectives.
    let (t, h, v) = (2048u64, 4096u64, 128_256u64);
    let want = 2 * (t * v + 2 * h * v) + MAX_MEMORY_SCRATCH_BYTES;
    for layers in [8, 29, 30] {
        let s = scenario("h200-141gb", layers);
        let staged = Staged::new(&s).unwrap();
        assert_eq!(workspace_bytes(&staged.schedule.programs[0], false), want);
    }
}

#[test]
fn h200_runs_29_layers_and_refuses_30() {
    let ok = fit("h200-141gb", 29);
    assert_eq!(ok.usable_bytes, 150_109_880_320);
    assert!(ok.check().is_ok(), "{ok:?}");
    let over = fit("h200-141gb", 30);
    let e = over.check().unwrap_err().to_string();
    assert!(e.contains("139.80 GiB usable"), "{e}");
    assert!(e.contains("h200-141gb"), "{e}");
    assert!(e.contains("--set model.layers="), "{e}");
    // The workspace is what tips it: the schedule alone fits.
    assert!(over.schedule_peak_bytes <= over.usable_bytes);
}

#[test]
fn h100_runs_14_layers_and_refuses_15() {
    assert!(fit("h100-sxm-80gb", 14).fits());
    let over = fit("h100-sxm-80gb", 15);
    assert!(!over.fits());
    assert_eq!(over.usable_bytes, 85_017_493_504);
}
