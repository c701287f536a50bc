//! Sizing the per-stream workspaces of [`CudaBackend`] (GEMM operands, memory-bound scratch,
//! communication buffers) from a rank's whole program, once before the first step, so that no
//! op allocates while a step runs. Split from `backend.rs` to keep that file about issuing ops.

use super::*;

/// Largest scratch for memory-bound copies: past this, copies loop over the same buffer.
pub(super) const MAX_MEMORY_SCRATCH_BYTES: u64 = 512 << 20;

impl CudaBackend {
    /// Size and allocate the stream workspaces the program needs.
    pub(super) fn size_workspaces(&mut self, program: &Program) -> Result<(), RuntimeError> {
        let mut gemm = [[0u64; 3]; Stream::COUNT];
        let mut scratch = [0u64; Stream::COUNT];
        let mut comm = [[0u64; 2]; Stream::COUNT];
        for op in &program.ops {
            let s = op.stream.index();
            match &op.kind {
                OpKind::Compute(c) => {
                    let choice = gemm_dtype(c.dtype, self.options.allow_tf32);
                    for g in &c.gemms {
                        let need = operand_bytes(g, choice.dtype);
                        for (have, n) in gemm[s].iter_mut().zip(need) {
                            *have = (*have).max(n);
                        }
                    }
                    scratch[s] = scratch[s].max(
                        c.memory_bytes
                            .div_ceil(2)
                            .saturating_mul(2)
                            .min(MAX_MEMORY_SCRATCH_BYTES),
                    );
                }
                OpKind::Collective { kind, bytes, .. } => {
                    comm[s][0] = comm[s][0].max(*bytes);
                    if *kind == CollectiveKind::AllToAll {
                        comm[s][1] = comm[s][1].max(*bytes);
                    }
                }
                OpKind::Send { bytes, .. } | OpKind::Recv { bytes, .. } => {
                    comm[s][0] = comm[s][0].max(*bytes);
                }
                OpKind::Checkpoint { bytes } => {
                    scratch[s] = scratch[s].max((*bytes).min(MAX_MEMORY_SCRATCH_BYTES));
                }
                _ => {}
            }
        }
        let seed = self.options.seed;
        for (s, stream) in Stream::ALL.iter().enumerate() {
            let cu_stream = stream_of(&self.streams, *stream)?.cu_stream();
            let Some(w) = self.work.get_mut(s) else {
                continue;
            };
            let [a, b, c] = gemm[s];
            if a > 0 {
                if w.blas.is_none() {
                    w.blas = Some(BlasHandle::new(cu_stream)?);
                }
                let fits = w
                    .gemm
                    .as_ref()
                    .is_some_and(|g| g.a.bytes >= a && g.b.bytes >= b && g.c.bytes >= c);
                if !fits {
                    w.gemm = None;
                    let ops = GemmOperands {
                        a: DeviceBuffer::new(a)?,
                        b: DeviceBuffer::new(b)?,
                        c: DeviceBuffer::new(c)?,
                    };
                    ops.a.fill_random(seed)?;
                    ops.b.fill_random(seed.wrapping_add(1))?;
                    w.gemm = Some(ops);
                }
            }
            grow(&mut w.scratch, scratch[s])?;
            grow(&mut w.comm_send, comm[s][0])?;
            grow(&mut w.comm_recv, comm[s][1])?;
        }
        self.memory.workspace_bytes = self
            .work
            .iter()
            .map(|w| {
                let g = w
                    .gemm
                    .as_ref()
                    .map_or(0, |g| g.a.bytes + g.b.bytes + g.c.bytes);
                let sz = |b: &Option<DeviceBuffer>| b.as_ref().map_or(0, |b| b.bytes);
                g + sz(&w.scratch) + sz(&w.comm_send) + sz(&w.comm_recv)
            })
            .sum();
        Ok(())
    }
}

fn grow(slot: &mut Option<DeviceBuffer>, bytes: u64) -> Result<(), RuntimeError> {
    if bytes > 0 && slot.as_ref().is_none_or(|b| b.bytes < bytes) {
        *slot = None;
        *slot = Some(DeviceBuffer::new(bytes)?);
    }
    Ok(())
}
