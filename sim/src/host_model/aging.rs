//! The optimizer's state leaving a shared last-level cache with time (`cost::StateAging`):
//! an optimizer op's price assumes it runs right after the last update, and the engine, which
//! knows when the op starts, adds what the time since then took away. The engine simulates one
//! step from time 0; in the steady state a rank's last update ended as its step began, so the
//! time since it is the op's start time.

use super::StateAging;
use crate::schedule::Program;

/// Per program, each op's aging (by IR index).
pub(crate) struct Agings {
    ops: Vec<Vec<Option<StateAging>>>,
}

impl Agings {
    /// The table for `programs`, from `of(op)`; `None` when no op ages (every profile without
    /// a state decay), so the engine skips the lookup.
    pub fn new<'a>(
        programs: impl Iterator<Item = &'a Program>,
        of: impl Fn(&crate::schedule::ComputeOp) -> Option<StateAging>,
    ) -> Option<Agings> {
        super::residency::per_compute_op(programs, of).map(|ops| Agings { ops })
    }

    /// What op `op` (IR index) of `program`, starting at `start_ns` into the step, pays for
    /// the state it lost since the last update.
    pub fn extra_ns(&self, program: usize, op: u32, start_ns: u64) -> u64 {
        self.ops
            .get(program)
            .and_then(|p| p.get(op as usize))
            .copied()
            .flatten()
            .map_or(0, |a| a.extra_ns(start_ns))
    }
}
