//! The report: what a person (text) or a script (JSON) reads after a simulation. It turns the
//! engine's per-rank measurements into step time, throughput, MFU/HFU, bubble and exposed
//! communication fractions, per-stage peak memory with its breakdown, and a fits / out of
//! memory verdict. The JSON field names are a stable interface for scripts and CI.

use crate::outcome::{RankStats, SimResult};
use crate::plan::{PartitionRule, Plan};
use crate::scenario::framework::AttentionFlops;
use crate::scenario::{Precision, Scenario};
use crate::schedule::{MemCategory, Schedule};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Device memory of one rank at its peak, by category (bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct MemoryBreakdown {
    pub weights: u64,
    pub grads: u64,
    pub optimizer: u64,
    pub activations: u64,
    pub buffers: u64,
    pub reserved: u64,
}

impl MemoryBreakdown {
    fn from_array(a: &[u64; MemCategory::COUNT]) -> MemoryBreakdown {
        MemoryBreakdown {
            weights: a[MemCategory::Weights as usize],
            grads: a[MemCategory::Grads as usize],
            optimizer: a[MemCategory::Optimizer as usize],
            activations: a[MemCategory::Activations as usize],
            buffers: a[MemCategory::Buffers as usize],
            reserved: a[MemCategory::Reserved as usize],
        }
    }
    fn values(&self) -> [u64; MemCategory::COUNT] {
        [
            self.weights,
            self.grads,
            self.optimizer,
            self.activations,
            self.buffers,
            self.reserved,
        ]
    }
}

/// Ranks of one stage with identical memory, collapsed into one entry.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankEntry {
    /// Set when the entry stands for a single rank.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// Set when the entry stands for several ranks: ranges such as "0-7,16-23".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranks: Option<String>,
    pub rank_count: u32,
    pub stage: u32,
    pub peak_memory_bytes: u64,
    pub memory_breakdown: MemoryBreakdown,
    pub host_memory_peak_bytes: u64,
    /// The op at which the peak is first reached (of the first rank listed), and when.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_op: Option<String>,
    pub peak_time_s: f64,
}

/// Where memory ran out: the rank with the highest peak, and the alloc at which its live
/// memory first crossed the usable bytes (the peak's alloc when the simulation was run without
/// a capacity, see [`crate::engine::SimOptions::memory_capacity_bytes`]). A measured run
/// knows no such op: `op` and `op_name` are then absent.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OutOfMemory {
    pub rank: u32,
    pub op: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub op_name: Option<String>,
    /// How far the peak exceeds the usable bytes.
    pub over_bytes: u64,
    /// When live memory first crossed the usable bytes.
    pub time_s: f64,
}

/// The result of one simulated step. Field order is the JSON order.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub step_time_s: f64,
    pub tokens_per_s: f64,
    pub tokens_per_s_per_gpu: f64,
    pub model_tflops_per_gpu: f64,
    pub hardware_tflops_per_gpu: f64,
    pub mfu: f64,
    pub hfu: f64,
    /// The model FLOPs and MFU as the scenario's framework counts them in its own logs.
    pub framework_flops: FrameworkFlops,
    pub bubble_fraction: f64,
    pub exposed_comm_fraction: f64,
    pub peak_memory_bytes: u64,
    pub fits: bool,
    pub events: u64,
    /// Wall time of the simulation: the only nondeterministic field (see
    /// [`Report::without_wall_time`]).
    pub sim_wall_s: f64,
    pub ranks: Vec<RankEntry>,
    pub scenario: String,
    pub gpu: String,
    pub world: u32,
    /// The parallel layout (tp, pp, dp, cp, ep, vpp, micro batch).
    pub layout: crate::json::Layout,
    pub microbatches: u32,
    /// The layer split over the pipeline when twin derived it (the layers do not divide
    /// `pp * vpp`, or the `account_for_*_in_pipeline_split` keys are set); absent for an even
    /// split and for a written `parallel.layer_partition`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer_partition: Option<LayerSplit>,
    pub global_batch: u64,
    pub precision: Precision,
    /// The GPU's memory as the driver counts it (nvidia-smi's total).
    pub hbm_bytes: u64,
    /// What a process can allocate of it (cuMemGetInfo's total): what the verdict compares
    /// the peak against.
    pub usable_bytes: u64,
    /// `usable_bytes` less the peak.
    pub hbm_free_bytes: u64,
    pub host_memory_peak_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oom: Option<OutOfMemory>,
    /// With a profile that has the machine's interruptions: how the simulated steps spread
    /// (the report itself is the median one's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interruptions: Option<InterruptedSteps>,
    /// Choices made for the user (a default node, ...) and the known biases of the scenario's
    /// kind of job ([`crate::known_bias`]), one line each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A layer split twin derived (`twin_ir::plan::partition`), as the report shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LayerSplit {
    /// The rule, with its parameters (`"rule": "slots"`, `"lighter-ends"`, ...).
    #[serde(flatten)]
    pub rule: PartitionRule,
    /// Layers per virtual stage in pipeline order (`chunk * pp + stage`).
    pub layers_per_virtual_stage: Vec<u32>,
    /// Layers per pipeline stage (its chunks together).
    pub layers_per_stage: Vec<u32>,
}

impl LayerSplit {
    /// The plan's split when twin derived it.
    pub fn of(plan: &Plan) -> Option<LayerSplit> {
        if !plan.partition.is_derived() {
            return None;
        }
        Some(LayerSplit {
            rule: plan.partition,
            layers_per_virtual_stage: plan.layers_per_virtual_stage(),
            layers_per_stage: plan
                .chunks
                .iter()
                .map(|stage| stage.iter().map(|c| c.num_layers).sum())
                .collect(),
        })
    }

    /// Runs of equal counts written once with their length: `1, 2 x62, 1`.
    fn compact(counts: &[u32]) -> String {
        let mut parts: Vec<String> = Vec::new();
        let mut i = 0;
        while i < counts.len() {
            let run = counts[i..].iter().take_while(|&&c| c == counts[i]).count();
            parts.push(if run > 1 {
                format!("{} x{run}", counts[i])
            } else {
                counts[i].to_string()
            });
            i += run;
        }
        parts.join(", ")
    }
}

/// Steps simulated with the machine's interruptions (`host_model::jitter`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InterruptedSteps {
    /// Steps simulated, each with its own draws.
    pub runs: u32,
    /// The step with no interruption.
    pub undisturbed_step_time_s: f64,
    /// 10th and 90th percentile of the simulated steps.
    pub step_time_p10_s: f64,
    pub step_time_p90_s: f64,
}

pub(crate) const GIB: f64 = (1u64 << 30) as f64;

/// What the scenario left to twin and twin chose, and how published runs of its kind missed
/// ([`crate::known_bias`]), for the report's note lines.
fn notes(scenario: &Scenario) -> Vec<String> {
    let c = &scenario.cluster;
    let mut notes = Vec::new();
    if c.node_from_gpu {
        notes.push(format!(
            "cluster.node not given: {} GPUs come in {} nodes ({} per node); set cluster.node to choose",
            c.gpu.name, c.node, c.gpus_per_node
        ));
    }
    if let Some(what) = offloaded(scenario.training.offload) {
        let (host, node) = crate::scenario::host_side(c);
        notes.push(format!(
            "training.offload moves {what} to host memory: its copies between host and GPU \
             and the host's optimizer update are priced at a {node} host's peaks ({:.0} GB/s \
             per GPU each way, {:.0} GB/s of host memory per GPU), so their time is a lower \
             bound",
            host.link_bandwidth_bytes_per_s / 1e9,
            host.memory_bandwidth_bytes_per_s / 1e9
        ));
    }
    if let Some(note) = unfused_optimizer(scenario) {
        notes.push(note);
    }
    notes.extend(
        crate::known_bias::of(scenario)
            .iter()
            .map(|b| b.note.to_string()),
    );
    notes
}

/// Where the optimizer's update runs an operation at a time (`foreach`, `for-loop`), how many
/// bytes a parameter that costs against a fused kernel, and the key that chooses another;
/// `None` for a fused update.
fn unfused_optimizer(scenario: &Scenario) -> Option<String> {
    use crate::scenario::framework::OptimizerKernel;
    let t = &scenario.training;
    let kernel = t.optimizer_kernel();
    if kernel.fuses_update() {
        return None;
    }
    let k = crate::workload::state_coefficients(t);
    let unfused = crate::workload::optimizer_bytes_per_param(t, &k);
    let mut fused_training = t.clone();
    fused_training.optimizer_kernel = Some(OptimizerKernel::Fused);
    let fused = crate::workload::optimizer_bytes_per_param(&fused_training, &k);
    let whose = if t.optimizer_kernel.is_some() {
        "training.optimizer_kernel".to_string()
    } else {
        format!("the {} framework file's optimizer.kernel", t.framework.name)
    };
    Some(format!(
        "the optimizer step runs each elementwise operation as a kernel of its own ({}, \
         {whose}): {unfused} bytes a parameter where a fused kernel moves {fused}; \
         training.optimizer_kernel = \"fused\" prices that",
        kernel.as_str()
    ))
}

/// What `offload` moves to host memory, in words; `None` for no offload.
fn offloaded(offload: crate::scenario::Offload) -> Option<&'static str> {
    match offload {
        crate::scenario::Offload::None => None,
        crate::scenario::Offload::Optimizer => Some("the optimizer state"),
        crate::scenario::Offload::Params => Some("the parameters and the optimizer state"),
    }
}

fn ratio(num: f64, den: f64) -> f64 {
    if den > 0.0 && num.is_finite() {
        num / den
    } else {
        0.0
    }
}

/// A step's model FLOPs as a framework's own throughput log counts them: twin's model FLOPs
/// (`model_tflops_per_gpu`, Megatron's count with every attention core's full square) with the
/// attention core counted the framework's way (its file's `report.attention_flops`), so that
/// the figure compares with the TFLOP/s per GPU and MFU the framework prints for the same run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FrameworkFlops {
    /// The framework file's name.
    pub framework: String,
    pub attention: AttentionFlops,
    pub tflops_per_gpu: f64,
    pub mfu: f64,
}

/// The headline figures of one step, from the engine's per-rank statistics but without the
/// per-rank breakdown a [`Report`] adds: what a sweep row needs (a search builds thousands
/// of these), and the figures every report starts from, so both agree to the bit.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub step_time_s: f64,
    pub tokens_per_s: f64,
    pub tokens_per_s_per_gpu: f64,
    pub model_tflops_per_gpu: f64,
    pub hardware_tflops_per_gpu: f64,
    pub mfu: f64,
    pub hfu: f64,
    pub framework_flops: FrameworkFlops,
    pub bubble_fraction: f64,
    pub exposed_comm_fraction: f64,
    /// The highest peak of any rank.
    pub peak_memory_bytes: u64,
    /// The peak is at most `usable_bytes`.
    pub fits: bool,
    pub hbm_bytes: u64,
    pub usable_bytes: u64,
    /// Position in `result.ranks` of the first rank with the highest peak.
    worst: Option<usize>,
}

impl Summary {
    pub fn of(scenario: &Scenario, plan: &Plan, result: &SimResult) -> Summary {
        let world = plan.world.max(1);
        let step_s = result.step_time_ns as f64 * 1e-9;
        let tokens = scenario.tokens_per_step() as f64;
        let model_flops: f64 = result.ranks.iter().map(|r| r.model_flops as f64).sum();
        let framework = &scenario.training.framework;
        let counted: f64 = result
            .ranks
            .iter()
            .map(|r| {
                let (full, masked) = r.model_attention_flops;
                framework
                    .attention_flops
                    .model_flops(r.model_flops, full, masked) as f64
            })
            .sum();
        let hw_flops: f64 = result.ranks.iter().map(|r| r.flops as f64).sum();
        let per_gpu = |f: f64| ratio(f / f64::from(world), step_s);
        let model_per_gpu = per_gpu(model_flops);
        let hw_per_gpu = per_gpu(hw_flops);
        let peak = scenario
            .cluster
            .gpu
            .peak
            .for_precision(scenario.training.precision);
        let usable = scenario.cluster.gpu.usable_bytes();
        // The first rank with the highest peak.
        let mut worst: Option<(usize, u64)> = None;
        for (i, r) in result.ranks.iter().enumerate() {
            if worst.is_none_or(|(_, b)| r.peak_memory_bytes > b) {
                worst = Some((i, r.peak_memory_bytes));
            }
        }
        let peak_memory_bytes = worst.map_or(0, |(_, b)| b);
        Summary {
            step_time_s: step_s,
            tokens_per_s: ratio(tokens, step_s),
            tokens_per_s_per_gpu: ratio(tokens / f64::from(world), step_s),
            model_tflops_per_gpu: model_per_gpu / 1e12,
            hardware_tflops_per_gpu: hw_per_gpu / 1e12,
            mfu: ratio(model_per_gpu, peak),
            hfu: ratio(hw_per_gpu, peak),
            framework_flops: FrameworkFlops {
                framework: framework.name.clone(),
                attention: framework.attention_flops,
                tflops_per_gpu: per_gpu(counted) / 1e12,
                mfu: ratio(per_gpu(counted), peak),
            },
            bubble_fraction: result.bubble_fraction(),
            exposed_comm_fraction: result.exposed_comm_fraction(),
            peak_memory_bytes,
            fits: peak_memory_bytes <= usable,
            hbm_bytes: scenario.cluster.gpu.hbm_bytes,
            usable_bytes: usable,
            worst: worst.map(|(i, _)| i),
        }
    }
}

impl Report {
    pub fn build(
        scenario: &Scenario,
        plan: &Plan,
        schedule: &Schedule,
        result: &SimResult,
        sim_wall_s: f64,
    ) -> Report {
        let sum = Summary::of(scenario, plan, result);
        let usable = sum.usable_bytes;
        let worst = sum.worst.and_then(|i| result.ranks.get(i));
        let oom = match worst {
            Some(w) if !sum.fits => {
                let (op, time_ns) = match w.over_capacity_op {
                    Some(op) => (Some(op), w.over_capacity_time_ns),
                    None => (w.peak_op, w.peak_time_ns),
                };
                Some(OutOfMemory {
                    rank: w.rank,
                    op,
                    op_name: op_name(schedule, w.rank, op),
                    over_bytes: w.peak_memory_bytes - usable,
                    time_s: time_ns as f64 * 1e-9,
                })
            }
            _ => None,
        };
        Report {
            step_time_s: sum.step_time_s,
            tokens_per_s: sum.tokens_per_s,
            tokens_per_s_per_gpu: sum.tokens_per_s_per_gpu,
            model_tflops_per_gpu: sum.model_tflops_per_gpu,
            hardware_tflops_per_gpu: sum.hardware_tflops_per_gpu,
            mfu: sum.mfu,
            hfu: sum.hfu,
            framework_flops: sum.framework_flops.clone(),
            bubble_fraction: sum.bubble_fraction,
            exposed_comm_fraction: sum.exposed_comm_fraction,
            peak_memory_bytes: sum.peak_memory_bytes,
            fits: sum.fits,
            events: result.events,
            sim_wall_s,
            ranks: collapse_ranks(plan, schedule, &result.ranks),
            scenario: scenario.name.clone(),
            gpu: scenario.cluster.gpu.name.clone(),
            world: plan.world,
            layout: crate::json::Layout::of(scenario),
            microbatches: plan.microbatches,
            layer_partition: LayerSplit::of(plan),
            global_batch: scenario.training.global_batch,
            precision: scenario.training.precision,
            hbm_bytes: sum.hbm_bytes,
            usable_bytes: usable,
            hbm_free_bytes: usable.saturating_sub(sum.peak_memory_bytes),
            host_memory_peak_bytes: result
                .ranks
                .iter()
                .map(|r| r.host_memory_peak_bytes)
                .max()
                .unwrap_or(0),
            oom,
            interruptions: None,
            notes: notes(scenario),
        }
    }

    /// The same report with `sim_wall_s` zeroed, so that two runs compare byte for byte.
    pub fn without_wall_time(mut self) -> Report {
        self.sim_wall_s = 0.0;
        self
    }

    /// Pretty JSON, fields in declaration order.
    pub fn to_json(&self) -> String {
        // Serializing plain structs of numbers and strings cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// A readable, aligned summary with a per-stage memory table and a verdict.
    pub fn to_text(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "scenario        {}", self.scenario);
        let _ = writeln!(
            o,
            "layout          {} GPUs ({}), {} micro batches per pipeline, global batch {}, {}",
            self.world,
            self.gpu,
            self.microbatches,
            self.global_batch,
            format!("{:?}", self.precision).to_lowercase()
        );
        if let Some(l) = &self.layer_partition {
            let _ = writeln!(
                o,
                "layer split     {} layers per virtual stage: {}",
                LayerSplit::compact(&l.layers_per_virtual_stage),
                l.rule.describe()
            );
        }
        let _ = writeln!(o, "step time       {:.3} ms", self.step_time_s * 1e3);
        if let Some(i) = &self.interruptions {
            let _ = writeln!(
                o,
                "                median of {} steps with the machine's interruptions (10-90%: \
                 {:.3}-{:.3} ms; undisturbed {:.3} ms)",
                i.runs,
                i.step_time_p10_s * 1e3,
                i.step_time_p90_s * 1e3,
                i.undisturbed_step_time_s * 1e3
            );
        }
        let _ = writeln!(
            o,
            "throughput      {} tokens/s, {} tokens/s per GPU",
            group_thousands(self.tokens_per_s),
            group_thousands(self.tokens_per_s_per_gpu)
        );
        let _ = writeln!(
            o,
            "model FLOPs     {:>8.1} TFLOP/s per GPU   MFU {:>5.1}%",
            self.model_tflops_per_gpu,
            self.mfu * 100.0
        );
        let f = &self.framework_flops;
        // Only where the framework's count differs from twin's (a step without an attention
        // kernel counts the same either way).
        if f.attention != AttentionFlops::Full && f.tflops_per_gpu != self.model_tflops_per_gpu {
            let how = match f.attention {
                AttentionFlops::Causal => "attention over the causal pairs",
                _ => "no attention core",
            };
            let _ = writeln!(
                o,
                "framework FLOPs {:>8.1} TFLOP/s per GPU   MFU {:>5.1}%  ({}'s count: {how})",
                f.tflops_per_gpu,
                f.mfu * 100.0,
                f.framework
            );
        }
        let _ = writeln!(
            o,
            "hardware FLOPs  {:>8.1} TFLOP/s per GPU   HFU {:>5.1}%",
            self.hardware_tflops_per_gpu,
            self.hfu * 100.0
        );
        let _ = writeln!(
            o,
            "bubble          {:>5.1}% of the step (compute idle, mean over ranks)",
            self.bubble_fraction * 100.0
        );
        let _ = writeln!(
            o,
            "exposed comm    {:>5.1}% of the step (communication not hidden by compute)",
            self.exposed_comm_fraction * 100.0
        );
        let _ = writeln!(
            o,
            "simulated       {} events in {:.3} s",
            group_thousands(self.events as f64),
            self.sim_wall_s
        );
        let _ = writeln!(o);
        o.push_str(&self.memory_table());
        let _ = writeln!(o);
        let _ = writeln!(o, "verdict         {}", self.verdict());
        for n in &self.notes {
            let _ = writeln!(o, "note            {n}");
        }
        o
    }

    /// The `--memory` view: for each stage's ranks, the op at which the peak is first reached
    /// and when, then the host memory that offload uses.
    pub fn memory_text(&self) -> String {
        let mut o = String::from("\npeak memory, where it happens\n");
        for e in &self.ranks {
            let who = e
                .ranks
                .clone()
                .or_else(|| e.rank.map(|r| r.to_string()))
                .unwrap_or_default();
            let _ = writeln!(
                o,
                "  stage {:>3}  ranks {:<14} {:>8.2} GiB at {:>10.3} ms  op {}",
                e.stage,
                who,
                e.peak_memory_bytes as f64 / GIB,
                e.peak_time_s * 1e3,
                e.peak_op.as_deref().unwrap_or("-")
            );
        }
        if self.host_memory_peak_bytes > 0 {
            let _ = writeln!(
                o,
                "  host memory peak (offload) {:.2} GiB per rank",
                self.host_memory_peak_bytes as f64 / GIB
            );
        }
        o
    }

    /// "fits with X GiB free" or "OUT OF MEMORY by X GiB on rank R at op Y", Y being the
    /// alloc at which live memory first crossed the usable bytes (a measured run names none).
    pub fn verdict(&self) -> String {
        let of = format!(
            "peak {:.2} GiB of {:.2} GiB usable",
            self.peak_memory_bytes as f64 / GIB,
            self.usable_bytes as f64 / GIB
        );
        match &self.oom {
            None => format!(
                "fits with {:.2} GiB free ({of})",
                self.hbm_free_bytes as f64 / GIB
            ),
            Some(oom) => {
                let at = match (oom.op, &oom.op_name) {
                    (Some(op), Some(name)) => {
                        format!(" at op {op} \"{name}\" ({:.3} ms; ", oom.time_s * 1e3)
                    }
                    _ => " (".to_string(),
                };
                format!(
                    "OUT OF MEMORY by {:.2} GiB on rank {}{at}{of})",
                    oom.over_bytes as f64 / GIB,
                    oom.rank,
                )
            }
        }
    }

    fn memory_table(&self) -> String {
        let header = [
            "stage",
            "ranks",
            "peak GiB",
            "weights",
            "grads",
            "optimizer",
            "activations",
            "buffers",
            "reserved",
        ];
        let rows: Vec<Vec<String>> = self
            .ranks
            .iter()
            .map(|e| {
                let mut row = vec![
                    e.stage.to_string(),
                    e.ranks
                        .clone()
                        .or_else(|| e.rank.map(|r| r.to_string()))
                        .unwrap_or_default(),
                    format!("{:.2}", e.peak_memory_bytes as f64 / GIB),
                ];
                row.extend(
                    e.memory_breakdown
                        .values()
                        .iter()
                        .map(|&b| format!("{:.2}", b as f64 / GIB)),
                );
                row
            })
            .collect();
        let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.len());
            }
        }
        let mut o = String::from("memory at peak, per stage (GiB)\n");
        let line = |o: &mut String, cells: &[String]| {
            o.push(' ');
            for (i, (w, c)) in widths.iter().zip(cells).enumerate() {
                // Rank lists read best left-aligned; numbers right-aligned.
                if i == 1 {
                    let _ = write!(o, " {c:<w$}");
                } else {
                    let _ = write!(o, " {c:>w$}");
                }
            }
            o.push('\n');
        };
        line(
            &mut o,
            &header.iter().map(|h| h.to_string()).collect::<Vec<_>>(),
        );
        for row in &rows {
            line(&mut o, row);
        }
        o
    }
}

/// Collapse ranks of a stage whose memory statistics are identical into one entry, ordered by
/// stage, then by first rank.
fn collapse_ranks(plan: &Plan, schedule: &Schedule, ranks: &[RankStats]) -> Vec<RankEntry> {
    type Key = (u32, u64, MemoryBreakdown, u64, Option<u32>);
    let mut groups: BTreeMap<Key, Vec<u32>> = BTreeMap::new();
    let peak_time_of = |rank: u32| ranks.get(rank as usize).map_or(0, |r| r.peak_time_ns);
    for r in ranks {
        let stage = if r.rank < plan.world {
            plan.stage_of(r.rank)
        } else {
            0
        };
        let key = (
            stage,
            r.peak_memory_bytes,
            MemoryBreakdown::from_array(&r.memory_at_peak),
            r.host_memory_peak_bytes,
            r.peak_op,
        );
        groups.entry(key).or_default().push(r.rank);
    }
    let mut entries: Vec<RankEntry> = groups
        .into_iter()
        .map(
            |((stage, peak, breakdown, host, peak_op), members)| RankEntry {
                rank: (members.len() == 1).then(|| members[0]),
                ranks: (members.len() > 1).then(|| rank_ranges(&members)),
                rank_count: members.len() as u32,
                stage,
                peak_memory_bytes: peak,
                memory_breakdown: breakdown,
                host_memory_peak_bytes: host,
                peak_op: op_name(schedule, members[0], peak_op),
                peak_time_s: peak_time_of(members[0]) as f64 * 1e-9,
            },
        )
        .collect();
    entries.sort_by_key(|e| {
        let first = e.rank.unwrap_or_else(|| {
            e.ranks
                .as_deref()
                .and_then(|s| s.split(['-', ',']).next())
                .and_then(|s| s.parse().ok())
                .unwrap_or(0)
        });
        (e.stage, first)
    });
    entries
}

/// The display name of op `op` of `rank`'s program.
fn op_name(schedule: &Schedule, rank: u32, op: Option<u32>) -> Option<String> {
    Some(schedule.get_op(rank, op?)?.name())
}

/// Sorted ranks as ranges: [0,1,2,5,7,8] -> "0-2,5,7-8".
fn rank_ranges(sorted: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            let _ = write!(out, "{start}");
        } else {
            let _ = write!(out, "{start}-{end}");
        }
        i += 1;
    }
    out
}

/// 1234567.8 -> "1,234,568".
pub(crate) fn group_thousands(v: f64) -> String {
    let n = if v.is_finite() && v > 0.0 {
        v.round() as u64
    } else {
        0
    };
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests;
