//! Expert all-to-alls sent hierarchically (`[training] moe_dispatcher = "deepep"` or
//! `"hybridep"`), as DeepEP's and HybridEP's internode kernels send them: each token crosses
//! once to each remote node that holds at least one of its experts, over the RDMA rail to the
//! GPU of the same local index there, which forwards it over NVLink to the GPUs holding its
//! experts; RDMA and NVLink transfers run at the same time (DeepSeek-AI, DeepSeek-V3 Technical
//! Report, arXiv:2412.19437, section 3.2.2; deepseek-ai/DeepEP README, "normal kernels").
//! NCCL's all-to-all (Megatron-Core's `alltoall` dispatcher) sends every one of a token's
//! `top_k` copies to its expert's GPU instead, so `top_k (N-1)/N` copies per token cross nodes
//! where the hierarchical dispatch sends one per distinct remote node.
//!
//! Both send a token once to each GPU that holds at least one of its experts, not once per
//! expert: the GPU applies it to each of its experts itself (DeepEP's `get_dispatch_layout`
//! counts `num_tokens_per_rank`; NVIDIA, Scalable Training of Mixture-of-Experts Models with
//! Megatron Core, arXiv:2603.07685, section 4.2.2: token-based dispatch "avoids sending
//! redundant tokens").
//!
//! Per rank, with `s` the all-to-all's buffer (`top_k` copies of each of its tokens), `R`
//! group members on `N` nodes and experts spread evenly over the members, for uniformly routed
//! tokens:
//! - RDMA out: `s / top_k * D`, `D` the expected number of distinct remote nodes among a
//!   token's experts, `(N-1) (1 - C(E - E/N, k) / C(E, k))` ([`NodeDedup::remote_nodes_per_token`]);
//! - NVLink out: `s / top_k * (R - N) p`, `p` the chance that a given GPU holds one of a
//!   token's experts ([`NodeDedup::nvlink_sends_per_token`]): one copy to each such GPU of
//!   every node the token reaches, but the GPU that receives it (its own, or the one its RDMA
//!   copy lands on); by symmetry a rank forwards as many copies for other ranks' tokens as
//!   the other ranks forward for its own.

use super::tiers::{Algorithm, CollectiveEstimate, Decomposition, GroupShape, Pattern, Phase};
use super::TierModel;
use crate::units::secs_to_ns;
use serde::Serialize;

/// The routing a hierarchical dispatch deduplicates: `top_k` distinct experts of `experts`,
/// per token, drawn from `group_top_k` of `groups` groups of consecutive experts (group-limited
/// routing; `groups = 1`: from all of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct NodeDedup {
    pub experts: u32,
    pub top_k: u32,
    pub groups: u32,
    pub group_top_k: u32,
}

impl NodeDedup {
    /// The dispatch `s` asks for: `Some` for a hierarchical dispatcher on a model with experts.
    pub fn of(s: &crate::scenario::Scenario) -> Option<NodeDedup> {
        let moe = s.model.moe.as_ref()?;
        (s.training.moe_dispatcher != crate::scenario::MoeDispatcher::AllToAll).then_some(
            NodeDedup {
                experts: moe.experts,
                top_k: moe.top_k,
                groups: moe.router_groups.0,
                group_top_k: moe.router_groups.1,
            },
        )
    }

    /// Routing without groups.
    pub fn ungrouped(experts: u32, top_k: u32) -> NodeDedup {
        NodeDedup {
            experts,
            top_k,
            groups: 1,
            group_top_k: 1,
        }
    }

    /// The expected number of distinct remote nodes holding one of a token's `top_k` experts,
    /// for experts spread evenly over `nodes` nodes, the groups drawn uniformly and the experts
    /// uniformly without repetition from the drawn groups (the load-balanced routing the
    /// benchmarks force): `(nodes - 1)` times the chance that a given other node receives one.
    pub fn remote_nodes_per_token(&self, nodes: u32) -> f64 {
        let n = f64::from(nodes.max(1));
        (n - 1.0) * (1.0 - self.node_missed(nodes.max(1)))
    }

    /// The chance that none of a token's experts is on a given node of `nodes` (or on a given
    /// GPU of the group, with `nodes` its members: any units holding the experts evenly). With groups:
    /// when each node holds whole groups (`groups` a multiple of `nodes`), summed over how many
    /// of the node's groups were drawn; when each group spans whole nodes (`nodes` a multiple
    /// of `groups`), the node's group drawn or not. Groups that straddle nodes otherwise are
    /// priced as no grouping.
    fn node_missed(&self, nodes: u32) -> f64 {
        let e = u64::from(self.experts.max(1));
        let k = u64::from(self.top_k.min(self.experts));
        let (g, gk) = (
            u64::from(self.groups.max(1)),
            u64::from(self.group_top_k.max(1)),
        );
        let n = u64::from(nodes);
        let per_node = e / n;
        if g <= 1 || gk >= g || !e.is_multiple_of(g) {
            return miss(e, per_node, k);
        }
        let per_group = e / g;
        let pool = gk * per_group;
        if g.is_multiple_of(n) {
            // The node holds `h` groups; `j` of them drawn.
            let h = g / n;
            (0..=h.min(gk))
                .map(|j| hypergeometric(g, h, gk, j) * miss(pool, j * per_group, k))
                .sum()
        } else if n.is_multiple_of(g) {
            let drawn = gk as f64 / g as f64;
            1.0 - drawn * (1.0 - miss(pool, per_node, k))
        } else {
            miss(e, per_node, k)
        }
    }

    /// Bytes one rank sends over its RDMA rail and over NVLink for an all-to-all buffer of
    /// `bytes` over a group of `g`'s shape (see the module doc).
    fn rank_bytes(&self, g: GroupShape, bytes: u64) -> (f64, f64) {
        let per_token = bytes as f64 / f64::from(self.top_k.max(1));
        let inter = if g.nodes > 1 {
            per_token * self.remote_nodes_per_token(g.nodes)
        } else {
            0.0
        };
        (inter, per_token * self.nvlink_sends_per_token(g))
    }

    /// The expected NVLink copies of one token over a group of `g`'s shape: one to each GPU
    /// holding one of its experts, on its own node and on each remote node it reaches, but the
    /// GPU that already has it there (its own GPU; the one of the same local index, which its
    /// RDMA copy reached): `(R - N)` times the chance that a given GPU holds one of its
    /// experts. For one expert per token this is NCCL's count, `(R - N) / R`.
    pub fn nvlink_sends_per_token(&self, g: GroupShape) -> f64 {
        let ranks = g.ranks.max(1);
        let others = f64::from(ranks.saturating_sub(g.nodes.max(1)));
        others * (1.0 - self.node_missed(ranks))
    }

    /// The time of one dispatch (or combine) of `bytes`: the RDMA and NVLink shares at the same
    /// time, each at its tier's rate, plus one latency per peer of each tier.
    pub fn estimate(&self, tiers: &TierModel, g: GroupShape, bytes: u64) -> CollectiveEstimate {
        if g.ranks <= 1 {
            return CollectiveEstimate {
                time_ns: 0,
                algorithm: Algorithm::Local,
            };
        }
        let (inter, intra) = self.rank_bytes(g, bytes);
        let t = (inter / tiers.inter_bw()).max(intra / tiers.intra_bw());
        CollectiveEstimate {
            time_ns: secs_to_ns(t + self.latency_s(tiers, g)),
            algorithm: Algorithm::NodeDedup,
        }
    }

    fn latency_s(&self, tiers: &TierModel, g: GroupShape) -> f64 {
        let m = f64::from(g.max_per_node.max(1));
        let nodes = f64::from(g.nodes.max(1));
        (nodes - 1.0) * tiers.inter_latency_ns as f64 * 1e-9
            + (m - 1.0) * tiers.intra_latency_ns as f64 * 1e-9
    }

    /// [`NodeDedup::estimate`] as flows: one phase in which every member sends its RDMA share
    /// to the members of the same local index on the other nodes and, beside it, its NVLink
    /// share to the other members of its node.
    pub fn decompose(&self, tiers: &TierModel, g: GroupShape, bytes: u64) -> Decomposition {
        if g.ranks <= 1 {
            return Decomposition {
                algorithm: Algorithm::Local,
                latency_ns: 0,
                phases: Vec::new(),
            };
        }
        let (inter, intra) = self.rank_bytes(g, bytes);
        let peers = |x: u32| f64::from(x.saturating_sub(1).max(1));
        let mut parts = Vec::with_capacity(2);
        if g.nodes > 1 {
            parts.push((Pattern::RailPairs, inter / peers(g.nodes)));
        }
        if g.max_per_node > 1 {
            parts.push((Pattern::NodePairs, intra / peers(g.max_per_node)));
        }
        let phases = match parts.as_slice() {
            [] => Vec::new(),
            [(p, b)] => vec![Phase {
                pattern: *p,
                bytes_per_edge: *b,
                beside: None,
            }],
            [(p, b), beside, ..] => vec![Phase {
                pattern: *p,
                bytes_per_edge: *b,
                beside: Some(*beside),
            }],
        };
        Decomposition {
            algorithm: Algorithm::NodeDedup,
            latency_ns: secs_to_ns(self.latency_s(tiers, g)),
            phases,
        }
    }
}

/// The chance that `k` draws without repetition from `pool` items all miss `away` of them.
fn miss(pool: u64, away: u64, k: u64) -> f64 {
    let (pool, away) = (pool as f64, away as f64);
    (0..k).fold(1.0, |p, i| {
        let i = i as f64;
        p * ((pool - away - i) / (pool - i)).max(0.0)
    })
}

/// `C(n, r)` as a float (0 when `r > n`).
fn choose(n: u64, r: u64) -> f64 {
    if r > n {
        return 0.0;
    }
    (0..r.min(n - r)).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
}

/// The chance that `drawn` of `total` items, drawn without repetition, include exactly `j`
/// of `marked` ones.
fn hypergeometric(total: u64, marked: u64, drawn: u64, j: u64) -> f64 {
    if j > drawn {
        return 0.0;
    }
    choose(marked, j) * choose(total - marked, drawn - j) / choose(total, drawn)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distinct remote nodes averaged over every choice of `k` experts of `e`, spread evenly
    /// over `n` nodes, the token on node 0: the formula's ground truth by enumeration.
    fn enumerated(e: u32, k: u32, n: u32) -> f64 {
        enumerated_grouped(e, k, n, 1, 1)
    }

    #[test]
    fn remote_nodes_per_token_matches_enumeration() {
        for (e, k, n) in [
            (8, 2, 2),
            (8, 2, 4),
            (12, 3, 3),
            (16, 4, 4),
            (16, 8, 2),
            (12, 1, 4),
        ] {
            let d = NodeDedup::ungrouped(e, k);
            let want = enumerated(e, k, n);
            assert!(
                (d.remote_nodes_per_token(n) - want).abs() < 1e-12,
                "{e} {k} {n}: {} vs {want}",
                d.remote_nodes_per_token(n)
            );
        }
        // One node: nothing crosses. Top 1: the NCCL count, (N-1)/N.
        assert_eq!(NodeDedup::ungrouped(64, 8).remote_nodes_per_token(1), 0.0);
        let one = NodeDedup::ungrouped(64, 1).remote_nodes_per_token(4);
        assert!((one - 0.75).abs() < 1e-12);
    }

    /// `count` of a token's experts (a mask over the `e` experts) averaged over every choice of
    /// `gk` of `g` groups and of `k` experts among the drawn groups' experts: each choice of
    /// groups equally likely, then each choice of experts.
    fn over_routings(e: u32, k: u32, g: u32, gk: u32, count: impl Fn(u32) -> u64) -> f64 {
        let per_group = e / g;
        let mut sum = 0.0;
        let mut group_sets = 0u32;
        for groups in 0u32..(1 << g) {
            if groups.count_ones() != gk {
                continue;
            }
            group_sets += 1;
            let (mut total, mut count_sets) = (0u64, 0u64);
            for mask in 0u32..(1 << e) {
                let allowed =
                    (0..e).all(|x| mask & (1 << x) == 0 || groups & (1 << (x / per_group)) != 0);
                if mask.count_ones() != k || !allowed {
                    continue;
                }
                total += count(mask);
                count_sets += 1;
            }
            sum += total as f64 / count_sets as f64;
        }
        sum / f64::from(group_sets)
    }

    /// The distinct units (nodes or GPUs) of `per_unit` consecutive experts that hold one of
    /// the experts of `mask`, among `e`.
    fn units(e: u32, per_unit: u32, mask: u32) -> std::collections::BTreeSet<u32> {
        (0..e)
            .filter(|x| mask & (1 << x) != 0)
            .map(|x| x / per_unit)
            .collect()
    }

    /// Distinct remote nodes averaged over every routing (`over_routings`), `e` experts over
    /// `n` nodes, the token on node 0.
    fn enumerated_grouped(e: u32, k: u32, n: u32, g: u32, gk: u32) -> f64 {
        over_routings(e, k, g, gk, |mask| {
            units(e, e / n, mask)
                .iter()
                .filter(|&&node| node != 0)
                .count() as u64
        })
    }

    /// Group-limited routing against enumeration, for nodes holding whole groups and for
    /// groups spanning whole nodes; one group, or every group drawn, is no grouping.
    #[test]
    fn grouped_remote_nodes_match_enumeration() {
        for (e, k, n, g, gk) in [
            (8, 2, 2, 4, 2),
            (8, 2, 4, 4, 2),
            (12, 3, 3, 6, 2),
            (16, 4, 4, 4, 2),
            (16, 3, 4, 8, 3),
            (16, 4, 8, 4, 2),
            (12, 2, 6, 3, 1),
        ] {
            let d = NodeDedup {
                experts: e,
                top_k: k,
                groups: g,
                group_top_k: gk,
            };
            let want = enumerated_grouped(e, k, n, g, gk);
            let got = d.remote_nodes_per_token(n);
            assert!(
                (got - want).abs() < 1e-12,
                "{e} {k} {n} {g} {gk}: {got} vs {want}"
            );
        }
        let plain = NodeDedup::ungrouped(16, 4).remote_nodes_per_token(4);
        for (g, gk) in [(1, 1), (4, 4)] {
            let d = NodeDedup {
                experts: 16,
                top_k: 4,
                groups: g,
                group_top_k: gk,
            };
            assert_eq!(d.remote_nodes_per_token(4), plain);
        }
    }

    /// NVLink copies of one token on GPU 0 of node 0, averaged over every routing
    /// (`over_routings`), `e` experts spread evenly over `r` GPUs in nodes of `m`: on each node
    /// the token reaches, one copy to each GPU holding one of its experts but the GPU of local
    /// index 0 (its own on node 0; the one its RDMA copy lands on elsewhere).
    fn enumerated_nvlink(e: u32, k: u32, (r, m): (u32, u32), g: u32, gk: u32) -> f64 {
        over_routings(e, k, g, gk, |mask| {
            units(e, e / r, mask)
                .iter()
                .filter(|&&gpu| gpu % m != 0)
                .count() as u64
        })
    }

    /// The NVLink copies per token against enumeration: one node and several, with and without
    /// groups; one expert per token is NCCL's `(R - N) / R`.
    #[test]
    fn nvlink_sends_per_token_match_enumeration() {
        for (e, k, (r, m), g, gk) in [
            (8, 2, (4, 4), 1, 1),
            (8, 2, (8, 4), 1, 1),
            (16, 4, (8, 4), 1, 1),
            (16, 4, (8, 2), 1, 1),
            (12, 3, (6, 3), 1, 1),
            (16, 4, (8, 4), 4, 2),
            (16, 3, (8, 2), 8, 3),
            (16, 4, (16, 4), 4, 2),
        ] {
            let d = NodeDedup {
                experts: e,
                top_k: k,
                groups: g,
                group_top_k: gk,
            };
            let shape = GroupShape {
                ranks: r,
                nodes: r / m,
                max_per_node: m,
            };
            let want = enumerated_nvlink(e, k, (r, m), g, gk);
            let got = d.nvlink_sends_per_token(shape);
            assert!(
                (got - want).abs() < 1e-12,
                "{e} {k} {r}/{m} {g} {gk}: {got} vs {want}"
            );
        }
        let one = NodeDedup::ungrouped(64, 1).nvlink_sends_per_token(GroupShape {
            ranks: 16,
            nodes: 2,
            max_per_node: 8,
        });
        assert!((one - 14.0 / 16.0).abs() < 1e-12, "{one}");
    }

    /// DeepSeek-V3's node-limited routing (8 groups, one per node of its 64-rank group, 4
    /// drawn): a token reaches at most 4 nodes, 3.17 remote ones on average against 4.6 without
    /// the limit.
    #[test]
    fn node_limited_routing_caps_the_nodes_a_token_reaches() {
        let limited = NodeDedup {
            experts: 256,
            top_k: 8,
            groups: 8,
            group_top_k: 4,
        }
        .remote_nodes_per_token(8);
        assert!((3.1..3.2).contains(&limited), "{limited}");
        assert!(limited <= 4.0 * 7.0 / 8.0);
    }

    /// DeepSeek-V3 on 8 nodes (256 experts, top 8): about 4.6 remote nodes per token against
    /// NCCL's 7 copies; Qwen3-30B-A3B over 2 nodes (128 experts, top 8): about one against 4.
    #[test]
    fn deduplication_grows_with_top_k_per_node() {
        let v3 = NodeDedup::ungrouped(256, 8).remote_nodes_per_token(8);
        assert!((4.5..4.7).contains(&v3), "{v3}");
        let qwen = NodeDedup::ungrouped(128, 8).remote_nodes_per_token(2);
        assert!((0.99..1.0).contains(&qwen), "{qwen}");
    }
}
