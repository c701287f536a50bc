//! Layout sweeps and search: simulate many variations of one scenario (in parallel, each in
//! collapsed-rank mode, which is exact and tests prove it), drop the layouts that do not fit
//! in memory, and rank the rest by an objective. Results are plain rows that serialize to
//! CSV and JSON, and shards of one sweep ([`Shard`]) merge back into the same result.

mod layouts;
mod sizes;
mod space;

pub use layouts::{merge_files, LayoutSet, SweepError, SweepPlan, SweepRequest};

pub use space::{
    candidates, derive_dp, parse_axis, product, search, Axis, AxisError, Candidate, SearchSpace,
    Shard, ShardError,
};

use crate::cost::Analytic;
use crate::engine::SimOptions;
use crate::plan::Plan;
pub use crate::profile::bundled::Pricing;
use crate::report::Summary;
use crate::scenario::Scenario;
use crate::setup::{ParsedSource, ScenarioSource};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::Arc;

/// What to rank by; named as `--objective` takes it (`tokens-per-s`, `mfu`, `step-time`,
/// `memory`) in text and JSON alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Objective {
    /// Highest tokens per second (default).
    #[serde(alias = "tokens_per_s")]
    TokensPerS,
    /// Highest model FLOPs utilisation.
    Mfu,
    /// Shortest step.
    #[serde(alias = "step_time")]
    StepTime,
    /// Lowest peak memory per GPU.
    Memory,
}

impl Objective {
    /// The name `--objective` takes and every output prints.
    pub fn name(self) -> &'static str {
        match self {
            Objective::TokensPerS => "tokens-per-s",
            Objective::Mfu => "mfu",
            Objective::StepTime => "step-time",
            Objective::Memory => "memory",
        }
    }
}

/// One simulated layout. In JSON the figures a layout that was not simulated lacks
/// (`step_time_s`, `tokens_per_s`, `mfu`, `bubble_fraction`, `exposed_comm_fraction`) are
/// null; here they are zero.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(into = "RowJson", from = "RowJson")]
pub struct SweepRow {
    /// Position in the sweep's full enumeration (stable across shards).
    pub index: usize,
    /// The `--set` overrides that make this layout from the base scenario, each string
    /// shared with the rows that have it too ([`interned`]).
    pub overrides: Vec<Arc<str>>,
    pub tp: u32,
    pub pp: u32,
    pub dp: u32,
    pub cp: u32,
    pub ep: u32,
    pub vpp: u32,
    pub micro_batch: u64,
    pub recompute: String,
    pub zero: u8,
    pub schedule: String,
    /// `bf16`, `fp8-delayed`, ...: the GEMMs' precision, with the FP8 recipe.
    pub precision: String,
    pub step_time_s: f64,
    pub tokens_per_s: f64,
    pub mfu: f64,
    pub peak_memory_bytes: u64,
    pub peak_memory_fraction: f64,
    pub bubble_fraction: f64,
    pub exposed_comm_fraction: f64,
    pub fits: bool,
    /// False when the layout was not simulated because a lower bound of its peak exceeds HBM:
    /// its model state alone, or (in a search) its state with the saved activations its
    /// pipeline holds at once ([`crate::schedule::Bounds`]); `peak_memory_bytes` is then that
    /// bound and the times are zero.
    pub simulated: bool,
}

/// [`SweepRow`] as JSON: null for what was not computed.
#[derive(Serialize, Deserialize)]
struct RowJson {
    index: usize,
    overrides: Vec<String>,
    tp: u32,
    pp: u32,
    dp: u32,
    cp: u32,
    ep: u32,
    vpp: u32,
    micro_batch: u64,
    recompute: String,
    zero: u8,
    schedule: String,
    #[serde(default)]
    precision: String,
    step_time_s: Option<f64>,
    tokens_per_s: Option<f64>,
    mfu: Option<f64>,
    peak_memory_bytes: u64,
    peak_memory_fraction: f64,
    bubble_fraction: Option<f64>,
    exposed_comm_fraction: Option<f64>,
    fits: bool,
    simulated: bool,
}

impl From<SweepRow> for RowJson {
    fn from(r: SweepRow) -> RowJson {
        let computed = |v: f64| r.simulated.then_some(v);
        RowJson {
            step_time_s: computed(r.step_time_s),
            tokens_per_s: computed(r.tokens_per_s),
            mfu: computed(r.mfu),
            bubble_fraction: computed(r.bubble_fraction),
            exposed_comm_fraction: computed(r.exposed_comm_fraction),
            index: r.index,
            overrides: r.override_strings(),
            tp: r.tp,
            pp: r.pp,
            dp: r.dp,
            cp: r.cp,
            ep: r.ep,
            vpp: r.vpp,
            micro_batch: r.micro_batch,
            recompute: r.recompute,
            zero: r.zero,
            schedule: r.schedule,
            precision: r.precision,
            peak_memory_bytes: r.peak_memory_bytes,
            peak_memory_fraction: r.peak_memory_fraction,
            fits: r.fits,
            simulated: r.simulated,
        }
    }
}

impl From<RowJson> for SweepRow {
    fn from(r: RowJson) -> SweepRow {
        SweepRow {
            index: r.index,
            overrides: interned(r.overrides),
            tp: r.tp,
            pp: r.pp,
            dp: r.dp,
            cp: r.cp,
            ep: r.ep,
            vpp: r.vpp,
            micro_batch: r.micro_batch,
            recompute: r.recompute,
            zero: r.zero,
            schedule: r.schedule,
            precision: r.precision,
            step_time_s: r.step_time_s.unwrap_or(0.0),
            tokens_per_s: r.tokens_per_s.unwrap_or(0.0),
            mfu: r.mfu.unwrap_or(0.0),
            peak_memory_bytes: r.peak_memory_bytes,
            peak_memory_fraction: r.peak_memory_fraction,
            bubble_fraction: r.bubble_fraction.unwrap_or(0.0),
            exposed_comm_fraction: r.exposed_comm_fraction.unwrap_or(0.0),
            fits: r.fits,
            simulated: r.simulated,
        }
    }
}

/// `bf16`, `fp16`, `fp32`, or `fp8-` and the recipe.
fn precision_name(s: &Scenario) -> String {
    match s.training.precision {
        crate::scenario::Precision::Fp8 => format!("fp8-{}", s.training.fp8_recipe.as_str()),
        crate::scenario::Precision::Bf16 => "bf16".to_string(),
        crate::scenario::Precision::Fp16 => "fp16".to_string(),
        crate::scenario::Precision::Fp32 => "fp32".to_string(),
    }
}

impl SweepRow {
    /// The row's `--set` overrides as strings of their own (to resolve its scenario again).
    pub fn override_strings(&self) -> Vec<String> {
        self.overrides.iter().map(|o| o.to_string()).collect()
    }

    fn unsimulated(index: usize, overrides: Vec<String>, s: &Scenario, state: u64) -> SweepRow {
        let hbm = s.cluster.gpu.usable_bytes();
        let mut row = SweepRow::fill(index, overrides, s);
        row.peak_memory_bytes = state;
        row.peak_memory_fraction = if hbm == 0 {
            0.0
        } else {
            state as f64 / hbm as f64
        };
        row
    }

    /// The layout columns, with zero figures, not fitting, not simulated.
    fn fill(index: usize, overrides: Vec<String>, s: &Scenario) -> SweepRow {
        let p = &s.parallel;
        SweepRow {
            index,
            overrides: interned(overrides),
            tp: p.tp,
            pp: p.pp,
            dp: p.dp,
            cp: p.cp,
            ep: p.ep,
            vpp: p.vpp,
            micro_batch: s.training.micro_batch,
            recompute: format!("{:?}", s.training.recompute).to_lowercase(),
            zero: p.zero,
            schedule: p.schedule.as_str().to_string(),
            precision: precision_name(s),
            step_time_s: 0.0,
            tokens_per_s: 0.0,
            mfu: 0.0,
            peak_memory_bytes: 0,
            peak_memory_fraction: 0.0,
            bubble_fraction: 0.0,
            exposed_comm_fraction: 0.0,
            fits: false,
            simulated: false,
        }
    }

    fn new(index: usize, overrides: Vec<String>, s: &Scenario, r: &Summary) -> SweepRow {
        SweepRow {
            step_time_s: r.step_time_s,
            tokens_per_s: r.tokens_per_s,
            mfu: r.mfu,
            peak_memory_bytes: r.peak_memory_bytes,
            peak_memory_fraction: if r.usable_bytes == 0 {
                0.0
            } else {
                r.peak_memory_bytes as f64 / r.usable_bytes as f64
            },
            bubble_fraction: r.bubble_fraction,
            exposed_comm_fraction: r.exposed_comm_fraction,
            fits: r.fits,
            simulated: true,
            ..SweepRow::fill(index, overrides, s)
        }
    }
}

/// Everything a sweep (or a shard of one) found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepResult {
    pub scenario: String,
    pub objective: Objective,
    /// Layouts considered (in this shard).
    pub layouts: usize,
    /// Rejected by scenario validation (an impossible combination).
    pub invalid: usize,
    /// Valid, but planning, schedule generation or simulation failed.
    pub failed: usize,
    /// The failed layout of the lowest index, with its reason (`None` when none failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_failure: Option<FailedLayout>,
    /// Not simulated because a lower bound of their objective (step time from compute
    /// alone, or model state for memory) is worse than the `keep`-th best simulated layout
    /// (branch and bound, [`run_set`]).
    #[serde(default)]
    pub pruned: usize,
    /// Every simulated layout, fitting or not, by `index`, and those a lower bound of memory
    /// puts over HBM.
    pub rows: Vec<SweepRow>,
    /// The `index` of each fitting layout on the Pareto front of tokens/s against peak
    /// memory (no other fitting layout is at least as fast with no more memory), fastest
    /// first.
    #[serde(default)]
    pub pareto: Vec<usize>,
}

enum Outcome {
    Invalid,
    Failed(FailedLayout),
    Row(Box<SweepRow>),
}

/// A layout that is valid but could not be simulated (its schedule could not be generated,
/// or the engine stopped), with the reason: a bug in twin, or a limit it explains.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FailedLayout {
    pub index: usize,
    pub overrides: Vec<String>,
    pub reason: String,
}

/// The largest model state (weights, gradients, optimizer state after ZeRO sharding and
/// offload) any stage's ranks hold, plus the framework reserve. The engine allocates both for
/// the whole step, so their sum is a lower bound of the simulated peak: a layout whose state
/// alone exceeds HBM cannot fit.
pub fn static_state_bytes(s: &Scenario, plan: &Plan) -> u64 {
    (0..plan.pp())
        .map(|stage| {
            let b = crate::workload::state_bytes(s, plan, stage);
            b.weights_bytes
                .saturating_add(b.grads_bytes)
                .saturating_add(b.optimizer_bytes)
        })
        .max()
        .unwrap_or(0)
        // the framework reserve and the expert dispatcher's buffers are held from the start of
        // the step too
        .saturating_add(crate::workload::held_for_the_run_bytes(s))
}

/// The cost model `pricing` prices `scenario` with, as `twin simulate` builds it (a host
/// profile's state cache is left unknown, as no whole schedule is kept to size it), or why
/// there is none.
pub(crate) fn cost_model(scenario: &Scenario, pricing: &Pricing) -> Result<Analytic, String> {
    let profile = pricing.profile_for(scenario).map_err(|e| e.to_string())?;
    Ok(Analytic::priced(scenario, profile.as_deref()))
}

/// Whether two pricings are the same cost model: one sweep's layouts share one profile, so
/// the pointer answers before the contents are compared.
pub(crate) fn same_pricing(a: &Pricing, b: &Pricing) -> bool {
    match (a, b) {
        (Pricing::Profile(a), Pricing::Profile(b)) => Arc::ptr_eq(a, b) || a == b,
        _ => a == b,
    }
}

fn evaluate(
    source: &ParsedSource,
    pricing: &Pricing,
    index: usize,
    overrides: Vec<String>,
) -> Outcome {
    let Ok((scenario, plan)) = source.resolve_planned(&overrides) else {
        return Outcome::Invalid;
    };
    let outcome = evaluate_planned(&scenario, &plan, pricing, index, overrides);
    // The next layouts on this thread mostly share this one's mesh and take its groups.
    plan.recycle();
    outcome
}

fn evaluate_planned(
    scenario: &Scenario,
    plan: &Plan,
    pricing: &Pricing,
    index: usize,
    overrides: Vec<String>,
) -> Outcome {
    let state = static_state_bytes(scenario, plan);
    if state > scenario.cluster.gpu.usable_bytes() {
        return Outcome::Row(Box::new(SweepRow::unsimulated(
            index, overrides, scenario, state,
        )));
    }
    let cost = match cost_model(scenario, pricing) {
        Ok(c) => c,
        Err(reason) => {
            return Outcome::Failed(FailedLayout {
                index,
                overrides,
                reason,
            })
        }
    };
    let opts = SimOptions {
        collapse: true,
        ..SimOptions::default()
    };
    let network = crate::topology::Network::for_cluster(&scenario.cluster, &cost.links)
        .map(|n| n.with_expert_dispatch(cost.expert_dispatch));
    let result = match simulate(scenario, plan, &cost, network.as_ref(), &opts) {
        Ok(r) => r,
        Err(Failed(reason)) => {
            return Outcome::Failed(FailedLayout {
                index,
                overrides,
                reason,
            })
        }
    };
    // The row's figures are the report's headline figures (one function computes both); the
    // per-rank breakdown a full report adds is not needed here.
    // MFU over the peak the cost model prices with, as `twin simulate` reports it.
    let summary = Summary::of(&cost.with_priced_peak(scenario), plan, &result);
    Outcome::Row(Box::new(SweepRow::new(
        index, overrides, scenario, &summary,
    )))
}

/// Generating or simulating a layout failed, and why.
struct Failed(String);

impl From<crate::schedule::ScheduleError> for Failed {
    fn from(e: crate::schedule::ScheduleError) -> Failed {
        Failed(e.to_string())
    }
}

impl From<crate::engine::SimError> for Failed {
    fn from(e: crate::engine::SimError) -> Failed {
        Failed(e.to_string())
    }
}

/// The collapsed simulation of a layout. Each stage's program is compiled as soon as it is
/// generated, and the next one is built in its op vector (see [`crate::engine::Compiled`]);
/// the result is the one `engine::simulate_on` gives for the generated schedule.
fn simulate(
    scenario: &Scenario,
    plan: &Plan,
    cost: &crate::cost::Analytic,
    network: Option<&crate::topology::Network>,
    opts: &SimOptions,
) -> Result<crate::engine::SimResult, Failed> {
    let shape = crate::schedule::Schedule {
        programs: Vec::new(),
        program_of: crate::schedule::program_of(scenario, plan),
    };
    let programs = crate::schedule::program_count(scenario, plan);
    let Some(mut compiled) = crate::engine::Compiled::new(plan, &shape.program_of, programs, cost)
    else {
        let schedule = sizes::generate(scenario, plan)?;
        let r = crate::engine::simulate_on(plan, &schedule, cost, network, opts);
        // The next layout on this thread builds its programs in these op vectors.
        crate::schedule::recycle(schedule);
        return Ok(r?);
    };
    sizes::generate_each(scenario, plan, |program| {
        let compiled_ok = compiled.add(&program, cost);
        crate::schedule::recycle_program(program);
        compiled_ok.map_err(Failed::from)
    })?;
    Ok(crate::engine::simulate_compiled(
        plan, &shape, compiled, cost, network, opts,
    )?)
}

/// Simulates every `(index, overrides)` layout of `source` in parallel (rayon's global
/// pool), calling `progress` once per finished layout from any thread.
pub fn run(
    source: &ScenarioSource,
    scenario_name: &str,
    layouts: Vec<(usize, Vec<String>)>,
    objective: Objective,
    pricing: &Pricing,
    progress: &(dyn Fn() + Sync),
) -> SweepResult {
    let total = layouts.len();
    let mut result = SweepResult::empty(scenario_name, objective, total);
    // A source that does not parse makes every layout invalid.
    let Ok(parsed) = source.parse() else {
        result.invalid = total;
        return result;
    };
    let outcomes: Vec<Outcome> = layouts
        .into_par_iter()
        .map(|(i, o)| {
            let out = evaluate(&parsed, pricing, i, o);
            progress();
            out
        })
        .collect();
    result.add(outcomes);
    result.finish();
    result
}

/// A layout examined before simulation: its objective's lower bound ([`Bound`]).
struct Bounded {
    index: usize,
    bound: f64,
}

/// What examining a layout found.
enum Examined {
    Done(Outcome),
    Bounded(Bounded),
}

/// The objective as a cost to minimise, and a lower bound of it before simulating: step time
/// (tokens/s is the tokens of a step over it) or peak memory, both bounded by
/// [`sizes::lower_bounds`]. MFU has no bound here (a layout's model FLOPs are only
/// known once its schedule is generated), so it simulates every layout.
fn cost_of(objective: Objective, row: &SweepRow) -> Option<f64> {
    match objective {
        Objective::TokensPerS | Objective::StepTime => Some(row.step_time_s * 1e9),
        Objective::Memory => Some(row.peak_memory_bytes as f64),
        Objective::Mfu => None,
    }
}

fn examine(
    source: &ParsedSource,
    pricing: &Pricing,
    index: usize,
    overrides: Vec<String>,
    objective: Objective,
) -> Examined {
    let Ok((scenario, plan)) = source.resolve_planned(&overrides) else {
        return Examined::Done(Outcome::Invalid);
    };
    let usable = scenario.cluster.gpu.usable_bytes();
    let state = static_state_bytes(&scenario, &plan);
    let out = if state > usable {
        Examined::Done(Outcome::Row(Box::new(SweepRow::unsimulated(
            index, overrides, &scenario, state,
        ))))
    } else {
        match sizes::lower_bounds(&scenario, &plan, pricing, usable, false) {
            Err(e) => Examined::Done(Outcome::Failed(FailedLayout {
                index,
                overrides,
                reason: e.to_string(),
            })),
            Ok(b) if b.memory_bytes > usable => Examined::Done(Outcome::Row(Box::new(
                SweepRow::unsimulated(index, overrides, &scenario, b.memory_bytes.max(state)),
            ))),
            Ok(b) => match objective {
                Objective::TokensPerS | Objective::StepTime => Examined::Bounded(Bounded {
                    index,
                    bound: b.step_ns as f64,
                }),
                Objective::Memory => Examined::Bounded(Bounded {
                    index,
                    bound: b.memory_bytes.max(state) as f64,
                }),
                Objective::Mfu => Examined::Done(evaluate_planned(
                    &scenario, &plan, pricing, index, overrides,
                )),
            },
        }
    };
    plan.recycle();
    out
}

/// The full step bound of a layout (with the pass chain and the data-parallel stream,
/// [`sizes::lower_bounds`]), which [`examine`] leaves out for speed; `None` where it cannot
/// be had.
fn full_step_bound(source: &ParsedSource, pricing: &Pricing, overrides: &[String]) -> Option<f64> {
    let (scenario, plan) = source.resolve_planned(overrides).ok()?;
    let usable = scenario.cluster.gpu.usable_bytes();
    let b = sizes::lower_bounds(&scenario, &plan, pricing, usable, true).ok();
    plan.recycle();
    b.map(|b| b.step_ns as f64)
}

/// Simulates the layouts of `layouts` in parallel. With `keep`, by branch and bound: every
/// layout is first resolved and bounded ([`cost_of`]), then simulated in the order of its
/// bound, in batches, until the next bound is worse than the `keep`-th best fitting layout
/// simulated so far; the rest are counted as `pruned`. Layouts are ordered by the bound
/// without the pass chain and the data-parallel stream (cheap for every layout); one about to
/// be simulated gets its full bound first and is pruned instead when that already exceeds the
/// `keep`-th best. The best `keep` are then exactly those a simulation of every layout finds
/// (ties broken by index as [`SweepResult::ranked`] does), and the Pareto front is exact up to
/// the `keep`-th best step. `progress` is called with the
/// number of layouts finished since its last call.
pub fn run_set(
    source: &ScenarioSource,
    scenario_name: &str,
    layouts: &LayoutSet,
    objective: Objective,
    keep: Option<usize>,
    pricing: &Pricing,
    progress: &(dyn Fn(u64) + Sync),
) -> SweepResult {
    let total = layouts.len();
    let mut result = SweepResult::empty(scenario_name, objective, total);
    let Ok(parsed) = source.parse() else {
        result.invalid = total;
        return result;
    };
    let Some(keep) = keep.filter(|k| *k > 0) else {
        let numbered = layouts.numbered();
        return run(source, scenario_name, numbered, objective, pricing, &|| {
            progress(1)
        });
    };
    let positions: Vec<usize> = layouts.positions().collect();
    let examined: Vec<Examined> = positions
        .into_par_iter()
        .map(|i| {
            let e = examine(&parsed, pricing, i, layouts.overrides(i), objective);
            if matches!(e, Examined::Done(_)) {
                progress(1);
            }
            e
        })
        .collect();
    let mut bounded = Vec::new();
    let mut done = Vec::new();
    for e in examined {
        match e {
            Examined::Done(o) => done.push(o),
            Examined::Bounded(b) => bounded.push(b),
        }
    }
    result.add(done);
    bounded.sort_by(|a, b| a.bound.total_cmp(&b.bound).then(a.index.cmp(&b.index)));
    // The costs of the best `keep` fitting layouts so far, ascending.
    let mut best: Vec<f64> = result
        .rows
        .iter()
        .filter(|r| r.fits && r.simulated)
        .filter_map(|r| cost_of(objective, r))
        .collect();
    best.sort_by(f64::total_cmp);
    best.truncate(keep);
    let batch = (rayon::current_num_threads() * 2).max(4);
    let mut next = 0;
    let mut refined_out = 0;
    while next < bounded.len() {
        let threshold = if best.len() >= keep {
            best[keep - 1]
        } else {
            f64::INFINITY
        };
        let end = bounded[next..]
            .iter()
            .take(batch)
            .take_while(|b| b.bound <= threshold)
            .count();
        if end == 0 {
            break;
        }
        let refine = threshold.is_finite()
            && matches!(objective, Objective::TokensPerS | Objective::StepTime);
        let outcomes: Vec<Option<Outcome>> = bounded[next..next + end]
            .par_iter()
            .map(|b| {
                let overrides = layouts.overrides(b.index);
                if refine
                    && full_step_bound(&parsed, pricing, &overrides).is_some_and(|f| f > threshold)
                {
                    return None;
                }
                let out = evaluate(&parsed, pricing, b.index, overrides);
                progress(1);
                Some(out)
            })
            .collect();
        next += end;
        refined_out += outcomes.iter().filter(|o| o.is_none()).count();
        let outcomes: Vec<Outcome> = outcomes.into_iter().flatten().collect();
        for o in &outcomes {
            if let Outcome::Row(r) = o {
                if r.fits && r.simulated {
                    if let Some(c) = cost_of(objective, r) {
                        let at = best.partition_point(|b| *b <= c);
                        best.insert(at, c);
                        best.truncate(keep);
                    }
                }
            }
        }
        result.add(outcomes);
    }
    result.pruned = bounded.len() - next + refined_out;
    progress(result.pruned as u64);
    result.finish();
    result
}

impl SweepResult {
    fn empty(scenario: &str, objective: Objective, layouts: usize) -> SweepResult {
        SweepResult {
            scenario: scenario.to_string(),
            objective,
            layouts,
            invalid: 0,
            failed: 0,
            first_failure: None,
            pruned: 0,
            rows: Vec::new(),
            pareto: Vec::new(),
        }
    }

    fn add(&mut self, outcomes: Vec<Outcome>) {
        for o in outcomes {
            match o {
                Outcome::Invalid => self.invalid += 1,
                Outcome::Failed(f) => {
                    self.failed += 1;
                    self.note_failure(f);
                }
                Outcome::Row(r) => self.rows.push(*r),
            }
        }
    }

    /// Keeps `f` as the first failure when its index is the lowest so far (so the one kept
    /// does not depend on the order threads or shards finish in).
    fn note_failure(&mut self, f: FailedLayout) {
        if self
            .first_failure
            .as_ref()
            .is_none_or(|k| f.index < k.index)
        {
            self.first_failure = Some(f);
        }
    }

    /// Orders the rows by index and finds the Pareto front.
    fn finish(&mut self) {
        self.rows.sort_by_key(|r| r.index);
        self.pareto = self.pareto_front().iter().map(|r| r.index).collect();
    }

    /// The fitting simulated layouts no other one beats on both tokens/s and peak memory
    /// (at least as fast with no more memory, and better on one), fastest first; of layouts
    /// equal on both, the first by index.
    pub fn pareto_front(&self) -> Vec<&SweepRow> {
        let mut v: Vec<&SweepRow> = self.rows.iter().filter(|r| r.fits && r.simulated).collect();
        v.sort_by(|a, b| {
            b.tokens_per_s
                .total_cmp(&a.tokens_per_s)
                .then(a.peak_memory_bytes.cmp(&b.peak_memory_bytes))
                .then(a.index.cmp(&b.index))
        });
        let mut front: Vec<&SweepRow> = Vec::new();
        for r in v {
            // Sorted by speed: a row joins when it needs less memory than every faster one.
            if front
                .last()
                .is_none_or(|f| r.peak_memory_bytes < f.peak_memory_bytes)
            {
                front.push(r);
            }
        }
        front
    }

    /// Layouts that do not fit in memory (simulated or not).
    pub fn out_of_memory(&self) -> usize {
        self.rows.iter().filter(|r| !r.fits).count()
    }

    /// Layouts that were simulated (the other rows did not fit by a lower bound of memory).
    pub fn simulated(&self) -> usize {
        self.rows.iter().filter(|r| r.simulated).count()
    }

    /// The fitting layouts, best first (ties by enumeration order).
    pub fn ranked(&self) -> Vec<&SweepRow> {
        let mut v: Vec<&SweepRow> = self.rows.iter().filter(|r| r.fits).collect();
        let key = |r: &SweepRow| match self.objective {
            Objective::TokensPerS => -r.tokens_per_s,
            Objective::Mfu => -r.mfu,
            Objective::StepTime => r.step_time_s,
            Objective::Memory => r.peak_memory_bytes as f64,
        };
        v.sort_by(|a, b| key(a).total_cmp(&key(b)).then(a.index.cmp(&b.index)));
        v
    }

    /// Joins shards of one sweep. Fails when they are of different scenarios or objectives,
    /// or overlap.
    pub fn merge(parts: Vec<SweepResult>) -> Result<SweepResult, MergeError> {
        let mut it = parts.into_iter();
        let Some(mut out) = it.next() else {
            return Err(MergeError::Empty);
        };
        for p in it {
            if p.scenario != out.scenario || p.objective != out.objective {
                return Err(MergeError::Mismatch {
                    a: format!("{} ({})", out.scenario, out.objective.name()),
                    b: format!("{} ({})", p.scenario, p.objective.name()),
                });
            }
            out.layouts += p.layouts;
            out.invalid += p.invalid;
            out.failed += p.failed;
            if let Some(f) = p.first_failure {
                out.note_failure(f);
            }
            out.pruned += p.pruned;
            out.rows.extend(p.rows);
        }
        out.finish();
        if let Some(w) = out.rows.windows(2).find(|w| w[0].index == w[1].index) {
            return Err(MergeError::Overlap(w[0].index));
        }
        Ok(out)
    }

    /// The `twin.sweep/1` document (docs/reference/json.md).
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        crate::json::document("sweep", self)
    }

    /// [`SweepResult::to_json`], written to `out` as it is serialized.
    pub fn write_json(&self, out: impl std::io::Write) -> Result<(), serde_json::Error> {
        serde_json::to_writer_pretty(out, &crate::json::Document::new("sweep", self))
    }

    /// One header line and one record per simulated layout, ranked ones first in rank order
    /// (`rank` empty for layouts that do not fit; the figures empty for layouts that were not
    /// simulated).
    pub fn to_csv(&self) -> Result<String, csv::Error> {
        let mut bytes = Vec::new();
        self.write_csv(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// [`SweepResult::to_csv`], written to `out` row by row (a search's CSV runs to hundreds
    /// of megabytes).
    pub fn write_csv(&self, out: impl std::io::Write) -> Result<(), csv::Error> {
        let mut w = csv::Writer::from_writer(out);
        w.write_record(CSV_HEADER.split(','))?;
        let ranked = self.ranked();
        let ranked_len = ranked.len();
        let unfit = self.rows.iter().filter(|r| !r.fits);
        // One buffer for every field that is formatted.
        let mut field = String::new();
        for (n, r) in ranked.into_iter().chain(unfit).enumerate() {
            let mut put = |w: &mut csv::Writer<_>, value: std::fmt::Arguments| {
                use std::fmt::Write as _;
                field.clear();
                let _ = field.write_fmt(value);
                w.write_field(&field)
            };
            if n < ranked_len {
                put(&mut w, format_args!("{}", n + 1))?;
            } else {
                w.write_field("")?;
            }
            put(&mut w, format_args!("{}", r.index))?;
            for v in [r.tp, r.pp, r.dp, r.cp, r.ep, r.vpp] {
                put(&mut w, format_args!("{v}"))?;
            }
            put(&mut w, format_args!("{}", r.micro_batch))?;
            w.write_field(&r.recompute)?;
            put(&mut w, format_args!("{}", r.zero))?;
            w.write_field(&r.schedule)?;
            w.write_field(&r.precision)?;
            w.write_field(&self.scenario)?;
            for (v, digits) in [(r.step_time_s, 9), (r.tokens_per_s, 3), (r.mfu, 6)] {
                if r.simulated {
                    put(&mut w, format_args!("{v:.digits$}"))?;
                } else {
                    w.write_field("")?;
                }
            }
            put(&mut w, format_args!("{}", r.peak_memory_bytes))?;
            put(&mut w, format_args!("{:.6}", r.peak_memory_fraction))?;
            for v in [r.bubble_fraction, r.exposed_comm_fraction] {
                if r.simulated {
                    put(&mut w, format_args!("{v:.6}"))?;
                } else {
                    w.write_field("")?;
                }
            }
            w.write_field(if r.fits { "true" } else { "false" })?;
            w.write_field(if r.simulated { "true" } else { "false" })?;
            field.clear();
            for (i, o) in r.overrides.iter().enumerate() {
                if i > 0 {
                    field.push(' ');
                }
                field.push_str(o);
            }
            w.write_field(&field)?;
            w.write_record(None::<&[u8]>)?;
        }
        w.flush()?;
        Ok(())
    }

    /// The top `n` as an aligned table with a summary of what was skipped, then the Pareto
    /// front of tokens/s against memory (at most `n` of its layouts, spread over it) and the
    /// best layout's overrides.
    pub fn top_text(&self, n: usize) -> String {
        let ranked = self.ranked();
        let mut o = String::new();
        let pruned = if self.pruned > 0 {
            format!(
                ", {} pruned by bound (cannot reach the top {n})",
                self.pruned
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            o,
            "{}: {} layouts, {} invalid (skipped), {} failed, {} out of memory ({} by a lower bound, not simulated){pruned}, {} fit; ranked by {}",
            self.scenario,
            self.layouts,
            self.invalid,
            self.failed,
            self.out_of_memory(),
            self.rows.len() - self.simulated(),
            ranked.len(),
            self.objective.name()
        );
        if let Some(f) = &self.first_failure {
            let _ = writeln!(
                o,
                "failed: layout {} ({}): {}{}",
                f.index,
                set_flags(&f.overrides),
                f.reason,
                if self.failed > 1 {
                    format!(" (the first of {})", self.failed)
                } else {
                    String::new()
                }
            );
        }
        table(
            &mut o,
            "rank",
            &ranked.iter().take(n).copied().collect::<Vec<_>>(),
        );
        let front = self.pareto_front();
        if front.len() > 1 {
            let step = front.len().div_ceil(n.max(1)).max(1);
            let shown: Vec<&SweepRow> = front.iter().step_by(step).copied().collect();
            let _ = writeln!(
                o,
                "\nPareto front, tokens/s against peak memory ({} layouts{}):",
                front.len(),
                if step > 1 {
                    format!(", one in {step} shown")
                } else {
                    String::new()
                }
            );
            table(&mut o, "#", &shown);
        }
        if let Some(best) = ranked.first() {
            let _ = writeln!(o, "\nbest: {}", set_flags(&best.overrides));
        }
        o
    }
}

/// `overrides` with each string shared with the other rows of this thread that have it: a
/// search's rows hold about 18 `--set` strings each out of a few hundred distinct ones, and
/// as strings of their own they would be most of its memory (2.4 of 4.3 GB for DeepSeek-V3's
/// 2.6 M layouts on 1,024 GPUs).
pub fn interned(overrides: Vec<String>) -> Vec<Arc<str>> {
    thread_local! {
        static SEEN: RefCell<HashSet<Arc<str>>> = RefCell::default();
    }
    SEEN.with(|seen| {
        let mut seen = seen.borrow_mut();
        overrides
            .into_iter()
            .map(|o| match seen.get(o.as_str()) {
                Some(shared) => Arc::clone(shared),
                None => {
                    let shared: Arc<str> = Arc::from(o);
                    seen.insert(Arc::clone(&shared));
                    shared
                }
            })
            .collect()
    })
}

/// `overrides` as the `--set` flags that reproduce them.
fn set_flags(overrides: &[impl AsRef<str>]) -> String {
    overrides
        .iter()
        .map(|s| format!("--set {}", s.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Override keys the table's columns show already, or that follow from them (sequence
/// parallelism from tp).
const SHOWN_KEYS: [&str; 13] = [
    "parallel.tp",
    "parallel.cp",
    "parallel.pp",
    "parallel.dp",
    "parallel.vpp",
    "training.micro_batch",
    "training.recompute",
    "parallel.zero",
    "parallel.schedule",
    "parallel.sequence_parallel",
    "parallel.fsdp",
    "training.precision",
    "training.fp8_recipe",
];

/// For each row, the overrides that tell it apart from the other rows beyond the columns: the
/// keys whose values differ among `rows`, as `key=value` with the key's last part.
fn distinctions(rows: &[&SweepRow]) -> Vec<String> {
    let pairs: Vec<Vec<(&str, &str)>> = rows
        .iter()
        .map(|r| {
            r.overrides
                .iter()
                .filter_map(|o| o.split_once('='))
                .filter(|(k, _)| !SHOWN_KEYS.contains(k))
                .collect()
        })
        .collect();
    let value = |row: &[(&str, &str)], key: &str| {
        row.iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.to_string())
    };
    let mut varying: Vec<&str> = Vec::new();
    for row in &pairs {
        for &(k, _) in row {
            if !varying.contains(&k) {
                let first = value(&pairs[0], k);
                if pairs.iter().any(|r| value(r, k) != first) {
                    varying.push(k);
                }
            }
        }
    }
    pairs
        .iter()
        .map(|row| {
            varying
                .iter()
                .filter_map(|&k| {
                    let v = value(row, k)?;
                    let short = k.rsplit('.').next().unwrap_or(k);
                    Some(format!("{short}={}", v.trim_matches('"')))
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// Rows as the aligned table `top_text` prints, numbered from 1 under `first`; a last column
/// names what else tells the rows apart where the columns do not.
fn table(o: &mut String, first: &str, rows: &[&SweepRow]) {
    let also = distinctions(rows);
    let any = also.iter().any(|a| !a.is_empty());
    let _ = writeln!(
        o,
        "{:>4} {:>3} {:>3} {:>4} {:>5} {:>3} {:>3} {:>9} {:>1} {:>16} {:>12} {:>10} {:>11} {:>6} {:>7} {:>6}{}",
        first, "tp", "cp", "pp", "dp", "vpp", "mb", "recompute", "z", "schedule", "precision", "step ms", "tokens/s", "MFU", "mem GiB", "bubble",
        if any { "  also" } else { "" }
    );
    for (i, r) in rows.iter().enumerate() {
        let extra = match also.get(i) {
            Some(a) if any => format!("  {a}"),
            _ => String::new(),
        };
        let _ = writeln!(
            o,
            "{:>4} {:>3} {:>3} {:>4} {:>5} {:>3} {:>3} {:>9} {:>1} {:>16} {:>12} {:>10.3} {:>11.0} {:>5.1}% {:>7.2} {:>5.1}%{extra}",
            i + 1,
            r.tp,
            r.cp,
            r.pp,
            r.dp,
            r.vpp,
            r.micro_batch,
            r.recompute,
            r.zero,
            r.schedule,
            r.precision,
            r.step_time_s * 1e3,
            r.tokens_per_s,
            r.mfu * 100.0,
            r.peak_memory_bytes as f64 / (1u64 << 30) as f64,
            r.bubble_fraction * 100.0
        );
    }
}

/// Columns of [`SweepResult::to_csv`].
pub const CSV_HEADER: &str = "rank,index,tp,pp,dp,cp,ep,vpp,micro_batch,recompute,zero,schedule,precision,scenario,step_time_s,tokens_per_s,mfu,peak_memory_bytes,peak_memory_fraction,bubble_fraction,exposed_comm_fraction,fits,simulated,overrides";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    #[error("nothing to merge")]
    Empty,
    #[error("cannot merge sweeps of different scenarios or objectives: {a} and {b}")]
    Mismatch { a: String, b: String },
    #[error("the shards overlap: layout {0} appears twice")]
    Overlap(usize),
}

#[cfg(test)]
mod bound_tests;
#[cfg(test)]
mod tests;
