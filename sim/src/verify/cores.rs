//! How each shared CPU core spent a step, both ways: the time some op of one of its ranks ran
//! and the idle holes between those ops. Where ranks share cores (a host profile's `[host]
//! cores`) a step is as long as its busiest core's ops plus the holes between them, and the
//! holes are where the host model is known to fall short: a measured `tp-pp.toml` step left
//! each core idle about 1.2 ms of 8 ms in holes of 3-60 µs (a thread woken late, a hand-off
//! between threads), the prediction about 0.3 ms (docs/journal/2026-11-validation-history.md,
//! 2026-11-24). `twin verify` prints both sides, so that a step-time error on shared cores can be
//! told apart from ops priced wrong.

use super::steps::median;
use crate::plan::Plan;
use crate::trace::Trace;
use serde::Serialize;

/// One side's cores, averaged over the cores that ran anything.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CoreActivity {
    /// Cores that ran at least one op.
    pub cores: u32,
    /// Mean over cores of the time some op ran on the core (ops that overlap count once).
    pub busy_s: f64,
    /// Mean over cores of the idle time between the core's first op start and last op end.
    pub idle_between_ops_s: f64,
    /// Mean over cores of the number of those idle holes.
    pub holes_per_core: f64,
    /// Median length of a hole, over every core's holes (0 without holes).
    pub median_hole_s: f64,
    /// The holes by what they separate: the op that ended last before the hole and the op
    /// that starts after it.
    pub holes_by_threads: HolesByThreads,
}

/// Holes (per core, as [`CoreActivity`]) by the threads on either side: the same thread
/// (rank and stream) going on, another thread of the same rank, or another rank's thread.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HolesByThreads {
    pub same_thread: Holes,
    pub same_rank: Holes,
    pub other_rank: Holes,
}

/// A count and a total, per core.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Holes {
    pub per_core: f64,
    pub idle_s: f64,
}

/// Both sides (`twin verify`'s `core_activity`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CoreActivities {
    pub predicted: CoreActivity,
    pub measured: CoreActivity,
}

impl CoreActivities {
    /// Both traces of a step on `plan` whose nodes' ranks share `cores_per_node` cores.
    pub fn new(plan: &Plan, predicted: &Trace, measured: &Trace, cores_per_node: u32) -> Self {
        CoreActivities {
            predicted: core_activity(plan, predicted, cores_per_node),
            measured: core_activity(plan, measured, cores_per_node),
        }
    }

    /// `twin verify`'s text: a heading, then a line per side.
    pub fn to_text(&self) -> String {
        let side = |a: &CoreActivity| {
            let h = &a.holes_by_threads;
            let part = |x: &Holes| format!("{:.2} ms ({:.0})", x.idle_s * 1e3, x.per_core);
            format!(
                "{:.2} ms in {:.0} holes (median {:.1} us; before the same thread {}, another \
                 thread of the rank {}, another rank {})",
                a.idle_between_ops_s * 1e3,
                a.holes_per_core,
                a.median_hole_s * 1e6,
                part(&h.same_thread),
                part(&h.same_rank),
                part(&h.other_rank)
            )
        };
        format!(
            "cores idle between ops, per core and step:\n  measured  {}\n  predicted {}\n",
            side(&self.measured),
            side(&self.predicted)
        )
    }
}

/// How the cores of `plan` (each node's ranks bound round-robin to `cores_per_node` cores, as
/// [`Plan::core_of`] binds them) spent the step of `trace`. Ops of zero length are left out:
/// they occupy no core. Empty for an empty trace.
pub fn core_activity(plan: &Plan, trace: &Trace, cores_per_node: u32) -> CoreActivity {
    // (core, start, end, thread), the thread being (rank, stream).
    let mut spans: Vec<(u32, u64, u64, (u32, usize))> = trace
        .events
        .iter()
        .filter(|e| e.end_ns > e.start_ns)
        .map(|e| {
            let thread = (e.rank, e.stream.index());
            (
                plan.core_of(cores_per_node, e.rank),
                e.start_ns,
                e.end_ns,
                thread,
            )
        })
        .collect();
    spans.sort_unstable();
    let mut holes_ns: Vec<f64> = Vec::new();
    // [same thread, same rank, other rank]: (count, ns).
    let mut by = [(0u64, 0u64); 3];
    let (mut cores, mut busy_ns, mut idle_ns) = (0u32, 0u64, 0u64);
    // Per core (spans sorted by core, then start): merge overlapping spans; a gap between
    // merged spans is a hole, after the thread of the span that ended last.
    let mut i = 0;
    while i < spans.len() {
        let (core, first_start, first_end, first_thread) = spans[i];
        cores += 1;
        let (mut run_start, mut run_end, mut last) = (first_start, first_end, first_thread);
        i += 1;
        while i < spans.len() && spans[i].0 == core {
            let (_, s, e, thread) = spans[i];
            if s > run_end {
                let hole = s - run_end;
                busy_ns += run_end - run_start;
                idle_ns += hole;
                holes_ns.push(hole as f64);
                let k = if thread == last {
                    0
                } else if thread.0 == last.0 {
                    1
                } else {
                    2
                };
                by[k].0 += 1;
                by[k].1 += hole;
                run_start = s;
            }
            if e > run_end {
                run_end = e;
                last = thread;
            }
            i += 1;
        }
        busy_ns += run_end - run_start;
    }
    if cores == 0 {
        return CoreActivity::default();
    }
    let per_core = |ns: u64| ns as f64 / f64::from(cores) * 1e-9;
    let holes = |(n, ns): (u64, u64)| Holes {
        per_core: n as f64 / f64::from(cores),
        idle_s: per_core(ns),
    };
    CoreActivity {
        cores,
        busy_s: per_core(busy_ns),
        idle_between_ops_s: per_core(idle_ns),
        holes_per_core: holes_ns.len() as f64 / f64::from(cores),
        median_hole_s: median(&holes_ns) * 1e-9,
        holes_by_threads: HolesByThreads {
            same_thread: holes(by[0]),
            same_rank: holes(by[1]),
            other_rank: holes(by[2]),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Stream;
    use crate::trace::TraceEvent;

    fn event(rank: u32, stream: Stream, start_ns: u64, end_ns: u64) -> TraceEvent {
        TraceEvent::span(rank, stream, start_ns, end_ns)
    }

    /// A plan of four ranks on one node (data parallel 4).
    fn plan() -> Plan {
        super::super::tests::predicted_layout(1, 1, 4, 0)
            .staged
            .plan
    }

    #[test]
    fn holes_are_the_gaps_between_a_cores_merged_ops() {
        let plan = plan();
        // Four ranks on one node, two cores: ranks 0 and 2 on core 0, 1 and 3 on core 1.
        assert_eq!(plan.core_of(2, 2), 0);
        let trace = Trace {
            events: vec![
                // Core 0: [0, 100) and [50, 120) overlap (one busy span), then a 30 ns hole,
                // [150, 200), a 100 ns hole, [300, 310).
                event(0, Stream::Compute, 0, 100),
                event(2, Stream::Tp, 50, 120),
                event(2, Stream::Compute, 150, 200),
                event(0, Stream::PpSend, 300, 310),
                // Core 1: one op; a zero-length op is no hole's end.
                event(1, Stream::Compute, 0, 400),
                event(3, Stream::Compute, 500, 500),
            ],
            memory: Vec::new(),
        };
        let a = core_activity(&plan, &trace, 2);
        assert_eq!(a.cores, 2);
        // Busy: core 0 120 + 50 + 10 = 180, core 1 400; idle between ops: 130 and 0.
        assert!((a.busy_s - 290e-9).abs() < 1e-15, "{a:?}");
        assert!((a.idle_between_ops_s - 65e-9).abs() < 1e-15, "{a:?}");
        assert_eq!(a.holes_per_core, 1.0);
        assert!((a.median_hole_s - 65e-9).abs() < 1e-15, "{a:?}");
        // Core 0's holes: after rank 2's tp op (it ended last, at 120) before rank 2's compute
        // op (same rank, 30 ns), and after that op before rank 0's send (other rank, 100 ns).
        let h = &a.holes_by_threads;
        assert_eq!(h.same_thread, Holes::default());
        assert_eq!((h.same_rank.per_core, h.other_rank.per_core), (0.5, 0.5));
        assert!((h.same_rank.idle_s - 15e-9).abs() < 1e-15, "{h:?}");
        assert!((h.other_rank.idle_s - 50e-9).abs() < 1e-15, "{h:?}");
        // A core per rank: rank 0's hole of 200 ns and rank 2's of 30; rank 3 ran nothing
        // that took time, so three cores count.
        let own = core_activity(&plan, &trace, 4);
        assert_eq!(own.cores, 3);
        assert!((own.holes_per_core - 2.0 / 3.0).abs() < 1e-12, "{own:?}");
        assert!((own.median_hole_s - 115e-9).abs() < 1e-15, "{own:?}");
        // Rank 2's compute op after its own tp op; rank 0's send after its compute op.
        assert_eq!(own.holes_by_threads.other_rank, Holes::default());
        assert!((own.holes_by_threads.same_rank.per_core - 2.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn a_hole_between_two_ops_of_one_thread_is_the_threads_own() {
        let plan = plan();
        let trace = Trace {
            events: vec![event(0, Stream::Tp, 0, 10), event(0, Stream::Tp, 14, 20)],
            memory: Vec::new(),
        };
        let a = core_activity(&plan, &trace, 2);
        assert_eq!(a.holes_by_threads.same_thread.per_core, 1.0);
        assert!((a.holes_by_threads.same_thread.idle_s - 4e-9).abs() < 1e-15);
    }

    #[test]
    fn an_empty_trace_has_no_cores() {
        let plan = plan();
        assert_eq!(
            core_activity(&plan, &Trace::default(), 2),
            CoreActivity::default()
        );
        let both = CoreActivities::new(&plan, &Trace::default(), &Trace::default(), 2);
        assert!(both.to_text().starts_with("cores idle between ops"));
    }
}
