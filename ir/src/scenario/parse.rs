//! Resolution of the located tree into a [`Scenario`], one section at a time: type and range
//! checks of every key, unknown keys, presets and `hf_config` expanded under explicit keys,
//! defaults filled in. Rules that relate several keys live in `validate.rs`.

use super::checks::Checks;
use super::cluster::cluster;
use super::error::{Ctx, ErrorKind, Loc};
use super::framework;
use super::hf;
use super::keys::{
    mamba as mambak, mla as mlak, model as mk, parallel as pk, root as rk, run as runk,
    training as tk, Absent, Key, Kind,
};
use super::layout::LayoutStage;
use super::presets;
use super::read::{opt, Result, Section};
use super::source::{Node, Table};
use super::types::*;
use std::path::Path;

/// A scenario whose cross-field rules are not checked yet, plus what validation needs to know
/// about which values were written and which were defaulted.
pub(crate) struct Resolved {
    pub scenario: Scenario,
    /// `parallel.dp` as written; `None` means derive it from the GPU count.
    pub dp: Option<u32>,
    /// `parallel.zero` was written (it must then agree with `fsdp`).
    pub zero_explicit: bool,
    /// `training.grad_bucket_bytes` was written; otherwise the default depends on dp.
    pub bucket_explicit: bool,
    /// The `[checks]` section (returned beside the scenario, see `checks.rs`).
    pub checks: Checks,
    /// The `[faults]` section, when present (see `faults.rs`).
    pub faults: Option<super::FaultConfig>,
    /// The `[variability]` section, when present (see `variability.rs`).
    pub variability: Option<super::VariabilityConfig>,
    /// Keys of the `hf_config` file that twin does not model (see `hf.rs`).
    pub hf_unmodelled: Vec<String>,
}

fn u32_of(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

pub(crate) fn resolve(ctx: &Ctx, root: &Table, base_dir: &Path) -> Result<Resolved> {
    let top = Loc::File { line: 1, column: 1 };
    let root = Section::root(ctx, root, &top);
    root.check_unknown()?;
    let name = match root.string(&rk::NAME)? {
        Some(f) => f.value,
        None => default_name(&ctx.origin),
    };
    let (model, hf_unmodelled) = model(root.section("model", "model")?, base_dir)?;
    let cluster = cluster(root.section("cluster", "cluster")?)?;
    let (mut parallel, dp, zero_explicit, cp_algorithm_explicit, layout) =
        parallel(root.section("parallel", "parallel")?)?;
    if let Some(stages) = layout {
        super::layout::check_layout(&stages, model.mtp_layers).map_err(|why| {
            let section = root.section("parallel", "parallel");
            match section {
                Ok(p) => p.err(
                    ErrorKind::CrossField,
                    pk::PIPELINE_LAYOUT.name,
                    why,
                    "E opening the first stage, L closing the last, model.mtp_layers m's in the last",
                ),
                Err(e) => e,
            }
        })?;
    }
    let (mut training, bucket_explicit, overlap_p2p_comm) =
        training(root.section("training", "training")?, base_dir)?;
    if !cp_algorithm_explicit {
        parallel.cp_algorithm = training.framework.cp_algorithm;
    }
    training.overlap_p2p_comm = overlap_p2p_comm.unwrap_or(
        training.framework.overlaps.p2p_overlap
            && parallel.schedule == PipelineSchedule::Interleaved1F1B,
    );
    let memory = memory(root.section("memory", "memory")?, &training.framework)?;
    let run = run(root.section("run", "run")?)?;
    let checks = super::checks::checks(root.section("checks", "checks")?)?;
    let faults = super::faults::faults(root.section("faults", "faults")?)?;
    let variability =
        super::variability::variability(root.section("variability", "variability")?, base_dir)?;
    Ok(Resolved {
        scenario: Scenario {
            name,
            model,
            cluster,
            parallel,
            training,
            memory,
            run,
        },
        dp,
        zero_explicit,
        bucket_explicit,
        checks,
        faults,
        variability,
        hf_unmodelled,
    })
}

/// The file stem of the origin (`scenarios/512xA100.toml` -> `512xA100`).
fn default_name(origin: &str) -> String {
    Path::new(origin)
        .file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| !s.is_empty())
        .unwrap_or("scenario")
        .to_string()
}

fn model(m: Section<'_>, base_dir: &Path) -> Result<(Model, Vec<String>)> {
    m.check_unknown()?;
    let preset = m.string(&mk::PRESET)?;
    let hf_config = m.string(&mk::HF_CONFIG)?;
    let base: hf::HfShape = match (&preset, &hf_config) {
        (Some(_), Some(_)) => {
            return Err(m.err(
                ErrorKind::CrossField,
                "hf_config",
                "model.preset and model.hf_config both describe the shape; give one",
                "either model.preset or model.hf_config",
            ))
        }
        (Some(p), None) => match presets::model(&p.value) {
            Some(s) => hf::HfShape {
                layers: Some(s.layers),
                hidden: Some(s.hidden),
                heads: Some(s.heads),
                kv_heads: Some(s.kv_heads),
                head_dim: None,
                ffn_hidden: Some(s.ffn_hidden),
                seq_len: Some(s.seq_len),
                vocab: Some(s.vocab),
                gated_mlp: s.gated_mlp,
                tied_embeddings: s.tied_embeddings,
                experts: s.moe.map(|x| x.0),
                top_k: s.moe.map(|x| x.1),
                ..hf::HfShape::default()
            },
            None => {
                return Err(m.unknown_name(
                    "preset",
                    "model preset",
                    &p.value,
                    presets::MODEL_NAMES.iter().copied(),
                ))
            }
        },
        (None, Some(h)) => hf::load(
            m.ctx,
            &h.loc,
            &m.key_path("hf_config"),
            &h.raw,
            &base_dir.join(&h.value),
            m.boolean_or_default(&mk::HF_FORCE)?,
        )?,
        (None, None) => hf::HfShape::default(),
    };
    let hint = "or give model.preset or model.hf_config";
    let need = |key: &Key, base: Option<u64>| -> Result<u64> {
        match opt(m.uint(key)?).or(base) {
            Some(v) => Ok(v),
            None => Err(m.missing(key.name, hint)),
        }
    };
    let layers = need(&mk::LAYERS, base.layers)?;
    let hidden = need(&mk::HIDDEN, base.hidden)?;
    let heads = need(&mk::HEADS, base.heads)?;
    let kv_heads = opt(m.uint(&mk::KV_HEADS)?)
        .or(base.kv_heads)
        .unwrap_or(heads);
    let head_dim = opt(m.uint(&mk::HEAD_DIM)?).or(base.head_dim);
    // hidden <= 2^20, so 4*hidden fits the ffn range.
    let ffn_hidden = opt(m.uint(&mk::FFN_HIDDEN)?)
        .or(base.ffn_hidden)
        .unwrap_or(4 * hidden);
    let seq_len = need(&mk::SEQ_LEN, base.seq_len)?;
    let vocab = need(&mk::VOCAB, base.vocab)?;
    let gated_mlp = m.boolean(&mk::GATED_MLP)?.unwrap_or(base.gated_mlp);
    let tied_embeddings = m
        .boolean(&mk::TIED_EMBEDDINGS)?
        .unwrap_or(base.tied_embeddings);
    let experts = opt(m.uint(&mk::EXPERTS)?).or(base.experts);
    let top_k = opt(m.uint(&mk::TOP_K)?).or(base.top_k);
    let moe_every = opt(m.uint(&mk::MOE_EVERY)?).or(base.moe_every).unwrap_or(1);
    let moe = match experts {
        Some(experts) => {
            let moe_ffn_hidden = opt(m.uint(&mk::MOE_FFN_HIDDEN)?)
                .or(base.moe_ffn_hidden)
                .unwrap_or(ffn_hidden);
            let shared_experts = opt(m.uint(&mk::SHARED_EXPERTS)?)
                .or(base.shared_experts)
                .unwrap_or(0);
            if shared_experts == 0 && m.has(mk::SHARED_EXPERT_FFN_HIDDEN.name) {
                return Err(m.err(
                    ErrorKind::CrossField,
                    mk::SHARED_EXPERT_FFN_HIDDEN.name,
                    "only meaningful with shared experts",
                    "set model.shared_experts too, or remove this key",
                ));
            }
            let groups = opt(m.uint(&mk::ROUTER_GROUPS)?)
                .or(base.router_groups)
                .unwrap_or(1);
            let group_top_k = opt(m.uint(&mk::ROUTER_GROUP_TOP_K)?)
                .or(base.router_group_top_k)
                .unwrap_or(groups);
            let top = top_k.unwrap_or(experts.min(2));
            if !experts.is_multiple_of(groups) {
                return Err(m.err(
                    ErrorKind::CrossField,
                    mk::ROUTER_GROUPS.name,
                    format!("{groups} groups do not divide the {experts} experts"),
                    "a divisor of model.experts",
                ));
            }
            let grouped = groups > 1 || m.has(mk::ROUTER_GROUP_TOP_K.name);
            if grouped && (group_top_k > groups || group_top_k * (experts / groups) < top) {
                return Err(m.err(
                    ErrorKind::CrossField,
                    mk::ROUTER_GROUP_TOP_K.name,
                    format!(
                        "{group_top_k} of {groups} groups of {} experts cannot give a token its {top}",
                        experts / groups
                    ),
                    "at most model.router_groups, and groups holding at least model.top_k experts",
                ));
            }
            Some(Moe {
                router_groups: (u32_of(groups), u32_of(group_top_k)),
                experts: u32_of(experts),
                top_k: u32_of(top),
                moe_every: u32_of(moe_every),
                ffn_hidden: moe_ffn_hidden,
                shared_experts: u32_of(shared_experts),
                shared_ffn_hidden: opt(m.uint(&mk::SHARED_EXPERT_FFN_HIDDEN)?)
                    .or(base.shared_ffn_hidden)
                    .unwrap_or(moe_ffn_hidden),
                dense_layers: u32_of(
                    opt(m.uint(&mk::DENSE_LAYERS)?)
                        .or(base.dense_layers)
                        .unwrap_or(0),
                ),
                dense_ffn_hidden: opt(m.uint(&mk::DENSE_FFN_HIDDEN)?).unwrap_or(ffn_hidden),
            })
        }
        None => {
            for key in [
                mk::TOP_K.name,
                mk::MOE_EVERY.name,
                mk::MOE_FFN_HIDDEN.name,
                mk::SHARED_EXPERTS.name,
                mk::SHARED_EXPERT_FFN_HIDDEN.name,
                mk::DENSE_LAYERS.name,
                mk::DENSE_FFN_HIDDEN.name,
                mk::ROUTER_GROUPS.name,
                mk::ROUTER_GROUP_TOP_K.name,
            ] {
                if m.has(key) {
                    return Err(m.err(
                        ErrorKind::CrossField,
                        key,
                        "only meaningful for a mixture-of-experts model",
                        "set model.experts too, or remove this key",
                    ));
                }
            }
            None
        }
    };
    let name = match m.string(&mk::NAME)? {
        Some(n) => n.value,
        None => preset
            .map(|p| p.value)
            .or(hf_config.map(|h| h.value))
            .unwrap_or_else(|| "custom".to_string()),
    };
    let qkv_bias = m.boolean(&mk::QKV_BIAS)?.unwrap_or(base.qkv_bias);
    let window_every = opt(m.uint(&mk::SLIDING_WINDOW_EVERY)?).or(base.sliding_window_every);
    let sliding_window = match opt(m.uint(&mk::SLIDING_WINDOW)?).or(base.sliding_window) {
        Some(tokens) => Some(SlidingWindow {
            tokens,
            every: u32_of(window_every.unwrap_or(1)),
        }),
        None if m.has(mk::SLIDING_WINDOW_EVERY.name) => {
            return Err(m.err(
                ErrorKind::CrossField,
                mk::SLIDING_WINDOW_EVERY.name,
                "only meaningful with a sliding window",
                "set model.sliding_window too, or remove this key",
            ))
        }
        None => None,
    };
    let attention_sinks = m
        .boolean(&mk::ATTENTION_SINKS)?
        .unwrap_or(base.attention_sinks);
    let mla = match m.has(mk::MLA.name) {
        true => Some(mla(m.section("mla", "model.mla")?)?),
        false => base.mla,
    };
    let hybrid = hybrid(m, layers, moe.is_some(), (base.hybrid_pattern, base.mamba))?;
    let model = Model {
        name,
        layers: u32_of(layers),
        hidden,
        heads: u32_of(heads),
        kv_heads: u32_of(kv_heads),
        head_dim,
        ffn_hidden,
        seq_len,
        vocab,
        gated_mlp,
        tied_embeddings,
        qkv_bias,
        mla,
        mtp_layers: u32_of(
            opt(m.uint(&mk::MTP_LAYERS)?)
                .or(base.mtp_layers)
                .unwrap_or(0),
        ),
        sliding_window,
        attention_sinks,
        moe,
        hybrid,
    };
    Ok((model, base.unmodelled))
}

/// `hybrid_pattern` and `[model.mamba]` (each from the file, else from `hf_config`): a symbol
/// per layer, a Mamba mixer exactly when some layer is one, `E` layers exactly when the model
/// has experts, and none of the MoE placement keys the pattern replaces.
fn hybrid(
    m: Section<'_>,
    layers: u64,
    experts: bool,
    (base_pattern, base_mamba): (Option<String>, Option<Mamba>),
) -> Result<Option<Hybrid>> {
    let pattern = match m.string(&mk::HYBRID_PATTERN)? {
        Some(p) => Some(p.value),
        None => base_pattern,
    };
    let Some(pattern) = pattern else {
        if m.has(mk::MAMBA.name) {
            return Err(m.err(
                ErrorKind::CrossField,
                mk::MAMBA.name,
                "only meaningful for a hybrid model",
                "set model.hybrid_pattern too, or remove [model.mamba]",
            ));
        }
        return Ok(None);
    };
    let key = mk::HYBRID_PATTERN.name;
    let symbols = "M (Mamba-2 mixer), * (attention), - (dense MLP), E (MoE), one per layer";
    if let Some((i, c)) = pattern
        .char_indices()
        .find(|(_, c)| Block::of(*c).is_none())
    {
        let what = match c {
            '|' => "pipeline stage boundaries (`|`) are not read: split the layers with                     parallel.layer_partition"
                .to_string(),
            '/' => "multi-token prediction patterns (`/`) are not modelled for hybrid models"
                .to_string(),
            _ => format!("{c:?} at position {i} is not a layer symbol"),
        };
        return Err(m.err(ErrorKind::Invalid, key, what, symbols));
    }
    let count = pattern.chars().count() as u64;
    if count != layers {
        return Err(m.err(
            ErrorKind::CrossField,
            key,
            format!("{count} symbols for {layers} layers"),
            format!("one symbol per layer: {layers} symbols, or model.layers = {count}"),
        ));
    }
    let has = |b: Block| pattern.chars().any(|c| Block::of(c) == Some(b));
    if has(Block::Moe) != experts {
        let (message, allowed) = match experts {
            true => (
                "the model has experts but no `E` layer",
                "an E where a layer is an MoE, or no model.experts",
            ),
            false => (
                "`E` layers need experts",
                "set model.experts, or write `-` (a dense MLP) for each E",
            ),
        };
        return Err(m.err(ErrorKind::CrossField, key, message, allowed));
    }
    for other in [mk::DENSE_LAYERS.name, mk::MOE_EVERY.name] {
        if m.has(other) {
            return Err(m.err(
                ErrorKind::CrossField,
                other,
                "the hybrid pattern places the MoE layers",
                "remove this key: write `-` for a dense MLP layer and `E` for an MoE one",
            ));
        }
    }
    let mamba =
        match (has(Block::Mamba), m.has(mk::MAMBA.name)) {
            (true, true) => Some(mamba(m.section("mamba", "model.mamba")?)?),
            (true, false) if base_mamba.is_some() => base_mamba,
            (true, false) => return Err(m.missing(
                mk::MAMBA.name,
                "the Mamba-2 mixer's shape: [model.mamba] with heads, head_dim, state and groups",
            )),
            (false, true) => {
                return Err(m.err(
                    ErrorKind::CrossField,
                    mk::MAMBA.name,
                    "no layer of the pattern is a Mamba mixer (M)",
                    "an M in model.hybrid_pattern, or no [model.mamba]",
                ))
            }
            (false, false) => None,
        };
    Ok(Some(Hybrid { pattern, mamba }))
}

/// `[model.mamba]`: the heads, their width, the state and the groups are required.
fn mamba(t: Section<'_>) -> Result<Mamba> {
    t.check_unknown()?;
    let need = |key: &Key| -> Result<u64> {
        opt(t.uint(key)?).ok_or_else(|| t.missing(key.name, "the Mamba-2 mixer's shape"))
    };
    let mamba = Mamba {
        heads: need(&mambak::HEADS)?,
        head_dim: need(&mambak::HEAD_DIM)?,
        state: need(&mambak::STATE)?,
        groups: need(&mambak::GROUPS)?,
        conv_kernel: t.uint_or_default(&mambak::CONV_KERNEL)?,
        chunk: t.uint_or_default(&mambak::CHUNK)?,
    };
    if !mamba.heads.is_multiple_of(mamba.groups) {
        return Err(t.err(
            ErrorKind::CrossField,
            mambak::GROUPS.name,
            format!(
                "{} heads do not split into {} groups",
                mamba.heads, mamba.groups
            ),
            "a divisor of model.mamba.heads",
        ));
    }
    Ok(mamba)
}

/// `[model.mla]`: every rank but the query's is required.
fn mla(t: Section<'_>) -> Result<Mla> {
    t.check_unknown()?;
    let need = |key: &Key| -> Result<u64> {
        opt(t.uint(key)?).ok_or_else(|| t.missing(key.name, "multi-head latent attention's shape"))
    };
    Ok(Mla {
        q_lora_rank: opt(t.uint(&mlak::Q_LORA_RANK)?).unwrap_or(0),
        kv_lora_rank: need(&mlak::KV_LORA_RANK)?,
        qk_nope_head_dim: need(&mlak::QK_NOPE_HEAD_DIM)?,
        qk_rope_head_dim: need(&mlak::QK_ROPE_HEAD_DIM)?,
        v_head_dim: need(&mlak::V_HEAD_DIM)?,
    })
}

/// The parallel section, its `dp` as written, whether it sets `zero` and `cp_algorithm`, and
/// the stages of its `pipeline_layout` when it has one (checked against the model later).
type ParallelRead = (Parallel, Option<u32>, bool, bool, Option<Vec<LayoutStage>>);

fn parallel(p: Section<'_>) -> Result<ParallelRead> {
    p.check_unknown()?;
    let tp = p.uint32_or_default(&pk::TP)?;
    let pp = p.uint32_or_default(&pk::PP)?;
    let ep = p.uint32_or_default(&pk::EP)?;
    let etp = opt(p.uint32(&pk::ETP)?);
    let cp = p.uint32_or_default(&pk::CP)?;
    let cp_algorithm = p.choice(&pk::CP_ALGORITHM, &CpAlgorithm::ALL)?;
    let cp_algorithm_explicit = cp_algorithm.is_some();
    // Without the key, the framework's (filled in by `resolve` once the framework is read).
    let cp_algorithm = cp_algorithm.unwrap_or(CpAlgorithm::AllGather);
    let dp = opt(p.uint32(&pk::DP)?);
    let vpp = p.uint32_or_default(&pk::VPP)?;
    let zero = opt(p.uint(&pk::ZERO)?);
    let fsdp = p.boolean_or_default(&pk::FSDP)?;
    let fsdp_degree = opt(p.uint32(&pk::FSDP_DEGREE)?);
    let sequence_parallel = p.boolean_or_default(&pk::SEQUENCE_PARALLEL)?;
    let schedule = p.choice_or_default(&pk::SCHEDULE, &PipelineSchedule::ALL)?;
    let max_layers = i64::try_from(mk::LAYERS.uint_range().1).unwrap_or(i64::MAX);
    let mut layer_partition = p.array(&pk::LAYER_PARTITION, |e| match e.node {
        Node::Int(i) if (0..=max_layers).contains(&i) => u32::try_from(i).ok(),
        _ => None,
    })?;
    let layout = match p.string(&pk::PIPELINE_LAYOUT)? {
        None => None,
        Some(text) => {
            if layer_partition.is_some() {
                return Err(p.err(
                    ErrorKind::CrossField,
                    pk::PIPELINE_LAYOUT.name,
                    "pipeline_layout and layer_partition both give the split",
                    "one of them",
                ));
            }
            let stages = super::layout::parse_layout(&text.value).map_err(|why| {
                p.err(
                    ErrorKind::Type,
                    pk::PIPELINE_LAYOUT.name,
                    format!("not a pipeline layout: {why}"),
                    "virtual stages separated by |, of E, t, m and L, with (...)*n repetitions",
                )
            })?;
            layer_partition = Some(stages.iter().map(|s| s.layers).collect());
            Some(stages)
        }
    };
    let account_for_embedding_in_pipeline_split =
        p.boolean_or_default(&pk::ACCOUNT_FOR_EMBEDDING_IN_PIPELINE_SPLIT)?;
    let account_for_loss_in_pipeline_split =
        p.boolean_or_default(&pk::ACCOUNT_FOR_LOSS_IN_PIPELINE_SPLIT)?;
    let order = order(p)?;
    Ok((
        Parallel {
            tp,
            pp,
            dp: dp.unwrap_or(0),
            vpp,
            ep,
            etp,
            cp,
            cp_algorithm,
            zero: zero.map(|z| z as u8).unwrap_or(if fsdp { 3 } else { 0 }),
            fsdp,
            fsdp_degree,
            sequence_parallel,
            schedule,
            layer_partition,
            account_for_embedding_in_pipeline_split,
            account_for_loss_in_pipeline_split,
            order: order.unwrap_or(Parallel::DEFAULT_ORDER),
        },
        dp,
        zero.is_some(),
        cp_algorithm_explicit,
        layout,
    ))
}

pub(crate) const PRECISIONS: [(&str, Precision); 4] = [
    ("fp32", Precision::Fp32),
    ("fp16", Precision::Fp16),
    ("bf16", Precision::Bf16),
    ("fp8", Precision::Fp8),
];
pub(crate) const RECOMPUTES: [(&str, Recompute); 3] = [
    ("none", Recompute::None),
    ("selective", Recompute::Selective),
    ("full", Recompute::Full),
];
pub(crate) const OPTIMIZERS: [(&str, Optimizer); 2] =
    [("adam", Optimizer::Adam), ("sgd", Optimizer::Sgd)];
pub(crate) const OFFLOADS: [(&str, Offload); 3] = [
    ("none", Offload::None),
    ("optimizer", Offload::Optimizer),
    ("params", Offload::Params),
];
pub(crate) const ACCOUNTINGS: [(&str, MemoryAccounting); 2] = [
    ("megatron", MemoryAccounting::Megatron),
    ("deepspeed", MemoryAccounting::Deepspeed),
];
pub(crate) const GRANULARITIES: [(&str, Granularity); 2] =
    [("chunk", Granularity::Chunk), ("layer", Granularity::Layer)];

/// The name a value has in a name table (the inverse of reading it).
pub(crate) use super::types::name_of;

pub(crate) const AXES: [(&str, Axis); 5] = [
    ("tp", Axis::Tp),
    ("cp", Axis::Cp),
    ("ep", Axis::Ep),
    ("dp", Axis::Dp),
    ("pp", Axis::Pp),
];

fn order(p: Section<'_>) -> Result<Option<[Axis; 5]>> {
    let allowed = pk::ORDER.allowed();
    let allowed = allowed.as_str();
    let Some(names) = p.array(&pk::ORDER, |e| match &e.node {
        Node::Str(s) => Some(s.clone()),
        _ => None,
    })?
    else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(5);
    for name in &names {
        match AXES.iter().find(|(n, _)| n == name) {
            Some((_, a)) if !out.contains(a) => out.push(*a),
            Some(_) => {
                return Err(p.err(
                    ErrorKind::Invalid,
                    "order",
                    format!("axis \"{name}\" appears twice"),
                    allowed,
                ))
            }
            None => {
                return Err(p.err(
                    ErrorKind::Invalid,
                    "order",
                    format!("unknown axis \"{}\"", super::error::shorten(name)),
                    allowed,
                ))
            }
        }
    }
    <[Axis; 5]>::try_from(out).map(Some).map_err(|v| {
        p.err(
            ErrorKind::Invalid,
            "order",
            format!("names {} axes; all five are needed", v.len()),
            allowed,
        )
    })
}

/// The names `training.framework` accepts (an alias included), with the bundled file each reads.
pub(crate) const FRAMEWORKS: [(&str, framework::Bundled); 6] = framework::FRAMEWORKS;

/// `training.framework` (a bundled file) or `training.framework_file` (a user's, relative to
/// the scenario's directory); megatron-core when neither is given.
fn framework_of(t: Section<'_>, base_dir: &Path) -> Result<framework::Framework> {
    let file = t.string(&tk::FRAMEWORK_FILE)?;
    if file.is_some() && t.has(tk::FRAMEWORK.name) {
        return Err(t.err(
            ErrorKind::CrossField,
            tk::FRAMEWORK_FILE.name,
            "training.framework and training.framework_file both name the framework; give one",
            "either training.framework or training.framework_file",
        ));
    }
    match file {
        Some(f) => framework::load(
            t.ctx,
            &f.loc,
            &t.key_path(tk::FRAMEWORK_FILE.name),
            &f.raw,
            &base_dir.join(&f.value),
        ),
        None => t
            .choice_or_default(&tk::FRAMEWORK, &FRAMEWORKS)?
            .framework(),
    }
}

/// The training section, whether it sets `grad_bucket_bytes`, and its `overlap_p2p_comm`
/// when written (the default needs the schedule and the framework).
fn training(t: Section<'_>, base_dir: &Path) -> Result<(Training, bool, Option<bool>)> {
    t.check_unknown()?;
    let global_batch = t
        .uint(&tk::GLOBAL_BATCH)?
        .ok_or_else(|| t.missing(tk::GLOBAL_BATCH.name, "sequences per step, whole job"))?
        .value;
    let micro_batch = t.uint_or_default(&tk::MICRO_BATCH)?;
    let bucket = opt(t.uint(&tk::GRAD_BUCKET_BYTES)?);
    Ok((
        Training {
            global_batch,
            micro_batch,
            tokens: opt(t.uint(&tk::TOKENS)?),
            precision: t.choice_or_default(&tk::PRECISION, &PRECISIONS)?,
            fp8_recipe: t.choice_or_default(&tk::FP8_RECIPE, &Fp8Recipe::ALL)?,
            fp8_param_gather: t.boolean_or_default(&tk::FP8_PARAM_GATHER)?,
            recompute: t.choice_or_default(&tk::RECOMPUTE, &RECOMPUTES)?,
            recompute_layers: opt(t.uint32(&tk::RECOMPUTE_LAYERS)?),
            recompute_modules: recompute_modules(t)?,
            overlap_grad_reduce: t.boolean_or_default(&tk::OVERLAP_GRAD_REDUCE)?,
            overlap_param_gather: t.boolean_or_default(&tk::OVERLAP_PARAM_GATHER)?,
            grad_compression: grad_compression(t)?,
            grad_reduce_dtype: t.choice(&tk::GRAD_REDUCE_DTYPE, &framework::DTYPES)?,
            optimizer_state_dtype: t.choice(&tk::OPTIMIZER_STATE_DTYPE, &framework::DTYPES)?,
            optimizer_kernel: t.choice(&tk::OPTIMIZER_KERNEL, &framework::OPTIMIZER_KERNELS)?,
            grad_clip: t.boolean_or_default(&tk::GRAD_CLIP)?,
            sync: sync(t)?,
            optimizer: t.choice_or_default(&tk::OPTIMIZER, &OPTIMIZERS)?,
            offload: t.choice_or_default(&tk::OFFLOAD, &OFFLOADS)?,
            flash_attention: t.boolean_or_default(&tk::FLASH_ATTENTION)?,
            framework: framework_of(t, base_dir)?,
            tp_comm_overlap: t.boolean_or_default(&tk::TP_COMM_OVERLAP)?,
            overlap_p2p_comm: false,
            compile: t.boolean_or_default(&tk::COMPILE)?,
            cuda_graphs: t.boolean_or_default(&tk::CUDA_GRAPHS)?,
            moe_routing: moe_routing(t)?,
            moe_a2a_overlap: t.boolean_or_default(&tk::MOE_A2A_OVERLAP)?,
            moe_dispatcher: t.choice_or_default(&tk::MOE_DISPATCHER, &MoeDispatcher::ALL)?,
            grad_bucket_bytes: bucket.unwrap_or(0),
        },
        bucket.is_some(),
        t.boolean(&tk::OVERLAP_P2P_COMM)?,
    ))
}

/// `recompute_modules`: a list of Megatron-Core's module names, each at most once.
fn recompute_modules(t: Section<'_>) -> Result<Option<RecomputeModules>> {
    let allowed = tk::RECOMPUTE_MODULES.allowed();
    let Some(names) = t.array(&tk::RECOMPUTE_MODULES, |e| match &e.node {
        Node::Str(s) => Some(s.clone()),
        _ => None,
    })?
    else {
        return Ok(None);
    };
    let mut modules = RecomputeModules::default();
    for name in &names {
        if modules.names().contains(&name.as_str()) {
            return Err(t.err(
                ErrorKind::Invalid,
                tk::RECOMPUTE_MODULES.name,
                format!("module \"{name}\" appears twice"),
                allowed,
            ));
        }
        if !modules.set(name) {
            return Err(t.err(
                ErrorKind::Invalid,
                tk::RECOMPUTE_MODULES.name,
                format!("unknown module \"{}\"", super::error::shorten(name)),
                allowed,
            ));
        }
    }
    Ok(Some(modules))
}

fn grad_compression(t: Section<'_>) -> Result<GradCompression> {
    let allowed = tk::GRAD_COMPRESSION.allowed();
    let Some(f) = t.string(&tk::GRAD_COMPRESSION)? else {
        return Ok(GradCompression::None);
    };
    match f.value.as_str() {
        "none" => Ok(GradCompression::None),
        "fp16" => Ok(GradCompression::Fp16),
        "int8" => Ok(GradCompression::Int8),
        s => match s.strip_prefix("topk:").map(str::parse::<f64>) {
            Some(Ok(frac)) if frac > 0.0 && frac <= 1.0 => Ok(GradCompression::Topk(frac)),
            Some(_) => Err(t.err(
                ErrorKind::Invalid,
                "grad_compression",
                "the top-k fraction must be a number in (0, 1]",
                allowed,
            )),
            None => Err(t
                .unknown_name(
                    "grad_compression",
                    "gradient compression",
                    s,
                    ["none", "fp16", "int8", "topk:0.01"].into_iter(),
                )
                .with_allowed(&allowed)),
        },
    }
}

/// The names `training.moe_routing` accepts as a string.
pub(crate) const ROUTING_NAMES: [(&str, MoeRouting); 2] = [
    ("balanced", MoeRouting::Balanced),
    ("force-balanced", MoeRouting::ForceBalanced),
];

/// The keys of `training.moe_routing`'s one-key table, each with the range its reader checks.
/// `imbalance` is bounded here by the largest `parallel.ep`; validation bounds it by the
/// scenario's own `ep`.
pub(crate) mod routing {
    use super::{Absent, Key, Kind};

    const fn key(name: &'static str, kind: Kind) -> Key {
        Key {
            name,
            kind,
            default: Absent::Required,
            doc: "",
        }
    }

    pub(crate) const CAPACITY_FACTOR: Key = key(
        "capacity_factor",
        Kind::Number {
            zero_ok: false,
            max: 1000.0,
        },
    );
    pub(crate) const IMBALANCE: Key = key(
        "imbalance",
        Kind::Number {
            zero_ok: false,
            max: (1u64 << 20) as f64,
        },
    );
    /// Largest relative load of one expert (`expert_loads` entries).
    pub(crate) const MAX_LOAD: f64 = 1e15;
    pub(crate) const EXPERT_LOADS: Key = key(
        "expert_loads",
        Kind::Other("an array of numbers from 0 to 1e15, one per expert, not all 0"),
    );
    pub(crate) const EXPERT_LOAD_CV: Key = key(
        "expert_load_cv",
        Kind::Number {
            zero_ok: true,
            max: 10.0,
        },
    );
    pub(crate) const ALL: [Key; 4] = [CAPACITY_FACTOR, IMBALANCE, EXPERT_LOADS, EXPERT_LOAD_CV];
}

/// `training.moe_routing`: a name (`balanced`, `force-balanced`) or an inline table of exactly
/// one of the [`routing`] keys.
fn moe_routing(t: Section<'_>) -> Result<MoeRouting> {
    let key = tk::MOE_ROUTING.name;
    let allowed = tk::MOE_ROUTING.allowed();
    let Some(e) = t.entry(key) else {
        return Ok(MoeRouting::Balanced);
    };
    let table = match &e.node {
        Node::Str(s) => {
            return match ROUTING_NAMES.iter().find(|(n, _)| n == s) {
                Some((_, r)) => Ok(r.clone()),
                None => Err(t
                    .unknown_name(
                        key,
                        "routing name",
                        s,
                        ROUTING_NAMES.iter().map(|(n, _)| *n),
                    )
                    .with_allowed(&allowed)),
            }
        }
        Node::Table(table) => table,
        other => {
            return Err(t.err(
                ErrorKind::Type,
                key,
                format!(
                    "expected a routing name or an inline table, found {}",
                    other.type_name()
                ),
                allowed,
            ))
        }
    };
    let names = || routing::ALL.iter().map(|k| k.name);
    for (name, entry) in table.entries() {
        if !names().any(|n| n == name.as_str()) {
            let mut message = "unknown routing form".to_string();
            if let Some(near) = super::error::closest(name, names()) {
                message.push_str(&format!("; did you mean `{near}`?"));
            }
            return Err(t.ctx.error(
                ErrorKind::UnknownKey,
                Some(&entry.key_loc),
                &format!("{}.{name}", t.key_path(key)),
                "",
                message,
                names().collect::<Vec<_>>().join(", "),
            ));
        }
    }
    if table.entries().len() != 1 {
        let given: Vec<&str> = table.entries().iter().map(|(n, _)| n.as_str()).collect();
        let message = match given.len() {
            0 => "an empty table names no routing form".to_string(),
            _ => format!(
                "{} routing forms at once ({}); give one",
                given.len(),
                given.join(", ")
            ),
        };
        return Err(t.err(ErrorKind::Invalid, key, message, allowed));
    }
    let sub = t.section(key, "training.moe_routing")?;
    if let Some(f) = sub.number(&routing::CAPACITY_FACTOR)? {
        return Ok(MoeRouting::Capacity { factor: f.value });
    }
    if sub.has(routing::IMBALANCE.name) {
        let imbalance_allowed =
            "numbers from 1 (balanced) to parallel.ep (the whole load on one rank)";
        let f = sub
            .number(&routing::IMBALANCE)
            .map_err(|e| e.with_allowed(imbalance_allowed))?;
        return match f {
            Some(f) if f.value >= 1.0 => Ok(MoeRouting::Imbalance { max_load: f.value }),
            _ => Err(sub.err(
                ErrorKind::Invalid,
                routing::IMBALANCE.name,
                "below 1: the busiest expert-parallel rank receives at least the mean share",
                imbalance_allowed,
            )),
        };
    }
    if let Some(f) = sub.number(&routing::EXPERT_LOAD_CV)? {
        return Ok(MoeRouting::ExpertLoadCv { cv: f.value });
    }
    let loads = sub.array(&routing::EXPERT_LOADS, |e| {
        let v = match e.node {
            Node::Int(i) => i as f64,
            Node::Float(f) => f,
            _ => return None,
        };
        (v.is_finite() && (0.0..=routing::MAX_LOAD).contains(&v)).then_some(v)
    })?;
    match loads {
        Some(loads) if loads.iter().any(|&l| l > 0.0) => Ok(MoeRouting::ExpertLoads(loads)),
        _ => Err(sub.err(
            ErrorKind::Invalid,
            routing::EXPERT_LOADS.name,
            "no expert has a load: the tokens must go somewhere",
            "one number ≥ 0 per expert (any scale), at least one above 0",
        )),
    }
}

/// `sync = "delayed:N"`: N in this range.
const DELAYED_STEPS: (u64, u64) = (1, 1 << 20);

fn sync(t: Section<'_>) -> Result<SyncMode> {
    let allowed = tk::SYNC.allowed();
    let Some(f) = t.string(&tk::SYNC)? else {
        return Ok(SyncMode::Sync);
    };
    match f.value.as_str() {
        "sync" => Ok(SyncMode::Sync),
        "async" => Ok(SyncMode::Async),
        s => match s.strip_prefix("delayed:").map(str::parse::<u64>) {
            Some(Ok(n)) if (DELAYED_STEPS.0..=DELAYED_STEPS.1).contains(&n) => {
                Ok(SyncMode::Delayed(u32_of(n)))
            }
            Some(_) => Err(t.err(
                ErrorKind::Invalid,
                "sync",
                "the step count must be an integer from 1 to 1,048,576",
                allowed,
            )),
            None => Err(t
                .unknown_name(
                    "sync",
                    "sync mode",
                    s,
                    ["sync", "async", "delayed:2"].into_iter(),
                )
                .with_allowed(&allowed)),
        },
    }
}

/// `[memory]`; an absent `allocator_slack_fraction` is the framework's.
fn memory(m: Section<'_>, fw: &framework::Framework) -> Result<MemorySettings> {
    m.check_unknown()?;
    use super::keys::memory as k;
    Ok(MemorySettings {
        reserved_bytes: m.uint_or_default(&k::RESERVED_BYTES)?,
        allocator_slack_fraction: opt(m.number(&k::ALLOCATOR_SLACK_FRACTION)?)
            .unwrap_or(fw.memory.allocator_slack_fraction),
        accounting: m.choice_or_default(&k::ACCOUNTING, &ACCOUNTINGS)?,
    })
}

fn run(r: Section<'_>) -> Result<Run> {
    r.check_unknown()?;
    Ok(Run {
        iterations: r.uint32_or_default(&runk::ITERATIONS)?,
        seed: r.uint_or_default(&runk::SEED)?,
        granularity: r.choice_or_default(&runk::GRANULARITY, &GRANULARITIES)?,
    })
}
