//! What the Timeline, Memory and Compare panes draw, built once per trace: one row of op
//! spans per rank, each op classified by kind, memory samples per rank, and the summary
//! figures (step, bubble, exposed communication, peak memory) computed the same way for a
//! predicted and a measured trace, so the two can be compared honestly.

use std::collections::BTreeMap;
use twin_sim::schedule::{MemCategory, OpKind, Schedule, Stream};
use twin_sim::trace::{MemorySample, Trace};

/// The kind of an op as the panes colour it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum OpClass {
    Forward,
    Backward,
    Recompute,
    Optimizer,
    TpComm,
    DpComm,
    PpComm,
    /// Context- and expert-parallel exchange.
    OtherComm,
    /// Checkpoint writes and offload traffic.
    Io,
}

impl OpClass {
    pub const ALL: [OpClass; 9] = [
        OpClass::Forward,
        OpClass::Backward,
        OpClass::Recompute,
        OpClass::Optimizer,
        OpClass::TpComm,
        OpClass::DpComm,
        OpClass::PpComm,
        OpClass::OtherComm,
        OpClass::Io,
    ];

    /// One character per class, so that the chart reads without colour too.
    pub fn glyph(self) -> char {
        match self {
            OpClass::Forward => 'F',
            OpClass::Backward => 'B',
            OpClass::Recompute => 'R',
            OpClass::Optimizer => 'O',
            OpClass::TpComm => 't',
            OpClass::DpComm => 'd',
            OpClass::PpComm => 'p',
            OpClass::OtherComm => 'x',
            OpClass::Io => 'w',
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            OpClass::Forward => "forward",
            OpClass::Backward => "backward",
            OpClass::Recompute => "recompute",
            OpClass::Optimizer => "optimizer",
            OpClass::TpComm => "TP comm",
            OpClass::DpComm => "DP comm",
            OpClass::PpComm => "PP comm",
            OpClass::OtherComm => "CP/EP comm",
            OpClass::Io => "I/O",
        }
    }

    pub fn is_compute(self) -> bool {
        matches!(
            self,
            OpClass::Forward | OpClass::Backward | OpClass::Recompute | OpClass::Optimizer
        )
    }
}

/// Classifies an op from its stream and its name (as [`twin_sim::schedule::Op::name`] writes
/// it, and as a trace file stores it), so simulated and measured ops get the same class.
pub fn classify(stream: Stream, name: &str) -> OpClass {
    match stream {
        Stream::Compute => {
            let first = name.split_whitespace().next().unwrap_or("");
            match first {
                "fwd" => OpClass::Forward,
                "recompute" => OpClass::Recompute,
                "optimizer" | "compress" => OpClass::Optimizer,
                _ => OpClass::Backward,
            }
        }
        Stream::Tp => OpClass::TpComm,
        Stream::Dp => OpClass::DpComm,
        Stream::PpSend | Stream::PpRecv => OpClass::PpComm,
        Stream::Cp | Stream::CpRecv | Stream::Ep => OpClass::OtherComm,
        Stream::Io => OpClass::Io,
    }
}

/// One executed op.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    /// Index of the op in its rank's program.
    pub op: u32,
    pub stream: Stream,
    pub class: OpClass,
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub bytes: u64,
    pub flops: u64,
    /// Its time alone on a shared CPU core, where it took longer (the trace's `solo_ns`).
    pub solo_ns: Option<u64>,
}

impl Span {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// Time within the span spent waiting for a shared core rather than working: the wall
    /// time beyond its solo time (0 where it ran alone).
    pub fn waiting_ns(&self) -> u64 {
        self.solo_ns
            .map_or(0, |s| self.duration_ns().saturating_sub(s))
    }

    /// Its own time: the span less its waiting for a shared core (what `twin verify`'s op
    /// table compares).
    pub fn own_ns(&self) -> u64 {
        self.duration_ns() - self.waiting_ns()
    }
}

/// The ops of one rank, by start time.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub rank: u32,
    pub stage: u32,
    pub spans: Vec<Span>,
}

/// Live memory of one rank from `time_ns` on, by [`MemCategory`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemPoint {
    pub time_ns: u64,
    pub bytes: [u64; MemCategory::COUNT],
}

impl MemPoint {
    pub fn total_bytes(&self) -> u64 {
        self.bytes.iter().fold(0u64, |a, b| a.saturating_add(*b))
    }
}

/// A whole step: rows by rank, memory per rank.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timeline {
    pub rows: Vec<Row>,
    /// Earliest start and latest end over all ops.
    pub start_ns: u64,
    pub end_ns: u64,
    pub memory: BTreeMap<u32, Vec<MemPoint>>,
}

/// What [`Timeline::stats`] measures of a step.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepStats {
    pub step_ns: u64,
    /// Mean over rows of time with neither compute nor communication, over the step.
    pub bubble_fraction: f64,
    /// Mean over rows of time with communication but no compute, over the step.
    pub exposed_comm_fraction: f64,
    pub peak_memory_bytes: u64,
}

/// The raw facts of one op, as a trace records them plus its name.
pub struct RawOp {
    pub rank: u32,
    pub op: u32,
    pub stream: Stream,
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub bytes: u64,
    pub flops: u64,
    /// The op's time alone on its core, where it shared one and took longer.
    pub solo_ns: Option<u64>,
}

impl Timeline {
    /// From a simulated trace: op names and kinds come from the schedule; allocs and frees
    /// (instants) are left out of the rows; `stage_of` names each rank's pipeline stage.
    pub fn from_trace(trace: &Trace, schedule: &Schedule, stage_of: impl Fn(u32) -> u32) -> Self {
        let ops = trace.events.iter().filter_map(|e| {
            let op = schedule.get_op(e.rank, e.op);
            if matches!(
                op.map(|o| &o.kind),
                Some(OpKind::Alloc { .. } | OpKind::Free { .. })
            ) {
                return None;
            }
            Some(RawOp {
                rank: e.rank,
                op: e.op,
                stream: e.stream,
                name: op.map_or_else(|| format!("op {}", e.op), |o| o.name()),
                start_ns: e.start_ns,
                end_ns: e.end_ns,
                bytes: e.bytes,
                flops: e.flops,
                solo_ns: e.solo_ns,
            })
        });
        Timeline::build(ops, &trace.memory, stage_of)
    }

    /// From ops and memory samples in any order.
    pub fn build(
        ops: impl Iterator<Item = RawOp>,
        memory: &[MemorySample],
        stage_of: impl Fn(u32) -> u32,
    ) -> Self {
        let mut rows: BTreeMap<u32, Vec<Span>> = BTreeMap::new();
        for o in ops {
            rows.entry(o.rank).or_default().push(Span {
                op: o.op,
                stream: o.stream,
                class: classify(o.stream, &o.name),
                name: o.name,
                start_ns: o.start_ns,
                end_ns: o.end_ns.max(o.start_ns),
                bytes: o.bytes,
                flops: o.flops,
                solo_ns: o.solo_ns,
            });
        }
        let mut mem: BTreeMap<u32, Vec<MemPoint>> = BTreeMap::new();
        for m in memory {
            mem.entry(m.rank).or_default().push(MemPoint {
                time_ns: m.time_ns,
                bytes: m.bytes,
            });
        }
        for points in mem.values_mut() {
            points.sort_by_key(|p| p.time_ns);
        }
        let mut start_ns = u64::MAX;
        let mut end_ns = 0;
        let rows: Vec<Row> = rows
            .into_iter()
            .map(|(rank, mut spans)| {
                spans.sort_by(|a, b| {
                    (a.start_ns, a.end_ns, a.stream, a.op)
                        .cmp(&(b.start_ns, b.end_ns, b.stream, b.op))
                });
                for s in &spans {
                    start_ns = start_ns.min(s.start_ns);
                    end_ns = end_ns.max(s.end_ns);
                }
                Row {
                    rank,
                    stage: stage_of(rank),
                    spans,
                }
            })
            .collect();
        if start_ns > end_ns {
            start_ns = 0;
        }
        Timeline {
            rows,
            start_ns,
            end_ns,
            memory: mem,
        }
    }

    pub fn span_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    pub fn row_of_rank(&self, rank: u32) -> Option<&Row> {
        self.rows.iter().find(|r| r.rank == rank)
    }

    /// Step time, bubble and exposed communication (from the rows), peak memory (from the
    /// samples): the same arithmetic for a predicted and for a measured step. Where an op
    /// says how long it would have taken alone (`solo_ns`: a prediction whose ranks share CPU
    /// cores), the rest of its span counts as idle, as the simulator's report counts it
    /// (twin-sim's `host_model::share`), so the pane and `twin simulate` agree.
    pub fn stats(&self) -> StepStats {
        let step_ns = self.span_ns();
        let (mut idle, mut exposed) = (0.0, 0.0);
        for row in &self.rows {
            let compute = merge(row.spans.iter().filter(|s| s.class.is_compute()));
            let busy = merge(row.spans.iter());
            let compute_ns: u64 = compute.iter().map(|(a, b)| b - a).sum();
            let busy_ns: u64 = busy.iter().map(|(a, b)| b - a).sum();
            let waiting = |compute: bool| -> u64 {
                row.spans
                    .iter()
                    .filter(|s| s.class.is_compute() == compute)
                    .map(Span::waiting_ns)
                    .sum()
            };
            let comm_ns = busy_ns.saturating_sub(compute_ns);
            let (wc, wm) = (waiting(true).min(compute_ns), waiting(false).min(comm_ns));
            idle += (step_ns.saturating_sub(busy_ns) + wc + wm) as f64;
            exposed += (comm_ns - wm) as f64;
        }
        let den = self.rows.len() as f64 * step_ns as f64;
        let frac = |x: f64| if den > 0.0 { x / den } else { 0.0 };
        StepStats {
            step_ns,
            bubble_fraction: frac(idle),
            exposed_comm_fraction: frac(exposed),
            peak_memory_bytes: self.peak_memory().map_or(0, |(_, p)| p.total_bytes()),
        }
    }

    /// The rank and sample with the highest total live memory (the first such on ties).
    pub fn peak_memory(&self) -> Option<(u32, MemPoint)> {
        let mut best: Option<(u32, MemPoint)> = None;
        for (&rank, points) in &self.memory {
            for p in points {
                if best.is_none_or(|(_, b)| p.total_bytes() > b.total_bytes()) {
                    best = Some((rank, *p));
                }
            }
        }
        best
    }

    /// The sample of `rank` with its highest total (the first such).
    pub fn rank_peak(&self, rank: u32) -> Option<MemPoint> {
        let points = self.memory.get(&rank)?;
        let mut best: Option<MemPoint> = None;
        for p in points {
            if best.is_none_or(|b| p.total_bytes() > b.total_bytes()) {
                best = Some(*p);
            }
        }
        best
    }
}

/// Union of the spans' intervals, as sorted disjoint (start, end) pairs.
fn merge<'a>(spans: impl Iterator<Item = &'a Span>) -> Vec<(u64, u64)> {
    let mut iv: Vec<(u64, u64)> = spans.map(|s| (s.start_ns, s.end_ns)).collect();
    iv.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(iv.len());
    for (a, b) in iv {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(rank: u32, op: u32, stream: Stream, name: &str, start: u64, end: u64) -> RawOp {
        RawOp {
            rank,
            op,
            stream,
            name: name.to_string(),
            start_ns: start,
            end_ns: end,
            bytes: 0,
            flops: 0,
            solo_ns: None,
        }
    }

    #[test]
    fn classes_follow_stream_and_name() {
        assert_eq!(classify(Stream::Compute, "fwd mb0"), OpClass::Forward);
        assert_eq!(classify(Stream::Compute, "bwd-w mb0"), OpClass::Backward);
        assert_eq!(
            classify(Stream::Compute, "recompute mb1"),
            OpClass::Recompute
        );
        assert_eq!(classify(Stream::Compute, "optimizer"), OpClass::Optimizer);
        assert_eq!(classify(Stream::Tp, "all-reduce"), OpClass::TpComm);
        assert_eq!(classify(Stream::PpRecv, "recv"), OpClass::PpComm);
        assert_eq!(classify(Stream::Dp, "reduce-scatter"), OpClass::DpComm);
    }

    #[test]
    fn time_waiting_for_a_shared_core_counts_as_idle() {
        // Rank 0: a compute op of 40 ns alone stretched to 0-80 by sharing, a transfer of
        // 10 ns alone stretched to 80-100. Rank 1: compute 0-100, alone.
        let mut ops = vec![
            raw(0, 0, Stream::Compute, "fwd", 0, 80),
            raw(0, 1, Stream::PpSend, "send", 80, 100),
            raw(1, 0, Stream::Compute, "bwd", 0, 100),
        ];
        ops[0].solo_ns = Some(40);
        ops[1].solo_ns = Some(10);
        let s = Timeline::build(ops.into_iter(), &[], |_| 0).stats();
        assert!((s.bubble_fraction - 50.0 / 200.0).abs() < 1e-12, "{s:?}");
        assert!(
            (s.exposed_comm_fraction - 10.0 / 200.0).abs() < 1e-12,
            "{s:?}"
        );
        // A solo time longer than the span (not written by the simulator) is no waiting.
        let mut ops = vec![raw(0, 0, Stream::Compute, "fwd", 0, 80)];
        ops[0].solo_ns = Some(90);
        let s = Timeline::build(ops.into_iter(), &[], |_| 0).stats();
        assert_eq!(s.bubble_fraction, 0.0);
    }

    /// The pane's bubble of a predicted trace whose ranks share CPU cores, read back from its
    /// Chrome file as `twin tui FILE` reads it, is the simulator's own figure: counted from the
    /// spans alone, stretched compute was busy time (31% against 57% for `tp-pp.toml`).
    #[test]
    fn a_shared_core_prediction_reads_back_with_the_simulators_bubble() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let scenario = twin_sim::setup::load(&root.join("scenarios/host/tp-pp.toml"), &[]).unwrap();
        let profile =
            twin_sim::profile::load(&root.join("scenarios/profiles/host-example.toml")).unwrap();
        let opts = twin_sim::PredictOptions {
            trace: true,
            reproducible: true,
            ..Default::default()
        };
        let p = twin_sim::predict_with(&scenario, &opts, Some(&profile)).unwrap();
        let plan = &p.staged.plan;
        let json = p.trace_json().unwrap();
        let t = crate::measured::parse_chrome_json(&json, &|r| plan.stage_of(r)).unwrap();
        let (pane, sim) = (t.stats(), &p.report);
        assert!(
            (pane.bubble_fraction - sim.bubble_fraction).abs() < 0.005,
            "pane {} against simulate {}",
            pane.bubble_fraction,
            sim.bubble_fraction
        );
        assert!(
            (pane.exposed_comm_fraction - sim.exposed_comm_fraction).abs() < 0.005,
            "pane {} against simulate {}",
            pane.exposed_comm_fraction,
            sim.exposed_comm_fraction
        );
    }

    #[test]
    fn stats_split_step_into_compute_exposed_and_idle() {
        // Rank 0: compute 0-40, comm 30-60 (20 exposed), idle 60-100.
        // Rank 1: compute 0-100.
        let ops = vec![
            raw(0, 0, Stream::Compute, "fwd", 0, 40),
            raw(0, 1, Stream::Tp, "all-reduce", 30, 60),
            raw(1, 0, Stream::Compute, "bwd", 0, 100),
        ];
        let t = Timeline::build(ops.into_iter(), &[], |_| 0);
        let s = t.stats();
        assert_eq!(s.step_ns, 100);
        assert!((s.bubble_fraction - 40.0 / 200.0).abs() < 1e-12);
        assert!((s.exposed_comm_fraction - 20.0 / 200.0).abs() < 1e-12);
    }

    #[test]
    fn peak_memory_is_the_highest_total() {
        let mem = [
            MemorySample {
                rank: 0,
                time_ns: 5,
                bytes: [1, 0, 0, 0, 0, 0],
            },
            MemorySample {
                rank: 1,
                time_ns: 3,
                bytes: [1, 2, 3, 0, 0, 0],
            },
            MemorySample {
                rank: 1,
                time_ns: 9,
                bytes: [1, 0, 0, 0, 0, 0],
            },
        ];
        let t = Timeline::build(std::iter::empty(), &mem, |_| 0);
        let (rank, p) = t.peak_memory().unwrap();
        assert_eq!((rank, p.time_ns, p.total_bytes()), (1, 3, 6));
        assert_eq!(t.rank_peak(0).unwrap().total_bytes(), 1);
    }
}
