//! Turns the ranks' measurements into the simulator's shapes: one merged
//! [`twin_sim::trace::Trace`] (rebased so the step starts at 0) and a
//! [`twin_sim::outcome::SimResult`] built from measured busy / exposed / idle time, so that
//! [`twin_sim::report::Report::build`] gives the measured report with the simulator's own
//! definitions of bubble and exposed communication.

use crate::backend::host::HeldPeak;
use crate::exec::op_bytes;
use serde::{Deserialize, Serialize};
use twin_sim::outcome::{RankStats, SimResult};
use twin_sim::plan::Plan;
use twin_sim::report::Report;
use twin_sim::scenario::Scenario;
use twin_sim::schedule::{MemCategory, Op, OpKind, Schedule};
use twin_sim::trace::{MemorySample, Trace, TraceEvent};

/// What one rank measured, sent to rank 0 at the end.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RankMeasure {
    pub rank: u32,
    /// Per op of the rank's program, in program order: [start, end] of the last step on the
    /// aligned clock (or of the step [`select_step`] chose).
    pub op_times_ns: Vec<[u64; 2]>,
    /// The op times of the last [`KEPT_STEPS`] steps (or fewer), oldest first; the last entry
    /// is `op_times_ns`. Empty from a worker that does not keep them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_op_times_ns: Vec<Vec<[u64; 2]>>,
    /// Per op, as `op_times_ns`: when the backend issued it, where it knows (the trace's
    /// `issued_ns`). Empty from a backend that does not know.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub op_issued_ns: Vec<Option<u64>>,
    /// As `recent_op_times_ns`, for `op_issued_ns`: empty, or one entry per kept step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_op_issued_ns: Vec<Vec<Option<u64>>>,
    /// Per op, as `op_times_ns`: how long its thread waited for a core while it ran, where
    /// the backend knows (the host backend, `OpTiming::wait_ns`). Empty from a backend that
    /// does not know.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub op_wait_ns: Vec<Option<u64>>,
    /// As `recent_op_times_ns`, for `op_wait_ns`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_op_wait_ns: Vec<Vec<Option<u64>>>,
    /// Per step: [first op start, last op end] on the aligned clock.
    pub step_spans_ns: Vec<[u64; 2]>,
    pub peak: HeldPeak,
    pub clock_offset_ns: i64,
    /// Half the best ping-pong round trip: how far this rank's clock alignment can be off.
    pub clock_residual_ns: u64,
    /// The process's resident-set high-water mark (Linux VmHWM), when readable.
    pub rss_peak_bytes: Option<u64>,
    pub workspace_bytes: u64,
    /// Digest (hex) of the rank's model state after the last step, when it keeps one.
    #[serde(default)]
    pub final_weights_digest: Option<String>,
    /// What the rank's backend says a reader needs to know about what it ran: a fallback it
    /// took (FP8 GEMMs with other scales than the recipe's, or in bf16), what a number
    /// includes (the backend's `MemoryReport::notes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl RankMeasure {
    /// The measurement of a single-process run (the CUDA backend's `RankRun`): one rank, its
    /// own clock (offset and residual zero), the last step's op times.
    pub fn from_rank_run(run: &crate::exec::RankRun) -> RankMeasure {
        let m = &run.memory;
        let b = &m.peak_breakdown;
        let mut at_peak = [0u64; MemCategory::COUNT];
        for (c, v) in [
            (MemCategory::Weights, b.weights),
            (MemCategory::Grads, b.grads),
            (MemCategory::Optimizer, b.optimizer),
            (MemCategory::Activations, b.activations),
            (MemCategory::Buffers, b.buffers),
            (MemCategory::Reserved, b.reserved),
        ] {
            at_peak[c as usize] = v;
        }
        RankMeasure {
            rank: run.rank,
            op_times_ns: run.events.iter().map(|e| [e.start_ns, e.end_ns]).collect(),
            recent_op_times_ns: Vec::new(),
            op_issued_ns: run.events.iter().map(|e| e.issued_ns).collect(),
            recent_op_issued_ns: Vec::new(),
            op_wait_ns: run.events.iter().map(|e| e.wait_ns).collect(),
            recent_op_wait_ns: Vec::new(),
            step_spans_ns: run.step_times_ns.iter().map(|&t| [0, t]).collect(),
            peak: HeldPeak {
                peak_bytes: m.peak_bytes,
                at_peak,
                peak_op: None,
                peak_time_ns: 0,
                host_peak_bytes: m.host_peak_bytes,
            },
            clock_offset_ns: 0,
            clock_residual_ns: 0,
            rss_peak_bytes: None,
            workspace_bytes: run.device_memory.workspace_bytes,
            final_weights_digest: None,
            notes: run.device_memory.notes.clone(),
        }
    }
}

/// Quantiles of the runtime's own gaps between ops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct GapStats {
    pub count: u64,
    pub median_ns: u64,
    pub p90_ns: u64,
    pub max_ns: u64,
}

/// The merged measurement of a run.
pub struct Merged {
    pub result: SimResult,
    pub step_times_ns: Vec<u64>,
    pub gaps: GapStats,
    pub clock_residual_ns: u64,
}

fn program(schedule: &Schedule, rank: u32) -> &[Op] {
    schedule.get_program(rank).map_or(&[], |p| p.ops.as_slice())
}

/// How long op `i`, spanning `[s, e]`, waited for a core (at most its span); 0 where the rank
/// recorded nothing. Its span less this is the trace's `solo_ns`.
fn waited(m: &RankMeasure, i: usize, s: u64, e: u64) -> u64 {
    m.op_wait_ns
        .get(i)
        .copied()
        .flatten()
        .unwrap_or(0)
        .min(e.saturating_sub(s))
}

/// Total length of the union of `intervals` (sorted in place).
fn union_ns(intervals: &mut [(u64, u64)]) -> u64 {
    intervals.sort_unstable();
    let mut total = 0;
    let mut cur: Option<(u64, u64)> = None;
    for &(s, e) in intervals.iter() {
        match cur {
            Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                cur = Some((s, e));
            }
            None => cur = Some((s, e)),
        }
    }
    total + cur.map_or(0, |(s, e)| e - s)
}

fn is_comm(op: &Op) -> bool {
    matches!(
        op.kind,
        OpKind::Send { .. }
            | OpKind::Recv { .. }
            | OpKind::Collective { .. }
            | OpKind::Checkpoint { .. }
    )
}

/// How many steps' op times a worker keeps for [`select_step`] (verify measures 10 steps
/// after 5 warm-up by default; a long `twin run` keeps only its last 16).
pub const KEPT_STEPS: usize = 16;

/// Make each rank's `op_times_ns` those of one common step: of the steps from `first` on whose
/// op times every rank kept, the one whose span (first start to last end over every rank) is
/// the median (the lower one of an even count), so that the merged trace and per-op
/// comparison show a typical step rather than whichever came last. Returns the step's index,
/// or `None` (nothing changed) when no step qualifies.
pub fn select_step(ranks: &mut [RankMeasure], first: usize) -> Option<usize> {
    let steps = ranks.iter().map(|r| r.step_spans_ns.len()).min()?;
    let kept = ranks.iter().map(|r| r.recent_op_times_ns.len()).min()?;
    let lo = first.max(steps.saturating_sub(kept));
    let mut spans: Vec<(u64, usize)> = (lo..steps)
        .map(|k| {
            let s = ranks.iter().filter_map(|r| r.step_spans_ns.get(k));
            let start = s.clone().map(|x| x[0]).min().unwrap_or(0);
            let end = s.map(|x| x[1]).max().unwrap_or(start);
            (end.saturating_sub(start), k)
        })
        .collect();
    spans.sort_unstable();
    let (_, step) = *spans.get(spans.len().checked_sub(1)? / 2)?;
    for r in ranks.iter_mut() {
        let i = r.recent_op_times_ns.len() - (steps - step);
        if let Some(t) = r.recent_op_times_ns.get(i) {
            r.op_times_ns = t.clone();
        }
        let kept = r.recent_op_times_ns.len();
        pick_step(&r.recent_op_issued_ns, kept, i, &mut r.op_issued_ns);
        pick_step(&r.recent_op_wait_ns, kept, i, &mut r.op_wait_ns);
    }
    Some(step)
}

/// Sets `current` to step `i` of `recent`, a per-op record (issue times, waits) that is kept
/// step for step with the `kept` op times, or not at all: one of another length is cleared.
fn pick_step(recent: &[Vec<Option<u64>>], kept: usize, i: usize, current: &mut Vec<Option<u64>>) {
    if recent.len() != kept {
        current.clear();
    } else if let Some(t) = recent.get(i) {
        current.clone_from(t);
    }
}

/// Merge every rank's measurement. `ranks` is indexed by rank. A collective or a receive
/// starts where its parties had all issued it, when the ranks recorded issue times
/// (`launch::rendezvous`).
pub fn merge(plan: &Plan, schedule: &Schedule, ranks: &[RankMeasure]) -> Merged {
    let starts = super::rendezvous::starts(plan, schedule, ranks);
    let t0 = ranks
        .iter()
        .flat_map(|r| r.op_times_ns.iter().map(|t| t[0]))
        .min()
        .unwrap_or(0);
    let t_end = ranks
        .iter()
        .flat_map(|r| r.op_times_ns.iter().map(|t| t[1]))
        .max()
        .unwrap_or(t0);
    let step_time_ns = t_end.saturating_sub(t0);
    let mut trace = Trace::default();
    let mut stats = Vec::with_capacity(ranks.len());
    let mut gaps = Vec::new();
    for (m, starts) in ranks.iter().zip(&starts) {
        let ops = program(schedule, m.rank);
        let rel = |i: usize| {
            m.op_times_ns.get(i).map_or((0, 0), |t| {
                let start = starts.get(i).copied().unwrap_or(t[0]);
                (
                    start.saturating_sub(t0),
                    t[1].saturating_sub(t0).max(start.saturating_sub(t0)),
                )
            })
        };
        // Memory replay in completion order: live bytes after each op, and samples.
        let mut order: Vec<usize> = (0..ops.len().min(m.op_times_ns.len())).collect();
        order.sort_by_key(|&i| (rel(i).1, i));
        let mut live = [0u64; MemCategory::COUNT];
        let mut by_tag = std::collections::BTreeMap::new();
        let mut events = Vec::with_capacity(order.len());
        for &i in &order {
            let Some(op) = ops.get(i) else { continue };
            let (s, e) = rel(i);
            match &op.kind {
                OpKind::Alloc {
                    category,
                    device: twin_sim::schedule::Device::Gpu,
                    bytes,
                    tag,
                } => {
                    by_tag.insert(*tag, (*category, *bytes));
                    if let Some(l) = live.get_mut(*category as usize) {
                        *l += bytes;
                    }
                }
                OpKind::Free { tag } => {
                    if let Some((c, b)) = by_tag.remove(tag) {
                        if let Some(l) = live.get_mut(c as usize) {
                            *l = l.saturating_sub(b);
                        }
                    }
                }
                _ => {}
            }
            if matches!(op.kind, OpKind::Alloc { .. } | OpKind::Free { .. }) {
                trace.memory.push(MemorySample {
                    rank: m.rank,
                    time_ns: e,
                    bytes: live,
                });
            }
            let issued_ns = m
                .op_issued_ns
                .get(i)
                .copied()
                .flatten()
                .map(|t| t.saturating_sub(t0).min(s));
            let w = waited(m, i, s, e);
            let solo_ns = (w > 0).then(|| (e - s) - w);
            events.push(TraceEvent {
                rank: m.rank,
                stream: op.stream,
                op: i as u32,
                start_ns: s,
                end_ns: e,
                issued_ns,
                solo_ns,
                bytes: op_bytes(op),
                flops: match &op.kind {
                    OpKind::Compute(c) => c.flops,
                    _ => 0,
                },
                mem_bytes: live.iter().sum(),
            });
        }
        trace.events.extend(events);
        // Busy / exposed / idle, as the engine defines them.
        let mut compute: Vec<(u64, u64)> = Vec::new();
        let mut comm: Vec<(u64, u64)> = Vec::new();
        let (mut flops, mut model_flops, mut finish_ns) = (0u64, 0u64, 0u64);
        let mut model_attention_flops = (0u64, 0u64);
        // The part of an op's span its thread waited for a core is idle, for compute ops and
        // transfers alike, as the simulator counts a stretched op beyond its solo time
        // (`host_model::share`: waiting never exceeds the account it comes from).
        let (mut wait_compute, mut wait_comm) = (0u64, 0u64);
        for (i, op) in ops.iter().enumerate().take(m.op_times_ns.len()) {
            let (s, e) = rel(i);
            finish_ns = finish_ns.max(e);
            if let OpKind::Compute(c) = &op.kind {
                compute.push((s, e));
                wait_compute += waited(m, i, s, e);
                flops += c.flops;
                if c.phase.is_model_work() {
                    model_flops += c.flops;
                    let (full, masked) = c.attention_model_flops();
                    model_attention_flops.0 += full;
                    model_attention_flops.1 += masked;
                }
            } else if is_comm(op) {
                comm.push((s, e));
                wait_comm += waited(m, i, s, e);
            }
        }
        let busy = union_ns(&mut compute.clone());
        let mut both = compute;
        both.extend(comm);
        let any = union_ns(&mut both);
        let exposed = any - busy;
        let (wc, wm) = (wait_compute.min(busy), wait_comm.min(exposed));
        stats.push(RankStats {
            rank: m.rank,
            finish_ns,
            compute_busy_ns: busy - wc,
            comm_exposed_ns: exposed - wm,
            idle_ns: step_time_ns.saturating_sub(any) + wc + wm,
            flops,
            model_flops,
            model_attention_flops,
            peak_memory_bytes: m.peak.peak_bytes,
            peak_time_ns: m.peak.peak_time_ns.saturating_sub(t0),
            peak_op: m.peak.peak_op,
            memory_at_peak: m.peak.at_peak,
            host_memory_peak_bytes: m.peak.host_peak_bytes,
            // The host backend has no HBM limit to cross.
            over_capacity_op: None,
            over_capacity_time_ns: 0,
            end_memory_bytes: live.iter().sum(),
        });
        gaps.extend(ready_gaps(ops, &m.op_times_ns));
    }
    trace.events.sort_by_key(|e| (e.end_ns, e.rank, e.op));
    trace.memory.sort_by_key(|s| (s.rank, s.time_ns));
    let step_times_ns = (0..ranks
        .iter()
        .map(|r| r.step_spans_ns.len())
        .max()
        .unwrap_or(0))
        .map(|k| {
            let spans = ranks.iter().filter_map(|r| r.step_spans_ns.get(k));
            let lo = spans.clone().map(|s| s[0]).min().unwrap_or(0);
            let hi = spans.map(|s| s[1]).max().unwrap_or(lo);
            hi.saturating_sub(lo)
        })
        .collect();
    let events = trace.events.len() as u64;
    Merged {
        result: SimResult {
            step_time_ns,
            events,
            collapsed: false,
            ranks: stats,
            trace: Some(trace),
        },
        step_times_ns,
        gaps: gap_stats(gaps),
        clock_residual_ns: ranks.iter().map(|r| r.clock_residual_ns).max().unwrap_or(0),
    }
}

/// For every op that is not first on its stream: how long after it could start (its stream
/// predecessor and all its deps finished) it did start. This is the runtime's own overhead
/// (waking the thread, preparing the input pattern of a transfer, recording times).
fn ready_gaps(ops: &[Op], times: &[[u64; 2]]) -> Vec<u64> {
    let mut last_on_stream: [Option<usize>; twin_sim::schedule::Stream::COUNT] = Default::default();
    let mut out = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let Some(t) = times.get(i) else { break };
        let slot = last_on_stream.get_mut(op.stream.index());
        let prev = slot.as_ref().and_then(|s| **s);
        if let Some(p) = prev {
            let ready = op
                .deps
                .iter()
                .filter_map(|&d| times.get(d as usize).map(|x| x[1]))
                .chain(times.get(p).map(|x| x[1]))
                .max()
                .unwrap_or(0);
            out.push(t[0].saturating_sub(ready));
        }
        if let Some(s) = slot {
            *s = Some(i);
        }
    }
    out
}

fn gap_stats(mut gaps: Vec<u64>) -> GapStats {
    gaps.sort_unstable();
    let q = |f: f64| {
        gaps.get(((gaps.len() as f64 - 1.0) * f).round().max(0.0) as usize)
            .copied()
            .unwrap_or(0)
    };
    GapStats {
        count: gaps.len() as u64,
        median_ns: q(0.5),
        p90_ns: q(0.9),
        max_ns: gaps.last().copied().unwrap_or(0),
    }
}

/// The measured report: the simulator's report fields, plus what only a run has.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    #[serde(flatten)]
    pub report: Report,
    pub backend: String,
    /// Every step's time (warm-up included); the report's `step_time_s` is the last one.
    pub step_times_s: Vec<f64>,
    /// Worst clock-alignment uncertainty over ranks.
    pub clock_residual_ns: u64,
    pub op_gap: GapStats,
    /// Scale factors applied to the scenario before planning.
    pub scaled: Vec<String>,
    /// Per rank: resident-set high-water mark of its process, when known.
    pub rss_peak_bytes: Vec<Option<u64>>,
    /// Per rank: digest (hex) of its weights and optimizer state after the last step; equal
    /// digests mean equal state. Empty when the backend keeps no model state.
    pub final_weights_digest: Vec<String>,
}

/// What starts a report note that a rank's backend wrote ([`RankMeasure::notes`]), so a reader
/// of the report can tell them from the report's own.
pub const BACKEND_NOTE_PREFIX: &str = "measured: ";

/// Build the measured report.
pub fn report(
    scenario: &Scenario,
    plan: &Plan,
    schedule: &Schedule,
    ranks: &[RankMeasure],
    merged: &Merged,
    wall_s: f64,
    scaled: Vec<String>,
) -> RunReport {
    let mut report = Report::build(scenario, plan, schedule, &merged.result, wall_s);
    // The backends' notes, once each, after the report's own: a measurement that ran
    // otherwise than the scenario says must say so.
    for n in ranks.iter().flat_map(|r| &r.notes) {
        let n = format!("{BACKEND_NOTE_PREFIX}{n}");
        if !report.notes.contains(&n) {
            report.notes.push(n);
        }
    }
    RunReport {
        report,
        backend: "host".into(),
        step_times_s: merged
            .step_times_ns
            .iter()
            .map(|&t| t as f64 * 1e-9)
            .collect(),
        clock_residual_ns: merged.clock_residual_ns,
        op_gap: merged.gaps,
        scaled,
        rss_peak_bytes: ranks.iter().map(|r| r.rss_peak_bytes).collect(),
        final_weights_digest: ranks
            .iter()
            .filter_map(|r| r.final_weights_digest.clone())
            .collect(),
    }
}

impl RunReport {
    /// The `twin.run/1` document (docs/reference/json.md).
    pub fn to_json(&self) -> String {
        twin_sim::json::document("run", self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    pub fn to_text(&self) -> String {
        use std::fmt::Write as _;
        let what = match self.backend.as_str() {
            "host" => "the host backend (CPU processes over TCP)",
            "cuda" => "the cuda backend (cuBLAS and NCCL on the local GPU)",
            other => other,
        };
        let mut o = format!("measured on {what}\n");
        for s in &self.scaled {
            let _ = writeln!(o, "scaled          {s}");
        }
        // The shared report text says "simulated" for its event line; here they were run.
        for line in self.report.to_text().lines() {
            if line.starts_with("simulated ") {
                let _ = writeln!(
                    o,
                    "measured        {} ops run in {:.3} s (wall, bootstrap included)",
                    self.report.events, self.report.sim_wall_s
                );
            } else {
                let _ = writeln!(o, "{line}");
            }
        }
        let steps: Vec<String> = self
            .step_times_s
            .iter()
            .map(|s| format!("{:.3}", s * 1e3))
            .collect();
        let _ = writeln!(o, "step times      {} ms", steps.join(", "));
        let _ = writeln!(
            o,
            "clock residual  {:.1} us (worst rank)",
            self.clock_residual_ns as f64 / 1e3
        );
        let _ = writeln!(
            o,
            "op gaps         median {:.1} us, p90 {:.1} us, max {:.1} us over {} ops",
            self.op_gap.median_ns as f64 / 1e3,
            self.op_gap.p90_ns as f64 / 1e3,
            self.op_gap.max_ns as f64 / 1e3,
            self.op_gap.count
        );
        if !self.final_weights_digest.is_empty() {
            let _ = writeln!(
                o,
                "weights digest  {} (per rank, after the last step)",
                self.final_weights_digest.join(" ")
            );
        }
        o
    }
}

#[cfg(test)]
#[path = "measure_tests.rs"]
mod tests;
