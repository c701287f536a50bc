//! A program under construction: appends ops, hands out allocation tags and remembers the
//! last op of each stream, so the emitters never index or count by hand.

use crate::plan::GroupKind;
use crate::schedule::{
    CollectiveKind, ComputeOp, Deps, Device, Label, MemCategory, Op, OpKind, Program, Schedule,
    ScheduleError, Stream,
};
use std::cell::RefCell;

/// Op vectors kept per thread at most (a few schedules' worth).
const MAX_SPARE_OP_VECS: usize = 64;

thread_local! {
    /// Emptied op vectors of finished schedules, which later builders on the same thread
    /// start from: a sweep generates thousands of similar schedules per thread, and a fresh
    /// op vector of a few hundred KiB each time costs an allocation and page faults.
    static SPARE_OPS: RefCell<Vec<Vec<Op>>> = const { RefCell::new(Vec::new()) };
}

/// Hands a finished schedule's op vectors back (emptied) for the next builders on this
/// thread. Optional: dropping the schedule instead is equally correct.
pub fn recycle(schedule: Schedule) {
    let _ = SPARE_OPS.try_with(|spare| {
        if let Ok(mut spare) = spare.try_borrow_mut() {
            for program in schedule.programs {
                if spare.len() >= MAX_SPARE_OP_VECS {
                    break;
                }
                let mut ops = program.ops;
                ops.clear();
                spare.push(ops);
            }
        }
    });
}

/// Hands one finished program's op vector back (emptied) for the next builder on this
/// thread, which takes the most recently handed back first.
pub fn recycle_program(program: Program) {
    let _ = SPARE_OPS.try_with(|spare| {
        if let Ok(mut spare) = spare.try_borrow_mut() {
            if spare.len() < MAX_SPARE_OP_VECS {
                let mut ops = program.ops;
                ops.clear();
                spare.push(ops);
            }
        }
    });
}

/// An empty op vector: a recycled one when this thread has one.
fn spare_ops() -> Vec<Op> {
    SPARE_OPS
        .try_with(|spare| spare.try_borrow_mut().ok().and_then(|mut s| s.pop()))
        .ok()
        .flatten()
        .unwrap_or_default()
}

pub struct Builder {
    ops: Vec<Op>,
    next_tag: u32,
    /// Tag of the next ring context-parallel transfer: every rank of a cp group runs the same
    /// program, so the k-th ring send of one rank meets the k-th ring receive of the next.
    next_ring_tag: u32,
    tails: [Option<u32>; Stream::COUNT],
    /// Allocator slack: each transient GPU allocation (activations, buffers) comes with a
    /// reserved allocation of this fraction of its size, freed with it.
    slack_fraction: f64,
    /// The same for every host allocation (DeepSpeed accounting's buffer factor).
    host_slack_fraction: f64,
}

/// A live allocation: its tag, and the tag of its allocator slack if it has one, to free them
/// later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocTag {
    tag: u32,
    slack: Option<u32>,
}

impl Builder {
    /// A builder whose transient GPU allocations carry `fraction` of allocator slack, and
    /// whose host allocations carry `host_fraction`.
    pub fn with_slack(fraction: f64, host_fraction: f64) -> Builder {
        let finite = |f: f64| if f.is_finite() { f } else { 0.0 };
        Builder {
            ops: spare_ops(),
            next_tag: 0,
            next_ring_tag: 0,
            tails: [None; Stream::COUNT],
            slack_fraction: finite(fraction),
            host_slack_fraction: finite(host_fraction),
        }
    }

    /// Room for `additional` more ops, so that a program of known rough size is not copied
    /// each time its op vector grows (ops are large; the copies showed in sweep profiles).
    pub fn reserve(&mut self, additional: usize) {
        if self.ops.is_empty() && self.ops.capacity() < additional {
            // A recycled vector too small is replaced, not grown: growing would copy its
            // whole old buffer, although it holds nothing.
            self.ops = Vec::with_capacity(additional);
        } else {
            self.ops.reserve(additional);
        }
    }

    fn new_tag(&mut self) -> Result<u32, ScheduleError> {
        let tag = self.next_tag;
        self.next_tag = self
            .next_tag
            .checked_add(1)
            .ok_or_else(|| ScheduleError::TooLarge("allocation tags in one program".into()))?;
        Ok(tag)
    }

    /// A fresh tag for one ring context-parallel send and its receive.
    pub fn ring_tag(&mut self) -> Result<u32, ScheduleError> {
        let tag = self.next_ring_tag;
        self.next_ring_tag = self
            .next_ring_tag
            .checked_add(1)
            .ok_or_else(|| ScheduleError::TooLarge("ring transfers in one program".into()))?;
        Ok(tag)
    }

    pub fn push(
        &mut self,
        stream: Stream,
        kind: OpKind,
        deps: impl Into<Deps>,
        label: Label,
    ) -> Result<u32, ScheduleError> {
        let idx = u32::try_from(self.ops.len())
            .ok()
            .filter(|&i| i < u32::MAX)
            .ok_or_else(|| ScheduleError::TooLarge("ops in one program".into()))?;
        let mut deps = deps.into();
        deps.sort_dedup();
        self.ops.push(Op {
            stream,
            kind,
            deps,
            label,
        });
        self.tails[stream.index()] = Some(idx);
        Ok(idx)
    }

    pub fn compute(
        &mut self,
        op: ComputeOp,
        deps: impl Into<Deps>,
        label: Label,
    ) -> Result<u32, ScheduleError> {
        self.push(Stream::Compute, OpKind::Compute(op), deps, label)
    }

    /// A collective on the stream that carries its group kind.
    pub fn collective(
        &mut self,
        kind: CollectiveKind,
        group: GroupKind,
        bytes: u64,
        calls: u32,
        deps: impl Into<Deps>,
        label: Label,
    ) -> Result<u32, ScheduleError> {
        self.push(
            stream_for(group),
            OpKind::Collective {
                kind,
                group,
                bytes,
                calls,
            },
            deps,
            label,
        )
    }

    /// Allocate `bytes`; nothing is emitted (and `None` returned) for zero bytes.
    pub fn alloc(
        &mut self,
        stream: Stream,
        category: MemCategory,
        device: Device,
        bytes: u64,
        deps: impl Into<Deps>,
        label: Label,
    ) -> Result<Option<AllocTag>, ScheduleError> {
        if bytes == 0 {
            return Ok(None);
        }
        let tag = self.new_tag()?;
        let op = self.push(
            stream,
            OpKind::Alloc {
                category,
                device,
                bytes,
                tag,
            },
            deps,
            label,
        )?;
        let transient = matches!(category, MemCategory::Activations | MemCategory::Buffers);
        let fraction = match device {
            Device::Gpu if transient => self.slack_fraction,
            Device::Gpu => 0.0,
            Device::Host => self.host_slack_fraction,
        };
        let slack_bytes = (bytes as f64 * fraction).ceil();
        let slack = if slack_bytes >= 1.0 {
            let slack_tag = self.new_tag()?;
            self.push(
                stream,
                OpKind::Alloc {
                    category: MemCategory::Reserved,
                    device,
                    // Saturating float-to-int conversion; fractions are at most 1.
                    bytes: slack_bytes as u64,
                    tag: slack_tag,
                },
                [op],
                label,
            )?;
            Some(slack_tag)
        } else {
            None
        };
        Ok(Some(AllocTag { tag, slack }))
    }

    pub fn free(
        &mut self,
        stream: Stream,
        tag: Option<AllocTag>,
        deps: impl Into<Deps>,
        label: Label,
    ) -> Result<(), ScheduleError> {
        if let Some(AllocTag { tag, slack }) = tag {
            let free = self.push(stream, OpKind::Free { tag }, deps, label)?;
            if let Some(tag) = slack {
                self.push(stream, OpKind::Free { tag }, [free], label)?;
            }
        }
        Ok(())
    }

    /// The last op of every stream that has one.
    pub fn tails(&self) -> Deps {
        self.tails.iter().flatten().copied().collect()
    }

    pub fn finish(self, stage: u32) -> Program {
        Program {
            stage,
            ops: self.ops,
        }
    }
}

/// The stream that carries collectives of a group kind.
pub fn stream_for(group: GroupKind) -> Stream {
    match group {
        GroupKind::Tp | GroupKind::Etp => Stream::Tp,
        GroupKind::Cp => Stream::Cp,
        GroupKind::Ep => Stream::Ep,
        GroupKind::Dp
        | GroupKind::DenseDp
        | GroupKind::ExpertDp
        | GroupKind::Pp
        | GroupKind::World
        | GroupKind::DpReplica
        | GroupKind::PpMirror => Stream::Dp,
    }
}

#[cfg(test)]
mod tests {
    use crate::plan::Plan;
    use crate::schedule::{generate, recycle};
    use crate::testing::small_scenario;

    /// Builders start from recycled op vectors (bigger or smaller than they need, holding a
    /// previous schedule's ops until cleared): what they build equals a fresh build.
    #[test]
    fn schedules_built_in_recycled_vectors_equal_fresh_ones() {
        let layouts = [(2, 4, 2, 16), (1, 2, 1, 4), (2, 8, 1, 32), (1, 1, 4, 8)];
        let build = |&(tp, pp, dp, m): &(u32, u32, u32, u64)| {
            let s = small_scenario(tp, pp, dp, m);
            let plan = Plan::new(&s).unwrap();
            generate(&s, &plan).unwrap()
        };
        std::thread::scope(|sc| {
            sc.spawn(|| {
                for l in layouts.iter().chain(layouts.iter().rev()) {
                    let reused = build(l);
                    let fresh = std::thread::scope(|f| f.spawn(|| build(l)).join().unwrap());
                    assert_eq!(reused, fresh, "{l:?}");
                    recycle(reused);
                }
            })
            .join()
            .unwrap();
        });
    }
}
