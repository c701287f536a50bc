//! FP8 training at workload level: which GEMMs run in FP8, and the casts they need.

use super::*;
use crate::ir::Gemm;
use crate::workload::compute::FP8_CAST_BYTES_PER_ELEMENT;
use crate::workload::layers_work;

/// One layer with the head, tp 2, in `precision`.
fn one_layer(precision: Precision) -> crate::workload::ChunkWork {
    let mut s = gpt(1, 1024, 16, 512, 4096, (2, 1, 1), 2, 1);
    s.training.precision = precision;
    let plan = plan(&s);
    let layout = plan.chunks[0][0].clone();
    layers_work(&s, &plan, &layout, 0, 1, false, true)
}

/// Elements an FP8 cast reads in [`one_layer`]'s linear layers: (their inputs, the gradients
/// of their outputs). QKV [tokens, h] -> 3h/t; proj [tokens, h/t] -> h; fc1 [tokens, h] ->
/// f/t; fc2 [tokens, f/t] -> h.
fn cast_elements() -> (u64, u64) {
    let (tokens, h, f, t) = (2 * 512u64, 1024u64, 4096u64, 2u64);
    let linears = [(h, 3 * h / t), (h / t, h), (h, f / t), (f / t, h)];
    let inputs = linears.iter().map(|(k, _)| tokens * k).sum();
    let grads = linears.iter().map(|(_, n)| tokens * n).sum();
    (inputs, grads)
}

/// [`one_layer`]'s layer in `precision` under `framework` with `recipe`, its
/// `fusions.fp8_amax_fused` replaced where `amax_fused` says.
fn recipe_layer(
    framework: crate::scenario::framework::Bundled,
    precision: Precision,
    recipe: crate::scenario::Fp8Recipe,
    amax_fused: Option<bool>,
) -> crate::workload::ChunkWork {
    let mut s = gpt(1, 1024, 16, 512, 4096, (2, 1, 1), 2, 1);
    s.training.precision = precision;
    s.training.fp8_recipe = recipe;
    s.training.framework = framework.framework().unwrap();
    if let Some(fused) = amax_fused {
        s.training.framework.fusions.fp8_amax_fused = fused;
    }
    let plan = plan(&s);
    let layout = plan.chunks[0][0].clone();
    layers_work(&s, &plan, &layout, 0, 1, false, true)
}

/// Under FP8 the linear layers' GEMMs run in the training precision, while the attention core
/// and the output layer keep bf16 (their GEMMs say so); under bf16 no GEMM has its own.
#[test]
fn fp8_covers_the_linear_layers_only() {
    let (b, s, h, v, t) = (2u64, 512u64, 1024u64, 4096u64, 2u64);
    let w = one_layer(Precision::Fp8);
    let gemms = w.forward.compute.gemms.as_slice();
    assert_eq!(gemms.len(), 7);
    let bf16: Vec<&Gemm> = gemms
        .iter()
        .filter(|g| g.dtype == Some(Precision::Bf16))
        .collect();
    // QK^T and PV (batched over the heads of the rank) and the logits.
    assert_eq!(bf16.len(), 3);
    assert_eq!((bf16[0].k, bf16[0].batch), (h / 16, (b * 16 / t) as u32));
    assert_eq!((bf16[2].m, bf16[2].k, bf16[2].n), (b * s, h, v / t));
    assert!(gemms
        .iter()
        .filter(|g| g.dtype.is_none())
        .all(|g| g.batch == 1));
    // Gradients keep their forward's precision.
    let bwd_bf16: u32 = w
        .backward_input
        .compute
        .gemms
        .iter()
        .filter(|g| g.dtype == Some(Precision::Bf16))
        .map(|g| g.count)
        .sum();
    // Four attention-core gradients per head of the rank, and the logits' dgrad.
    assert_eq!(bwd_bf16, 4 * (b * 16 / t) as u32 + 1);
    let bf = one_layer(Precision::Bf16);
    assert!(bf.forward.compute.gemms.iter().all(|g| g.dtype.is_none()));
    // Same shapes and FLOPs either way.
    assert_eq!(bf.forward.compute.flops, w.forward.compute.flops);
}

/// Each FP8 GEMM casts its input before the forward and its output gradient before the
/// dgrad: 4 bytes per element each (read bf16, write the FP8 copy and its transpose), one
/// kernel each; nothing else changes.
#[test]
fn fp8_casts_are_charged_per_linear() {
    let fp8 = one_layer(Precision::Fp8);
    let bf16 = one_layer(Precision::Bf16);
    let (inputs, grads) = cast_elements();
    assert_eq!(
        fp8.forward.compute.memory_bytes - bf16.forward.compute.memory_bytes,
        FP8_CAST_BYTES_PER_ELEMENT * inputs
    );
    assert_eq!(
        fp8.backward_input.compute.memory_bytes - bf16.backward_input.compute.memory_bytes,
        FP8_CAST_BYTES_PER_ELEMENT * grads
    );
    assert_eq!(
        fp8.forward.compute.kernels,
        bf16.forward.compute.kernels + 4
    );
    assert_eq!(
        fp8.backward_weight.memory_bytes,
        bf16.backward_weight.memory_bytes
    );
}

/// Current (tensorwise) scaling under a framework that reduces the amax in a pass of its own
/// (torchtitan's torchao `tensor_to_amax`) reads each cast tensor once more (2 bytes per
/// element) in one more kernel; a framework that fuses the amax into the producing kernel
/// (Transformer Engine's norms) pays what delayed scaling does.
#[test]
fn tensorwise_scaling_adds_an_amax_pass_unless_the_framework_fuses_it() {
    use crate::scenario::framework::Bundled;
    use crate::scenario::Fp8Recipe;
    use crate::workload::compute::FP8_AMAX_BYTES_PER_ELEMENT;
    let layer = |framework: Bundled, recipe: Fp8Recipe| {
        recipe_layer(framework, Precision::Fp8, recipe, None)
    };
    let (inputs, grads) = cast_elements();
    let delayed = layer(Bundled::Torchtitan, Fp8Recipe::Delayed);
    let current = layer(Bundled::Torchtitan, Fp8Recipe::Tensorwise);
    assert_eq!(
        current.forward.compute.memory_bytes - delayed.forward.compute.memory_bytes,
        FP8_AMAX_BYTES_PER_ELEMENT * inputs
    );
    assert_eq!(
        current.backward_input.compute.memory_bytes - delayed.backward_input.compute.memory_bytes,
        FP8_AMAX_BYTES_PER_ELEMENT * grads
    );
    assert_eq!(
        current.forward.compute.kernels,
        delayed.forward.compute.kernels + 4
    );
    let te_delayed = layer(Bundled::MegatronCore, Fp8Recipe::Delayed);
    let te_current = layer(Bundled::MegatronCore, Fp8Recipe::Tensorwise);
    assert_eq!(te_current, te_delayed);
}

/// Rowwise scaling casts each GEMM input along both axes (a row's scale cannot serve the
/// transposed copy): read bf16, write FP8 and a transposed bf16 copy, then read that copy and
/// write its FP8 cast, 2 + 1 + 2 + 2 + 1 = 8 bytes per element in two kernels, where a
/// tensorwise cast under the same framework moves 6 (amax pass, then the cast and its
/// transpose). A framework that fuses the first read into the producing kernel
/// (`fusions.fp8_amax_fused`) saves those 2 bytes: 6.
#[test]
fn rowwise_casts_move_both_axes() {
    use crate::scenario::framework::Bundled;
    use crate::scenario::Fp8Recipe;
    let layer = |fused: bool, precision: Precision| {
        recipe_layer(
            Bundled::Torchtitan,
            precision,
            Fp8Recipe::Rowwise,
            Some(fused),
        )
    };
    let (inputs, grads) = cast_elements();
    for (framework, bytes) in [(false, 8), (true, 6)] {
        let rowwise = layer(framework, Precision::Fp8);
        let bf16 = layer(framework, Precision::Bf16);
        assert_eq!(
            rowwise.forward.compute.memory_bytes - bf16.forward.compute.memory_bytes,
            bytes * inputs,
            "{framework:?}"
        );
        assert_eq!(
            rowwise.backward_input.compute.memory_bytes - bf16.backward_input.compute.memory_bytes,
            bytes * grads,
            "{framework:?}"
        );
        // Two kernels per cast, four linear layers.
        assert_eq!(
            rowwise.forward.compute.kernels,
            bf16.forward.compute.kernels + 8
        );
        assert_eq!(
            rowwise.backward_input.compute.kernels,
            bf16.backward_input.compute.kernels + 8
        );
    }
}

/// MXFP8 casts each GEMM input along both axes in one kernel, as block scaling does (each
/// 32-element block's scale is reduced inside the cast, which writes the row-wise and the
/// column-wise copy): FP8_CAST_BYTES_PER_ELEMENT per element and one kernel per cast, the
/// delayed recipe's traffic, with no amax pass before it.
#[test]
fn mxfp8_casts_like_block_scaling_in_one_pass() {
    use crate::scenario::framework::Bundled;
    use crate::scenario::Fp8Recipe;
    let layer = |precision: Precision, recipe: Fp8Recipe| {
        recipe_layer(Bundled::MegatronCore, precision, recipe, None)
    };
    let (inputs, grads) = cast_elements();
    let mx = layer(Precision::Fp8, Fp8Recipe::Mxfp8);
    let bf16 = layer(Precision::Bf16, Fp8Recipe::Mxfp8);
    assert_eq!(
        mx.forward.compute.memory_bytes - bf16.forward.compute.memory_bytes,
        FP8_CAST_BYTES_PER_ELEMENT * inputs
    );
    assert_eq!(
        mx.backward_input.compute.memory_bytes - bf16.backward_input.compute.memory_bytes,
        FP8_CAST_BYTES_PER_ELEMENT * grads
    );
    assert_eq!(mx.forward.compute.kernels, bf16.forward.compute.kernels + 4);
    assert_eq!(mx, layer(Precision::Fp8, Fp8Recipe::Blockwise));
}
