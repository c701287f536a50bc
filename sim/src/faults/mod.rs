//! Long-horizon reliability: what failures, stragglers and checkpoints cost a whole training
//! run. The step time comes from one step simulation (predicted once); the horizon is then
//! simulated event by event (failures, checkpoint commits, recoveries) over many seeded Monte
//! Carlo trials in parallel, and summarised as goodput and ETTR with confidence intervals,
//! lost time by cause, and the best checkpoint interval of a sweep. See docs/reference/faults.md.

mod report;
pub mod time_to_train;
pub mod timeline;

pub use report::{Estimate, HorizonReport, IntervalPoint};
pub use timeline::Outcome;

use crate::plan::Plan;
use crate::rng::Rng;
use crate::scenario::{
    seconds_to_ns, CheckpointInterval, CheckpointMode, Distribution, FaultConfig, RestartPolicy,
    Scenario,
};
use rayon::prelude::*;

const NS_PER_HOUR: f64 = 3_600e9;
const NS_PER_DAY: f64 = 86_400e9;

/// Why a job stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    Gpu = 0,
    Node = 1,
    Link = 2,
    Scheduled = 3,
}

impl Cause {
    pub const ALL: [Cause; 4] = [Cause::Gpu, Cause::Node, Cause::Link, Cause::Scheduled];

    pub fn name(self) -> &'static str {
        match self {
            Cause::Gpu => "gpu",
            Cause::Node => "node",
            Cause::Link => "link",
            Cause::Scheduled => "scheduled",
        }
    }
}

/// A source of temporary slowdown (stragglers, link degradation).
#[derive(Clone, Debug, PartialEq)]
pub struct SlowSource {
    /// Job-level arrival rate.
    pub rate_per_ns: f64,
    /// Step time multiplier while active.
    pub factor: f64,
    pub duration_ns: u64,
}

/// Everything a trial needs, in nanoseconds: [`Model::new`] derives it from a scenario's
/// `[faults]` and its predicted step; tests may build one directly.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    pub horizon_ns: u64,
    pub step_time_ns: u64,
    /// Job-level failure rates by cause (gpu, node, link), per nanosecond.
    pub rates_per_ns: [f64; 3],
    pub distribution: Distribution,
    pub scheduled_ns: Vec<u64>,
    /// Work between two checkpoints.
    pub interval_ns: u64,
    /// Stall per checkpoint.
    pub blocking_ns: u64,
    /// From the end of a cycle's work to its checkpoint being durable.
    pub commit_delay_ns: u64,
    pub detection_ns: u64,
    /// Restart time (spare or replacement wait, process restart, communicator init).
    pub restart_ns: u64,
    pub reload_ns: u64,
    /// Elastic shrink: step-time factor and how long until the replacement rejoins.
    pub elastic: Option<(f64, u64)>,
    pub slowdowns: Vec<SlowSource>,
}

/// The job facts a [`Model`] needs from the step simulation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct JobFacts {
    pub step_time_ns: u64,
    pub gpus: u32,
    pub gpus_per_node: u32,
    pub dp: u32,
    /// All ranks' weights and optimizer state.
    pub checkpoint_bytes: u64,
    /// The largest one rank holds.
    pub max_rank_checkpoint_bytes: u64,
    pub exposed_comm_fraction: f64,
}

impl JobFacts {
    /// Checkpoint sizes from `workload::state_bytes` summed over every rank of every stage,
    /// counting state that data-parallel replicas hold alike once (weights unless ZeRO-3 /
    /// FSDP shards them, optimizer state unless ZeRO >= 1 does): only one replica writes it.
    pub fn from_scenario(s: &Scenario, plan: &Plan, step_time_ns: u64, comm: f64) -> JobFacts {
        let ranks_per_stage = u64::from(plan.world / plan.pp().max(1));
        let dp = u64::from(plan.sizes.dp.max(1));
        let p = &s.parallel;
        let weights_copies = if p.zero >= 3 || p.fsdp { 1 } else { dp };
        let optimizer_copies = if p.zero >= 1 || p.fsdp { 1 } else { dp };
        let mut total = 0u64;
        let mut max_rank = 0u64;
        for stage in 0..plan.pp() {
            let b = crate::workload::state_bytes(s, plan, stage);
            let rank = b
                .weights_bytes
                .saturating_add(b.optimizer_bytes)
                .saturating_add(b.host_bytes);
            max_rank = max_rank.max(rank);
            let unique = (b.weights_bytes / weights_copies)
                .saturating_add(b.optimizer_bytes.saturating_add(b.host_bytes) / optimizer_copies);
            total = total.saturating_add(unique.saturating_mul(ranks_per_stage));
        }
        JobFacts {
            step_time_ns,
            gpus: s.cluster.gpus,
            gpus_per_node: s.cluster.gpus_per_node,
            dp: plan.sizes.dp,
            checkpoint_bytes: total,
            max_rank_checkpoint_bytes: max_rank,
            exposed_comm_fraction: comm,
        }
    }

    pub fn nodes(&self) -> u32 {
        self.gpus.div_ceil(self.gpus_per_node.max(1))
    }
}

fn time_ns(bytes: u64, bytes_per_s: f64) -> u64 {
    seconds_to_ns(bytes as f64 / bytes_per_s)
}

impl Model {
    pub fn new(c: &FaultConfig, job: &JobFacts) -> Model {
        let gpus = f64::from(job.gpus);
        let nodes = f64::from(job.nodes());
        let bytes = c.checkpoint_bytes.unwrap_or(job.checkpoint_bytes);
        let per_node_bytes = bytes / u64::from(job.nodes().max(1));
        let step = job.step_time_ns.max(1);
        let interval_ns = match c.checkpoint_interval {
            CheckpointInterval::Steps(n) => step.saturating_mul(n.max(1)),
            CheckpointInterval::Minutes(m) => {
                let steps = (m * 60e9 / step as f64).round().max(1.0);
                step.saturating_mul(steps as u64)
            }
        };
        let write_ns = if c.in_memory_replicas {
            time_ns(per_node_bytes, c.peer_bytes_per_s)
        } else {
            time_ns(bytes, c.storage_write_bytes_per_s)
        };
        let reload_ns = if c.in_memory_replicas {
            time_ns(per_node_bytes, c.peer_bytes_per_s)
        } else {
            time_ns(bytes, c.storage_read_bytes_per_s)
        };
        let (blocking_ns, commit_delay_ns) = match c.checkpoint_mode {
            CheckpointMode::Sync => (write_ns, write_ns),
            CheckpointMode::Async => {
                let snap = time_ns(job.max_rank_checkpoint_bytes, c.snapshot_bytes_per_s);
                // The next snapshot waits for the previous write.
                let wait = write_ns.saturating_sub(interval_ns);
                (snap.saturating_add(wait), snap.saturating_add(write_ns))
            }
        };
        let wait_ns = match c.restart {
            RestartPolicy::HotSpare => c.spare_swap_ns,
            RestartPolicy::WaitReplacement => c.replacement_wait_ns,
            RestartPolicy::Elastic => 0,
        };
        let elastic = (c.restart == RestartPolicy::Elastic && job.dp > 1).then(|| {
            (
                f64::from(job.dp) / f64::from(job.dp - 1),
                c.replacement_wait_ns,
            )
        });
        let link_factor = 1.0
            + job.exposed_comm_fraction.clamp(0.0, 1.0)
                * (1.0 / c.link_degradation_bandwidth_fraction.max(1e-6) - 1.0);
        Model {
            horizon_ns: c.horizon_ns,
            step_time_ns: step,
            rates_per_ns: [
                c.gpu_failures_per_gpu_hour * gpus / NS_PER_HOUR,
                c.node_failures_per_node_day * nodes / NS_PER_DAY,
                c.link_failures_per_link_day * nodes / NS_PER_DAY,
            ],
            distribution: c.distribution,
            scheduled_ns: c.scheduled_ns.clone(),
            interval_ns,
            blocking_ns,
            commit_delay_ns,
            detection_ns: c.detection_timeout_ns,
            restart_ns: wait_ns
                .saturating_add(c.process_restart_ns)
                .saturating_add(c.comm_init_ns),
            reload_ns,
            elastic,
            slowdowns: vec![
                SlowSource {
                    rate_per_ns: c.straggler_per_gpu_hour * gpus / NS_PER_HOUR,
                    factor: c.straggler_slowdown,
                    duration_ns: c.straggler_duration_ns,
                },
                SlowSource {
                    rate_per_ns: c.link_degradation_per_link_day * nodes / NS_PER_DAY,
                    factor: link_factor,
                    duration_ns: c.link_degradation_duration_ns,
                },
            ],
        }
    }

    /// Total job-level failure rate per nanosecond (scheduled faults excluded).
    pub fn failure_rate_per_ns(&self) -> f64 {
        self.rates_per_ns.iter().sum()
    }

    /// Mean time between random failures (infinite when there are none).
    pub fn mtbf_ns(&self) -> f64 {
        1.0 / self.failure_rate_per_ns()
    }

    /// The time of the next random failure after `now` (`u64::MAX` when there are none).
    pub(crate) fn draw_failure(&self, rng: &mut Rng, now: u64) -> u64 {
        let rate = self.failure_rate_per_ns();
        if !(rate > 0.0 && rate.is_finite()) {
            return u64::MAX;
        }
        let gap = match self.distribution {
            Distribution::Exponential => rng.exponential(1.0 / rate),
            Distribution::Weibull { shape } => rng.weibull(shape, 1.0 / rate),
        };
        let gap = if gap.is_finite() { gap.max(1.0) } else { 1e19 };
        now.saturating_add(gap.min(1e19) as u64)
    }

    pub(crate) fn draw_cause(&self, rng: &mut Rng) -> Cause {
        let total = self.failure_rate_per_ns();
        let mut u = rng.uniform_open() * total;
        for (i, r) in self.rates_per_ns.iter().enumerate() {
            if u <= *r {
                return [Cause::Gpu, Cause::Node, Cause::Link][i];
            }
            u -= r;
        }
        Cause::Node
    }

    /// Detection, restart and reload after a failure.
    pub(crate) fn recovery(&self, _cause: Cause) -> [u64; 3] {
        [self.detection_ns, self.restart_ns, self.reload_ns]
    }

    /// The same model with another checkpoint interval (the async write wait recomputed).
    pub fn with_interval(&self, interval_ns: u64) -> Model {
        let mut m = self.clone();
        m.interval_ns = interval_ns.max(1);
        m
    }
}

/// Runs `seeds` trials (trial i seeded from `seed` and i) in parallel; `progress` is called
/// with the number of finished trials. The result is in trial order.
pub fn monte_carlo(
    model: &Model,
    seed: u64,
    seeds: u32,
    progress: Option<&(dyn Fn(usize) + Sync)>,
) -> Vec<Outcome> {
    let done = std::sync::atomic::AtomicUsize::new(0);
    (0..u64::from(seeds))
        .into_par_iter()
        .map(|i| {
            let out = timeline::run(model, &mut Rng::new(seed, i));
            if let Some(p) = progress {
                p(done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1);
            }
            out
        })
        .collect()
}

/// Mean goodput of each checkpoint interval over the same seeds (common random numbers, so
/// the curve is smooth and its minimum meaningful).
pub fn sweep_intervals(
    model: &Model,
    seed: u64,
    seeds: u32,
    intervals_ns: &[u64],
) -> Vec<IntervalPoint> {
    intervals_ns
        .iter()
        .map(|&iv| {
            let m = model.with_interval(iv);
            let outs = monte_carlo(&m, seed, seeds, None);
            let g = Estimate::of(outs.iter().map(|o| goodput(o, m.horizon_ns)));
            let work: u64 = outs.iter().map(|o| o.work_ns).sum();
            let wall = m.horizon_ns.saturating_mul(outs.len() as u64);
            IntervalPoint {
                interval_ns: iv,
                interval_steps: iv / m.step_time_ns.max(1),
                goodput: g,
                overhead_fraction: if work > 0 {
                    wall as f64 / work as f64 - 1.0
                } else {
                    f64::INFINITY
                },
            }
        })
        .collect()
}

/// Candidate intervals for the best-interval search: whole steps, geometric from one step to
/// a tenth of the horizon, `points` of them (deduplicated).
pub fn candidate_intervals(model: &Model, points: u32) -> Vec<u64> {
    let step = model.step_time_ns.max(1);
    let max_steps = (model.horizon_ns / 10 / step).max(1) as f64;
    let mut out: Vec<u64> = (0..points.max(2))
        .map(|i| {
            let x = max_steps.powf(f64::from(i) / f64::from(points.max(2) - 1));
            step.saturating_mul(x.round().max(1.0) as u64)
        })
        .collect();
    out.dedup();
    out
}

/// Committed full-speed work over wall time.
pub fn goodput(o: &Outcome, horizon_ns: u64) -> f64 {
    o.work_ns as f64 / horizon_ns.max(1) as f64
}

/// Wall time spent on kept work over wall time.
pub fn ettr(o: &Outcome, horizon_ns: u64) -> f64 {
    o.useful_wall_ns as f64 / horizon_ns.max(1) as f64
}

/// Young's interval sqrt(2 δ M), in the unit of its inputs.
pub fn young_interval(delta: f64, mtbf: f64) -> f64 {
    (2.0 * delta * mtbf).sqrt()
}

/// Daly's higher-order optimum (Eq. 37), in the unit of its inputs.
pub fn daly_interval(delta: f64, mtbf: f64) -> f64 {
    if delta < 2.0 * mtbf {
        let x = delta / (2.0 * mtbf);
        (2.0 * delta * mtbf).sqrt() * (1.0 + x.sqrt() / 3.0 + x / 9.0) - delta
    } else {
        mtbf
    }
}

/// The first-order overhead fraction δ/τ + τ/(2M) + (R + q)/M.
pub fn first_order_overhead(delta: f64, tau: f64, mtbf: f64, restart: f64) -> f64 {
    delta / tau + tau / (2.0 * mtbf) + restart / mtbf
}

/// Why a horizon cannot be simulated.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FaultsError {
    #[error(
        "about {expected:.3e} failures and slowdowns per trial expected (at most {max:.0e}): \
         the rates are too high for this job and horizon"
    )]
    TooManyEvents { expected: f64, max: f64 },
}

/// Expected random events (failures, slowdown windows) per trial that a run may hold.
pub const MAX_EVENTS_PER_TRIAL: f64 = 1e6;

/// Simulates the horizon for a planned scenario whose step was predicted: the Monte Carlo
/// summary plus a sweep for the best checkpoint interval.
pub fn simulate_horizon(
    config: &FaultConfig,
    job: &JobFacts,
    progress: Option<&(dyn Fn(usize) + Sync)>,
) -> Result<HorizonReport, FaultsError> {
    simulate_horizon_trials(config, job, progress).map(|(report, _)| report)
}

/// [`simulate_horizon`], also returning each Monte Carlo trial's outcome (in seed order).
pub fn simulate_horizon_trials(
    config: &FaultConfig,
    job: &JobFacts,
    progress: Option<&(dyn Fn(usize) + Sync)>,
) -> Result<(HorizonReport, Vec<Outcome>), FaultsError> {
    let model = Model::new(config, job);
    let rate =
        model.failure_rate_per_ns() + model.slowdowns.iter().map(|s| s.rate_per_ns).sum::<f64>();
    let expected = rate * model.horizon_ns as f64;
    if expected.is_nan() || expected > MAX_EVENTS_PER_TRIAL {
        return Err(FaultsError::TooManyEvents {
            expected,
            max: MAX_EVENTS_PER_TRIAL,
        });
    }
    let outs = monte_carlo(&model, config.seed, config.seeds, progress);
    let sweep_seeds = config.seeds.clamp(1, 200);
    let sweep = sweep_intervals(
        &model,
        config.seed,
        sweep_seeds,
        &candidate_intervals(&model, 24),
    );
    Ok((
        HorizonReport::build(config, job, &model, &outs, sweep),
        outs,
    ))
}
