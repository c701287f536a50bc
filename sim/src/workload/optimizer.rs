//! The memory passes of one optimizer step, per parameter of the rank's shard: which tensors
//! each kernel reads and writes, so the step's byte count (its time, since the step is memory
//! bound) follows from what the framework does rather than from one constant.
//!
//! Megatron-LM's fp16 mixed-precision optimizer (`Float16OptimizerWithFloat16Params`, used by
//! the 2021-22 GPT runs) keeps fp16 gradients beside fp32 master weights and runs, per step:
//! 1. copy the fp16 model gradients into fp32 main gradients (read 2, write 4);
//! 2. unscale them by the loss scale and check for inf/nan (read 4, write 4);
//! 3. the gradient norm for clipping (read 4);
//! 4. Adam: read the gradient, read and write the master weight and both moments
//!    (read 4 + 4 + 8, write 4 + 8);
//! 5. copy the fp32 master weights back into the fp16 model weights (read 4, write 2).
//!
//! That is 52 bytes per parameter for Adam. Megatron scales the gradients only on steps whose
//! norm exceeds the threshold, which a trained-in step does not: no pass.
//!
//! Other precisions: the gradient norm, then the update, which reads the gradient and the
//! state and writes the state and the weights (and reads the weights when there is no master
//! copy). bf16 training accumulates fp32 main gradients already and uses no loss scaling, so
//! passes 1 and 2 do not exist there.
//!
//! What the framework adds (its file's `[optimizer]`, `[training] optimizer_kernel`):
//! - **`foreach` and `for-loop` updates** run each elementwise operation of the algorithm as a
//!   kernel of its own, each a pass over the tensors it touches. PyTorch's AdamW
//!   (pytorch/pytorch@002d2f0bb40cf08beb74bce80f52ce4f2eda46a0:torch/optim/adamw.py,
//!   `_multi_tensor_adamw` and `_single_tensor_adamw`, the same operations): the decoupled
//!   weight decay `p *= 1 - lr wd`; `m.lerp_(g, 1 - b1)`;
//!   `v *= b2`; `v.addcmul_(g, g, 1 - b2)`; `t = sqrt(v)`; `t /= sqrt(bc2)`; `t += eps`;
//!   `p.addcdiv_(m, t, -step)`: 80 bytes a parameter in fp32 where the fused kernel moves 28.
//!   SGD with momentum (`_multi_tensor_sgd`): `g += wd p`, `b *= mu`, `b += g`,
//!   `p -= lr b`. With a master copy, a last pass copies it into the 16-bit weights.
//! - **`clip_scale = "always"`**: PyTorch's `clip_grad_norm_` (and FSDP's) multiplies every
//!   gradient by the clamped coefficient on every step, with no test on the host: a read and a
//!   write of each gradient after the norm.

use super::params::StateCoefficients;
use crate::scenario::framework::ClipScale;
use crate::scenario::{Optimizer, Precision, Training};

/// One memory pass of the optimizer step: bytes read and written per parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptimizerPass {
    pub name: &'static str,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

const fn pass(name: &'static str, read_bytes: u64, write_bytes: u64) -> OptimizerPass {
    OptimizerPass {
        name,
        read_bytes,
        write_bytes,
    }
}

/// Bytes per fp32 element (main gradients and master weights).
const FP32: u64 = 4;

/// The passes of one optimizer step under `training`'s precision, optimizer and
/// implementation, with `k` its state coefficients.
pub fn optimizer_passes(training: &Training, k: &StateCoefficients) -> Vec<OptimizerPass> {
    let fp16_master = training.precision == Precision::Fp16 && k.master_copy;
    // The gradient as the update reads it: Megatron's fp16 optimizer has copied it to fp32.
    let grad_bytes = if fp16_master { FP32 } else { k.grad_bytes };
    let mut passes = Vec::new();
    if fp16_master {
        // Megatron's fp16 optimizer (see the module doc).
        passes.push(pass(
            "copy fp16 grads to fp32 main grads",
            k.grad_bytes,
            FP32,
        ));
        passes.push(pass("unscale and check for inf/nan", FP32, FP32));
    }
    if training.grad_clip {
        passes.push(pass("gradient norm", grad_bytes, 0));
        if training.framework.optimizer.clip_scale == ClipScale::Always {
            passes.push(pass("clip: scale the gradients", grad_bytes, grad_bytes));
        }
    }
    update_passes(training, k, grad_bytes, fp16_master, &mut passes);
    passes
}

/// The update's passes, appended to `out`; `grad_bytes` is the gradient's element as the
/// update reads it.
fn update_passes(
    training: &Training,
    k: &StateCoefficients,
    grad_bytes: u64,
    fp16_master: bool,
    out: &mut Vec<OptimizerPass>,
) {
    // Optimizer state other than the master copy (Adam: two moments; SGD: momentum).
    let moments = if k.master_copy {
        k.optimizer_bytes.saturating_sub(FP32)
    } else {
        k.optimizer_bytes
    };
    // The weights the update writes: the master copy, else the parameters themselves.
    let p = if k.master_copy { FP32 } else { k.weight_bytes };
    let fused = training.optimizer_kernel().fuses_update();
    if fused && !fp16_master {
        // One kernel reads the gradient and the state and writes the state and the weights
        // (the 16-bit copy too, where there is a master).
        let weights_read = if k.master_copy { 0 } else { k.weight_bytes };
        out.push(pass(
            "update",
            grad_bytes + k.optimizer_bytes + weights_read,
            k.optimizer_bytes + k.weight_bytes,
        ));
        return;
    }
    if fused {
        out.push(pass(
            "update (master weights and moments)",
            grad_bytes + FP32 + moments,
            FP32 + moments,
        ));
    } else {
        let g = grad_bytes;
        match training.optimizer {
            Optimizer::Adam => {
                // One moment's element; the square root's temporary takes its dtype.
                let m = moments / 2;
                out.extend([
                    pass("weight decay (p *= 1 - lr wd)", p, p),
                    pass("first moment (m.lerp_(g))", m + g, m),
                    pass("second moment decay (v *= b2)", m, m),
                    pass("second moment (v.addcmul_(g, g))", m + g, m),
                    pass("sqrt(v)", m, m),
                    pass("bias correction (t /= sqrt(bc2))", m, m),
                    pass("epsilon (t += eps)", m, m),
                    pass("update (p.addcdiv_(m, t))", p + m + m, p),
                ]);
            }
            Optimizer::Sgd => {
                let b = moments;
                out.extend([
                    pass("weight decay (g += wd p)", g + p, g),
                    pass("momentum decay (b *= mu)", b, b),
                    pass("momentum (b += g)", b + g, b),
                    pass("update (p -= lr b)", p + b, p),
                ]);
            }
        }
    }
    if k.master_copy {
        let name = if fp16_master {
            "copy master weights to fp16 weights"
        } else {
            "copy master weights to 16-bit weights"
        };
        out.push(pass(name, FP32, k.weight_bytes));
    }
}

/// Bytes the optimizer step moves per parameter of its shard: the sum of its passes' reads and
/// writes.
pub fn optimizer_bytes_per_param(training: &Training, k: &StateCoefficients) -> u64 {
    passes_bytes(&optimizer_passes(training, k))
}

/// Bytes `passes` read and write per parameter.
pub fn passes_bytes(passes: &[OptimizerPass]) -> u64 {
    passes.iter().map(|p| p.read_bytes + p.write_bytes).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::framework::OptimizerKernel;
    use crate::workload::state_coefficients;

    fn training(precision: Precision, optimizer: Optimizer) -> Training {
        let mut t = crate::testing::small_scenario(1, 1, 1, 1).training;
        t.precision = precision;
        t.optimizer = optimizer;
        t
    }

    fn bytes(precision: Precision, optimizer: Optimizer) -> u64 {
        let t = training(precision, optimizer);
        optimizer_bytes_per_param(&t, &state_coefficients(&t))
    }

    /// Megatron's fp16 Adam: 6 (grad copy) + 8 (unscale) + 4 (norm) + 28 (Adam) + 6 (copy
    /// back) = 52 bytes per parameter.
    #[test]
    fn fp16_adam_moves_megatron_s_five_passes() {
        let t = training(Precision::Fp16, Optimizer::Adam);
        let passes = optimizer_passes(&t, &state_coefficients(&t));
        let per_pass: Vec<u64> = passes
            .iter()
            .map(|p| p.read_bytes + p.write_bytes)
            .collect();
        assert_eq!(per_pass, vec![6, 8, 4, 28, 6]);
        assert_eq!(bytes(Precision::Fp16, Optimizer::Adam), 52);
        // SGD keeps one moment instead of two: the update moves 8 bytes less.
        assert_eq!(bytes(Precision::Fp16, Optimizer::Sgd), 44);
    }

    /// Without fp16 loss scaling the account is the gradient read twice, the state read and
    /// written, the weights written (and read, without a master copy).
    #[test]
    fn other_precisions_read_the_gradient_twice() {
        assert_eq!(bytes(Precision::Bf16, Optimizer::Adam), 2 * 4 + 2 * 12 + 2);
        assert_eq!(bytes(Precision::Fp8, Optimizer::Adam), 2 * 4 + 2 * 12 + 2);
        assert_eq!(
            bytes(Precision::Fp32, Optimizer::Adam),
            2 * 4 + 2 * 8 + 2 * 4
        );
        assert_eq!(
            bytes(Precision::Fp32, Optimizer::Sgd),
            2 * 4 + 2 * 4 + 2 * 4
        );
    }

    /// Every pass of the fp16 step touches fp32 state except the first read and the last
    /// write, which are the fp16 gradient and weight.
    #[test]
    fn fp16_passes_read_what_the_previous_wrote() {
        let t = training(Precision::Fp16, Optimizer::Adam);
        let k = state_coefficients(&t);
        let passes = optimizer_passes(&t, &k);
        assert_eq!(passes.first().map(|p| p.read_bytes), Some(k.grad_bytes));
        assert_eq!(passes.last().map(|p| p.write_bytes), Some(k.weight_bytes));
        let reads: u64 = passes.iter().map(|p| p.read_bytes).sum();
        let writes: u64 = passes.iter().map(|p| p.write_bytes).sum();
        assert_eq!((reads, writes), (30, 22));
    }

    fn bytes_of(t: &Training) -> u64 {
        optimizer_bytes_per_param(t, &state_coefficients(t))
    }

    /// PyTorch FSDP's fp32 parameters, gradients and moments (llm-foundry, torchtitan).
    fn fsdp_training(kernel: OptimizerKernel) -> Training {
        let mut t = training(Precision::Bf16, Optimizer::Adam);
        t.framework.memory.fp32_params = true;
        t.optimizer_kernel = Some(kernel);
        t
    }

    /// A fused AdamW over fp32 parameters reads the gradient, the parameter and both moments
    /// and writes the last three (28 bytes), after the norm's read of the gradient (4). PyTorch's
    /// foreach AdamW runs its eight operations as passes of their own: 80 bytes.
    #[test]
    fn an_unfused_adam_moves_each_operation_s_bytes() {
        assert_eq!(bytes_of(&fsdp_training(OptimizerKernel::Fused)), 4 + 28);
        assert_eq!(
            bytes_of(&fsdp_training(OptimizerKernel::MultiTensor)),
            4 + 28
        );
        let foreach = fsdp_training(OptimizerKernel::Foreach);
        let passes = optimizer_passes(&foreach, &state_coefficients(&foreach));
        let update: Vec<u64> = passes[1..]
            .iter()
            .map(|p| p.read_bytes + p.write_bytes)
            .collect();
        // p *= 1 - lr wd; m.lerp_(g); v *= b2; v.addcmul_(g, g); sqrt; div; add; addcdiv.
        assert_eq!(update, vec![8, 12, 8, 12, 8, 8, 8, 16]);
        assert_eq!(bytes_of(&foreach), 4 + 80);
        // The loop over tensors runs the same operations.
        assert_eq!(bytes_of(&fsdp_training(OptimizerKernel::ForLoop)), 4 + 80);
        // bf16 moments halve each moment's and the temporary's bytes, not the fp32 ones.
        let mut half = fsdp_training(OptimizerKernel::Foreach);
        half.optimizer_state_dtype = Some(crate::scenario::framework::Dtype::Bf16);
        assert_eq!(bytes_of(&half), 4 + 80 - 2 * 14);
    }

    /// With 16-bit weights beside fp32 master weights, an unfused update works on the master
    /// copy and a last pass writes the 16-bit weights from it (the fused kernel writes them in
    /// its one pass).
    #[test]
    fn an_unfused_update_copies_the_master_weights_back() {
        let mut t = training(Precision::Bf16, Optimizer::Adam);
        t.optimizer_kernel = Some(OptimizerKernel::Foreach);
        let k = state_coefficients(&t);
        assert!(k.master_copy);
        let passes = optimizer_passes(&t, &k);
        let last = passes.last().copied().expect("passes");
        assert_eq!((last.read_bytes, last.write_bytes), (4, k.weight_bytes));
        // Norm (4) + the eight operations on the fp32 master (80) + the copy back (6).
        assert_eq!(bytes_of(&t), 4 + 80 + 6);
        // SGD with momentum, unfused: g += wd p, b *= mu, b += g, p -= lr b.
        let mut sgd = training(Precision::Fp32, Optimizer::Sgd);
        sgd.optimizer_kernel = Some(OptimizerKernel::Foreach);
        assert_eq!(bytes_of(&sgd), 4 + 12 + 8 + 12 + 12);
    }

    /// `clip_scale = "always"` multiplies every gradient after the norm: a read and a write
    /// of each, whatever the kernel; Megatron's host-tested clip costs nothing on a step that
    /// does not clip.
    #[test]
    fn clipping_on_every_step_reads_and_writes_the_gradients() {
        for kernel in [OptimizerKernel::Fused, OptimizerKernel::Foreach] {
            let mut t = fsdp_training(kernel);
            let without = bytes_of(&t);
            t.framework.optimizer.clip_scale = ClipScale::Always;
            let passes = optimizer_passes(&t, &state_coefficients(&t));
            assert_eq!(passes[1].name, "clip: scale the gradients");
            assert_eq!(bytes_of(&t), without + 8);
        }
        // Megatron's fp16 optimizer keeps its five passes.
        let t = training(Precision::Fp16, Optimizer::Adam);
        assert_eq!(t.framework.optimizer.clip_scale, ClipScale::WhenClipping);
        assert_eq!(bytes_of(&t), 52);
    }

    /// `grad_clip = false` leaves out the norm and the scaling.
    #[test]
    fn without_clipping_the_step_reads_no_norm() {
        let mut t = fsdp_training(OptimizerKernel::Fused);
        t.framework.optimizer.clip_scale = ClipScale::Always;
        assert_eq!(bytes_of(&t), 4 + 8 + 28);
        t.grad_clip = false;
        assert_eq!(bytes_of(&t), 28);
        let passes = optimizer_passes(&t, &state_coefficients(&t));
        assert_eq!(passes.len(), 1);
    }

    /// `[training] optimizer_kernel` overrides the framework file's `optimizer.kernel`.
    #[test]
    fn the_scenario_s_kernel_overrides_the_framework_s() {
        let mut t = fsdp_training(OptimizerKernel::Fused);
        t.optimizer_kernel = None;
        t.framework.optimizer.kernel = OptimizerKernel::Foreach;
        assert_eq!(t.optimizer_kernel(), OptimizerKernel::Foreach);
        assert_eq!(bytes_of(&t), 4 + 80);
        t.optimizer_kernel = Some(OptimizerKernel::Fused);
        assert_eq!(bytes_of(&t), 4 + 28);
    }
}
