//! Collapsed mode with the flow model: exact where the check allows it, refused where
//! replicas share links.

use super::super::super::context::Ctx;
use super::super::super::flow_tests::Cores;
use super::super::super::{simulate_on, SimOptions, SimResult};
use super::*;
use crate::cost::Analytic;
use crate::scenario::{Fabric, NetworkModel, Scenario};
use crate::testing::small_scenario;

/// (tp, pp, dp, GPUs per node, NICs per node, nodes per leaf, fabric, oversubscription).
type Layout = (u32, u32, u32, u32, u32, u32, Fabric, f64);

fn scenario((tp, pp, dp, gpn, nics, per_leaf, fabric, oversub): Layout) -> Scenario {
    let mut s = small_scenario(tp, pp, dp, 4);
    s.cluster.gpus_per_node = gpn;
    s.cluster.topology.model = NetworkModel::Flow;
    s.cluster.topology.fabric = fabric;
    s.cluster.topology.nodes_per_leaf = per_leaf;
    s.cluster.topology.oversubscription = oversub;
    s.cluster.topology.nics_per_node = nics;
    s
}

/// The full and the collapsed flow runs of the generated schedule, with an overlap slowdown
/// of `slowdown` (compute as flows, capped while communicating).
fn runs(s: &Scenario, slowdown: f64) -> (SimResult, SimResult) {
    let plan = Plan::new(s).unwrap();
    let schedule = crate::schedule::generate(s, &plan).unwrap();
    let analytic = Analytic::new(s);
    let net = Network::new(&s.cluster, &analytic.links);
    let cost = Cores {
        inner: &analytic,
        cores: None,
        slowdown,
    };
    let run = |collapse: bool| {
        let opts = SimOptions {
            collapse,
            ..SimOptions::default()
        };
        simulate_on(&plan, &schedule, &cost, Some(&net), &opts).unwrap()
    };
    (run(false), run(true))
}

/// The check's verdict for the representatives of collapsing `axes`.
fn verdict(s: &Scenario, axes: &[Axis]) -> Result<(), Coupled> {
    let plan = Plan::new(s).unwrap();
    let schedule = crate::schedule::generate(s, &plan).unwrap();
    let analytic = Analytic::new(s);
    let net = Network::new(&s.cluster, &analytic.links);
    let opts = SimOptions::default();
    let ctx = Ctx::new(&plan, &schedule, &analytic, Some(&net), &opts).unwrap();
    let used: Vec<Used> = ctx.progs.iter().map(Used::of).collect();
    let rep_of = representatives_over(&plan, axes);
    Check {
        net: &net,
        plan: &plan,
        program_of: &schedule.program_of,
        used: &used,
        peers: &ctx.peers,
        rep_of: &rep_of,
    }
    .mirrored()
}

const ALL: [Axis; 4] = [Axis::Tp, Axis::Cp, Axis::Ep, Axis::Dp];

/// On rail-optimized fabrics (one NIC per GPU, leaves per rail, traffic across leaves on the
/// rail's uplinks) each tensor-parallel index's data-parallel rings and pipeline sends run on
/// their own rail: collapsing tp is exact, and every rank's statistics equal the full run's.
#[test]
fn collapsed_flow_runs_equal_full_ones_on_rails() {
    let rail = Fabric::RailOptimized;
    let layouts: [Layout; 4] = [
        (2, 2, 4, 2, 0, 2, rail, 1.0),
        (4, 2, 2, 4, 0, 1, rail, 1.0),
        (2, 4, 2, 2, 0, 1, rail, 2.0),
        (8, 2, 2, 8, 0, 2, rail, 1.0),
    ];
    for layout in layouts {
        let s = scenario(layout);
        for slowdown in [0.0, 0.5] {
            let (full, collapsed) = runs(&s, slowdown);
            assert!(!full.collapsed);
            assert!(collapsed.collapsed, "{layout:?}");
            assert_eq!(collapsed.step_time_ns, full.step_time_ns, "{layout:?}");
            assert_eq!(collapsed.ranks, full.ranks, "{layout:?}");
            // One rank of each tensor-parallel group simulated.
            assert_eq!(collapsed.events * u64::from(layout.0), full.events);
        }
        // Collapsing dp too would leave out pipeline sends that share the NICs of the
        // simulated data-parallel rings.
        assert!(matches!(verdict(&s, &ALL), Err(Coupled::SharedLink { .. })));
        assert_eq!(verdict(&s, &[Axis::Tp]), Ok(()));
    }
}

/// One stage of data parallelism only, one GPU per node, on an oversubscribed fat-tree: the
/// one data-parallel group holds every rank, so its ring is simulated whole with one rank and
/// nothing is left out, however its flows share the uplinks.
#[test]
fn a_job_whose_only_group_holds_every_rank_collapses_to_one_rank() {
    let s = scenario((1, 1, 4, 1, 0, 1, Fabric::FatTree, 4.0));
    let (full, collapsed) = runs(&s, 0.0);
    assert!(collapsed.collapsed);
    assert_eq!(collapsed.ranks, full.ranks);
    assert_eq!(collapsed.events * 4, full.events);
}

/// On a fat-tree whose leaf uplinks carry the traffic of every rail, the replicas' rings
/// meet on the uplinks: no collapse is exact, and the engine simulates every rank.
#[test]
fn replicas_that_share_uplinks_are_simulated_in_full() {
    let fat = Fabric::FatTree;
    for layout in [
        (2, 2, 4, 2, 0, 2, fat, 4.0),
        (2, 2, 4, 2, 0, 1, fat, 1.0),
        (4, 2, 2, 4, 0, 1, fat, 2.0),
    ] {
        let s = scenario(layout);
        let (full, collapsed) = runs(&s, 0.0);
        assert!(!collapsed.collapsed, "{layout:?}");
        assert_eq!(collapsed, full);
        for axes in [&ALL[..], &[Axis::Tp]] {
            assert!(
                matches!(verdict(&s, axes), Err(Coupled::SharedLink { .. })),
                "{layout:?} {axes:?}"
            );
        }
    }
}

/// Shared NICs (two GPUs per NIC) put two tensor-parallel indices' traffic on one NIC.
#[test]
fn shared_nics_prevent_collapsing_tp() {
    let s = scenario((2, 2, 4, 2, 1, 2, Fabric::RailOptimized, 1.0));
    assert!(verdict(&s, &[Axis::Tp]).is_err());
    let (full, collapsed) = runs(&s, 0.0);
    assert!(!collapsed.collapsed);
    assert_eq!(collapsed, full);
}

/// Other pipeline schedules and optimizer-state sharding (more and different data-parallel
/// collectives) on a rail-optimized fabric: still collapsed over tp, still exact.
#[test]
fn collapsed_flow_runs_stay_exact_across_schedules_and_sharding() {
    use crate::scenario::PipelineSchedule;
    let layout = (4, 2, 2, 4, 0, 1, Fabric::RailOptimized, 1.0);
    for (schedule, vpp) in [
        (PipelineSchedule::Gpipe, 1),
        (PipelineSchedule::Interleaved1F1B, 2),
        (PipelineSchedule::ZeroBubble, 1),
    ] {
        for (zero, fsdp) in [(0, false), (1, false), (3, true)] {
            let mut s = scenario(layout);
            s.parallel.schedule = schedule;
            s.parallel.vpp = vpp;
            s.parallel.zero = zero;
            s.parallel.fsdp = fsdp;
            let (full, collapsed) = runs(&s, 0.0);
            let what = format!("{schedule:?} vpp {vpp} zero {zero}");
            assert!(collapsed.collapsed, "{what}");
            assert_eq!(collapsed.step_time_ns, full.step_time_ns, "{what}");
            assert_eq!(collapsed.ranks, full.ranks, "{what}");
        }
    }
}

/// Context parallelism inside the node: the context-parallel ring of every tensor-parallel
/// index shares NVLink ports with the tensor-parallel rings, so no collapse is exact; the
/// request falls back to the full run.
#[test]
fn context_parallel_rings_beside_tensor_parallel_ones_fall_back() {
    let mut s = scenario((2, 2, 2, 4, 0, 1, Fabric::RailOptimized, 1.0));
    s.parallel.cp = 2;
    s.cluster.gpus = 16;
    let (full, collapsed) = runs(&s, 0.0);
    assert!(!collapsed.collapsed);
    assert_eq!(collapsed, full);
    assert!(matches!(
        verdict(&s, &[Axis::Tp]),
        Err(Coupled::SharedLink { .. })
    ));
}
