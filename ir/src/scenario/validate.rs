//! Cross-field rules: values that are fine alone but contradict each other (the mesh does not
//! cover the GPUs, heads do not split over tp, ...). Each error points at the most relevant
//! key (the latest `--set` among the keys involved, else the first one written in the file)
//! and spells out the arithmetic, so the user sees why and what would work.

use super::checker::{divisors, Checker};
use super::error::ScenarioError;
use super::limits;
use super::parse::Resolved;
use super::types::*;
use crate::plan::{partition, PartitionError};

/// Checks every cross-field rule and fills the values that depend on several keys (derived
/// dp, the default gradient bucket). `c` blames the keys of the document `resolved` came from.
pub(crate) fn validate(c: &Checker<'_>, resolved: Resolved) -> Result<Scenario, ScenarioError> {
    let mut s = resolved.scenario;
    nodes(c, &s)?;
    s.parallel.dp = mesh(c, &s, resolved.dp)?;
    model_shape(c, &s)?;
    sharding(c, &s)?;
    let microbatches = batch(c, &s)?;
    pipeline(c, &s, microbatches)?;
    zero(c, &s, resolved.zero_explicit)?;
    framework(c, &s)?;
    tp_comm_overlap(c, &s)?;
    overlap_p2p_comm(c, &s)?;
    fp8_recipe(c, &s)?;
    moe_routing(c, &s)?;
    moe_dispatcher(c, &s)?;
    moe_a2a_overlap(c, &s)?;
    if !resolved.bucket_explicit {
        s.training.grad_bucket_bytes = default_grad_bucket_bytes(&s.parallel);
    }
    size(c, &s)?;
    Ok(s)
}

/// Megatron-Core's default DDP bucket: max(40,000,000, 1,000,000 * data-parallel size)
/// parameters, of fp32 main gradients (4 bytes each).
pub(crate) fn default_grad_bucket_bytes(p: &Parallel) -> u64 {
    let dp_size = u64::from(p.dp) * u64::from(p.cp);
    40_000_000u64.max(1_000_000u64.saturating_mul(dp_size)) * 4
}

/// The framework can launch the layout: no limit of its file is met.
fn framework(c: &Checker<'_>, s: &Scenario) -> Result<(), ScenarioError> {
    let fw = &s.training.framework;
    let Some(limit) = fw.refusal(s) else {
        return Ok(());
    };
    let mut keys: Vec<(&str, String)> = limit.when.iter().map(|w| (w.key(), w.value(s))).collect();
    keys.push(framework_key(fw));
    let values: Vec<String> = limit
        .when
        .iter()
        .map(|w| format!("{} = {}", w.key(), w.value(s)))
        .collect();
    Err(c.fail(
        &keys,
        format!(
            "framework {} cannot launch this layout ({}): {} [{}]",
            fw.name,
            values.join(", "),
            limit.reason,
            limit.reference
        ),
        format!(
            "a layout outside {}, or another framework",
            limit.describe()
        ),
    ))
}

/// The key that chose `fw`, with its value: `training.framework` for a bundled one,
/// `training.framework_file` for a file of the user's.
fn framework_key(fw: &super::framework::Framework) -> (&'static str, String) {
    match &fw.origin {
        super::framework::Origin::Bundled(_) => ("training.framework", format!("\"{}\"", fw.name)),
        super::framework::Origin::File(path) => ("training.framework_file", format!("\"{path}\"")),
    }
}

/// `tp_comm_overlap` needs a framework that overlaps tensor-parallel communication and, with
/// tensor parallelism, sequence parallelism (Transformer Engine's userbuffers and PyTorch's
/// async TP both overlap the all-gather and reduce-scatter of sequence-parallel activations).
fn tp_comm_overlap(c: &Checker<'_>, s: &Scenario) -> Result<(), ScenarioError> {
    if !s.training.tp_comm_overlap {
        return Ok(());
    }
    let fw = &s.training.framework;
    if !fw.overlaps.tp_comm_overlap {
        return Err(c.fail(
            &[("training.tp_comm_overlap", v(true)), framework_key(fw)],
            format!(
                "framework {} cannot overlap tensor-parallel communication with the GEMMs \
                 (its file's overlaps.tp_comm_overlap is false)",
                fw.name
            ),
            "tp_comm_overlap = false, or a framework that can (megatron-core, torchtitan)",
        ));
    }
    if s.parallel.tp > 1 && !s.parallel.sequence_parallel {
        return Err(c.fail(
            &[
                ("training.tp_comm_overlap", v(true)),
                ("parallel.sequence_parallel", v(false)),
            ],
            "tp_comm_overlap overlaps the all-gathers and reduce-scatters of sequence \
             parallelism; without it tensor parallelism all-reduces, which is not overlapped"
                .to_string(),
            "sequence_parallel = true, or tp_comm_overlap = false",
        ));
    }
    Ok(())
}

/// `overlap_p2p_comm` needs a framework that overlaps the pipeline's transfers and, with a
/// pipeline, an interleaved schedule: Megatron-Core refuses it for 1F1B ("Non-interleaved pipeline
/// parallelism does not support overlapping p2p communication", NVIDIA/Megatron-LM@d98e8a64dd
/// megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_without_interleaving).
fn overlap_p2p_comm(c: &Checker<'_>, s: &Scenario) -> Result<(), ScenarioError> {
    if !s.training.overlap_p2p_comm {
        return Ok(());
    }
    let fw = &s.training.framework;
    if !fw.overlaps.p2p_overlap {
        return Err(c.fail(
            &[("training.overlap_p2p_comm", v(true)), framework_key(fw)],
            format!(
                "framework {} cannot overlap the pipeline's sends and receives with compute \
                 (its file's overlaps.p2p_overlap is false)",
                fw.name
            ),
            "overlap_p2p_comm = false, or a framework that can (megatron-core)",
        ));
    }
    if s.parallel.pp > 1 && s.parallel.schedule != PipelineSchedule::Interleaved1F1B {
        return Err(c.fail(
            &[
                ("training.overlap_p2p_comm", v(true)),
                (
                    "parallel.schedule",
                    format!("\"{}\"", s.parallel.schedule.as_str()),
                ),
            ],
            "overlap_p2p_comm overlaps the transfers of interleaved schedules only \
             (Megatron-Core refuses it for the others)"
                .to_string(),
            "schedule = \"interleaved-1f1b\", or overlap_p2p_comm = false",
        ));
    }
    Ok(())
}

/// Why `[training] moe_a2a_overlap = true` cannot apply to a scenario: each is one of
/// Megatron-Core's asserts for `overlap_moe_expert_parallel_comm`
/// (NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553
/// megatron/core/transformer/transformer_config.py `__post_init__`), or the framework file's
/// `overlaps.moe_a2a_overlap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum A2aOverlapBlocker {
    /// The model has no experts: there is no all-to-all to overlap.
    Dense,
    /// `ep = 1`: "only supported with expert model parallelism".
    NoExpertParallelism,
    /// The framework file's `overlaps.moe_a2a_overlap` is false.
    Framework,
    /// `pp > 1` without the interleaved schedule: "virtual_pipeline_model_parallel_size must be
    /// specified when pipeline_model_parallel_size > 1".
    Pipeline,
    /// `recompute = "full"`: "disable full recomputation".
    FullRecompute,
    /// `precision = "fp32"`: "only supported with bf16 or fp16 model".
    Fp32,
    /// `mtp_layers > 1`: "MTP supports at most one layer".
    MtpLayers,
    /// `recompute_modules` has `moe` under selective recompute: "disable moe in
    /// recompute_modules when enabling overlap_moe_expert_parallel_comm".
    MoeRecompute,
    /// A hybrid model (`hybrid_pattern`): the combined 1F1B builds its schedule plan from
    /// `GPTModel.build_schedule_plan`, which Megatron-Core's hybrid and Mamba models do not
    /// have (NVIDIA/Megatron-LM@d98e8a64dd megatron/core/models/gpt/gpt_model.py,
    /// megatron/core/pipeline_parallel/combined_1f1b.py).
    Hybrid,
}

/// The first reason `s` cannot run with `moe_a2a_overlap = true` (`None`: it can), whatever
/// `s.training.moe_a2a_overlap` says; validation refuses the flag on the same rules, and
/// `sweep --search` proposes it only where this is `None`.
pub fn moe_a2a_overlap_blocker(s: &Scenario) -> Option<A2aOverlapBlocker> {
    let p = &s.parallel;
    let blocker = if s.model.moe.is_none() {
        A2aOverlapBlocker::Dense
    } else if p.ep <= 1 {
        A2aOverlapBlocker::NoExpertParallelism
    } else if !s.training.framework.overlaps.moe_a2a_overlap {
        A2aOverlapBlocker::Framework
    } else if p.pp > 1
        && p.schedule != PipelineSchedule::DualPipe
        && (p.schedule != PipelineSchedule::Interleaved1F1B || p.vpp <= 1)
    {
        A2aOverlapBlocker::Pipeline
    } else if s.training.recompute == Recompute::Full {
        A2aOverlapBlocker::FullRecompute
    } else if s.training.precision == Precision::Fp32 {
        A2aOverlapBlocker::Fp32
    } else if s.model.mtp_layers > 1 {
        A2aOverlapBlocker::MtpLayers
    } else if s.training.recompute == Recompute::Selective
        && s.training.recompute_modules.is_some_and(|m| m.moe)
    {
        A2aOverlapBlocker::MoeRecompute
    } else if s.model.hybrid.is_some() {
        A2aOverlapBlocker::Hybrid
    } else {
        return None;
    };
    Some(blocker)
}

/// `moe_a2a_overlap = true` where [`moe_a2a_overlap_blocker`] finds a reason it cannot apply.
fn moe_a2a_overlap(c: &Checker<'_>, s: &Scenario) -> Result<(), ScenarioError> {
    if !s.training.moe_a2a_overlap {
        return Ok(());
    }
    let Some(blocker) = moe_a2a_overlap_blocker(s) else {
        return Ok(());
    };
    let on = ("training.moe_a2a_overlap", v(true));
    let p = &s.parallel;
    let (keys, message, instead): (Vec<(&str, String)>, String, String) = match blocker {
        A2aOverlapBlocker::Dense => (
            vec![on, ("model.experts", "none".to_string())],
            "moe_a2a_overlap hides the expert-parallel all-to-alls, but the model is dense"
                .to_string(),
            "moe_a2a_overlap = false (or leave it out), or a mixture-of-experts model \
             (model.experts)"
                .to_string(),
        ),
        A2aOverlapBlocker::NoExpertParallelism => (
            vec![on, ("parallel.ep", v(p.ep))],
            "moe_a2a_overlap hides the expert-parallel all-to-alls, but with ep = 1 there are \
             none (Megatron-Core: only supported with expert model parallelism)"
                .to_string(),
            "parallel.ep > 1, or moe_a2a_overlap = false".to_string(),
        ),
        A2aOverlapBlocker::Framework => {
            let fw = &s.training.framework;
            (
                vec![on, framework_key(fw)],
                format!(
                    "framework {} cannot overlap the expert-parallel all-to-alls with another \
                     micro batch's compute (its file's overlaps.moe_a2a_overlap is false)",
                    fw.name
                ),
                "moe_a2a_overlap = false, or a framework that can (megatron-core)".to_string(),
            )
        }
        A2aOverlapBlocker::Pipeline => (
            vec![
                on,
                ("parallel.pp", v(p.pp)),
                ("parallel.schedule", format!("\"{}\"", p.schedule.as_str())),
            ],
            format!(
                "moe_a2a_overlap with pp = {} needs the interleaved schedule (Megatron-Core: \
                 virtual_pipeline_model_parallel_size must be specified when \
                 pipeline_model_parallel_size > 1)",
                p.pp
            ),
            "schedule = \"interleaved-1f1b\" with vpp > 1 or \"dualpipe\", pp = 1, or \
             moe_a2a_overlap = false"
                .to_string(),
        ),
        A2aOverlapBlocker::FullRecompute => (
            vec![on, ("training.recompute", "\"full\"".to_string())],
            "moe_a2a_overlap does not run with full recomputation (Megatron-Core refuses it)"
                .to_string(),
            "recompute = \"selective\" or \"none\", or moe_a2a_overlap = false".to_string(),
        ),
        A2aOverlapBlocker::Fp32 => (
            vec![on, ("training.precision", "\"fp32\"".to_string())],
            "moe_a2a_overlap runs with bf16 or fp16 models only (Megatron-Core refuses fp32)"
                .to_string(),
            "precision = \"bf16\", \"fp16\" or \"fp8\", or moe_a2a_overlap = false".to_string(),
        ),
        A2aOverlapBlocker::MtpLayers => (
            vec![on, ("model.mtp_layers", v(s.model.mtp_layers))],
            format!(
                "moe_a2a_overlap supports at most one multi-token prediction layer \
                 (Megatron-Core refuses more); the model has {}",
                s.model.mtp_layers
            ),
            "mtp_layers = 0 or 1, or moe_a2a_overlap = false".to_string(),
        ),
        A2aOverlapBlocker::MoeRecompute => (
            vec![
                on,
                (
                    "training.recompute_modules",
                    format!(
                        "{:?}",
                        s.training.recompute_modules.unwrap_or_default().names()
                    ),
                ),
            ],
            "moe_a2a_overlap does not run with the MoE blocks recomputed (Megatron-Core: \
             disable moe in recompute_modules)"
                .to_string(),
            "recompute_modules without \"moe\", or moe_a2a_overlap = false".to_string(),
        ),
        A2aOverlapBlocker::Hybrid => (
            vec![
                on,
                (
                    "model.hybrid_pattern",
                    format!(
                        "{:?}",
                        s.model.hybrid.as_ref().map_or("", |h| h.pattern.as_str())
                    ),
                ),
            ],
            "moe_a2a_overlap builds on the transformer model's schedule plan, which \
             Megatron-Core's hybrid models do not have"
                .to_string(),
            "moe_a2a_overlap = false for a hybrid model".to_string(),
        ),
    };
    Err(c.fail(&keys, message, instead))
}

/// MXFP8 needs Blackwell's block-scaled tensor cores: refused on a GPU whose compute capability
/// is known to be below 10.0, as Transformer Engine refuses it (`check_mxfp8_support`: "Device
/// compute capability 10.0 or higher required for MXFP8 execution") and torchtitan
/// (pytorch/torchtitan@026c75f23fd0b1c0404e17853edef58ab0a7bbd0:torchtitan/components/quantization/mx.py
/// `MXFP8LinearConverter`: "MXFP8 is only supported on SM100 or later architectures"). A GPU
/// of unknown capability (one given by its figures) is taken at its word.
fn fp8_recipe(c: &Checker<'_>, s: &Scenario) -> Result<(), ScenarioError> {
    let r = s.training.fp8_recipe;
    if s.training.precision != Precision::Fp8 || r != Fp8Recipe::Mxfp8 {
        return Ok(());
    }
    let gpu = &s.cluster.gpu.name;
    match r.too_old_on(gpu) {
        Some((major, minor)) => Err(c.fail(
            &[
                ("training.fp8_recipe", format!("\"{}\"", r.as_str())),
                ("cluster.gpu", format!("\"{gpu}\"")),
            ],
            format!(
                "fp8_recipe = \"mxfp8\" needs Blackwell's block-scaled tensor cores (compute \
                 capability 10.0 or later); {gpu} is {major}.{minor}"
            ),
            "\"blockwise\" (block scaling on Hopper), \"tensorwise\", \"delayed\" or \"rowwise\"; \
             or a Blackwell GPU (b200-sxm-180gb, gb200)"
                .to_string(),
        )),
        None => Ok(()),
    }
}

/// `moe_routing` as TOML text, for errors about it.
fn routing_text(r: &MoeRouting) -> String {
    let list = |xs: &[f64]| {
        xs.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match r {
        MoeRouting::Balanced => "\"balanced\"".to_string(),
        MoeRouting::ForceBalanced => "\"force-balanced\"".to_string(),
        MoeRouting::Capacity { factor } => format!("{{ capacity_factor = {factor} }}"),
        MoeRouting::Imbalance { max_load } => format!("{{ imbalance = {max_load} }}"),
        MoeRouting::ExpertLoads(loads) => format!("{{ expert_loads = [{}] }}", list(loads)),
        MoeRouting::ExpertLoadCv { cv } => format!("{{ expert_load_cv = {cv} }}"),
    }
}

/// `moe_routing` other than balanced needs experts; `expert_loads` gives one load per expert;
/// `imbalance` skews the load between expert-parallel ranks, so it needs `ep > 1` and can put
/// at most the whole load (`ep` times the mean share) on one rank.
/// A dispatcher other than NCCL's all-to-all moves the tokens of experts: it needs a model
/// with them.
fn moe_dispatcher(c: &Checker<'_>, s: &Scenario) -> Result<(), ScenarioError> {
    let d = s.training.moe_dispatcher;
    if d == MoeDispatcher::AllToAll || s.model.moe.is_some() {
        return Ok(());
    }
    Err(c.fail(
        &[
            ("training.moe_dispatcher", v(d.as_str())),
            ("model.experts", "none".to_string()),
        ],
        "moe_dispatcher moves tokens to experts, but the model is dense".to_string(),
        "moe_dispatcher = \"alltoall\" (or leave it out), or a mixture-of-experts model \
         (model.experts)",
    ))
}

fn moe_routing(c: &Checker<'_>, s: &Scenario) -> Result<(), ScenarioError> {
    let r = &s.training.moe_routing;
    if *r == MoeRouting::Balanced {
        return Ok(());
    }
    let key = ("training.moe_routing", routing_text(r));
    let Some(moe) = &s.model.moe else {
        return Err(c.fail(
            &[key, ("model.experts", "none".to_string())],
            "moe_routing spreads tokens over experts, but the model is dense".to_string(),
            "moe_routing = \"balanced\" (or leave it out), or a mixture-of-experts model \
             (model.experts)",
        ));
    };
    let ep = s.parallel.ep;
    match r {
        MoeRouting::ExpertLoads(loads) if loads.len() != moe.experts as usize => Err(c.fail(
            &[key, ("model.experts", v(moe.experts))],
            format!(
                "expert_loads gives {} loads, but the model has {} experts",
                loads.len(),
                moe.experts
            ),
            format!("expert_loads with {} numbers, one per expert", moe.experts),
        )),
        MoeRouting::Imbalance { .. } if ep <= 1 => Err(c.fail(
            &[key, ("parallel.ep", v(ep))],
            "imbalance skews the load between expert-parallel ranks, but with ep = 1 the \
             experts are all on every rank, so every rank receives the mean share"
                .to_string(),
            "parallel.ep > 1, or moe_routing = \"balanced\" (expert_loads and expert_load_cv \
             describe per-expert skew)",
        )),
        MoeRouting::Imbalance { max_load } if *max_load > f64::from(ep) => Err(c.fail(
            &[key, ("parallel.ep", v(ep))],
            format!(
                "imbalance = {max_load} is more than ep = {ep}: the busiest of the {ep} \
                 expert-parallel ranks can receive at most the whole load, {ep} times the mean \
                 share"
            ),
            format!("imbalance from 1 to {ep}"),
        )),
        _ => Ok(()),
    }
}

fn v<T: ToString>(x: T) -> String {
    x.to_string()
}

fn nodes(c: &Checker<'_>, s: &Scenario) -> Result<(), ScenarioError> {
    let (gpus, gpn) = (s.cluster.gpus, s.cluster.gpus_per_node);
    if gpus >= gpn && gpus % gpn != 0 {
        return Err(c.fail(
            &[("cluster.gpus", v(gpus)), ("cluster.gpus_per_node", v(gpn))],
            format!(
                "{gpus} GPUs do not fill whole nodes of {gpn}: {gpus} % {gpn} = {}",
                gpus % gpn
            ),
            format!(
                "a multiple of gpus_per_node ({}, {}, ...), or fewer GPUs than one node",
                u64::from(gpus / gpn) * u64::from(gpn),
                u64::from(gpus / gpn + 1) * u64::from(gpn)
            ),
        ));
    }
    Ok(())
}

/// The data-parallel size: `dp` as written, or `gpus / (tp*pp*cp)`. The mesh is Megatron-Core's:
/// `tp*pp*cp*dp` covers every GPU, and expert parallelism groups `ep` of the `dp` ranks for
/// the expert layers (so `ep` divides `dp`), which leaves `dp / ep` expert data-parallel ranks.
fn mesh(c: &Checker<'_>, s: &Scenario, dp: Option<u32>) -> Result<u32, ScenarioError> {
    let p = &s.parallel;
    let gpus = u128::from(s.cluster.gpus);
    let others = [p.tp, p.pp, p.cp]
        .iter()
        .map(|&x| u128::from(x))
        .product::<u128>();
    let keys = |first: Option<&'static str>| {
        let mut k: Vec<(&str, String)> = first.map(|f| (f, v(p.dp))).into_iter().collect();
        k.extend([
            ("parallel.tp", v(p.tp)),
            ("parallel.pp", v(p.pp)),
            ("parallel.cp", v(p.cp)),
            ("cluster.gpus", v(gpus)),
        ]);
        k
    };
    let dp = match dp {
        Some(dp) => {
            let product = others * u128::from(dp);
            if product != gpus {
                // A file written when ep multiplied the GPU count: say what to write now.
                if p.ep > 1 && product * u128::from(p.ep) == gpus {
                    return Err(c.fail(
                        &[
                            ("parallel.dp", v(dp)),
                            ("parallel.ep", v(p.ep)),
                            ("cluster.gpus", v(gpus)),
                        ],
                        format!(
                            "ep no longer multiplies the GPU count: dp counts every \
                             data-parallel rank of the dense layers and the expert layers group \
                             ep of them (Megatron-Core's mesh), so tp*pp*cp*dp = {product} \
                             covers only part of the {gpus} GPUs"
                        ),
                        format!(
                            "dp = {} (the old dp times ep), or leave dp out to derive it",
                            u128::from(dp) * u128::from(p.ep)
                        ),
                    ));
                }
                let allowed = if gpus % others == 0 {
                    format!(
                        "dp = {} (= gpus / (tp*pp*cp) = {gpus} / {others}), or leave dp out to derive it",
                        gpus / others
                    )
                } else {
                    format!(
                        "tp*pp*cp (now {}*{}*{} = {others}) dividing cluster.gpus = {gpus}, and dp = gpus / (tp*pp*cp)",
                        p.tp, p.pp, p.cp
                    )
                };
                return Err(c.fail(
                    &keys(Some("parallel.dp")),
                    format!(
                        "tp*pp*dp*cp = {}*{}*{dp}*{} = {product}, but cluster.gpus = {gpus}",
                        p.tp, p.pp, p.cp
                    ),
                    allowed,
                ));
            }
            dp
        }
        None => {
            if gpus % others != 0 {
                return Err(c.fail(
                    &keys(None),
                    format!(
                        "dp is derived as gpus / (tp*pp*cp) = {gpus} / ({}*{}*{}) = {gpus} / {others}, which is not a whole number",
                        p.tp, p.pp, p.cp
                    ),
                    format!("tp*pp*cp dividing cluster.gpus = {gpus}"),
                ));
            }
            u32::try_from(gpus / others).unwrap_or(u32::MAX)
        }
    };
    if p.expert_refold() {
        expert_refold(c, s, dp)?;
    } else if !dp.is_multiple_of(p.ep.max(1)) {
        return Err(c.fail(
            &[("parallel.ep", v(p.ep)), ("parallel.dp", v(dp))],
            format!(
                "ep = {} does not divide dp = {dp}: the expert layers group ep of the dp \
                 data-parallel ranks",
                p.ep
            ),
            format!("ep dividing dp: {}", divisors(u64::from(dp), u64::MAX, 16)),
        ));
    }
    Ok(dp)
}

/// Expert layers that refold a stage's `tp * cp * dp` ranks (`etp` other than `tp`, or `ep`
/// under context parallelism): the expert-tensor-parallel groups `etp` consecutive ranks and
/// the expert-parallel groups `ep` ranks `etp` apart within the stage's block, as Megatron-Core's
/// expert rank generator orders them (tp-ep-dp-pp with the expert tp; NVIDIA/Megatron-LM@d98e8a64dd
/// megatron/core/parallel_state.py). With `etp` other than `tp` each rank dispatches its own
/// sequence-parallel tokens, so tensor parallelism needs sequence parallelism, as Megatron-Core
/// requires with MoE; each expert splits evenly over `etp`.
fn expert_refold(c: &Checker<'_>, s: &Scenario, dp: u32) -> Result<(), ScenarioError> {
    let p = &s.parallel;
    let etp = p.etp();
    let etp_key = ("parallel.etp", v(etp));
    // What makes the expert layers refold, for the messages.
    let (why, why_keys, undo) = if etp != p.tp {
        (
            format!("etp = {etp} under tp = {}", p.tp),
            vec![etp_key.clone()],
            "etp = tp".to_string(),
        )
    } else {
        (
            format!("ep = {} under cp = {}", p.ep, p.cp),
            vec![("parallel.ep", v(p.ep)), ("parallel.cp", v(p.cp))],
            "ep = 1 or cp = 1".to_string(),
        )
    };
    let with = |extra: &[(&'static str, String)]| -> Vec<(&'static str, String)> {
        why_keys
            .iter()
            .cloned()
            .chain(extra.iter().cloned())
            .collect()
    };
    let fail = |keys: &[(&str, String)], message: String, allowed: String| {
        Err(c.fail(keys, message, allowed))
    };
    let Some(moe) = &s.model.moe else {
        let (what, instead) = if etp != p.tp {
            ("etp splits", "leave etp out")
        } else {
            ("ep shards", "ep = 1")
        };
        return fail(
            &why_keys,
            format!("{what} experts, but the model is dense ({why})"),
            format!("{instead}, or a mixture-of-experts model (model.experts)"),
        );
    };
    if etp != p.tp && p.tp > 1 && !p.sequence_parallel {
        return fail(
            &[etp_key, ("parallel.sequence_parallel", v(false))],
            format!(
                "etp = {etp} under tp = {}: each rank dispatches its own sequence-parallel tokens \
                 to the experts, which needs sequence parallelism (Megatron-Core requires it with \
                 MoE and tensor parallelism)",
                p.tp
            ),
            "sequence_parallel = true, or etp = tp".to_string(),
        );
    }
    if !moe.ffn_hidden.is_multiple_of(u64::from(etp.max(1))) {
        return fail(
            &[etp_key, ("model.moe_ffn_hidden", v(moe.ffn_hidden))],
            format!(
                "etp = {etp} does not divide the experts' width moe_ffn_hidden = {}: each of the \
                 etp ranks holds an equal slice of every expert",
                moe.ffn_hidden
            ),
            format!(
                "etp dividing {}: {}",
                moe.ffn_hidden,
                divisors(moe.ffn_hidden, u64::MAX, 16)
            ),
        );
    }
    // The derived dp: the scenario's own may not be set yet.
    let block = u64::from(p.tp) * u64::from(p.cp.max(1)) * u64::from(dp);
    let per_expert_tp = block / u64::from(etp.max(1));
    if !block.is_multiple_of(u64::from(etp.max(1)) * u64::from(p.ep.max(1))) {
        return fail(
            &with(&[("parallel.dp", v(dp))]),
            format!(
                "ep = {} does not divide tp*cp*dp/etp = {}*{}*{dp}/{etp} = {per_expert_tp}, the \
                 ranks of a stage the expert layers refold ({why})",
                p.ep, p.tp, p.cp
            ),
            format!(
                "ep dividing {per_expert_tp}: {}",
                divisors(per_expert_tp, u64::MAX, 16)
            ),
        );
    }
    if p.order.last() != Some(&Axis::Pp) {
        return fail(
            &with(&[("parallel.order", "a custom order".to_string())]),
            format!("{why}: the expert layers refold a stage's ranks, which needs pp as the outermost axis"),
            format!("the default order, or {undo}"),
        );
    }
    if p.fsdp_degree.is_some_and(|f| f != dp) {
        return fail(
            &with(&[("parallel.fsdp_degree", v(p.fsdp_degree.unwrap_or(dp)))]),
            format!("HSDP with {why} (expert layers that refold a stage's ranks) is not modelled"),
            format!("leave fsdp_degree out, or {undo}"),
        );
    }
    Ok(())
}

fn model_shape(c: &Checker<'_>, s: &Scenario) -> Result<(), ScenarioError> {
    let m = &s.model;
    if m.kv_heads > m.heads || !m.heads.is_multiple_of(m.kv_heads) {
        return Err(c.fail(
            &[("model.kv_heads", v(m.kv_heads)), ("model.heads", v(m.heads))],
            format!(
                "heads = {} is not a multiple of kv_heads = {} (each key/value head serves heads/kv_heads query heads)",
                m.heads, m.kv_heads
            ),
            format!("kv_heads dividing {}: {}", m.heads, divisors(u64::from(m.heads), u64::MAX, 16)),
        ));
    }
    if m.head_dim.is_none() && !m.hidden.is_multiple_of(u64::from(m.heads)) {
        return Err(c.fail(
            &[("model.hidden", v(m.hidden)), ("model.heads", v(m.heads))],
            format!(
                "hidden = {} is not a multiple of heads = {} (head dimension = hidden / heads)",
                m.hidden, m.heads
            ),
            format!(
                "hidden a multiple of {}, or model.head_dim when the head width is not hidden / heads",
                m.heads
            ),
        ));
    }
    if let Some(moe) = &m.moe {
        if moe.top_k > moe.experts {
            return Err(c.fail(
                &[
                    ("model.top_k", v(moe.top_k)),
                    ("model.experts", v(moe.experts)),
                ],
                format!(
                    "top_k = {} routes each token to more experts than the {} there are",
                    moe.top_k, moe.experts
                ),
                format!("1 to {}", moe.experts),
            ));
        }
        if moe.moe_every > m.layers {
            return Err(c.fail(
                &[
                    ("model.moe_every", v(moe.moe_every)),
                    ("model.layers", v(m.layers)),
                ],
                format!(
                    "moe_every = {} is more than the {} layers: no layer would be an MoE layer",
                    moe.moe_every, m.layers
                ),
                format!("1 to {}", m.layers),
            ));
        }
        if moe.moe_layers_in(0, u64::from(m.layers)) == 0 {
            return Err(c.fail(
                &[
                    ("model.dense_layers", v(moe.dense_layers)),
                    ("model.moe_every", v(moe.moe_every)),
                    ("model.layers", v(m.layers)),
                ],
                format!(
                    "with dense_layers = {} and moe_every = {} none of the {} layers is an MoE layer",
                    moe.dense_layers, moe.moe_every, m.layers
                ),
                "dense_layers below the last layer that moe_every makes an MoE layer".to_string(),
            ));
        }
    }
    if let (Some(_), true) = (&m.mla, m.kv_heads != m.heads) {
        return Err(c.fail(
            &[
                ("model.kv_heads", v(m.kv_heads)),
                ("model.heads", v(m.heads)),
            ],
            "multi-head latent attention gives every head its own keys and values; \
             kv_heads must equal heads"
                .to_string(),
            format!("kv_heads = {}, or no [model.mla]", m.heads),
        ));
    }
    if m.hybrid.is_some() {
        // What a hybrid model's blocks do not model.
        let unmodelled = [
            ("model.mla", m.mla.is_some(), "multi-head latent attention"),
            (
                "model.mtp_layers",
                m.mtp_layers > 0,
                "multi-token prediction modules",
            ),
            (
                "model.sliding_window",
                m.sliding_window.is_some(),
                "sliding-window attention",
            ),
        ];
        if let Some((key, _, what)) = unmodelled.iter().find(|(_, set, _)| *set) {
            return Err(c.fail(
                &[(key, "set".to_string())],
                format!("{what} is not modelled in a hybrid model (model.hybrid_pattern)"),
                format!("no {key}, or no model.hybrid_pattern"),
            ));
        }
    }
    Ok(())
}

/// tp, ep, cp and sequence parallelism must divide what they split.
fn sharding(c: &Checker<'_>, s: &Scenario) -> Result<(), ScenarioError> {
    let (m, p) = (&s.model, &s.parallel);
    let tp = p.tp;
    if let Some(mamba) = m.hybrid.as_ref().and_then(|h| h.mamba.as_ref()) {
        // Megatron-Core's MambaMixer splits its heads and its groups over tensor parallelism.
        for (key, n) in [
            ("model.mamba.heads", mamba.heads),
            ("model.mamba.groups", mamba.groups),
        ] {
            if !n.is_multiple_of(u64::from(tp)) {
                return Err(c.fail(
                    &[("parallel.tp", v(tp)), (key, v(n))],
                    format!(
                        "{key} = {n} is not divisible by tp = {tp}: each tensor-parallel rank \
                         holds a share of the Mamba mixer's heads and groups"
                    ),
                    format!("a tp dividing {n}"),
                ));
            }
        }
        if p.cp > 1 {
            return Err(c.fail(
                &[
                    ("parallel.cp", v(p.cp)),
                    ("model.hybrid_pattern", "M".into()),
                ],
                "context parallelism of the Mamba mixer's scan is not modelled".to_string(),
                "cp = 1 for a model with Mamba layers".to_string(),
            ));
        }
    }
    if m.heads % tp != 0 {
        return Err(c.fail(
            &[("parallel.tp", v(tp)), ("model.heads", v(m.heads))],
            format!(
                "heads = {} is not divisible by tp = {tp}: each tensor-parallel rank holds heads / tp attention heads",
                m.heads
            ),
            format!("tp dividing {}: {}", m.heads, divisors(u64::from(m.heads), u64::from(s.cluster.gpus), 16)),
        ));
    }
    if m.kv_heads % tp != 0 && tp % m.kv_heads != 0 {
        return Err(c.fail(
            &[("parallel.tp", v(tp)), ("model.kv_heads", v(m.kv_heads))],
            format!(
                "kv_heads = {} and tp = {tp}: key/value heads are split over tp (kv_heads % tp == 0) or, when tp > kv_heads, replicated tp / kv_heads times (tp % kv_heads == 0); neither holds",
                m.kv_heads
            ),
            format!(
                "tp dividing {} or a multiple of {} that divides heads = {}",
                m.kv_heads, m.kv_heads, m.heads
            ),
        ));
    }
    if s.training.recompute_layers.is_some() && s.training.recompute != Recompute::Full {
        return Err(c.fail(
            &[
                (
                    "training.recompute_layers",
                    v(s.training.recompute_layers.unwrap_or(0)),
                ),
                (
                    "training.recompute",
                    match s.training.recompute {
                        Recompute::None => "\"none\"",
                        Recompute::Selective => "\"selective\"",
                        Recompute::Full => "\"full\"",
                    }
                    .to_string(),
                ),
            ],
            "recompute_layers chooses which layers recompute in full; it needs recompute = \"full\"".to_string(),
            "recompute = \"full\", or no recompute_layers".to_string(),
        ));
    }
    // Read under selective recompute only (as Megatron-Core reads it), so that a search over
    // `recompute` can keep the list.
    if let Some(modules) = &s.training.recompute_modules {
        let names = format!("{:?}", modules.names());
        let key = ("training.recompute_modules", names);
        if s.training.framework.recompute.selective
            != super::framework::SelectiveRecompute::AttentionCore
        {
            return Err(c.fail(
                &[key],
                format!(
                    "framework {:?} recomputes selectively by its own policy, not by modules",
                    s.training.framework.name
                ),
                "no recompute_modules, or a framework whose selective policy is the attention \
                 core (megatron-core)"
                    .to_string(),
            ));
        }
        let needs = [
            (
                modules.moe || modules.moe_act,
                m.moe.is_some(),
                "moe and moe_act need model.experts",
            ),
            (
                modules.shared_experts,
                m.moe.as_ref().is_some_and(|e| e.shared_experts > 0),
                "shared_experts needs model.shared_experts",
            ),
            (
                modules.mla_up_proj,
                m.mla.is_some(),
                "mla_up_proj needs [model.mla]",
            ),
        ];
        if let Some((_, _, why)) = needs.iter().find(|(set, has, _)| *set && !*has) {
            return Err(c.fail(
                &[key],
                (*why).to_string(),
                format!(
                    "a subset of {:?} that the model has",
                    RecomputeModules::NAMES
                ),
            ));
        }
    }
    if let (Some(w), CpAlgorithm::Ring, 2..) = (&m.sliding_window, p.cp_algorithm, p.cp) {
        return Err(c.fail(
            &[
                ("parallel.cp_algorithm", "\"ring\"".to_string()),
                ("model.sliding_window", v(w.tokens)),
            ],
            "Transformer Engine runs sliding-window attention under context parallelism only with the all-gather and all-to-all exchanges (transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py, attn_forward_func_with_cp)".to_string(),
            "cp_algorithm = \"all-gather\" or \"ulysses\"".to_string(),
        ));
    }
    if p.cp_algorithm == CpAlgorithm::Ring && p.cp > 1 && !s.training.flash_attention {
        return Err(c.fail(
            &[
                ("parallel.cp_algorithm", "\"ring\"".to_string()),
                ("training.flash_attention", "false".to_string()),
            ],
            "ring context parallelism runs blockwise attention inside a fused kernel (Transformer Engine's AttnFuncWithCPAndKVP2P); it needs flash_attention = true".to_string(),
            "flash_attention = true, or cp_algorithm = \"all-gather\" or \"ulysses\"".to_string(),
        ));
    }
    let heads_per_tp = m.heads / tp.max(1);
    if p.cp_algorithm == CpAlgorithm::Ulysses && p.cp > 1 && heads_per_tp % p.cp != 0 {
        return Err(c.fail(
            &[
                ("parallel.cp_algorithm", "\"ulysses\"".to_string()),
                ("parallel.cp", v(p.cp)),
                ("model.heads", v(m.heads)),
            ],
            format!(
                "ulysses context parallelism shards the heads of each tensor-parallel rank over cp, but heads / tp = {} / {tp} = {heads_per_tp} is not divisible by cp = {}",
                m.heads, p.cp
            ),
            format!(
                "cp dividing {heads_per_tp}: {}, or cp_algorithm = \"all-gather\" or \"ring\"",
                divisors(u64::from(heads_per_tp), u64::from(s.cluster.gpus), 16)
            ),
        ));
    }
    if m.ffn_hidden % u64::from(tp) != 0 {
        return Err(c.fail(
            &[("parallel.tp", v(tp)), ("model.ffn_hidden", v(m.ffn_hidden))],
            format!(
                "ffn_hidden = {} is not divisible by tp = {tp}: each tensor-parallel rank holds ffn_hidden / tp MLP columns",
                m.ffn_hidden
            ),
            format!("tp dividing {}: {}", m.ffn_hidden, divisors(m.ffn_hidden, u64::from(s.cluster.gpus), 16)),
        ));
    }
    match &m.moe {
        None if p.ep > 1 => {
            return Err(c.fail(
                &[("parallel.ep", v(p.ep))],
                format!(
                    "ep = {} shards experts, but the model is dense (no model.experts)",
                    p.ep
                ),
                "ep = 1, or a mixture-of-experts model (model.experts)",
            ))
        }
        Some(moe) if moe.experts % p.ep != 0 => {
            return Err(c.fail(
                &[("parallel.ep", v(p.ep)), ("model.experts", v(moe.experts))],
                format!(
                    "experts = {} is not divisible by ep = {}: each expert-parallel rank holds experts / ep experts",
                    moe.experts, p.ep
                ),
                format!("ep dividing {}: {}", moe.experts, divisors(u64::from(moe.experts), u64::MAX, 16)),
            ))
        }
        _ => {}
    }
    if m.seq_len % u64::from(p.cp) != 0 {
        return Err(c.fail(
            &[("parallel.cp", v(p.cp)), ("model.seq_len", v(m.seq_len))],
            format!(
                "seq_len = {} is not divisible by cp = {}: each context-parallel rank holds seq_len / cp tokens",
                m.seq_len, p.cp
            ),
            format!("cp dividing {}", m.seq_len),
        ));
    }
    let tp_cp = u64::from(tp) * u64::from(p.cp);
    if p.sequence_parallel && m.seq_len % tp_cp != 0 {
        return Err(c.fail(
            &[
                ("parallel.sequence_parallel", v(true)),
                ("model.seq_len", v(m.seq_len)),
                ("parallel.tp", v(tp)),
            ],
            format!(
                "sequence parallelism splits each sequence over tp*cp = {tp}*{} = {tp_cp} ranks, but seq_len = {} % {tp_cp} = {}",
                p.cp,
                m.seq_len,
                m.seq_len % tp_cp
            ),
            format!("seq_len a multiple of {tp_cp}, or sequence_parallel = false"),
        ));
    }
    Ok(())
}

/// Micro batches per pipeline per step.
fn batch(c: &Checker<'_>, s: &Scenario) -> Result<u64, ScenarioError> {
    let (t, p) = (&s.training, &s.parallel);
    let denom = u128::from(t.micro_batch) * u128::from(p.dp);
    let global = u128::from(t.global_batch);
    if global % denom != 0 || global < denom {
        let below = global / denom * denom;
        let allowed = if below > 0 {
            format!("multiples of {denom}: {below}, {}, ...", below + denom)
        } else {
            format!("multiples of {denom}: {denom}, {}, ...", 2 * denom)
        };
        return Err(c.fail(
            &[
                ("training.global_batch", v(t.global_batch)),
                ("training.micro_batch", v(t.micro_batch)),
                ("parallel.dp", v(p.dp)),
            ],
            format!(
                "global_batch = {} is not a positive multiple of micro_batch*dp = {}*{} = {denom} (micro batches per pipeline = global_batch / (micro_batch*dp))",
                t.global_batch, t.micro_batch, p.dp
            ),
            allowed,
        ));
    }
    Ok(u64::try_from(global / denom).unwrap_or(u64::MAX))
}

fn pipeline(c: &Checker<'_>, s: &Scenario, microbatches: u64) -> Result<(), ScenarioError> {
    let p = &s.parallel;
    let interleaved = p.schedule == PipelineSchedule::Interleaved1F1B;
    let schedule = format!("\"{}\"", p.schedule.as_str());
    if p.vpp > 1 && !interleaved {
        return Err(c.fail(
            &[("parallel.vpp", v(p.vpp)), ("parallel.schedule", schedule)],
            format!(
                "vpp = {} virtual stages per device need the interleaved-1f1b schedule, but schedule = \"{}\"",
                p.vpp,
                p.schedule.as_str()
            ),
            "vpp = 1, or schedule = \"interleaved-1f1b\"",
        ));
    }
    if interleaved && p.vpp < 2 {
        return Err(c.fail(
            &[("parallel.schedule", schedule), ("parallel.vpp", v(p.vpp))],
            format!(
                "interleaved-1f1b needs at least 2 model chunks per device, but vpp = {}",
                p.vpp
            ),
            "vpp >= 2, or another schedule",
        ));
    }
    if interleaved && p.pp < 2 {
        return Err(c.fail(
            &[("parallel.schedule", schedule), ("parallel.pp", v(p.pp))],
            format!(
                "interleaved-1f1b interleaves pipeline stages, but pp = {}",
                p.pp
            ),
            "pp >= 2, or another schedule",
        ));
    }
    if p.schedule == PipelineSchedule::DualPipe
        && (!p.pp.is_multiple_of(2)
            || !microbatches.is_multiple_of(2)
            || microbatches < 2 * u64::from(p.pp))
    {
        let t = &s.training;
        return Err(c.fail(
            &[
                ("parallel.schedule", schedule),
                ("parallel.pp", v(p.pp)),
                ("training.global_batch", v(t.global_batch)),
                ("training.micro_batch", v(t.micro_batch)),
            ],
            format!(
                "dualpipe feeds half of the micro batches in at each end of the pipeline: it needs pp even and the micro batches per pipeline, global_batch / (micro_batch*dp) = {microbatches}, even and at least 2*pp (deepseek-ai/DualPipe dualpipe.py asserts both)"
            ),
            format!(
                "pp even, and global_batch an even multiple of micro_batch*dp = {} with at least 2*pp micro batches",
                u128::from(t.micro_batch) * u128::from(p.dp)
            ),
        ));
    }
    if interleaved && !microbatches.is_multiple_of(u64::from(p.pp)) {
        let t = &s.training;
        return Err(c.fail(
            &[
                ("training.global_batch", v(t.global_batch)),
                ("parallel.pp", v(p.pp)),
                ("training.micro_batch", v(t.micro_batch)),
            ],
            format!(
                "interleaved-1f1b needs the micro batches per pipeline, global_batch / (micro_batch*dp) = {} / ({}*{}) = {microbatches}, to be a multiple of pp = {} (as Megatron-LM requires)",
                t.global_batch, t.micro_batch, p.dp, p.pp
            ),
            format!(
                "global_batch a multiple of micro_batch*dp*pp = {}",
                u128::from(t.micro_batch) * u128::from(p.dp) * u128::from(p.pp)
            ),
        ));
    }
    layers(c, s)
}

/// The layer split over the pipeline's virtual stages (`plan::partition`, the one rule the
/// plan uses too), its refusals located on the keys involved.
fn layers(c: &Checker<'_>, s: &Scenario) -> Result<(), ScenarioError> {
    let p = &s.parallel;
    let layers = s.model.layers;
    let chunks = u64::from(p.pp) * u64::from(p.vpp);
    let (embedding, loss) = (
        p.account_for_embedding_in_pipeline_split,
        p.account_for_loss_in_pipeline_split,
    );
    let e = match partition::split(partition::SplitInput {
        layers,
        pp: p.pp,
        vpp: p.vpp,
        given: p.layer_partition.as_deref(),
        account_for_embedding: embedding,
        account_for_loss: loss,
    }) {
        Ok(_) => return Ok(()),
        Err(e) => e,
    };
    let list = || format!("{:?}", p.layer_partition.as_deref().unwrap_or(&[]));
    let given_allowed =
        format!("{chunks} layer counts, each >= 1 but the first and the last, summing to {layers}");
    let slot_keys = || {
        let mut k = Vec::new();
        if embedding {
            k.push(("parallel.account_for_embedding_in_pipeline_split", v(true)));
        }
        if loss {
            k.push(("parallel.account_for_loss_in_pipeline_split", v(true)));
        }
        k
    };
    let pipeline_keys = || {
        vec![
            ("model.layers", v(layers)),
            ("parallel.pp", v(p.pp)),
            ("parallel.vpp", v(p.vpp)),
        ]
    };
    Err(match e {
        PartitionError::Length { got, .. } => c.fail(
            &[
                ("parallel.layer_partition", list()),
                ("parallel.pp", v(p.pp)),
                ("parallel.vpp", v(p.vpp)),
            ],
            format!(
                "layer_partition has {got} entries, but there are pp*vpp = {}*{} = {chunks} (stage, chunk) slots",
                p.pp, p.vpp
            ),
            given_allowed,
        ),
        PartitionError::Sum { got, .. } => c.fail(
            &[
                ("parallel.layer_partition", list()),
                ("model.layers", v(layers)),
            ],
            format!("layer_partition sums to {got} layers, but the model has {layers}"),
            given_allowed,
        ),
        PartitionError::EmptyChunk => c.fail(
            &[("parallel.layer_partition", list())],
            "layer_partition has an entry of 0 for a virtual stage that holds neither the embedding (the first) nor the loss (the last)".to_string(),
            given_allowed,
        ),
        PartitionError::GivenWithSlots => {
            let mut keys = vec![("parallel.layer_partition", list())];
            keys.extend(slot_keys());
            c.fail(
                &keys,
                "layer_partition gives the split itself; the account_for_*_in_pipeline_split keys would be ignored (Megatron-Core refuses the two together as well)".to_string(),
                "either layer_partition, or the account_for_*_in_pipeline_split keys",
            )
        }
        e @ (PartitionError::SlotsUneven { .. } | PartitionError::SlotsEmpty { .. }) => {
            let mut keys = slot_keys();
            keys.extend(pipeline_keys());
            c.fail(
                &keys,
                e.to_string(),
                format!(
                    "layers plus the counted embedding/loss a multiple of pp*vpp = {chunks} with a layer left in every virtual stage, or an explicit parallel.layer_partition of {chunks} counts summing to {layers}"
                ),
            )
        }
        e @ PartitionError::Automatic { .. } => c.fail(
            &pipeline_keys(),
            e.to_string(),
            format!(
                "an explicit parallel.layer_partition of {chunks} counts summing to {layers}, or pp and vpp for which one of these splits works"
            ),
        ),
    })
}

fn zero(c: &Checker<'_>, s: &Scenario, zero_explicit: bool) -> Result<(), ScenarioError> {
    let p = &s.parallel;
    if p.fsdp && zero_explicit && p.zero != 3 {
        return Err(c.fail(
            &[("parallel.zero", v(p.zero)), ("parallel.fsdp", v(true))],
            format!(
                "fsdp = true shards parameters, gradients and optimizer state (ZeRO-3), but zero = {}",
                p.zero
            ),
            "zero = 3 (or leave zero out) with fsdp = true",
        ));
    }
    if let Some(f) = p.fsdp_degree {
        // fsdp_degree = dp is plain data parallelism's one group: allowed with any stage.
        if f != p.dp && !(p.fsdp || p.zero >= 3) {
            return Err(c.fail(
                &[("parallel.fsdp_degree", v(f)), ("parallel.zero", v(p.zero))],
                format!(
                    "fsdp_degree = {f} sizes the groups that shard parameters, gradients and optimizer state (HSDP), which only ZeRO-3 / FSDP does, but zero = {}",
                    p.zero
                ),
                "fsdp = true or zero = 3 with fsdp_degree; or leave fsdp_degree out",
            ));
        }
        if f == 0 || !p.dp.is_multiple_of(f) {
            return Err(c.fail(
                &[("parallel.fsdp_degree", v(f)), ("parallel.dp", v(p.dp))],
                format!(
                    "fsdp_degree = {f} does not divide dp = {}: the data-parallel ranks split into dp / fsdp_degree replicas of one shard group each",
                    p.dp
                ),
                format!(
                    "fsdp_degree dividing dp = {}: {}",
                    p.dp,
                    divisors(u64::from(p.dp), u64::MAX, 16)
                ),
            ));
        }
        if f != p.dp && p.ep > 1 {
            return Err(c.fail(
                &[("parallel.fsdp_degree", v(f)), ("parallel.ep", v(p.ep))],
                format!(
                    "fsdp_degree = {f} with ep = {}: HSDP shard groups over the expert layers' \
                     data-parallel ranks are not modelled",
                    p.ep
                ),
                "ep = 1 with fsdp_degree, or leave fsdp_degree out",
            ));
        }
    }
    if s.training.offload == Offload::Params && p.zero < 3 {
        return Err(c.fail(
            &[
                ("training.offload", v("\"params\"")),
                ("parallel.zero", v(p.zero)),
            ],
            format!(
                "offloading parameters needs them sharded (ZeRO-3 or FSDP), but zero = {}",
                p.zero
            ),
            "zero = 3 or fsdp = true with offload = \"params\"; or offload = \"optimizer\"",
        ));
    }
    Ok(())
}

/// Rough whole-model size, only to reject absurd shapes before they overflow downstream.
fn size(c: &Checker<'_>, s: &Scenario) -> Result<(), ScenarioError> {
    let m = &s.model;
    let h = m.hidden as f64;
    let (q, kv) = (m.q_width() as f64, m.kv_width() as f64);
    let attention = 2.0 * h * q + 2.0 * h * kv;
    let matrices = if m.gated_mlp { 3.0 } else { 2.0 } * h;
    let layers = f64::from(m.layers);
    // (MoE layers, dense MLP, one expert, routed experts, per token, shared experts).
    let (moe_layers, mlp, expert, experts, top_k, shared) = match &m.moe {
        Some(moe) => (
            moe.moe_layers_in(0, u64::from(m.layers)) as f64,
            matrices * moe.dense_ffn_hidden as f64,
            matrices * moe.ffn_hidden as f64,
            f64::from(moe.experts),
            f64::from(moe.top_k),
            matrices * moe.shared_ffn_hidden as f64 * f64::from(moe.shared_experts),
        ),
        None => (0.0, matrices * m.ffn_hidden as f64, 0.0, 0.0, 0.0, 0.0),
    };
    let embeddings = m.vocab as f64 * h * if m.tied_embeddings { 1.0 } else { 2.0 };
    let params = layers * attention
        + (layers - moe_layers) * mlp
        + moe_layers * (experts * expert + shared)
        + embeddings;
    if params > limits::PARAMS {
        return Err(c.fail(
            &[
                ("model.hidden", v(m.hidden)),
                ("model.layers", v(m.layers)),
                ("model.ffn_hidden", v(m.ffn_hidden)),
                ("model.experts", v(m.moe.as_ref().map_or(0, |x| x.experts))),
                ("model.vocab", v(m.vocab)),
            ],
            format!(
                "the model would have about {params:.3e} parameters, beyond twin's limit of {:.3e} (2^48)",
                limits::PARAMS
            ),
            "a smaller model",
        ));
    }
    let tokens = s.training.micro_batch as f64 * m.seq_len as f64;
    let active = layers * attention
        + (layers - moe_layers) * mlp
        + moe_layers * (top_k * expert + shared)
        + m.vocab as f64 * h;
    let flops = 2.0 * tokens * active + 4.0 * tokens * m.seq_len as f64 * q * layers;
    if flops > limits::MICROBATCH_FORWARD_FLOPS {
        return Err(c.fail(
            &[
                ("model.seq_len", v(m.seq_len)),
                ("training.micro_batch", v(s.training.micro_batch)),
                ("model.hidden", v(m.hidden)),
                ("model.layers", v(m.layers)),
            ],
            format!(
                "one micro batch's forward pass would be about {flops:.3e} FLOPs, beyond twin's per-op limit of {:.3e} (2^60)",
                limits::MICROBATCH_FORWARD_FLOPS
            ),
            "a shorter sequence, a smaller micro batch or a smaller model",
        ));
    }
    Ok(())
}
