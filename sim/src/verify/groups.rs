//! Op-by-op matching of two traces and the grouping of ops by kind: compute by whether it
//! runs GEMMs and its phase, collectives by kind, group and size bucket, p2p by direction and
//! size bucket, so that the comparison says *which kind* of op the model gets wrong.
//!
//! Each op is timed by its own time: its span, less what it spent waiting for a CPU core that
//! other ranks' threads shared (the trace's `solo_ns`, kept by both executors on host
//! profiles). On a shared core the simulator runs a compute op beside the transfers that take
//! the core from it, stretched, while the runtime's turns run it whole and leave the transfers
//! for before or after it: spans then differ by the sharing, not by the op's cost (a `tp-pp`
//! backward weight GEMM read 0.23 ms predicted against 0.07 measured, own times 0.07 both).

use super::{relative_error, OpError, OpGroup};
use crate::schedule::{fmt_bytes, OpKind, Schedule};
use crate::trace::Trace;
use std::collections::BTreeMap;

/// Size buckets are powers of 4: [4^k, 4^(k+1)) bytes, named "16.0KiB-64.0KiB" ("0B" for 0).
pub fn size_bucket(bytes: u64) -> String {
    if bytes == 0 {
        return "0B".into();
    }
    let k = (63 - bytes.leading_zeros()) / 2;
    let lo = 1u64 << (2 * k);
    let hi = lo.saturating_mul(4);
    format!("{}-{}", fmt_bytes(lo), fmt_bytes(hi))
}

/// The (group, kind) op `op` of `rank` belongs to; `None` when the schedule has no such op.
pub fn group_of(schedule: &Schedule, rank: u32, op: u32) -> Option<(String, &'static str)> {
    let o = schedule.get_op(rank, op)?;
    Some(match &o.kind {
        OpKind::Compute(c) => {
            let kind = if c.gemms.is_empty() {
                "memory-bound"
            } else {
                "gemm"
            };
            (format!("{kind} {}", c.phase.short()), kind)
        }
        OpKind::Collective {
            kind, group, bytes, ..
        } => (
            format!("{} {group:?} {}", kind.name(), size_bucket(*bytes)),
            "collective",
        ),
        OpKind::Send { bytes, .. } => (format!("p2p send {}", size_bucket(*bytes)), "p2p"),
        OpKind::Recv { bytes, .. } => (format!("p2p recv {}", size_bucket(*bytes)), "p2p"),
        OpKind::Alloc {
            category, bytes, ..
        } => (
            format!("alloc {} {}", category.name(), size_bucket(*bytes)),
            "alloc",
        ),
        OpKind::Free { .. } => ("free".into(), "free"),
        OpKind::Checkpoint { .. } => ("checkpoint".into(), "checkpoint"),
        OpKind::HostCopy { bytes, to_host } => (
            format!(
                "host copy {} {}",
                if *to_host { "to-host" } else { "to-gpu" },
                size_bucket(*bytes)
            ),
            "host",
        ),
        OpKind::HostUpdate { .. } => ("host update".into(), "host"),
    })
}

/// Own time (ns) of every op in a trace, by (rank, op): its span less its waiting for a shared
/// core where the trace knows it (`solo_ns`), else its span.
fn durations(trace: &Trace) -> BTreeMap<(u32, u32), u64> {
    trace
        .events
        .iter()
        .map(|e| ((e.rank, e.op), e.own_ns()))
        .collect()
}

/// Whether either trace timed an op by less than its span (`durations`): the comparison then
/// says so.
pub(super) fn any_core_wait(predicted: &Trace, measured: &Trace) -> bool {
    [predicted, measured].iter().any(|t| {
        t.events
            .iter()
            .any(|e| e.own_ns() < e.end_ns.saturating_sub(e.start_ns))
    })
}

/// Larger absolute error first; ties by (rank, op) so the order is deterministic.
fn by_abs_error(a: &OpError, b: &OpError) -> std::cmp::Ordering {
    let ea = (a.measured_s - a.predicted_s).abs();
    let eb = (b.measured_s - b.predicted_s).abs();
    eb.total_cmp(&ea).then((a.rank, a.op).cmp(&(b.rank, b.op)))
}

/// Groups sorted by total absolute error, the `top` ops with the largest errors, and how many
/// ops only one trace has.
pub(super) fn compare_ops(
    schedule: &Schedule,
    predicted: &Trace,
    measured: &Trace,
    top: usize,
) -> (Vec<OpGroup>, Vec<OpError>, u64) {
    let p = durations(predicted);
    let m = durations(measured);
    let unmatched = p.keys().filter(|k| !m.contains_key(k)).count()
        + m.keys().filter(|k| !p.contains_key(k)).count();
    let mut groups: BTreeMap<String, OpGroup> = BTreeMap::new();
    let mut ops = Vec::new();
    for (&(rank, op), &pns) in &p {
        let Some(&mns) = m.get(&(rank, op)) else {
            continue;
        };
        let Some((group, kind)) = group_of(schedule, rank, op) else {
            continue;
        };
        let (ps, ms) = (pns as f64 * 1e-9, mns as f64 * 1e-9);
        let e = OpError {
            rank,
            op,
            name: schedule
                .get_op(rank, op)
                .map_or_else(String::new, |o| o.name()),
            group: group.clone(),
            predicted_s: ps,
            measured_s: ms,
            error: relative_error(ps, ms),
        };
        let g = groups.entry(group.clone()).or_insert_with(|| OpGroup {
            group,
            kind: kind.into(),
            ops: 0,
            predicted_s: 0.0,
            measured_s: 0.0,
            error: None,
            abs_error_s: 0.0,
            worst: None,
        });
        g.ops += 1;
        g.predicted_s += ps;
        g.measured_s += ms;
        g.abs_error_s += (ms - ps).abs();
        let worse = g.worst.as_ref().is_none_or(|w| by_abs_error(&e, w).is_lt());
        if worse {
            g.worst = Some(e.clone());
        }
        ops.push(e);
    }
    let mut groups: Vec<OpGroup> = groups
        .into_values()
        .map(|mut g| {
            g.error = if g.measured_s > 0.0 {
                relative_error(g.predicted_s, g.measured_s)
            } else {
                None
            };
            g
        })
        .collect();
    groups.sort_by(|a, b| {
        b.abs_error_s
            .total_cmp(&a.abs_error_s)
            .then_with(|| a.group.cmp(&b.group))
    });
    ops.sort_by(by_abs_error);
    ops.truncate(top);
    (groups, ops, unmatched as u64)
}
