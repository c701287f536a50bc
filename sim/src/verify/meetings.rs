//! Collectives that meet on a shared CPU core, both ways. Where ranks share cores (a host
//! profile's `[host] cores`), two groups' collectives can run on one core at once: in
//! `tp-pp.toml` each core holds a member of both tensor-parallel groups. Both groups' threads
//! then poll for peers whose cores the other group's poller holds, and a call that meets
//! another costs far more than fair sharing of the core would. Measured (sets 212-216,
//! docs/journal/2026-11-25-host-verify.md, 2026-11-24): 17 of 136 TP calls a step met one, at 107
//! µs each against 34 µs for a call alone; the prediction's timeline never has them meet. `twin
//! verify` reports both sides, so that an exposed-communication error on shared cores can be told
//! apart from a collective priced wrong.

use crate::plan::Plan;
use crate::schedule::{OpKind, Schedule};
use crate::trace::Trace;
use serde::Serialize;

/// One side's collective calls, in the step of its trace (every rank's calls counted).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CollectiveMeetings {
    /// Collective ops of the step that took time.
    pub calls: u32,
    /// Of those, the ones that overlapped, on their rank's core, a collective of another
    /// group.
    pub meeting_calls: u32,
    /// The meeting calls' time, summed over calls.
    pub meeting_s: f64,
    /// Mean time of a meeting call (0 without one).
    pub meeting_mean_s: f64,
    /// Mean time of a call that met none (0 without one).
    pub alone_mean_s: f64,
}

/// Both sides (`twin verify`'s `collective_meetings`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CollectiveMeetingsBoth {
    pub predicted: CollectiveMeetings,
    pub measured: CollectiveMeetings,
}

impl CollectiveMeetingsBoth {
    /// Both traces of a step of `schedule` on `plan`, whose nodes' ranks share
    /// `cores_per_node` cores.
    pub fn new(
        plan: &Plan,
        schedule: &Schedule,
        predicted: &Trace,
        measured: &Trace,
        cores_per_node: u32,
    ) -> Self {
        CollectiveMeetingsBoth {
            predicted: collective_meetings(plan, schedule, predicted, cores_per_node),
            measured: collective_meetings(plan, schedule, measured, cores_per_node),
        }
    }

    /// `twin verify`'s text: one line per side, none when neither side has a collective.
    pub fn to_text(&self) -> String {
        if self.predicted.calls == 0 && self.measured.calls == 0 {
            return String::new();
        }
        let side = |m: &CollectiveMeetings| {
            format!(
                "{} of {} calls met another group's on a core, {:.0} us each ({:.2} ms in all); \
                 alone {:.0} us each",
                m.meeting_calls,
                m.calls,
                m.meeting_mean_s * 1e6,
                m.meeting_s * 1e3,
                m.alone_mean_s * 1e6
            )
        };
        format!(
            "collectives meeting on a core, per step:\n  measured  {}\n  predicted {}\n",
            side(&self.measured),
            side(&self.predicted)
        )
    }
}

/// The collective calls of `trace` (a step of `schedule` on `plan`, each node's ranks bound
/// round-robin to `cores_per_node` cores as [`Plan::core_of`] binds them) and which of them
/// overlapped in time, on one core, a call of another group. Calls of zero length are left
/// out; an event naming no collective op of the schedule is not a call.
pub fn collective_meetings(
    plan: &Plan,
    schedule: &Schedule,
    trace: &Trace,
    cores_per_node: u32,
) -> CollectiveMeetings {
    // (core, start, end, group).
    let mut calls: Vec<(u32, u64, u64, u32)> = trace
        .events
        .iter()
        .filter(|e| e.end_ns > e.start_ns)
        .filter_map(|e| {
            let op = schedule.get_program(e.rank)?.ops.get(e.op as usize)?;
            let OpKind::Collective { group, .. } = op.kind else {
                return None;
            };
            let g = plan.group_of(e.rank, group);
            Some((
                plan.core_of(cores_per_node, e.rank),
                e.start_ns,
                e.end_ns,
                g,
            ))
        })
        .collect();
    calls.sort_unstable();
    let mut meets = vec![false; calls.len()];
    // Per core, calls by start: the ones still running when a call starts are the ones it
    // overlaps among those that started before it.
    let mut running: Vec<usize> = Vec::new();
    for i in 0..calls.len() {
        let (core, start, _, group) = calls[i];
        running.retain(|&j| calls[j].0 == core && calls[j].2 > start);
        for &j in &running {
            if calls[j].3 != group {
                meets[i] = true;
                meets[j] = true;
            }
        }
        running.push(i);
    }
    let (mut meeting_ns, mut alone_ns, mut meeting) = (0u64, 0u64, 0u32);
    for (c, &m) in calls.iter().zip(&meets) {
        if m {
            meeting += 1;
            meeting_ns += c.2 - c.1;
        } else {
            alone_ns += c.2 - c.1;
        }
    }
    let n = calls.len() as u32;
    let mean = |ns: u64, k: u32| {
        if k == 0 {
            0.0
        } else {
            ns as f64 / f64::from(k) * 1e-9
        }
    };
    CollectiveMeetings {
        calls: n,
        meeting_calls: meeting,
        meeting_s: meeting_ns as f64 * 1e-9,
        meeting_mean_s: mean(meeting_ns, meeting),
        alone_mean_s: mean(alone_ns, n - meeting),
    }
}

#[cfg(test)]
#[path = "meetings_tests.rs"]
mod tests;
