//! `[training] recompute_layers` (Megatron-Core's block recompute): only the first N layers of
//! each model chunk recompute. On one GPU the step is its compute ops one after another, so the
//! step grows over no recompute by exactly the recompute ops of those layers, and the saved
//! activations fall by exactly those layers' difference.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_sim::cost::{Analytic, CostModel};
use twin_sim::engine::{simulate, SimOptions};
use twin_sim::plan::Plan;
use twin_sim::scenario::{Granularity, Recompute, Scenario};
use twin_sim::schedule::{generate, OpKind, Phase};
use twin_sim::setup::parse_str;
use twin_sim::testing::small_scenario;
use twin_sim::workload::layers_work;

fn one_gpu(recompute: Recompute, layers: Option<u32>) -> Scenario {
    let mut s = small_scenario(1, 1, 1, 2);
    s.model.layers = 4;
    s.training.recompute = recompute;
    s.training.recompute_layers = layers;
    s.run.granularity = Granularity::Layer;
    s
}

/// Step time and the summed time of the recompute ops of rank 0.
fn step(s: &Scenario) -> (u64, u64) {
    let plan = Plan::new(s).unwrap();
    let sched = generate(s, &plan).unwrap();
    let cost = Analytic::new(s);
    let res = simulate(&plan, &sched, &cost, &SimOptions::default()).unwrap();
    let recompute_ns = sched.programs[sched.program_of[0] as usize]
        .ops
        .iter()
        .filter_map(|op| match &op.kind {
            OpKind::Compute(c) if c.phase == Phase::Recompute => Some(cost.compute_ns(0, c)),
            _ => None,
        })
        .sum();
    (res.step_time_ns, recompute_ns)
}

#[test]
fn only_the_first_layers_of_a_chunk_recompute() {
    let (none_ns, none_recompute) = step(&one_gpu(Recompute::None, None));
    assert_eq!(none_recompute, 0);
    let (full_ns, full_recompute) = step(&one_gpu(Recompute::Full, None));
    let (one_ns, one_recompute) = step(&one_gpu(Recompute::Full, Some(1)));
    // One of four equal layers, two micro batches: a quarter of the full recompute.
    assert_eq!(one_recompute * 4, full_recompute);
    assert_eq!(one_ns, none_ns + one_recompute);
    assert_eq!(full_ns, none_ns + full_recompute);
    // N at least the chunk's layers is full recompute.
    assert_eq!(
        step(&one_gpu(Recompute::Full, Some(4))),
        (full_ns, full_recompute)
    );
    assert_eq!(
        step(&one_gpu(Recompute::Full, Some(9))),
        (full_ns, full_recompute)
    );
}

/// The chunk's saved activations: the recomputed layers keep their inputs only, the others
/// everything, and the chunk's work says which layers recompute.
#[test]
fn saved_activations_follow_the_recomputed_layers() {
    let bytes = |recompute, layers| {
        let s = one_gpu(recompute, layers);
        let plan = Plan::new(&s).unwrap();
        let layout = plan.chunks[0][0].clone();
        let one = |first| layers_work(&s, &plan, &layout, first, 1, false, false).activation_bytes;
        let chunk = layers_work(&s, &plan, &layout, 0, 4, false, false);
        (
            chunk.activation_bytes,
            one(0),
            one(3),
            chunk.recompute.is_some(),
        )
    };
    let (none, _, _, _) = bytes(Recompute::None, None);
    let (full, _, _, _) = bytes(Recompute::Full, None);
    let (two, first, last, has) = bytes(Recompute::Full, Some(2));
    assert!(has);
    assert_eq!(two, full / 2 + none / 2);
    assert_eq!(first, full / 4);
    assert_eq!(last, none / 4);
}

#[test]
fn recompute_layers_needs_full_recompute() {
    let text = "[model]\nlayers = 2\nhidden = 64\nheads = 4\nseq_len = 32\nvocab = 128\n\
                [cluster]\ngpu = \"h100-sxm-80gb\"\ngpus = 1\n\
                [training]\nglobal_batch = 1\nrecompute = \"selective\"\nrecompute_layers = 1\n";
    let e = parse_str(text, "s.toml", &[]).unwrap_err();
    assert_eq!(e.key, "training.recompute_layers");
    assert!(e.to_string().contains("recompute = \"full\""), "{e}");
    let ok = text.replace("\"selective\"", "\"full\"");
    let s = parse_str(&ok, "s.toml", &[]).unwrap();
    assert_eq!(s.training.recompute_layers, Some(1));
    // Written back and read again the same.
    let again = parse_str(&twin_sim::scenario::to_toml(&s), "s.toml", &[]).unwrap();
    assert_eq!(again.training.recompute_layers, Some(1));
}
