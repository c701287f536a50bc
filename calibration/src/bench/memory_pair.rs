//! How much memory-bound work the machine serves on two cores at once. The engine gives each
//! core its own speed, and a GEMM op in its private cache does not slow another core's (a
//! probe on the AMD development VM: an Adam-like pass took the same time beside a core
//! computing in its cache). A memory-bound op does: the same pass ran 50-55% longer while the
//! other core streamed 16 MiB, and the optimizer ops of `tp-pp.toml`'s runs, whose two
//! tensor-parallel ranks update their state at the same time on two cores, ran 29-37% over
//! their price (docs/journal/2026-11-25-host-verify.md, 2026-11-25). So it is measured: the host
//! backend's optimizer update (`ModelState::apply_optimizer`) of `STATE_BYTES` of state, on a
//! thread pinned to core 0, each sample after its state was evicted by `cfg.step_evict_bytes` of
//! other writes (as a step leaves it), in blocks that alternate between core 1 idle and core 1
//! running the same update on its own state at the same time. The profile's `[host] memory_cores`
//! is `2 (1 - s)` for the rate `s` the pair loses against alone (`fit::ratio::memory_cores`): the
//! cores' worth of such work the machine serves at once.

use super::comm::Barrier;
use super::compute::evict_cache;
use super::{Config, Counter, Mode};
use crate::CalibError;
use serde::{Deserialize, Serialize};
use std::time::Instant;
use twin_runtime::backend::host::ModelState;
use twin_runtime::launch::affinity::pin_rank;
use twin_sim::schedule::{Device, MemCategory};

/// The state each core updates: about a host scenario rank's (`tp-pp.toml`: 3.8 MB).
pub const STATE_BYTES: u64 = 4 << 20;

/// Core 0's update times with core 1 idle (`alone_ns`) and both cores' with core 1 updating
/// too (`pair_ns`), in ns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryPairSamples {
    pub state_bytes: u64,
    pub evict_bytes: u64,
    pub alone_ns: Vec<f64>,
    pub pair_ns: Vec<f64>,
}

/// (blocks per mode, timed samples per block); each block starts with one untimed sample.
fn shape(mode: Mode) -> (usize, usize) {
    match mode {
        Mode::Full => (3, 12),
        Mode::Quick => (2, 8),
        Mode::Tiny => (1, 3),
    }
}

/// How many measurements [`memory_pair`] reports (0 on fewer than two cores, where it does
/// not run).
pub fn measurement_count(cfg: &Config, cores: u32) -> usize {
    if cores < 2 {
        0
    } else {
        2 * shape(cfg.mode).0
    }
}

/// One core's side: `blocks` x (idle block, pair block); core 0 times every update it runs,
/// core 1 only those of the pair blocks. Returns (alone, pair) samples.
fn core_side(
    core: u32,
    cfg: &Config,
    barrier: &Barrier,
    tick: &std::sync::mpsc::Sender<()>,
) -> Result<(Vec<f64>, Vec<f64>), CalibError> {
    let r = run_core(core, cfg, barrier, tick);
    if r.is_err() {
        barrier.abort();
    }
    r
}

fn run_core(
    core: u32,
    cfg: &Config,
    barrier: &Barrier,
    tick: &std::sync::mpsc::Sender<()>,
) -> Result<(Vec<f64>, Vec<f64>), CalibError> {
    pin_rank(core);
    let mut state = ModelState::new(1, core);
    state
        .ensure(0, MemCategory::Optimizer, Device::Gpu, STATE_BYTES)
        .map_err(|e| {
            CalibError::Bench(format!("memory pair: state of {STATE_BYTES} bytes: {e}"))
        })?;
    let mut evict = vec![0u8; usize::try_from(cfg.step_evict_bytes).unwrap_or(0)];
    let (blocks, n) = shape(cfg.mode);
    let (mut alone, mut pair) = (Vec::new(), Vec::new());
    let mut round = 0u64;
    for _ in 0..blocks {
        for together in [false, true] {
            for k in 0..=n {
                // Both evict, so that the caches hold the same in both kinds of block.
                evict_cache(&mut evict);
                barrier.wait(2)?;
                if together || core == 0 {
                    round += 1;
                    let t = Instant::now();
                    state.apply_optimizer(round);
                    let ns = t.elapsed().as_nanos() as f64;
                    if k > 0 {
                        if together {
                            pair.push(ns);
                        } else {
                            alone.push(ns);
                        }
                    }
                }
                barrier.wait(2)?;
            }
            if core == 0 {
                let _ = tick.send(());
            }
        }
    }
    Ok((alone, pair))
}

/// The measurement; `None` on fewer than two cores.
pub fn memory_pair(
    cfg: &Config,
    cores: u32,
    progress: &mut Counter,
) -> Result<Option<MemoryPairSamples>, CalibError> {
    if cores < 2 {
        return Ok(None);
    }
    let barrier = Barrier::default();
    let (tx, rx) = std::sync::mpsc::channel();
    let sides = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2u32)
            .map(|core| {
                let (barrier, tx) = (&barrier, tx.clone());
                s.spawn(move || core_side(core, cfg, barrier, &tx))
            })
            .collect();
        drop(tx);
        for () in rx {
            progress.tick("memory on two cores");
        }
        super::comm::join_ranks(hs)
    })?;
    let mut out = MemoryPairSamples {
        state_bytes: STATE_BYTES,
        evict_bytes: cfg.step_evict_bytes,
        ..Default::default()
    };
    for (alone, pair) in sides {
        out.alone_ns.extend(alone);
        out.pair_ns.extend(pair);
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pair_runs_and_times_both_kinds_of_block() {
        let cfg = Config::new(Mode::Tiny, 2);
        let mut sink = super::super::Silent;
        let mut progress = Counter {
            sink: &mut sink,
            done: 0,
            total: measurement_count(&cfg, 2),
        };
        match memory_pair(&cfg, 2, &mut progress) {
            Ok(Some(s)) => {
                let (blocks, n) = shape(Mode::Tiny);
                assert_eq!(s.alone_ns.len(), blocks * n);
                // Both cores time the pair blocks.
                assert_eq!(s.pair_ns.len(), 2 * blocks * n);
                assert!(s.alone_ns.iter().chain(&s.pair_ns).all(|&t| t > 0.0));
                assert_eq!(s.state_bytes, STATE_BYTES);
            }
            Ok(None) => panic!("two cores were given"),
            Err(e) => panic!("{e}"),
        }
        // One core: not run.
        assert_eq!(memory_pair(&cfg, 1, &mut progress).ok(), Some(None));
        assert_eq!(measurement_count(&cfg, 1), 0);
    }
}
