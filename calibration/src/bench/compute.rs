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
        phase: Phase::Forward,
        dtype: Precision::Fp32,
        gemms: gemms.into(),
        flops,
        memory_bytes,
        kernels: 1,
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
/// shuffled by `seed` (so slow drift of the machine does not line up with shape).
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
        out.push(GemmSamples {
            m: g.m,
            n: g.n,
            k: g.k,
            batch: 1,
            origin,
            holdout: *holdout,
            kept_ns: k.kept,
            dropped_ns: k.dropped,
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
    crate::sample::measured_ns(r, || {
        evict_cache(evict);
        let t = std::time::Instant::now();
        ws.run_gemms(c);
        Ok::<f64, std::convert::Infallible>(t.elapsed().as_nanos() as f64)
    })
    .unwrap_or_else(|e| match e {})
}
