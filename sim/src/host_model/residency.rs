//! GEMM operands that other work pushed out of a core's private cache. The host backend runs
//! every compute op of a rank on one reused workspace, so an op whose working set fits the
//! private cache usually finds its operands where the rank's last op left them, and the cost
//! model prices it warm (`cost::Analytic`, `gemm.operand_*`). Two things break that:
//! - the step's first op runs after the previous step's optimizer, whose pass streamed the
//!   model state through the cache: in `single.toml` and `pp.toml` the first forward op ran
//!   25-105 µs over its warm price (docs/journal/2026-11-validation-history.md, 2026-11-23);
//! - on a shared core another rank's op ran in between, on its own workspace.
//!
//! The engine keeps, per core, the last compute op's rank and working set, and charges the
//! fraction of the op's reload (`CostModel::operand_residency`) an LRU cache of the profile's
//! size would have lost: after the same rank's op, what that op's working set exceeds the cache
//! by (the two share the workspace); after another rank's op, what the two working sets
//! together exceed it by. At a step's start a core's last op is taken to be its rank's last
//! compute op of the step (the optimizer), as in the steady state of a run. Timed through the
//! backend after growing amounts of other traffic, an op slowed from where the two together
//! passed the L2 and levelled off at about the reload the cost model charges.

/// What the cost model says about one compute op's operands (`CostModel::operand_residency`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Residency {
    /// Bytes the op touches in its workspace.
    pub working_set_bytes: u64,
    /// The core's private cache.
    pub cache_bytes: u64,
    /// Extra time when every operand must be loaded again (0 when the op loads them anyway).
    pub reload_ns: u64,
}

impl Residency {
    /// The reload this op pays after `prev` (rank, working set) ran last on its core, `rank`
    /// being the op's own rank.
    pub fn reload_after_ns(&self, rank: u32, prev: (u32, u64)) -> u64 {
        let ws = self.working_set_bytes.max(1);
        let pushed_out = if prev.0 == rank {
            prev.1.saturating_sub(self.cache_bytes)
        } else {
            prev.1
                .saturating_add(self.working_set_bytes)
                .saturating_sub(self.cache_bytes)
        };
        let fraction = (pushed_out as f64 / ws as f64).min(1.0);
        (self.reload_ns as f64 * fraction).round() as u64
    }
}

/// Per program, `of` each compute op (by IR op index; `None` for every other op); `None` when
/// no op has one, so the engine skips the bookkeeping. The engine's per-op tables
/// (residencies, `host_model::aging`) are built by it.
pub(crate) fn per_compute_op<'a, T>(
    programs: impl Iterator<Item = &'a crate::schedule::Program>,
    of: impl Fn(&crate::schedule::ComputeOp) -> Option<T>,
) -> Option<Vec<Vec<Option<T>>>> {
    let table: Vec<Vec<Option<T>>> = programs
        .map(|p| {
            p.ops
                .iter()
                .map(|o| match &o.kind {
                    crate::schedule::OpKind::Compute(c) => of(c),
                    _ => None,
                })
                .collect()
        })
        .collect();
    table
        .iter()
        .any(|row| row.iter().any(Option::is_some))
        .then_some(table)
}

/// Per program, each op's residency (by IR op index), and the working set of its last compute
/// op, which a step starts after.
pub(crate) struct Residencies {
    ops: Vec<Vec<Option<Residency>>>,
    step_start_bytes: Vec<u64>,
    /// Per core: the rank and working set of the last compute op that started on it.
    last: Vec<Option<(u32, u64)>>,
}

impl Residencies {
    /// The table for `programs`, from `of(op)`; `None` when no op has a residency (GPU
    /// profiles), so the engine skips the bookkeeping.
    pub fn new<'a>(
        programs: impl Iterator<Item = &'a crate::schedule::Program>,
        of: impl Fn(&crate::schedule::ComputeOp) -> Option<Residency>,
    ) -> Option<Residencies> {
        let ops = per_compute_op(programs, of)?;
        let step_start_bytes = ops
            .iter()
            .map(|row| {
                row.iter()
                    .rev()
                    .flatten()
                    .next()
                    .map_or(0, |r| r.working_set_bytes)
            })
            .collect();
        Some(Residencies {
            ops,
            step_start_bytes,
            last: Vec::new(),
        })
    }

    /// Op `op` (IR index) of `program`, run by `rank`, starts on `core`: the reload it pays,
    /// and it becomes the core's last op.
    pub fn start(&mut self, core: usize, rank: u32, program: usize, op: u32) -> u64 {
        let Some(r) = self
            .ops
            .get(program)
            .and_then(|p| p.get(op as usize))
            .copied()
            .flatten()
        else {
            return 0;
        };
        if core >= self.last.len() {
            self.last.resize(core + 1, None);
        }
        let start = self.step_start_bytes.get(program).copied().unwrap_or(0);
        let prev = self.last[core].unwrap_or((rank, start));
        self.last[core] = Some((rank, r.working_set_bytes));
        r.reload_after_ns(rank, prev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn op(ws: u64) -> Residency {
        Residency {
            working_set_bytes: ws,
            cache_bytes: 2 * MIB,
            reload_ns: 80_000,
        }
    }

    #[test]
    fn after_the_same_ranks_op_only_what_it_pushed_past_the_cache_is_reloaded() {
        let o = op(MIB);
        assert_eq!(o.reload_after_ns(0, (0, MIB)), 0, "a small op before: warm");
        assert_eq!(
            o.reload_after_ns(0, (0, 2 * MIB)),
            0,
            "exactly the cache: warm"
        );
        assert_eq!(
            o.reload_after_ns(0, (0, 2 * MIB + MIB / 4)),
            20_000,
            "a quarter"
        );
        assert_eq!(
            o.reload_after_ns(0, (0, 64 * MIB)),
            80_000,
            "an optimizer: all of it"
        );
    }

    #[test]
    fn after_another_ranks_op_the_two_working_sets_share_the_cache() {
        let o = op(MIB);
        assert_eq!(o.reload_after_ns(0, (1, MIB)), 0, "both fit");
        assert_eq!(
            o.reload_after_ns(0, (1, MIB + MIB / 2)),
            40_000,
            "half pushed out"
        );
        assert_eq!(o.reload_after_ns(0, (1, 8 * MIB)), 80_000);
        // The same op after its own rank's op of that size stays warm.
        assert_eq!(o.reload_after_ns(0, (0, MIB + MIB / 2)), 0);
    }

    #[test]
    fn an_op_that_loads_its_operands_anyway_pays_nothing_more() {
        let o = Residency {
            reload_ns: 0,
            ..op(4 * MIB)
        };
        assert_eq!(o.reload_after_ns(0, (1, 64 * MIB)), 0);
    }
}
