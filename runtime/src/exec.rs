//! Walks one rank's program in order: resolves each op's peer, group and freed allocation from
//! the plan, keeps the rank's own memory account (what the schedule says is held, per
//! category), hands the op to a backend, and turns the backend's measured times into trace
//! events in the simulator's trace shape.

use crate::backend::{Allocation, Backend, MemoryReport, OpContext, OpTiming, PeerRoute};
use crate::error::RuntimeError;
use serde::Serialize;
use std::collections::BTreeMap;
use twin_sim::plan::{Plan, RankId};
use twin_sim::schedule::{Device, MemCategory, Op, OpKind, Peer, Schedule, Stream};

/// One executed op, as the simulator's trace records it. Unified with `twin_sim`'s trace
/// type once that exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TraceEvent {
    pub rank: RankId,
    pub stream: Stream,
    pub op: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Bytes the op moves: link bytes for communication, memory-bound bytes for compute,
    /// allocated bytes for Alloc, written bytes for Checkpoint.
    pub bytes: u64,
    pub flops: u64,
    /// When the backend issued the op, where it knows (see [`OpTiming::issued_ns`]).
    pub issued_ns: Option<u64>,
    /// How long the op waited for a core, where the backend knows (see
    /// [`OpTiming::wait_ns`]); never more than its span.
    pub wait_ns: Option<u64>,
}

/// Bytes per memory category.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ByCategory {
    pub weights: u64,
    pub grads: u64,
    pub optimizer: u64,
    pub activations: u64,
    pub buffers: u64,
    pub reserved: u64,
}

impl ByCategory {
    fn slot(&mut self, c: MemCategory) -> &mut u64 {
        match c {
            MemCategory::Weights => &mut self.weights,
            MemCategory::Grads => &mut self.grads,
            MemCategory::Optimizer => &mut self.optimizer,
            MemCategory::Activations => &mut self.activations,
            MemCategory::Buffers => &mut self.buffers,
            MemCategory::Reserved => &mut self.reserved,
        }
    }
    pub fn total(&self) -> u64 {
        self.weights
            .saturating_add(self.grads)
            .saturating_add(self.optimizer)
            .saturating_add(self.activations)
            .saturating_add(self.buffers)
            .saturating_add(self.reserved)
    }
}

/// The schedule's own view of memory: what its Alloc/Free ops hold, on the device.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MemoryAccount {
    /// Most device bytes held at once.
    pub peak_bytes: u64,
    /// The breakdown at the moment of the peak.
    pub peak_breakdown: ByCategory,
    /// Most host bytes held at once (offload).
    pub host_peak_bytes: u64,
    /// Device bytes still held at the end of the step (allocations never freed).
    pub final_bytes: u64,
}

/// Tracks Alloc/Free by tag. Shared by every backend, so the account means the same
/// everywhere.
#[derive(Debug, Default)]
pub struct MemoryTracker {
    live: BTreeMap<u32, Allocation>,
    now: ByCategory,
    host_now_bytes: u64,
    account: MemoryAccount,
}

impl MemoryTracker {
    pub fn alloc(&mut self, a: Allocation) -> Result<(), String> {
        if self.live.contains_key(&a.tag) {
            return Err(format!("alloc tag {} is already live", a.tag));
        }
        self.live.insert(a.tag, a);
        match a.device {
            Device::Gpu => {
                let slot = self.now.slot(a.category);
                *slot = slot.saturating_add(a.bytes);
                let total = self.now.total();
                if total > self.account.peak_bytes {
                    self.account.peak_bytes = total;
                    self.account.peak_breakdown = self.now;
                }
            }
            Device::Host => {
                self.host_now_bytes = self.host_now_bytes.saturating_add(a.bytes);
                self.account.host_peak_bytes =
                    self.account.host_peak_bytes.max(self.host_now_bytes);
            }
        }
        Ok(())
    }

    pub fn free(&mut self, tag: u32) -> Result<Allocation, String> {
        let a = self
            .live
            .remove(&tag)
            .ok_or_else(|| format!("free of tag {tag}, which is not allocated"))?;
        match a.device {
            Device::Gpu => {
                let slot = self.now.slot(a.category);
                *slot = slot.saturating_sub(a.bytes);
            }
            Device::Host => self.host_now_bytes = self.host_now_bytes.saturating_sub(a.bytes),
        }
        Ok(a)
    }

    pub fn finish(mut self) -> MemoryAccount {
        self.account.final_bytes = self.now.total();
        self.account
    }
}

/// One rank's measured step.
#[derive(Clone, Debug, Serialize)]
pub struct RankRun {
    pub rank: RankId,
    pub backend: &'static str,
    /// End of the last op, from the step start.
    pub step_time_ns: u64,
    /// Every op of the rank's program once, in program order.
    pub events: Vec<TraceEvent>,
    pub memory: MemoryAccount,
    pub device_memory: MemoryReport,
    /// Step times of every step run (warm-up included), when several were run.
    pub step_times_ns: Vec<u64>,
}

/// Bytes recorded in the trace for an op (see [`TraceEvent::bytes`]).
pub fn op_bytes(op: &Op) -> u64 {
    match &op.kind {
        OpKind::Compute(c) => c.memory_bytes,
        OpKind::Alloc { bytes, .. }
        | OpKind::Checkpoint { bytes }
        | OpKind::HostCopy { bytes, .. }
        | OpKind::HostUpdate { bytes } => *bytes,
        OpKind::Free { .. } => 0,
        _ => op.comm_bytes(),
    }
}

fn op_flops(op: &Op) -> u64 {
    match &op.kind {
        OpKind::Compute(c) => c.flops,
        _ => 0,
    }
}

/// Resolve a relative peer to a rank (as the simulator resolves it) and the group whose
/// communicator reaches it.
pub fn resolve_peer(plan: &Plan, rank: RankId, peer: Peer) -> PeerRoute {
    PeerRoute {
        rank: peer.rank_for(plan, rank),
        group: peer.group(),
    }
}

/// Run one step of `rank`'s program on `backend`.
pub fn run_step(
    plan: &Plan,
    schedule: &Schedule,
    rank: RankId,
    backend: &mut dyn Backend,
) -> Result<RankRun, RuntimeError> {
    let bad = |message: String| RuntimeError::Schedule { rank, message };
    if schedule.world() != plan.world {
        return Err(bad(format!(
            "schedule has {} ranks, plan has {}",
            schedule.world(),
            plan.world
        )));
    }
    let program = schedule
        .get_program(rank)
        .ok_or_else(|| bad(format!("no program for rank {rank}")))?;
    backend.prepare(plan, rank, program)?;
    let mut tracker = MemoryTracker::default();
    for (i, op) in program.ops.iter().enumerate() {
        let index = i as u32;
        if let Some(&d) = op.deps.iter().find(|&&d| d >= index) {
            return Err(bad(format!(
                "op {index} ({}) depends on op {d}, which is not earlier",
                op.name()
            )));
        }
        let mut ctx = OpContext {
            rank,
            deps: &op.deps,
            peer: None,
            group: None,
            freed: None,
        };
        match &op.kind {
            OpKind::Send { peer, .. } | OpKind::Recv { peer, .. } => {
                ctx.peer = Some(resolve_peer(plan, rank, *peer));
            }
            OpKind::Collective { group, .. } => {
                ctx.group = Some(plan.group(plan.group_of(rank, *group)));
            }
            OpKind::Alloc {
                category,
                device,
                bytes,
                tag,
            } => tracker
                .alloc(Allocation {
                    tag: *tag,
                    category: *category,
                    device: *device,
                    bytes: *bytes,
                })
                .map_err(|m| bad(format!("op {index}: {m}")))?,
            OpKind::Free { tag } => {
                ctx.freed = Some(
                    tracker
                        .free(*tag)
                        .map_err(|m| bad(format!("op {index}: {m}")))?,
                );
            }
            OpKind::Compute(_)
            | OpKind::Checkpoint { .. }
            | OpKind::HostCopy { .. }
            | OpKind::HostUpdate { .. } => {}
        }
        backend
            .enqueue(index, op, &ctx)
            .map_err(|e| e.at_op(rank, index, op.name()))?;
    }
    let timings = backend.finish_step()?;
    let events = to_events(rank, &program.ops, &timings).map_err(bad)?;
    let step_time_ns = events.iter().map(|e| e.end_ns).max().unwrap_or(0);
    Ok(RankRun {
        rank,
        backend: backend.name(),
        step_time_ns,
        events,
        memory: tracker.finish(),
        device_memory: backend.memory(),
        step_times_ns: vec![step_time_ns],
    })
}

/// One event per op, in program order; every op must have exactly one timing.
fn to_events(rank: RankId, ops: &[Op], timings: &[OpTiming]) -> Result<Vec<TraceEvent>, String> {
    let mut by_index: Vec<Option<OpTiming>> = vec![None; ops.len()];
    for t in timings {
        match by_index.get_mut(t.index as usize) {
            Some(slot @ None) => *slot = Some(*t),
            Some(Some(_)) => return Err(format!("backend timed op {} twice", t.index)),
            None => {
                return Err(format!(
                    "backend timed op {}, which does not exist",
                    t.index
                ))
            }
        }
    }
    ops.iter()
        .zip(by_index)
        .enumerate()
        .map(|(i, (op, t))| {
            let t = t.ok_or_else(|| format!("backend returned no timing for op {i}"))?;
            Ok(TraceEvent {
                rank,
                stream: op.stream,
                op: i as u32,
                start_ns: t.start_ns,
                end_ns: t.end_ns.max(t.start_ns),
                bytes: op_bytes(op),
                flops: op_flops(op),
                issued_ns: t.issued_ns.map(|i| i.min(t.start_ns)),
                wait_ns: t
                    .wait_ns
                    .map(|c| c.min(t.end_ns.max(t.start_ns) - t.start_ns)),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::llama_probe;
    use twin_sim::plan::GroupKind;
    use twin_sim::schedule::Program;

    type Seen = (
        u32,
        Option<PeerRoute>,
        Option<Vec<RankId>>,
        Option<Allocation>,
    );

    /// Records what the executor hands over; times are the op index, so tests can check the
    /// plumbing (this is not a performance model).
    #[derive(Default)]
    struct Recorder {
        seen: Vec<Seen>,
        skip_timing_of: Option<u32>,
    }

    impl Backend for Recorder {
        fn name(&self) -> &'static str {
            "recorder"
        }
        fn enqueue(&mut self, index: u32, _op: &Op, ctx: &OpContext) -> Result<(), RuntimeError> {
            self.seen.push((
                index,
                ctx.peer,
                ctx.group.map(|g| g.members.clone()),
                ctx.freed,
            ));
            Ok(())
        }
        fn finish_step(&mut self) -> Result<Vec<OpTiming>, RuntimeError> {
            Ok(self
                .seen
                .iter()
                .filter(|s| Some(s.0) != self.skip_timing_of)
                .map(|s| OpTiming {
                    index: s.0,
                    start_ns: u64::from(s.0) * 10,
                    end_ns: u64::from(s.0) * 10 + 5,
                    issued_ns: None,
                    wait_ns: None,
                })
                .collect())
        }
        fn memory(&self) -> MemoryReport {
            MemoryReport::default()
        }
    }

    #[test]
    fn accounts_memory_and_emits_one_event_per_op() {
        let (s, plan, sched) = llama_probe(2, 2, true).unwrap();
        let mut r = Recorder::default();
        let run = run_step(&plan, &sched, 0, &mut r).unwrap();
        let ops = &sched.programs[0].ops;
        assert_eq!(run.events.len(), ops.len());
        assert!(run.events.iter().enumerate().all(|(i, e)| e.op == i as u32));
        let p = crate::probe::layer_params(&s) * 2;
        let act = 34 * 2048 * 4096;
        // Peak: all model state plus both layers' activations of one micro batch.
        assert_eq!(run.memory.peak_bytes, 18 * p + 2 * act);
        assert_eq!(run.memory.peak_breakdown.activations, 2 * act);
        assert_eq!(run.memory.peak_breakdown.optimizer, 12 * p);
        assert_eq!(run.memory.final_bytes, 0);
        assert_eq!(run.step_time_ns, (ops.len() as u64 - 1) * 10 + 5);
        // Frees carry what they release; collectives their resolved group.
        let free = r.seen.iter().find_map(|s| s.3).unwrap();
        assert_eq!(free.category, MemCategory::Activations);
        assert!(r.seen.iter().any(|s| s.2 == Some(vec![0])));
    }

    #[test]
    fn resolves_pipeline_peers_from_the_plan() {
        let plan = Plan::new(&twin_sim::testing::small_scenario(2, 4, 1, 4)).unwrap();
        // Rank 3 is tp 1 of stage 1: next stage holds rank 5, previous rank 1.
        assert_eq!(
            resolve_peer(&plan, 3, Peer::PpNext),
            PeerRoute {
                rank: 5,
                group: GroupKind::Pp
            }
        );
        assert_eq!(resolve_peer(&plan, 3, Peer::PpPrev).rank, 1);
        // CP of size 1: the ring wraps onto the rank itself.
        assert_eq!(resolve_peer(&plan, 3, Peer::CpNext).rank, 3);
    }

    #[test]
    fn bad_schedules_are_errors_naming_the_rank() {
        let plan = Plan::new(&twin_sim::testing::small_scenario(1, 1, 1, 1)).unwrap();
        let free = Op {
            stream: Stream::Compute,
            kind: OpKind::Free { tag: 9 },
            deps: vec![].into(),
            label: Default::default(),
        };
        let sched = Schedule {
            programs: vec![Program {
                stage: 0,
                ops: vec![free.clone()],
            }],
            program_of: vec![0],
        };
        let e = run_step(&plan, &sched, 0, &mut Recorder::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("rank 0") && e.contains("free of tag 9"), "{e}");
        let mut forward = free;
        forward.deps = vec![0].into();
        let sched = Schedule {
            programs: vec![Program {
                stage: 0,
                ops: vec![forward],
            }],
            program_of: vec![0],
        };
        let e = run_step(&plan, &sched, 0, &mut Recorder::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("depends on op 0, which is not earlier"), "{e}");
        let e = run_step(&plan, &sched, 1, &mut Recorder::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("no program for rank 1"), "{e}");
    }

    #[test]
    fn a_missing_timing_is_an_error() {
        let (_, plan, sched) = llama_probe(1, 1, false).unwrap();
        let mut r = Recorder {
            skip_timing_of: Some(2),
            ..Recorder::default()
        };
        let e = run_step(&plan, &sched, 0, &mut r).unwrap_err().to_string();
        assert!(e.contains("no timing for op 2"), "{e}");
    }
}
