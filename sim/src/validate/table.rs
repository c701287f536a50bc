//! The published-runs table (the layout of data/validation/throughput.toml): `[[run]]` rows
//! of whole training runs and `[[layer_timing]]` rows of one transformer layer's forward and
//! backward. Every key must be one the structs below name: the descriptive ones (sources,
//! notes, derived percentages) are read and not used, and any other key is refused with its
//! line and the allowed keys, since an ignored `kv_heads` or a misspelt `micro_bach` would
//! change the prediction without a word.

use crate::scenario::error::{closest, Ctx, LineIndex};
use crate::scenario::{ErrorKind, ScenarioError};
use serde::Deserialize;
use std::path::Path;

/// One published training run.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRow {
    pub id: String,
    /// Where the figures come from (descriptive).
    pub source: Option<String>,
    /// Parameters in billions, as published (descriptive; the model shape determines them).
    pub params_b: Option<f64>,
    /// Which FLOP convention the published TFLOP/s use (descriptive).
    pub flops_counting: Option<String>,
    /// Published utilisation figures (descriptive; the prediction is compared with
    /// `tflops_per_gpu` or the iteration times).
    pub percent_of_peak: Option<f64>,
    pub hfu_selective_sp_percent: Option<f64>,
    pub mfu_selective_sp_percent: Option<f64>,
    pub notes: Option<String>,
    pub gpu: String,
    pub gpus: u32,
    pub layers: u32,
    pub hidden: u64,
    pub heads: u32,
    pub seq_len: u64,
    pub vocab: u64,
    pub tp: u32,
    pub pp: u32,
    pub dp: u32,
    pub global_batch: u64,
    pub micro_batch: Option<u64>,
    /// none | selective | full (for rows that publish one figure).
    pub recompute: Option<String>,
    pub schedule: Option<String>,
    pub virtual_stages: Option<u32>,
    /// Whether the data-parallel gradient reduction overlapped the backward (PyTorch DDP;
    /// Megatron's "local" DDP reduced after it). Not overlapped when absent.
    pub overlap_grad_reduce: Option<bool>,
    /// Achieved TFLOP/s per GPU (hardware FLOPs, with recompute, for Megatron SC'21).
    pub tflops_per_gpu: Option<f64>,
    /// Iteration time with full recompute, no sequence parallelism (Korthikanti Table 5).
    pub iteration_s_full_recompute: Option<f64>,
    /// Iteration time with selective recompute and sequence parallelism.
    pub iteration_s_selective_sp: Option<f64>,

    // The modern layout (data/validation/throughput-modern.toml; its header documents each
    // field). A row that names its `precision` is read by the modern rules (`super::modern`).
    /// Where the micro batch, recompute and overlap settings were read (descriptive).
    pub settings_source: Option<String>,
    /// Software stack as the source states it; picks the framework family and group.
    pub framework: Option<String>,
    pub container: Option<String>,
    /// Model label as published (descriptive).
    pub model: Option<String>,
    /// dense | moe | hybrid-mamba-moe.
    pub arch: Option<String>,
    /// When the GPU differs from the preset named by `gpu` (descriptive).
    pub gpu_note: Option<String>,
    pub kv_heads: Option<u32>,
    /// Only where it differs from hidden / heads.
    pub head_dim: Option<u64>,
    /// Keys each query attends to on the windowed layers, and which layers those are (layer
    /// `i` when `i % sliding_window_every == 0`; every layer when absent).
    pub sliding_window: Option<u64>,
    pub sliding_window_every: Option<u32>,
    /// A learned sink logit per head in each layer's softmax.
    pub attention_sinks: Option<bool>,
    /// Dense MLP width (per branch for gated MLPs).
    pub ffn_hidden: Option<u64>,
    /// gelu | swiglu | squared-relu | ... (swiglu: gated MLP).
    pub ffn_act: Option<String>,
    pub vocab_note: Option<String>,
    /// DeepSeek MLA ranks (MoE architectures).
    pub mla: Option<toml::Value>,
    /// A hybrid model's layers, one symbol each (`M` Mamba, `E` MoE, `*` attention, `-` MLP).
    pub hybrid_pattern: Option<String>,
    /// A hybrid model's Mamba-2 mixer: "heads=64, head_dim=64, state=128, groups=8".
    pub mamba: Option<String>,
    pub experts: Option<u32>,
    pub top_k: Option<u32>,
    pub moe_ffn_hidden: Option<u64>,
    pub shared_experts: Option<u32>,
    pub shared_expert_ffn_hidden: Option<u64>,
    pub dense_layers: Option<u32>,
    pub dense_ffn_hidden: Option<u64>,
    pub mtp_layers: Option<u32>,
    /// Group-limited routing: `router_group_top_k` of `router_groups` expert groups per token.
    pub router_groups: Option<u32>,
    pub router_group_top_k: Option<u32>,
    pub routing: Option<String>,
    pub moe_dispatcher: Option<String>,
    pub moe_a2a_overlap: Option<bool>,
    /// bf16 | fp8.
    pub precision: Option<String>,
    /// FP8 scaling recipe as the source describes it.
    pub fp8_recipe: Option<String>,
    /// The parameter gathers carried FP8 weights (Megatron-Core's `fp8_param_gather`,
    /// torchtitan's `enable_fsdp_float8_all_gather`), where the row's recipe says.
    pub fp8_param_gather: Option<bool>,
    pub vpp: Option<u32>,
    pub cp: Option<u32>,
    pub ep: Option<u32>,
    pub etp: Option<u32>,
    pub edp: Option<u32>,
    /// Sharding degree (0 = none).
    pub fsdp: Option<u32>,
    /// 1 = distributed optimizer, 3 = FSDP / FULL_SHARD.
    pub zero_stage: Option<u32>,
    pub grad_accum: Option<u64>,
    pub recompute_detail: Option<String>,
    pub sequence_parallel: Option<bool>,
    pub tp_comm_overlap: Option<bool>,
    pub overlap_param_gather: Option<bool>,
    pub distributed_optimizer: Option<bool>,
    pub overlap_p2p_comm: Option<bool>,
    /// A bool, or text naming the graph scope.
    pub cuda_graphs: Option<toml::Value>,
    pub compile: Option<bool>,
    /// The dtype gradients were reduced in over data parallelism (`fp32` | `bf16`), where the
    /// row's recipe says.
    pub grad_reduce_dtype: Option<String>,
    /// The dtype of the optimizer's moments (`fp32` | `bf16`), where the row's recipe says.
    pub optimizer_state_dtype: Option<String>,
    pub pp_schedule: Option<String>,
    pub other_flags: Option<String>,
    /// Seconds per optimizer step (primary figure).
    pub step_time_s: Option<f64>,
    pub step_time_kind: Option<String>,
    /// Tokens/s per GPU (primary figure; the same as the step time).
    pub tokens_per_s_per_gpu: Option<f64>,
    pub tflops_per_gpu_best_no_cp: Option<f64>,
    pub mfu_percent: Option<f64>,
    pub hfu_percent: Option<f64>,
    pub mfu_peak_tflops: Option<f64>,
    pub memory_gib: Option<f64>,
    /// confirmed | unconfirmed.
    pub confidence: Option<String>,
    /// Fields that are assumptions, not read from any source.
    pub assumed: Option<Vec<String>>,
}

/// One case of a per-layer timing table.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerCase {
    pub case: String,
    pub forward_ms: f64,
    pub backward_ms: f64,
}

/// Per-layer timings of one model shape (Korthikanti Table 4 layout).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerTiming {
    pub id: String,
    /// Where the figures come from (descriptive).
    pub source: Option<String>,
    pub gpu: String,
    pub hidden: u64,
    pub heads: u32,
    pub seq_len: u64,
    pub micro_batch: u64,
    pub tp: u32,
    pub rows: Vec<LayerCase>,
}

/// A whole table.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Table {
    #[serde(default)]
    pub run: Vec<RunRow>,
    #[serde(default)]
    pub layer_timing: Vec<LayerTiming>,
}

/// Reads a table file; errors are located like scenario errors.
pub fn load_table(path: &Path) -> Result<Table, ScenarioError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
        kind: ErrorKind::Io,
        origin: origin.clone(),
        line: None,
        column: None,
        key: String::new(),
        value: String::new(),
        message: format!("cannot read table: {e}"),
        allowed: String::new(),
    })?;
    parse_table(&text, &origin)
}

/// Parses table text; `origin` names it in errors.
pub fn parse_table(text: &str, origin: &str) -> Result<Table, ScenarioError> {
    let ctx = Ctx {
        origin: origin.to_string(),
    };
    toml::from_str(text).map_err(|e| {
        let loc = e.span().map(|s| LineIndex::new(text).loc(s.start));
        let message = e.message().trim();
        if let Some((key, allowed)) = unknown_field(message) {
            let hint = closest(key, allowed.iter().copied())
                .map(|k| format!("; did you mean `{k}`?"))
                .unwrap_or_default();
            return ctx.error(
                ErrorKind::UnknownKey,
                loc.as_ref(),
                key,
                "",
                format!("unknown key{hint}"),
                allowed.join(", "),
            );
        }
        let kind = if message.starts_with("missing field") {
            ErrorKind::Missing
        } else {
            ErrorKind::Type
        };
        ctx.error(kind, loc.as_ref(), "", "", message, "")
    })
}

/// The key and the allowed keys of serde's "unknown field `k`, expected one of `a`, `b`"
/// (or "expected `a`" when there is one).
fn unknown_field(message: &str) -> Option<(&str, Vec<&str>)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (key, rest) = rest.split_once('`')?;
    let allowed = rest.split('`').skip(1).step_by(2).collect();
    Some((key, allowed))
}
