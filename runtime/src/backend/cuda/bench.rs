//! Microbenchmarks for `twin calibrate cuda` besides the GEMM sweep: the backend's
//! memory-bound work (`run_memory_bound`, device-to-device copies) over sizes, host<->device
//! copies from pinned memory, and chains of back-to-back tiny launches (the per-launch cost a
//! schedule's kernel count pays). Each is timed with one CUDA-event pair per repetition on GPU
//! 0, after untimed warm-up runs, so calibration times exactly what the backend issues.

use super::device::{run_memory_bound, DeviceBuffer, HostBuffer};
use super::libs::{self, cu, guard};
use crate::error::RuntimeError;
use cudarc::driver::{sys as drv_sys, CudaContext, CudaStream};
use serde::Serialize;
use std::sync::Arc;

/// What a [`SizedTimes`] measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Micro {
    /// `run_memory_bound` moving `size` bytes (read + write) through device memory.
    MemoryBound,
    /// `size` bytes from pinned host memory to the device.
    HostToDevice,
    /// `size` bytes from the device to pinned host memory.
    DeviceToHost,
    /// `size` back-to-back launches of a 256-byte memory-bound kernel.
    LaunchChain,
}

/// Every timed repetition of one size (bytes, or launches for [`Micro::LaunchChain`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SizedTimes {
    pub what: Micro,
    pub size: u64,
    pub times_ns: Vec<u64>,
}

/// Untimed runs before the timed ones (clocks, lazy module loading, first-touch mappings).
const WARMUP: u32 = 3;
/// Bytes each launch of a chain moves: small enough that the launch, not the copy, is timed.
const CHAIN_BYTES: u64 = 256;

/// Times `what` at each size, `reps` times after [`WARMUP`] runs.
pub fn micro_sweep(what: Micro, sizes: &[u64], reps: u32) -> Result<Vec<SizedTimes>, RuntimeError> {
    libs::load()?;
    guard("micro_sweep", || {
        let ctx = CudaContext::new(0).map_err(|e| cu("cuDevicePrimaryCtxRetain", e))?;
        let stream = ctx.new_stream().map_err(|e| cu("cuStreamCreate", e))?;
        let largest = sizes.iter().copied().max().unwrap_or(0);
        let bufs = Buffers::new(what, largest)?;
        let timing = Some(drv_sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = ctx.new_event(timing).map_err(|e| cu("cuEventCreate", e))?;
        let end = ctx.new_event(timing).map_err(|e| cu("cuEventCreate", e))?;
        let mut out = Vec::with_capacity(sizes.len());
        for &size in sizes {
            for _ in 0..WARMUP {
                issue(what, &bufs, size, &stream)?;
            }
            let mut times_ns = Vec::with_capacity(reps as usize);
            for _ in 0..reps.max(1) {
                start.record(&stream).map_err(|e| cu("cuEventRecord", e))?;
                issue(what, &bufs, size, &stream)?;
                end.record(&stream).map_err(|e| cu("cuEventRecord", e))?;
                let ms = start
                    .elapsed_ms(&end)
                    .map_err(|e| cu("cuEventElapsedTime", e))?;
                times_ns.push((f64::from(ms) * 1e6).round().max(1.0) as u64);
            }
            out.push(SizedTimes {
                what,
                size,
                times_ns,
            });
        }
        Ok(out)
    })
}

/// The buffers one sweep needs: a device buffer, and a pinned host one for host copies.
struct Buffers {
    device: DeviceBuffer,
    host: Option<HostBuffer>,
}

impl Buffers {
    fn new(what: Micro, largest: u64) -> Result<Buffers, RuntimeError> {
        let device_bytes = match what {
            Micro::MemoryBound => largest.max(2),
            Micro::HostToDevice | Micro::DeviceToHost => largest.max(1),
            Micro::LaunchChain => 2 * CHAIN_BYTES,
        };
        let device = DeviceBuffer::new(device_bytes)?;
        device.fill_random(3)?;
        let host = match what {
            Micro::HostToDevice | Micro::DeviceToHost => Some(HostBuffer::new(largest.max(1))?),
            _ => None,
        };
        Ok(Buffers { device, host })
    }
}

fn issue(
    what: Micro,
    b: &Buffers,
    size: u64,
    stream: &Arc<CudaStream>,
) -> Result<(), RuntimeError> {
    let s = stream.cu_stream();
    match what {
        Micro::MemoryBound => run_memory_bound(&b.device, size, 1, s),
        Micro::LaunchChain => {
            for _ in 0..size {
                run_memory_bound(&b.device, CHAIN_BYTES, 1, s)?;
            }
            Ok(())
        }
        Micro::HostToDevice | Micro::DeviceToHost => {
            let host = b
                .host
                .as_ref()
                .ok_or_else(|| RuntimeError::Unsupported("no pinned buffer".into()))?;
            let n = usize::try_from(size.min(b.device.bytes))
                .map_err(|_| RuntimeError::Unsupported(format!("copy of {size} bytes")))?;
            // SAFETY: both buffers hold at least `n` bytes (sized for the largest size); the
            // pinned buffer outlives the stream's use of it (synchronised by elapsed_ms).
            unsafe {
                if what == Micro::HostToDevice {
                    drv_sys::cuMemcpyHtoDAsync_v2(b.device.ptr, host.as_ptr(), n, s).result()
                } else {
                    drv_sys::cuMemcpyDtoHAsync_v2(host.as_ptr(), b.device.ptr, n, s).result()
                }
            }
            .map_err(|e| cu("cuMemcpyAsync (host)", e))
        }
    }
}
