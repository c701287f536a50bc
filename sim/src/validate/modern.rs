//! The rules for rows of the modern layout (data/validation/throughput-modern.toml: NeMo,
//! Megatron-Bridge, torchtitan, llm-foundry on H100, 2024-26). Such a row spells out its
//! settings (precision, recompute, overlaps, sharding), so the rules only translate; what a row
//! states that twin does not model is listed with the comparison rather than dropped in
//! silence, and a row twin cannot express at all is reported with the reason.
//!
//! A row is modern when it names its `precision`. The translation:
//! - GPU preset from `gpu`, and that GPU's usual node (`cluster.node` left to its default);
//!   a `gpu_note` that describes a part twin has its own preset for selects that preset
//!   ([`gpu_preset`]).
//! - Text settings are read however a source spells them ([`squashed`]: any case, spaces and
//!   hyphens dropped, so `Float8CurrentScaling`, `all-to-all`, `capacity_factor=1.25` and
//!   `cuda_graphs = "none"` read as meant); what cannot be read is listed as unmodelled.
//! - The model shape as published; an `ffn_act` naming a GLU is a gated MLP; `head_dim`,
//!   `sliding_window` (with `sliding_window_every`) and `attention_sinks` where given.
//! - `tp`, `pp`, `cp`, `dp` as published; `vpp > 1` is the interleaved 1F1B schedule (a
//!   torchtitan row's interleaved `pp_schedule` without `vpp` has its two stages per rank,
//!   [`virtual_stages`]), and a `pp_schedule` naming GPipe, ZB-H1 or DualPipe selects that
//!   schedule.
//! - `zero_stage` as published, or 1 with `distributed_optimizer = true`; stage 3 is FSDP,
//!   and an `fsdp` degree other than `dp` is HSDP (`parallel.fsdp_degree`).
//! - Flash attention (every framework of the table uses a fused attention kernel).
//! - `overlap_grad_reduce` / `overlap_param_gather` / `sequence_parallel` / `recompute` /
//!   `compile` / `cuda_graphs` / `tp_comm_overlap` / `grad_reduce_dtype` /
//!   `optimizer_state_dtype` / `fp8_param_gather` as published; where a Megatron-Bridge row
//!   is silent, its recipes' bf16 gradient reduction and FP8 weight gathers
//!   ([`grad_reduce_dtype`], [`fp8_param_gather`]); elsewhere twin's defaults;
//!   `overlap_p2p_comm` as published under an interleaved pipeline (under 1F1B the
//!   transfers block, whatever the row says). The context-parallel algorithm is the
//!   framework file's.
//! - `recompute_detail` naming Megatron's block method with `recompute_num_layers=N` is
//!   `recompute_layers = N`; a selective row's list of Megatron-Core module names is
//!   `recompute_modules`.
//! - The framework file of the row's family (Megatron-Core for NeMo and Megatron-Bridge,
//!   torchtitan, DeepSpeed, llm-foundry for MosaicML's Composer); other families keep twin's
//!   default.
//! - Mixture-of-experts rows: `experts`, `top_k`, `moe_ffn_hidden`, `shared_experts` and their
//!   width, `dense_layers`, `dense_ffn_hidden`, `mtp_layers` and the `mla` ranks as published;
//!   `ep` and `etp` (other than tp, it refolds the stage's ranks); a pipeline layout in
//!   `other_flags` ("pipeline layout Et|(tt|)*30mL") as `parallel.pipeline_layout`;
//!   `routing` as `moe_routing` (force-balanced, or a token drop's capacity factor) and
//!   `moe_a2a_overlap` and the dispatcher (`alltoall`, the flex dispatcher's DeepEP or
//!   HybridEP) as published; a Mamba hybrid's `hybrid_pattern` (up to any note after it) and
//!   its mixer's shape ([`mamba_shape`]). MoE rows are summarised in a group of their own.
//!
//! The published figure is the step time: `step_time_s`, else `global_batch * seq_len /
//! (tokens_per_s_per_gpu * gpus)`, else (rows that publish only TFLOP/s) the model FLOPs of the
//! step over `tflops_per_gpu * gpus`, else (only an MFU) the same with `mfu_percent / 100 *
//! mfu_peak_tflops` as the TFLOP/s. twin's model FLOPs follow the same convention as
//! NVIDIA's "Model TFLOP/s" (Megatron's count: full s*s attention, no recompute; checked on
//! NeMo 24.07's Llama2-7B row: 767 TFLOP/s at 16,634 tokens/s is 46.1 GFLOP per token, the
//! Megatron count of that shape), so the conversion does not depend on the prediction.

use super::{Case, RunRow, ValidateError};
use crate::scenario::{RecomputeModules, Scenario};
use crate::setup::parse_str;
use std::fmt::Write;

/// Whether `row` is read by the modern rules.
pub fn is_modern(row: &RunRow) -> bool {
    row.precision.is_some()
}

/// The framework family a row's `framework` text names.
pub fn family(row: &RunRow) -> &'static str {
    let f = squashed(row.framework.as_deref().unwrap_or(""));
    if f.contains("torchtitan") {
        "torchtitan"
    } else if f.contains("llmfoundry") || f.contains("composer") {
        "llm-foundry"
    } else if f.contains("megatron") || f.contains("nemo") {
        "megatron-core"
    } else if f.contains("deepspeed") {
        "deepspeed"
    } else if f.contains("huggingface") || f.starts_with("hf") || f.contains("transformers") {
        "hf"
    } else {
        "other"
    }
}

/// `text` lowercased with everything but ASCII letters and digits dropped, so that a source's
/// spelling ("all-to-all", "Float8CurrentScaling", "LLM Foundry") matches the rules' words
/// ("alltoall", "currentscaling", "llmfoundry").
fn squashed(text: &str) -> String {
    text.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Whether the row ran Megatron-Bridge's performance recipes (`framework` names it).
fn megatron_bridge(row: &RunRow) -> bool {
    squashed(row.framework.as_deref().unwrap_or("")).contains("megatronbridge")
}

/// Whether a row counts as long context: context parallelism, or 16k tokens or more per
/// sequence.
pub fn is_long_context(row: &RunRow) -> bool {
    row.cp.unwrap_or(1) > 1 || row.seq_len >= 16_384
}

/// The groups a row is summarised in. A dense row: "dense", its precision, its framework
/// family, and long context (a row is in several groups). A mixture-of-experts row: "MoE"
/// only, so that the dense groups keep describing dense runs.
pub fn groups(row: &RunRow) -> Vec<String> {
    if arch(row) != "dense" {
        return vec!["MoE".to_string()];
    }
    let mut g = Vec::with_capacity(4);
    g.push("dense".to_string());
    if row.precision.is_some() {
        g.push(precision(row).to_ascii_uppercase());
    }
    g.push(family(row).to_string());
    if is_long_context(row) {
        g.push("long context".to_string());
    }
    g
}

/// Settings the row states that twin does not model yet: the prediction runs without them.
pub fn unmodelled(row: &RunRow) -> Vec<&'static str> {
    let mut out = Vec::new();
    if row.fp8_recipe.is_some() && precision(row) == "fp8" && fp8_recipe(row).is_none() {
        out.push("fp8_recipe");
    }
    if row.gpu_note.is_some() && gpu_preset(row) == gpu_name(&row.gpu) {
        out.push("gpu_note");
    }
    if row.routing.is_some() && moe_routing(row).is_none() {
        out.push("routing");
    }
    if row.moe_dispatcher.is_some() && moe_dispatcher(row).is_none() {
        out.push("moe_dispatcher");
    }
    if row.pp_schedule.is_some() && pipeline_schedule(row).is_none() && !schedule_as_layout(row) {
        out.push("pp_schedule");
    }
    if mamba_shape(row).is_some_and(|(_, assumed)| assumed) {
        out.push("mamba (Megatron-Core's defaults for what the row does not give)");
    }
    if matches!(&row.mla, Some(v) if !v.is_str() && !v.is_table()) {
        out.push("mla");
    }
    out
}

/// The pipeline schedule a row's `pp_schedule` names beyond what `vpp` says: GPipe,
/// zero-bubble (ZB-H1) or DualPipe; `None` for 1F1B and interleaved 1F1B (which `vpp`
/// chooses), for V-shaped variants twin does not model (ZBV, DualPipeV) and for a row without
/// one.
fn pipeline_schedule(row: &RunRow) -> Option<&'static str> {
    let text = squashed(row.pp_schedule.as_deref()?);
    if text.contains("zbv") || text.contains("dualpipev") {
        None
    } else if text.contains("dualpipe") {
        Some("dualpipe")
    } else if text.contains("gpipe") {
        Some("gpipe")
    } else if text.contains("zerobubble") || text.contains("zbh1") || text.contains("zb1p") {
        Some("zero-bubble")
    } else {
        None
    }
}

/// Whether a row's `pp_schedule` says what its `vpp` already does: 1F1B with one chunk per
/// rank, interleaved 1F1B with more.
fn schedule_as_layout(row: &RunRow) -> bool {
    let Some(text) = row.pp_schedule.as_deref().map(squashed) else {
        return true;
    };
    let interleaved = virtual_stages(row) > 1;
    if text.contains("interleaved") {
        interleaved
    } else {
        text.contains("1f1b") && !interleaved
    }
}

/// Model chunks per pipeline rank: the row's `vpp`, else 2 for a torchtitan row whose
/// `pp_schedule` is interleaved (its default: `generate_split_points` gives interleaved and
/// looped schedules two stages per rank, pytorch/torchtitan@9dec370ad26b5f8e9a7333a0e36165018262644b:
/// torchtitan/parallelisms/pipelining_utils.py), else 1.
fn virtual_stages(row: &RunRow) -> u32 {
    let interleaved_titan = family(row) == "torchtitan"
        && row.pp > 1
        && row
            .pp_schedule
            .as_deref()
            .is_some_and(|t| squashed(t).contains("interleaved"));
    row.vpp
        .unwrap_or(if interleaved_titan { 2 } else { 1 })
        .max(1)
}

/// The data-parallel gradient reduction's dtype: the row's, else `bf16` for a Megatron-Bridge
/// row, whose performance recipes set `grad_reduce_in_fp32 = False`
/// (NVIDIA-NeMo/Megatron-Bridge@97ad8cc6f: the 25.09 yamls' `ConfigContainer.mixed_precision`;
/// scripts/performance `set_*_common_configs` in 25.11 and 26.04), else twin's default.
fn grad_reduce_dtype(row: &RunRow) -> Option<String> {
    match &row.grad_reduce_dtype {
        Some(d) => Some(dtype(d)),
        None if megatron_bridge(row) => Some("bf16".to_string()),
        None => None,
    }
}

/// Whether the data-parallel parameter gathers carry FP8 weights: the row's, else, for a
/// Megatron-Bridge FP8 row, what its precision config sets: true for delayed, current and
/// MXFP8 scaling, false for block scaling (NVIDIA-NeMo/Megatron-Bridge@97ad8cc6f:
/// src/megatron/bridge/training/mixed_precision.py); else twin's default.
fn fp8_param_gather(row: &RunRow) -> Option<bool> {
    match (row.fp8_param_gather, fp8_recipe(row)) {
        (Some(g), _) => Some(g),
        (None, Some(recipe)) if megatron_bridge(row) => Some(recipe != "blockwise"),
        _ => None,
    }
}

/// The `moe_dispatcher` a row's dispatcher text names: the `flex` dispatcher's DeepEP or
/// HybridEP backend ("flex / DeepEP (H100)", "flex / hybridep"), else NCCL's all-to-all
/// ("alltoall", "all-to-all (NCCL)"); `None` for any other (Megatron-Core's `allgather`).
pub fn moe_dispatcher(row: &RunRow) -> Option<&'static str> {
    let text = squashed(row.moe_dispatcher.as_deref()?);
    if text.contains("deepep") {
        Some("deepep")
    } else if text.contains("hybridep") {
        Some("hybridep")
    } else if text.contains("alltoall") {
        Some("alltoall")
    } else {
        None
    }
}

/// The `moe_routing` value a row's `routing` text names, as TOML: `"force-balanced"`, a token
/// drop's capacity factor ("token-drop (capacity factor 1.0, ...)", "capacity_factor=1.25"), or
/// `"balanced"` for dropless routing balanced by an auxiliary loss; `None` for a row without
/// routing or one whose text names none of them ("model's own router").
pub fn moe_routing(row: &RunRow) -> Option<String> {
    let text = row.routing.as_deref()?.to_ascii_lowercase();
    let words = squashed(&text);
    if words.contains("forcebalanc") || words.contains("forceloadbalanc") {
        return Some("\"force-balanced\"".to_string());
    }
    if let Some(at) = ["capacity factor", "capacity_factor", "capacity-factor"]
        .iter()
        .find_map(|k| text.find(k).map(|i| i + k.len()))
    {
        let factor: String = text[at..]
            .trim_start_matches([' ', '=', ':'])
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let factor: f64 = factor.parse().ok()?;
        return Some(format!("{{ capacity_factor = {factor:?} }}"));
    }
    // Dropless routing balanced by an auxiliary loss: twin's `balanced`.
    (words.contains("dropless") || words.contains("auxloss") || words == "balanced")
        .then(|| "\"balanced\"".to_string())
}

/// The `fp8_recipe` a row's recipe text names: current (tensorwise) scaling, rowwise
/// (axiswise) scaling, MXFP8 ("mxfp8", "fp8-mx", microscaling), block scaling, delayed scaling,
/// then torchao's plain dynamic scaling (tensorwise), in that order (a text naming current
/// scaling for the figure compared and block scaling for another is current scaling), with
/// class names such as `Float8CurrentScaling` read as their words; `None` for an FP8 row whose
/// text names none (or a BF16 row).
pub fn fp8_recipe(row: &RunRow) -> Option<&'static str> {
    if precision(row) != "fp8" {
        return None;
    }
    let text = squashed(row.fp8_recipe.as_deref()?);
    let has = |words: &[&str]| words.iter().any(|w| text.contains(w));
    if has(&["currentscaling", "tensorwise"]) {
        Some("tensorwise")
    } else if has(&["rowwise", "axiswise"]) {
        Some("rowwise")
    } else if has(&["mxfp8", "fp8mx", "microscaling"]) {
        Some("mxfp8")
    } else if has(&["blockwise", "blockscaling"]) {
        Some("blockwise")
    } else if has(&["delayed"]) {
        Some("delayed")
    } else if has(&["dynamic"]) {
        // torchao's Float8Linear scales dynamically per tensor unless told otherwise.
        Some("tensorwise")
    } else {
        None
    }
}

/// The GPU preset a row runs on: its `gpu`, unless its `gpu_note` describes a variant twin
/// has a preset of its own for. Known: Meta's Grand Teton H100 (96 GB HBM2e, 500 W power
/// limit), on which torchtitan's published runs were made: `h100-sxm-96gb-500w`.
pub fn gpu_preset(row: &RunRow) -> &str {
    let gpu = gpu_name(&row.gpu);
    match row.gpu_note.as_deref() {
        Some(note)
            if gpu == "h100-sxm-80gb" && note.contains("HBM2e") && note.contains("500 W") =>
        {
            "h100-sxm-96gb-500w"
        }
        _ => gpu,
    }
}

/// The preset a row's `gpu` names, however spelt ("H100 SXM5 80GB", "h200-sxm-141gb", "B200"):
/// the SXM parts twin has presets for; any other text as written, for the scenario's check to
/// refuse with the presets it knows (a PCIe or NVL part is not an SXM one).
fn gpu_name(text: &str) -> &str {
    // The name with its form factor dropped: "H100 SXM5 80GB" is "h10080gb".
    let bare = squashed(text)
        .replacen("sxm5", "", 1)
        .replacen("sxm4", "", 1)
        .replacen("sxm", "", 1);
    match bare.as_str() {
        "h100" | "h10080gb" => "h100-sxm-80gb",
        "h200" | "h200141gb" => "h200-141gb",
        "h800" | "h80080gb" => "h800-sxm-80gb",
        "b200" | "b200180gb" | "b200192gb" => "b200-sxm-180gb",
        "gb200" | "gb200nvl72" => "gb200",
        "a100" | "a10080gb" => "a100-sxm-80gb",
        _ => text,
    }
}

/// The fields of the modern layout that the modern rules read and `row` sets. The classic rules
/// read none of them, so a classic row (no `precision`) that sets one is refused rather than
/// predicted without it.
pub fn modern_fields_set(row: &RunRow) -> Vec<&'static str> {
    let fields = [
        ("kv_heads", row.kv_heads.is_some()),
        ("head_dim", row.head_dim.is_some()),
        ("sliding_window", row.sliding_window.is_some()),
        ("sliding_window_every", row.sliding_window_every.is_some()),
        ("attention_sinks", row.attention_sinks.is_some()),
        ("ffn_hidden", row.ffn_hidden.is_some()),
        ("ffn_act", row.ffn_act.is_some()),
        ("arch", row.arch.is_some()),
        ("vpp", row.vpp.is_some()),
        ("cp", row.cp.is_some()),
        ("fsdp", row.fsdp.is_some()),
        ("zero_stage", row.zero_stage.is_some()),
        ("distributed_optimizer", row.distributed_optimizer.is_some()),
        ("sequence_parallel", row.sequence_parallel.is_some()),
        ("overlap_param_gather", row.overlap_param_gather.is_some()),
        ("step_time_s", row.step_time_s.is_some()),
        ("tokens_per_s_per_gpu", row.tokens_per_s_per_gpu.is_some()),
    ];
    fields
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect()
}

/// Whether the row ran with CUDA graphs (a bool, or text naming the graph's scope).
fn cuda_graphs(row: &RunRow) -> bool {
    match &row.cuda_graphs {
        Some(toml::Value::Boolean(b)) => *b,
        Some(toml::Value::String(s)) => !is_off(s),
        _ => false,
    }
}

/// Whether a setting's text says it was off ("", "none", "false", "off", "no", "disabled").
fn is_off(text: &str) -> bool {
    matches!(
        squashed(text).as_str(),
        "" | "none" | "false" | "off" | "no" | "disabled"
    )
}

/// The `recompute` value a row's text names: `full` (also Megatron's `block` method, a kind
/// of full recompute), `selective`, or `none` (any text saying off); other text as written, for
/// the scenario's check to refuse with the allowed values.
fn recompute(row: &RunRow) -> String {
    let Some(text) = row.recompute.as_deref() else {
        return "none".to_string();
    };
    let words = squashed(text);
    if words.starts_with("full") || words.starts_with("block") {
        "full".to_string()
    } else if words.starts_with("selective") {
        "selective".to_string()
    } else if is_off(text) {
        "none".to_string()
    } else {
        text.to_string()
    }
}

/// The `precision` a row's text names (`BF16`, `bfloat16`, `FP8 (current scaling)`): `fp8`,
/// `bf16` or `fp16`; other text as written, for the scenario's check to refuse.
fn precision(row: &RunRow) -> String {
    let text = row.precision.as_deref().unwrap_or("bf16");
    let words = squashed(text);
    if words.starts_with("fp8") || words.starts_with("float8") {
        "fp8".to_string()
    } else if words.starts_with("bf16") || words.starts_with("bfloat16") {
        "bf16".to_string()
    } else if words.starts_with("fp16") || words.starts_with("float16") {
        "fp16".to_string()
    } else {
        text.to_string()
    }
}

/// A dtype's text as the scenario spells it (`float32` is `fp32`, `bfloat16` is `bf16`).
fn dtype(text: &str) -> String {
    match squashed(text).as_str() {
        "fp32" | "float32" => "fp32".to_string(),
        "bf16" | "bfloat16" => "bf16".to_string(),
        _ => text.to_string(),
    }
}

/// Whether the MLP is gated: its activation names a GLU (SwiGLU, GeGLU, ReGLU), in any case.
fn gated_mlp(row: &RunRow) -> bool {
    row.ffn_act
        .as_deref()
        .is_some_and(|a| a.to_ascii_lowercase().contains("glu"))
}

/// The bundled framework file of a row's family; `None` (twin's default, Megatron-Core's
/// mechanics) for a family without one.
fn framework_key(row: &RunRow) -> Option<&'static str> {
    match family(row) {
        "megatron-core" => Some("megatron-core"),
        "torchtitan" => Some("torchtitan"),
        "deepspeed" => Some("deepspeed"),
        "llm-foundry" => Some("llm-foundry"),
        "hf" => Some("hf"),
        _ => None,
    }
}

/// Megatron's block recompute of the first N layers of each chunk, when the row's
/// `recompute_detail` names it (`block method, recompute_num_layers=N`).
fn block_recompute_layers(row: &RunRow) -> Option<u32> {
    let detail = row.recompute_detail.as_deref()?;
    if row.recompute.as_deref() != Some("full") || !detail.contains("block") {
        return None;
    }
    let (_, rest) = detail.split_once("recompute_num_layers=")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Megatron-Core's `recompute_modules`, when a selective row's `recompute_detail` lists them
/// ("moe, layernorm, core_attn, moe_act", anything after a parenthesis a note): every name one
/// of [`RecomputeModules::NAMES`].
pub fn recompute_modules(row: &RunRow) -> Option<Vec<&str>> {
    let detail = row.recompute_detail.as_deref()?;
    if row.recompute.as_deref() != Some("selective") {
        return None;
    }
    let list = detail.split('(').next().unwrap_or("");
    let names: Vec<&str> = list.split(',').map(str::trim).collect();
    names
        .iter()
        .all(|n| RecomputeModules::NAMES.contains(n))
        .then_some(names)
}

/// The kind of model a row's `arch` names, however spelt: `dense` (also when absent), `moe`
/// (mixture of experts), `hybrid` (a Mamba hybrid, `hybrid-mamba-moe`) or `other`.
fn arch(row: &RunRow) -> &'static str {
    let Some(text) = row.arch.as_deref() else {
        return "dense";
    };
    let words = squashed(text);
    if words.contains("mamba") || words.contains("hybrid") {
        "hybrid"
    } else if words == "dense" {
        "dense"
    } else if words.contains("moe") || words.contains("mixtureofexperts") {
        "moe"
    } else {
        "other"
    }
}

/// Why a row cannot be expressed before any scenario is built, if it cannot. Expert tensor
/// parallelism and how `ep` divides the ranks it groups (context-parallel ones included, as
/// Megatron-Core folds them) are the scenario validation's to refuse, with the keys and the
/// allowed values.
fn unsupported(row: &RunRow) -> Option<String> {
    match arch(row) {
        "dense" | "moe" => None,
        "hybrid" if row.hybrid_pattern.is_some() => None,
        _ => Some(format!(
            "arch = {:?} without a hybrid_pattern: its layers are not known",
            row.arch.as_deref().unwrap_or("")
        )),
    }
}

/// A Mamba hybrid's layer pattern: the row's `hybrid_pattern` up to its first space or
/// parenthesis, since the table may follow the pattern with a note ("MEMEM*E... (M=Mamba-2
/// x23, ...)").
fn hybrid_pattern(row: &RunRow) -> Option<&str> {
    let text = row.hybrid_pattern.as_deref()?.trim();
    let end = text
        .find(|c: char| c.is_whitespace() || c == '(')
        .unwrap_or(text.len());
    Some(&text[..end])
}

/// Megatron-Core's Mamba-2 mixer defaults, where neither the row's `mamba` nor its pattern's
/// note gives a number: head_dim 64, state 128, 8 groups, and `hidden * expand / head_dim`
/// heads with the mixer's expand of 2 (NVIDIA/Megatron-LM
/// megatron/core/transformer/transformer_config.py `mamba_state_dim`, `mamba_head_dim`,
/// `mamba_num_groups`, `mamba_num_heads`; megatron/core/ssm/mamba_mixer.py `expand=2`).
const MAMBA_DEFAULT_HEAD_DIM: u64 = 64;
const MAMBA_DEFAULT_STATE: u64 = 128;
const MAMBA_DEFAULT_GROUPS: u64 = 8;
const MAMBA_EXPAND: u64 = 2;

/// The `key=value` pairs of a row's comma-separated text ("q_lora_rank=1536, kv_lora_rank=512"),
/// trimmed; a part without `=` is skipped.
fn key_values(spec: &str) -> impl Iterator<Item = (&str, &str)> {
    spec.split(',')
        .filter_map(|part| part.split_once('='))
        .map(|(k, v)| (k.trim(), v.trim()))
}

/// A hybrid row's Mamba-2 mixer as `[model.mamba]` text, and whether a Megatron-Core default
/// stood in for a number the row does not give ([`MAMBA_DEFAULT_HEAD_DIM`] and the rest).
/// The numbers come from the row's `mamba` ("heads=64, head_dim=64, state=128, groups=8"),
/// else from the words of the pattern's note ("mamba 64 heads x 64 dim, state 128, 8
/// groups"). `None` for a row without a pattern or without a Mamba layer in it.
fn mamba_shape(row: &RunRow) -> Option<(String, bool)> {
    if !hybrid_pattern(row)?.contains('M') {
        return None;
    }
    let mut heads = None;
    let mut head_dim = None;
    let mut state = None;
    let mut groups = None;
    if let Some(spec) = row.mamba.as_deref() {
        for (k, v) in key_values(spec) {
            let v = v.parse::<u64>().ok();
            match k {
                "heads" => heads = v,
                "head_dim" => head_dim = v,
                "state" => state = v,
                "groups" => groups = v,
                _ => {}
            }
        }
    } else if let Some(note) = row.hybrid_pattern.as_deref() {
        let note = note.to_ascii_lowercase();
        let words: Vec<&str> = note
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect();
        let number = |i: Option<usize>| i.and_then(|i| words.get(i)?.parse::<u64>().ok());
        for (i, w) in words.iter().enumerate() {
            match *w {
                "heads" => heads = heads.or(number(i.checked_sub(1))),
                "dim" => head_dim = head_dim.or(number(i.checked_sub(1))),
                "state" => state = state.or(number(Some(i + 1))),
                "groups" => groups = groups.or(number(i.checked_sub(1))),
                _ => {}
            }
        }
    }
    let assumed = heads.is_none() || head_dim.is_none() || state.is_none() || groups.is_none();
    let head_dim = head_dim.unwrap_or(MAMBA_DEFAULT_HEAD_DIM);
    let heads = heads.unwrap_or(row.hidden.saturating_mul(MAMBA_EXPAND) / head_dim.max(1));
    let state = state.unwrap_or(MAMBA_DEFAULT_STATE);
    let groups = groups.unwrap_or(MAMBA_DEFAULT_GROUPS);
    Some((
        format!("heads = {heads}\nhead_dim = {head_dim}\nstate = {state}\ngroups = {groups}\n"),
        assumed,
    ))
}

/// The Megatron-Core pipeline layout a row's `other_flags` give as "pipeline layout ..."
/// (`parallel.pipeline_layout`).
pub fn pipeline_layout(row: &RunRow) -> Option<String> {
    let flags = row.other_flags.as_deref()?;
    let (_, rest) = flags.split_once("pipeline layout ")?;
    let layout: String = rest
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != ',')
        .collect();
    (!layout.is_empty()).then_some(layout)
}

/// The `[model]` keys of a mixture-of-experts row, and its `[model.mla]` table when it has
/// one (`mla` as the row writes it: "q_lora_rank=1536, kv_lora_rank=512, ...").
fn moe_keys(row: &RunRow) -> String {
    let mut text = String::new();
    let keys = [
        ("experts", row.experts.map(u64::from)),
        ("top_k", row.top_k.map(u64::from)),
        ("moe_ffn_hidden", row.moe_ffn_hidden),
        ("shared_experts", row.shared_experts.map(u64::from)),
        (
            "shared_expert_ffn_hidden",
            row.shared_expert_ffn_hidden
                .filter(|_| row.shared_experts.unwrap_or(0) > 0),
        ),
        // A hybrid pattern places the MoE layers itself.
        (
            "dense_layers",
            row.dense_layers
                .map(u64::from)
                .filter(|_| row.hybrid_pattern.is_none()),
        ),
        ("dense_ffn_hidden", row.dense_ffn_hidden),
        ("mtp_layers", row.mtp_layers.map(u64::from)),
        ("router_groups", row.router_groups.map(u64::from)),
        ("router_group_top_k", row.router_group_top_k.map(u64::from)),
    ];
    for (key, value) in keys {
        if let Some(v) = value {
            let _ = writeln!(text, "{key} = {v}");
        }
    }
    if let Some(pattern) = hybrid_pattern(row) {
        let _ = writeln!(text, "hybrid_pattern = {pattern:?}");
    }
    // The ranks as text ("q_lora_rank=1536, kv_lora_rank=512, ...") or as a table.
    match &row.mla {
        Some(toml::Value::String(ranks)) => {
            text.push_str("[model.mla]\n");
            for (k, v) in key_values(ranks) {
                let _ = writeln!(text, "{k} = {v}");
            }
        }
        Some(toml::Value::Table(ranks)) => {
            text.push_str("[model.mla]\n");
            for (k, v) in ranks {
                let _ = writeln!(text, "{k} = {v}");
            }
        }
        _ => {}
    }
    if let Some((shape, _)) = mamba_shape(row) {
        text.push_str("[model.mamba]\n");
        text.push_str(&shape);
    }
    text
}

/// The scenario of a modern row (see the module doc for the rules).
pub fn modern_scenario(row: &RunRow) -> Result<Scenario, ValidateError> {
    if let Some(reason) = unsupported(row) {
        return Err(ValidateError::Unsupported {
            id: row.id.clone(),
            reason,
        });
    }
    let precision = precision(row);
    let vpp = virtual_stages(row);
    let schedule =
        pipeline_schedule(row).unwrap_or(if vpp > 1 { "interleaved-1f1b" } else { "1f1b" });
    let zero = match row.zero_stage {
        Some(z) => z,
        None if row.distributed_optimizer == Some(true) => 1,
        None => 0,
    };
    let gated = gated_mlp(row);
    let mut text = String::new();
    let _ = write!(
        text,
        "name = {name:?}\n\
         [model]\nlayers = {layers}\nhidden = {hidden}\nheads = {heads}\nkv_heads = {kv}\n\
         seq_len = {seq}\nvocab = {vocab}\ngated_mlp = {gated}\n",
        name = row.id,
        layers = row.layers,
        hidden = row.hidden,
        heads = row.heads,
        kv = row.kv_heads.unwrap_or(row.heads),
        seq = row.seq_len,
        vocab = row.vocab,
    );
    if let Some(f) = row.ffn_hidden {
        let _ = writeln!(text, "ffn_hidden = {f}");
    }
    if let Some(d) = row.head_dim {
        let _ = writeln!(text, "head_dim = {d}");
    }
    if let Some(w) = row.sliding_window {
        let _ = writeln!(text, "sliding_window = {w}");
    }
    if let Some(every) = row.sliding_window_every {
        let _ = writeln!(text, "sliding_window_every = {every}");
    }
    if let Some(sinks) = row.attention_sinks {
        let _ = writeln!(text, "attention_sinks = {sinks}");
    }
    text.push_str(&moe_keys(row));
    let ep = row.ep.unwrap_or(1).max(1);
    let mut etp = match row.etp {
        Some(e) if e != row.tp => format!("etp = {e}\n"),
        _ => String::new(),
    };
    if let Some(layout) = pipeline_layout(row) {
        let _ = writeln!(etp, "pipeline_layout = {layout:?}");
    }
    // HSDP: FSDP sharding within groups of `fsdp` data-parallel ranks.
    let hsdp = match (row.fsdp, zero) {
        (Some(f), 3) if f > 0 && f != row.dp => format!("fsdp_degree = {f}\n"),
        _ => String::new(),
    };
    let _ = write!(
        text,
        "[cluster]\ngpu = {gpu:?}\ngpus = {gpus}\n\
         [parallel]\ntp = {tp}\npp = {pp}\ncp = {cp}\nep = {ep}\ndp = {dp}\nvpp = {vpp}\n\
         schedule = {schedule:?}\nzero = {zero}\nsequence_parallel = {sp}\n{hsdp}{etp}\
         [training]\nglobal_batch = {gb}\nmicro_batch = {mb}\nprecision = {precision:?}\n\
         recompute = {recompute:?}\nflash_attention = true\n",
        gpu = gpu_preset(row),
        gpus = row.gpus,
        tp = row.tp,
        pp = row.pp,
        cp = row.cp.unwrap_or(1),
        dp = row.dp,
        sp = row.sequence_parallel.unwrap_or(false),
        gb = row.global_batch,
        mb = row.micro_batch.unwrap_or(1),
        recompute = recompute(row),
    );
    if let Some(o) = row.overlap_grad_reduce {
        let _ = writeln!(text, "overlap_grad_reduce = {o}");
    }
    if let Some(d) = grad_reduce_dtype(row) {
        let _ = writeln!(text, "grad_reduce_dtype = {d:?}");
    }
    if let Some(d) = &row.optimizer_state_dtype {
        let _ = writeln!(text, "optimizer_state_dtype = {:?}", dtype(d));
    }
    if let Some(o) = row.overlap_param_gather {
        let _ = writeln!(text, "overlap_param_gather = {o}");
    }
    if let Some(n) = block_recompute_layers(row) {
        let _ = writeln!(text, "recompute_layers = {n}");
    }
    if let Some(modules) = recompute_modules(row) {
        let _ = writeln!(text, "recompute_modules = {modules:?}");
    }
    if let Some(f) = framework_key(row) {
        let _ = writeln!(text, "framework = {f:?}");
    }
    if row.compile == Some(true) {
        let _ = writeln!(text, "compile = true");
    }
    if let Some(recipe) = fp8_recipe(row) {
        let _ = writeln!(text, "fp8_recipe = {recipe:?}");
    }
    if let Some(g) = fp8_param_gather(row) {
        let _ = writeln!(text, "fp8_param_gather = {g}");
    }
    if row.tp_comm_overlap == Some(true) {
        let _ = writeln!(text, "tp_comm_overlap = true");
    }
    // Only interleaved schedules can overlap the pipeline's transfers; under 1F1B they block.
    if let (Some(o), true) = (row.overlap_p2p_comm, row.pp > 1 && vpp > 1) {
        let _ = writeln!(text, "overlap_p2p_comm = {o}");
    }
    if cuda_graphs(row) {
        let _ = writeln!(text, "cuda_graphs = true");
    }
    if let Some(routing) = moe_routing(row) {
        let _ = writeln!(text, "moe_routing = {routing}");
    }
    if row.moe_a2a_overlap == Some(true) {
        let _ = writeln!(text, "moe_a2a_overlap = true");
    }
    if let Some(d) = moe_dispatcher(row) {
        let _ = writeln!(text, "moe_dispatcher = {d:?}");
    }
    parse_str(&text, &format!("<validation row {}>", row.id), &[]).map_err(|source| {
        ValidateError::Scenario {
            id: row.id.clone(),
            source,
        }
    })
}

/// The published step time of a row, when it publishes one directly or as tokens/s.
pub fn published_step_time_s(row: &RunRow) -> Option<f64> {
    if let Some(s) = row.step_time_s {
        return Some(s);
    }
    let tokens = row.tokens_per_s_per_gpu? * f64::from(row.gpus);
    (tokens > 0.0).then(|| row.global_batch as f64 * row.seq_len as f64 / tokens)
}

/// The one case of a modern row: its step time, published or derived (module doc).
pub fn modern_cases(row: &RunRow) -> Result<Vec<Case>, ValidateError> {
    let scenario = modern_scenario(row)?;
    let mfu = row.mfu_percent.zip(row.mfu_peak_tflops);
    let (field, published) = match (published_step_time_s(row), row.tflops_per_gpu, mfu) {
        (Some(s), _, _) => ("step_time_s", s),
        (None, Some(tflops), _) => ("model_tflops_per_gpu", tflops),
        // Only an MFU: the TFLOP/s it is of the peak the row names.
        (None, None, Some((percent, peak))) => ("model_tflops_from_mfu", percent * peak / 100.0),
        (None, None, None) => {
            return Err(ValidateError::Unsupported {
                id: row.id.clone(),
                reason: "publishes no step time, tokens/s, TFLOP/s or MFU with its peak"
                    .to_string(),
            })
        }
    };
    Ok(vec![Case {
        id: row.id.clone(),
        field,
        published,
        scenario,
    }])
}
