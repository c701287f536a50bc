//! DeepSpeed's bookkeeping of model state (`[memory] accounting = "deepspeed"`), as its
//! memory estimator counts it (`estimate_zero{2,3}_model_states_mem_needs`, DeepSpeed's
//! docs/code-docs/source/memory.rst), so that the timeline reproduces DeepSpeed's figures
//! rather than Megatron-LM's. Per parameter of a rank, with `N` the data-parallel shards:
//!
//! - weights in the 16-bit dtype (`weight_bytes`), sharded from ZeRO-3, on the host when
//!   parameters are offloaded;
//! - the model's own gradients in the weight dtype, unsharded and all live under ZeRO 0-2
//!   (the estimator's `4P` = weights + these); ZeRO-3 holds only one module's worth at a time
//!   (a buffer the generators allocate), and with the optimizer offloaded they are streamed to
//!   the host as they are reduced, so neither counts them as state;
//! - an fp32 gradient partition beside the optimizer (DeepSpeed converts gradients to fp32 for
//!   the update), sharded from ZeRO-1, and absent only for fp32 training without ZeRO (the
//!   model's gradients are then the optimizer's);
//! - the optimizer state (`optimizer_bytes`: fp32 master, Adam moments), sharded from ZeRO-1;
//!   offloading the optimizer moves it and the fp32 gradients to the host (ZeRO-Offload).
//!
//! So ZeRO-2 holds `4P + 16P/N` (offloaded: `2P` on the GPU, `16P/N` on the host) and ZeRO-3
//! `18P/N` (offloaded optimizer: `2P/N`, host `16P/N`; parameters too: host `18P/N`).
//! Initialisation (host only): each process first builds its model in fp32 on the host, all
//! of it under ZeRO 0-2, one module at a time under ZeRO-3's `zero.Init` (the estimator's
//! `zero_init = 1`, the only ZeRO-3 variant modelled); and every host allocation carries the
//! estimator's `additional_buffer_factor` of 1.5.

use super::dims::mul;
use super::params::{state_coefficients, zero_shard_bytes, zero_stage};
use super::{ParamCount, StateBytes};
use crate::scenario::{Offload, Scenario};

/// Bytes per element of the fp32 gradient partition and of the fp32 model built at load.
const FP32_BYTES: u64 = 4;

/// DeepSpeed's `additional_buffer_factor` (1.5) on host memory, as allocator slack: every
/// host allocation holds half its size more.
pub const HOST_SLACK_FRACTION: f64 = 0.5;

/// Model state per rank under DeepSpeed's bookkeeping (module docs).
pub(crate) fn model_state_bytes(
    s: &Scenario,
    params: ParamCount,
    dense_dp: u64,
    expert_dp: u64,
) -> StateBytes {
    let k = state_coefficients(&s.training);
    let zero = zero_stage(s);
    let offload = s.training.offload;
    let mut out = StateBytes::default();
    for (p, n) in [(params.dense, dense_dp), (params.expert, expert_dp)] {
        let shard = |bytes_per_param: u64, from_stage: u8| {
            zero_shard_bytes(p, n, zero, bytes_per_param, from_stage)
        };
        let weights = shard(k.weight_bytes, 3);
        let model_grads = if zero <= 2 && offload == Offload::None {
            mul(p, k.weight_bytes)
        } else {
            0
        };
        let fp32_grads = if k.master_copy || zero >= 1 {
            shard(FP32_BYTES, 1)
        } else {
            0
        };
        let optimizer = shard(k.optimizer_bytes, 1);
        out.grads_bytes = out.grads_bytes.saturating_add(model_grads);
        let (gpu_weights, host_weights) = match offload {
            Offload::Params => (0, weights),
            Offload::None | Offload::Optimizer => (weights, 0),
        };
        out.weights_bytes = out.weights_bytes.saturating_add(gpu_weights);
        out.host_bytes = out.host_bytes.saturating_add(host_weights);
        if offload == Offload::None {
            out.grads_bytes = out.grads_bytes.saturating_add(fp32_grads);
            out.optimizer_bytes = out.optimizer_bytes.saturating_add(optimizer);
        } else {
            out.host_bytes = out
                .host_bytes
                .saturating_add(fp32_grads)
                .saturating_add(optimizer);
        }
    }
    out
}

/// Host memory one process needs to build its part of the model before training: the fp32
/// model, whole under ZeRO 0-2 (`params`), one module at a time under ZeRO-3 with
/// `zero.Init` (`largest_module` parameters).
pub(crate) fn init_host_bytes(s: &Scenario, params: ParamCount, largest_module: u64) -> u64 {
    let count = if zero_stage(s) >= 3 {
        largest_module
    } else {
        params.dense.saturating_add(params.expert)
    };
    mul(count, FP32_BYTES)
}
