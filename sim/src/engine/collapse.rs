//! Collapsed-rank mode: when every rank of a pipeline stage runs the same program, the cost
//! model prices compute the same on every rank (no stragglers), and the stage's ranks sit
//! symmetrically on the nodes, all ranks of a stage behave identically. The engine then runs
//! one representative per stage (the rank with tp = cp = ep = dp = 0), treats a collective as
//! complete when the representatives among its members arrive (priced for the full group),
//! prices a p2p transfer between the real peers, and copies each representative's statistics
//! to the ranks it stands for. Sweeps use this: a 512-GPU layout with 8 stages simulates 8
//! ranks instead of 512.
//!
//! When the conditions do not hold, [`Collapse::new`] says why, and the engine collapses fewer
//! axes where that is exact ([`Collapse::partial`]: e.g. one rank per context-parallel index
//! when the cp ring leaves the node from some ranks only) or else simulates every rank, so
//! asking for collapse is always safe. With the flow network the engine may collapse fewer
//! axes ([`representatives_over`]; one rank per tensor-parallel index on a rail-optimized
//! fabric), and only where `engine::flow::symmetry` proves the result exact.

use super::RankStats;
use crate::cost::CostModel;
use crate::plan::{GroupKind, Plan, RankId};
use crate::schedule::{Peer, Schedule};

/// Why a plan cannot be collapsed; the engine then simulates every rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NotCollapsible {
    /// Compute durations depend on the rank (stragglers, per-rank profiles).
    RankDependentCost,
    /// A rank runs a different program from its stage's representative.
    ProgramDiffers { rank: RankId },
    /// A rank's group of some kind spans nodes differently from its representative's, so
    /// their collectives would be priced differently.
    AsymmetricGroup { rank: RankId, kind: GroupKind },
    /// A rank's pipeline or context-parallel neighbour is on its node while the
    /// representative's is not (or the reverse), so p2p prices would differ.
    AsymmetricPeer { rank: RankId },
}

/// The representatives and what the engine needs to run only them.
pub(crate) struct Collapse {
    /// Representative of each rank.
    pub rep_of: Vec<RankId>,
    /// The simulated ranks, ascending.
    pub reps: Vec<RankId>,
    /// `slot_of[rank]`: the representative's position in `reps`, `u32::MAX` for the ranks
    /// that are not simulated.
    pub slot_of: Vec<u32>,
    /// Per group id: the representatives among its members, ascending (empty when none).
    pub members: Vec<Vec<RankId>>,
}

/// The representative of every rank: same pipeline stage, every other coordinate zero.
/// Computed from the pp axis's stride in the placement order (no per-rank coordinate
/// decomposition); checked against `Plan::coords` in the tests.
fn representatives(plan: &Plan) -> Vec<RankId> {
    let mut stride = 1u32;
    for axis in plan.order {
        if axis == crate::scenario::Axis::Pp {
            break;
        }
        stride = stride.saturating_mul(axis_size(plan, axis));
    }
    let pp = plan.sizes.pp.max(1);
    (0..plan.world)
        .map(|r| (r / stride.max(1)) % pp * stride)
        .collect()
}

/// The representative of every rank when only the axes in `axes` are collapsed: the rank
/// with those coordinates zero and the others its own. (`representatives` is the case of
/// every axis but pp.) The flow model collapses fewer axes when the replicas along the
/// others share links (see `engine::flow::symmetry`).
pub(crate) fn representatives_over(plan: &Plan, axes: &[crate::scenario::Axis]) -> Vec<RankId> {
    let mut strides = Vec::with_capacity(axes.len());
    let mut stride = 1u32;
    for axis in plan.order {
        let n = axis_size(plan, axis).max(1);
        if axes.contains(&axis) {
            strides.push((stride, n));
        }
        stride = stride.saturating_mul(n);
    }
    (0..plan.world)
        .map(|r| {
            strides
                .iter()
                .fold(r, |rep, &(s, n)| rep.saturating_sub((r / s.max(1)) % n * s))
        })
        .collect()
}

pub(crate) fn axis_size(plan: &Plan, axis: crate::scenario::Axis) -> u32 {
    use crate::scenario::Axis;
    let s = &plan.sizes;
    match axis {
        Axis::Tp => s.tp,
        Axis::Cp => s.cp,
        Axis::Ep => s.ep,
        Axis::Dp => s.dp,
        Axis::Pp => s.pp,
    }
}

/// The representative of `rank` by coordinates (the definition `representatives` follows).
#[cfg(test)]
fn representative(plan: &Plan, rank: RankId) -> RankId {
    let c = plan.coords(rank);
    plan.rank_of(crate::plan::Coords {
        pp: c.pp,
        ..crate::plan::Coords::default()
    })
}

impl Collapse {
    /// [`Collapse::with_peers`], resolving every rank's peers first.
    #[cfg(test)]
    pub fn new(
        plan: &Plan,
        schedule: &Schedule,
        cost: &dyn CostModel,
    ) -> Result<Collapse, NotCollapsible> {
        let peers: Vec<[RankId; 4]> = (0..plan.world)
            .map(|r| PEERS.map(|p| p.rank_for(plan, r)))
            .collect();
        Collapse::with_peers(plan, schedule, cost, &peers)
    }

    /// Checks that collapsing gives exactly the full simulation's result, and builds the
    /// tables. `peers[rank]` are the rank's resolved peers in [`PEERS`] order. O(world x
    /// group kinds).
    pub fn with_peers(
        plan: &Plan,
        schedule: &Schedule,
        cost: &dyn CostModel,
        peers: &[[RankId; 4]],
    ) -> Result<Collapse, NotCollapsible> {
        Collapse::with_reps(plan, schedule, cost, peers, representatives(plan))
    }

    /// Where collapsing every axis but pp is not exact (a context-parallel ring that leaves
    /// the node from some ranks and not from their representatives, a group that spans nodes
    /// unevenly), the collapse over fewer axes that leaves out the most ranks and is exact,
    /// if any: each subset of the other axes is tried, most ranks per representative first
    /// (ties in placement order), and checked as [`Collapse::with_reps`] checks it.
    pub fn partial(
        plan: &Plan,
        schedule: &Schedule,
        cost: &dyn CostModel,
        peers: &[[RankId; 4]],
    ) -> Option<Collapse> {
        let inner: Vec<crate::scenario::Axis> = plan
            .order
            .into_iter()
            .filter(|&a| a != crate::scenario::Axis::Pp && axis_size(plan, a) > 1)
            .collect();
        // Every non-empty subset but the whole (which `with_peers` already refused).
        let whole = (1u32 << inner.len()).saturating_sub(1);
        let mut subsets: Vec<(u32, Vec<crate::scenario::Axis>)> = (1..whole)
            .map(|mask| {
                let axes: Vec<_> = inner
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << i) != 0)
                    .map(|(_, &a)| a)
                    .collect();
                let per_rep = axes
                    .iter()
                    .fold(1u32, |n, &a| n.saturating_mul(axis_size(plan, a)));
                (per_rep, axes)
            })
            .collect();
        subsets.sort_by_key(|s| std::cmp::Reverse(s.0));
        subsets.into_iter().find_map(|(_, axes)| {
            Collapse::with_reps(
                plan,
                schedule,
                cost,
                peers,
                representatives_over(plan, &axes),
            )
            .ok()
        })
    }

    /// [`Collapse::with_peers`] for the representatives `rep_of` (from
    /// [`representatives_over`]).
    pub fn with_reps(
        plan: &Plan,
        schedule: &Schedule,
        cost: &dyn CostModel,
        peers: &[[RankId; 4]],
        rep_of: Vec<RankId>,
    ) -> Result<Collapse, NotCollapsible> {
        if !cost.compute_is_rank_invariant() {
            return Err(NotCollapsible::RankDependentCost);
        }
        let program = |r: RankId| schedule.program_of.get(r as usize).copied();
        let local = |x: RankId, i: usize| {
            peers
                .get(x as usize)
                .and_then(|p| p.get(i))
                .map(|&q| plan.node_of(x) == plan.node_of(q))
        };
        for (r, &rep) in (0..plan.world).zip(&rep_of) {
            if r == rep {
                continue;
            }
            if program(r) != program(rep) {
                return Err(NotCollapsible::ProgramDiffers { rank: r });
            }
            for kind in GroupKind::ALL {
                let (a, b) = (
                    plan.group(plan.group_of(r, kind)),
                    plan.group(plan.group_of(rep, kind)),
                );
                if (a.members.len(), a.nodes, a.max_per_node)
                    != (b.members.len(), b.nodes, b.max_per_node)
                {
                    return Err(NotCollapsible::AsymmetricGroup { rank: r, kind });
                }
            }
            for i in 0..PEERS.len() {
                if local(r, i) != local(rep, i) {
                    return Err(NotCollapsible::AsymmetricPeer { rank: r });
                }
            }
        }
        let reps: Vec<RankId> = (0..plan.world)
            .filter(|&r| rep_of.get(r as usize) == Some(&r))
            .collect();
        let mut slot_of = vec![u32::MAX; rep_of.len()];
        for (slot, &rep) in reps.iter().enumerate() {
            if let Some(x) = slot_of.get_mut(rep as usize) {
                *x = slot as u32;
            }
        }
        let mut members = vec![Vec::new(); plan.groups().len()];
        for &rep in &reps {
            for kind in GroupKind::ALL {
                if let Some(list) = members.get_mut(plan.group_of(rep, kind) as usize) {
                    list.push(rep);
                }
            }
        }
        Ok(Collapse {
            rep_of,
            reps,
            slot_of,
            members,
        })
    }

    /// The peer a representative's p2p op is matched with: the representative of the real
    /// peer (itself for a context-parallel neighbour).
    pub fn match_peer(&self, plan: &Plan, rank: RankId, peer: Peer) -> RankId {
        let real = peer.rank_for(plan, rank);
        self.rep_of.get(real as usize).copied().unwrap_or(real)
    }

    /// Every rank's statistics from its representative's (`simulated` is indexed by slot,
    /// the representative's position in `reps`).
    pub fn expand(&self, simulated: &[RankStats]) -> Vec<RankStats> {
        // Sized up front: a collected `filter_map` would grow (and copy) the vector many
        // times over for a large world.
        let mut out = Vec::with_capacity(self.rep_of.len());
        out.extend(self.rep_of.iter().enumerate().filter_map(|(r, &rep)| {
            let slot = *self.slot_of.get(rep as usize)?;
            let mut s = simulated.get(slot as usize)?.clone();
            s.rank = r as u32;
            Some(s)
        }));
        out
    }
}

/// Every peer kind, in the order of the engine's per-rank peer table.
pub(crate) const PEERS: [Peer; 4] = [Peer::PpNext, Peer::PpPrev, Peer::CpNext, Peer::CpPrev];

#[cfg(test)]
mod tests {
    use super::super::compile::peer_index;
    use super::*;

    #[test]
    fn representatives_follow_coordinates_in_any_order() {
        use crate::scenario::Axis;
        let mut sc = crate::testing::small_scenario(2, 3, 2, 6);
        for order in [
            crate::scenario::Parallel::DEFAULT_ORDER,
            [Axis::Pp, Axis::Tp, Axis::Cp, Axis::Ep, Axis::Dp],
            [Axis::Dp, Axis::Pp, Axis::Tp, Axis::Cp, Axis::Ep],
        ] {
            sc.parallel.order = order;
            let plan = Plan::new(&sc).unwrap();
            let reps = representatives(&plan);
            let all = [Axis::Tp, Axis::Cp, Axis::Ep, Axis::Dp];
            for r in 0..plan.world {
                assert_eq!(reps[r as usize], representative(&plan, r), "{order:?} {r}");
            }
            assert_eq!(representatives_over(&plan, &all), reps, "{order:?}");
            // Collapsing only tp keeps every other coordinate.
            let tp_only = representatives_over(&plan, &[Axis::Tp]);
            for r in 0..plan.world {
                let c = plan.coords(r);
                let want = plan.rank_of(crate::plan::Coords { tp: 0, ..c });
                assert_eq!(tp_only[r as usize], want, "{order:?} {r}");
            }
        }
    }

    #[test]
    fn peer_table_matches_compile() {
        for (i, p) in PEERS.into_iter().enumerate() {
            assert_eq!(peer_index(p), i);
        }
    }
}

#[cfg(test)]
mod gate_tests {
    use super::super::testkit::{pipeline, FixedCost, Pipeline};
    use super::super::{simulate, SimOptions};
    use super::*;
    use crate::testing::small_scenario;

    fn setup(tp: u32, pp: u32, dp: u32, gpus_per_node: u32) -> (Plan, Schedule) {
        let mut sc = small_scenario(tp, pp, dp, 4);
        sc.cluster.gpus_per_node = gpus_per_node;
        let plan = Plan::new(&sc).unwrap();
        let s = pipeline(&plan, Pipeline::OneFOneB, 4, 10, 20, 8);
        (plan, s)
    }

    #[test]
    fn representatives_are_one_per_stage() {
        let (plan, s) = setup(2, 4, 2, 8);
        let c = Collapse::new(&plan, &s, &FixedCost::default()).unwrap();
        assert_eq!(c.reps, vec![0, 4, 8, 12]);
        for r in 0..plan.world {
            let rep = c.rep_of[r as usize];
            assert_eq!(plan.stage_of(rep), plan.stage_of(r));
            assert!(c.reps.contains(&rep));
        }
        // A TP group holds one representative; the pipeline group holds all of them.
        assert_eq!(c.members[plan.group_of(0, GroupKind::Tp) as usize], vec![0]);
        assert_eq!(
            c.members[plan.group_of(1, GroupKind::Dp) as usize],
            Vec::<u32>::new()
        );
        assert_eq!(
            c.members[plan.group_of(0, GroupKind::Pp) as usize],
            vec![0, 4, 8, 12]
        );
        assert_eq!(c.match_peer(&plan, 0, Peer::PpNext), 4);
        assert_eq!(c.match_peer(&plan, 0, Peer::CpNext), 0);
    }

    #[test]
    fn stragglers_prevent_collapse_and_the_engine_falls_back() {
        let (plan, s) = setup(2, 2, 2, 8);
        let cost = FixedCost {
            straggler: Some((3, 2)),
            ..FixedCost::default()
        };
        assert_eq!(
            Collapse::new(&plan, &s, &cost).err(),
            Some(NotCollapsible::RankDependentCost)
        );
        let opts = SimOptions {
            collapse: true,
            ..SimOptions::default()
        };
        let r = simulate(&plan, &s, &cost, &opts).unwrap();
        assert!(!r.collapsed);
        let full = simulate(&plan, &s, &cost, &SimOptions::default()).unwrap();
        assert_eq!(r, full);
    }

    #[test]
    fn groups_that_straddle_nodes_unevenly_prevent_collapse() {
        // Three GPUs per node: TP group {0, 1} sits on node 0, {2, 3} straddles nodes 0, 1.
        let (plan, s) = setup(2, 2, 3, 3);
        assert!(matches!(
            Collapse::new(&plan, &s, &FixedCost::default()),
            Err(NotCollapsible::AsymmetricGroup { .. })
                | Err(NotCollapsible::AsymmetricPeer { .. })
        ));
    }

    #[test]
    fn a_rank_with_its_own_program_prevents_collapse() {
        let (plan, mut s) = setup(2, 2, 1, 8);
        s.programs.push(s.programs[0].clone());
        s.program_of[1] = s.programs.len() as u32 - 1;
        assert_eq!(
            Collapse::new(&plan, &s, &FixedCost::default()).err(),
            Some(NotCollapsible::ProgramDiffers { rank: 1 })
        );
    }

    #[test]
    fn collapsed_pipeline_equals_the_full_one() {
        for (tp, pp, dp) in [(1, 1, 1), (2, 4, 2), (4, 2, 4), (1, 8, 2)] {
            let (plan, s) = setup(tp, pp, dp, 8);
            let cost = FixedCost::default();
            let full = simulate(&plan, &s, &cost, &SimOptions::default()).unwrap();
            let opts = SimOptions {
                collapse: true,
                ..SimOptions::default()
            };
            let c = simulate(&plan, &s, &cost, &opts).unwrap();
            assert!(c.collapsed);
            assert_eq!(c.step_time_ns, full.step_time_ns);
            assert_eq!(c.ranks, full.ranks);
            assert_eq!(c.events * u64::from(tp * dp), full.events);
        }
    }
}
