//! The memory passes of one optimizer step, per parameter of the rank's shard: which tensors
//! each multi-tensor kernel reads and writes, so the step's byte count (its time, since the
//! step is memory bound) follows from what the framework does rather than from one constant.
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
//! That is 52 bytes per parameter for Adam. The clipping itself (scaling the gradients when the
//! norm exceeds the threshold) runs only on steps that clip and is left out.
//!
//! Other precisions keep the account the model used before: the gradient read twice (norm,
//! update), the optimizer state read and written, the weights written (read and written too
//! when there is no master copy). bf16 training accumulates fp32 main gradients already and
//! uses no loss scaling, so passes 1 and 2 do not exist there.

use super::params::StateCoefficients;
use crate::scenario::{Precision, Training};

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

/// The passes of one optimizer step under `training`'s precision and optimizer, with `k` its
/// state coefficients.
pub fn optimizer_passes(training: &Training, k: &StateCoefficients) -> Vec<OptimizerPass> {
    // Optimizer state other than the master copy (Adam: two moments; SGD: momentum).
    let moments = if k.master_copy {
        k.optimizer_bytes.saturating_sub(FP32)
    } else {
        k.optimizer_bytes
    };
    if training.precision == Precision::Fp16 && k.master_copy {
        // Megatron's fp16 optimizer (see the module doc).
        return vec![
            pass("copy fp16 grads to fp32 main grads", k.grad_bytes, FP32),
            pass("unscale and check for inf/nan", FP32, FP32),
            pass("gradient norm", FP32, 0),
            pass(
                "update (master weights and moments)",
                FP32 + FP32 + moments,
                FP32 + moments,
            ),
            pass("copy master weights to fp16 weights", FP32, k.weight_bytes),
        ];
    }
    let weights_read = if k.master_copy { 0 } else { k.weight_bytes };
    vec![
        pass("gradient norm", k.grad_bytes, 0),
        pass(
            "update",
            k.grad_bytes + k.optimizer_bytes + weights_read,
            k.optimizer_bytes + k.weight_bytes,
        ),
    ]
}

/// Bytes the optimizer step moves per parameter of its shard: the sum of its passes' reads and
/// writes.
pub fn optimizer_bytes_per_param(training: &Training, k: &StateCoefficients) -> u64 {
    optimizer_passes(training, k)
        .iter()
        .map(|p| p.read_bytes + p.write_bytes)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Optimizer;
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
}
