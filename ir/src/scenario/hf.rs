//! Model shapes from a Hugging Face `config.json`, because that is where most users' model
//! shapes live. Understands Llama-style keys (Llama, Mistral, Mixtral, GPT-NeoX, Qwen2,
//! Qwen3, ...), GPT-2-style keys (`n_embd`, `n_layer`, ...) and the mixture-of-experts and
//! latent-attention keys of DeepSeek-V3, Qwen2-MoE, Qwen3-MoE and GPT-OSS, and the hybrid
//! Mamba keys of Nemotron-H. Errors inside the JSON name the JSON file,
//! the line and column of the key, and the key.
//!
//! What the import cannot model is never dropped silently: a `model_type` outside
//! [`MODEL_TYPES`] is refused unless the scenario sets `model.hf_force = true` (its shape is
//! then read as the dense Llama- or GPT-2-style keys say), and every key in [`UNMODELLED`]
//! that the config sets is listed in [`HfShape::unmodelled`], which the CLI prints as a
//! warning.

use super::error::{Ctx, ErrorKind, LineIndex, Loc, ScenarioError};
use super::keys::{mla as mlak, model as mk};
use super::read::group_digits;
use super::types::{Mamba, Mla};
use serde_json::Value;
use std::path::Path;

/// What a config.json says about the model; `None` where it says nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct HfShape {
    pub layers: Option<u64>,
    pub hidden: Option<u64>,
    pub heads: Option<u64>,
    pub kv_heads: Option<u64>,
    pub head_dim: Option<u64>,
    pub ffn_hidden: Option<u64>,
    pub seq_len: Option<u64>,
    pub vocab: Option<u64>,
    pub gated_mlp: bool,
    pub tied_embeddings: bool,
    pub experts: Option<u64>,
    pub top_k: Option<u64>,
    pub moe_every: Option<u64>,
    pub moe_ffn_hidden: Option<u64>,
    pub shared_experts: Option<u64>,
    pub shared_ffn_hidden: Option<u64>,
    pub dense_layers: Option<u64>,
    pub router_groups: Option<u64>,
    pub router_group_top_k: Option<u64>,
    pub qkv_bias: bool,
    pub mla: Option<Mla>,
    pub mtp_layers: Option<u64>,
    pub sliding_window: Option<u64>,
    pub sliding_window_every: Option<u64>,
    pub attention_sinks: bool,
    /// A hybrid model's layer pattern and Mamba mixer (`nemotron_h`).
    pub hybrid_pattern: Option<String>,
    pub mamba: Option<Mamba>,
    /// Keys the config sets that change the model but that twin does not model, each as
    /// "key = value (what it means)".
    pub unmodelled: Vec<String>,
}

/// The `model_type`s whose shape the import reads completely, apart from the keys of
/// [`UNMODELLED`] and the notes it adds per family.
pub const MODEL_TYPES: &[&str] = &[
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "deepseek_v3",
    "gpt_oss",
    "nemotron_h",
    "gpt_neox",
    "gpt2",
];

/// Keys of Hugging Face configs that change the model's compute or memory but that the
/// import does not model, with what each means. Keys set to null, false, 0 or empty are not
/// listed, nor keys the config's own family reads (DeepSeek-V3's MoE and MLA keys under
/// `deepseek_v3`, Qwen's under `qwen2_moe` and `qwen3_moe`): under another `model_type`
/// (imported with `hf_force`) they leave the model dense and are listed.
pub const UNMODELLED: &[(&str, &str)] = &[
    (
        "sliding_window",
        "sliding-window attention: twin attends over the whole sequence",
    ),
    (
        "use_sliding_window",
        "sliding-window attention: twin attends over the whole sequence",
    ),
    (
        "attention_bias",
        "the output projection's bias; twin counts the query, key and value biases",
    ),
    ("mlp_bias", "biases on the MLP projections"),
    (
        "n_routed_experts",
        "routed experts, read under model_type deepseek_v3: here a dense model",
    ),
    ("n_shared_experts", "shared experts"),
    ("moe_intermediate_size", "the experts' MLP width"),
    (
        "first_k_dense_replace",
        "dense layers before the MoE layers",
    ),
    ("moe_layer_freq", "MoE on every n-th layer only"),
    (
        "num_experts",
        "routed experts, read under model_type qwen2_moe and qwen3_moe: here a dense model",
    ),
    ("decoder_sparse_step", "MoE on every n-th layer only"),
    ("shared_expert_intermediate_size", "a shared expert"),
    (
        "kv_lora_rank",
        "multi-head latent attention (compressed keys and values)",
    ),
    (
        "q_lora_rank",
        "multi-head latent attention (compressed queries)",
    ),
    (
        "qk_rope_head_dim",
        "multi-head latent attention's rotary head size",
    ),
    (
        "qk_nope_head_dim",
        "multi-head latent attention's head size",
    ),
    (
        "v_head_dim",
        "multi-head latent attention's value head size",
    ),
    ("num_nextn_predict_layers", "multi-token prediction layers"),
    (
        "rope_scaling",
        "rotary-embedding scaling (no cost of its own, but a longer context)",
    ),
    (
        "layer_types",
        "layers of different attention kinds (windowed, linear): twin attends fully on all",
    ),
    (
        "mlp_only_layers",
        "dense layers among the MoE layers, which moe_every cannot place",
    ),
    (
        "n_group",
        "group-limited routing (each token's experts from topk_group of n_group groups)",
    ),
    (
        "topk_group",
        "group-limited routing (each token's experts from topk_group of n_group groups)",
    ),
    ("topk_method", "the router's expert selection"),
    ("routed_scaling_factor", "the routed experts' output scale"),
    (
        "quantization_config",
        "the checkpoint's weight format; twin trains at the scenario's precision",
    ),
];

/// Largest file (scenario or config.json) twin reads; anything bigger is not a config.
pub(crate) const MAX_FILE_BYTES: u64 = 16 << 20;

/// Reads a text file of at most [`MAX_FILE_BYTES`].
pub(crate) fn read_text(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    if file.metadata()?.is_dir() {
        return Err(std::io::Error::other("is a directory"));
    }
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {} bytes",
            group_digits(MAX_FILE_BYTES)
        )));
    }
    Ok(text)
}

/// Loads `path` (already resolved against the scenario's directory). `at` locates the
/// `hf_config` key in the scenario for errors about the file as a whole.
pub(crate) fn load(
    scenario_ctx: &Ctx,
    at: &Loc,
    key: &str,
    raw: &str,
    path: &Path,
    force: bool,
) -> Result<HfShape, ScenarioError> {
    let text = read_text(path).map_err(|e| {
        scenario_ctx.error(
            ErrorKind::Io,
            Some(at),
            key,
            raw,
            format!("cannot read Hugging Face config {}: {e}", path.display()),
            "a path to config.json, relative to the scenario file",
        )
    })?;
    parse(&path.display().to_string(), &text, force)
}

/// Parses config.json text; `origin` names the file in errors. An unknown `model_type` is
/// an error unless `force`.
pub(crate) fn parse(origin: &str, text: &str, force: bool) -> Result<HfShape, ScenarioError> {
    let ctx = Ctx {
        origin: origin.to_string(),
    };
    let json: Value = serde_json::from_str(text).map_err(|e| {
        let loc = (e.line() > 0).then(|| Loc::File {
            line: u32::try_from(e.line()).unwrap_or(u32::MAX),
            column: u32::try_from(e.column().max(1)).unwrap_or(u32::MAX),
        });
        ctx.error(
            ErrorKind::Syntax,
            loc.as_ref(),
            "",
            "",
            format!("JSON syntax error: {e}"),
            "",
        )
    })?;
    let Value::Object(map) = &json else {
        return Err(ctx.error(
            ErrorKind::HfConfig,
            Some(&Loc::File { line: 1, column: 1 }),
            "",
            "",
            "a Hugging Face config.json is a JSON object",
            "",
        ));
    };
    let index = LineIndex::new(text);
    let reader = Reader {
        ctx: &ctx,
        text,
        index: &index,
        map,
    };
    let model_type = reader.string("model_type")?.unwrap_or_default();
    if !force && !model_type.is_empty() && !MODEL_TYPES.contains(&model_type.as_str()) {
        return Err(reader.err(
            "model_type",
            &format!(
                "model_type \"{model_type}\" is not one the import understands; its config \
                 may describe layers twin would read as a dense model"
            ),
            format!(
                "{}; or set model.hf_force = true in the scenario to import its dense shape anyway",
                MODEL_TYPES.join(", ")
            ),
        ));
    }
    let gpt2_style = reader.has("n_embd") || model_type == "gpt2";
    let mut shape = HfShape::default();
    if gpt2_style {
        shape.hidden = reader.uint("n_embd", mk::HIDDEN.uint_range())?;
        shape.layers = reader.uint("n_layer", mk::LAYERS.uint_range())?;
        shape.heads = reader.uint("n_head", mk::HEADS.uint_range())?;
        shape.seq_len = reader.uint("n_positions", mk::SEQ_LEN.uint_range())?;
        shape.ffn_hidden = reader.uint("n_inner", mk::FFN_HIDDEN.uint_range())?;
        // GPT-2 ties the output head to the input embedding unless told otherwise.
        shape.tied_embeddings = reader.boolean("tie_word_embeddings")?.unwrap_or(true);
    } else {
        shape.hidden = reader.uint("hidden_size", mk::HIDDEN.uint_range())?;
        shape.layers = reader.uint("num_hidden_layers", mk::LAYERS.uint_range())?;
        shape.heads = reader.uint("num_attention_heads", mk::HEADS.uint_range())?;
        shape.kv_heads = reader.uint("num_key_value_heads", mk::HEADS.uint_range())?;
        // Qwen3, Gemma and GPT-OSS give a head width other than hidden / heads.
        shape.head_dim = reader.uint("head_dim", mk::HEAD_DIM.uint_range())?;
        shape.seq_len = reader.uint("max_position_embeddings", mk::SEQ_LEN.uint_range())?;
        shape.ffn_hidden = reader.uint("intermediate_size", mk::FFN_HIDDEN.uint_range())?;
        shape.tied_embeddings = reader.boolean("tie_word_embeddings")?.unwrap_or(false);
    }
    shape.vocab = reader.uint("vocab_size", mk::VOCAB.uint_range())?;
    // SwiGLU (gate, up and down projections) is what the Llama family's "silu" activation
    // means in HF configs; GPT-2 and GPT-NeoX use a plain two-matrix GELU MLP.
    let act = reader
        .string("hidden_act")?
        .or(reader.string("activation_function")?)
        .unwrap_or_default();
    shape.gated_mlp = !gpt2_style
        && (matches!(act.as_str(), "silu" | "swiglu")
            || matches!(
                model_type.as_str(),
                "llama"
                    | "mistral"
                    | "mixtral"
                    | "qwen2"
                    | "qwen2_moe"
                    | "qwen3"
                    | "qwen3_moe"
                    | "deepseek_v3"
                    | "gpt_oss"
            ));
    shape.experts = reader.uint("num_local_experts", mk::EXPERTS.uint_range())?;
    shape.top_k = reader.uint("num_experts_per_tok", mk::TOP_K.uint_range())?;
    // `attention_bias` biases all four attention projections wherever transformers has the
    // key (its Llama, Qwen3, DeepSeek-V3 and GPT-OSS attention classes); twin counts the
    // query, key and value biases, and UNMODELLED lists the output projection's.
    shape.qkv_bias = reader.boolean("attention_bias")?.unwrap_or(false);
    // Keys the family's import reads; UNMODELLED does not list them. Qwen3 and Qwen3-MoE
    // need nothing beyond the Llama keys but their per-head RMSNorm on queries and keys
    // (2 * head_dim weights per layer, 256 at head_dim 128), which is not counted: 7,168
    // weights in the smallest, Qwen3-0.6B's 28 layers, about 0.001% of it.
    let mut modelled: Vec<&str> = Vec::new();
    match model_type.as_str() {
        "deepseek_v3" => deepseek_v3(&reader, &mut shape, &mut modelled)?,
        "qwen2_moe" => qwen_moe(&reader, true, &mut shape, &mut modelled)?,
        "qwen3_moe" => qwen_moe(&reader, false, &mut shape, &mut modelled)?,
        "gpt_oss" => gpt_oss(&reader, &mut shape)?,
        "nemotron_h" => nemotron_h(&reader, &mut shape, &mut modelled)?,
        // Qwen2 biases the query, key and value projections without a key saying so
        // (Qwen2Attention, huggingface/transformers@63bb723747035466e5339aea864b133f709b067d
        // src/transformers/models/qwen2/modeling_qwen2.py).
        "qwen2" => shape.qkv_bias = true,
        _ => {}
    }
    // The Qwen families attend over a sliding window only with use_sliding_window = true
    // (their configs write sliding_window regardless); elsewhere use_sliding_window = false
    // switches it off.
    let qwen = model_type.starts_with("qwen");
    let window_off = match map.get("use_sliding_window") {
        Some(Value::Bool(on)) => !on,
        _ => qwen,
    };
    if WINDOW_FAMILIES.contains(&model_type.as_str()) && !window_off {
        sliding_window(&reader, &model_type, &mut shape, &mut modelled)?;
    }
    for (key, what) in UNMODELLED {
        if modelled.contains(key) || (*key == "sliding_window" && window_off) {
            continue;
        }
        match map.get(*key) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => {}
            Some(Value::Number(n)) if n.as_f64() == Some(0.0) => {}
            Some(Value::Array(a)) if a.is_empty() => {}
            Some(Value::Object(o)) if o.is_empty() => {}
            // Every layer attending fully is what twin models.
            Some(Value::Array(a))
                if *key == "layer_types"
                    && a.iter().all(|t| t.as_str() == Some("full_attention")) => {}
            Some(v) => shape.unmodelled.push(format!(
                "{key} = {} ({what})",
                super::error::shorten(&v.to_string())
            )),
        }
    }
    // Without a family that reads them, MoE keys other than Mixtral's leave the model dense:
    // top_k without num_local_experts is unmodelled.
    if shape.experts.is_none() {
        if let Some(k) = shape.top_k.take() {
            shape.unmodelled.push(format!(
                "num_experts_per_tok = {k} (experts per token, without num_local_experts)"
            ));
        }
    }
    Ok(shape)
}

/// The families whose attention classes read `sliding_window` (and `layer_types`) in
/// transformers: Mistral and Mixtral on every layer, the Qwen families with
/// `use_sliding_window = true`, GPT-OSS on every other layer.
const WINDOW_FAMILIES: &[&str] = &[
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "gpt_oss",
];

/// The sliding window of a family that has one, as `sliding_window` and
/// `sliding_window_every`. Which layers are windowed:
/// - `layer_types` when the config writes it: "sliding_attention" on the layers `i` with
///   `i % k == 0` and "full_attention" on the others is `sliding_window_every = k` (all
///   "full_attention": no window); another pattern is listed as unmodelled.
/// - Without it, as the config classes build their default `layer_types`
///   (huggingface/transformers@02b8f42b4240dddea1b27c45d2dc95fb2682f841
///   src/transformers/models/gpt_oss/configuration_gpt_oss.py, qwen2/configuration_qwen2.py):
///   GPT-OSS windows layer `i` when `(i + 1) % 2` is 1, the even layers, with a default
///   window of 128; the Qwen families window the layers from `max_window_layers` (default
///   28) on, which is every layer only when it is 0 (other values are listed); Mistral and
///   Mixtral window every layer.
fn sliding_window(
    r: &Reader<'_>,
    model_type: &str,
    s: &mut HfShape,
    modelled: &mut Vec<&str>,
) -> Result<(), ScenarioError> {
    let gpt_oss = model_type == "gpt_oss";
    let range = mk::SLIDING_WINDOW.uint_range();
    let tokens = if gpt_oss {
        r.uint_or("sliding_window", range, 128)?
    } else {
        r.uint("sliding_window", range)?
    };
    let Some(tokens) = tokens else {
        return Ok(());
    };
    modelled.extend(["sliding_window", "use_sliding_window", "layer_types"]);
    let every = match r.map.get("layer_types") {
        Some(Value::Array(types)) if !types.is_empty() => {
            let windowed: Vec<bool> = types
                .iter()
                .map(|t| t.as_str() == Some("sliding_attention"))
                .collect();
            let period = |k: usize| windowed.iter().enumerate().all(|(i, &w)| w == (i % k == 0));
            if windowed.iter().all(|w| !w) {
                return Ok(());
            }
            match (1..=windowed.len()).find(|&k| period(k)) {
                Some(k) => k as u64,
                None => {
                    s.unmodelled.push(format!(
                        "layer_types = {} (windowed layers in a pattern sliding_window_every                          cannot place: twin attends fully on all)",
                        super::error::shorten(
                            &r.map.get("layer_types").map(Value::to_string).unwrap_or_default()
                        )
                    ));
                    return Ok(());
                }
            }
        }
        _ if gpt_oss => 2,
        _ if model_type.starts_with("qwen") => {
            let from = r
                .uint_or("max_window_layers", (0, u64::MAX), 28)?
                .unwrap_or(0);
            if from > 0 {
                if s.layers.is_none_or(|l| from < l) {
                    s.unmodelled.push(format!(
                        "max_window_layers = {from} (the sliding window on the layers from                          {from} on only: twin attends fully on all)"
                    ));
                }
                return Ok(());
            }
            1
        }
        _ => 1,
    };
    s.sliding_window = Some(tokens);
    s.sliding_window_every = Some(every);
    Ok(())
}

/// DeepSeek-V3, as transformers' DeepseekV3Config names its keys
/// (huggingface/transformers@001f85b38fb432858ace93f18622f07cec46d874
/// src/transformers/models/deepseek_v3/configuration_deepseek_v3.py); a key the config leaves
/// out takes that class's default, which is DeepSeek-V3's own shape.
/// - `n_routed_experts`, `num_experts_per_tok`, `moe_intermediate_size` (the routed expert's
///   width); `intermediate_size` stays the dense layers' width.
/// - `n_shared_experts` shared experts, each `moe_intermediate_size` wide (transformers
///   builds them as one MLP `n_shared_experts` times as wide: the same parameters and FLOPs).
/// - Layer `i` has experts when `i >= first_k_dense_replace` and `i % moe_layer_freq == 0`,
///   which is `Moe::is_moe_layer` (DeepSeek's modeling code as vLLM carries it:
///   vllm-project/vllm@b863fe5bf4e19680572603b4e166faefc5725551
///   vllm/model_executor/models/deepseek_v2.py).
/// - Group-limited routing: a token's experts come from `topk_group` of `n_group` groups.
/// - Multi-head latent attention from `q_lora_rank` (null: queries projected directly),
///   `kv_lora_rank`, `qk_nope_head_dim`, `qk_rope_head_dim` and `v_head_dim`.
fn deepseek_v3(
    r: &Reader<'_>,
    s: &mut HfShape,
    modelled: &mut Vec<&str>,
) -> Result<(), ScenarioError> {
    s.experts = r.uint_or("n_routed_experts", mk::EXPERTS.uint_range(), 256)?;
    s.top_k = r.uint_or("num_experts_per_tok", mk::TOP_K.uint_range(), 8)?;
    s.moe_ffn_hidden = r.uint_or(
        "moe_intermediate_size",
        mk::MOE_FFN_HIDDEN.uint_range(),
        2048,
    )?;
    s.shared_experts = r.uint_or("n_shared_experts", mk::SHARED_EXPERTS.uint_range(), 1)?;
    s.shared_ffn_hidden = s.moe_ffn_hidden;
    s.dense_layers = r.uint_or("first_k_dense_replace", mk::DENSE_LAYERS.uint_range(), 3)?;
    s.moe_every = r.uint("moe_layer_freq", mk::MOE_EVERY.uint_range())?;
    let rank = |key: &str, range: (u64, u64), default: u64| -> Result<u64, ScenarioError> {
        r.uint_or(key, range, default)?.ok_or_else(|| {
            r.err(
                key,
                "multi-head latent attention needs this size",
                format!(
                    "integers from {} to {}",
                    group_digits(range.0),
                    group_digits(range.1)
                ),
            )
        })
    };
    s.mla = Some(Mla {
        q_lora_rank: r
            .uint_or("q_lora_rank", mlak::Q_LORA_RANK.uint_range(), 1536)?
            .unwrap_or(0),
        kv_lora_rank: rank("kv_lora_rank", mlak::KV_LORA_RANK.uint_range(), 512)?,
        qk_nope_head_dim: rank("qk_nope_head_dim", mlak::QK_NOPE_HEAD_DIM.uint_range(), 128)?,
        qk_rope_head_dim: rank("qk_rope_head_dim", mlak::QK_ROPE_HEAD_DIM.uint_range(), 64)?,
        v_head_dim: rank("v_head_dim", mlak::V_HEAD_DIM.uint_range(), 128)?,
    });
    s.mtp_layers = r.uint("num_nextn_predict_layers", mk::MTP_LAYERS.uint_range())?;
    s.router_groups = r.uint_or("n_group", mk::ROUTER_GROUPS.uint_range(), 8)?;
    s.router_group_top_k = r.uint_or("topk_group", mk::ROUTER_GROUP_TOP_K.uint_range(), 4)?;
    modelled.extend([
        "n_group",
        "topk_group",
        "num_nextn_predict_layers",
        "n_routed_experts",
        "n_shared_experts",
        "moe_intermediate_size",
        "first_k_dense_replace",
        "moe_layer_freq",
        "q_lora_rank",
        "kv_lora_rank",
        "qk_nope_head_dim",
        "qk_rope_head_dim",
        "v_head_dim",
    ]);
    Ok(())
}

/// Qwen2-MoE (`qwen2_moe`) and Qwen3-MoE, as transformers' Qwen2MoeConfig and Qwen3MoeConfig
/// name their keys (huggingface/transformers@008e574391258935f3ecc3035c882e73bbcac419
/// src/transformers/models/qwen2_moe/configuration_qwen2_moe.py and
/// src/transformers/models/qwen3_moe/configuration_qwen3_moe.py); a key the config leaves out
/// takes that class's default.
/// - `num_experts` (0: a dense model), `num_experts_per_tok`, `moe_intermediate_size`.
/// - `decoder_sparse_step` as `moe_every`. transformers puts the experts on the layers with
///   `(i + 1) % step == 0` (modeling_qwen3_moe.py), twin on those with `i % step == 0`: the
///   same for the step of 1 every published Qwen MoE uses, listed as unmodelled otherwise.
/// - Qwen2-MoE: one shared expert `shared_expert_intermediate_size` wide (0: none) and biases
///   on the query, key and value projections (`qkv_bias`, true unless the config says
///   otherwise). The shared expert's sigmoid gate (`hidden x 1` per layer) is listed.
fn qwen_moe(
    r: &Reader<'_>,
    qwen2: bool,
    s: &mut HfShape,
    modelled: &mut Vec<&str>,
) -> Result<(), ScenarioError> {
    let (experts, top_k, width) = if qwen2 { (60, 4, 1408) } else { (128, 8, 768) };
    let any = (0, mk::EXPERTS.uint_range().1);
    s.experts = r.uint_or("num_experts", any, experts)?.filter(|&e| e > 0);
    s.top_k = r.uint_or("num_experts_per_tok", mk::TOP_K.uint_range(), top_k)?;
    s.moe_ffn_hidden = r.uint_or(
        "moe_intermediate_size",
        mk::MOE_FFN_HIDDEN.uint_range(),
        width,
    )?;
    s.moe_every = r.uint_or("decoder_sparse_step", mk::MOE_EVERY.uint_range(), 1)?;
    if let (Some(step @ 2..), Some(_)) = (s.moe_every, s.experts) {
        s.unmodelled.push(format!(
            "decoder_sparse_step = {step} (experts on the layers i with (i + 1) % {step} == 0; \
             twin puts them where i % {step} == 0)"
        ));
    }
    modelled.extend([
        "num_experts",
        "moe_intermediate_size",
        "decoder_sparse_step",
    ]);
    if qwen2 {
        let any = (0, mk::SHARED_EXPERT_FFN_HIDDEN.uint_range().1);
        if let Some(w @ 1..) = r.uint_or("shared_expert_intermediate_size", any, 5632)? {
            s.shared_experts = Some(1);
            s.shared_ffn_hidden = Some(w);
            s.unmodelled.push(
                "model_type = \"qwen2_moe\" (the shared expert's sigmoid gate, a hidden x 1 \
                 linear layer per MoE layer)"
                    .into(),
            );
        }
        modelled.push("shared_expert_intermediate_size");
        s.qkv_bias = r.boolean("qkv_bias")?.unwrap_or(true);
    }
    Ok(())
}

/// GPT-OSS, as transformers' GptOssConfig names its keys
/// (huggingface/transformers@02b8f42b4240dddea1b27c45d2dc95fb2682f841
/// src/transformers/models/gpt_oss/configuration_gpt_oss.py); a key the config leaves out
/// takes that class's default. Every layer is an MoE layer without a dense MLP:
/// `intermediate_size` is the expert's width. `attention_bias` (default true) biases all
/// four attention projections. What GptOssAttention, GptOssTopKRouter and GptOssExperts
/// (huggingface/transformers@00d4b3d2142cb4ced2f51b90614b5d26bc045015
/// src/transformers/models/gpt_oss/modeling_gpt_oss.py) have beyond that is listed as
/// unmodelled: the router's bias, the experts' biases (`2 * f + h` per expert) and their
/// clamped SwiGLU. Its attention sinks (one learned logit per head, `self.sinks`) are
/// `attention_sinks`; its alternating sliding-window layers are read by [`sliding_window`].
/// Nemotron-H and Nemotron 3 (`NemotronHForCausalLM`): the hybrid pattern
/// (`hybrid_override_pattern`, Megatron-Core's symbols), the Mamba-2 mixer
/// (`mamba_num_heads`, `mamba_head_dim`, `ssm_state_size`, `n_groups`, `conv_kernel`,
/// `chunk_size`), squared-ReLU MLPs of two matrices, and on MoE models `n_routed_experts`
/// experts of `moe_intermediate_size` with `n_shared_experts` (1 where only its width
/// `moe_shared_expert_intermediate_size` is given) shared ones. Megatron-Bridge maps the same
/// keys (NVIDIA-NeMo/Megatron-Bridge@21d102f5e:
/// src/megatron/bridge/models/nemotronh/nemotron_h_bridge.py `CONFIG_MAPPING`).
fn nemotron_h(
    r: &Reader<'_>,
    s: &mut HfShape,
    modelled: &mut Vec<&'static str>,
) -> Result<(), ScenarioError> {
    s.gated_mlp = false;
    s.hybrid_pattern = r.string("hybrid_override_pattern")?;
    let uint = |key: &str, range: (u64, u64)| r.uint(key, range);
    let wide = (1, 1 << 16);
    if let (Some(heads), Some(head_dim), Some(state), Some(groups)) = (
        uint("mamba_num_heads", wide)?,
        uint("mamba_head_dim", wide)?,
        uint("ssm_state_size", wide)?,
        uint("n_groups", wide)?,
    ) {
        s.mamba = Some(Mamba {
            heads,
            head_dim,
            state,
            groups,
            conv_kernel: r.uint_or("conv_kernel", (1, 64), 4)?.unwrap_or(4),
            chunk: r.uint_or("chunk_size", wide, 128)?.unwrap_or(128),
        });
    }
    if let Some(experts) = uint("n_routed_experts", mk::EXPERTS.uint_range())? {
        s.experts = Some(experts);
        s.moe_ffn_hidden = uint("moe_intermediate_size", mk::MOE_FFN_HIDDEN.uint_range())?;
        let shared_width = uint(
            "moe_shared_expert_intermediate_size",
            mk::SHARED_EXPERT_FFN_HIDDEN.uint_range(),
        )?;
        s.shared_ffn_hidden = shared_width;
        s.shared_experts = match uint("n_shared_experts", mk::SHARED_EXPERTS.uint_range())? {
            Some(n) => Some(n),
            None => shared_width.map(|_| 1),
        };
    }
    modelled.extend([
        "n_routed_experts",
        "n_shared_experts",
        "moe_intermediate_size",
    ]);
    Ok(())
}

fn gpt_oss(r: &Reader<'_>, s: &mut HfShape) -> Result<(), ScenarioError> {
    s.attention_sinks = true;
    s.experts = r.uint_or("num_local_experts", mk::EXPERTS.uint_range(), 128)?;
    s.top_k = r.uint_or("num_experts_per_tok", mk::TOP_K.uint_range(), 4)?;
    s.ffn_hidden = r.uint_or("intermediate_size", mk::FFN_HIDDEN.uint_range(), 2880)?;
    s.moe_ffn_hidden = s.ffn_hidden;
    if !r.has("attention_bias") {
        s.qkv_bias = true;
        s.unmodelled.push(
            "attention_bias (absent: GPT-OSS's default true) (the output projection's bias; \
             twin counts the query, key and value biases)"
                .into(),
        );
    }
    s.unmodelled.push(
        "model_type = \"gpt_oss\" (the router's and the experts' biases, the experts' \
         clamped SwiGLU)"
            .into(),
    );
    Ok(())
}

struct Reader<'a> {
    ctx: &'a Ctx,
    text: &'a str,
    index: &'a LineIndex<'a>,
    map: &'a serde_json::Map<String, Value>,
}

impl Reader<'_> {
    fn has(&self, key: &str) -> bool {
        self.map.get(key).is_some_and(|v| !v.is_null())
    }

    /// Where `"key":` is written (first occurrence), for error messages.
    fn loc(&self, key: &str) -> Loc {
        let quoted = format!("\"{key}\"");
        let offset = self.text.match_indices(&quoted).map(|(i, _)| i).find(|&i| {
            self.text
                .get(i + quoted.len()..)
                .is_some_and(|rest| rest.trim_start().starts_with(':'))
        });
        self.index.loc(offset.unwrap_or(0))
    }

    fn err(&self, key: &str, message: &str, allowed: String) -> ScenarioError {
        let value = self
            .map
            .get(key)
            .map(|v| super::error::shorten(&v.to_string()))
            .unwrap_or_default();
        self.ctx.error(
            ErrorKind::HfConfig,
            Some(&self.loc(key)),
            key,
            &value,
            message,
            allowed,
        )
    }

    fn uint(&self, key: &str, range: (u64, u64)) -> Result<Option<u64>, ScenarioError> {
        let allowed = format!(
            "integers from {} to {}",
            group_digits(range.0),
            group_digits(range.1)
        );
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(v) if (range.0..=range.1).contains(&v) => Ok(Some(v)),
                _ => Err(self.err(key, "out of range", allowed)),
            },
            Some(_) => Err(self.err(key, "expected an integer", allowed)),
        }
    }

    /// As [`Reader::uint`], but a key the config leaves out takes `default` (the default of
    /// the family's transformers config class); a null stays `None`.
    fn uint_or(
        &self,
        key: &str,
        range: (u64, u64),
        default: u64,
    ) -> Result<Option<u64>, ScenarioError> {
        match self.map.contains_key(key) {
            true => self.uint(key, range),
            false => Ok(Some(default)),
        }
    }

    fn boolean(&self, key: &str) -> Result<Option<bool>, ScenarioError> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(self.err(key, "expected true or false", "true, false".into())),
        }
    }

    fn string(&self, key: &str) -> Result<Option<String>, ScenarioError> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(self.err(key, "expected a string", "a string".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_keys() {
        let text = r#"{"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "vocab_size": 32000, "max_position_embeddings": 4096, "hidden_act": "silu"}"#;
        let s = parse("c.json", text, false).unwrap();
        assert_eq!(s.hidden, Some(4096));
        assert_eq!(s.kv_heads, Some(8));
        assert_eq!(s.ffn_hidden, Some(11008));
        assert!(s.gated_mlp);
        assert!(!s.tied_embeddings);
        assert_eq!(s.experts, None);
        assert_eq!(s.head_dim, None);
    }

    /// The shape of Qwen3-4B's config.json (huggingface.co/Qwen/Qwen3-4B): 32 heads of 128
    /// over a hidden size of 2560, so head_dim is not hidden / heads.
    #[test]
    fn explicit_head_dim_is_read_not_listed_as_unmodelled() {
        let text = r#"{"model_type": "llama", "hidden_size": 2560, "intermediate_size": 9728,
            "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
            "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960,
            "hidden_act": "silu", "tie_word_embeddings": true}"#;
        let s = parse("c.json", text, false).unwrap();
        assert_eq!(s.head_dim, Some(128));
        assert!(s.unmodelled.is_empty(), "{:?}", s.unmodelled);
    }

    /// The first word of each unmodelled note: the key it names.
    fn listed(s: &HfShape) -> Vec<&str> {
        s.unmodelled
            .iter()
            .map(|n| n.split(' ').next().unwrap_or(""))
            .collect()
    }

    /// DeepSeek-V3's keys (huggingface.co/deepseek-ai/DeepSeek-V3 config.json) fill the MoE
    /// and MLA fields; what twin does not model stays listed.
    #[test]
    fn deepseek_v3_keys() {
        let text = r#"{"model_type": "deepseek_v3", "hidden_size": 7168,
            "intermediate_size": 18432, "num_hidden_layers": 61, "num_attention_heads": 128,
            "n_routed_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
            "n_shared_experts": 1, "first_k_dense_replace": 3, "moe_layer_freq": 1,
            "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64, "v_head_dim": 128, "num_nextn_predict_layers": 1,
            "n_group": 8, "topk_group": 4, "topk_method": "noaux_tc",
            "routed_scaling_factor": 2.5, "attention_bias": false, "vocab_size": 129280}"#;
        let s = parse("c.json", text, false).unwrap();
        assert_eq!(
            (s.experts, s.top_k, s.moe_every),
            (Some(256), Some(8), Some(1))
        );
        assert_eq!((s.moe_ffn_hidden, s.ffn_hidden), (Some(2048), Some(18432)));
        assert_eq!(
            (s.shared_experts, s.shared_ffn_hidden),
            (Some(1), Some(2048))
        );
        assert_eq!(s.dense_layers, Some(3));
        assert_eq!(
            s.mla,
            Some(Mla {
                q_lora_rank: 1536,
                kv_lora_rank: 512,
                qk_nope_head_dim: 128,
                qk_rope_head_dim: 64,
                v_head_dim: 128
            })
        );
        assert!(s.gated_mlp && !s.qkv_bias);
        assert_eq!(s.mtp_layers, Some(1));
        assert_eq!((s.router_groups, s.router_group_top_k), (Some(8), Some(4)));
        assert_eq!(listed(&s), ["topk_method", "routed_scaling_factor"]);
    }

    /// A DeepSeek-V3 key the config leaves out takes DeepseekV3Config's default; a null
    /// q_lora_rank projects queries directly; a null KV rank is an error at the key.
    #[test]
    fn deepseek_v3_defaults_and_nulls() {
        let text = r#"{"model_type": "deepseek_v3", "hidden_size": 1024}"#;
        let s = parse("c.json", text, false).unwrap();
        assert_eq!(
            (s.experts, s.top_k, s.moe_ffn_hidden),
            (Some(256), Some(8), Some(2048))
        );
        assert_eq!(
            (s.shared_experts, s.dense_layers, s.moe_every),
            (Some(1), Some(3), None)
        );
        assert_eq!((s.router_groups, s.router_group_top_k), (Some(8), Some(4)));
        assert_eq!(
            s.mla.map(|m| (m.q_lora_rank, m.kv_lora_rank)),
            Some((1536, 512))
        );

        let text = r#"{"model_type": "deepseek_v3", "q_lora_rank": null, "n_routed_experts": 64}"#;
        let s = parse("c.json", text, false).unwrap();
        assert_eq!(s.mla.map(|m| m.q_lora_rank), Some(0));
        assert_eq!(s.experts, Some(64));

        let text = "{\"model_type\": \"deepseek_v3\",\n \"kv_lora_rank\": null}";
        let e = parse("c.json", text, false).unwrap_err();
        assert_eq!((e.key.as_str(), e.line), ("kv_lora_rank", Some(2)));
        assert!(e.to_string().contains("latent attention"), "{e}");
    }

    /// Qwen3-MoE: num_experts, moe_intermediate_size and decoder_sparse_step; a step other
    /// than 1 places the experts differently and is listed, as is a non-empty
    /// mlp_only_layers; an empty one and a switched-off sliding window are not.
    #[test]
    fn qwen3_moe_keys() {
        let text = r#"{"model_type": "qwen3_moe", "hidden_size": 2048, "head_dim": 128,
            "intermediate_size": 6144, "num_experts": 128, "num_experts_per_tok": 8,
            "moe_intermediate_size": 768, "decoder_sparse_step": 1, "mlp_only_layers": [],
            "sliding_window": null, "use_sliding_window": false, "attention_bias": false}"#;
        let s = parse("c.json", text, false).unwrap();
        assert_eq!(
            (s.experts, s.top_k, s.moe_every),
            (Some(128), Some(8), Some(1))
        );
        assert_eq!((s.moe_ffn_hidden, s.ffn_hidden), (Some(768), Some(6144)));
        assert_eq!(
            (s.shared_experts, s.dense_layers, s.mla),
            (None, None, None)
        );
        assert!(s.gated_mlp && !s.qkv_bias);
        assert!(s.unmodelled.is_empty(), "{:?}", s.unmodelled);

        let text = r#"{"model_type": "qwen3_moe", "num_experts": 8, "decoder_sparse_step": 2,
            "mlp_only_layers": [0, 5], "sliding_window": 4096}"#;
        let s = parse("c.json", text, false).unwrap();
        assert_eq!(s.moe_every, Some(2));
        assert_eq!(listed(&s), ["decoder_sparse_step", "mlp_only_layers"]);
        assert!(
            s.unmodelled[0].contains("(i + 1) % 2 == 0"),
            "{:?}",
            s.unmodelled
        );

        // num_experts = 0 is a dense Qwen3-MoE.
        let s = parse(
            "c.json",
            r#"{"model_type": "qwen3_moe", "num_experts": 0}"#,
            false,
        )
        .unwrap();
        assert_eq!((s.experts, s.top_k), (None, None));
    }

    /// Qwen2-MoE (huggingface.co/Qwen/Qwen1.5-MoE-A2.7B config.json): one shared expert of
    /// shared_expert_intermediate_size, biased Q/K/V unless the config says otherwise.
    #[test]
    fn qwen2_moe_keys() {
        let text = r#"{"model_type": "qwen2_moe", "hidden_size": 2048, "num_experts": 60,
            "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
            "shared_expert_intermediate_size": 5632, "intermediate_size": 5632,
            "use_sliding_window": false, "sliding_window": 32768}"#;
        let s = parse("c.json", text, false).unwrap();
        assert_eq!(
            (s.experts, s.top_k, s.moe_ffn_hidden),
            (Some(60), Some(4), Some(1408))
        );
        assert_eq!(
            (s.shared_experts, s.shared_ffn_hidden),
            (Some(1), Some(5632))
        );
        assert!(s.qkv_bias && s.gated_mlp);
        assert_eq!(listed(&s), ["model_type"]);
        assert!(s.unmodelled[0].contains("gate"), "{:?}", s.unmodelled);

        let text = r#"{"model_type": "qwen2_moe", "shared_expert_intermediate_size": 0,
            "qkv_bias": false}"#;
        let s = parse("c.json", text, false).unwrap();
        assert_eq!((s.shared_experts, s.shared_ffn_hidden), (None, None));
        assert!(!s.qkv_bias);
        assert!(s.unmodelled.is_empty(), "{:?}", s.unmodelled);
    }

    /// GPT-OSS (huggingface.co/openai/gpt-oss-120b config.json): intermediate_size is the
    /// expert's width, attention_bias the Q/K/V biases, the windows on the even layers and
    /// the sinks are modelled; the expert biases and the output projection's are listed.
    #[test]
    fn gpt_oss_keys() {
        let text = r#"{"model_type": "gpt_oss", "hidden_size": 2880, "head_dim": 64,
            "intermediate_size": 2880, "num_local_experts": 128, "num_experts_per_tok": 4,
            "attention_bias": true, "sliding_window": 128,
            "layer_types": ["sliding_attention", "full_attention"], "swiglu_limit": 7.0}"#;
        let s = parse("c.json", text, false).unwrap();
        assert_eq!((s.experts, s.top_k), (Some(128), Some(4)));
        assert_eq!((s.moe_ffn_hidden, s.ffn_hidden), (Some(2880), Some(2880)));
        assert_eq!(
            (s.shared_experts, s.dense_layers, s.moe_every),
            (None, None, None)
        );
        assert!(s.qkv_bias && s.gated_mlp && s.attention_sinks);
        assert_eq!(
            (s.sliding_window, s.sliding_window_every),
            (Some(128), Some(2))
        );
        assert_eq!(listed(&s), ["model_type", "attention_bias"]);

        // Left out, attention_bias takes GptOssConfig's default, and says so; layer_types of
        // full attention only leaves no window.
        let text = r#"{"model_type": "gpt_oss", "layer_types": ["full_attention"]}"#;
        let s = parse("c.json", text, false).unwrap();
        assert!(s.qkv_bias);
        assert_eq!((s.experts, s.moe_ffn_hidden), (Some(128), Some(2880)));
        assert_eq!(s.sliding_window, None);
        assert_eq!(listed(&s), ["attention_bias", "model_type"]);

        // Without layer_types and sliding_window: GptOssConfig's 128 on the even layers.
        let s = parse("c.json", r#"{"model_type": "gpt_oss"}"#, false).unwrap();
        assert_eq!(
            (s.sliding_window, s.sliding_window_every),
            (Some(128), Some(2))
        );

        // Every third layer windowed is sliding_window_every = 3; a pattern no period
        // describes is listed and leaves every layer full.
        let text = r#"{"model_type": "gpt_oss", "layer_types": ["sliding_attention",
            "full_attention", "full_attention", "sliding_attention"]}"#;
        let s = parse("c.json", text, false).unwrap();
        assert_eq!(s.sliding_window_every, Some(3));
        let text = r#"{"model_type": "gpt_oss", "layer_types": ["full_attention",
            "sliding_attention"]}"#;
        let s = parse("c.json", text, false).unwrap();
        assert_eq!(s.sliding_window, None);
        assert!(listed(&s).contains(&"layer_types"), "{:?}", s.unmodelled);
    }

    /// attention_bias on any family makes qkv_bias and lists the output projection's bias.
    #[test]
    fn attention_bias_is_qkv_bias() {
        let text = r#"{"model_type": "llama", "hidden_size": 4096, "attention_bias": true}"#;
        let s = parse("c.json", text, false).unwrap();
        assert!(s.qkv_bias);
        assert_eq!(listed(&s), ["attention_bias"]);
        assert!(
            s.unmodelled[0].contains("output projection"),
            "{:?}",
            s.unmodelled
        );
        let s = parse("c.json", r#"{"model_type": "qwen2"}"#, false).unwrap();
        assert!(s.qkv_bias && s.unmodelled.is_empty());
    }

    /// Qwen3's configs write a sliding_window that applies only with use_sliding_window =
    /// true; Mistral's applies without that key.
    #[test]
    fn qwen_sliding_window_needs_use_sliding_window() {
        let s = parse(
            "c.json",
            r#"{"model_type": "qwen3", "sliding_window": 4096}"#,
            false,
        )
        .unwrap();
        assert!(s.unmodelled.is_empty(), "{:?}", s.unmodelled);
        // With it, the layers from max_window_layers (Qwen2Config's default 28) on are
        // windowed: all of them at 0, which twin models; otherwise listed.
        let text = r#"{"model_type": "qwen3", "sliding_window": 4096, "use_sliding_window": true}"#;
        let s = parse("c.json", text, false).unwrap();
        assert_eq!(listed(&s), ["max_window_layers"]);
        assert_eq!(s.sliding_window, None);
        let text = r#"{"model_type": "qwen3", "sliding_window": 4096, "use_sliding_window": true,
            "max_window_layers": 0}"#;
        let s = parse("c.json", text, false).unwrap();
        assert!(s.unmodelled.is_empty(), "{:?}", s.unmodelled);
        assert_eq!(
            (s.sliding_window, s.sliding_window_every),
            (Some(4096), Some(1))
        );
        let s = parse(
            "c.json",
            r#"{"model_type": "mistral", "sliding_window": 4096}"#,
            false,
        )
        .unwrap();
        assert!(s.unmodelled.is_empty(), "{:?}", s.unmodelled);
        assert_eq!(
            (s.sliding_window, s.sliding_window_every),
            (Some(4096), Some(1))
        );
    }

    /// Under a model_type the import does not know (here forced), the MoE and MLA keys are
    /// not read: the model stays dense and each key is listed.
    #[test]
    fn unknown_family_keys_still_warn() {
        let text = r#"{"model_type": "deepseek_v2", "hidden_size": 2048,
            "n_routed_experts": 64, "num_experts_per_tok": 6, "moe_intermediate_size": 1408,
            "kv_lora_rank": 512, "num_experts": 16, "decoder_sparse_step": 2}"#;
        assert!(parse("c.json", text, false).is_err());
        let s = parse("c.json", text, true).unwrap();
        assert_eq!((s.experts, s.top_k, s.mla), (None, None, None));
        assert_eq!(
            listed(&s),
            [
                "n_routed_experts",
                "moe_intermediate_size",
                "num_experts",
                "decoder_sparse_step",
                "kv_lora_rank",
                "num_experts_per_tok"
            ]
        );
    }

    #[test]
    fn gpt2_keys_and_null_inner() {
        let text = r#"{"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
            "n_positions": 1024, "n_inner": null, "vocab_size": 50257,
            "activation_function": "gelu_new"}"#;
        let s = parse("c.json", text, false).unwrap();
        assert_eq!(
            (s.hidden, s.layers, s.heads),
            (Some(768), Some(12), Some(12))
        );
        assert_eq!(s.ffn_hidden, None);
        assert!(s.tied_embeddings);
        assert!(!s.gated_mlp);
    }

    #[test]
    fn bad_value_is_located_in_the_json() {
        let text = "{\n  \"hidden_size\": \"big\"\n}";
        let e = parse("c.json", text, false).unwrap_err();
        assert_eq!(e.kind, ErrorKind::HfConfig);
        assert_eq!((e.line, e.column), (Some(2), Some(3)));
        assert_eq!(e.key, "hidden_size");
        assert_eq!(e.value, "\"big\"");
    }

    #[test]
    fn json_syntax_error_has_a_position() {
        let e = parse("c.json", "{\n \"a\": [1,\n}", false).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Syntax);
        assert_eq!(e.line, Some(3));
    }
}
