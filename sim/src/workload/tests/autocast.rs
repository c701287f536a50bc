//! PyTorch autocast over fp32 parameters (the framework file's `memory.autocast_weight_copies`)
//! and per-parameter gradient accumulation (`memory.contiguous_grad_buffer = false`): exact
//! bytes and kernels of one layer against the same framework without them.

use super::*;
use crate::scenario::framework::Bundled;
use crate::workload::{layers_work, state_coefficients};

/// Megatron-Core's file, with autocast weight copies and per-parameter gradients when `eager`.
fn scenario(eager: bool, microbatches: u64) -> Scenario {
    let mut s = gpt(2, 1024, 16, 512, 4096, (1, 1, 1), 1, microbatches);
    let mut fw = Bundled::MegatronCore.framework().unwrap();
    fw.memory.autocast_weight_copies = eager;
    fw.memory.contiguous_grad_buffer = !eager;
    s.training.framework = fw;
    s
}

#[test]
fn autocast_casts_each_weight_both_ways_and_saves_its_copy() {
    let (h, f) = (1024u64, 4096u64);
    // Q, K, V and the output projection (MHA: h x h each), the MLP's up and down.
    let weights = 4 * h * h + 2 * h * f;
    let one = |eager: bool| {
        let s = scenario(eager, 1);
        let plan = plan(&s);
        layers_work(&s, &plan, &plan.chunks[0][0], 0, 1, false, false)
    };
    let (amp, plain) = (one(true), one(false));
    let diff = |a: u64, b: u64| a - b;
    let kernels = |a: u32, b: u32| a - b;
    // Forward: each weight read in fp32 and written in bf16, one kernel each.
    assert_eq!(
        diff(
            amp.forward.compute.memory_bytes,
            plain.forward.compute.memory_bytes
        ),
        6 * weights
    );
    assert_eq!(
        kernels(amp.forward.compute.kernels, plain.forward.compute.kernels),
        6
    );
    // Backward: each weight gradient cast back to fp32, beside the weight-gradient GEMMs.
    assert_eq!(
        diff(
            amp.backward.compute.memory_bytes,
            plain.backward.compute.memory_bytes
        ),
        6 * weights
    );
    assert_eq!(
        diff(
            amp.backward_weight.memory_bytes,
            plain.backward_weight.memory_bytes
        ),
        6 * weights
    );
    assert_eq!(amp.backward.compute.flops, plain.backward.compute.flops);
    // The bf16 copies are saved for the backward.
    assert_eq!(
        diff(amp.activation_bytes, plain.activation_bytes),
        2 * weights
    );
}

#[test]
fn autocast_keeps_fp32_parameters_and_no_master_copy() {
    let k = state_coefficients(&scenario(true, 1).training);
    assert_eq!(
        (
            k.weight_bytes,
            k.grad_bytes,
            k.optimizer_bytes,
            k.master_copy
        ),
        (4, 4, 8, false)
    );
    let k = state_coefficients(&scenario(false, 1).training);
    assert_eq!(
        (k.weight_bytes, k.optimizer_bytes, k.master_copy),
        (2, 12, true)
    );
}

/// FSDP's mixed precision over fp32 parameters (`memory.fp32_params`, torchtitan's and
/// llm-foundry's files): 4 + 4 + 8 bytes per parameter under bf16 and FP8, no master copy and no
/// 16-bit weights kept beside it, and without autocast's per-weight casts; under ZeRO-3 each
/// rank holds its `1/dp` of the 16 bytes, where Megatron-Core's 16-bit parameters beside fp32
/// master weights hold 18.
#[test]
fn fsdp_over_fp32_parameters_keeps_no_master_copy() {
    for precision in [Precision::Bf16, Precision::Fp8] {
        for fw in [Bundled::Torchtitan, Bundled::LlmFoundry] {
            let mut s = scenario(false, 1);
            s.training.framework = fw.framework().unwrap();
            s.training.precision = precision;
            assert!(s.training.framework.memory.fp32_params);
            let k = state_coefficients(&s.training);
            assert_eq!(
                (
                    k.weight_bytes,
                    k.grad_bytes,
                    k.optimizer_bytes,
                    k.master_copy
                ),
                (4, 4, 8, false),
                "{fw:?} {precision:?}"
            );
        }
    }
    let sharded = |fw: Bundled| {
        let mut s = gpt(2, 1024, 16, 512, 4096, (1, 1, 8), 1, 1);
        s.training.framework = fw.framework().unwrap();
        s.parallel.zero = 3;
        let plan = plan(&s);
        let params = crate::workload::chunk_params(&s, &plan, &plan.chunks[0][0]);
        let b = crate::workload::state_bytes(&s, &plan, 0);
        (
            params.dense,
            b.weights_bytes + b.grads_bytes + b.optimizer_bytes,
        )
    };
    let (n, fsdp) = sharded(Bundled::Torchtitan);
    assert_eq!(fsdp, (4 * n).div_ceil(8) * 2 + (8 * n).div_ceil(8));
    let (n, megatron) = sharded(Bundled::MegatronCore);
    assert_eq!(
        megatron,
        (2 * n).div_ceil(8) + (4 * n).div_ceil(8) + (12 * n).div_ceil(8)
    );
    // The same model and layout: 2 bytes per parameter less over the 8 ranks.
    assert_eq!(megatron - fsdp, (2 * n).div_ceil(8));
}

/// The add of a backward's fp32 gradients into the earlier micro batches': one per parameter
/// tensor over the chunk's parameters (read twice, written once); none for a framework whose
/// weight-gradient GEMMs accumulate in place. (`sim/tests/grad_accumulate.rs` checks where the
/// schedule places it.)
#[test]
fn gradients_accumulate_after_the_first_micro_batch() {
    for m in [1u64, 2, 4] {
        let s = scenario(true, m);
        let plan = plan(&s);
        let layout = &plan.chunks[0][0];
        let work = crate::workload::chunk_work(&s, &plan, layout);
        let add = work
            .grad_accumulate
            .clone()
            .expect("per-parameter gradients");
        let params = crate::workload::chunk_params(&s, &plan, layout);
        assert_eq!(add.memory_bytes, 12 * (params.dense + params.expert));
        // Per layer 6 weights and 2 norms; the embedding, the head and the final norm.
        assert_eq!(add.kernels, 2 * 8 + 1 + 2);
        assert!(
            scenario(false, m)
                .training
                .framework
                .memory
                .contiguous_grad_buffer
        );
        let plain = scenario(false, m);
        let plain_plan = super::plan(&plain);
        let w = crate::workload::chunk_work(&plain, &plain_plan, &plain_plan.chunks[0][0]);
        assert!(w.grad_accumulate.is_none());
    }
}

/// The loss's backward holds the framework's `memory.loss_backward_bytes` per logit element
/// beside the saved activations, on the head's chunk only: 14 bytes under the Hugging Face
/// file (the fp32 upcast, the fp32 gradients of the log-probabilities and of the logits, and
/// the bf16 gradient).
#[test]
fn the_loss_backward_holds_its_gradients_of_the_logits() {
    let mut s = gpt(2, 1024, 16, 512, 4096, (1, 1, 1), 1, 1);
    s.training.framework = Bundled::Hf.framework().unwrap();
    assert_eq!(s.training.framework.memory.loss_backward_bytes, 14);
    let plan = plan(&s);
    let layout = plan.chunks[0][0].clone();
    let head = layers_work(&s, &plan, &layout, 1, 1, false, true);
    assert_eq!(head.backward_transient_bytes, 14 * 512 * 4096);
    let body = layers_work(&s, &plan, &layout, 0, 1, true, false);
    assert_eq!(body.backward_transient_bytes, 0);
    s.training.framework = Bundled::MegatronCore.framework().unwrap();
    let plan = super::plan(&s);
    let w = layers_work(&s, &plan, &plan.chunks[0][0], 1, 1, false, true);
    assert_eq!(
        w.backward_transient_bytes, 0,
        "Megatron-Core's file does not set it"
    );
}
