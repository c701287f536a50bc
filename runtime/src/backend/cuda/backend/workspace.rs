//! Allocating the per-stream workspaces of [`CudaBackend`] (GEMM operands, memory-bound scratch,
//! communication buffers) once before the first step, so that no op allocates while a step runs.
//! Their sizes are a pure function of the program (`cuda::footprint`), which the pre-flight
//! check of a run uses too. Split from `backend.rs` to keep that file about issuing ops.

use super::super::footprint::workspaces;
use super::*;

impl CudaBackend {
    /// Size and allocate the stream workspaces the program needs.
    pub(super) fn size_workspaces(&mut self, program: &Program) -> Result<(), RuntimeError> {
        let need = workspaces(program, self.options.allow_tf32);
        let seed = self.options.seed;
        for (s, stream) in Stream::ALL.iter().enumerate() {
            let cu_stream = stream_of(&self.streams, *stream)?.cu_stream();
            let Some(w) = self.work.get_mut(s) else {
                continue;
            };
            let Some(n) = need.get(s) else {
                continue;
            };
            let [a, b, c] = n.gemm;
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
            if n.fp8[0] > 0 {
                if let Ok(d) = &self.fp8_device {
                    if w.lt.is_none() {
                        w.lt = Some(LtHandle::new(lt_workspace_bytes(d.compute_capability))?);
                    }
                    let [a, b, scales] = n.fp8;
                    let fits = w.fp8.as_ref().is_some_and(|f| {
                        f.a.data.bytes >= a && f.b.data.bytes >= b && f.a.scales.bytes >= scales
                    });
                    if !fits {
                        w.fp8 = None;
                        w.fp8 = Some(Fp8Operands::new(n.fp8, d.recipe, seed)?);
                    }
                    let note = format!(
                        "FP8 GEMMs run through cuBLASLt on compute capability {}.{} with fp8_recipe = \"{}\" (docs/runtime.md, \"FP8 GEMMs\"); their casts and amax reductions run as copies of the bytes the ops carry",
                        d.compute_capability.0,
                        d.compute_capability.1,
                        d.recipe.as_str()
                    );
                    if !self.memory.notes.contains(&note) {
                        self.memory.notes.push(note);
                    }
                }
            }
            grow(&mut w.scratch, n.scratch)?;
            grow(&mut w.comm_send, n.comm_send)?;
            grow(&mut w.comm_recv, n.comm_recv)?;
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
                let fp8 = w.fp8.as_ref().map_or(0, Fp8Operands::bytes)
                    + w.lt.as_ref().map_or(0, LtHandle::workspace_bytes);
                g + sz(&w.scratch) + sz(&w.comm_send) + sz(&w.comm_recv) + fp8
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
