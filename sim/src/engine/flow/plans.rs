//! The flow plans the engine reuses during a run: each distinct collective of a group turned
//! into flows once, and each rank pair's send route computed once (a group repeats the same
//! few collectives per layer and microbatch; a rank sends to the same pipeline neighbours all
//! step long).

use crate::plan::Plan;
use crate::schedule::CollectiveKind;
use crate::topology::{FlowPlan, Network, Path};

#[derive(Debug, Default)]
pub(super) struct Plans {
    /// Flow plans of the collectives seen so far.
    plans: Vec<FlowPlan>,
    /// Per group id: (kind, bytes, calls, index into `plans`) of its planned collectives.
    of_group: Vec<Vec<(CollectiveKind, u64, u32, u32)>>,
    /// Per sending rank: (receiver, latency, path) of the sends seen so far.
    routes: Vec<Vec<(u32, u64, Path)>>,
}

impl Plans {
    /// Plan `p` (from [`Plans::collective`]).
    pub fn get(&self, p: u32) -> Option<&FlowPlan> {
        self.plans.get(p as usize)
    }

    /// The index in `plans` of `calls` collectives of `kind` and `bytes` over group `group`,
    /// planned on first use.
    pub fn collective(
        &mut self,
        net: &Network,
        plan: &Plan,
        group: u32,
        kind: CollectiveKind,
        bytes: u64,
        calls: u32,
    ) -> u32 {
        let g = group as usize;
        if g >= self.of_group.len() {
            self.of_group.resize(g + 1, Vec::new());
        }
        let known = self.of_group[g]
            .iter()
            .find(|&&(k, b, c, _)| (k, b, c) == (kind, bytes, calls));
        if let Some(&(_, _, _, p)) = known {
            return p;
        }
        let p = self.plans.len() as u32;
        self.plans
            .push(net.collective(kind, plan.group(group), bytes, calls));
        self.of_group[g].push((kind, bytes, calls, p));
        p
    }

    /// [`Network::p2p_route`] from `src` to `dst`, computed once per pair (ranks send to
    /// the same one or two pipeline neighbours all step long).
    pub fn route(&mut self, net: &Network, src: u32, dst: u32) -> (u64, Path) {
        let s = src as usize;
        if s >= self.routes.len() {
            self.routes.resize(s + 1, Vec::new());
        }
        if let Some(&(_, latency_ns, path)) = self.routes[s].iter().find(|r| r.0 == dst) {
            return (latency_ns, path);
        }
        let (latency_ns, path) = net.p2p_route(src, dst);
        self.routes[s].push((dst, latency_ns, path));
        (latency_ns, path)
    }
}
