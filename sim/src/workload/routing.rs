//! How many routed token copies each expert-parallel rank processes (`[training]
//! moe_routing`), relative to the mean share `tokens * top_k / ep`, and the classes of ranks
//! that therefore run different programs.
//!
//! A rank's load scales its routed experts' GEMMs, their saved activations and the
//! permutation of their token copies. The dispatch and combine all-to-alls end when their
//! busiest member has received its copies, so every member's call carries the busiest
//! rank's volume (the group's *pace*): the hottest expert rank paces its whole group, and
//! through it the step.

use crate::plan::{GroupKind, Plan, RankId};
use crate::rng::Rng;
use crate::scenario::{MoeRouting, Scenario};

/// One rank's routed-copy load and its expert-parallel group's pace, both relative to the
/// balanced mean share.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExpertLoad {
    /// Copies this rank's experts process.
    pub rank: f64,
    /// Copies the group's busiest rank receives: what each all-to-all call carries.
    pub pace: f64,
}

impl ExpertLoad {
    pub const BALANCED: ExpertLoad = ExpertLoad {
        rank: 1.0,
        pace: 1.0,
    };

    /// A key that orders and compares loads exactly (for caches).
    pub fn key(&self) -> (u64, u64) {
        (self.rank.to_bits(), self.pace.to_bits())
    }
}

/// The load of each expert-parallel index `0..ep` (mean 1 before capacity), as the routing
/// sets it. A scenario without experts, or with `ep = 1`, has one index of load 1 (capacity
/// still pads it).
pub fn ep_loads(s: &Scenario) -> Vec<f64> {
    let ep = s.parallel.ep.max(1) as usize;
    let experts = s
        .model
        .moe
        .as_ref()
        .map_or(1, |m| m.experts.max(1) as usize);
    let uniform = |x: f64| vec![x; ep];
    match &s.training.moe_routing {
        MoeRouting::Balanced | MoeRouting::ForceBalanced => uniform(1.0),
        MoeRouting::Capacity { factor } => uniform(*factor),
        MoeRouting::Imbalance { max_load } if ep > 1 => {
            let rest = (ep as f64 - max_load).max(0.0) / (ep as f64 - 1.0);
            let mut v = uniform(rest);
            v[0] = *max_load;
            v
        }
        MoeRouting::Imbalance { .. } => uniform(1.0),
        MoeRouting::ExpertLoads(loads) => per_rank(loads, ep),
        MoeRouting::ExpertLoadCv { cv } => per_rank(&lognormal_loads(*cv, experts, s.run.seed), ep),
    }
}

/// Expert loads summed over each rank's contiguous block of `len / ep` experts, normalised to
/// mean 1 over the ranks. Loads that sum to zero (refused by validation) read as balanced.
fn per_rank(expert_loads: &[f64], ep: usize) -> Vec<f64> {
    let per = expert_loads.len().div_ceil(ep).max(1);
    let mut v: Vec<f64> = (0..ep)
        .map(|e| expert_loads.iter().skip(e * per).take(per).sum())
        .collect();
    let total: f64 = v.iter().sum();
    if !(total.is_finite() && total > 0.0) {
        return vec![1.0; ep];
    }
    let mean = total / ep as f64;
    for x in &mut v {
        *x /= mean;
    }
    v
}

/// `experts` loads from a lognormal of mean 1 and coefficient of variation `cv`, drawn from
/// the run's seed (stream 0x726f757465, "route").
fn lognormal_loads(cv: f64, experts: usize, seed: u64) -> Vec<f64> {
    let sigma2 = (1.0 + cv * cv).ln();
    let (mu, sigma) = (-sigma2 / 2.0, sigma2.sqrt());
    let mut rng = Rng::new(seed, 0x72_6f75_7465);
    (0..experts)
        .map(|_| (mu + sigma * rng.standard_normal()).exp())
        .collect()
}

/// The distinct loads of a plan's ranks, and which one each rank has. Class 0 is the load of
/// expert-parallel index 0, so `programs[stage]` of a generated schedule is the program of
/// the stage's representative rank (the one every other coordinate zero).
#[derive(Clone, Debug, PartialEq)]
pub struct LoadClasses {
    /// Each class's load (`pace` the same for all).
    pub loads: Vec<ExpertLoad>,
    /// The class of each expert-parallel index.
    class_of_index: Vec<u32>,
}

impl LoadClasses {
    pub fn new(s: &Scenario) -> LoadClasses {
        let per_index = ep_loads(s);
        let pace = per_index.iter().copied().fold(0.0, f64::max);
        let mut loads: Vec<ExpertLoad> = Vec::new();
        let class_of_index = per_index
            .iter()
            .map(|&rank| {
                let load = ExpertLoad { rank, pace };
                let found = loads.iter().position(|l| l.key() == load.key());
                found.unwrap_or_else(|| {
                    loads.push(load);
                    loads.len() - 1
                }) as u32
            })
            .collect();
        LoadClasses {
            loads,
            class_of_index,
        }
    }

    pub fn len(&self) -> usize {
        self.loads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.loads.is_empty()
    }

    /// The class of `rank`: its position in its expert-parallel group picks the load.
    pub fn class_of(&self, plan: &Plan, rank: RankId) -> u32 {
        if self.loads.len() <= 1 {
            return 0;
        }
        let g = plan.group(plan.group_of(rank, GroupKind::Ep));
        let index = g.members.iter().position(|&m| m == rank).unwrap_or(0);
        self.class_of_index.get(index).copied().unwrap_or(0)
    }

    /// The load of the busiest class: what one rank's work is sized by when a single answer
    /// is asked for (estimates, the per-layer fit).
    pub fn busiest(&self) -> ExpertLoad {
        self.loads
            .iter()
            .copied()
            .max_by(|a, b| a.rank.total_cmp(&b.rank))
            .unwrap_or(ExpertLoad::BALANCED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Moe;

    fn scenario(ep: u32, experts: u32, routing: MoeRouting) -> Scenario {
        let mut s = crate::testing::small_scenario(1, 1, ep, 1);
        s.model.moe = Some(Moe::uniform(experts, 2, 1, 512));
        s.parallel.ep = ep;
        s.training.moe_routing = routing;
        s
    }

    #[test]
    fn an_imbalance_loads_the_first_rank_and_spreads_the_rest() {
        let v = ep_loads(&scenario(4, 8, MoeRouting::Imbalance { max_load: 1.5 }));
        assert_eq!(v, vec![1.5, 2.5 / 3.0, 2.5 / 3.0, 2.5 / 3.0]);
        let c = LoadClasses::new(&scenario(4, 8, MoeRouting::Imbalance { max_load: 1.5 }));
        assert_eq!(c.len(), 2);
        assert_eq!(
            c.busiest(),
            ExpertLoad {
                rank: 1.5,
                pace: 1.5
            }
        );
        assert_eq!(c.loads[1].pace, 1.5);
    }

    #[test]
    fn balanced_and_capacity_routing_give_one_class() {
        for (routing, load) in [
            (MoeRouting::Balanced, 1.0),
            (MoeRouting::ForceBalanced, 1.0),
            (MoeRouting::Capacity { factor: 1.25 }, 1.25),
        ] {
            let c = LoadClasses::new(&scenario(4, 8, routing));
            assert_eq!(
                c.loads,
                vec![ExpertLoad {
                    rank: load,
                    pace: load
                }]
            );
        }
    }

    #[test]
    fn expert_loads_sum_over_contiguous_blocks() {
        let v = per_rank(&[4.0, 0.0, 1.0, 1.0, 1.0, 1.0], 3);
        assert_eq!(v, vec![1.5, 0.75, 0.75]);
        // Nothing routed reads as balanced (validation refuses it).
        assert_eq!(per_rank(&[0.0, 0.0], 2), vec![1.0, 1.0]);
    }

    #[test]
    fn the_seeded_spread_has_mean_one_and_the_asked_variation() {
        let loads = lognormal_loads(0.3, 20_000, 7);
        let n = loads.len() as f64;
        let mean = loads.iter().sum::<f64>() / n;
        let var = loads.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        assert!((mean - 1.0).abs() < 0.01, "mean {mean}");
        assert!(
            (var.sqrt() / mean - 0.3).abs() < 0.01,
            "cv {}",
            var.sqrt() / mean
        );
        assert_eq!(loads, lognormal_loads(0.3, 20_000, 7));
        assert_ne!(loads, lognormal_loads(0.3, 20_000, 8));
    }
}
