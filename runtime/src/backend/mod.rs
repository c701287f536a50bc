//! The seam between the executor and a device. `exec` resolves everything that depends on
//! the plan (peers, groups, what a `Free` releases) into an [`OpContext`], so a backend only
//! does work and measures it. Async backends (CUDA) enqueue and report times at
//! [`Backend::finish_step`]; sync backends (host CPU) may run each op inside `enqueue`.

pub mod cuda;
pub mod dummy;
pub mod host;

use crate::error::RuntimeError;
use serde::Serialize;
use twin_sim::plan::{Group, GroupKind, Plan, RankId};
use twin_sim::schedule::{Device, MemCategory, Op, Program};

/// A point-to-point peer resolved by the plan, and the group whose communicator carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerRoute {
    pub rank: RankId,
    pub group: GroupKind,
}

/// What an `Alloc` reserved under a tag; handed to the backend again at the matching `Free`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Allocation {
    pub tag: u32,
    pub category: MemCategory,
    pub device: Device,
    pub bytes: u64,
}

/// Everything about one op that depends on the plan or on earlier ops.
#[derive(Clone, Copy, Debug)]
pub struct OpContext<'a> {
    pub rank: RankId,
    /// Earlier ops of the same program that must finish first.
    pub deps: &'a [u32],
    /// Send / Recv: the resolved peer.
    pub peer: Option<PeerRoute>,
    /// Collective: the resolved group (members in ring order).
    pub group: Option<&'a Group>,
    /// Free: the allocation it releases.
    pub freed: Option<Allocation>,
}

/// Measured times of one op, nanoseconds from the start of the step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct OpTiming {
    pub index: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    /// When the backend issued the op (its deps done, as its stream saw them), where it knows
    /// (the host backend's stream threads); `None` where the device decides (CUDA streams).
    /// `exec` keeps it no later than `start_ns`.
    pub issued_ns: Option<u64>,
    /// How long the op's thread waited for a core while it ran the op (runnable, not running:
    /// the kernel's run delay), where the backend runs ops on host threads (the host
    /// backend). The rest of its span is the op's own: its work, and for a transfer its wait
    /// for data. The simulator's `solo_ns` counts a stretched op the same way.
    pub wait_ns: Option<u64>,
}

/// What a backend measured about device memory. Fields a backend cannot measure are `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MemoryReport {
    /// Device memory in use right after the backend set up (context, library handles), before
    /// any workspace or schedule allocation; includes other processes on the device.
    pub baseline_used_bytes: Option<u64>,
    /// The backend's own buffers that the schedule does not name (GEMM operands, collective
    /// scratch), held for the whole run.
    pub workspace_bytes: u64,
    /// Bytes the device allocator still held in reserve when the last step began (memory kept
    /// from earlier steps, as a caching allocator keeps it).
    pub allocator_reserved_at_start_bytes: Option<u64>,
    /// Device memory in use before the last step (after workspace), from the driver.
    pub used_before_step_bytes: Option<u64>,
    /// Device memory in use at the end of the last step, before the allocator released its
    /// pool: baseline + workspace + the pool's high-water reservation.
    pub used_after_step_bytes: Option<u64>,
    /// High-water mark of bytes handed out by the device allocator during the last step.
    pub allocator_peak_bytes: Option<u64>,
    /// High-water mark of bytes the allocator reserved from the device during the last step.
    pub allocator_reserved_peak_bytes: Option<u64>,
    pub total_bytes: Option<u64>,
    /// Caveats a reader needs (fallbacks taken, what a number includes).
    pub notes: Vec<String>,
}

/// A device that executes ops for real.
pub trait Backend {
    fn name(&self) -> &'static str;
    /// Called once per step before the first `enqueue`, with the rank's whole program, so the
    /// backend can size workspaces and set up communicators without doing so mid-step.
    fn prepare(
        &mut self,
        _plan: &Plan,
        _rank: RankId,
        _program: &Program,
    ) -> Result<(), RuntimeError> {
        Ok(())
    }
    /// Issue op `index` of the program. An async backend waits on `ctx.deps` on the device; a
    /// sync backend may run the op now.
    fn enqueue(&mut self, index: u32, op: &Op, ctx: &OpContext) -> Result<(), RuntimeError>;
    /// Wait until every issued op has finished and return one timing per issued op.
    fn finish_step(&mut self) -> Result<Vec<OpTiming>, RuntimeError>;
    fn memory(&self) -> MemoryReport;
}
