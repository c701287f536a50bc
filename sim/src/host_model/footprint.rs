//! How many distinct bytes a node's ranks touch in one step: what stands between the
//! optimizer's update and the state it updated a step earlier in the node's last-level cache
//! ([`super::StateCache`]). Computed from the schedule before the run, so the cost model can
//! price the optimizer op as a pure function of it.

use crate::plan::Plan;
use crate::schedule::{OpKind, Program, Schedule};
use std::collections::HashMap;

/// Bytes per element of the host backend's GEMM operands (it computes every dtype in f32).
const HOST_ELEM_BYTES: u64 = 4;

/// Distinct bytes one rank running `program` touches per step on the host backend: the most
/// its `Alloc`s hold at once in program order (the backend's allocator reuses freed buffers,
/// so a step touches its peak, not the sum), plus the GEMM workspace its compute ops share
/// (the largest A, B and C).
pub fn program_step_bytes(program: &Program) -> u64 {
    let mut live: HashMap<u32, u64> = HashMap::new();
    let (mut held, mut peak) = (0u64, 0u64);
    let (mut a, mut b, mut c) = (0u64, 0u64, 0u64);
    for op in &program.ops {
        match &op.kind {
            OpKind::Alloc { bytes, tag, .. } => {
                held = held.saturating_add(*bytes);
                if let Some(old) = live.insert(*tag, *bytes) {
                    held = held.saturating_sub(old);
                }
                peak = peak.max(held);
            }
            OpKind::Free { tag } => {
                held = held.saturating_sub(live.remove(tag).unwrap_or(0));
            }
            OpKind::Compute(op) => {
                for g in op.executed_gemms() {
                    a = a.max(g.m.saturating_mul(g.k));
                    b = b.max(g.k.saturating_mul(g.n));
                    c = c.max(g.m.saturating_mul(g.n));
                }
            }
            _ => {}
        }
    }
    let workspace = a
        .saturating_add(b)
        .saturating_add(c)
        .saturating_mul(HOST_ELEM_BYTES);
    peak.saturating_add(workspace)
}

/// Distinct bytes the busiest node's ranks touch per step: [`program_step_bytes`] summed over
/// each node's ranks, the largest node's sum. A node's ranks share its last-level cache.
pub fn node_step_bytes(schedule: &Schedule, plan: &Plan) -> u64 {
    let per_program: Vec<u64> = schedule.programs.iter().map(program_step_bytes).collect();
    let mut by_node: HashMap<u32, u64> = HashMap::new();
    for (rank, &p) in schedule.program_of.iter().enumerate() {
        let bytes = per_program.get(p as usize).copied().unwrap_or(0);
        let n = by_node.entry(plan.node_of(rank as u32)).or_insert(0);
        *n = n.saturating_add(bytes);
    }
    by_node.values().copied().max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{ComputeOp, Device, Gemm, Label, MemCategory, Op, Stream};

    fn op(kind: OpKind) -> Op {
        Op {
            stream: Stream::Compute,
            kind,
            deps: Vec::new().into(),
            label: Label::default(),
        }
    }

    fn alloc(tag: u32, bytes: u64) -> Op {
        op(OpKind::Alloc {
            category: MemCategory::Activations,
            device: Device::Gpu,
            bytes,
            tag,
        })
    }

    #[test]
    fn a_program_touches_its_peak_and_its_gemm_workspace() {
        let gemm = Gemm {
            dtype: None,
            m: 10,
            n: 20,
            k: 30,
            count: 1,
            batch: 1,
        };
        let compute = op(OpKind::Compute(ComputeOp {
            attention: None,
            phase: crate::schedule::Phase::Forward,
            dtype: crate::scenario::Precision::Fp32,
            gemms: vec![gemm].into(),
            flops: 0,
            memory_bytes: 0,
            kernels: 1,
            sms_reserved: 0,
            host_syncs: Default::default(),
        }));
        let p = Program {
            ops: vec![
                alloc(0, 1000),
                alloc(1, 500),
                op(OpKind::Free { tag: 1 }),
                alloc(2, 300),
                compute,
                op(OpKind::Free { tag: 2 }),
                op(OpKind::Free { tag: 0 }),
            ],
            ..Program::default()
        };
        // Peak 1500 (tags 0 and 1), workspace (300 + 600 + 200) x 4.
        assert_eq!(program_step_bytes(&p), 1500 + 1100 * 4);
    }
}
