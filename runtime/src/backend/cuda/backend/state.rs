//! The model state of a CUDA rank that checkpoints ([`CudaOptions::keep_state`]): one buffer
//! per state allocation of the schedule (weights on the device, optimizer state), allocated
//! outside the step pool once per run, filled from the seed, the rank and the tag, and kept
//! across steps (the step's Alloc/Free of it are only accounted). Checkpoints copy its bytes
//! out and back through [`StateBuffers`]; everything else about checkpoints is shared with the
//! host backend. The optimizer op's traffic runs on scratch, so the values do not change from
//! step to step.

use super::super::device::fill_pattern;
use super::*;
use crate::checkpoint::state::is_state;
use crate::checkpoint::{StateBuffers, StateInfo};
use crate::launch::device::DeviceBackend;

/// Where one state buffer lives.
pub(super) enum StateMem {
    Gpu(DeviceBuffer),
    Host(Vec<u8>),
}

fn mix(z: u64) -> u64 {
    let z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn allocate(info: &StateInfo) -> Result<StateMem, RuntimeError> {
    Ok(match info.device {
        Device::Gpu => StateMem::Gpu(DeviceBuffer::new(info.bytes)?),
        Device::Host => {
            let n = usize::try_from(info.bytes)
                .map_err(|_| RuntimeError::Unsupported(format!("{} bytes", info.bytes)))?;
            StateMem::Host(vec![0; n])
        }
    })
}

impl CudaBackend {
    /// Make sure every state allocation of `program` has its buffer (a new one filled from
    /// the seed, rank and tag); an existing one must have the planned kind and size.
    pub(super) fn ensure_state(
        &mut self,
        rank: RankId,
        program: &Program,
    ) -> Result<(), RuntimeError> {
        for op in &program.ops {
            let OpKind::Alloc {
                category,
                device,
                bytes,
                tag,
            } = op.kind
            else {
                continue;
            };
            if !is_state(category, device) {
                continue;
            }
            let info = StateInfo {
                tag,
                category,
                device,
                bytes,
            };
            if let Some((have, _)) = self.state.get(&tag) {
                if *have != info {
                    return Err(RuntimeError::Schedule {
                        rank,
                        message: format!(
                            "state buffer {tag} holds {} bytes of {}, the schedule plans {bytes} bytes of {}",
                            have.bytes,
                            have.category.name(),
                            category.name()
                        ),
                    });
                }
                continue;
            }
            let seed = mix(self.options.seed ^ mix(u64::from(rank) << 32 | u64::from(tag)));
            let mem = match allocate(&info)? {
                StateMem::Gpu(b) => {
                    b.fill_random(seed)?;
                    StateMem::Gpu(b)
                }
                StateMem::Host(v) => StateMem::Host(fill_pattern(v.len(), seed)),
            };
            self.state.insert(tag, (info, mem));
        }
        Ok(())
    }
}

impl StateBuffers for CudaBackend {
    fn state_buffers(&self) -> Vec<StateInfo> {
        self.state.values().map(|(i, _)| *i).collect()
    }

    fn read_state(&self, tag: u32, out: &mut [u8]) -> Result<(), RuntimeError> {
        let (info, mem) = self
            .state
            .get(&tag)
            .ok_or_else(|| RuntimeError::Unsupported(format!("no state buffer {tag}")))?;
        if out.len() as u64 != info.bytes {
            return Err(RuntimeError::Unsupported(format!(
                "state buffer {tag} holds {} bytes, {} asked for",
                info.bytes,
                out.len()
            )));
        }
        guard("CudaBackend::read_state", || match mem {
            StateMem::Gpu(b) => {
                self.ctx
                    .bind_to_thread()
                    .map_err(|e| cu("cuCtxSetCurrent", e))?;
                self.ctx
                    .synchronize()
                    .map_err(|e| cu("cuCtxSynchronize", e))?;
                // SAFETY: `out` is exactly the buffer's length; the device is idle.
                unsafe { drv::memcpy_dtoh_sync(out, b.ptr) }.map_err(|e| cu("cuMemcpyDtoH", e))
            }
            StateMem::Host(v) => {
                out.copy_from_slice(v);
                Ok(())
            }
        })
    }

    fn write_state(&mut self, info: StateInfo, bytes: &[u8]) -> Result<(), RuntimeError> {
        if bytes.len() as u64 != info.bytes {
            return Err(RuntimeError::Unsupported(format!(
                "state buffer {} announces {} bytes and holds {}",
                info.tag,
                info.bytes,
                bytes.len()
            )));
        }
        guard("CudaBackend::write_state", || {
            self.ctx
                .bind_to_thread()
                .map_err(|e| cu("cuCtxSetCurrent", e))?;
            if self
                .state
                .get(&info.tag)
                .is_none_or(|(have, _)| *have != info)
            {
                self.state.insert(info.tag, (info, allocate(&info)?));
            }
            match self.state.get_mut(&info.tag) {
                Some((_, StateMem::Gpu(b))) => {
                    // SAFETY: `bytes` is exactly the buffer's length.
                    unsafe { drv::memcpy_htod_sync(b.ptr, bytes) }
                        .map_err(|e| cu("cuMemcpyHtoD", e))
                }
                Some((_, StateMem::Host(v))) => {
                    v.copy_from_slice(bytes);
                    Ok(())
                }
                None => Err(RuntimeError::Unsupported(format!(
                    "no state buffer {}",
                    info.tag
                ))),
            }
        })
    }
}

impl DeviceBackend for CudaBackend {
    fn step_origin(&self) -> Option<std::time::Instant> {
        self.step_origin
    }
}
