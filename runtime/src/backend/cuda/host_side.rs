//! The host side of optimizer offload on the CUDA backend: copies between the GPU and pinned
//! host memory over its host link (`OpKind::HostCopy`), and the host's optimizer update
//! (`OpKind::HostUpdate`) as a pass of the CPU over host memory, run in stream order by a
//! host function (`cuLaunchHostFunc`), so the op's CUDA events bracket the CPU's work.

use super::device::{DeviceBuffer, HostBuffer};
use super::libs::cu;
use crate::error::RuntimeError;
use cudarc::driver::{result as drv, sys as drv_sys};
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// Host memory an update streams through: larger than any CPU's last-level cache, so the pass
/// runs at the host's memory bandwidth, as an offloaded optimizer's does.
const PASS_BUFFER_BYTES: usize = 256 << 20;
/// Bytes one element of the pass reads and writes (an f32 read and written back).
const PASS_BYTES_PER_ELEM: u64 = 8;

/// What one rank's offload ops need, allocated at the first such op.
pub struct HostSide {
    /// Pinned host memory the copies land in, a chunk of the stream's scratch at a time.
    staging: HostBuffer,
    staging_bytes: u64,
    /// Shared with the host functions in flight, which keep it alive.
    pass: Arc<Mutex<Vec<f32>>>,
}

impl HostSide {
    /// Staging for copies of up to `chunk_bytes` at a time (the stream's scratch).
    pub fn new(chunk_bytes: u64) -> Result<HostSide, RuntimeError> {
        Ok(HostSide {
            staging: HostBuffer::new(chunk_bytes)?,
            staging_bytes: chunk_bytes.max(1),
            pass: Arc::new(Mutex::new(vec![0.0f32; PASS_BUFFER_BYTES / 4])),
        })
    }

    /// Copy `bytes` between `scratch` and the pinned staging buffer, in chunks of the smaller
    /// of the two, on `stream`.
    pub fn copy(
        &self,
        scratch: &DeviceBuffer,
        bytes: u64,
        to_host: bool,
        stream: drv_sys::CUstream,
    ) -> Result<(), RuntimeError> {
        let chunk = self.staging_bytes.min(scratch.bytes).max(1);
        let mut left = bytes;
        while left > 0 {
            let n = left.min(chunk) as usize;
            // SAFETY: n <= staging_bytes (the pinned allocation's size) and n <= scratch.bytes;
            // both buffers outlive the step, which synchronises before either is dropped.
            let host =
                unsafe { std::slice::from_raw_parts_mut(self.staging.as_ptr().cast::<u8>(), n) };
            if to_host {
                unsafe { drv::memcpy_dtoh_async(host, scratch.ptr, stream) }
                    .map_err(|e| cu("cuMemcpyDtoHAsync", e))?;
            } else {
                unsafe { drv::memcpy_htod_async(scratch.ptr, &*host, stream) }
                    .map_err(|e| cu("cuMemcpyHtoDAsync", e))?;
            }
            left -= n as u64;
        }
        Ok(())
    }

    /// The host's update of `bytes` of host memory, run by the CPU when `stream` reaches it.
    pub fn update(&self, bytes: u64, stream: drv_sys::CUstream) -> Result<(), RuntimeError> {
        let job = Box::new(UpdateJob {
            pass: Arc::clone(&self.pass),
            bytes,
        });
        let user = Box::into_raw(job).cast::<c_void>();
        // SAFETY: `run_update` takes back the box it is given exactly once; the job owns
        // everything it touches.
        let r = unsafe { drv_sys::cuLaunchHostFunc(stream, Some(run_update), user) };
        if r != drv_sys::CUresult::CUDA_SUCCESS {
            // Not enqueued: the box is still ours.
            drop(unsafe { Box::from_raw(user.cast::<UpdateJob>()) });
            return Err(cu("cuLaunchHostFunc", drv::DriverError(r)));
        }
        Ok(())
    }
}

struct UpdateJob {
    pass: Arc<Mutex<Vec<f32>>>,
    bytes: u64,
}

impl UpdateJob {
    /// Read and write `bytes` of the pass buffer, wrapping around it.
    fn run(&self) {
        let Ok(mut buf) = self.pass.lock() else {
            return;
        };
        let len = buf.len().max(1) as u64;
        let mut left = self.bytes / PASS_BYTES_PER_ELEM;
        while left > 0 {
            let n = left.min(len) as usize;
            for x in buf.iter_mut().take(n) {
                *x = *x * 0.999 + 1e-3;
            }
            left -= n as u64;
        }
        std::hint::black_box(&*buf);
    }
}

/// The host function: runs the job it owns.
unsafe extern "C" fn run_update(user: *mut c_void) {
    // SAFETY: `user` is the box `HostSide::update` leaked for this call, taken back once.
    let job = unsafe { Box::from_raw(user.cast::<UpdateJob>()) };
    job.run();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's pass touches `bytes / 8` elements, wrapping around its buffer: a pass of
    /// one and a half buffers updates the first half twice and the rest once.
    #[test]
    fn the_update_streams_its_bytes_over_the_buffer() {
        let pass = Arc::new(Mutex::new(vec![0.0f32; 1000]));
        let job = UpdateJob {
            pass: Arc::clone(&pass),
            bytes: 1500 * PASS_BYTES_PER_ELEM,
        };
        job.run();
        let once = 0.0f32 * 0.999 + 1e-3;
        let twice = once * 0.999 + 1e-3;
        let buf = pass.lock().unwrap();
        assert_ne!(once, twice);
        assert!(buf[..500].iter().all(|&x| x == twice));
        assert!(buf[500..].iter().all(|&x| x == once));
    }

    /// A job run by the host function takes back and frees the box it was given.
    #[test]
    fn the_host_function_runs_the_job_it_owns() {
        let pass = Arc::new(Mutex::new(vec![0.0f32; 10]));
        let job = Box::new(UpdateJob {
            pass: Arc::clone(&pass),
            bytes: 10 * PASS_BYTES_PER_ELEM,
        });
        // SAFETY: the pointer is a leaked box of an UpdateJob, taken back once.
        unsafe { run_update(Box::into_raw(job).cast::<c_void>()) };
        assert_eq!(Arc::strong_count(&pass), 1);
        assert!(pass.lock().unwrap().iter().all(|&x| x == 1e-3));
    }
}
