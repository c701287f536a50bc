//! A predicted step against a framework's measured one (a PyTorch profiler trace), where the two
//! do not share a schedule: both are reduced to the time of one rank's step by class of work,
//! every instant counted once, so that each side's classes and idle sum exactly to its step.
//!
//! Predicted side ([`predicted_classes`]): each compute op of the rank splits its simulated
//! duration by the cost model's parts ([`crate::cost::Analytic::compute_parts`]): GEMMs,
//! the fused attention kernel, and the rest (memory-bound passes, launches, reloads) as
//! elementwise; optimizer ops count whole as optimizer, and so does the host's update of an
//! offloaded optimizer (which the engine counts as busy time). Where an eager host issues the kernels
//! (`CostModel::host_issue_ns`), what an op took beyond its price is time its GPU waited for
//! the host: idle, as the trace shows it. Communication is what the rank spent with a transfer
//! running and no compute, idle the rest. Measured side: built by the caller
//! from the trace reader's breakdown, with the same classes.
//!
//! Sign convention, as everywhere in `verify`: error = (measured - predicted) / measured.

use crate::cost::Analytic;
use crate::outcome::SimResult;
use crate::schedule::{OpKind, Phase, Schedule};
use serde::Serialize;

/// What the GPU of one rank was doing, each instant counted once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkClass {
    Gemm,
    Attention,
    /// Memory-bound kernels: norms, activations, casts, copies, rotary, residual adds, losses.
    Elementwise,
    Optimizer,
    /// Communication with no compute running (exposed).
    Communication,
    Idle,
}

impl WorkClass {
    pub const ALL: [WorkClass; 6] = [
        WorkClass::Gemm,
        WorkClass::Attention,
        WorkClass::Elementwise,
        WorkClass::Optimizer,
        WorkClass::Communication,
        WorkClass::Idle,
    ];

    pub fn name(self) -> &'static str {
        match self {
            WorkClass::Gemm => "gemm",
            WorkClass::Attention => "attention",
            WorkClass::Elementwise => "elementwise",
            WorkClass::Optimizer => "optimizer",
            WorkClass::Communication => "communication",
            WorkClass::Idle => "idle",
        }
    }
}

/// One rank's step by class: `by_class_ns` sums to `step_ns`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClassTimes {
    pub step_ns: u64,
    /// In [`WorkClass::ALL`] order, every class present.
    pub by_class_ns: Vec<(WorkClass, u64)>,
    /// Peak allocated device memory, when known.
    pub peak_allocated_bytes: Option<u64>,
    /// What the peak holds by kind, when known: (kind, bytes) with the kinds "weights",
    /// "grads", "optimizer", "activations" (temporaries included) and "other".
    pub at_peak: Vec<(String, u64)>,
    /// Each collective call of the step: its kind (`CollectiveKind::name`, or the trace's own
    /// name for kinds twin has none of), its buffer in the nccl-tests sense (the all-gather's
    /// output, the reduce-scatter's input), and its time.
    pub collectives: Vec<CollectiveCall>,
}

/// One collective call.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CollectiveCall {
    pub kind: String,
    pub bytes: u64,
    pub ns: u64,
}

impl ClassTimes {
    /// Times in `WorkClass::ALL` order from `(class, ns)` pairs (repeated classes add up).
    pub fn new(step_ns: u64, pairs: &[(WorkClass, u64)]) -> ClassTimes {
        let by_class_ns = WorkClass::ALL
            .iter()
            .map(|&c| {
                let ns = pairs
                    .iter()
                    .filter(|(k, _)| *k == c)
                    .fold(0u64, |a, (_, n)| a.saturating_add(*n));
                (c, ns)
            })
            .collect();
        ClassTimes {
            step_ns,
            by_class_ns,
            peak_allocated_bytes: None,
            at_peak: Vec::new(),
            collectives: Vec::new(),
        }
    }

    pub fn get(&self, c: WorkClass) -> u64 {
        self.by_class_ns
            .iter()
            .find(|(k, _)| *k == c)
            .map_or(0, |(_, n)| *n)
    }
}

/// The predicted step of `rank` by class (module doc). `result` must carry its trace.
pub fn predicted_classes(
    schedule: &Schedule,
    result: &SimResult,
    cost: &Analytic,
    rank: u32,
) -> ClassTimes {
    use crate::cost::CostModel;
    let mut parts = [0f64; 4]; // gemm, attention, elementwise, optimizer (ns, fractional)
                               // Time compute ops waited for the host beyond their price (ns).
    let mut host_wait = 0u64;
    // Time of the host's optimizer update (optimizer offload).
    let mut host_update = 0u64;
    let host = cost.host_issue_ns() > 0;
    let mut collectives = Vec::new();
    if let (Some(trace), Some(program)) = (&result.trace, schedule.get_program(rank)) {
        for e in trace.events.iter().filter(|e| e.rank == rank) {
            let kind = program.ops.get(e.op as usize).map(|o| &o.kind);
            if let Some(&OpKind::Collective {
                kind, bytes, calls, ..
            }) = kind
            {
                // Merged same-size calls share the op's time evenly.
                let n = u64::from(calls.max(1));
                let ns = e.end_ns.saturating_sub(e.start_ns) / n;
                for _ in 0..n.min(1 << 16) {
                    collectives.push(CollectiveCall {
                        kind: kind.name().to_string(),
                        bytes,
                        ns,
                    });
                }
                continue;
            }
            if let Some(OpKind::HostUpdate { .. }) = kind {
                host_update = host_update.saturating_add(e.end_ns.saturating_sub(e.start_ns));
                continue;
            }
            let Some(OpKind::Compute(op)) = kind else {
                continue;
            };
            let mut span = e.end_ns.saturating_sub(e.start_ns);
            if host {
                let priced = cost.compute_ns(rank, op);
                host_wait = host_wait.saturating_add(span.saturating_sub(priced));
                span = span.min(priced);
            }
            let dur = span as f64;
            if op.phase == Phase::Optimizer {
                parts[3] += dur;
                continue;
            }
            let p = cost.compute_parts(op, false);
            let rest = p.memory_s + p.launch_s + p.cold_ns as f64 * 1e-9;
            let total = p.gemm_s + p.attention_s + rest;
            if total <= 0.0 {
                parts[2] += dur;
                continue;
            }
            parts[0] += dur * p.gemm_s / total;
            parts[1] += dur * p.attention_s / total;
            parts[2] += dur * rest / total;
        }
    }
    let stats = result.ranks.get(rank as usize);
    let step_ns = result.step_time_ns;
    let busy = stats.map_or(0, |r| r.compute_busy_ns.saturating_sub(host_wait));
    // Whole ns per class, the remainder of the rounding to elementwise, so they sum to `busy`.
    let gemm = parts[0].round() as u64;
    let attention = parts[1].round() as u64;
    // The engine counts the host's update as the rank's busy time (its optimizer work).
    let optimizer = (parts[3].round() as u64).saturating_add(host_update);
    let elementwise = busy.saturating_sub(gemm + attention + optimizer);
    let comm = stats.map_or(0, |r| r.comm_exposed_ns);
    let idle = step_ns.saturating_sub(busy).saturating_sub(comm);
    let mut t = ClassTimes::new(
        step_ns,
        &[
            (WorkClass::Gemm, gemm),
            (WorkClass::Attention, attention),
            (WorkClass::Elementwise, elementwise),
            (WorkClass::Optimizer, optimizer),
            (WorkClass::Communication, comm),
            (WorkClass::Idle, idle),
        ],
    );
    // What `torch.cuda.max_memory_allocated` counts: the peak without the framework reserve
    // (CUDA context, library workspaces, allocator slack), which is held for the whole step.
    t.peak_allocated_bytes = stats.map(|r| {
        let reserved = r.memory_at_peak[crate::schedule::MemCategory::Reserved as usize];
        r.peak_memory_bytes.saturating_sub(reserved)
    });
    if let Some(r) = stats {
        use crate::schedule::MemCategory as M;
        let at = |c: M| r.memory_at_peak[c as usize];
        t.at_peak = vec![
            ("weights".into(), at(M::Weights)),
            ("grads".into(), at(M::Grads)),
            ("optimizer".into(), at(M::Optimizer)),
            ("activations".into(), at(M::Activations)),
            ("other".into(), at(M::Buffers)),
        ];
    }
    t.collectives = collectives;
    t
}

/// One class side by side.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClassRow {
    pub class: WorkClass,
    pub predicted_s: f64,
    pub measured_s: f64,
    /// measured - predicted.
    pub difference_s: f64,
}

/// The collective calls of one kind and size range (`size_bucket`) on both sides.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CollectiveRow {
    pub kind: String,
    pub size: String,
    pub predicted_calls: u64,
    pub measured_calls: u64,
    pub predicted_s: f64,
    pub measured_s: f64,
}

/// Both sides' calls grouped by (kind, size range), in kind then size order.
fn collective_rows(
    predicted: &[CollectiveCall],
    measured: &[CollectiveCall],
) -> Vec<CollectiveRow> {
    use std::collections::BTreeMap;
    let mut rows: BTreeMap<(String, u32, String), CollectiveRow> = BTreeMap::new();
    for (side, calls) in [(0, predicted), (1, measured)] {
        for c in calls {
            let size = super::size_bucket(c.bytes);
            let order = 64 - c.bytes.leading_zeros();
            let row = rows
                .entry((c.kind.clone(), order / 2, size.clone()))
                .or_insert_with(|| CollectiveRow {
                    kind: c.kind.clone(),
                    size,
                    predicted_calls: 0,
                    measured_calls: 0,
                    predicted_s: 0.0,
                    measured_s: 0.0,
                });
            let s = c.ns as f64 * 1e-9;
            if side == 0 {
                row.predicted_calls += 1;
                row.predicted_s += s;
            } else {
                row.measured_calls += 1;
                row.measured_s += s;
            }
        }
    }
    rows.into_values().collect()
}

/// A predicted step against a measured one by class.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClassComparison {
    pub step_time_predicted_s: f64,
    pub step_time_measured_s: f64,
    /// (measured - predicted) / measured.
    pub step_time_error: f64,
    /// In `WorkClass::ALL` order.
    pub classes: Vec<ClassRow>,
    pub peak_allocated_predicted_bytes: Option<u64>,
    pub peak_allocated_measured_bytes: Option<u64>,
    /// (measured - predicted) / measured, when both peaks are known.
    pub peak_allocated_error: Option<f64>,
    /// Peak reserved by the caching allocator (measured only: shown beside).
    pub peak_reserved_measured_bytes: Option<u64>,
    /// The collectives by kind and size range; empty when neither side has any.
    pub collectives: Vec<CollectiveRow>,
    /// What each side's peak holds by kind, (kind, predicted bytes, measured bytes); empty
    /// unless both sides say.
    pub at_peak: Vec<(String, u64, u64)>,
    /// Idle over step time, averaged over every rank, [predicted, measured], when the
    /// measurement has more than one rank (a pipeline's bubble); set by the caller.
    pub bubble_fraction: Option<[f64; 2]>,
    /// Allocated memory over the step, predicted against the snapshot's replay; set by the
    /// caller when a snapshot is given.
    pub memory_timeline: Option<super::MemoryTimeline>,
}

pub fn compare_classes(
    predicted: &ClassTimes,
    measured: &ClassTimes,
    peak_reserved_measured_bytes: Option<u64>,
) -> ClassComparison {
    let s = |ns: u64| ns as f64 * 1e-9;
    let classes = WorkClass::ALL
        .iter()
        .map(|&c| {
            let (p, m) = (s(predicted.get(c)), s(measured.get(c)));
            ClassRow {
                class: c,
                predicted_s: p,
                measured_s: m,
                difference_s: m - p,
            }
        })
        .collect();
    let (p, m) = (s(predicted.step_ns), s(measured.step_ns));
    let peak_error = match (
        predicted.peak_allocated_bytes,
        measured.peak_allocated_bytes,
    ) {
        (Some(p), Some(m)) => super::relative_error(p as f64, m as f64),
        _ => None,
    };
    ClassComparison {
        step_time_predicted_s: p,
        step_time_measured_s: m,
        step_time_error: super::relative_error(p, m).unwrap_or(0.0),
        classes,
        peak_allocated_predicted_bytes: predicted.peak_allocated_bytes,
        peak_allocated_measured_bytes: measured.peak_allocated_bytes,
        peak_allocated_error: peak_error,
        peak_reserved_measured_bytes,
        collectives: collective_rows(&predicted.collectives, &measured.collectives),
        bubble_fraction: None,
        memory_timeline: None,
        at_peak: if predicted.at_peak.is_empty() || measured.at_peak.is_empty() {
            Vec::new()
        } else {
            predicted
                .at_peak
                .iter()
                .map(|(k, p)| {
                    let m = measured
                        .at_peak
                        .iter()
                        .filter(|(mk, _)| mk == k)
                        .map(|(_, b)| *b)
                        .sum();
                    (k.clone(), *p, m)
                })
                .collect()
        },
    }
}

impl ClassComparison {
    /// The comparison as a table for people.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let pct = |x: f64| format!("{:+.1}%", 100.0 * x);
        let _ = writeln!(
            out,
            "step time     predicted {:.1} ms, measured {:.1} ms, error {}",
            self.step_time_predicted_s * 1e3,
            self.step_time_measured_s * 1e3,
            pct(self.step_time_error)
        );
        let _ = writeln!(
            out,
            "\n{:<14} {:>12} {:>12} {:>12} {:>8}",
            "class", "predicted ms", "measured ms", "diff ms", "share"
        );
        for r in &self.classes {
            let share = if self.step_time_measured_s > 0.0 {
                r.measured_s / self.step_time_measured_s
            } else {
                0.0
            };
            let _ = writeln!(
                out,
                "{:<14} {:>12.1} {:>12.1} {:>+12.1} {:>7.1}%",
                r.class.name(),
                r.predicted_s * 1e3,
                r.measured_s * 1e3,
                r.difference_s * 1e3,
                100.0 * share
            );
        }
        if let Some([p, m]) = self.bubble_fraction {
            let _ = writeln!(
                out,
                "idle, all ranks predicted {:.1}%, measured {:.1}% of the step",
                100.0 * p,
                100.0 * m
            );
        }
        if !self.collectives.is_empty() {
            let _ = writeln!(
                out,
                "\n{:<16} {:>14} {:>9} {:>9} {:>12} {:>12}",
                "collective", "size", "pred. n", "meas. n", "predicted ms", "measured ms"
            );
            for r in &self.collectives {
                let _ = writeln!(
                    out,
                    "{:<16} {:>14} {:>9} {:>9} {:>12.2} {:>12.2}",
                    r.kind,
                    r.size,
                    r.predicted_calls,
                    r.measured_calls,
                    r.predicted_s * 1e3,
                    r.measured_s * 1e3
                );
            }
        }
        let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
        if let (Some(p), Some(m)) = (
            self.peak_allocated_predicted_bytes,
            self.peak_allocated_measured_bytes,
        ) {
            let _ = write!(
                out,
                "\npeak allocated predicted {:.2} GiB, measured {:.2} GiB, error {}",
                gib(p),
                gib(m),
                self.peak_allocated_error.map_or("-".into(), pct)
            );
            if let Some(r) = self.peak_reserved_measured_bytes {
                let _ = write!(out, " (measured reserved {:.2} GiB)", gib(r));
            }
            out.push('\n');
        }
        if !self.at_peak.is_empty() {
            let _ = writeln!(
                out,
                "\n{:<14} {:>14} {:>14}",
                "at the peak", "predicted GiB", "measured GiB"
            );
            for (k, p, m) in &self.at_peak {
                let _ = writeln!(out, "{:<14} {:>14.2} {:>14.2}", k, gib(*p), gib(*m));
            }
        }
        if let Some(t) = &self.memory_timeline {
            out.push_str(&t.to_text());
        }
        out
    }
}
