//! Model shapes from a Hugging Face `config.json`, because that is where most users' model
//! shapes live. Understands Llama-style keys (Llama, Mistral, Mixtral, GPT-NeoX, Qwen, ...)
//! and GPT-2-style keys (`n_embd`, `n_layer`, ...). Errors inside the JSON name the JSON file,
//! the line and column of the key, and the key.
//!
//! What the import cannot model is never dropped silently: a `model_type` outside
//! [`MODEL_TYPES`] is refused unless the scenario sets `model.hf_force = true` (its shape is
//! then read as the dense Llama- or GPT-2-style keys say), and every key in [`UNMODELLED`]
//! that the config sets is listed in [`HfShape::unmodelled`], which the CLI prints as a
//! warning.

use super::error::{Ctx, ErrorKind, LineIndex, Loc, ScenarioError};
use super::keys::model as mk;
use super::read::group_digits;
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
    pub qkv_bias: bool,
    pub mla: Option<super::types::Mla>,
    /// Keys the config sets that change the model but that twin does not model, each as
    /// "key = value (what it means)".
    pub unmodelled: Vec<String>,
}

/// The `model_type`s whose shape the keys below describe completely, apart from the keys of
/// [`UNMODELLED`].
pub const MODEL_TYPES: &[&str] = &["llama", "mistral", "mixtral", "qwen2", "gpt_neox", "gpt2"];

/// Keys of Hugging Face configs that change the model's compute or memory but that the
/// import does not model, with what each means. Keys set to null, false or 0 are not listed.
pub const UNMODELLED: &[(&str, &str)] = &[
    (
        "sliding_window",
        "sliding-window attention: twin attends over the whole sequence",
    ),
    (
        "use_sliding_window",
        "sliding-window attention: twin attends over the whole sequence",
    ),
    ("attention_bias", "biases on the attention projections"),
    ("mlp_bias", "biases on the MLP projections"),
    (
        "n_routed_experts",
        "routed experts (DeepSeek MoE): twin models a dense model",
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
        "routed experts (Qwen MoE): twin models a dense model",
    ),
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
                "llama" | "mistral" | "mixtral" | "qwen2"
            ));
    shape.experts = reader.uint("num_local_experts", mk::EXPERTS.uint_range())?;
    shape.top_k = reader.uint("num_experts_per_tok", mk::EXPERTS.uint_range())?;
    // Qwen2 writes a sliding_window that applies only with use_sliding_window = true.
    let window_off = map.get("use_sliding_window") == Some(&Value::Bool(false));
    for (key, what) in UNMODELLED {
        if *key == "sliding_window" && window_off {
            continue;
        }
        match map.get(*key) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => {}
            Some(Value::Number(n)) if n.as_f64() == Some(0.0) => {}
            Some(v) => shape.unmodelled.push(format!(
                "{key} = {} ({what})",
                super::error::shorten(&v.to_string())
            )),
        }
    }
    // Qwen2 puts biases on the query, key and value projections without a key saying so.
    if model_type == "qwen2" {
        shape
            .unmodelled
            .push("model_type = \"qwen2\" (biases on the query, key and value projections)".into());
    }
    // DeepSeek's MoE keys are not Mixtral's: top_k without num_local_experts is unmodelled.
    if shape.experts.is_none() {
        if let Some(k) = shape.top_k.take() {
            shape.unmodelled.push(format!(
                "num_experts_per_tok = {k} (experts per token, without num_local_experts)"
            ));
        }
    }
    Ok(shape)
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
