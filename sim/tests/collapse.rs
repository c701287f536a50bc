//! Collapsed-rank mode against the full simulation: on every bundled scenario and on random
//! configurations (pipeline schedules, tp/cp/ep/dp, ZeRO, MoE, recompute, node sizes) the
//! collapsed run must give the same step time, per-rank busy/exposed/idle times, FLOPs and
//! memory, hence the same report apart from the event count and wall time.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use proptest::prelude::*;
use std::path::Path;
use twin_sim::engine::{SimOptions, SimResult};
use twin_sim::report::Report;
use twin_sim::scenario::*;
use twin_sim::setup::load;
use twin_sim::testing::small_scenario;
use twin_sim::Staged;

/// `None` where the configuration is not a valid scenario; a valid one must simulate (a
/// generated schedule that deadlocks is a bug, not a case to skip).
fn both(s: &Scenario) -> Option<(Staged, SimResult, SimResult)> {
    let staged = Staged::new(s).ok()?;
    let full = staged
        .simulate(&SimOptions::default())
        .unwrap_or_else(|e| panic!("{}: {e}", s.name));
    let collapsed = staged
        .simulate(&SimOptions {
            collapse: true,
            ..SimOptions::default()
        })
        .expect("collapsed run succeeds where the full one does");
    Some((staged, full, collapsed))
}

/// Same outcome; returns whether the collapsed run really collapsed.
fn assert_same(s: &Scenario) -> Option<bool> {
    let (staged, full, c) = both(s)?;
    assert_eq!(c.step_time_ns, full.step_time_ns, "{}", s.name);
    assert_eq!(c.ranks, full.ranks, "{}", s.name);
    assert_eq!(c.bubble_fraction(), full.bubble_fraction());
    assert_eq!(c.exposed_comm_fraction(), full.exposed_comm_fraction());
    if c.collapsed {
        assert!(c.events <= full.events);
    } else {
        assert_eq!(c, full);
    }
    let report = |r: &SimResult| {
        let mut rep = Report::build(&staged.scenario, &staged.plan, &staged.schedule, r, 0.0);
        rep.events = 0;
        rep
    };
    assert_eq!(report(&c), report(&full));
    Some(c.collapsed)
}

#[test]
fn bundled_scenarios_collapse_exactly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = vec![
        root.join("scenarios/512xA100.toml"),
        root.join("scenarios/small.toml"),
    ];
    for entry in std::fs::read_dir(root.join("scenarios/schedules")).unwrap() {
        files.push(entry.unwrap().path());
    }
    files.sort();
    for f in files {
        let s = load(&f, &[]).unwrap();
        assert_eq!(assert_same(&s), Some(true), "{}", f.display());
    }
}

#[test]
fn symmetric_grid_always_collapses() {
    let mut n = 0;
    for tp in [1, 2, 4] {
        for pp in [1, 2, 4] {
            for dp in [1, 2, 4] {
                for (sched, vpp) in [
                    (PipelineSchedule::OneFOneB, 1),
                    (PipelineSchedule::Interleaved1F1B, 2),
                    (PipelineSchedule::ZeroBubble, 1),
                    (PipelineSchedule::Gpipe, 1),
                ] {
                    let mut s = small_scenario(tp, pp, dp, 2 * u64::from(pp));
                    s.parallel.schedule = sched;
                    s.parallel.vpp = vpp;
                    s.model.layers = 2 * pp * vpp;
                    s.parallel.zero = (tp % 4) as u8;
                    if let Some(c) = assert_same(&s) {
                        assert!(c, "{tp} {pp} {dp} {sched:?}");
                        n += 1;
                    }
                }
            }
        }
    }
    assert!(n >= 80, "only {n} configurations ran");
}

/// A context-parallel ring that leaves the node from some ranks only (tp 4, cp 4 on nodes of
/// 8 GPUs: cp ranks 0 and 4 share a node, 4 and 8 do not) cannot collapse to one rank per
/// stage. The engine collapses the other axes alone, one rank per (stage, cp index), and
/// gets exactly the full result.
#[test]
fn an_uneven_cp_ring_collapses_over_the_other_axes_exactly() {
    let mut s = small_scenario(4, 2, 2, 4);
    s.parallel.cp = 4;
    s.cluster.gpus = 4 * 2 * 2 * 4;
    s.cluster.gpus_per_node = 8;
    assert_eq!(assert_same(&s), Some(true));
    let (_, full, collapsed) = both(&s).unwrap();
    // 8 of the 64 ranks simulated (2 stages x 4 cp indices): the events shrink about 8-fold.
    assert!(
        collapsed.events * 6 <= full.events,
        "{} events collapsed, {} in full",
        collapsed.events,
        full.events
    );
    assert!(
        collapsed.events * 12 >= full.events,
        "more collapsed than one rank per cp index: {} of {}",
        collapsed.events,
        full.events
    );
}

fn random_scenario() -> impl Strategy<Value = Scenario> {
    (
        (1u32..=4, 1u32..=4, 1u32..=3, 1u32..=2, 1u32..=2, 1u32..=2),
        (
            0u8..=3,
            prop_oneof![
                Just(PipelineSchedule::Gpipe),
                Just(PipelineSchedule::OneFOneB),
                Just(PipelineSchedule::Interleaved1F1B),
                Just(PipelineSchedule::ZeroBubble),
            ],
            prop_oneof![
                Just(Recompute::None),
                Just(Recompute::Selective),
                Just(Recompute::Full)
            ],
            any::<bool>(),
            any::<bool>(),
            1u32..=4,
        ),
        (
            prop_oneof![Just(2u32), Just(3), Just(4), Just(8)],
            1u64..=3,
            any::<bool>(),
        ),
    )
        .prop_map(
            |((tp, pp, dp, cp, ep, vpp), (zero, sched, rc, moe, layer, mf), (gpn, mb, ring))| {
                let m = u64::from(pp * mf);
                let mut s = small_scenario(tp, pp, dp, m);
                let vpp = if sched == PipelineSchedule::Interleaved1F1B {
                    vpp
                } else {
                    1
                };
                s.parallel.vpp = vpp;
                s.parallel.cp = cp;
                if ring {
                    s.parallel.cp_algorithm = CpAlgorithm::Ring;
                }
                s.parallel.ep = ep;
                // `dp` here is the expert layers' data parallelism; the scenario's is the
                // dense layers'.
                s.parallel.dp = dp * ep;
                s.parallel.zero = zero;
                s.parallel.schedule = sched;
                s.cluster.gpus = tp * pp * dp * cp * ep;
                s.cluster.gpus_per_node = gpn.min(s.cluster.gpus);
                s.model.layers = pp * vpp * 2;
                let ffn_hidden = s.model.ffn_hidden;
                s.model.moe = moe.then_some(Moe::uniform(4, 2, 1, ffn_hidden));
                s.training.micro_batch = mb;
                s.training.global_batch = m * mb * u64::from(dp * ep);
                s.training.recompute = rc;
                s.run.granularity = if layer {
                    Granularity::Layer
                } else {
                    Granularity::Chunk
                };
                s
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn random_configs_collapse_exactly(s in random_scenario()) {
        assert_same(&s);
    }
}

/// With the flow network (or cores shared by a node's ranks) a rank's transfers contend with
/// traffic of ranks that collapsing would not simulate, so the engine simulates every rank:
/// the collapsed request gives exactly the full result.
#[test]
fn flow_network_runs_every_rank_and_matches_the_full_simulation() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cases = vec![load(&root.join("scenarios/small.toml"), &[]).unwrap()];
    for (tp, pp, dp) in [(2, 2, 2), (4, 2, 4), (1, 4, 2)] {
        cases.push(small_scenario(tp, pp, dp, 2 * u64::from(pp)));
    }
    for mut s in cases {
        s.cluster.topology.model = NetworkModel::Flow;
        assert_eq!(assert_same(&s), Some(false), "{}", s.name);
    }
}

/// DualPipe on the flow network over two nodes: the sums of each stage's two copies (stages
/// 0 and 3 on different nodes, 1 and 2 too) are routed as flows, and a collapsed request
/// gives exactly the full result.
#[test]
fn dualpipe_copies_sums_on_the_flow_network_match_the_full_simulation() {
    let mut s = small_scenario(4, 4, 1, 8);
    s.parallel.schedule = PipelineSchedule::DualPipe;
    s.cluster.topology.model = NetworkModel::Flow;
    assert!(assert_same(&s).is_some(), "{}", s.name);
}
