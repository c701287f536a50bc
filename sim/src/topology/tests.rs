use super::*;
use crate::cost::Analytic;
use crate::plan::{GroupKind, Plan};
use crate::scenario::NetworkTopology;
use crate::testing::small_scenario;

fn network(gpus: u32, gpn: u32, topo: NetworkTopology) -> (Network, TierModel) {
    let mut s = small_scenario(1, 1, gpus, 1);
    s.cluster.gpus_per_node = gpn;
    s.cluster.topology = topo;
    let tiers = Analytic::new(&s).links;
    (Network::new(&s.cluster, &tiers), tiers)
}

#[test]
fn paths_inside_a_node_use_nvlink_out_and_in() {
    let (n, _) = network(16, 8, NetworkTopology::default());
    assert_eq!(n.path(1, 2).as_slice(), &[2, 5]);
    assert!(n.path(3, 3).as_slice().is_empty());
    assert!(n.path(3, 99).as_slice().is_empty());
}

#[test]
fn rail_optimized_keeps_same_rail_traffic_in_its_leaf() {
    let (n, _) = network(64, 8, NetworkTopology::default());
    // GPU 1 of node 0 to GPU 1 of node 7: NIC up, NIC down (one rail leaf).
    assert_eq!(n.path(1, 57).as_slice().len(), 2);
    // Across rails the traffic goes through the spine.
    assert_eq!(n.path(1, 58).as_slice().len(), 4);
}

#[test]
fn fat_tree_leaves_and_oversubscribed_uplinks() {
    let topo = NetworkTopology {
        fabric: crate::scenario::Fabric::FatTree,
        nodes_per_leaf: 2,
        oversubscription: 4.0,
        ..NetworkTopology::default()
    };
    let (n, tiers) = network(64, 8, topo);
    // Nodes 0 and 1 share a leaf; node 2 is on the next.
    assert_eq!(n.path(0, 8).as_slice().len(), 2);
    let p = n.path(0, 16);
    assert_eq!(p.as_slice().len(), 4);
    // Leaf uplink: 16 NICs under the leaf, 4:1 oversubscribed = 4 NICs' worth.
    let up = n.capacities()[p.as_slice()[1] as usize];
    let nic = tiers.inter_bw() * 1e-9;
    assert!((up - 4.0 * nic).abs() < 1e-9 * nic, "{up} vs {nic}");
}

#[test]
fn shared_nics_serve_several_gpus() {
    let topo = NetworkTopology {
        nics_per_node: 2,
        ..NetworkTopology::default()
    };
    let (n, _) = network(16, 8, topo);
    // GPUs 0-3 share NIC 0, GPUs 4-7 NIC 1.
    assert_eq!(n.path(0, 8).as_slice()[0], n.path(3, 11).as_slice()[0]);
    assert_ne!(n.path(0, 8).as_slice()[0], n.path(4, 12).as_slice()[0]);
}

#[test]
fn ring_edges_between_nodes_are_split_over_rails() {
    let (n, _) = network(16, 8, NetworkTopology::default());
    let mut s = small_scenario(1, 1, 16, 1);
    s.cluster.gpus_per_node = 8;
    let plan = Plan::new(&s).unwrap();
    let g = plan.group(plan.group_of(0, GroupKind::Dp));
    let p = n.collective(crate::schedule::CollectiveKind::AllGather, g, 16 << 20, 1);
    // A large all-gather: one ring phase; 14 in-node edges and 2 node crossings of 8 rails.
    assert_eq!(p.phases.len(), 1);
    assert_eq!(p.phases[0].len(), 14 + 2 * 8);
    let total: f64 = p.phases[0].iter().map(|(_, b)| b).sum();
    let per_edge = 15.0 / 16.0 * f64::from(16u32 << 20);
    assert!((total - 16.0 * per_edge).abs() < 1.0, "{total}");
}
