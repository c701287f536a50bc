//! The physical network the flow model runs on: per-GPU NVLink ports into the node's NVSwitch,
//! NICs (one per GPU or shared), leaf switches (rail-optimized or classic fat-tree) with an
//! oversubscribed uplink to the spine. Every link is directional, so each direction of a
//! full-duplex cable is its own resource. [`Network`] turns a collective (through the
//! alpha-beta model's [`Decomposition`]) or a point-to-point send into flows over these links;
//! [`maxmin`] shares the links among concurrent flows. See docs/reference/topology.md.
//!
//! The alpha-beta model of the same links is [`TierModel`] (`tiers`): two tiers, a price per
//! call and the algorithm NCCL's tuner would choose. Both models of the network live here, below
//! the cost model that prices transfers with them. Capacities are the alpha-beta model's
//! achieved rates (line rate times protocol efficiency), so a transfer that has its links to
//! itself takes exactly its alpha-beta time.

pub mod dispatch;
pub mod maxmin;
mod tiers;

use crate::plan::{Group, GroupKind};
use crate::scenario::{Cluster, Fabric, NetworkTopology};
use crate::schedule::CollectiveKind;
pub use maxmin::{MaxMin, Path};
pub use tiers::{
    Algorithm, CollectiveEstimate, Decomposition, GroupShape, NvlsModel, Pattern, Phase, TierModel,
    DEFAULT_NETWORK_EFFICIENCY, DEFAULT_NVLINK_EFFICIENCY,
};

/// A transfer as flows: phases run one after another, the flows of one phase concurrently;
/// `latency_ns` is added once after the last phase.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FlowPlan {
    pub latency_ns: u64,
    /// Per phase: (path, bytes) of each flow.
    pub phases: Vec<Vec<(Path, f64)>>,
}

/// Links of a cluster and the rules for routing over them.
#[derive(Clone, Debug, PartialEq)]
pub struct Network {
    tiers: TierModel,
    gpus: u32,
    gpus_per_node: u32,
    nics_per_node: u32,
    nodes_per_leaf: u32,
    fabric: Fabric,
    nic_base: u32,
    leaf_base: u32,
    /// Bytes per nanosecond of every link, indexed by link id.
    capacity: Vec<f64>,
    /// Expert all-to-alls sent hierarchically (`moe_dispatcher`); `None`: NCCL's.
    expert_dispatch: Option<dispatch::NodeDedup>,
}

impl Network {
    /// The network of `cluster` (its `[cluster.topology]` and link tiers), with link rates
    /// and latencies from the cost model's `tiers`.
    pub fn new(cluster: &Cluster, tiers: &TierModel) -> Network {
        let t: &NetworkTopology = &cluster.topology;
        let gpn = cluster.gpus_per_node.max(1);
        let gpus = cluster.gpus;
        let nodes = gpus.div_ceil(gpn);
        let nics = if t.nics_per_node == 0 {
            gpn
        } else {
            t.nics_per_node.min(gpn)
        };
        let npl = t.nodes_per_leaf.max(1);
        let blocks = nodes.div_ceil(npl);
        let leaves = match t.fabric {
            Fabric::RailOptimized => blocks * nics,
            Fabric::FatTree => blocks,
        };
        let nvl = tiers.intra_bw() * 1e-9;
        let nic = tiers.inter_bw() * 1e-9;
        let mut capacity = vec![nvl; 2 * gpus as usize];
        capacity.resize(capacity.len() + 2 * (nodes * nics) as usize, nic);
        let oversub = if t.oversubscription.is_finite() && t.oversubscription > 0.0 {
            t.oversubscription
        } else {
            1.0
        };
        for leaf in 0..leaves {
            let block = match t.fabric {
                Fabric::RailOptimized => leaf / nics,
                Fabric::FatTree => leaf,
            };
            let nodes_here = nodes.saturating_sub(block * npl).min(npl);
            let ports = match t.fabric {
                Fabric::RailOptimized => nodes_here,
                Fabric::FatTree => nodes_here * nics,
            };
            let up = f64::from(ports) * nic / oversub;
            capacity.push(up);
            capacity.push(up);
        }
        Network {
            tiers: tiers.clone(),
            gpus,
            gpus_per_node: gpn,
            nics_per_node: nics,
            nodes_per_leaf: npl,
            fabric: t.fabric,
            nic_base: 2 * gpus,
            leaf_base: 2 * gpus + 2 * nodes * nics,
            capacity,
            expert_dispatch: None,
        }
    }

    /// This network with expert all-to-alls sent as `dispatch` says (`None`: NCCL's).
    pub fn with_expert_dispatch(mut self, dispatch: Option<dispatch::NodeDedup>) -> Network {
        self.expert_dispatch = dispatch;
        self
    }

    /// The network when `cluster` asks for the flow model (`[cluster.topology] model =
    /// "flow"`), else `None` (transfers priced per call).
    pub fn for_cluster(cluster: &Cluster, tiers: &TierModel) -> Option<Network> {
        (cluster.topology.model == crate::scenario::NetworkModel::Flow)
            .then(|| Network::new(cluster, tiers))
    }

    /// Link capacities in bytes per nanosecond, indexed by link id.
    pub fn capacities(&self) -> &[f64] {
        &self.capacity
    }

    fn node(&self, gpu: u32) -> u32 {
        gpu / self.gpus_per_node
    }

    /// The node-wide index of `gpu`'s NIC.
    fn nic(&self, gpu: u32) -> u32 {
        let local = gpu % self.gpus_per_node;
        self.node(gpu) * self.nics_per_node + local * self.nics_per_node / self.gpus_per_node
    }

    fn leaf(&self, gpu: u32) -> u32 {
        let block = self.node(gpu) / self.nodes_per_leaf;
        match self.fabric {
            Fabric::RailOptimized => {
                block * self.nics_per_node + self.nic(gpu) % self.nics_per_node
            }
            Fabric::FatTree => block,
        }
    }

    /// The links from `src` to `dst`: NVLink out and in inside a node; otherwise NIC up,
    /// (leaf up, leaf down when the two NICs are on different leaves), NIC down.
    pub fn path(&self, src: u32, dst: u32) -> Path {
        if src >= self.gpus || dst >= self.gpus || src == dst {
            return Path::default();
        }
        if self.node(src) == self.node(dst) {
            return Path::new(&[2 * src, 2 * dst + 1]);
        }
        let (na, nb) = (self.nic(src), self.nic(dst));
        let (la, lb) = (self.leaf(src), self.leaf(dst));
        let up = self.nic_base + 2 * na;
        let down = self.nic_base + 2 * nb + 1;
        if la == lb {
            Path::new(&[up, down])
        } else {
            Path::new(&[
                up,
                self.leaf_base + 2 * la,
                self.leaf_base + 2 * lb + 1,
                down,
            ])
        }
    }

    /// One send of `bytes` from `src` to `dst`.
    pub fn p2p(&self, src: u32, dst: u32, bytes: u64) -> FlowPlan {
        let (latency_ns, flow) = self.p2p_flow(src, dst, bytes);
        FlowPlan {
            latency_ns,
            phases: flow.map_or_else(Vec::new, |f| vec![vec![f]]),
        }
    }

    /// [`Network::p2p`] without allocating: the latency, and the one flow (path, bytes)
    /// unless the send moves nothing over no link.
    pub fn p2p_flow(&self, src: u32, dst: u32, bytes: u64) -> (u64, Option<(Path, f64)>) {
        Network::p2p_send(self.p2p_route(src, dst), bytes)
    }

    /// The latency and path of a send from `src` to `dst`, whatever its size (callers that
    /// send often between the same pair keep it; see [`Network::p2p_send`]).
    pub fn p2p_route(&self, src: u32, dst: u32) -> (u64, Path) {
        let latency_ns = self.tiers.p2p_latency_ns(self.node(src) == self.node(dst));
        (latency_ns, self.path(src, dst))
    }

    /// A send of `bytes` over `route` (from [`Network::p2p_route`]): its latency, and its
    /// flow unless it moves nothing or crosses no link.
    pub fn p2p_send((latency_ns, path): (u64, Path), bytes: u64) -> (u64, Option<(Path, f64)>) {
        let flow = (bytes != 0 && !path.as_slice().is_empty()).then_some((path, bytes as f64));
        (latency_ns, flow)
    }

    /// `calls` collectives of `bytes` each over `group`: the alpha-beta model's algorithm
    /// and latency, its bandwidth phases as flows between the members.
    pub fn collective(
        &self,
        kind: CollectiveKind,
        group: &Group,
        bytes: u64,
        calls: u32,
    ) -> FlowPlan {
        let shape = GroupShape {
            ranks: group.members.len() as u32,
            nodes: group.nodes,
            max_per_node: group.max_per_node,
        };
        let d = match self.expert_dispatch {
            Some(dedup) if kind == CollectiveKind::AllToAll && group.kind == GroupKind::Ep => {
                dedup.decompose(&self.tiers, shape, bytes)
            }
            _ => self.tiers.decompose(kind, shape, bytes),
        };
        let calls_f = f64::from(calls);
        let by_node = self.by_node(&group.members);
        let phases = d
            .phases
            .iter()
            .map(|p| {
                let mut flows = self.flows(
                    p.pattern,
                    &group.members,
                    &by_node,
                    p.bytes_per_edge * calls_f,
                );
                if let Some((pattern, bytes)) = p.beside {
                    flows.extend(self.flows(pattern, &group.members, &by_node, bytes * calls_f));
                }
                flows
            })
            .filter(|f| !f.is_empty())
            .collect();
        FlowPlan {
            latency_ns: d.latency_ns.saturating_mul(u64::from(calls)),
            phases,
        }
    }

    /// Members grouped by node, nodes in order of first appearance, members in ring order.
    fn by_node(&self, members: &[u32]) -> Vec<Vec<u32>> {
        let mut out: Vec<(u32, Vec<u32>)> = Vec::new();
        for &m in members {
            let n = self.node(m);
            match out.iter_mut().find(|(k, _)| *k == n) {
                Some((_, v)) => v.push(m),
                None => out.push((n, vec![m])),
            }
        }
        out.into_iter().map(|(_, v)| v).collect()
    }

    fn flows(
        &self,
        pattern: Pattern,
        members: &[u32],
        by_node: &[Vec<u32>],
        bytes: f64,
    ) -> Vec<(Path, f64)> {
        let mut out = Vec::new();
        let ring = |out: &mut Vec<(Path, f64)>, ms: &[u32]| {
            if ms.len() < 2 {
                return;
            }
            for (i, &a) in ms.iter().enumerate() {
                let b = ms[(i + 1) % ms.len()];
                out.push((self.path(a, b), bytes));
            }
        };
        match pattern {
            Pattern::Ring => {
                let n = members.len();
                if n < 2 {
                    return out;
                }
                for (i, &a) in members.iter().enumerate() {
                    let b = members[(i + 1) % n];
                    if self.node(a) == self.node(b) {
                        out.push((self.path(a, b), bytes));
                        continue;
                    }
                    let on = |x: u32| {
                        by_node
                            .iter()
                            .find(|v| v.first().is_some_and(|&m| self.node(m) == self.node(x)))
                            .map_or(&[][..], |v| v.as_slice())
                    };
                    let (la, lb) = (on(a), on(b));
                    let rails = la.len().min(lb.len()).max(1);
                    for j in 0..rails {
                        let (x, y) = (
                            la.get(j).copied().unwrap_or(a),
                            lb.get(j).copied().unwrap_or(b),
                        );
                        out.push((self.path(x, y), bytes / rails as f64));
                    }
                }
            }
            Pattern::IntraRing => {
                for ms in by_node {
                    ring(&mut out, ms);
                }
            }
            Pattern::InterRails => {
                let k = by_node.iter().map(Vec::len).min().unwrap_or(0);
                for j in 0..k {
                    let rail: Vec<u32> = by_node.iter().filter_map(|v| v.get(j).copied()).collect();
                    ring(&mut out, &rail);
                }
            }
            Pattern::AllPairs => {
                for &a in members {
                    for &b in members {
                        if a != b {
                            out.push((self.path(a, b), bytes));
                        }
                    }
                }
            }
            Pattern::RailPairs => {
                for (i, here) in by_node.iter().enumerate() {
                    for (j, &a) in here.iter().enumerate() {
                        for there in by_node.iter().take(i).chain(by_node.iter().skip(i + 1)) {
                            if let Some(&b) = there.get(j) {
                                out.push((self.path(a, b), bytes));
                            }
                        }
                    }
                }
            }
            Pattern::NodePairs => {
                for ms in by_node {
                    for &a in ms {
                        for &b in ms {
                            if a != b {
                                out.push((self.path(a, b), bytes));
                            }
                        }
                    }
                }
            }
        }
        out.retain(|(p, b)| !p.as_slice().is_empty() && *b > 0.0);
        out
    }
}

#[cfg(test)]
mod tests;
