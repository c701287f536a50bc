//! The communication buffers DeepEP allocates for the expert all-to-alls of
//! `[training] moe_dispatcher = "deepep"` (Megatron-Core's `flex` dispatcher): one NVLink
//! buffer and, when the expert-parallel group spans more than one node, one RDMA buffer, held
//! for the whole run on every GPU of the group, outside PyTorch's allocator (cudaMalloc and the
//! NVSHMEM symmetric heap).
//!
//! Megatron-Core sizes them once for the larger of DeepEP's recommended dispatch and combine
//! configurations of the group's size (the same, as far as the buffers go), with `hidden_bytes = hidden * max(element size, 2)`
//! (NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553:
//! megatron/core/transformer/moe/fused_a2a.py `get_buffer`, `get_hidden_bytes`, on the
//! `tp_ep_group`); DeepEP's size hints are per channel (half its SMs, 20 by default) and peer
//! (deepseek-ai/DeepEP@dd758caf451848bd150e1046af3d0a73e5fff38d:csrc/legacy/config.hpp `get_nvl_buffer_size_hint`,
//! `get_rdma_buffer_size_hint`; deep_ep/buffers/legacy.py `get_dispatch_config`,
//! `get_combine_config`, `num_sms = 20`). Counted: the two hints; left out: DeepEP's few
//! kilobytes of barrier signals and pointers, and whatever NVSHMEM's heap reserves beyond the
//! RDMA buffer. HybridEP's buffers are sized otherwise and are not modelled.

use crate::scenario::{MoeDispatcher, Scenario};

/// GPUs per NVLink domain DeepEP's normal kernels assume (`LEGACY_NUM_MAX_NVL_PEERS`).
const NVL_PEERS: u64 = 8;
/// Top-k slots and scale slots the buffers leave per token (`kNumMaxTopK`, `kNumMaxScales`).
const MAX_TOP_K: u64 = 128;
const MAX_SCALES: u64 = 128;
/// `sizeof(SourceMeta)` (two ints), `sizeof(topk_idx_t)` (int64), `sizeof(int4)`.
const SOURCE_META_BYTES: u64 = 8;
const TOPK_IDX_BYTES: u64 = 8;
const INT4_BYTES: u64 = 16;
/// DeepEP's SMs for its normal kernels (`Buffer.num_sms`); a channel is two SMs.
const NUM_SMS: u64 = 20;

/// One of DeepEP's recommended configurations: chunk sizes in tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Config {
    nvl_recv_tokens: u64,
    rdma_recv_tokens: u64,
}

/// DeepEP's recommended configurations by group size (`Config(num_sms, nvl_send, nvl_recv,
/// rdma_send, rdma_recv)` in `get_dispatch_config` and `get_combine_config`): the two differ in
/// their send chunks only, and the receive chunks size the buffers, so one entry serves both.
const CONFIGS: [(u64, Config); 12] = [
    (2, cfg(256, 128)),
    (4, cfg(256, 128)),
    (8, cfg(256, 128)),
    (16, cfg(288, 128)),
    (24, cfg(288, 128)),
    (32, cfg(288, 128)),
    (48, cfg(288, 128)),
    (64, cfg(288, 128)),
    (96, cfg(480, 128)),
    (128, cfg(560, 128)),
    (144, cfg(720, 128)),
    (160, cfg(720, 128)),
];

const fn cfg(nvl_recv_tokens: u64, rdma_recv_tokens: u64) -> Config {
    Config {
        nvl_recv_tokens,
        rdma_recv_tokens,
    }
}

impl Config {
    /// `get_nvl_buffer_size_hint`, rounded up to 128 bytes.
    fn nvl_bytes(&self, hidden_bytes: u64, ranks: u64) -> u64 {
        let rdma_ranks = (ranks / NVL_PEERS).max(1);
        let nvl_ranks = ranks.min(NVL_PEERS);
        let channels = NUM_SMS / 2;
        let slots = channels * nvl_ranks * self.nvl_recv_tokens;
        let bytes = channels * nvl_ranks * (2 * rdma_ranks + 3) * 4
            + slots * hidden_bytes
            + slots * SOURCE_META_BYTES
            + slots * MAX_TOP_K * TOPK_IDX_BYTES
            + slots * MAX_TOP_K * 4
            + slots * MAX_SCALES * 4;
        bytes.div_ceil(128) * 128
    }

    /// `get_rdma_buffer_size_hint`, rounded up to 128 bytes; 0 within one NVLink domain.
    fn rdma_bytes(&self, hidden_bytes: u64, ranks: u64) -> u64 {
        if ranks <= NVL_PEERS {
            return 0;
        }
        let rdma_ranks = ranks / NVL_PEERS;
        let channels = NUM_SMS / 2;
        let slots = channels * rdma_ranks * self.rdma_recv_tokens;
        let bytes = channels * rdma_ranks * (NVL_PEERS * 2 + 2) * 2 * 4
            + slots * hidden_bytes * 2
            + slots * SOURCE_META_BYTES * 2
            + slots * MAX_TOP_K * TOPK_IDX_BYTES * 2
            + slots * MAX_TOP_K * 4 * 2
            + slots * MAX_SCALES * 4 * 2
            + slots * INT4_BYTES * 2;
        bytes.div_ceil(128) * 128
    }
}

/// The configuration DeepEP recommends for a group of `ranks`: its own entry, else the next
/// larger one listed (DeepEP asserts on a size it does not list), else the largest.
fn config(ranks: u64) -> Config {
    CONFIGS
        .iter()
        .find(|(n, _)| *n >= ranks)
        .unwrap_or(&CONFIGS[CONFIGS.len() - 1])
        .1
}

/// Bytes of DeepEP's buffers on every GPU of an expert-parallel group of `ranks` dispatching
/// tokens of `hidden` elements (2 bytes each, as Megatron-Core sizes them): its NVLink and RDMA
/// hints. 0 for a group of one.
pub fn deepep_buffer_bytes(hidden: u64, ranks: u64) -> u64 {
    if ranks <= 1 {
        return 0;
    }
    let hidden_bytes = hidden.saturating_mul(2);
    let c = config(ranks);
    c.nvl_bytes(hidden_bytes, ranks)
        .saturating_add(c.rdma_bytes(hidden_bytes, ranks))
}

/// What every GPU of `s` holds for the whole run for its expert all-to-alls: DeepEP's buffers
/// over the `etp x ep` group under `moe_dispatcher = "deepep"` on a model with experts; 0
/// otherwise.
pub fn dispatch_buffer_bytes(s: &Scenario) -> u64 {
    if s.training.moe_dispatcher != MoeDispatcher::DeepEp || s.model.moe.is_none() {
        return 0;
    }
    let ranks = u64::from(s.parallel.ep).saturating_mul(u64::from(s.parallel.etp()));
    deepep_buffer_bytes(s.model.hidden, ranks)
}

/// What every GPU of `s` holds from start-up to the end of the step outside the model state
/// and the pipeline's buffers: the framework's reserve (`memory.reserved_bytes`) and the
/// expert dispatcher's buffers ([`dispatch_buffer_bytes`]). The HBM lower bounds add it; the
/// memory timeline holds the two as their own categories (`schedule::emit::memory`).
pub fn held_for_the_run_bytes(s: &Scenario) -> u64 {
    s.memory
        .reserved_bytes
        .saturating_add(dispatch_buffer_bytes(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DeepSeek-V3 (hidden 7,168) over 64 ranks, by the hints' formulas written out: 10
    /// channels, 8 NVLink peers, 8 RDMA ranks, 288 NVLink and 128 RDMA receive tokens.
    #[test]
    fn deepseek_v3_on_64_ranks() {
        let hb = 7168 * 2;
        let nvl_slots = 10 * 8 * 288;
        let nvl = 10 * 8 * (2 * 8 + 3) * 4
            + nvl_slots * hb
            + nvl_slots * 8
            + nvl_slots * 128 * 8
            + nvl_slots * 128 * 4
            + nvl_slots * 128 * 4;
        let rdma_slots = 10 * 8 * 128;
        let rdma = 10 * 8 * 18 * 2 * 4
            + rdma_slots * hb * 2
            + rdma_slots * 8 * 2
            + rdma_slots * 128 * 8 * 2
            + rdma_slots * 128 * 4 * 2
            + rdma_slots * 128 * 4 * 2
            + rdma_slots * 16 * 2;
        let round = |b: u64| b.div_ceil(128) * 128;
        assert_eq!(deepep_buffer_bytes(7168, 64), round(nvl) + round(rdma));
        // About 0.7 GB: 378 MB over NVLink, 336 MB for RDMA.
        assert_eq!(round(nvl), 377_677_824);
        assert_eq!(round(rdma), 336_047_360);
    }

    /// Within one node there is no RDMA buffer; a group of one needs none at all; a size DeepEP
    /// does not list takes the next listed one's configuration.
    #[test]
    fn single_node_groups_have_no_rdma_buffer() {
        let eight = deepep_buffer_bytes(2048, 8);
        assert_eq!(eight, Config::nvl_bytes(&cfg(256, 128), 4096, 8));
        assert_eq!(deepep_buffer_bytes(2048, 1), 0);
        assert_eq!(config(12), config(16));
        assert_eq!(config(1000), config(160));
    }
}
