//! The framework file format (docs/reference/frameworks.md): TOML read through serde with
//! unknown keys refused, every value written as `{ value = ..., ref = "..." }` so that none
//! comes without its source, then each name and range checked. Errors are located
//! [`ScenarioError`]s naming the file, line, key, value and what is allowed.

use super::rules::{Cond, Limit, COUNTS, FLAGS};
use super::*;
use crate::scenario::error::{closest, Ctx, LineIndex, ScenarioError};
use crate::scenario::types::PipelineSchedule;
use serde::Deserialize;
use toml::Spanned;

type Result<T> = std::result::Result<T, ScenarioError>;

/// A value with its source.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Cited<T> {
    value: Spanned<T>,
    #[serde(rename = "ref")]
    reference: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAttention {
    backend: Cited<String>,
    cp_algorithm: Cited<String>,
    kv_heads_repeated: Cited<bool>,
    backend_from_sm90: Option<Cited<String>>,
    cp_merge: Option<Cited<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOverlaps {
    grad_reduce: Cited<String>,
    grad_reduce_bucketed: Cited<bool>,
    param_gather: Cited<String>,
    fsdp_unit: Cited<String>,
    fsdp_prefetch: Cited<u64>,
    reshard_after_forward: Cited<String>,
    tp_comm_overlap: Cited<bool>,
    tp_comm_overlap_sms: Cited<u64>,
    tp_comm_overlap_backward: Cited<bool>,
    p2p_overlap: Cited<bool>,
    moe_a2a_overlap: Option<Cited<bool>>,
    grad_reduce_pipelined: Option<Cited<String>>,
    fsdp_copies: Option<Cited<bool>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawElementwise {
    kernels: Cited<u64>,
    hidden_passes: Cited<u64>,
    ffn_passes: Cited<u64>,
    extra_forward_kernels: Option<Cited<u64>>,
    extra_backward_kernels: Option<Cited<u64>>,
    extra_forward_hidden_passes: Option<Cited<u64>>,
    extra_backward_hidden_passes: Option<Cited<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFusions {
    fp8_amax_fused: Cited<bool>,
    eager: RawElementwise,
    compiled: RawElementwise,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOptimizer {
    kernel: Cited<String>,
    master_weights: Cited<String>,
    grad_buffer: Cited<String>,
    clip_scale: Option<Cited<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMemory {
    contiguous_grad_buffer: Cited<bool>,
    autocast_weight_copies: Cited<bool>,
    fp32_params: Option<Cited<bool>>,
    loss_logits_bytes: Cited<u64>,
    loss_backward_bytes: Option<Cited<u64>>,
    allocator_slack_fraction: Cited<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRecompute {
    selective: Cited<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLaunch {
    cuda_graphs_kernel_gap_ns: Cited<u64>,
    host_per_kernel_ns: Option<Cited<u64>>,
    compiled_host_per_kernel_ns: Option<Cited<u64>>,
    cuda_graphs_host_per_kernel_ns: Option<Cited<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReport {
    attention_flops: Option<Cited<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMoe {
    expert_tp_gather: Option<Cited<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRange {
    min: Option<u64>,
    max: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWhen {
    tp: Option<Spanned<RawRange>>,
    pp: Option<Spanned<RawRange>>,
    dp: Option<Spanned<RawRange>>,
    cp: Option<Spanned<RawRange>>,
    ep: Option<Spanned<RawRange>>,
    vpp: Option<Spanned<RawRange>>,
    zero: Option<Spanned<RawRange>>,
    fsdp: Option<bool>,
    sequence_parallel: Option<bool>,
    compile: Option<bool>,
    cuda_graphs: Option<bool>,
    fp8_param_gather: Option<bool>,
    schedule: Option<Spanned<Vec<Spanned<String>>>>,
    offload: Option<Spanned<Vec<Spanned<String>>>>,
    fp8_recipe: Option<Spanned<Vec<Spanned<String>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimit {
    when: Spanned<RawWhen>,
    reason: Spanned<String>,
    #[serde(rename = "ref")]
    reference: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    name: Spanned<String>,
    #[serde(default)]
    #[allow(dead_code)]
    description: String,
    attention: RawAttention,
    overlaps: RawOverlaps,
    fusions: RawFusions,
    optimizer: RawOptimizer,
    memory: RawMemory,
    recompute: RawRecompute,
    launch: RawLaunch,
    report: Option<RawReport>,
    moe: Option<RawMoe>,
    #[serde(default)]
    cannot_run: Vec<RawLimit>,
}

const FSDP_UNITS: [(&str, FsdpUnit); 2] = [("layer", FsdpUnit::Layer), ("chunk", FsdpUnit::Chunk)];
const SELECTIVE: [(&str, SelectiveRecompute); 2] = [
    ("attention-core", SelectiveRecompute::AttentionCore),
    ("every-second-matmul", SelectiveRecompute::EverySecondMatmul),
];
const GRAD_REDUCES: [(&str, GradReduce); 3] = [
    ("last-microbatch", GradReduce::LastMicrobatch),
    ("every-microbatch", GradReduce::EveryMicrobatch),
    ("after-backward", GradReduce::AfterBackward),
];
const PARAM_GATHERS: [(&str, ParamGather); 3] = [
    (
        "first-microbatch-forward",
        ParamGather::FirstMicrobatchForward,
    ),
    ("per-layer", ParamGather::PerLayer),
    ("before-forward", ParamGather::BeforeForward),
];
const RESHARDS: [(&str, Reshard); 3] = [
    ("always", Reshard::Always),
    ("never", Reshard::Never),
    ("unless-pipelined", Reshard::UnlessPipelined),
];
const CP_MERGES: [(&str, CpMerge); 2] = [
    ("fused", CpMerge::Fused),
    ("eager-fp32", CpMerge::EagerFp32),
];

/// Counts in a framework file (kernels, passes, layers) are at most this.
const MAX_COUNT: u64 = 1 << 16;

/// Parses and checks a framework file's text; `origin` names it in errors. The result's
/// `origin` is a `File` of `origin`; the bundled loader replaces it.
pub fn parse_str(text: &str, origin: &str) -> Result<Framework> {
    let ctx = Ctx {
        origin: origin.to_string(),
    };
    let lines = LineIndex::new(text);
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let loc = e.span().map(|s| lines.loc(s.start));
        let message = e.message().trim().to_string();
        let kind = crate::scenario::error::serde_kind(&message);
        match unknown_field(&message) {
            Some((key, allowed)) => ctx.error(kind, loc.as_ref(), key, "", "unknown key", allowed),
            None => ctx.error(kind, loc.as_ref(), "", "", message, ""),
        }
    })?;
    Reader {
        ctx: &ctx,
        lines: &lines,
    }
    .file(raw)
}

/// The key and the allowed keys of serde's "unknown field `x`, expected one of `a`, `b`".
fn unknown_field(message: &str) -> Option<(&str, &str)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (key, rest) = rest.split_once('`')?;
    let allowed = rest.strip_prefix(", expected ")?;
    Some((key, allowed.strip_prefix("one of ").unwrap_or(allowed)))
}

struct Reader<'a> {
    ctx: &'a Ctx,
    lines: &'a LineIndex<'a>,
}

impl Reader<'_> {
    fn invalid(
        &self,
        span: std::ops::Range<usize>,
        key: &str,
        value: String,
        message: impl Into<String>,
        allowed: impl Into<String>,
    ) -> ScenarioError {
        self.ctx
            .invalid_at(self.lines, span, key, &value, message, allowed)
    }

    /// Every value has a source: an empty `ref` is refused.
    fn cited<T: Clone>(&self, key: &str, c: &Cited<T>) -> Result<T> {
        if c.reference.get_ref().trim().is_empty() {
            return Err(self.invalid(
                c.reference.span(),
                &format!("{key}.ref"),
                "\"\"".into(),
                "every value needs its source",
                "repo@commit:path, or a paper and its table",
            ));
        }
        Ok(c.value.get_ref().clone())
    }

    fn name<T: Copy>(&self, key: &str, c: &Cited<String>, names: &[(&str, T)]) -> Result<T> {
        let got = self.cited(key, c)?;
        self.lookup(&format!("{key}.value"), &got, c.value.span(), names)
    }

    fn lookup<T: Copy>(
        &self,
        key: &str,
        got: &str,
        span: std::ops::Range<usize>,
        names: &[(&str, T)],
    ) -> Result<T> {
        if let Some((_, v)) = names.iter().find(|(n, _)| *n == got) {
            return Ok(*v);
        }
        let mut message = "unknown name".to_string();
        if let Some(near) = closest(got, names.iter().map(|(n, _)| *n)) {
            message.push_str(&format!("; did you mean `{near}`?"));
        }
        let allowed: Vec<String> = names.iter().map(|(n, _)| format!("`{n}`")).collect();
        Err(self.invalid(span, key, format!("\"{got}\""), message, allowed.join(", ")))
    }

    fn count(&self, key: &str, c: &Cited<u64>, min: u64, max: u64) -> Result<u64> {
        let v = self.cited(key, c)?;
        if !(min..=max).contains(&v) {
            return Err(self.invalid(
                c.value.span(),
                &format!("{key}.value"),
                v.to_string(),
                "out of range",
                format!("{min} ..= {max}"),
            ));
        }
        Ok(v)
    }

    fn elementwise(&self, key: &str, e: &RawElementwise) -> Result<Elementwise> {
        let small = |k: &str, c: &Cited<u64>| -> Result<u32> {
            let v = self.count(&format!("{key}.{k}"), c, 0, MAX_COUNT)?;
            Ok(u32::try_from(v).unwrap_or(u32::MAX))
        };
        Ok(Elementwise {
            kernels: small("kernels", &e.kernels)?,
            hidden_passes: small("hidden_passes", &e.hidden_passes)?,
            ffn_passes: small("ffn_passes", &e.ffn_passes)?,
            extra_forward_kernels: e
                .extra_forward_kernels
                .as_ref()
                .map(|c| small("extra_forward_kernels", c))
                .transpose()?
                .unwrap_or(0),
            extra_backward_kernels: e
                .extra_backward_kernels
                .as_ref()
                .map(|c| small("extra_backward_kernels", c))
                .transpose()?
                .unwrap_or(0),
            extra_forward_hidden_passes: e
                .extra_forward_hidden_passes
                .as_ref()
                .map(|c| small("extra_forward_hidden_passes", c))
                .transpose()?
                .unwrap_or(0),
            extra_backward_hidden_passes: e
                .extra_backward_hidden_passes
                .as_ref()
                .map(|c| small("extra_backward_hidden_passes", c))
                .transpose()?
                .unwrap_or(0),
        })
    }

    fn file(&self, raw: RawFile) -> Result<Framework> {
        let o = &raw.overlaps;
        let overlaps = Overlaps {
            grad_reduce: self.name("overlaps.grad_reduce", &o.grad_reduce, &GRAD_REDUCES)?,
            grad_reduce_bucketed: self
                .cited("overlaps.grad_reduce_bucketed", &o.grad_reduce_bucketed)?,
            param_gather: self.name("overlaps.param_gather", &o.param_gather, &PARAM_GATHERS)?,
            fsdp_unit: self.name("overlaps.fsdp_unit", &o.fsdp_unit, &FSDP_UNITS)?,
            fsdp_prefetch: u32::try_from(self.count(
                "overlaps.fsdp_prefetch",
                &o.fsdp_prefetch,
                0,
                MAX_COUNT,
            )?)
            .unwrap_or(u32::MAX),
            reshard_after_forward: self.name(
                "overlaps.reshard_after_forward",
                &o.reshard_after_forward,
                &RESHARDS,
            )?,
            tp_comm_overlap: self.cited("overlaps.tp_comm_overlap", &o.tp_comm_overlap)?,
            tp_comm_overlap_sms: u32::try_from(self.count(
                "overlaps.tp_comm_overlap_sms",
                &o.tp_comm_overlap_sms,
                0,
                1024,
            )?)
            .unwrap_or(u32::MAX),
            tp_comm_overlap_backward: self.cited(
                "overlaps.tp_comm_overlap_backward",
                &o.tp_comm_overlap_backward,
            )?,
            p2p_overlap: self.cited("overlaps.p2p_overlap", &o.p2p_overlap)?,
            moe_a2a_overlap: o
                .moe_a2a_overlap
                .as_ref()
                .map(|c| self.cited("overlaps.moe_a2a_overlap", c))
                .transpose()?
                .unwrap_or(false),
            grad_reduce_pipelined: o
                .grad_reduce_pipelined
                .as_ref()
                .map(|c| self.name("overlaps.grad_reduce_pipelined", c, &GRAD_REDUCES))
                .transpose()?,
            fsdp_copies: o
                .fsdp_copies
                .as_ref()
                .map(|c| self.cited("overlaps.fsdp_copies", c))
                .transpose()?
                .unwrap_or(false),
        };
        let fusions = Fusions {
            fp8_amax_fused: self.cited("fusions.fp8_amax_fused", &raw.fusions.fp8_amax_fused)?,
            eager: self.elementwise("fusions.eager", &raw.fusions.eager)?,
            compiled: self.elementwise("fusions.compiled", &raw.fusions.compiled)?,
        };
        let op = &raw.optimizer;
        let optimizer = OptimizerImpl {
            kernel: self.name("optimizer.kernel", &op.kernel, &OPTIMIZER_KERNELS)?,
            master_weights: self.name("optimizer.master_weights", &op.master_weights, &DTYPES)?,
            grad_buffer: self.name("optimizer.grad_buffer", &op.grad_buffer, &DTYPES)?,
            clip_scale: op
                .clip_scale
                .as_ref()
                .map(|c| self.name("optimizer.clip_scale", c, &CLIP_SCALES))
                .transpose()?
                .unwrap_or_default(),
        };
        let m = &raw.memory;
        let slack = self.cited(
            "memory.allocator_slack_fraction",
            &m.allocator_slack_fraction,
        )?;
        if !(0.0..=1.0).contains(&slack) {
            return Err(self.invalid(
                m.allocator_slack_fraction.value.span(),
                "memory.allocator_slack_fraction.value",
                slack.to_string(),
                "out of range",
                "0 ..= 1",
            ));
        }
        let memory = MemoryHabits {
            contiguous_grad_buffer: self
                .cited("memory.contiguous_grad_buffer", &m.contiguous_grad_buffer)?,
            autocast_weight_copies: self
                .cited("memory.autocast_weight_copies", &m.autocast_weight_copies)?,
            fp32_params: m
                .fp32_params
                .as_ref()
                .map(|c| self.cited("memory.fp32_params", c))
                .transpose()?
                .unwrap_or(false),
            loss_logits_bytes: self.count(
                "memory.loss_logits_bytes",
                &m.loss_logits_bytes,
                0,
                8,
            )?,
            loss_backward_bytes: m
                .loss_backward_bytes
                .as_ref()
                .map(|c| self.count("memory.loss_backward_bytes", c, 0, 64))
                .transpose()?
                .unwrap_or(0),
            allocator_slack_fraction: slack,
        };
        let recompute = RecomputeHabits {
            selective: self.name("recompute.selective", &raw.recompute.selective, &SELECTIVE)?,
        };
        let host_ns = |key: &str, c: &Option<Cited<u64>>| -> Result<Option<u64>> {
            c.as_ref()
                .map(|c| self.count(key, c, 0, 1_000_000_000))
                .transpose()
        };
        let l = &raw.launch;
        let host_per_kernel_ns =
            host_ns("launch.host_per_kernel_ns", &l.host_per_kernel_ns)?.unwrap_or(0);
        let launch = Launch {
            cuda_graphs_kernel_gap_ns: self.count(
                "launch.cuda_graphs_kernel_gap_ns",
                &l.cuda_graphs_kernel_gap_ns,
                0,
                1_000_000_000,
            )?,
            host_per_kernel_ns,
            compiled_host_per_kernel_ns: host_ns(
                "launch.compiled_host_per_kernel_ns",
                &l.compiled_host_per_kernel_ns,
            )?
            .unwrap_or(host_per_kernel_ns),
            cuda_graphs_host_per_kernel_ns: host_ns(
                "launch.cuda_graphs_host_per_kernel_ns",
                &l.cuda_graphs_host_per_kernel_ns,
            )?
            .unwrap_or(0),
        };
        let cannot_run = raw
            .cannot_run
            .iter()
            .enumerate()
            .map(|(i, l)| self.limit(i, l))
            .collect::<Result<Vec<_>>>()?;
        Ok(Framework {
            name: raw.name.get_ref().clone(),
            origin: Origin::File(self.ctx.origin.clone()),
            attention_backend: self.name(
                "attention.backend",
                &raw.attention.backend,
                &ATTENTION_BACKENDS,
            )?,
            attention_backend_from_sm90: raw
                .attention
                .backend_from_sm90
                .as_ref()
                .map(|b| self.name("attention.backend_from_sm90", b, &ATTENTION_BACKENDS))
                .transpose()?,
            cp_algorithm: self.name(
                "attention.cp_algorithm",
                &raw.attention.cp_algorithm,
                &crate::scenario::CpAlgorithm::ALL,
            )?,
            kv_heads_repeated: self.cited(
                "attention.kv_heads_repeated",
                &raw.attention.kv_heads_repeated,
            )?,
            cp_merge: raw
                .attention
                .cp_merge
                .as_ref()
                .map(|c| self.name("attention.cp_merge", c, &CP_MERGES))
                .transpose()?
                .unwrap_or(CpMerge::Fused),
            overlaps,
            fusions,
            optimizer,
            memory,
            recompute,
            launch,
            attention_flops: raw
                .report
                .as_ref()
                .and_then(|r| r.attention_flops.as_ref())
                .map(|c| self.name("report.attention_flops", c, &ATTENTION_FLOPS))
                .transpose()?
                .unwrap_or_default(),
            expert_tp_gather: raw
                .moe
                .as_ref()
                .and_then(|m| m.expert_tp_gather.as_ref())
                .map(|c| self.name("moe.expert_tp_gather", c, &EXPERT_TP_GATHERS))
                .transpose()?
                .unwrap_or_default(),
            cannot_run,
        })
    }

    fn limit(&self, i: usize, l: &RawLimit) -> Result<Limit> {
        let key = format!("cannot_run[{i}]");
        for (k, text) in [("reason", &l.reason), ("ref", &l.reference)] {
            if text.get_ref().trim().is_empty() {
                return Err(self.invalid(
                    text.span(),
                    &format!("{key}.{k}"),
                    "\"\"".into(),
                    "a limit says why, and where the framework says so",
                    "non-empty text",
                ));
            }
        }
        let w = l.when.get_ref();
        let mut when = Vec::new();
        let ranges = [&w.tp, &w.pp, &w.dp, &w.cp, &w.ep, &w.vpp, &w.zero];
        for ((name, count, _), range) in COUNTS.iter().zip(ranges) {
            let Some(r) = range else { continue };
            let (min, max) = (r.get_ref().min, r.get_ref().max);
            if min.is_none() && max.is_none() || min.unwrap_or(0) > max.unwrap_or(u64::MAX) {
                return Err(self.invalid(
                    r.span(),
                    &format!("{key}.when.{name}"),
                    format!("{{ min = {min:?}, max = {max:?} }}"),
                    "an empty or unbounded range",
                    "{ min = N }, { max = N } or { min = N, max = M } with N <= M",
                ));
            }
            when.push(Cond::Range {
                key: *count,
                min: min.unwrap_or(0),
                max: max.unwrap_or(u64::MAX),
            });
        }
        let flags = [
            w.fsdp,
            w.sequence_parallel,
            w.compile,
            w.cuda_graphs,
            w.fp8_param_gather,
        ];
        for ((_, flag, _), value) in FLAGS.iter().zip(flags) {
            if let Some(value) = value {
                when.push(Cond::Flag { key: *flag, value });
            }
        }
        if let Some(list) = &w.schedule {
            let names = self.names(
                &format!("{key}.when.schedule"),
                list,
                &PipelineSchedule::ALL,
            )?;
            when.push(Cond::Schedule(names));
        }
        if let Some(list) = &w.offload {
            let names = self.names(
                &format!("{key}.when.offload"),
                list,
                &crate::scenario::parse::OFFLOADS,
            )?;
            when.push(Cond::Offload(names));
        }
        if let Some(list) = &w.fp8_recipe {
            let names = self.names(
                &format!("{key}.when.fp8_recipe"),
                list,
                &crate::scenario::types::Fp8Recipe::ALL,
            )?;
            when.push(Cond::Fp8Recipe(names));
        }
        if when.is_empty() {
            return Err(self.invalid(
                l.when.span(),
                &format!("{key}.when"),
                "{}".into(),
                "a limit with no condition would refuse every scenario",
                "at least one of tp, pp, dp, cp, ep, vpp, zero, fsdp, sequence_parallel, compile, cuda_graphs, schedule, offload, fp8_recipe",
            ));
        }
        Ok(Limit {
            when,
            reason: l.reason.get_ref().clone(),
            reference: l.reference.get_ref().clone(),
        })
    }

    fn names<T: Copy>(
        &self,
        key: &str,
        list: &Spanned<Vec<Spanned<String>>>,
        table: &[(&str, T)],
    ) -> Result<Vec<T>> {
        if list.get_ref().is_empty() {
            return Err(self.invalid(
                list.span(),
                key,
                "[]".into(),
                "an empty list matches nothing",
                "one or more names",
            ));
        }
        list.get_ref()
            .iter()
            .map(|n| self.lookup(key, n.get_ref(), n.span(), table))
            .collect()
    }
}
