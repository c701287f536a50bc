//! Compute flows on no shared resource: the flow model's state when there is no flow network
//! and no shared cores, so that every flow is a compute op that runs at its own cap (`1`, or
//! `1 / (1 + slowdown)` while its rank communicates). Every GPU profile with an overlap
//! slowdown and an analytic network runs this way.
//!
//! It is the general path ([`super::Flows`] over [`crate::topology::MaxMin`]) with its state
//! packed into one record per flow, and it keeps that path's every choice, so runs are the
//! same to the nanosecond and events are pushed in the same order: flow ids are reused last
//! freed first, as the solver reuses them; a re-solve visits the flows dirtied since the last
//! one in the order they were dirtied, each once, as the solver's dirty list does
//! (`MaxMin::resolve`); a flow is rescheduled only when its rate changed (or is zero), with
//! the same arithmetic. What it drops is what the general path needs for shared resources:
//! the solver's paths and components, and the batch nodes that let flows of one transfer share
//! an event (a compute flow never shares one). A completion event carries the flow's id and the
//! version it was scheduled for.

use super::events::settle;
use super::{Finished, FLOW_TAG};
use crate::engine::queue::EventQueue;
use crate::topology::maxmin::sane;

/// One compute flow.
#[derive(Clone, Copy, Debug)]
struct Flow {
    /// Nanoseconds of solo work left as of `last_ns`.
    left: f64,
    /// The rate since `last_ns` (the last re-solve's).
    rate: f64,
    /// The rate limit, made sane as the solver makes it ([`sane`]).
    cap: f64,
    last_ns: u64,
    version: u32,
    /// The re-solve that last visited it (the solver's `seen_flow`).
    seen: u32,
    active: bool,
    rank: u32,
    op: u32,
    slot: u32,
}

#[derive(Default)]
pub(super) struct Solo {
    flows: Vec<Flow>,
    free: Vec<u32>,
    /// Flows added or re-capped since the last re-solve, in that order (repeats included).
    dirty: Vec<u32>,
    epoch: u32,
}

impl Solo {
    /// Adds compute op `op` of `rank` on stream slot `slot` with `work_ns` of solo work at
    /// `cap`; returns its id.
    pub fn add(
        &mut self,
        now: u64,
        (rank, op, slot): (u32, u32, u32),
        work_ns: f64,
        cap: f64,
    ) -> u32 {
        let fresh = |version: u32, seen: u32| Flow {
            left: work_ns,
            rate: 0.0,
            cap: sane(cap),
            last_ns: now,
            version,
            seen,
            active: true,
            rank,
            op,
            slot,
        };
        let id = match self.free.pop() {
            Some(id) => {
                let old = self.flows[id as usize];
                self.flows[id as usize] = fresh(old.version.wrapping_add(1), old.seen);
                id
            }
            None => {
                self.flows.push(fresh(1, 0));
                (self.flows.len() - 1) as u32
            }
        };
        self.dirty.push(id);
        id
    }

    /// Changes flow `id`'s cap (while it runs).
    pub fn set_cap(&mut self, id: u32, cap: f64) {
        if let Some(f) = self.flows.get_mut(id as usize).filter(|f| f.active) {
            f.cap = sane(cap);
            self.dirty.push(id);
        }
    }

    pub fn is_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// Gives each flow dirtied since the last call the rate its cap allows, and schedules a
    /// new completion for each whose rate changed.
    pub fn resolve(&mut self, now: u64, queue: &mut EventQueue) {
        if self.dirty.is_empty() {
            return;
        }
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.flows.iter_mut().for_each(|f| f.seen = 0);
            self.epoch = 1;
        }
        let dirty = std::mem::take(&mut self.dirty);
        for &id in &dirty {
            let Some(f) = self.flows.get_mut(id as usize) else {
                continue;
            };
            if !f.active || f.seen == self.epoch {
                continue;
            }
            f.seen = self.epoch;
            let rate = if f.cap.is_finite() { f.cap } else { f64::MAX };
            if f.rate == rate && rate != 0.0 {
                continue;
            }
            let finish;
            (f.left, finish) = settle(f.left, (f.rate, f.last_ns), rate, now);
            f.rate = rate;
            f.last_ns = now;
            f.version = f.version.wrapping_add(1);
            queue.push(finish, FLOW_TAG | id, f.version);
        }
        self.dirty = dirty;
        self.dirty.clear();
    }

    /// The completion event of flow `id`, scheduled for `version`, popped: the op's end, or
    /// nothing when a later re-solve moved it. Returns the stream slot it ran on with it.
    pub fn finish(&mut self, id: u32, version: u32) -> (Finished, Option<u32>) {
        let Some(f) = self.flows.get_mut(id as usize) else {
            return (Finished::Nothing, None);
        };
        if !f.active || f.version != version {
            return (Finished::Nothing, None);
        }
        f.version = f.version.wrapping_add(1);
        f.active = false;
        f.rate = 0.0;
        self.free.push(id);
        (
            Finished::Compute {
                rank: f.rank,
                op: f.op,
                own_ns: None,
            },
            Some(f.slot),
        )
    }
}
