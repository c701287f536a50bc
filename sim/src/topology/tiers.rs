//! Alpha-beta collective and point-to-point model over two link tiers (inside a node, between
//! nodes), choosing the cheapest algorithm the way NCCL's tuner does.
//!
//! Tier model. Each GPU has an intra-node link (NVLink through NVSwitch) and one inter-node
//! rail (its own NIC). Bandwidths are per GPU and per direction; each is derated by a protocol
//! efficiency (NCCL's LL128/Simple protocols and packet headers never reach line rate).
//! - A ring inside one node runs at the intra-node bandwidth.
//! - A ring that spans nodes is built once per rail (NCCL opens one channel per NIC), so the
//!   bytes crossing a node boundary are split over the `max_per_node` rails the group has on
//!   a node: its bandwidth is `min(intra, max_per_node * inter)`, and each step pays the
//!   inter-node latency.
//! - Double binary tree (all-reduce): `2 ceil(log2 n)` latencies instead of `2(n-1)`, but
//!   every link carries the whole buffer twice, so it wins only for small messages.
//! - Hierarchical all-reduce (group spans nodes with several members per node): intra-node
//!   reduce-scatter, inter-node all-reduce of `bytes / max_per_node` on every rail in
//!   parallel, intra-node all-gather.
//! - All-to-all: the intra-node and inter-node shares of the buffer move at the same time
//!   over their own links; the slower share sets the time.
//!
//! - NVLS (NVLink SHARP, H100 NVSwitch): the switch reduces and multicasts, so an all-reduce
//!   inside one node moves each byte about `(n+1)/n` times per GPU instead of `2(n-1)/n`;
//!   modelled as `(n+1)/n * bytes / (intra * nvls.efficiency)` for messages of at least
//!   `nvls.min_bytes`, where the hardware has it (`nvls` is `None` on A100).
//!
//! The cheapest applicable algorithm is chosen per call, as NCCL's tuner does with its own
//! (different, finer) model, unless `algorithm` fixes one (ignored where it does not apply,
//! e.g. a tree for an all-gather). Groups with uneven members per node are approximated by their
//! busiest node (`max_per_node`).

use crate::schedule::CollectiveKind;
use crate::units::{positive_rate, secs_to_ns};
use serde::Serialize;

/// NCCL protocol efficiency on NVLink. network.toml: H100 ring "~370 GB/s (450 GB/s line rate
/// less ~20% protocol)"; the same ~20% applies to A100 ("300 GB/s, ~240 effective").
pub const DEFAULT_NVLINK_EFFICIENCY: f64 = 0.80;
/// NCCL efficiency on InfiniBand rails. network.toml: one 400 Gb/s (50 GB/s) NDR NIC reaches
/// 46-48 GB/s; 0.94 is the middle of that range.
pub const DEFAULT_NETWORK_EFFICIENCY: f64 = 0.94;

/// Which algorithm an estimate used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    /// A group of one rank: nothing moves.
    Local,
    Ring,
    Tree,
    Hierarchical,
    /// NVLink SHARP in-switch reduction (one node).
    Nvls,
    /// All-to-all: every rank sends straight to every other rank.
    Direct,
    /// Expert all-to-all sent once per remote node and forwarded inside it
    /// ([`super::dispatch`]).
    NodeDedup,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CollectiveEstimate {
    pub time_ns: u64,
    pub algorithm: Algorithm,
}

/// Link tiers as one GPU sees them; see the module doc.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TierModel {
    /// Per GPU, per direction, line rate of the intra-node tier.
    pub intra_bandwidth_bytes_per_s: f64,
    pub intra_latency_ns: u64,
    /// Per GPU (one NIC rail), per direction, line rate of the inter-node tier.
    pub inter_bandwidth_bytes_per_s: f64,
    pub inter_latency_ns: u64,
    pub nvlink_efficiency: f64,
    pub network_efficiency: f64,
    /// In-switch reduction inside a node, where the NVSwitch has it.
    pub nvls: Option<NvlsModel>,
    /// A fixed algorithm instead of the cheapest; `None` chooses per call.
    pub algorithm: Option<Algorithm>,
}

/// NVLink SHARP all-reduce inside one node.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NvlsModel {
    /// Achieved fraction of the intra-node line rate (per direction).
    pub efficiency: f64,
    /// Smallest message for which NCCL uses NVLS (below it, ring or tree).
    pub min_bytes: u64,
}

/// Shape of the group a collective runs over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupShape {
    pub ranks: u32,
    pub nodes: u32,
    pub max_per_node: u32,
}

impl TierModel {
    /// Achieved intra-node rate per GPU and direction (line rate times protocol efficiency):
    /// the capacity the flow model gives each NVLink.
    pub fn intra_bw(&self) -> f64 {
        positive_rate(self.intra_bandwidth_bytes_per_s * self.nvlink_efficiency)
    }
    /// Achieved rate of one NIC rail per direction: the flow model's NIC capacity.
    pub fn inter_bw(&self) -> f64 {
        positive_rate(self.inter_bandwidth_bytes_per_s * self.network_efficiency)
    }
    /// Latency of one point-to-point transfer and the tier it uses.
    pub fn p2p_latency_ns(&self, same_node: bool) -> u64 {
        if same_node {
            self.intra_latency_ns
        } else {
            self.inter_latency_ns
        }
    }

    fn intra_lat_s(&self) -> f64 {
        self.intra_latency_ns as f64 * 1e-9
    }
    fn inter_lat_s(&self) -> f64 {
        self.inter_latency_ns as f64 * 1e-9
    }

    /// Bandwidth and per-step latency of a flat ring over the group.
    fn ring_link(&self, g: GroupShape) -> (f64, f64) {
        if g.nodes <= 1 {
            (self.intra_bw(), self.intra_lat_s())
        } else {
            let rails = f64::from(g.max_per_node.max(1));
            (
                self.intra_bw().min(rails * self.inter_bw()),
                self.inter_lat_s(),
            )
        }
    }

    /// One collective of `bytes` (nccl-tests buffer size) over a group of this shape.
    pub fn estimate(&self, kind: CollectiveKind, g: GroupShape, bytes: u64) -> CollectiveEstimate {
        let n = g.ranks;
        if n <= 1 {
            return CollectiveEstimate {
                time_ns: 0,
                algorithm: Algorithm::Local,
            };
        }
        let s = bytes as f64;
        let nf = f64::from(n);
        let (bw, lat) = self.ring_link(g);
        let mut best = ((nf - 1.0) / nf * s / bw + (nf - 1.0) * lat, Algorithm::Ring);
        match kind {
            CollectiveKind::AllReduce => {
                best.0 *= 2.0;
                let mut options = vec![(2.0 * log2_ceil(n) * lat + 2.0 * s / bw, Algorithm::Tree)];
                if g.nodes > 1 && g.max_per_node > 1 {
                    options.push((
                        self.hierarchical_all_reduce_s(g, s),
                        Algorithm::Hierarchical,
                    ));
                }
                if let Some(nvls) = self
                    .nvls
                    .as_ref()
                    .filter(|v| g.nodes <= 1 && bytes >= v.min_bytes)
                {
                    let nvls_bw = positive_rate(self.intra_bandwidth_bytes_per_s * nvls.efficiency);
                    options.push(((nf + 1.0) / nf * s / nvls_bw + 2.0 * lat, Algorithm::Nvls));
                }
                let forced = options
                    .iter()
                    .find(|o| Some(o.1) == self.algorithm)
                    .copied();
                match forced {
                    Some(o) => best = o,
                    None if self.algorithm == Some(Algorithm::Ring) => {}
                    None => {
                        for o in options {
                            if o.0 < best.0 {
                                best = o;
                            }
                        }
                    }
                }
            }
            CollectiveKind::AllGather | CollectiveKind::ReduceScatter => {}
            CollectiveKind::Broadcast => {
                // Pipelined chain: the buffer crosses each link once.
                best.0 = s / bw + (nf - 1.0) * lat;
            }
            CollectiveKind::AllToAll => {
                let t = if g.nodes <= 1 {
                    (nf - 1.0) / nf * s / self.intra_bw()
                } else {
                    let k = f64::from(g.max_per_node.max(1)).min(nf);
                    let inter = (nf - k) / nf * s / self.inter_bw();
                    let intra = (k - 1.0) / nf * s / self.intra_bw();
                    inter.max(intra)
                };
                best = (t + (nf - 1.0) * lat, Algorithm::Direct);
            }
        }
        CollectiveEstimate {
            time_ns: secs_to_ns(best.0),
            algorithm: best.1,
        }
    }

    fn hierarchical_all_reduce_s(&self, g: GroupShape, s: f64) -> f64 {
        let k = f64::from(g.max_per_node);
        let intra_phase = (k - 1.0) / k * s / self.intra_bw() + (k - 1.0) * self.intra_lat_s();
        let (inter_ring, inter_tree) = self.hierarchical_inter(g, s / k);
        2.0 * intra_phase + inter_ring.min(inter_tree)
    }

    /// Seconds of the inter-node all-reduce of `shard` bytes per rail, as a ring and as a
    /// double binary tree.
    fn hierarchical_inter(&self, g: GroupShape, shard: f64) -> (f64, f64) {
        let nodes = f64::from(g.nodes);
        let ring = 2.0 * (nodes - 1.0) / nodes * shard / self.inter_bw()
            + 2.0 * (nodes - 1.0) * self.inter_lat_s();
        let tree = 2.0 * log2_ceil(g.nodes) * self.inter_lat_s() + 2.0 * shard / self.inter_bw();
        (ring, tree)
    }

    /// One point-to-point transfer: latency plus bytes over the tier the two ranks share.
    pub fn p2p_ns(&self, same_node: bool, bytes: u64) -> u64 {
        self.p2p_ns_with(same_node, bytes, None, None)
    }

    /// [`TierModel::p2p_ns`] with the tier's latency replaced by `latency_ns` and its
    /// achieved rate by `bandwidth_bytes_per_s` when given (a transport whose p2p differs from
    /// its collective steps, as the host backend's: a collective step also starts a sender
    /// thread, and a send is one socket write).
    pub fn p2p_ns_with(
        &self,
        same_node: bool,
        bytes: u64,
        latency_ns: Option<u64>,
        bandwidth_bytes_per_s: Option<f64>,
    ) -> u64 {
        let (bw, lat) = if same_node {
            (self.intra_bw(), self.intra_lat_s())
        } else {
            (self.inter_bw(), self.inter_lat_s())
        };
        let lat = latency_ns.map_or(lat, |l| l as f64 * 1e-9);
        let bw = bandwidth_bytes_per_s.map_or(bw, positive_rate);
        secs_to_ns(lat + bytes as f64 / bw)
    }
}

/// How the bytes of one phase of a collective move (see [`TierModel::decompose`]); the flow
/// model ([`super::Network`]) turns a pattern into flows over a group's members.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Every member sends to the next one in ring order; an edge between two nodes is split
    /// over the rails the group has on those nodes (one flow per rail).
    Ring,
    /// A ring inside each node among the group's members there.
    IntraRing,
    /// For each local index j, a ring across nodes among the j-th members of every node (one
    /// ring per rail, in parallel).
    InterRails,
    /// Every member sends to every other member.
    AllPairs,
    /// Every member sends to the member of the same local index on every other node.
    RailPairs,
    /// Every member sends to every other member of its node.
    NodePairs,
}

/// One phase: every edge (flow) of the pattern carries `bytes_per_edge`, and the flows of
/// `beside` (a second pattern and its bytes per edge) run at the same time. Phases run one
/// after another.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Phase {
    pub pattern: Pattern,
    pub bytes_per_edge: f64,
    pub beside: Option<(Pattern, f64)>,
}

/// A collective split into its latency term and its bandwidth phases: with no other traffic,
/// `latency_ns` plus the phases' transfer times equals [`TierModel::estimate`].
#[derive(Clone, Debug, PartialEq)]
pub struct Decomposition {
    pub algorithm: Algorithm,
    pub latency_ns: u64,
    pub phases: Vec<Phase>,
}

impl TierModel {
    /// [`TierModel::estimate`]'s choice of algorithm, split into latency and bandwidth
    /// phases for the flow model. Bytes of NVLS phases are scaled by the ratio of NVLink
    /// to NVLS efficiency, so that a flow at the NVLink capacity takes NVLS's time.
    pub fn decompose(&self, kind: CollectiveKind, g: GroupShape, bytes: u64) -> Decomposition {
        let algorithm = self.estimate(kind, g, bytes).algorithm;
        let n = f64::from(g.ranks.max(1));
        let s = bytes as f64;
        let (_, lat) = self.ring_link(g);
        let one = |pattern, bytes_per_edge| {
            vec![Phase {
                pattern,
                bytes_per_edge,
                beside: None,
            }]
        };
        let (latency_s, phases) = match (algorithm, kind) {
            (Algorithm::Local, _) => (0.0, vec![]),
            (Algorithm::Ring, CollectiveKind::AllReduce) => (
                2.0 * (n - 1.0) * lat,
                one(Pattern::Ring, 2.0 * (n - 1.0) / n * s),
            ),
            (Algorithm::Ring, CollectiveKind::Broadcast) => {
                ((n - 1.0) * lat, one(Pattern::Ring, s))
            }
            (Algorithm::Ring, _) => ((n - 1.0) * lat, one(Pattern::Ring, (n - 1.0) / n * s)),
            (Algorithm::Tree, _) => (2.0 * log2_ceil(g.ranks) * lat, one(Pattern::Ring, 2.0 * s)),
            (Algorithm::Nvls, _) => {
                let nvls_eff = self.nvls.as_ref().map_or(1.0, |v| v.efficiency);
                let scale = self.nvlink_efficiency / positive_eff(nvls_eff);
                (2.0 * lat, one(Pattern::Ring, (n + 1.0) / n * s * scale))
            }
            (Algorithm::Direct | Algorithm::NodeDedup, _) => {
                ((n - 1.0) * lat, one(Pattern::AllPairs, s / n))
            }
            (Algorithm::Hierarchical, _) => {
                let k = f64::from(g.max_per_node.max(1));
                let nodes = f64::from(g.nodes.max(1));
                let shard = s / k;
                let intra = Phase {
                    pattern: Pattern::IntraRing,
                    bytes_per_edge: (k - 1.0) / k * s,
                    beside: None,
                };
                let (ring, tree) = self.hierarchical_inter(g, shard);
                let (inter_lat, inter_bytes) = if ring <= tree {
                    (
                        2.0 * (nodes - 1.0) * self.inter_lat_s(),
                        2.0 * (nodes - 1.0) / nodes * shard,
                    )
                } else {
                    (2.0 * log2_ceil(g.nodes) * self.inter_lat_s(), 2.0 * shard)
                };
                let inter = Phase {
                    pattern: Pattern::InterRails,
                    bytes_per_edge: inter_bytes,
                    beside: None,
                };
                (
                    2.0 * (k - 1.0) * self.intra_lat_s() + inter_lat,
                    vec![intra, inter, intra],
                )
            }
        };
        Decomposition {
            algorithm,
            latency_ns: secs_to_ns(latency_s),
            phases: phases
                .into_iter()
                .filter(|p| p.bytes_per_edge > 0.0)
                .collect(),
        }
    }
}

fn positive_eff(e: f64) -> f64 {
    if e.is_nan() || e <= 0.0 {
        1e-9
    } else {
        e
    }
}

fn log2_ceil(n: u32) -> f64 {
    f64::from(32 - n.saturating_sub(1).leading_zeros())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::bus_bandwidth;

    /// DGX A100 figures from the scenario presets: NVLink3 through NVSwitch, 12 links x 25 GB/s
    /// = 300 GB/s per direction per GPU; one 200 Gb/s HDR rail (25 GB/s) per GPU.
    fn dgx_a100() -> TierModel {
        TierModel {
            intra_bandwidth_bytes_per_s: 300e9,
            intra_latency_ns: 3_000,
            inter_bandwidth_bytes_per_s: 25e9,
            inter_latency_ns: 10_000,
            nvlink_efficiency: DEFAULT_NVLINK_EFFICIENCY,
            network_efficiency: DEFAULT_NETWORK_EFFICIENCY,
            nvls: None,
            algorithm: None,
        }
    }

    fn shape(ranks: u32, nodes: u32, max_per_node: u32) -> GroupShape {
        GroupShape {
            ranks,
            nodes,
            max_per_node,
        }
    }

    #[test]
    fn log2_ceil_values() {
        assert_eq!(log2_ceil(1), 0.0);
        assert_eq!(log2_ceil(2), 1.0);
        assert_eq!(log2_ceil(3), 2.0);
        assert_eq!(log2_ceil(8), 3.0);
        assert_eq!(log2_ceil(9), 4.0);
    }

    #[test]
    fn large_all_reduce_uses_ring_at_effective_nvlink_rate() {
        let m = dgx_a100();
        let e = m.estimate(CollectiveKind::AllReduce, shape(8, 1, 8), 1 << 30);
        assert_eq!(e.algorithm, Algorithm::Ring);
        let bus = bus_bandwidth(CollectiveKind::AllReduce, 8, 1 << 30, e.time_ns);
        // 300 GB/s * 0.8 = 240 GB/s, less 14 latencies of 3 us over a ~7.8 ms transfer.
        assert!(bus < 240e9 && bus > 238e9, "{bus}");
    }

    #[test]
    fn small_all_reduce_prefers_tree() {
        let m = dgx_a100();
        let e = m.estimate(CollectiveKind::AllReduce, shape(64, 64, 1), 4096);
        assert_eq!(e.algorithm, Algorithm::Tree);
        let ring = 2.0 * 63.0 * 10e-6;
        assert!((e.time_ns as f64) * 1e-9 < ring);
    }

    #[test]
    fn multi_node_ring_bandwidth_is_rails_times_nic() {
        let m = dgx_a100();
        // 8 GPUs per node on 4 nodes: busbw of a large all-reduce approaches 8 rails * 25
        // GB/s * 0.94 = 188 GB/s (network.toml quotes 192 GB/s for DGX A100 HDR).
        let e = m.estimate(CollectiveKind::AllReduce, shape(32, 4, 8), 4 << 30);
        let bus = bus_bandwidth(CollectiveKind::AllReduce, 32, 4 << 30, e.time_ns);
        assert!(
            bus > 180e9 && bus <= 188e9 + 1e6,
            "{bus} via {:?}",
            e.algorithm
        );
    }

    #[test]
    fn hierarchical_wins_over_many_nodes_at_medium_sizes() {
        let m = dgx_a100();
        // 256 GPUs on 32 nodes, 16 MiB: the flat ring pays 510 inter-node latencies.
        let e = m.estimate(CollectiveKind::AllReduce, shape(256, 32, 8), 16 << 20);
        assert_ne!(e.algorithm, Algorithm::Ring);
    }

    #[test]
    fn a_fixed_algorithm_is_used_where_it_applies() {
        let mut m = dgx_a100();
        m.algorithm = Some(Algorithm::Tree);
        let e = m.estimate(CollectiveKind::AllReduce, shape(8, 1, 8), 1 << 30);
        assert_eq!(e.algorithm, Algorithm::Tree);
        let auto = dgx_a100().estimate(CollectiveKind::AllReduce, shape(8, 1, 8), 1 << 30);
        assert!(e.time_ns > auto.time_ns);
        // NVLS on a switch without it, or hierarchical inside one node: the cheapest instead.
        for fixed in [Algorithm::Nvls, Algorithm::Hierarchical] {
            m.algorithm = Some(fixed);
            let e = m.estimate(CollectiveKind::AllReduce, shape(8, 1, 8), 1 << 30);
            assert_eq!(e, auto);
        }
        // Not an all-reduce: the choice does not apply.
        m.algorithm = Some(Algorithm::Tree);
        let ag = m.estimate(CollectiveKind::AllGather, shape(8, 1, 8), 1 << 30);
        assert_eq!(ag.algorithm, Algorithm::Ring);
    }

    #[test]
    fn nvls_needs_one_node_and_min_bytes() {
        let mut m = dgx_a100();
        m.nvls = Some(NvlsModel {
            efficiency: 0.7,
            min_bytes: 1 << 20,
        });
        let big = m.estimate(CollectiveKind::AllReduce, shape(8, 1, 8), 1 << 30);
        assert_eq!(big.algorithm, Algorithm::Nvls);
        let small = m.estimate(CollectiveKind::AllReduce, shape(8, 1, 8), 1 << 10);
        assert_ne!(small.algorithm, Algorithm::Nvls);
        let multi = m.estimate(CollectiveKind::AllReduce, shape(16, 2, 8), 1 << 30);
        assert_ne!(multi.algorithm, Algorithm::Nvls);
    }

    #[test]
    fn one_rank_costs_nothing() {
        let m = dgx_a100();
        for kind in [
            CollectiveKind::AllReduce,
            CollectiveKind::AllGather,
            CollectiveKind::AllToAll,
        ] {
            assert_eq!(m.estimate(kind, shape(1, 1, 1), 1 << 20).time_ns, 0);
        }
    }

    #[test]
    fn all_gather_is_half_an_all_reduce_at_large_sizes() {
        let m = dgx_a100();
        let ar = m.estimate(CollectiveKind::AllReduce, shape(8, 1, 8), 1 << 30);
        let ag = m.estimate(CollectiveKind::AllGather, shape(8, 1, 8), 1 << 30);
        let ratio = ar.time_ns as f64 / ag.time_ns as f64;
        assert!((ratio - 2.0).abs() < 0.01, "{ratio}");
    }

    #[test]
    fn all_to_all_across_nodes_is_bound_by_the_nic() {
        let m = dgx_a100();
        let bytes = 1u64 << 30;
        let e = m.estimate(CollectiveKind::AllToAll, shape(16, 2, 8), bytes);
        // Half of each buffer leaves the node over one 23.5 GB/s rail.
        let expect = 0.5 * bytes as f64 / (25e9 * 0.94);
        let got = e.time_ns as f64 * 1e-9;
        assert!(got >= expect && got < expect * 1.01, "{got} vs {expect}");
    }

    #[test]
    fn p2p_uses_the_shared_tier() {
        let m = dgx_a100();
        let near = m.p2p_ns(true, 240_000_000);
        let far = m.p2p_ns(false, 240_000_000);
        assert_eq!(near, 1_000_000 + 3_000);
        assert!(far > 10 * near);
    }

    #[test]
    fn broken_links_give_large_times_not_panics() {
        let mut m = dgx_a100();
        m.intra_bandwidth_bytes_per_s = 0.0;
        m.nvlink_efficiency = f64::NAN;
        let e = m.estimate(CollectiveKind::AllReduce, shape(8, 1, 8), u64::MAX);
        assert!(e.time_ns > 0);
    }
}
