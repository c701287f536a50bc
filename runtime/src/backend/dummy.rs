//! The dummy device: a backend that stands in for the CUDA backend where there is no GPU, so
//! the device worker's whole path (launch, checkpoints, injected kills, restart and reload)
//! runs in tests and CI. It does no work: an op takes the time the host needs to issue it.
//! Its model state is the host backend's [`ModelState`] (seeded buffers, the order-sensitive
//! update at every Optimizer op), so its final digest equals a host run's of the same
//! scenario, and a recovered run that lost or repeated a step shows a different one.

use super::host::state::is_state;
use super::host::ModelState;
use super::{Backend, MemoryReport, OpContext, OpTiming};
use crate::checkpoint::{StateBuffers, StateInfo};
use crate::error::RuntimeError;
use crate::launch::device::DeviceBackend;
use std::time::Instant;
use twin_sim::plan::{Plan, RankId};
use twin_sim::schedule::{Op, OpKind, Phase, Program};

pub struct DummyDevice {
    state: ModelState,
    global_step: u64,
    origin: Option<Instant>,
    timings: Vec<OpTiming>,
}

impl DummyDevice {
    /// Rank `rank`'s device, its state seeded from `seed` as the host backend seeds it.
    pub fn new(seed: u64, rank: u32) -> DummyDevice {
        DummyDevice {
            state: ModelState::new(seed, rank),
            global_step: 0,
            origin: None,
            timings: Vec::new(),
        }
    }

    fn now_ns(&self) -> u64 {
        self.origin.map_or(0, |o| {
            u64::try_from(o.elapsed().as_nanos()).unwrap_or(u64::MAX)
        })
    }
}

impl Backend for DummyDevice {
    fn name(&self) -> &'static str {
        "dummy-cuda"
    }

    fn prepare(
        &mut self,
        _plan: &Plan,
        rank: RankId,
        program: &Program,
    ) -> Result<(), RuntimeError> {
        for op in &program.ops {
            if let OpKind::Alloc {
                category,
                device,
                bytes,
                tag,
            } = op.kind
            {
                if is_state(category, device) {
                    self.state
                        .ensure(tag, category, device, bytes)
                        .map_err(|message| RuntimeError::Schedule { rank, message })?;
                }
            }
        }
        self.timings.clear();
        self.origin = Some(Instant::now());
        Ok(())
    }

    fn enqueue(&mut self, index: u32, op: &Op, _ctx: &OpContext) -> Result<(), RuntimeError> {
        let start_ns = self.now_ns();
        if matches!(&op.kind, OpKind::Compute(c) if c.phase == Phase::Optimizer) {
            self.state.apply_optimizer(self.global_step);
        }
        self.timings.push(OpTiming {
            index,
            start_ns,
            end_ns: self.now_ns(),
            issued_ns: None,
            wait_ns: None,
        });
        Ok(())
    }

    fn finish_step(&mut self) -> Result<Vec<OpTiming>, RuntimeError> {
        Ok(std::mem::take(&mut self.timings))
    }

    fn memory(&self) -> MemoryReport {
        MemoryReport {
            notes: vec!["dummy-cuda backend: no device work; state buffers in host memory".into()],
            ..MemoryReport::default()
        }
    }
}

impl StateBuffers for DummyDevice {
    fn state_buffers(&self) -> Vec<StateInfo> {
        self.state.state_buffers()
    }
    fn read_state(&self, tag: u32, out: &mut [u8]) -> Result<(), RuntimeError> {
        self.state.read_state(tag, out)
    }
    fn write_state(&mut self, info: StateInfo, bytes: &[u8]) -> Result<(), RuntimeError> {
        self.state.write_state(info, bytes)
    }
}

impl DeviceBackend for DummyDevice {
    fn step_origin(&self) -> Option<Instant> {
        self.origin
    }
    fn set_global_step(&mut self, step: u64) {
        self.global_step = step;
    }
    fn state_digest(&self) -> Result<Option<u64>, RuntimeError> {
        self.state.digest().map(Some)
    }
}
