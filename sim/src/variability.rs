//! The step under `[variability]`: a real cluster's GPUs and links are not all the profile's
//! one figure, and ops do not all take their priced time. Each sample draws a cluster (every
//! GPU's compute speed, every slow node, every GPU's link bandwidth) and simulates every rank
//! of one step on it with per-op noise, so synchronisation turns the spread into waiting as it
//! does on the machine. The samples' step times give P50, P95 and P99, and the ranks whose
//! compute took longest in the slowest samples are the ones that paced them.
//!
//! Everything is drawn from the scenario's seed: sample `i` uses its own generator
//! ([`Rng::new`]`(seed, i)`), so the same input gives the same samples in any thread order.
//! It sits above the engine, as the profile-uncertainty interval does.

use crate::cost::{CostModel, StateAging};
use crate::engine::{simulate_on, OpJitter, SimError, SimOptions, SimResult};
use crate::host_model::{Interruptions, Residency, Wake};
use crate::plan::{Group, Plan};
use crate::rng::Rng;
use crate::scenario::VariabilityConfig;
use crate::schedule::{CollectiveKind, ComputeOp, MemCategory};
use crate::Staged;
use rayon::prelude::*;
use serde::Serialize;
use std::sync::Arc;

/// What a sample varies, per rank.
#[derive(Clone, Debug, PartialEq)]
pub struct Draw {
    /// Factor on each rank's compute time: its GPU's `1/speed`, times `slow_node_factor` on a
    /// slow node.
    pub compute_factors: Vec<f64>,
    /// Factor on each rank's link bandwidth (its NVLink port and NIC).
    pub link_factors: Vec<f64>,
}

/// `(mu, sigma)` of the lognormal of mean 1 and coefficient of variation `cv`.
fn lognormal(cv: f64) -> (f64, f64) {
    let sigma2 = (1.0 + cv * cv).ln();
    (-sigma2 / 2.0, sigma2.sqrt())
}

impl Draw {
    /// The cluster of sample `index`: drawn for `plan`'s ranks from `config` with the run's
    /// `seed`. Nodes are drawn first, then each rank's speed, then each rank's links.
    pub fn new(config: &VariabilityConfig, plan: &Plan, seed: u64, index: u64) -> Draw {
        let world = plan.world as usize;
        let mut rng = Rng::new(seed, index);
        let per_node = plan.gpus_per_node.max(1);
        let nodes = plan.world.div_ceil(per_node) as usize;
        let slow: Vec<bool> = (0..nodes)
            .map(|_| {
                let u = rng.uniform_open();
                config.slow_node_factor > 1.0 && u <= config.slow_node_fraction
            })
            .collect();
        let (mu, sigma) = lognormal(config.gpu_speed_cv);
        let compute_factors = (0..world)
            .map(|r| {
                let speed = match &config.speed_samples {
                    Some(s) if !s.speeds.is_empty() => {
                        let i = (rng.next_u64() % s.speeds.len() as u64) as usize;
                        s.speeds.get(i).copied().unwrap_or(1.0)
                    }
                    _ if config.gpu_speed_cv > 0.0 => (mu + sigma * rng.standard_normal()).exp(),
                    _ => 1.0,
                };
                let node = plan.node_of(r as u32) as usize;
                let slow_factor = if slow.get(node).copied().unwrap_or(false) {
                    config.slow_node_factor
                } else {
                    1.0
                };
                slow_factor / speed
            })
            .collect();
        let (mu, sigma) = lognormal(config.link_bandwidth_cv);
        let link_factors = (0..world)
            .map(|_| {
                if config.link_bandwidth_cv > 0.0 {
                    (mu + sigma * rng.standard_normal()).exp()
                } else {
                    1.0
                }
            })
            .collect();
        Draw {
            compute_factors,
            link_factors,
        }
    }

    /// The slowest link factor among `ranks` (1 for none).
    fn slowest_link(&self, ranks: impl Iterator<Item = u32>) -> f64 {
        let m = ranks
            .filter_map(|r| self.link_factors.get(r as usize).copied())
            .fold(f64::INFINITY, f64::min);
        if m.is_finite() && m > 0.0 {
            m
        } else {
            1.0
        }
    }
}

/// A cost model whose transfers run at the bandwidth [`Draw`] gives their slowest member: a
/// collective's or transfer's whole priced time is divided by that member's link factor
/// (a ring runs at its slowest link's pace). Everything else is the inner model's; compute
/// factors are the engine's ([`SimOptions::compute_factors`]), so compute prices stay shared.
pub struct Varied<'a> {
    pub inner: &'a dyn CostModel,
    pub draw: &'a Draw,
}

fn divided_ns(ns: u64, factor: f64) -> u64 {
    let t = (ns as f64 / factor).round();
    if t.is_finite() && t >= 0.0 && t < u64::MAX as f64 {
        t as u64
    } else {
        ns
    }
}

impl CostModel for Varied<'_> {
    fn compute_ns(&self, rank: u32, op: &ComputeOp) -> u64 {
        self.inner.compute_ns(rank, op)
    }
    fn collective_ns(&self, kind: CollectiveKind, group: &Group, bytes: u64, calls: u32) -> u64 {
        let ns = self.inner.collective_ns(kind, group, bytes, calls);
        divided_ns(ns, self.draw.slowest_link(group.members.iter().copied()))
    }
    fn p2p_ns(&self, plan: &Plan, src: u32, dst: u32, bytes: u64) -> u64 {
        let ns = self.inner.p2p_ns(plan, src, dst, bytes);
        divided_ns(ns, self.draw.slowest_link([src, dst].into_iter()))
    }
    fn checkpoint_ns(&self, bytes: u64) -> u64 {
        self.inner.checkpoint_ns(bytes)
    }
    fn host_ns(&self, work: crate::cost::HostWork) -> u64 {
        self.inner.host_ns(work)
    }
    fn alloc_ns(&self, category: MemCategory, bytes: u64) -> u64 {
        self.inner.alloc_ns(category, bytes)
    }
    fn free_ns(&self) -> u64 {
        self.inner.free_ns()
    }
    fn interruptions(&self) -> Option<Interruptions> {
        self.inner.interruptions()
    }
    fn wake(&self) -> Option<Wake> {
        self.inner.wake()
    }
    fn handoff_ns(&self) -> u64 {
        self.inner.handoff_ns()
    }
    fn compute_weight(&self) -> f64 {
        self.inner.compute_weight()
    }
    fn p2p_cpu_share(&self) -> f64 {
        self.inner.p2p_cpu_share()
    }
    fn memory_cores(&self) -> Option<f64> {
        self.inner.memory_cores()
    }
    fn state_aging(&self, op: &ComputeOp) -> Option<StateAging> {
        self.inner.state_aging(op)
    }
    fn models_state_aging(&self) -> bool {
        self.inner.models_state_aging()
    }
    fn models_operand_residency(&self) -> bool {
        self.inner.models_operand_residency()
    }
    fn operand_residency(&self, op: &ComputeOp) -> Option<Residency> {
        self.inner.operand_residency(op)
    }
    fn compute_is_rank_invariant(&self) -> bool {
        self.inner.compute_is_rank_invariant()
    }
    fn shared_cores(&self) -> Option<u32> {
        self.inner.shared_cores()
    }
    fn overlap_compute_slowdown(&self) -> f64 {
        self.inner.overlap_compute_slowdown()
    }
}

/// Why the samples could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum VariabilityError {
    #[error(
        "[variability] link_bandwidth_cv is applied to transfers priced per call; with \
         [cluster.topology] model = \"flow\" the flow network times them, which does not take \
         per-link factors yet: set link_bandwidth_cv = 0 or use the tier model"
    )]
    LinksUnderFlows,
    #[error("sample {sample}")]
    Sample {
        sample: u32,
        #[source]
        source: SimError,
    },
}

/// One sample's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Sample {
    pub step_time_ns: u64,
    /// The rank whose compute took longest (most compute-busy time).
    pub paced_by: u32,
}

/// A quantity's spread over the samples.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Spread<T> {
    pub p50: T,
    pub p95: T,
    pub p99: T,
}

/// How often a rank paced one of the slowest samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Pacer {
    pub rank: u32,
    pub samples: u32,
}

/// The step under variability: its spread, and who paced the slow samples.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VariabilityReport {
    pub samples: u32,
    /// The step without variation (the prediction), for comparison.
    pub deterministic_step_time_ns: u64,
    /// Nearest-rank percentiles of the samples' step times.
    pub step_time_ns: Spread<u64>,
    pub mean_step_time_ns: u64,
    pub min_step_time_ns: u64,
    pub max_step_time_ns: u64,
    /// Ranks that paced the samples at or above the P95 step time, most often first.
    pub paced_slowest: Vec<Pacer>,
    /// Every sample, in sample order.
    pub each: Vec<Sample>,
}

/// The value at nearest-rank percentile `p` (0-100) of `sorted` (ascending, not empty).
pub fn nearest_rank(sorted: &[u64], p: f64) -> u64 {
    let n = sorted.len();
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    sorted
        .get(rank.clamp(1, n.max(1)) - 1)
        .copied()
        .unwrap_or(0)
}

impl VariabilityReport {
    fn new(deterministic_step_time_ns: u64, each: Vec<Sample>) -> VariabilityReport {
        let mut sorted: Vec<u64> = each.iter().map(|s| s.step_time_ns).collect();
        sorted.sort_unstable();
        let p95 = nearest_rank(&sorted, 95.0);
        let mut counts: Vec<Pacer> = Vec::new();
        for s in each.iter().filter(|s| s.step_time_ns >= p95) {
            match counts.iter_mut().find(|p| p.rank == s.paced_by) {
                Some(p) => p.samples += 1,
                None => counts.push(Pacer {
                    rank: s.paced_by,
                    samples: 1,
                }),
            }
        }
        counts.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.rank.cmp(&b.rank)));
        let n = sorted.len().max(1) as u128;
        let mean = (sorted.iter().map(|&t| u128::from(t)).sum::<u128>() / n) as u64;
        VariabilityReport {
            samples: each.len() as u32,
            deterministic_step_time_ns,
            step_time_ns: Spread {
                p50: nearest_rank(&sorted, 50.0),
                p95,
                p99: nearest_rank(&sorted, 99.0),
            },
            mean_step_time_ns: mean,
            min_step_time_ns: sorted.first().copied().unwrap_or(0),
            max_step_time_ns: sorted.last().copied().unwrap_or(0),
            paced_slowest: counts,
            each,
        }
    }
}

/// The engine options of sample `index`: every rank simulated, the draw's compute factors,
/// and per-op noise seeded apart from the draw.
pub fn sample_options(
    config: &VariabilityConfig,
    draw: &Draw,
    seed: u64,
    index: u64,
    base: &SimOptions,
) -> SimOptions {
    let varies_compute = draw.compute_factors.iter().any(|&f| f != 1.0);
    SimOptions {
        trace: false,
        collapse: false,
        // A sample reports times only.
        memory: false,
        compute_factors: varies_compute.then(|| Arc::from(draw.compute_factors.as_slice())),
        op_jitter: (config.step_jitter_cv > 0.0).then_some(OpJitter {
            seed: (seed ^ 0x6a69_7474_6572).wrapping_add(index.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            cv: config.step_jitter_cv,
        }),
        ..base.clone()
    }
}

/// Simulates `samples` steps of `staged` under `config` (seeded by `seed`), in parallel;
/// `progress` is called with the number of finished samples, from any thread.
/// `deterministic_step_time_ns` is the prediction without variation, reported beside.
pub fn sample_steps(
    staged: &Staged,
    config: &VariabilityConfig,
    samples: u32,
    seed: u64,
    base: &SimOptions,
    deterministic_step_time_ns: u64,
    progress: Option<&(dyn Fn(usize) + Sync)>,
) -> Result<VariabilityReport, VariabilityError> {
    if staged.network.is_some() && config.link_bandwidth_cv > 0.0 {
        return Err(VariabilityError::LinksUnderFlows);
    }
    let done = std::sync::atomic::AtomicUsize::new(0);
    let each = (0..samples)
        .into_par_iter()
        .map(|i| {
            let draw = Draw::new(config, &staged.plan, seed, u64::from(i));
            let cost = Varied {
                inner: &staged.cost,
                draw: &draw,
            };
            let opts = sample_options(config, &draw, seed, u64::from(i), base);
            let r = simulate_on(
                &staged.plan,
                &staged.schedule,
                &cost,
                staged.network.as_ref(),
                &opts,
            )
            .map_err(|source| VariabilityError::Sample { sample: i, source })?;
            if let Some(p) = progress {
                p(done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1);
            }
            Ok(sample_of(&r))
        })
        .collect::<Result<Vec<Sample>, VariabilityError>>()?;
    Ok(VariabilityReport::new(deterministic_step_time_ns, each))
}

fn sample_of(r: &SimResult) -> Sample {
    let paced_by = r
        .ranks
        .iter()
        .max_by(|a, b| {
            a.compute_busy_ns
                .cmp(&b.compute_busy_ns)
                .then(b.rank.cmp(&a.rank))
        })
        .map_or(0, |s| s.rank);
    Sample {
        step_time_ns: r.step_time_ns,
        paced_by,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::small_scenario;

    fn config() -> VariabilityConfig {
        VariabilityConfig {
            gpu_speed_cv: 0.0,
            link_bandwidth_cv: 0.0,
            step_jitter_cv: 0.0,
            slow_node_fraction: 0.0,
            slow_node_factor: 1.0,
            speed_samples: None,
        }
    }

    fn staged() -> Staged {
        Staged::new(&small_scenario(2, 2, 2, 4)).expect("small scenario stages")
    }

    fn full() -> SimOptions {
        SimOptions {
            collapse: false,
            ..SimOptions::default()
        }
    }

    fn deterministic(s: &Staged) -> u64 {
        s.simulate(&full()).expect("simulates").step_time_ns
    }

    /// Compute of one rank `factor` times longer, priced by the cost model itself: an
    /// implementation of a slow GPU independent of the engine's compute factors.
    struct SlowRank<'a> {
        inner: &'a dyn CostModel,
        rank: u32,
        factor: f64,
    }

    impl CostModel for SlowRank<'_> {
        fn compute_ns(&self, rank: u32, op: &ComputeOp) -> u64 {
            let ns = self.inner.compute_ns(rank, op);
            if rank == self.rank {
                (ns as f64 * self.factor).round() as u64
            } else {
                ns
            }
        }
        fn collective_ns(&self, kind: CollectiveKind, g: &Group, bytes: u64, calls: u32) -> u64 {
            self.inner.collective_ns(kind, g, bytes, calls)
        }
        fn p2p_ns(&self, plan: &Plan, src: u32, dst: u32, bytes: u64) -> u64 {
            self.inner.p2p_ns(plan, src, dst, bytes)
        }
        fn checkpoint_ns(&self, bytes: u64) -> u64 {
            self.inner.checkpoint_ns(bytes)
        }
        fn host_ns(&self, work: crate::cost::HostWork) -> u64 {
            self.inner.host_ns(work)
        }
    }

    #[test]
    fn without_variation_every_sample_is_the_deterministic_step() {
        let s = staged();
        let det = deterministic(&s);
        let r = sample_steps(&s, &config(), 8, 1, &full(), det, None).expect("samples");
        assert_eq!(r.samples, 8);
        assert!(r.each.iter().all(|x| x.step_time_ns == det), "{r:?}");
        assert_eq!(
            (r.step_time_ns.p50, r.step_time_ns.p95, r.step_time_ns.p99),
            (det, det, det)
        );
        assert_eq!((r.min_step_time_ns, r.max_step_time_ns), (det, det));
    }

    #[test]
    fn one_slow_gpu_gives_the_step_of_a_cost_model_that_slows_it() {
        let s = staged();
        for (rank, factor) in [(0u32, 1.5), (5, 2.0), (7, 1.1)] {
            let mut draw = Draw::new(&config(), &s.plan, 1, 0);
            draw.compute_factors[rank as usize] = factor;
            let opts = sample_options(&config(), &draw, 1, 0, &full());
            let cost = Varied {
                inner: &s.cost,
                draw: &draw,
            };
            let by_engine =
                simulate_on(&s.plan, &s.schedule, &cost, None, &opts).expect("simulates");
            let slow = SlowRank {
                inner: &s.cost,
                rank,
                factor,
            };
            let by_cost =
                simulate_on(&s.plan, &s.schedule, &slow, None, &full()).expect("simulates");
            assert_eq!(by_engine.step_time_ns, by_cost.step_time_ns, "rank {rank}");
            assert!(by_engine.step_time_ns > deterministic(&s));
            assert_eq!(sample_of(&by_engine).paced_by, rank);
        }
    }

    #[test]
    fn a_seed_gives_the_same_samples_and_another_seed_others() {
        let s = staged();
        let det = deterministic(&s);
        let c = VariabilityConfig {
            gpu_speed_cv: 0.05,
            link_bandwidth_cv: 0.1,
            step_jitter_cv: 0.05,
            slow_node_fraction: 0.25,
            slow_node_factor: 1.3,
            ..config()
        };
        let a = sample_steps(&s, &c, 16, 7, &full(), det, None).expect("samples");
        let b = sample_steps(&s, &c, 16, 7, &full(), det, None).expect("samples");
        assert_eq!(a, b);
        let other = sample_steps(&s, &c, 16, 8, &full(), det, None).expect("samples");
        assert_ne!(a.each, other.each);
        assert!(a.step_time_ns.p50 <= a.step_time_ns.p95);
        assert!(a.step_time_ns.p95 <= a.step_time_ns.p99);
        assert!(
            a.min_step_time_ns <= a.step_time_ns.p50 && a.step_time_ns.p99 <= a.max_step_time_ns
        );
        let paced: u32 = a.paced_slowest.iter().map(|p| p.samples).sum();
        let slow = a
            .each
            .iter()
            .filter(|x| x.step_time_ns >= a.step_time_ns.p95)
            .count();
        assert_eq!(paced as usize, slow);
    }

    /// Per-op noise of mean 1 leaves one rank's expected time unchanged, but every
    /// synchronisation waits for the slowest member: the step grows.
    #[test]
    fn op_noise_synchronised_across_ranks_lengthens_the_step() {
        let s = staged();
        let det = deterministic(&s);
        let c = VariabilityConfig {
            step_jitter_cv: 0.3,
            ..config()
        };
        let r = sample_steps(&s, &c, 32, 3, &full(), det, None).expect("samples");
        assert!(
            r.mean_step_time_ns > det,
            "{} vs {det}",
            r.mean_step_time_ns
        );
        assert!(r.step_time_ns.p95 > r.step_time_ns.p50 || r.max_step_time_ns > r.min_step_time_ns);
    }

    #[test]
    fn a_collective_runs_at_its_slowest_members_bandwidth() {
        let s = staged();
        let mut draw = Draw::new(&config(), &s.plan, 1, 0);
        let group = s
            .plan
            .group(s.plan.group_of(0, crate::plan::GroupKind::Tp))
            .clone();
        let slowest = group.members[1];
        draw.link_factors[slowest as usize] = 0.5;
        let cost = Varied {
            inner: &s.cost,
            draw: &draw,
        };
        let kind = CollectiveKind::AllReduce;
        let plain = s.cost.collective_ns(kind, &group, 1 << 24, 1);
        assert_eq!(cost.collective_ns(kind, &group, 1 << 24, 1), 2 * plain);
        let (a, b) = (group.members[0], group.members[1]);
        let p2p = s.cost.p2p_ns(&s.plan, a, b, 1 << 20);
        assert_eq!(cost.p2p_ns(&s.plan, a, b, 1 << 20), 2 * p2p);
    }

    #[test]
    fn draws_follow_the_config() {
        let s = staged();
        let all_slow = VariabilityConfig {
            slow_node_fraction: 1.0,
            slow_node_factor: 1.5,
            ..config()
        };
        let d = Draw::new(&all_slow, &s.plan, 1, 0);
        assert!(d.compute_factors.iter().all(|&f| f == 1.5), "{d:?}");
        let measured = VariabilityConfig {
            speed_samples: Some(crate::scenario::SpeedSamples {
                path: "speeds.txt".into(),
                speeds: vec![0.8, 1.0, 1.25],
            }),
            ..config()
        };
        let d = Draw::new(&measured, &s.plan, 1, 0);
        assert!(
            d.compute_factors
                .iter()
                .all(|&f| [1.25, 1.0, 0.8].contains(&f)),
            "{d:?}"
        );
        let spread = VariabilityConfig {
            gpu_speed_cv: 0.1,
            ..config()
        };
        let many: Vec<f64> = (0..200)
            .flat_map(|i| Draw::new(&spread, &s.plan, 1, i).compute_factors)
            .map(|f| 1.0 / f)
            .collect();
        let mean = many.iter().sum::<f64>() / many.len() as f64;
        let var = many.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / many.len() as f64;
        // 1,600 draws: the mean within 2% of 1 and the cv within 15% of 0.1.
        assert!((mean - 1.0).abs() < 0.02, "{mean}");
        assert!(
            (var.sqrt() / mean - 0.1).abs() < 0.015,
            "{}",
            var.sqrt() / mean
        );
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(nearest_rank(&v, 50.0), 50);
        assert_eq!(nearest_rank(&v, 95.0), 95);
        assert_eq!(nearest_rank(&v, 99.0), 99);
        assert_eq!(nearest_rank(&[7], 99.0), 7);
        assert_eq!(nearest_rank(&[1, 2, 3], 0.0), 1);
    }
}
