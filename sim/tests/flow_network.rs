//! The flow-level network model end to end: scenario keys, a topology comparison on a
//! data-parallel-heavy job, and byte-identical reports.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_sim::scenario::*;
use twin_sim::setup::parse_str;
use twin_sim::testing::small_scenario;
use twin_sim::{predict, PredictOptions};

fn step_time_ns(s: &Scenario) -> u64 {
    predict(s, &PredictOptions::default())
        .unwrap()
        .result
        .step_time_ns
}

/// 64 GPUs (8 DGX nodes), tp = 8 inside each node and dp = 8 across nodes, no gradient
/// overlap: each step ends with eight concurrent rail rings, one per local GPU index.
fn dp_heavy() -> Scenario {
    let mut s = small_scenario(8, 1, 8, 1);
    s.training.overlap_grad_reduce = false;
    s.model.hidden = 2048;
    s.model.ffn_hidden = 8192;
    s.cluster.topology.model = NetworkModel::Flow;
    s
}

#[test]
fn rail_optimized_beats_an_oversubscribed_fat_tree() {
    let mut rail = dp_heavy();
    rail.cluster.topology.fabric = Fabric::RailOptimized;
    let mut fat = dp_heavy();
    fat.cluster.topology.fabric = Fabric::FatTree;
    fat.cluster.topology.nodes_per_leaf = 1;
    fat.cluster.topology.oversubscription = 4.0;
    let mut flat = fat.clone();
    flat.cluster.topology.oversubscription = 1.0;
    let (r, f, n) = (step_time_ns(&rail), step_time_ns(&fat), step_time_ns(&flat));
    assert!(r < f, "rail-optimized {r} ns vs 4:1 fat-tree {f} ns");
    // A non-blocking fat-tree is as good as the rail-optimized fabric for rings.
    assert_eq!(r, n);
    // The analytic model cannot tell them apart.
    let mut a = fat.clone();
    a.cluster.topology.model = NetworkModel::Analytic;
    let mut b = rail.clone();
    b.cluster.topology.model = NetworkModel::Analytic;
    assert_eq!(step_time_ns(&a), step_time_ns(&b));
}

#[test]
fn flow_reports_are_byte_identical() {
    let mut s = small_scenario(2, 2, 4, 4);
    s.cluster.topology.model = NetworkModel::Flow;
    let opts = PredictOptions {
        reproducible: true,
        ..PredictOptions::default()
    };
    let a = serde_json::to_string(&predict(&s, &opts).unwrap().report).unwrap();
    let b = serde_json::to_string(&predict(&s, &opts).unwrap().report).unwrap();
    assert_eq!(a, b);
}

const BASE: &str = r#"
[model]
preset = "llama2-7b"
layers = 4
[cluster]
gpu = "a100-sxm-80gb"
gpus = 16
node = "dgx-a100"
[parallel]
tp = 2
[training]
global_batch = 16
micro_batch = 1
"#;

#[test]
fn topology_keys_parse_and_default() {
    let s = parse_str(BASE, "t.toml", &[]).unwrap();
    assert_eq!(s.cluster.topology, NetworkTopology::default());
    let text = format!(
        "{BASE}\n[cluster.topology]\nmodel = \"flow\"\nfabric = \"fat-tree\"\nnics_per_node = 4\n\
         nodes_per_leaf = 2\noversubscription = 2.5\n"
    );
    let t = parse_str(&text, "t.toml", &[]).unwrap().cluster.topology;
    assert_eq!(t.model, NetworkModel::Flow);
    assert_eq!(t.fabric, Fabric::FatTree);
    assert_eq!(t.nics_per_node, 4);
    assert_eq!(t.nodes_per_leaf, 2);
    assert_eq!(t.oversubscription, 2.5);
    // A resolved scenario written back keeps its topology.
    let again = parse_str(&to_toml_of(&text), "t.toml", &[]).unwrap();
    assert_eq!(again.cluster.topology, t);
    // --set works on the new keys.
    let o = parse_str(BASE, "t.toml", &["cluster.topology.model=\"flow\"".into()]).unwrap();
    assert_eq!(o.cluster.topology.model, NetworkModel::Flow);
}

fn to_toml_of(text: &str) -> String {
    to_toml(&parse_str(text, "t.toml", &[]).unwrap())
}

#[test]
fn bad_topology_values_are_located_errors() {
    let e = parse_str(
        &format!("{BASE}\n[cluster.topology]\nfabric = \"fat_tree\"\n"),
        "t.toml",
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("cluster.topology.fabric") && e.contains("fat-tree"),
        "{e}"
    );
    let e = parse_str(
        &format!("{BASE}\n[cluster.topology]\noversubscription = 0\n"),
        "t.toml",
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("oversubscription"), "{e}");
    let e = parse_str(
        &format!("{BASE}\n[cluster.topology]\nrails = 8\n"),
        "t.toml",
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("unknown key"), "{e}");
}

/// A profile's `overlap.compute_slowdown` slows compute that overlaps communication: the
/// bundled A100 profile predicts exactly the defaults without flash attention, and with a slowdown a job whose
/// gradient all-reduce overlaps the backward pass gets slower, more so for a larger factor.
#[test]
fn profile_overlap_slowdown_slows_overlapping_compute() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/profiles/a100-dgx.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let base = text
        .split("# Quality of the fit")
        .next()
        .unwrap()
        .to_string();
    let with = |s: f64| {
        twin_sim::profile::parse_str(
            &format!("{base}\n[overlap]\ncompute_slowdown = {{ value = {s}, source = \"fitted\", ref = \"test\" }}\n"),
            "p.toml",
        )
        .unwrap()
    };
    let mut s = small_scenario(2, 2, 4, 4);
    s.training.overlap_grad_reduce = true;
    // Unfused attention: the A100 profile's flash-attention curves (FlashAttention-2 on an
    // A100) differ from the defaults, its GEMMs and links do not.
    s.training.flash_attention = false;
    let step = |p: &twin_sim::profile::Profile| {
        twin_sim::predict_with(&s, &PredictOptions::default(), Some(p))
            .unwrap()
            .result
            .step_time_ns
    };
    let none = twin_sim::predict(&s, &PredictOptions::default())
        .unwrap()
        .result
        .step_time_ns;
    let (a, b) = (step(&with(0.2)), step(&with(0.8)));
    assert!(none < a && a < b, "{none} {a} {b}");
}
