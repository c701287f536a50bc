//! Resolution of the located tree into a [`Scenario`], one section at a time: type and range
//! checks of every key, unknown keys, presets and `hf_config` expanded under explicit keys,
//! defaults filled in. Rules that relate several keys live in `validate.rs`.

use super::checks::Checks;
use super::cluster::cluster;
use super::error::{Ctx, ErrorKind, Loc};
use super::hf;
use super::limits;
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
    let name = match root.string("name")? {
        Some(f) => f.value,
        None => default_name(&ctx.origin),
    };
    let (model, hf_unmodelled) = model(root.section("model", "model")?, base_dir)?;
    let cluster = cluster(root.section("cluster", "cluster")?)?;
    let (parallel, dp, zero_explicit) = parallel(root.section("parallel", "parallel")?)?;
    let (training, bucket_explicit) = training(root.section("training", "training")?)?;
    let memory = memory(root.section("memory", "memory")?)?;
    let run = run(root.section("run", "run")?)?;
    let checks = super::checks::checks(root.section("checks", "checks")?)?;
    let faults = super::faults::faults(root.section("faults", "faults")?)?;
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
    let preset = m.string("preset")?;
    let hf_config = m.string("hf_config")?;
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
                ffn_hidden: Some(s.ffn_hidden),
                seq_len: Some(s.seq_len),
                vocab: Some(s.vocab),
                gated_mlp: s.gated_mlp,
                tied_embeddings: s.tied_embeddings,
                experts: s.moe.map(|x| x.0),
                top_k: s.moe.map(|x| x.1),
                unmodelled: Vec::new(),
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
            m.boolean("hf_force")?.unwrap_or(false),
        )?,
        (None, None) => hf::HfShape::default(),
    };
    let hint = "or give model.preset or model.hf_config";
    let need = |key: &str, range: (u64, u64), base: Option<u64>| -> Result<u64> {
        match opt(m.uint(key, range.0, range.1)?).or(base) {
            Some(v) => Ok(v),
            None => Err(m.missing(key, hint)),
        }
    };
    let layers = need("layers", limits::LAYERS, base.layers)?;
    let hidden = need("hidden", limits::HIDDEN, base.hidden)?;
    let heads = need("heads", limits::HEADS, base.heads)?;
    let kv_heads = opt(m.uint("kv_heads", limits::HEADS.0, limits::HEADS.1)?)
        .or(base.kv_heads)
        .unwrap_or(heads);
    // hidden <= 2^20, so 4*hidden fits the ffn range.
    let ffn_hidden = opt(m.uint("ffn_hidden", limits::FFN_HIDDEN.0, limits::FFN_HIDDEN.1)?)
        .or(base.ffn_hidden)
        .unwrap_or(4 * hidden);
    let seq_len = need("seq_len", limits::SEQ_LEN, base.seq_len)?;
    let vocab = need("vocab", limits::VOCAB, base.vocab)?;
    let gated_mlp = m.boolean("gated_mlp")?.unwrap_or(base.gated_mlp);
    let tied_embeddings = m
        .boolean("tied_embeddings")?
        .unwrap_or(base.tied_embeddings);
    let experts = opt(m.uint("experts", limits::EXPERTS.0, limits::EXPERTS.1)?).or(base.experts);
    let top_k = opt(m.uint("top_k", limits::EXPERTS.0, limits::EXPERTS.1)?).or(base.top_k);
    let moe_every = opt(m.uint("moe_every", limits::LAYERS.0, limits::LAYERS.1)?);
    let moe = match experts {
        Some(experts) => Some(Moe {
            experts: u32_of(experts),
            top_k: u32_of(top_k.unwrap_or(experts.min(2))),
            moe_every: u32_of(moe_every.unwrap_or(1)),
        }),
        None => {
            for key in ["top_k", "moe_every"] {
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
    let name = match m.string("name")? {
        Some(n) => n.value,
        None => preset
            .map(|p| p.value)
            .or(hf_config.map(|h| h.value))
            .unwrap_or_else(|| "custom".to_string()),
    };
    let model = Model {
        name,
        layers: u32_of(layers),
        hidden,
        heads: u32_of(heads),
        kv_heads: u32_of(kv_heads),
        ffn_hidden,
        seq_len,
        vocab,
        gated_mlp,
        tied_embeddings,
        moe,
    };
    Ok((model, base.unmodelled))
}

fn parallel(p: Section<'_>) -> Result<(Parallel, Option<u32>, bool)> {
    p.check_unknown()?;
    let (lo, hi) = (limits::DEGREE.0 as u32, limits::DEGREE.1 as u32);
    let degree = |key: &str| -> Result<u32> { Ok(opt(p.uint32(key, lo, hi)?).unwrap_or(1)) };
    let tp = degree("tp")?;
    let pp = degree("pp")?;
    let ep = degree("ep")?;
    let cp = degree("cp")?;
    let dp = opt(p.uint32("dp", lo, hi)?);
    let vpp = opt(p.uint32("vpp", limits::VPP.0 as u32, limits::VPP.1 as u32)?).unwrap_or(1);
    let zero = opt(p.uint("zero", limits::ZERO.0, limits::ZERO.1)?);
    let fsdp = p.boolean("fsdp")?.unwrap_or(false);
    let sequence_parallel = p.boolean("sequence_parallel")?.unwrap_or(false);
    let schedule = p
        .choice("schedule", "schedule", &PipelineSchedule::ALL)?
        .unwrap_or(PipelineSchedule::OneFOneB);
    let layer_partition = p.array(
        "layer_partition",
        "an array of layer counts (integers from 1 to 65,536)",
        |e| match e.node {
            Node::Int(i) if (1..=limits::LAYERS.1 as i64).contains(&i) => u32::try_from(i).ok(),
            _ => None,
        },
    )?;
    let order = order(p)?;
    Ok((
        Parallel {
            tp,
            pp,
            dp: dp.unwrap_or(0),
            vpp,
            ep,
            cp,
            zero: zero.map(|z| z as u8).unwrap_or(if fsdp { 3 } else { 0 }),
            fsdp,
            sequence_parallel,
            schedule,
            layer_partition,
            order: order.unwrap_or(Parallel::DEFAULT_ORDER),
        },
        dp,
        zero.is_some(),
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
pub(crate) fn name_of<T: PartialEq>(names: &[(&'static str, T)], value: T) -> &'static str {
    names
        .iter()
        .find(|(_, v)| *v == value)
        .map(|(n, _)| *n)
        .unwrap_or("?")
}

pub(crate) const AXES: [(&str, Axis); 5] = [
    ("tp", Axis::Tp),
    ("cp", Axis::Cp),
    ("ep", Axis::Ep),
    ("dp", Axis::Dp),
    ("pp", Axis::Pp),
];

fn order(p: Section<'_>) -> Result<Option<[Axis; 5]>> {
    let allowed = "a permutation of [\"tp\", \"cp\", \"ep\", \"dp\", \"pp\"], innermost first";
    let Some(names) = p.array("order", allowed, |e| match &e.node {
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

fn training(t: Section<'_>) -> Result<(Training, bool)> {
    t.check_unknown()?;
    let global_batch = t
        .uint(
            "global_batch",
            limits::GLOBAL_BATCH.0,
            limits::GLOBAL_BATCH.1,
        )?
        .ok_or_else(|| t.missing("global_batch", "sequences per step, whole job"))?
        .value;
    let micro_batch =
        opt(t.uint("micro_batch", limits::MICRO_BATCH.0, limits::MICRO_BATCH.1)?).unwrap_or(1);
    let bucket = opt(t.uint(
        "grad_bucket_bytes",
        limits::GRAD_BUCKET_BYTES.0,
        limits::GRAD_BUCKET_BYTES.1,
    )?);
    Ok((
        Training {
            global_batch,
            micro_batch,
            precision: t
                .choice("precision", "precision", &PRECISIONS)?
                .unwrap_or(Precision::Bf16),
            recompute: t
                .choice("recompute", "recompute policy", &RECOMPUTES)?
                .unwrap_or(Recompute::None),
            overlap_grad_reduce: t.boolean("overlap_grad_reduce")?.unwrap_or(true),
            overlap_param_gather: t.boolean("overlap_param_gather")?.unwrap_or(true),
            grad_compression: grad_compression(t)?,
            sync: sync(t)?,
            optimizer: t
                .choice("optimizer", "optimizer", &OPTIMIZERS)?
                .unwrap_or(Optimizer::Adam),
            offload: t
                .choice("offload", "offload mode", &OFFLOADS)?
                .unwrap_or(Offload::None),
            flash_attention: t.boolean("flash_attention")?.unwrap_or(true),
            grad_bucket_bytes: bucket.unwrap_or(0),
        },
        bucket.is_some(),
    ))
}

fn grad_compression(t: Section<'_>) -> Result<GradCompression> {
    let allowed = "none, fp16, int8, topk:F with 0 < F <= 1 (fraction of elements kept)";
    let Some(f) = t.string("grad_compression")? else {
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
                .with_allowed(allowed)),
        },
    }
}

fn sync(t: Section<'_>) -> Result<SyncMode> {
    let allowed = "sync, async, delayed:N with N >= 1 (synchronise every N steps)";
    let Some(f) = t.string("sync")? else {
        return Ok(SyncMode::Sync);
    };
    match f.value.as_str() {
        "sync" => Ok(SyncMode::Sync),
        "async" => Ok(SyncMode::Async),
        s => match s.strip_prefix("delayed:").map(str::parse::<u64>) {
            Some(Ok(n)) if (limits::DELAYED_STEPS.0..=limits::DELAYED_STEPS.1).contains(&n) => {
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
                .with_allowed(allowed)),
        },
    }
}

fn memory(m: Section<'_>) -> Result<MemorySettings> {
    m.check_unknown()?;
    let d = MemorySettings::default();
    Ok(MemorySettings {
        reserved_bytes: opt(m.uint(
            "reserved_bytes",
            limits::RESERVED_BYTES.0,
            limits::RESERVED_BYTES.1,
        )?)
        .unwrap_or(d.reserved_bytes),
        allocator_slack_fraction: opt(
            m.non_negative("allocator_slack_fraction", limits::ALLOCATOR_SLACK_FRACTION)?
        )
        .unwrap_or(d.allocator_slack_fraction),
        accounting: m
            .choice("accounting", "memory accounting", &ACCOUNTINGS)?
            .unwrap_or(d.accounting),
    })
}

fn run(r: Section<'_>) -> Result<Run> {
    r.check_unknown()?;
    Ok(Run {
        iterations: u32_of(
            opt(r.uint("iterations", limits::ITERATIONS.0, limits::ITERATIONS.1)?).unwrap_or(1),
        ),
        seed: opt(r.uint("seed", limits::SEED.0, limits::SEED.1)?).unwrap_or(1),
        granularity: r
            .choice("granularity", "granularity", &GRANULARITIES)?
            .unwrap_or(Granularity::Chunk),
    })
}
