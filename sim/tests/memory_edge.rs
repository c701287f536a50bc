//! The memory verdict at the edges measured on real GPUs: `scenarios/gpu/llama3-8b-1gpu.toml`
//! (Llama 3 8B, sequence 2048, one GPU) with more and more layers, against the usable bytes of
//! an H200 and an H100 (docs/measurements/2026-11-28-h200-memory-edge.md). The schedule's peak
//! is what a framework job holds; twin's own CUDA runtime adds its workspaces on top, and
//! `twin_runtime::backend::cuda::footprint` tests that edge.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use std::path::PathBuf;
use twin_sim::report::Report;
use twin_sim::scenario::MemorySettings;
use twin_sim::setup::load;
use twin_sim::{predict, PredictOptions};

fn report(gpu: &str, layers: u32) -> Report {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenarios/gpu/llama3-8b-1gpu.toml");
    let s = load(
        &path,
        &[
            format!("cluster.gpu={gpu}"),
            format!("model.layers={layers}"),
        ],
    )
    .unwrap();
    predict(&s, &PredictOptions::default()).unwrap().report
}

#[test]
fn the_reserve_is_the_measured_context_cublas_and_nccl() {
    let r = report("h200-141gb", 8);
    assert_eq!(
        r.ranks[0].memory_breakdown.reserved,
        650_969_088 + 100_663_296 + 551_550_976
    );
    assert_eq!(
        MemorySettings::default().reserved_bytes,
        MemorySettings::DEFAULT_RESERVED_BYTES
    );
}

#[test]
fn h200_29_and_30_layers_fit_a_framework_job() {
    // Twin's CUDA runtime ran 29 layers and ran out of memory at 30 only with its own
    // workspaces added; a framework job (context, cuBLAS, NCCL) fits both.
    for layers in [29, 30] {
        let r = report("h200-141gb", layers);
        assert_eq!(r.usable_bytes, 150_109_880_320);
        assert!(r.fits, "{layers}: {}", r.verdict());
        assert!(
            r.verdict().contains("of 139.80 GiB usable"),
            "{}",
            r.verdict()
        );
    }
    // The edge itself: 31 layers do not fit.
    let r = report("h200-141gb", 31);
    assert!(!r.fits, "{}", r.verdict());
}

#[test]
fn h100_edge_is_between_15_and_16_layers() {
    let fits = report("h100-sxm-80gb", 15);
    assert_eq!(fits.usable_bytes, 85_017_493_504);
    assert!(fits.fits, "{}", fits.verdict());
    let over = report("h100-sxm-80gb", 16);
    assert!(!over.fits, "{}", over.verdict());
    let oom = over.oom.as_ref().unwrap();
    assert_eq!(oom.over_bytes, over.peak_memory_bytes - over.usable_bytes);
    assert!(over.verdict().contains("at op "), "{}", over.verdict());
}
