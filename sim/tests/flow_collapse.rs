//! Collapsed mode with the flow network model on the bundled 512-GPU topology scenarios: on
//! the rail-optimized fabric it must run collapsed and give exactly the full run's step time
//! and every rank's statistics; on the 4:1 fat-tree, whose leaf uplinks carry every rail, it
//! must fall back to simulating every rank.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use std::path::Path;
use twin_sim::setup::load;
use twin_sim::{predict, PredictOptions};

fn predict_at(rel: &str, collapse: bool) -> twin_sim::engine::SimResult {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel);
    let s = load(&path, &[]).unwrap_or_else(|e| panic!("{e}"));
    let opts = PredictOptions {
        skip_validation: true,
        collapse,
        ..PredictOptions::default()
    };
    predict(&s, &opts).unwrap().result
}

#[test]
fn rail_optimized_512_gpus_collapses_exactly() {
    let rel = "scenarios/topology/512xA100-rail-optimized.toml";
    let full = predict_at(rel, false);
    let collapsed = predict_at(rel, true);
    assert!(!full.collapsed);
    assert!(collapsed.collapsed);
    assert_eq!(collapsed.step_time_ns, full.step_time_ns);
    assert_eq!(collapsed.ranks, full.ranks);
    // tp = 8 inside a node: one rank of each tensor-parallel group is simulated.
    assert_eq!(collapsed.events * 8, full.events);
}

#[test]
fn fat_tree_512_gpus_falls_back_to_the_full_run() {
    let rel = "scenarios/topology/512xA100-fat-tree-4to1.toml";
    let collapsed = predict_at(rel, true);
    assert!(!collapsed.collapsed);
    assert_eq!(collapsed.ranks.len(), 512);
}
