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
//! Per rank, with `s` the all-to-all's buffer (`top_k` copies of each of its tokens), `N` nodes
//! of `m` group members and experts spread evenly over the nodes, for uniformly routed tokens:
//! - RDMA out: `s / top_k * D`, `D` the expected number of distinct remote nodes among a
//!   token's experts, `(N-1) (1 - C(E - E/N, k) / C(E, k))` ([`NodeDedup::remote_nodes_per_token`]);
//! - NVLink out: `s (m-1)/m`: the copies for its own node's other GPUs, and the copies it
//!   forwards for tokens that arrived from other nodes (by symmetry as many).

use super::tiers::{Algorithm, CollectiveEstimate, Decomposition, GroupShape, Pattern, Phase};
use super::TierModel;
use crate::units::secs_to_ns;
use serde::Serialize;

/// The routing a hierarchical dispatch deduplicates: `top_k` distinct experts of `experts`,
/// per token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct NodeDedup {
    pub experts: u32,
    pub top_k: u32,
}

impl NodeDedup {
    /// The dispatch `s` asks for: `Some` for a hierarchical dispatcher on a model with experts.
    pub fn of(s: &crate::scenario::Scenario) -> Option<NodeDedup> {
        let moe = s.model.moe.as_ref()?;
        (s.training.moe_dispatcher != crate::scenario::MoeDispatcher::AllToAll).then_some(
            NodeDedup {
                experts: moe.experts,
                top_k: moe.top_k,
            },
        )
    }

    /// The expected number of distinct remote nodes holding one of a token's `top_k` experts,
    /// for experts spread evenly over `nodes` nodes and drawn uniformly without repetition.
    pub fn remote_nodes_per_token(&self, nodes: u32) -> f64 {
        let n = f64::from(nodes.max(1));
        let e = f64::from(self.experts.max(1));
        let k = self.top_k.min(self.experts);
        let elsewhere = e - e / n;
        let mut miss = 1.0;
        for i in 0..k {
            let i = f64::from(i);
            miss *= ((elsewhere - i) / (e - i)).max(0.0);
        }
        (n - 1.0) * (1.0 - miss)
    }

    /// Bytes one rank sends over its RDMA rail and over NVLink for an all-to-all buffer of
    /// `bytes` over a group of `g`'s shape (see the module doc).
    fn rank_bytes(&self, g: GroupShape, bytes: u64) -> (f64, f64) {
        let s = bytes as f64;
        let m = f64::from(g.max_per_node.max(1));
        let inter = if g.nodes > 1 {
            s / f64::from(self.top_k.max(1)) * self.remote_nodes_per_token(g.nodes)
        } else {
            0.0
        };
        (inter, s * (m - 1.0) / m)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Distinct remote nodes averaged over every choice of `k` experts of `e`, spread evenly
    /// over `n` nodes, the token on node 0: the formula's ground truth by enumeration.
    fn enumerated(e: u32, k: u32, n: u32) -> f64 {
        let per = e / n;
        let (mut total, mut count) = (0u64, 0u64);
        for mask in 0u32..(1 << e) {
            if mask.count_ones() != k {
                continue;
            }
            let nodes: std::collections::BTreeSet<u32> = (0..e)
                .filter(|x| mask & (1 << x) != 0)
                .map(|x| x / per)
                .collect();
            total += nodes.iter().filter(|&&node| node != 0).count() as u64;
            count += 1;
        }
        total as f64 / count as f64
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
            let d = NodeDedup {
                experts: e,
                top_k: k,
            };
            let want = enumerated(e, k, n);
            assert!(
                (d.remote_nodes_per_token(n) - want).abs() < 1e-12,
                "{e} {k} {n}: {} vs {want}",
                d.remote_nodes_per_token(n)
            );
        }
        // One node: nothing crosses. Top 1: the NCCL count, (N-1)/N.
        assert_eq!(
            NodeDedup {
                experts: 64,
                top_k: 8
            }
            .remote_nodes_per_token(1),
            0.0
        );
        let one = NodeDedup {
            experts: 64,
            top_k: 1,
        }
        .remote_nodes_per_token(4);
        assert!((one - 0.75).abs() < 1e-12);
    }

    /// DeepSeek-V3 on 8 nodes (256 experts, top 8): about 4.6 remote nodes per token against
    /// NCCL's 7 copies; Qwen3-30B-A3B over 2 nodes (128 experts, top 8): about one against 4.
    #[test]
    fn deduplication_grows_with_top_k_per_node() {
        let v3 = NodeDedup {
            experts: 256,
            top_k: 8,
        }
        .remote_nodes_per_token(8);
        assert!((4.5..4.7).contains(&v3), "{v3}");
        let qwen = NodeDedup {
            experts: 128,
            top_k: 8,
        }
        .remote_nodes_per_token(2);
        assert!((0.99..1.0).contains(&qwen), "{qwen}");
    }
}
