//! What the CUDA backend holds on a device beyond the schedule's own allocations (its per-stream
//! GEMM operands, copy scratch and communication buffers), computed from the program alone, and
//! the check that a run fits the device before it starts: the schedule's peak (whose `reserved`
//! category stands for the CUDA context, cuBLAS and NCCL) plus these workspaces against the
//! GPU's usable bytes. Nothing here touches a device, so it compiles and is tested everywhere.

use super::dtype::{gemm_dtype, GemmDtype};
use super::fp8::{fp8_workspace, lt_workspace_bytes};
use twin_sim::scenario::Scenario;
use twin_sim::schedule::{CollectiveKind, Gemm, OpKind, Program, Schedule, Stream};

/// Largest bytes one operand of a batched GEMM call may span; longer batches are issued as
/// several calls over the same buffers (see [`batch_per_call`]).
pub const MAX_OPERAND_BYTES: u64 = 1 << 30;

/// Largest scratch for memory-bound copies: past this, copies loop over the same buffer.
pub const MAX_MEMORY_SCRATCH_BYTES: u64 = 512 << 20;

/// How many of a GEMM's `count` repetitions one strided-batched call covers: the schedule's
/// `batch` (the calls the cost model prices), fewer where an operand would span more than
/// [`MAX_OPERAND_BYTES`].
pub fn batch_per_call(g: &Gemm, dtype: GemmDtype) -> u64 {
    let e = dtype.element_bytes();
    let largest = [g.m * g.k, g.k * g.n, g.m * g.n]
        .into_iter()
        .max()
        .unwrap_or(0)
        .saturating_mul(e)
        .max(1);
    (MAX_OPERAND_BYTES / largest).clamp(1, u64::from(g.batch.min(g.count).max(1)))
}

/// Bytes of operands A, B and C one call of `g` needs.
pub fn operand_bytes(g: &Gemm, dtype: GemmDtype) -> [u64; 3] {
    let e = dtype.element_bytes();
    let b = batch_per_call(g, dtype);
    [g.m * g.k * e * b, g.k * g.n * e * b, g.m * g.n * e * b]
}

/// The workspaces of one stream, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamWorkspace {
    /// GEMM operands A, B, C, each sized to the largest of its kind on the stream.
    pub gemm: [u64; 3],
    /// Memory-bound copies and checkpoint staging.
    pub scratch: u64,
    /// Collective and point-to-point send buffer (in-place collectives use it alone).
    pub comm_send: u64,
    /// All-to-all receive buffer.
    pub comm_recv: u64,
    /// FP8 GEMM operands (`fp8::fp8_workspace`): A (e4m3), B (e4m3, and again as e5m2 for
    /// gradients) and each operand's scales (fp32, and E8M0 for MXFP8), counted whether or not
    /// the GPU turns out to run FP8 (an upper bound).
    pub fp8: [u64; 3],
    /// cuBLASLt's workspace, when the stream has FP8 GEMMs.
    pub lt_workspace: u64,
}

impl StreamWorkspace {
    pub fn total_bytes(&self) -> u64 {
        let [a, b, scales] = self.fp8;
        self.gemm.iter().sum::<u64>()
            + self.scratch
            + self.comm_send
            + self.comm_recv
            + a
            + 2 * b
            + 6 * scales
            + self.lt_workspace
    }
}

/// The workspaces each stream of `program` needs, indexed by [`Stream::index`].
pub fn workspaces(program: &Program, allow_tf32: bool) -> [StreamWorkspace; Stream::COUNT] {
    let mut w = [StreamWorkspace::default(); Stream::COUNT];
    for op in &program.ops {
        let Some(s) = w.get_mut(op.stream.index()) else {
            continue;
        };
        match &op.kind {
            OpKind::Compute(c) => {
                for g in c.executed_gemms() {
                    let dtype = gemm_dtype(g.dtype.unwrap_or(c.dtype), allow_tf32).dtype;
                    for (have, n) in s.gemm.iter_mut().zip(operand_bytes(&g, dtype)) {
                        *have = (*have).max(n);
                    }
                }
                let fp8 = fp8_workspace(c);
                if fp8[0] > 0 {
                    for (have, n) in s.fp8.iter_mut().zip(fp8) {
                        *have = (*have).max(n);
                    }
                    s.lt_workspace = lt_workspace_bytes((9, 0));
                }
                s.scratch = s.scratch.max(
                    c.memory_bytes
                        .div_ceil(2)
                        .saturating_mul(2)
                        .min(MAX_MEMORY_SCRATCH_BYTES),
                );
            }
            OpKind::Collective { kind, bytes, .. } => {
                s.comm_send = s.comm_send.max(*bytes);
                if *kind == CollectiveKind::AllToAll {
                    s.comm_recv = s.comm_recv.max(*bytes);
                }
            }
            OpKind::Send { bytes, .. } | OpKind::Recv { bytes, .. } => {
                s.comm_send = s.comm_send.max(*bytes);
            }
            OpKind::Checkpoint { bytes } => {
                s.scratch = s.scratch.max((*bytes).min(MAX_MEMORY_SCRATCH_BYTES));
            }
            _ => {}
        }
    }
    w
}

/// Bytes of all of `program`'s workspaces together: what the backend allocates before the
/// first step (its `workspace_bytes`).
pub fn workspace_bytes(program: &Program, allow_tf32: bool) -> u64 {
    workspaces(program, allow_tf32)
        .iter()
        .map(StreamWorkspace::total_bytes)
        .sum()
}

/// Whether a run of a schedule fits its GPU: the largest schedule peak of any rank plus the
/// largest workspace of any rank, against the scenario GPU's usable bytes. Ranks that differ
/// are counted at the worst of both, which can only over-count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceFit {
    /// The schedule's own peak (its Alloc/Free account, `reserved` included: the context,
    /// cuBLAS and NCCL, which the backend holds for real and does not allocate again).
    pub schedule_peak_bytes: u64,
    /// The backend's workspaces ([`workspace_bytes`]).
    pub workspace_bytes: u64,
    /// The GPU's usable bytes (cuMemGetInfo's total).
    pub usable_bytes: u64,
    pub gpu: String,
}

impl DeviceFit {
    /// From the ranks' schedule peaks, which the caller has the simulator compute (the
    /// `peak_memory_bytes` of each rank of a simulated step).
    pub fn of(
        scenario: &Scenario,
        schedule: &Schedule,
        peaks: impl IntoIterator<Item = u64>,
        allow_tf32: bool,
    ) -> DeviceFit {
        DeviceFit {
            schedule_peak_bytes: peaks.into_iter().max().unwrap_or(0),
            workspace_bytes: schedule
                .programs
                .iter()
                .map(|p| workspace_bytes(p, allow_tf32))
                .max()
                .unwrap_or(0),
            usable_bytes: scenario.cluster.gpu.usable_bytes(),
            gpu: scenario.cluster.gpu.name.clone(),
        }
    }

    /// Schedule peak plus workspaces.
    pub fn need_bytes(&self) -> u64 {
        self.schedule_peak_bytes
            .saturating_add(self.workspace_bytes)
    }

    pub fn fits(&self) -> bool {
        self.need_bytes() <= self.usable_bytes
    }

    /// `Ok` when the run fits, else the refusal that names the numbers.
    pub fn check(&self) -> Result<(), DoesNotFit> {
        if self.fits() {
            Ok(())
        } else {
            Err(DoesNotFit(self.clone()))
        }
    }
}

const GIB: f64 = (1u64 << 30) as f64;

/// A CUDA run refused before it starts because it would run out of device memory.
#[derive(Debug, thiserror::Error)]
#[error(
    "the CUDA run would need {:.2} GiB per GPU but the {} has {:.2} GiB usable (over by {:.2} GiB): \
     the schedule peaks at {:.2} GiB (its reserved category stands for the CUDA context, cuBLAS \
     and NCCL) and the runtime's GEMM-operand, copy and communication workspaces take {:.2} GiB; \
     use fewer layers (--set model.layers=N), recompute (--set training.recompute=full), a \
     smaller micro batch or more GPUs",
    .0.need_bytes() as f64 / GIB,
    .0.gpu,
    .0.usable_bytes as f64 / GIB,
    .0.need_bytes().saturating_sub(.0.usable_bytes) as f64 / GIB,
    .0.schedule_peak_bytes as f64 / GIB,
    .0.workspace_bytes as f64 / GIB
)]
pub struct DoesNotFit(pub DeviceFit);
