//! Real compute on the CPU: every GEMM of an op at its planned shape (f32, `matrixmultiply`'s
//! sgemm, single-threaded per rank), and the op's memory-bound bytes as a real axpy pass over
//! buffers (12 bytes per element: read x, read y, write y). The workspace is sized once per
//! program, so no op allocates.

use twin_sim::schedule::{ComputeOp, OpKind, Program};

/// Operand buffers, sized for the largest op of a program.
#[derive(Default)]
pub struct Workspace {
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
    x: Vec<f32>,
    y: Vec<f32>,
    /// Bytes of the arena the sgemm's packing buffer is served from (`pack`): the largest
    /// A and B of any one GEMM, which its packed copies never exceed.
    pack_bytes: usize,
}

/// Bytes per element of the memory-bound pass (shared with the cost model's working set).
const AXPY_BYTES_PER_ELEM: u64 = twin_sim::host_backend::PASS_BYTES_PER_ELEM;

fn elems(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

impl Workspace {
    /// Buffers large enough for every compute op of `program`.
    pub fn for_program(program: &Program) -> Workspace {
        let (mut a, mut b, mut c, mut x, mut pack) = (0u64, 0u64, 0u64, 0u64, 0u64);
        for op in &program.ops {
            if let OpKind::Compute(cop) = &op.kind {
                for g in cop.executed_gemms() {
                    a = a.max(g.m.saturating_mul(g.k));
                    b = b.max(g.k.saturating_mul(g.n));
                    c = c.max(g.m.saturating_mul(g.n));
                    pack = pack.max(g.operand_bytes(4));
                }
                x = x.max(cop.memory_bytes / AXPY_BYTES_PER_ELEM);
            }
        }
        // Non-zero, non-trivial operands (the values do not matter for timing, but denormals
        // or zeros could take a different path in some kernels).
        let fill = |n: u64, v: f32| vec![v; elems(n)];
        Workspace {
            a: fill(a, 0.5),
            b: fill(b, 0.25),
            c: fill(c, 0.0),
            x: fill(x, 1.0),
            y: fill(x, 2.0),
            // Slack for the packed copies' rounding up to whole kernel tiles.
            pack_bytes: elems(pack).saturating_add(super::pack::MIN_BYTES),
        }
    }

    pub fn bytes(&self) -> u64 {
        ((self.a.len() + self.b.len() + self.c.len() + self.x.len() + self.y.len()) * 4) as u64
    }

    /// Run every GEMM of `op` (each `count` times), then its memory-bound pass.
    pub fn run(&mut self, op: &ComputeOp) {
        self.run_gemms(op);
        self.run_memory(op);
    }

    /// The GEMMs of `op` at their planned shapes, each `count` times, with the sgemm's packing
    /// buffer served from this thread's arena (`pack`).
    pub fn run_gemms(&mut self, op: &ComputeOp) {
        super::pack::with_arena(self.pack_bytes, || self.gemms(op));
        std::hint::black_box(&self.c);
    }

    fn gemms(&mut self, op: &ComputeOp) {
        for g in op.executed_gemms() {
            let (m, n, k) = (elems(g.m), elems(g.n), elems(g.k));
            if m == 0 || n == 0 || k == 0 {
                continue;
            }
            let (Some(a), Some(b), Some(c)) = (
                self.a.get(..m.saturating_mul(k)),
                self.b.get(..k.saturating_mul(n)),
                self.c.get_mut(..m.saturating_mul(n)),
            ) else {
                continue;
            };
            for _ in 0..g.count {
                sgemm(m, n, k, a, b, c);
            }
        }
    }

    /// The memory-bound pass of `op`: an axpy over `memory_bytes / 12` elements.
    pub fn run_memory(&mut self, op: &ComputeOp) {
        let len = elems(op.memory_bytes / AXPY_BYTES_PER_ELEM)
            .min(self.x.len())
            .min(self.y.len());
        let alpha = 1e-3f32;
        for (y, x) in self.y[..len].iter_mut().zip(&self.x[..len]) {
            *y += alpha * *x;
        }
        // Keep the result observable so the pass is not optimised away.
        std::hint::black_box(&self.y);
    }
}

/// C[m,n] = A[m,k] * B[k,n], row-major. The slices are exactly the operand sizes.
fn sgemm(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    let (rsa, rsb, rsc) = (k as isize, n as isize, n as isize);
    // SAFETY: a has m*k, b k*n, c m*n elements (checked by the caller's slicing), and the
    // strides describe row-major layouts within those bounds; c does not alias a or b.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            rsa,
            1,
            b.as_ptr(),
            rsb,
            1,
            0.0,
            c.as_mut_ptr(),
            rsc,
            1,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sgemm_multiplies() {
        // [1 2; 3 4] * [5 6; 7 8] = [19 22; 43 50]
        let a = [1.0, 2.0, 3.0, 4.0];
        let b = [5.0, 6.0, 7.0, 8.0];
        let mut c = [0.0; 4];
        sgemm(2, 2, 2, &a, &b, &mut c);
        assert_eq!(c, [19.0, 22.0, 43.0, 50.0]);
        // Non-square: [1 2 3] (1x3) * [1;1;1] (3x1) = [6]
        let mut c = [0.0];
        sgemm(1, 1, 3, &[1.0, 2.0, 3.0], &[1.0, 1.0, 1.0], &mut c);
        assert_eq!(c, [6.0]);
    }
}
