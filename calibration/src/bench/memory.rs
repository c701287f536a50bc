//! Memory-bound work as the host backend does it: the axpy pass of a compute op's
//! memory-bound bytes (`Workspace::run_memory`, 12 bytes per element), warm and cold (its
//! buffers evicted by a step's traffic first, as the optimizer finds the state it updates), a
//! plain memcpy (the host's "device copy"), and the host backend's Alloc op (its allocator
//! reusing a buffer it kept).

use super::compute::{after_evicting, compute_op, workspace_for};
use super::{Config, Counter, SizedSamples, StateSamples};
use crate::sample::time_ns;
use std::time::Instant;
use twin_runtime::backend::host::{Held, ModelState};
use twin_runtime::backend::Allocation;
use twin_sim::schedule::{Device, MemCategory};

/// The axpy pass over each of `sizes` (bytes moved), with `evict_bytes` written (untimed)
/// before each sample: 0 for the warm pass (`cfg.memory_bytes`, and the larger
/// `cfg.pass_large_bytes` where it outgrows the caches), or `cfg.step_evict_bytes` for the cold
/// pass (`cfg.cold_pass_bytes`): the optimizer's, whose parameters, gradients and state were
/// last touched a step earlier. Timed warm, the pass ran 2-5x faster than the optimizer ops of
/// a step (docs/calibration.md). `what` names the benchmark in the progress.
pub fn memory_pass(
    cfg: &Config,
    sizes: &[u64],
    evict_bytes: u64,
    what: &str,
    progress: &mut Counter,
) -> Vec<SizedSamples> {
    let ops: Vec<_> = sizes.iter().map(|&b| compute_op(Vec::new(), b)).collect();
    let mut ws = workspace_for(&ops);
    let mut evict = vec![0u8; usize::try_from(evict_bytes).unwrap_or(0)];
    let mut out = Vec::new();
    for (c, &bytes) in ops.iter().zip(sizes) {
        let k = after_evicting(cfg.memory, &mut evict, || {
            let t = Instant::now();
            ws.run_memory(c);
            t.elapsed().as_nanos() as f64
        });
        out.push(SizedSamples::new(bytes, k));
        progress.tick(what);
    }
    out
}

/// The Optimizer op's state update as the host backend runs it (`ModelState::apply_optimizer`)
/// over each of `cfg.state_bytes` of state, timed after each of `cfg.state_evict_bytes` of a
/// separate buffer were written (untimed): between two steps' updates the node's ranks touch
/// everything else they hold, and how much of that the last-level cache keeps decides whether
/// the update reads its state from the cache or from DRAM (`memory.state_*`). The update is
/// the op itself, not the axpy pass: it ran 1.2x faster per byte
/// (docs/journal/2026-11-validation-history.md, 2026-11-24). Then each of `cfg.state_gap_bytes`
/// after each of `cfg.state_gap_ns` with nothing written: on a cache other tenants share, the state
/// also leaves with time (same journal, 2026-11-24).
pub fn state_update(cfg: &Config, progress: &mut Counter) -> Result<Vec<StateSamples>, String> {
    let largest = cfg.state_evict_bytes.iter().copied().max().unwrap_or(0);
    let mut evict = vec![0u8; usize::try_from(largest).unwrap_or(0)];
    let mut out = Vec::new();
    let runs = cfg
        .state_bytes
        .iter()
        .flat_map(|&s| cfg.state_evict_bytes.iter().map(move |&e| (s, e, 0)))
        .chain(
            cfg.state_gap_bytes
                .iter()
                .flat_map(|&s| cfg.state_gap_ns.iter().map(move |&g| (s, 0, g))),
        );
    let mut held: Option<(u64, ModelState)> = None;
    let mut round = 0u64;
    for (bytes, e, gap_ns) in runs {
        if held.as_ref().is_none_or(|(b, _)| *b != bytes) {
            let mut state = ModelState::new(1, 0);
            state
                .ensure(0, MemCategory::Optimizer, Device::Gpu, bytes)
                .map_err(|e| format!("state of {bytes} bytes: {e}"))?;
            held = Some((bytes, state));
        }
        let Some((_, state)) = held.as_mut() else {
            continue;
        };
        let n = usize::try_from(e).unwrap_or(usize::MAX).min(evict.len());
        let t = time_state_update(state, cfg.state, &mut evict[..n], gap_ns, &mut round);
        out.push(StateSamples {
            state_bytes: bytes,
            evict_bytes: e,
            gap_ns,
            elapsed_ns: t.elapsed_ns,
            moved_bytes: state.update_bytes(),
            kept_ns: t.kept.kept,
            dropped_ns: t.kept.dropped,
        });
        progress.tick("optimizer state");
    }
    Ok(out)
}

/// Timed updates and the median time from the end of the update before each to its start.
pub(crate) struct TimedUpdates {
    pub kept: crate::sample::Kept,
    pub elapsed_ns: f64,
}

/// `ModelState::apply_optimizer` timed `r` times, each after writing `evict` (untimed) and
/// then computing from the private cache for `gap_ns`: the state was last touched by the
/// update before. `round` numbers the updates (their salt).
pub(crate) fn time_state_update(
    state: &mut ModelState,
    r: crate::sample::Repeats,
    evict: &mut [u8],
    gap_ns: u64,
    round: &mut u64,
) -> TimedUpdates {
    // The first update's predecessor.
    *round += 1;
    state.apply_optimizer(*round);
    let mut last_end = Instant::now();
    let mut elapsed = Vec::new();
    let mut scratch = vec![0u32; SPIN_ELEMS];
    let kept = after_evicting(r, evict, || {
        spin(&mut scratch, gap_ns);
        *round += 1;
        let t = Instant::now();
        elapsed.push(t.duration_since(last_end).as_nanos() as f64);
        state.apply_optimizer(*round);
        last_end = Instant::now();
        last_end.duration_since(t).as_nanos() as f64
    });
    TimedUpdates {
        kept,
        elapsed_ns: crate::sample::median(&elapsed).unwrap_or(f64::NAN),
    }
}

/// 256 KiB of f32: what the core computes on while a gap passes, well inside its private cache.
const SPIN_ELEMS: usize = 64 << 10;

/// Keeps the core busy on `scratch` for `ns` (0: returns at once).
fn spin(scratch: &mut [u32], ns: u64) {
    if ns == 0 {
        return;
    }
    let until = Instant::now() + std::time::Duration::from_nanos(ns);
    while Instant::now() < until {
        for x in scratch.iter_mut() {
            *x = x.wrapping_add(1);
        }
        std::hint::black_box(&mut *scratch);
    }
}

/// memcpy of each size; the recorded bytes are those moved (read + write = twice the size).
pub fn memcpy(cfg: &Config, progress: &mut Counter) -> Vec<SizedSamples> {
    let mut out = Vec::new();
    for &moved in &cfg.memory_bytes {
        let len = usize::try_from(moved / 2).unwrap_or(usize::MAX);
        let src = vec![1u8; len];
        let mut dst = vec![0u8; len];
        let k = time_ns(cfg.memory, || {
            dst.copy_from_slice(&src);
            std::hint::black_box(&mut dst);
        });
        out.push(SizedSamples::new(moved, k));
        progress.tick("memcpy");
    }
    out
}

/// One `Alloc` of `bytes` through the host backend's own allocator ([`Held`]), as every step
/// after the first makes it: the size was allocated and freed before, so the allocator hands
/// back the buffer it kept (a framework's caching allocator does the same on a GPU; the host
/// backend touching fresh memory at every Alloc was the host's own cost: docs/calibration.md).
/// Before each timed allocation `cfg.gemm_evict_bytes` are written untimed: in a step, the ops
/// between two allocations leave the allocator's records out of the core's private cache.
pub fn alloc(cfg: &Config, progress: &mut Counter) -> Vec<SizedSamples> {
    let mut out = Vec::new();
    let mut evict = vec![0u8; usize::try_from(cfg.gemm_evict_bytes).unwrap_or(0)];
    for &bytes in &cfg.memory_bytes {
        let a = Allocation {
            tag: 0,
            category: MemCategory::Activations,
            device: Device::Gpu,
            bytes,
        };
        let mut held = Held::default();
        // The first allocation of a size is the first step's; the allocator keeps it.
        let _ = held.alloc(a, 0, 0).and_then(|()| held.free(a.tag));
        let k = after_evicting(cfg.memory, &mut evict, || {
            let t = Instant::now();
            let ok = held.alloc(a, 0, 0).is_ok();
            let ns = t.elapsed().as_nanos() as f64;
            if ok {
                let _ = held.free(a.tag);
            }
            ns
        });
        out.push(SizedSamples::new(bytes, k));
        progress.tick("alloc");
    }
    out
}
