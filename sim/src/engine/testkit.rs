//! Test-only helpers: a tiny program builder, a cost model whose durations can be read off
//! the ops (so expected times are easy to work out by hand), and a reference GPipe/1F1B
//! pipeline for closed-form bubble checks. Used by the engine's and the report's tests.

use crate::cost::CostModel;
use crate::plan::{Group, GroupKind, Plan};
use crate::scenario::Precision;
use crate::schedule::{
    CollectiveKind, ComputeOp, Device, Label, MemCategory, Op, OpKind, Peer, Phase, Program,
    Schedule, Stream,
};
use crate::testing::small_scenario;

/// Durations read off the ops: compute takes `flops / flops_per_ns` ns (default: one FLOP
/// per ns), a collective `bytes * calls` ns, a p2p `bytes` ns, a checkpoint `bytes` ns. With
/// `straggler = Some((rank, k))` compute on that rank takes k times longer (and compute is
/// declared rank-dependent).
#[derive(Clone, Copy, Debug)]
pub(crate) struct FixedCost {
    pub straggler: Option<(u32, u64)>,
    pub flops_per_ns: u64,
}

impl Default for FixedCost {
    fn default() -> Self {
        FixedCost {
            straggler: None,
            flops_per_ns: 1,
        }
    }
}

impl CostModel for FixedCost {
    fn compute_ns(&self, rank: u32, op: &ComputeOp) -> u64 {
        let ns = op.flops / self.flops_per_ns.max(1);
        match self.straggler {
            Some((r, k)) if r == rank => ns * k,
            _ => ns,
        }
    }
    fn collective_ns(&self, _kind: CollectiveKind, _g: &Group, bytes: u64, calls: u32) -> u64 {
        bytes * u64::from(calls)
    }
    fn p2p_ns(&self, _plan: &Plan, _src: u32, _dst: u32, bytes: u64) -> u64 {
        bytes
    }
    fn checkpoint_ns(&self, bytes: u64) -> u64 {
        bytes
    }
    fn host_ns(&self, work: crate::cost::HostWork) -> u64 {
        work.bytes()
    }
    fn compute_is_rank_invariant(&self) -> bool {
        self.straggler.is_none()
    }
}

/// A plan of `tp * pp * dp` A100s (8 per node), `microbatches` per pipeline.
/// [`FixedCost`] on a host: ranks share `cores` CPU cores, compute overlapping communication
/// is slowed by `slowdown`, an allocation takes `alloc_ns_per_byte` ns per byte and a free
/// `free_ns`. With `residency = Some((cache_bytes, reload_ns))` a compute op's working set is
/// its `memory_bytes`, in a private cache of `cache_bytes`, and reloading its operands takes
/// `reload_ns` (nothing for an op that outgrows the cache, as `cost::Analytic` prices it).
#[derive(Default)]
pub(crate) struct SharedCores {
    pub cores: Option<u32>,
    pub slowdown: f64,
    pub alloc_ns_per_byte: u64,
    pub free_ns: u64,
    pub wake: Option<crate::host_model::Wake>,
    pub residency: Option<(u64, u64)>,
    pub handoff_ns: u64,
    /// The compute thread's weight against a transfer (`None`: the cost model's default).
    pub compute_weight: Option<f64>,
    /// The share of a p2p's time its ends work on their cores (`None`: all of it).
    pub p2p_cpu_share: Option<f64>,
    /// Cores' worth of memory-bound work served at once (`None`: each core its own).
    pub memory_cores: Option<f64>,
}

impl CostModel for SharedCores {
    /// As [`FixedCost`], but an op without FLOPs (memory-bound) takes its `memory_bytes` ns.
    fn compute_ns(&self, rank: u32, op: &ComputeOp) -> u64 {
        if op.flops == 0 {
            return op.memory_bytes;
        }
        FixedCost::default().compute_ns(rank, op)
    }
    fn collective_ns(&self, kind: CollectiveKind, g: &Group, bytes: u64, calls: u32) -> u64 {
        FixedCost::default().collective_ns(kind, g, bytes, calls)
    }
    fn p2p_ns(&self, plan: &Plan, src: u32, dst: u32, bytes: u64) -> u64 {
        FixedCost::default().p2p_ns(plan, src, dst, bytes)
    }
    fn checkpoint_ns(&self, bytes: u64) -> u64 {
        bytes
    }
    fn host_ns(&self, work: crate::cost::HostWork) -> u64 {
        work.bytes()
    }
    fn alloc_ns(&self, _category: MemCategory, bytes: u64) -> u64 {
        bytes.saturating_mul(self.alloc_ns_per_byte)
    }
    fn free_ns(&self) -> u64 {
        self.free_ns
    }
    fn wake(&self) -> Option<crate::host_model::Wake> {
        self.wake
    }
    fn handoff_ns(&self) -> u64 {
        self.handoff_ns
    }
    fn compute_weight(&self) -> f64 {
        self.compute_weight
            .unwrap_or_else(crate::cost::host_compute_weight)
    }
    fn p2p_cpu_share(&self) -> f64 {
        self.p2p_cpu_share.unwrap_or(1.0)
    }
    fn memory_cores(&self) -> Option<f64> {
        self.memory_cores
    }
    fn models_operand_residency(&self) -> bool {
        self.residency.is_some()
    }
    fn operand_residency(&self, op: &ComputeOp) -> Option<crate::host_model::Residency> {
        let (cache_bytes, reload_ns) = self.residency?;
        let ws = op.memory_bytes;
        Some(crate::host_model::Residency {
            working_set_bytes: ws,
            cache_bytes,
            reload_ns: if ws > cache_bytes { 0 } else { reload_ns },
        })
    }
    fn compute_is_rank_invariant(&self) -> bool {
        true
    }
    fn shared_cores(&self) -> Option<u32> {
        self.cores
    }
    fn overlap_compute_slowdown(&self) -> f64 {
        self.slowdown
    }
}

pub(crate) fn plan(tp: u32, pp: u32, dp: u32, microbatches: u64) -> Plan {
    Plan::new(&small_scenario(tp, pp, dp, microbatches)).expect("test plan")
}

pub(crate) fn compute_op(phase: Phase, flops: u64) -> ComputeOp {
    ComputeOp {
        attention: None,
        phase,
        dtype: Precision::Bf16,
        gemms: vec![].into(),
        flops,
        memory_bytes: 0,
        kernels: 0,
        sms_reserved: 0,
        host_syncs: Default::default(),
    }
}

/// Builds one program op by op; every method returns the new op's index.
pub(crate) struct ProgBuilder {
    prog: Program,
}

impl ProgBuilder {
    pub fn new(stage: u32) -> ProgBuilder {
        ProgBuilder {
            prog: Program {
                stage,
                ops: Vec::new(),
            },
        }
    }

    pub fn len(&self) -> u32 {
        self.prog.ops.len() as u32
    }

    pub fn op(&mut self, stream: Stream, kind: OpKind, deps: &[u32], label: Label) -> u32 {
        self.prog.ops.push(Op {
            stream,
            kind,
            deps: deps.into(),
            label,
        });
        self.len() - 1
    }

    /// A compute op of `ns` nanoseconds under [`FixedCost`] (and `ns` FLOPs).
    pub fn compute(&mut self, stream: Stream, phase: Phase, ns: u64, deps: &[u32]) -> u32 {
        self.op(
            stream,
            OpKind::Compute(compute_op(phase, ns)),
            deps,
            Label::default(),
        )
    }

    pub fn fwd(&mut self, ns: u64, deps: &[u32]) -> u32 {
        self.compute(Stream::Compute, Phase::Forward, ns, deps)
    }

    /// A memory-bound compute op (no FLOPs) of `bytes` streamed: `bytes` ns under
    /// [`SharedCores`].
    pub fn optimizer(&mut self, bytes: u64, deps: &[u32]) -> u32 {
        let mut c = compute_op(Phase::Optimizer, 0);
        c.memory_bytes = bytes;
        self.op(Stream::Compute, OpKind::Compute(c), deps, Label::default())
    }

    pub fn send(&mut self, peer: Peer, bytes: u64, tag: u32, deps: &[u32]) -> u32 {
        self.op(
            Stream::PpSend,
            OpKind::Send { peer, bytes, tag },
            deps,
            Label::default(),
        )
    }

    pub fn recv(&mut self, peer: Peer, bytes: u64, tag: u32, deps: &[u32]) -> u32 {
        self.op(
            Stream::PpRecv,
            OpKind::Recv { peer, bytes, tag },
            deps,
            Label::default(),
        )
    }

    pub fn collective(
        &mut self,
        stream: Stream,
        kind: CollectiveKind,
        group: GroupKind,
        bytes: u64,
        deps: &[u32],
    ) -> u32 {
        self.op(
            stream,
            OpKind::Collective {
                kind,
                group,
                bytes,
                calls: 1,
            },
            deps,
            Label::default(),
        )
    }

    pub fn alloc(&mut self, category: MemCategory, bytes: u64, tag: u32, deps: &[u32]) -> u32 {
        self.op(
            Stream::Compute,
            OpKind::Alloc {
                category,
                device: Device::Gpu,
                bytes,
                tag,
            },
            deps,
            Label::default(),
        )
    }

    pub fn free(&mut self, tag: u32, deps: &[u32]) -> u32 {
        self.op(
            Stream::Compute,
            OpKind::Free { tag },
            deps,
            Label::default(),
        )
    }

    pub fn build(self) -> Program {
        self.prog
    }
}

/// One program per rank.
pub(crate) fn per_rank(programs: Vec<Program>) -> Schedule {
    let n = programs.len() as u32;
    Schedule {
        programs,
        program_of: (0..n).collect(),
    }
}

/// One program per pipeline stage, shared by all ranks of the stage.
pub(crate) fn per_stage(plan: &Plan, programs: Vec<Program>) -> Schedule {
    Schedule {
        programs,
        program_of: (0..plan.world).map(|r| plan.stage_of(r)).collect(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pipeline {
    Gpipe,
    OneFOneB,
}

/// A textbook pipeline over `plan` for testing the engine against closed forms: `m` micro
/// batches, forward `f_ns` and backward `b_ns` per stage, activations of `act_bytes` (p2p
/// cost in ns under [`FixedCost`]), each micro batch's activation (100 bytes) allocated at
/// its forward and freed after its backward.
pub(crate) fn pipeline(
    plan: &Plan,
    kind: Pipeline,
    m: u32,
    f_ns: u64,
    b_ns: u64,
    act_bytes: u64,
) -> Schedule {
    let mem = PipelineMemory {
        weights_bytes: 0,
        activation_bytes: 100,
    };
    pipeline_with_memory(plan, kind, m, f_ns, b_ns, act_bytes, mem)
}

/// Memory the test pipeline allocates: weights for the whole step (first op; none when 0),
/// activations per micro batch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PipelineMemory {
    pub weights_bytes: u64,
    pub activation_bytes: u64,
}

pub(crate) fn pipeline_with_memory(
    plan: &Plan,
    kind: Pipeline,
    m: u32,
    f_ns: u64,
    b_ns: u64,
    act_bytes: u64,
    mem: PipelineMemory,
) -> Schedule {
    let p = plan.pp();
    let programs = (0..p)
        .map(|s| {
            let order: Vec<(bool, u32)> = match kind {
                Pipeline::Gpipe => (0..m)
                    .map(|i| (true, i))
                    .chain((0..m).map(|i| (false, i)))
                    .collect(),
                Pipeline::OneFOneB => {
                    let warm = (p - s - 1).min(m);
                    let mut v: Vec<(bool, u32)> = (0..warm).map(|i| (true, i)).collect();
                    for i in 0..m - warm {
                        v.push((true, warm + i));
                        v.push((false, i));
                    }
                    v.extend((m - warm..m).map(|i| (false, i)));
                    v
                }
            };
            let mut b = ProgBuilder::new(s);
            if mem.weights_bytes > 0 {
                b.alloc(MemCategory::Weights, mem.weights_bytes, u32::MAX, &[]);
            }
            let mut fwd = vec![0u32; m as usize];
            for (is_fwd, i) in order {
                let mb = Label {
                    microbatch: Some(i),
                    ..Label::default()
                };
                if is_fwd {
                    let mut deps = vec![];
                    if s > 0 {
                        deps.push(b.op(
                            Stream::PpRecv,
                            OpKind::Recv {
                                peer: Peer::PpPrev,
                                bytes: act_bytes,
                                tag: 2 * i,
                            },
                            &[],
                            mb,
                        ));
                    }
                    let a = b.op(
                        Stream::Compute,
                        OpKind::Alloc {
                            category: MemCategory::Activations,
                            device: Device::Gpu,
                            bytes: mem.activation_bytes,
                            tag: i,
                        },
                        &[],
                        mb,
                    );
                    deps.push(a);
                    let f = b.op(
                        Stream::Compute,
                        OpKind::Compute(compute_op(Phase::Forward, f_ns)),
                        &deps,
                        mb,
                    );
                    fwd[i as usize] = f;
                    if s + 1 < p {
                        b.op(
                            Stream::PpSend,
                            OpKind::Send {
                                peer: Peer::PpNext,
                                bytes: act_bytes,
                                tag: 2 * i,
                            },
                            &[f],
                            mb,
                        );
                    }
                } else {
                    let mut deps = vec![fwd[i as usize]];
                    if s + 1 < p {
                        deps.push(b.op(
                            Stream::PpRecv,
                            OpKind::Recv {
                                peer: Peer::PpNext,
                                bytes: act_bytes,
                                tag: 2 * i + 1,
                            },
                            &[],
                            mb,
                        ));
                    }
                    let bw = b.op(
                        Stream::Compute,
                        OpKind::Compute(compute_op(Phase::Backward, b_ns)),
                        &deps,
                        mb,
                    );
                    b.op(Stream::Compute, OpKind::Free { tag: i }, &[bw], mb);
                    if s > 0 {
                        b.op(
                            Stream::PpSend,
                            OpKind::Send {
                                peer: Peer::PpPrev,
                                bytes: act_bytes,
                                tag: 2 * i + 1,
                            },
                            &[bw],
                            mb,
                        );
                    }
                }
            }
            if mem.weights_bytes > 0 {
                // Compute is FIFO: this runs after the last backward.
                b.free(u32::MAX, &[]);
            }
            b.build()
        })
        .collect();
    per_stage(plan, programs)
}

/// The ops of `s` the engine runs as events under a cost model that prices no alloc or free:
/// all but the allocs and frees, whose effect on memory is replayed after the step.
pub(crate) fn engine_ops(s: &Schedule) -> u64 {
    s.program_of
        .iter()
        .map(|&p| {
            s.programs[p as usize]
                .ops
                .iter()
                .filter(|o| !matches!(o.kind, OpKind::Alloc { .. } | OpKind::Free { .. }))
                .count() as u64
        })
        .sum()
}
