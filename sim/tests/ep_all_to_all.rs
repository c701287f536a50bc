//! The expert-parallel all-to-all on the flow topology: the same dispatch between two ranks
//! of one node runs over NVLink, between two nodes over their NICs, and takes longer by the
//! ratio of the two links' achievable bandwidths (line rate times NCCL's protocol efficiency
//! on each: `DEFAULT_NVLINK_EFFICIENCY`, `DEFAULT_NETWORK_EFFICIENCY`).
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_sim::cost::{Analytic, CostModel, DEFAULT_NETWORK_EFFICIENCY, DEFAULT_NVLINK_EFFICIENCY};
use twin_sim::engine::{simulate, SimOptions};
use twin_sim::plan::{GroupKind, Plan};
use twin_sim::scenario::*;
use twin_sim::schedule::{generate, CollectiveKind, OpKind};
use twin_sim::testing::small_scenario;

/// 16 GPUs in two nodes of 8, pure data parallelism with ep 2, Mixtral-style experts; the
/// placement order decides whether an expert-parallel pair shares a node.
fn moe(order: [Axis; 5]) -> Scenario {
    let mut s = small_scenario(1, 1, 16, 2);
    let ffn_hidden = s.model.ffn_hidden;
    s.model.moe = Some(Moe::uniform(8, 2, 1, ffn_hidden));
    s.model.hidden = 4096;
    s.model.ffn_hidden = 4096;
    s.parallel.ep = 2;
    s.parallel.order = order;
    s.cluster.topology.model = NetworkModel::Flow;
    s
}

/// Rank 0's expert-parallel all-to-alls: (duration, buffer bytes, calls).
fn ep_all_to_alls(s: &Scenario) -> (Plan, Vec<(u64, u64, u32)>) {
    let plan = Plan::new(s).unwrap();
    let sched = generate(s, &plan).unwrap();
    let opts = SimOptions {
        trace: true,
        collapse: false,
        ..SimOptions::default()
    };
    let cost = Analytic::new(s);
    let res = simulate(&plan, &sched, &cost as &dyn CostModel, &opts).unwrap();
    let prog = &sched.programs[sched.program_of[0] as usize];
    let trace = res.trace.unwrap();
    let out = trace
        .events
        .iter()
        .filter(|e| e.rank == 0)
        .filter_map(|e| match prog.ops[e.op as usize].kind {
            OpKind::Collective {
                kind: CollectiveKind::AllToAll,
                group: GroupKind::Ep,
                bytes,
                calls,
            } => Some((e.end_ns - e.start_ns, bytes, calls)),
            _ => None,
        })
        .collect();
    (plan, out)
}

#[test]
fn a_dispatch_across_nodes_is_slower_by_the_ratio_of_the_links() {
    let inner = moe([Axis::Tp, Axis::Cp, Axis::Ep, Axis::Dp, Axis::Pp]);
    let outer = moe([Axis::Tp, Axis::Cp, Axis::Dp, Axis::Ep, Axis::Pp]);
    let (plan_in, near) = ep_all_to_alls(&inner);
    let (plan_out, far) = ep_all_to_alls(&outer);
    let group = |p: &Plan| p.group(p.group_of(0, GroupKind::Ep)).clone();
    assert_eq!(
        (group(&plan_in).members, group(&plan_in).nodes),
        (vec![0, 1], 1)
    );
    assert_eq!(
        (group(&plan_out).members, group(&plan_out).nodes),
        (vec![0, 8], 2)
    );
    assert!(!near.is_empty());
    assert_eq!(near.len(), far.len());
    let links = &inner.cluster;
    let nvlink = links.intra_node.bandwidth_bytes_per_s * DEFAULT_NVLINK_EFFICIENCY;
    let nic = links.inter_node.bandwidth_bytes_per_s * DEFAULT_NETWORK_EFFICIENCY;
    for (&(t_near, b_near, calls), &(t_far, b_far, calls_far)) in near.iter().zip(&far) {
        assert_eq!((b_near, calls), (b_far, calls_far));
        // Each call: each rank sends half its buffer to the other, over one link, after the
        // link's latency.
        let wire_ns = |t: u64, latency_ns: u64| (t / u64::from(calls)).saturating_sub(latency_ns);
        let near_ns = wire_ns(t_near, links.intra_node.latency_ns) as f64;
        let far_ns = wire_ns(t_far, links.inter_node.latency_ns) as f64;
        let half = b_near as f64 / 2.0;
        let close = |got: f64, want: f64| (got / want - 1.0).abs() < 0.01;
        assert!(
            close(near_ns, half / nvlink * 1e9),
            "within a node: {near_ns} ns"
        );
        assert!(close(far_ns, half / nic * 1e9), "across nodes: {far_ns} ns");
        assert!(
            close(far_ns / near_ns, nvlink / nic),
            "across nodes {far_ns} ns, within {near_ns} ns: links {:.3}",
            nvlink / nic
        );
    }
}

/// DeepEP's buffers (`moe_dispatcher = "deepep"`) are held on every GPU for the whole step:
/// the peak of every rank grows by exactly their size, in the `buffers` category, and the
/// size follows DeepEP's hints for the group (16 ranks over two nodes: an NVLink and an RDMA
/// buffer; the NCCL all-to-all holds none).
#[test]
fn deepep_buffers_are_held_for_the_step() {
    let mut nccl = moe([Axis::Tp, Axis::Cp, Axis::Ep, Axis::Dp, Axis::Pp]);
    nccl.parallel.ep = 16;
    nccl.model.moe = Some(Moe::uniform(16, 2, 1, 4096));
    let mut deepep = nccl.clone();
    deepep.training.moe_dispatcher = MoeDispatcher::DeepEp;
    let bytes = twin_sim::workload::dispatch_buffer_bytes(&deepep);
    assert_eq!(twin_sim::workload::dispatch_buffer_bytes(&nccl), 0);
    assert_eq!(bytes, twin_sim::workload::deepep_buffer_bytes(4096, 16));
    assert!(bytes > twin_sim::workload::deepep_buffer_bytes(4096, 8));
    let peaks = |s: &Scenario| {
        let plan = Plan::new(s).unwrap();
        let sched = generate(s, &plan).unwrap();
        let cost = Analytic::new(s);
        let res = simulate(
            &plan,
            &sched,
            &cost as &dyn CostModel,
            &SimOptions::default(),
        )
        .unwrap();
        res.ranks
            .iter()
            .map(|r| {
                let buffers = r.memory_at_peak[twin_sim::schedule::MemCategory::Buffers as usize];
                (r.peak_memory_bytes, buffers)
            })
            .collect::<Vec<_>>()
    };
    for ((p0, b0), (p1, b1)) in peaks(&nccl).into_iter().zip(peaks(&deepep)) {
        assert_eq!(p1, p0 + bytes);
        assert_eq!(b1, b0 + bytes);
    }
}
