//! The device's stream-ordered allocator pool, used as a framework's caching allocator: the
//! schedule's Alloc/Free ops allocate from it on their streams, it keeps what it reserved
//! from one step to the next (release threshold UINT64_MAX, never trimmed between steps unless
//! asked), and its high-water marks are the measured allocator peaks of a step.

use super::libs::cu;
use crate::error::RuntimeError;
use cudarc::driver::{result as drv, sys as drv_sys};

use drv_sys::CUmemPool_attribute as A;

/// What the pool reported over one step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepPeaks {
    pub used_high_bytes: u64,
    pub reserved_high_bytes: u64,
}

pub struct Pool {
    raw: drv_sys::CUmemoryPool,
    keep_between_steps: bool,
}

impl Pool {
    /// The device's default pool, set to keep freed memory reserved across synchronisations.
    /// Allocations name this pool explicitly (cuMemAllocFromPoolAsync), so the threshold is
    /// on the pool that serves them whatever the device's current pool is.
    pub fn open(dev: drv_sys::CUdevice, keep_between_steps: bool) -> Result<Pool, RuntimeError> {
        // SAFETY: valid device.
        let raw = unsafe { drv::device::get_default_mem_pool(dev) }
            .map_err(|e| cu("cuDeviceGetDefaultMemPool", e))?;
        let pool = Pool {
            raw,
            keep_between_steps,
        };
        pool.set(A::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, u64::MAX)?;
        Ok(pool)
    }

    fn get(&self, attr: A) -> Result<u64, RuntimeError> {
        let mut v: u64 = 0;
        // SAFETY: the attributes used here are cuuint64_t.
        unsafe { drv::mem_pool::get_attribute(self.raw, attr, (&mut v as *mut u64).cast()) }
            .map_err(|e| cu("cuMemPoolGetAttribute", e))?;
        Ok(v)
    }

    fn set(&self, attr: A, mut v: u64) -> Result<(), RuntimeError> {
        // SAFETY: the attributes used here are cuuint64_t.
        unsafe { drv::mem_pool::set_attribute(self.raw, attr, (&mut v as *mut u64).cast()) }
            .map_err(|e| cu("cuMemPoolSetAttribute", e))
    }

    /// Reset the high-water marks (device idle) and return what the pool still holds in
    /// reserve from the previous step: 0 means this step's Alloc ops map memory anew.
    pub fn begin_step(&self) -> Result<u64, RuntimeError> {
        self.set(A::CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0)?;
        self.set(A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 0)?;
        self.get(A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
    }

    /// Read the step's high-water marks (device idle); trim the pool only when asked not to
    /// keep its memory between steps.
    pub fn end_step(&self) -> Result<StepPeaks, RuntimeError> {
        let peaks = StepPeaks {
            used_high_bytes: self.get(A::CU_MEMPOOL_ATTR_USED_MEM_HIGH)?,
            reserved_high_bytes: self.get(A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)?,
        };
        if !self.keep_between_steps {
            // SAFETY: valid pool; the device is idle.
            unsafe { drv::mem_pool::trim_to(self.raw, 0) }.map_err(|e| cu("cuMemPoolTrimTo", e))?;
        }
        Ok(peaks)
    }

    /// Stream-ordered allocation of `bytes` (at least 1) on `stream`.
    pub fn alloc(
        &self,
        bytes: u64,
        stream: drv_sys::CUstream,
    ) -> Result<drv_sys::CUdeviceptr, RuntimeError> {
        let n = usize::try_from(bytes.max(1))
            .map_err(|_| RuntimeError::Unsupported(format!("{bytes} bytes")))?;
        // SAFETY: stream-ordered allocation from a live pool on a live stream.
        unsafe { drv::mem_pool::alloc_async(self.raw, n, stream) }
            .map_err(|e| cu("cuMemAllocFromPoolAsync", e))
    }

    /// Return everything the pool holds to the device (device idle, nothing allocated).
    pub fn release(&self) {
        let _ = self.set(A::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 0);
        // SAFETY: valid pool.
        let _ = unsafe { drv::mem_pool::trim_to(self.raw, 0) };
    }
}
