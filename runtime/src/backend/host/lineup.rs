//! A compute op takes its place in its core's line (`turns`) when it becomes ready, taken by
//! whichever thread made it ready, and not when its own stream thread next gets to run.
//!
//! The turns give each core's compute ops the order in which they took their tickets. A stream
//! thread that took its op's ticket itself, after it woke from waiting for the op's inputs,
//! would wait for the scheduler on a shared core: in `tp-pp.toml` such a compute op whose
//! collective had ended waited a median 91 µs (p90 248 µs) to be issued, while the other
//! rank on its core ran a GEMM and its collectives, and that rank's later-ready op took the
//! core first (the trace's `issued_ns`; docs/journal/2026-11-validation-history.md, 2026-11-24).
//! The simulator's turns serve ops in the order they became ready (twin-sim's `host_model::turns`),
//! as a GPU's scheduler would see them. So the thread that completes an op takes the ticket,
//! before it wakes anyone, for every stream's next compute op that the completion makes ready (with
//! nothing but ready allocations and frees before it); the stream thread then waits on that ticket.
//!
//! Each stream's [`Line`] records the one op a ticket was taken for, under its lock, so an op
//! gets exactly one ticket whichever thread takes it: a ticket never waited on would stop the
//! core's line for good.

use super::turns::{CoreTurns, Ticket};
use super::Job;
use std::sync::atomic::Ordering;
use twin_sim::schedule::OpKind;

/// The ticket taken for one stream's next compute op.
#[derive(Debug)]
pub(super) struct Line {
    /// Position (in the stream's op list) of the op the last ticket was taken for; `None`
    /// before any.
    pos: Option<usize>,
    /// That ticket's number, until the stream thread uses it.
    number: Option<u32>,
}

impl Line {
    pub(super) fn new() -> Line {
        Line {
            pos: None,
            number: None,
        }
    }
}

impl Job {
    /// Op `ending` (an op index) is about to be marked done: take a ticket for each stream's
    /// next compute op that its end makes ready, before the completion wakes any thread.
    pub(super) fn line_up(&self, turns: &CoreTurns, ending: u32) {
        for stream in 0..self.by_stream.len() {
            let Some(pos) = self.next_ready_compute(stream, ending) else {
                continue;
            };
            let Some(line) = self.lines.get(stream) else {
                continue;
            };
            let Ok(mut line) = line.lock() else {
                continue;
            };
            // Already in line (taken by another completion, or by the stream thread itself).
            if line.pos.is_some_and(|p| p >= pos) {
                continue;
            }
            line.pos = Some(pos);
            line.number = Some(turns.ticket().number());
        }
    }

    /// The ticket for the compute op at `pos` of `stream`: the one a completion took for it,
    /// or a new one.
    pub(super) fn ticket_at<'a>(
        &self,
        turns: &'a CoreTurns,
        stream: usize,
        pos: usize,
    ) -> Ticket<'a> {
        let Some(Ok(mut line)) = self.lines.get(stream).map(|l| l.lock()) else {
            return turns.ticket();
        };
        if line.pos == Some(pos) {
            if let Some(n) = line.number.take() {
                return turns.numbered(n);
            }
        }
        let t = turns.ticket();
        line.pos = Some(pos);
        line.number = None;
        t
    }

    /// Position of `stream`'s next compute op if it is ready once `ending` is done: the first
    /// op not done, after any allocations and frees whose deps are done, must be a compute op
    /// whose deps are done (`ending` counting as done, on its own stream too). `None`
    /// otherwise.
    pub(super) fn next_ready_compute(&self, stream: usize, ending: u32) -> Option<usize> {
        let ops = self.by_stream.get(stream)?;
        let hint = self.scan_from.get(stream)?;
        let done = |d: u32| d == ending || self.st.is_done(d);
        let is_done_at = |p: usize| {
            ops.get(p)
                .and_then(|&i| self.queued.get(i))
                .is_some_and(|q| self.st.is_done(q.index))
        };
        let mut first = hint.load(Ordering::Relaxed);
        while is_done_at(first) {
            first += 1;
        }
        // Done flags only ever get set: a later scan may start here.
        hint.fetch_max(first, Ordering::Relaxed);
        for (pos, q) in ops
            .iter()
            .enumerate()
            .skip(first)
            .filter_map(|(p, &i)| Some((p, self.queued.get(i)?)))
        {
            if q.index == ending {
                continue;
            }
            if !q.op.deps.iter().all(|&d| done(d)) {
                return None;
            }
            match q.op.kind {
                OpKind::Alloc { .. } | OpKind::Free { .. } => continue,
                OpKind::Compute(_) => return Some(pos),
                _ => return None,
            }
        }
        None
    }
}
