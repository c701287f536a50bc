//! The critical path of one step's trace, summed by what it spent its time on. A step-time
//! error says *how much* the prediction missed by; the op table says which ops ran long; the
//! critical path says whether the missing time went into ops or into waits between them: an
//! op that could have started (its stream was free, its inputs were there) but started late
//! waited for a core, a thread, or the runtime. The simulator's own trace has no such waits
//! (an op starts when it can), so on the measured side they are time the model does not have.
//!
//! The walk starts at the op that ended last and steps back, each time to the predecessor
//! that released the op last: the op before it on its stream, one of its deps, the send that
//! fed a receive, or, for a collective, whatever released the member that joined last (a
//! measured collective starts when data first arrives, so its own start says little about
//! who was late), or, where ranks share CPU cores (a host profile's `[host] cores`), for a
//! compute op, the other rank's compute op on its core that ended last before it started (the
//! turn it waited for). The gap between that release and the op's start is a wait, named by the
//! kind of edge. Where the trace says when the executor issued the op (`issued_ns`: the host
//! runtime's stream thread found its deps done), the part of the gap before that is an "issue"
//! wait instead: the executor was late to notice the release (a thread waking, a core busy
//! with other work), as against waiting for the core's turn or for peers after issuing it.
//! For a collective the issue that counts is the member's whose release was last.

use crate::plan::Plan;
use crate::schedule::partners::{OpId, Partners};
use crate::schedule::{OpKind, Schedule};
use crate::trace::Trace;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// Where one step's critical path spent its time. Times in seconds; maps are keyed by name
/// (op kinds as in the op table: "gemm", "memory-bound", "collective", "p2p", "alloc",
/// "free", "checkpoint"; waits: "stream", "dependency", "transfer", "collective", "turn" (for
/// the core another rank's compute op held), "issue" (from a release to when the executor
/// issued the op, where the trace records it), and "start": from the step's first op to the
/// path's first).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CriticalPath {
    /// First op start to last op end over every rank.
    pub span_s: f64,
    /// Ops on the path.
    pub ops: u64,
    /// Time in ops on the path, by op kind.
    pub op_s: BTreeMap<String, f64>,
    /// Time waited between ops on the path, by the kind of edge waited on.
    pub wait_s: BTreeMap<String, f64>,
    /// The path op by op, in time order: which ops it runs through and where it waited.
    pub steps: Vec<PathStep>,
}

/// One op on a critical path, and the wait between it and the next op on the path.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PathStep {
    pub rank: u32,
    /// Index of the op in the rank's program.
    pub op: u32,
    /// The op's name in the schedule.
    pub name: String,
    /// Its start, from the step's first op, in seconds.
    pub start_s: f64,
    /// The time it counts on the path (its duration, or the part before the next op on the
    /// path starts, where the two overlap).
    pub on_path_s: f64,
    /// Then, before the next op on the path started: how long the executor took to issue it
    /// ("issue"), and how long it waited after that ...
    pub issue_wait_s: f64,
    pub wait_s: f64,
    /// ... for what: the kind of edge that released it ("stream", "dependency", "transfer",
    /// "collective", "turn"); empty for the last op.
    pub waited_on: String,
}

impl CriticalPath {
    pub fn op_total_s(&self) -> f64 {
        self.op_s.values().fold(0.0, |a, b| a + b)
    }
    pub fn wait_total_s(&self) -> f64 {
        self.wait_s.values().fold(0.0, |a, b| a + b)
    }
}

/// The critical paths of a predicted and a measured step, side by side (`twin verify`'s
/// `critical_path`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CriticalPaths {
    pub predicted: Option<CriticalPath>,
    pub measured: Option<CriticalPath>,
}

impl CriticalPaths {
    /// Both sides of `schedule` on `plan`; `cores`: the CPU cores each node's ranks share,
    /// when they do (a host profile's `[host] cores`).
    pub fn new(
        plan: &Plan,
        schedule: &Schedule,
        predicted: &Trace,
        measured: &Trace,
        cores: Option<u32>,
    ) -> Self {
        CriticalPaths {
            predicted: critical_path(plan, schedule, predicted, cores),
            measured: critical_path(plan, schedule, measured, cores),
        }
    }

    /// A table: time in ops and time waiting on the path, each by kind, both sides. Empty
    /// when neither side has a path.
    pub fn to_text(&self) -> String {
        let (p, m) = (
            self.predicted.clone().unwrap_or_default(),
            self.measured.clone().unwrap_or_default(),
        );
        if p.ops == 0 && m.ops == 0 {
            return String::new();
        }
        let ms = |v: f64| format!("{:.3} ms", v * 1e3);
        let row =
            |name: &str, a: f64, b: f64| format!("  {name:<22} {:>12} {:>12}\n", ms(a), ms(b));
        let mut t = format!(
            "critical path of the step (ops that ran late or long on it, and the waits between \
             them; the simulator starts an op as soon as it can)\n  {:<22} {:>12} {:>12}\n",
            "", "predicted", "measured"
        );
        t += &row("span", p.span_s, m.span_s);
        for (title, total, pm, mm) in [
            ("in ops", (p.op_total_s(), m.op_total_s()), &p.op_s, &m.op_s),
            (
                "waiting",
                (p.wait_total_s(), m.wait_total_s()),
                &p.wait_s,
                &m.wait_s,
            ),
        ] {
            t += &row(title, total.0, total.1);
            let keys: BTreeSet<&String> = pm.keys().chain(mm.keys()).collect();
            for k in keys {
                let get = |x: &BTreeMap<String, f64>| x.get(k).copied().unwrap_or(0.0);
                t += &row(&format!("  {k}"), get(pm), get(mm));
            }
        }
        t
    }
}

/// How an op is released by a predecessor.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Edge {
    /// The op before it on its stream ended.
    Stream,
    /// One of its deps ended.
    Dependency,
    /// The matching send started (a receive can start no earlier).
    Transfer,
    /// A member of its collective was released (by its stream or a dep).
    Collective,
    /// Another rank's compute op on its core ended (its turn at the core).
    Turn,
}

impl Edge {
    fn name(self) -> &'static str {
        match self {
            Edge::Stream => "stream",
            Edge::Dependency => "dependency",
            Edge::Transfer => "transfer",
            Edge::Collective => "collective",
            Edge::Turn => "turn",
        }
    }
}

/// The critical path of `trace`, a step of `schedule` on `plan`, whose ranks share `cores` CPU
/// cores per node when given. `None` for an empty trace.
pub fn critical_path(
    plan: &Plan,
    schedule: &Schedule,
    trace: &Trace,
    cores: Option<u32>,
) -> Option<CriticalPath> {
    let times: BTreeMap<OpId, (u64, u64)> = trace
        .events
        .iter()
        .map(|e| ((e.rank, e.op), (e.start_ns, e.end_ns)))
        .collect();
    let issued: BTreeMap<OpId, u64> = trace
        .events
        .iter()
        .filter_map(|e| Some(((e.rank, e.op), e.issued_ns?)))
        .collect();
    let turns = cores.map(|c| Turns::new(plan, schedule, &times, c));
    let first_start = times.values().map(|t| t.0).min()?;
    let (&last, &(_, last_end)) = times.iter().max_by_key(|(id, t)| (t.1, *id))?;
    let preds = Preds::new(plan, schedule);
    let mut path = CriticalPath {
        span_s: last_end.saturating_sub(first_start) as f64 * 1e-9,
        ..Default::default()
    };
    let mut seen = BTreeSet::new();
    let mut cur = last;
    // Where the part of the path after `cur` begins: each op on the path counts from its
    // start to the earlier of its end and this, the rest up to this is a wait. The sums then
    // add up to the span exactly (a send overlaps the receive it feeds; only the part before
    // the receive starts is on the path).
    let mut next_start = last_end;
    let mut waited_on = Edge::Stream;
    // When the op after `cur` on the path (or, for a collective, its member released last)
    // was issued, where the trace says.
    let mut next_issued: Option<u64> = None;
    // Bounded: every step moves to an op not seen before.
    for _ in 0..times.len() {
        if !seen.insert(cur) {
            break;
        }
        let Some(&(start, end)) = times.get(&cur) else {
            break;
        };
        let until = end.min(next_start).max(start);
        path.ops += 1;
        let kind = super::group_of(schedule, cur.0, cur.1).map_or("other", |g| g.1);
        *path.op_s.entry(kind.into()).or_default() += (until - start) as f64 * 1e-9;
        let mut step = PathStep {
            rank: cur.0,
            op: cur.1,
            name: schedule
                .get_op(cur.0, cur.1)
                .map_or_else(|| format!("op {}", cur.1), |o| o.name()),
            start_s: start.saturating_sub(first_start) as f64 * 1e-9,
            on_path_s: (until - start) as f64 * 1e-9,
            waited_on: if path.steps.is_empty() {
                String::new()
            } else {
                waited_on.name().into()
            },
            ..Default::default()
        };
        if next_start > until {
            let split = next_issued.map_or(until, |i| i.clamp(until, next_start));
            step.issue_wait_s = (split - until) as f64 * 1e-9;
            step.wait_s = (next_start - split) as f64 * 1e-9;
            if split > until {
                *path.wait_s.entry("issue".into()).or_default() += step.issue_wait_s;
            }
            if next_start > split {
                *path.wait_s.entry(waited_on.name().into()).or_default() += step.wait_s;
            }
        }
        path.steps.push(step);
        // Never later than the op after it on the path: a measured op can start a little after
        // its successor (a receive starts where its send was issued, a rank's clock is aligned
        // to within microseconds), and the path's time must not be counted twice.
        next_start = start.min(next_start);
        let mut candidates = preds.of(schedule, cur);
        let turn = turns
            .as_ref()
            .filter(|_| is_compute(schedule, cur))
            .and_then(|t| t.before(plan, cur, start));
        if let Some(t) = turn {
            candidates.push((t, Edge::Turn, cur));
        }
        let release = candidates
            .into_iter()
            .filter(|(p, _, _)| !seen.contains(p))
            .filter_map(|(p, edge, released)| {
                let &(ps, pe) = times.get(&p)?;
                let at = if edge == Edge::Transfer { ps } else { pe };
                Some((at.min(start), edge, p, released))
            })
            .max();
        let Some((_, edge, p, released)) = release else {
            break;
        };
        waited_on = edge;
        next_issued = issued.get(&released).copied();
        cur = p;
    }
    if next_start > first_start {
        *path.wait_s.entry("start".into()).or_default() += (next_start - first_start) as f64 * 1e-9;
    }
    // Walked from the end: put it in time order.
    path.steps.reverse();
    Some(path)
}

/// The compute ops of each shared core, by end time: where ranks share a core, a compute op can
/// only start once the core is free of the other ranks' compute (the host backend's turns).
struct Turns {
    cores_per_node: u32,
    /// Per core: (end, op) of every compute op on it, ascending.
    ends: BTreeMap<u32, Vec<(u64, OpId)>>,
}

impl Turns {
    fn new(
        plan: &Plan,
        schedule: &Schedule,
        times: &BTreeMap<OpId, (u64, u64)>,
        cores_per_node: u32,
    ) -> Turns {
        let mut ends: BTreeMap<u32, Vec<(u64, OpId)>> = BTreeMap::new();
        for (&id, &(_, end)) in times {
            if is_compute(schedule, id) && id.0 < plan.world {
                let core = plan.core_of(cores_per_node, id.0);
                ends.entry(core).or_default().push((end, id));
            }
        }
        for v in ends.values_mut() {
            v.sort_unstable();
        }
        Turns {
            cores_per_node,
            ends,
        }
    }

    /// For compute op `id` that started at `start`: another rank's compute op on its core that
    /// ended last at or before `start`.
    fn before(&self, plan: &Plan, id: OpId, start: u64) -> Option<OpId> {
        if id.0 >= plan.world {
            return None;
        }
        let core = plan.core_of(self.cores_per_node, id.0);
        let on_core = self.ends.get(&core)?;
        let upto = on_core.partition_point(|&(end, _)| end <= start);
        on_core
            .get(..upto)?
            .iter()
            .rev()
            .find(|(_, other)| other.0 != id.0)
            .map(|&(_, other)| other)
    }
}

fn is_compute(schedule: &Schedule, (rank, op): OpId) -> bool {
    matches!(
        schedule.get_op(rank, op).map(|o| &o.kind),
        Some(OpKind::Compute(_))
    )
}

/// The predecessors of every op, resolved against the plan.
struct Preds<'a> {
    /// Per rank, per op: the op before it on its stream.
    stream_prev: Vec<Vec<Option<u32>>>,
    partners: Partners<'a>,
}

impl<'a> Preds<'a> {
    fn new(plan: &'a Plan, schedule: &Schedule) -> Preds<'a> {
        let stream_prev = (0..schedule.world())
            .map(|rank| {
                let ops = schedule.get_program(rank).map_or(&[][..], |p| &p.ops[..]);
                let mut last = BTreeMap::new();
                ops.iter()
                    .enumerate()
                    .map(|(i, op)| last.insert(op.stream, i as u32))
                    .collect()
            })
            .collect();
        Preds {
            stream_prev,
            partners: Partners::new(plan, schedule),
        }
    }

    /// The op's own releases: its stream predecessor and its deps, each with the op released
    /// (this one).
    fn local(&self, schedule: &Schedule, (rank, op): OpId) -> Vec<(OpId, Edge, OpId)> {
        let mut out = Vec::new();
        if let Some(Some(p)) = self
            .stream_prev
            .get(rank as usize)
            .and_then(|v| v.get(op as usize))
        {
            out.push(((rank, *p), Edge::Stream, (rank, op)));
        }
        if let Some(o) = schedule.get_op(rank, op) {
            out.extend(
                o.deps
                    .iter()
                    .map(|&d| ((rank, d), Edge::Dependency, (rank, op))),
            );
        }
        out
    }

    /// Every release of op `id`: (releasing op, kind of edge, the op it released: `id`, or for
    /// a collective the peer member it released).
    fn of(&self, schedule: &Schedule, id: OpId) -> Vec<(OpId, Edge, OpId)> {
        let mut out = self.local(schedule, id);
        if let Some(send) = self.partners.send_of(schedule, id) {
            out.push((send, Edge::Transfer, id));
        }
        for member in self.partners.members_of(schedule, id) {
            out.extend(
                self.local(schedule, member)
                    .into_iter()
                    .map(|(p, _, released)| (p, Edge::Collective, released)),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Prediction;

    fn predicted(tp: u32, pp: u32, dp: u32, zero: u8) -> Prediction {
        super::super::tests::predicted_layout(tp, pp, dp, zero)
    }

    fn path(p: &Prediction, t: &Trace) -> CriticalPath {
        critical_path(&p.staged.plan, &p.staged.schedule, t, None).unwrap()
    }

    #[test]
    fn ops_and_waits_add_up_to_the_span() {
        for (tp, pp, dp, zero) in [(2, 2, 1, 0), (1, 2, 2, 1), (1, 1, 2, 0), (1, 4, 1, 0)] {
            let p = predicted(tp, pp, dp, zero);
            let c = path(&p, p.result.trace.as_ref().unwrap());
            let sum = c.op_total_s() + c.wait_total_s();
            assert!(
                (sum - c.span_s).abs() <= 1e-9 * c.span_s.max(1.0) + 1e-9,
                "{tp}x{pp}x{dp}: {sum} vs {}",
                c.span_s
            );
            assert!((c.span_s - p.result.step_time_ns as f64 * 1e-9).abs() < 1e-6);
            assert!(c.op_s.get("gemm").copied().unwrap_or(0.0) > 0.0);
            assert!(c.ops > 2);
            // The steps are the same path op by op: one per op, in time order, and their
            // times and waits are the totals'.
            assert_eq!(c.steps.len() as u64, c.ops);
            assert!(c.steps.windows(2).all(|w| w[0].start_s <= w[1].start_s));
            let on_path: f64 = c.steps.iter().map(|s| s.on_path_s).sum();
            let waits: f64 = c.steps.iter().map(|s| s.issue_wait_s + s.wait_s).sum();
            let start = c.wait_s.get("start").copied().unwrap_or(0.0);
            assert!((on_path - c.op_total_s()).abs() < 1e-9, "{tp}x{pp}x{dp}");
            assert!(
                (waits + start - c.wait_total_s()).abs() < 1e-9,
                "{tp}x{pp}x{dp}"
            );
            assert!(c.steps.last().is_some_and(|s| s.waited_on.is_empty()));
            assert!(c.steps[..c.steps.len() - 1]
                .iter()
                .all(|s| !s.waited_on.is_empty() && !s.name.is_empty()));
        }
    }

    #[test]
    fn a_pipeline_path_crosses_stages_through_transfers() {
        let p = predicted(1, 4, 1, 0);
        let c = path(&p, p.result.trace.as_ref().unwrap());
        // Four stages' work cannot fit on one rank's stream: the path hands over at p2p ops.
        assert!(c.op_s.get("p2p").copied().unwrap_or(0.0) > 0.0, "{c:?}");
    }

    #[test]
    fn a_late_last_op_shows_as_a_wait_of_exactly_its_delay() {
        let p = predicted(2, 2, 1, 0);
        let before = path(&p, p.result.trace.as_ref().unwrap());
        let mut t = p.result.trace.clone().unwrap();
        let last = t
            .events
            .iter_mut()
            .max_by_key(|e| (e.end_ns, e.rank, e.op))
            .unwrap();
        let delay_ns = 250_000;
        last.start_ns += delay_ns;
        last.end_ns += delay_ns;
        let after = path(&p, &t);
        let grew = after.wait_total_s() - before.wait_total_s();
        assert!((grew - delay_ns as f64 * 1e-9).abs() < 1e-9, "{grew}");
        // The wait is on the op before the last, and names the edge that released it.
        let second_last = &after.steps[after.steps.len() - 2];
        let was = &before.steps[before.steps.len() - 2];
        let added = second_last.issue_wait_s + second_last.wait_s - was.issue_wait_s - was.wait_s;
        assert!((added - delay_ns as f64 * 1e-9).abs() < 1e-9, "{added}");
        assert_eq!(after.op_s, before.op_s);
        assert_eq!(after.ops, before.ops);
    }

    #[test]
    fn an_empty_trace_has_no_path() {
        let p = predicted(1, 1, 1, 0);
        assert_eq!(
            critical_path(&p.staged.plan, &p.staged.schedule, &Trace::default(), None),
            None
        );
    }

    #[test]
    fn on_a_shared_core_a_compute_op_is_released_by_the_other_ranks_turn() {
        // Two ranks, one compute op each, no transfers: rank 1's op runs after rank 0's, as
        // on one shared core.
        let p = predicted(1, 1, 2, 0);
        let plan = &p.staged.plan;
        let compute = |rank: u32| {
            p.staged
                .schedule
                .program(rank)
                .ops
                .iter()
                .find(|op| matches!(op.kind, OpKind::Compute(_)))
                .unwrap()
                .clone()
        };
        let schedule = Schedule {
            programs: vec![
                crate::schedule::Program {
                    stage: 0,
                    ops: vec![compute(0)],
                },
                crate::schedule::Program {
                    stage: 0,
                    ops: vec![compute(1)],
                },
            ],
            program_of: vec![0, 1],
        };
        let event = |rank: u32, start_ns: u64, end_ns: u64| {
            crate::trace::TraceEvent::span(rank, crate::schedule::Stream::Compute, start_ns, end_ns)
        };
        let trace = Trace {
            events: vec![event(0, 0, 100), event(1, 130, 200)],
            memory: Vec::new(),
        };
        assert_eq!(plan.world, 2);
        // Each rank on its own core (or cores unknown): the path is rank 1's op alone, after
        // 130 ns of "start".
        for cores in [None, Some(2)] {
            let c = critical_path(plan, &schedule, &trace, cores).unwrap();
            assert_eq!(c.ops, 1, "{cores:?}");
            assert!((c.wait_s["start"] - 130e-9).abs() < 1e-15, "{c:?}");
        }
        // One core: rank 1 waited 30 ns after rank 0's turn ended.
        let c = critical_path(plan, &schedule, &trace, Some(1)).unwrap();
        assert_eq!(c.ops, 2);
        assert!((c.wait_s["turn"] - 30e-9).abs() < 1e-15, "{c:?}");
        assert!(!c.wait_s.contains_key("start"), "{c:?}");
        assert!((c.op_total_s() + c.wait_total_s() - c.span_s).abs() < 1e-15);
        // Issued 20 ns after the turn ended: those 20 ns are the executor's, the last 10 the
        // turn's (the thread was woken and got the core late).
        let mut late = trace.clone();
        late.events[1].issued_ns = Some(120);
        let c = critical_path(plan, &schedule, &late, Some(1)).unwrap();
        assert!((c.wait_s["issue"] - 20e-9).abs() < 1e-15, "{c:?}");
        assert!((c.wait_s["turn"] - 10e-9).abs() < 1e-15, "{c:?}");
        // Issued before the turn ended (it took its place in line early): all of it is turn.
        late.events[1].issued_ns = Some(50);
        let c = critical_path(plan, &schedule, &late, Some(1)).unwrap();
        assert!(!c.wait_s.contains_key("issue"), "{c:?}");
        assert!((c.wait_s["turn"] - 30e-9).abs() < 1e-15, "{c:?}");
        // An issue time past the start (a clock glitch) counts the whole wait as issue, no
        // more.
        late.events[1].issued_ns = Some(500);
        let c = critical_path(plan, &schedule, &late, Some(1)).unwrap();
        assert!((c.wait_s["issue"] - 30e-9).abs() < 1e-15, "{c:?}");
        assert!((c.op_total_s() + c.wait_total_s() - c.span_s).abs() < 1e-15);
    }

    #[test]
    fn a_late_issue_moves_a_wait_to_issue_and_the_sum_is_kept() {
        let p = predicted(1, 2, 1, 0);
        let mut t = p.result.trace.clone().unwrap();
        // The simulator issues every op when it is released: no issue waits of its own.
        assert!(t.events.iter().all(|e| e.issued_ns.is_some()));
        let before = path(&p, &t);
        assert!(!before.wait_s.contains_key("issue"), "{before:?}");
        // Delay the last op and say the executor issued it only then.
        let last = t
            .events
            .iter_mut()
            .max_by_key(|e| (e.end_ns, e.rank, e.op))
            .unwrap();
        let delay_ns = 40_000;
        last.start_ns += delay_ns;
        last.end_ns += delay_ns;
        last.issued_ns = Some(last.start_ns - 10_000);
        let after = path(&p, &t);
        assert!((after.wait_s["issue"] - 30e-6).abs() < 1e-12, "{after:?}");
        let grew = after.wait_total_s() - before.wait_total_s();
        assert!((grew - 40e-6).abs() < 1e-12, "{grew}");
    }
}
