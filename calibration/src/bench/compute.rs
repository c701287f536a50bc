//! GEMM timings through the host backend's own kernel (`Workspace::run_gemms`: f32
//! `matrixmultiply` sgemm, one thread, as each host rank runs it), over a grid of shapes and
//! every distinct GEMM shape of a scenario's schedule.

use super::{Config, Counter, GemmSamples};
use crate::sample::SplitMix;
use std::collections::BTreeMap;
use twin_runtime::backend::host::Workspace;
use twin_sim::scenario::Precision;
use twin_sim::schedule::{ComputeOp, Gemm, Label, Op, OpKind, Phase, Program, Schedule, Stream};

/// A compute op of the given GEMMs and memory-bound bytes (no other work).
pub fn compute_op(gemms: Vec<Gemm>, memory_bytes: u64) -> ComputeOp {
    let flops = gemms.iter().map(Gemm::flops).sum();
    ComputeOp {
        attention: None,
        phase: Phase::Forward,
        dtype: Precision::Fp32,
        gemms: gemms.into(),
        flops,
        memory_bytes,
        kernels: 1,
        sms_reserved: 0,
        host_syncs: Default::default(),
    }
}

/// One op on the compute stream with the given deps.
pub fn op(c: ComputeOp, deps: Vec<u32>) -> Op {
    Op {
        stream: Stream::Compute,
        kind: OpKind::Compute(c),
        deps: deps.into(),
        label: Label::default(),
    }
}

/// A workspace large enough for every op in `ops`.
pub fn workspace_for(ops: &[ComputeOp]) -> Workspace {
    Workspace::for_program(&Program {
        stage: 0,
        ops: ops.iter().map(|c| op(c.clone(), Vec::new())).collect(),
    })
}

/// Distinct GEMM shapes (one call each) of a schedule, most frequent first (ties by shape),
/// at most `max`.
pub fn scenario_shapes(schedule: &Schedule, max: usize) -> Vec<Gemm> {
    scenario_shape_counts(schedule, max)
        .into_iter()
        .map(|(g, _)| g)
        .collect()
}

/// [`scenario_shapes`] with how many calls of each shape the schedule makes (over every
/// program).
pub fn scenario_shape_counts(schedule: &Schedule, max: usize) -> Vec<(Gemm, u64)> {
    let mut freq: BTreeMap<(u64, u64, u64), u64> = BTreeMap::new();
    for p in &schedule.programs {
        for o in &p.ops {
            if let OpKind::Compute(c) = &o.kind {
                for g in &c.gemms {
                    if g.m > 0 && g.n > 0 && g.k > 0 {
                        *freq.entry((g.m, g.n, g.k)).or_default() += u64::from(g.count);
                    }
                }
            }
        }
    }
    let mut v: Vec<((u64, u64, u64), u64)> = freq.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v.into_iter()
        .take(max)
        .map(|((m, n, k), count)| (Gemm::single(m, n, k, 1), count))
        .collect()
}

/// Bytes the busiest rank of `schedule` touches in one step as the host backend runs it (f32
/// operands whatever the dtype): every compute op's GEMM operands (A, B and C of each call) and
/// memory-bound bytes, every allocation (touched whole), and every transfer's bytes. Memory a
/// step uses twice was evicted by at most this much traffic in between.
pub fn step_bytes(schedule: &Schedule) -> u64 {
    const F32_BYTES: u64 = 4;
    let op_bytes = |kind: &OpKind| -> u64 {
        match kind {
            OpKind::Compute(c) => c.gemms.iter().fold(c.memory_bytes, |acc, g| {
                let per_call = (g.m.saturating_mul(g.k))
                    .saturating_add(g.k.saturating_mul(g.n))
                    .saturating_add(g.m.saturating_mul(g.n));
                let calls = u64::from(g.count).saturating_mul(u64::from(g.batch.max(1)));
                acc.saturating_add(per_call.saturating_mul(calls).saturating_mul(F32_BYTES))
            }),
            OpKind::Send { bytes, .. }
            | OpKind::Recv { bytes, .. }
            | OpKind::Collective { bytes, .. }
            | OpKind::Alloc { bytes, .. }
            | OpKind::HostUpdate { bytes } => *bytes,
            // A host copy goes through a buffer of a MiB (the host backend's `copy_bytes`).
            OpKind::Free { .. } | OpKind::Checkpoint { .. } | OpKind::HostCopy { .. } => 0,
        }
    };
    schedule
        .programs
        .iter()
        .map(|p| {
            p.ops
                .iter()
                .fold(0u64, |a, o| a.saturating_add(op_bytes(&o.kind)))
        })
        .max()
        .unwrap_or(0)
}

/// Writes every cache line of `buf` (evicting what the core's private cache held).
pub(crate) fn evict_cache(buf: &mut [u8]) {
    for line in buf.chunks_mut(64) {
        if let Some(b) = line.first_mut() {
            *b = b.wrapping_add(1);
        }
    }
    std::hint::black_box(buf);
}

/// Times the sweep's shapes and `extra` (a scenario's), one call per sample, in an order
/// shuffled by `seed` (so slow drift of the machine does not line up with shape): each shape
/// after evicting the private cache, then back to back.
pub fn gemms(cfg: &Config, extra: &[Gemm], seed: u64, progress: &mut Counter) -> Vec<GemmSamples> {
    let sweep = cfg.sweep_shapes();
    let mut all: Vec<(Gemm, &'static str, bool)> = sweep
        .iter()
        .enumerate()
        .map(|(i, g)| (*g, "sweep", i % 5 == 4))
        .chain(extra.iter().map(|g| (*g, "scenario", false)))
        .collect();
    SplitMix::new(seed).shuffle(&mut all);
    let ops: Vec<ComputeOp> = all
        .iter()
        .map(|(g, _, _)| compute_op(vec![*g], 0))
        .collect();
    let mut ws = workspace_for(&ops);
    let mut evict = vec![0u8; usize::try_from(cfg.gemm_evict_bytes).unwrap_or(0)];
    let mut out = Vec::with_capacity(all.len());
    for ((g, origin, holdout), c) in all.iter().zip(&ops) {
        let k = time_gemm(&mut ws, c, &mut evict, cfg.gemm);
        let warm = crate::sample::time_ns(cfg.gemm, || ws.run_gemms(c));
        out.push(GemmSamples {
            m: g.m,
            n: g.n,
            k: g.k,
            batch: 1,
            origin: (*origin).to_string(),
            holdout: *holdout,
            kept_ns: k.kept,
            dropped_ns: k.dropped,
            warm_kept_ns: warm.kept,
            warm_dropped_ns: warm.dropped,
        });
        progress.tick("gemm");
    }
    out
}

/// Times `c`'s GEMMs on `ws` with the outlier rule of [`crate::sample`]. Each call starts with
/// its operands out of the core's private cache (`evict` is written first, untimed), as in a
/// step, where the op's memory-bound pass and the other ops' operands run between two calls
/// of a shape.
pub(crate) fn time_gemm(
    ws: &mut Workspace,
    c: &ComputeOp,
    evict: &mut [u8],
    r: crate::sample::Repeats,
) -> crate::sample::Kept {
    after_evicting(r, evict, || {
        let t = std::time::Instant::now();
        ws.run_gemms(c);
        t.elapsed().as_nanos() as f64
    })
}

/// Samples of `timed` (which times itself, in ns) under the outlier rule, with `evict`
/// written, untimed, before each call.
pub(crate) fn after_evicting(
    r: crate::sample::Repeats,
    evict: &mut [u8],
    mut timed: impl FnMut() -> f64,
) -> crate::sample::Kept {
    crate::sample::measured_ns(r, || {
        evict_cache(evict);
        Ok::<f64, std::convert::Infallible>(timed())
    })
    .unwrap_or_else(|e| match e {})
}

#[cfg(test)]
mod tests {
    use super::*;
    use twin_sim::schedule::{Device, MemCategory, Peer};

    fn plain(kind: OpKind) -> Op {
        Op {
            stream: Stream::Compute,
            kind,
            deps: Vec::new().into(),
            label: Label::default(),
        }
    }

    #[test]
    fn step_bytes_is_the_busiest_programs_traffic() {
        let mut gemm = compute_op(vec![Gemm::single(2, 3, 4, 2)], 100);
        gemm.gemms = vec![Gemm {
            batch: 3,
            ..Gemm::single(2, 3, 4, 2)
        }]
        .into();
        let first = Program {
            stage: 0,
            ops: vec![
                plain(OpKind::Compute(gemm)),
                plain(OpKind::Send {
                    peer: Peer::PpNext,
                    bytes: 50,
                    tag: 0,
                }),
                plain(OpKind::Alloc {
                    category: MemCategory::Activations,
                    device: Device::Gpu,
                    bytes: 10,
                    tag: 1,
                }),
                plain(OpKind::Free { tag: 1 }),
                plain(OpKind::Checkpoint { bytes: 1 << 30 }),
            ],
        };
        // A, B and C of 2 x 4, 4 x 3 and 2 x 3 f32 elements, 2 calls of 3 products each, the
        // 100 memory-bound bytes, the send and the allocation; checkpoints are not step traffic.
        let first_bytes = (8 + 12 + 6) * 4 * 2 * 3 + 100 + 50 + 10;
        let mut second = Program {
            stage: 1,
            ops: vec![plain(OpKind::Recv {
                peer: Peer::PpPrev,
                bytes: first_bytes - 1,
                tag: 0,
            })],
        };
        let mut s = Schedule {
            programs: vec![first, second.clone()],
            program_of: vec![0, 1],
        };
        assert_eq!(step_bytes(&s), first_bytes);
        second.ops.push(plain(OpKind::Recv {
            peer: Peer::PpPrev,
            bytes: 2,
            tag: 1,
        }));
        s.programs[1] = second;
        assert_eq!(step_bytes(&s), first_bytes + 1);
    }
}
