//! Reading a profile file: TOML through serde (unknown keys and wrong types rejected), then
//! range checks on every number. Errors are [`ScenarioError`]s, the one located input-error
//! type of twin: file, line and column, key, value, and what is allowed.

use super::{
    AttentionCurveParams, AttentionParams, FitQuality, GemmParams, LinkParams, Param, Profile,
    Source,
};
use crate::scenario::error::{serde_kind, Ctx, LineIndex};
use crate::scenario::{ErrorKind, ScenarioError};
use crate::topology::Algorithm;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;
use toml::Spanned;

type Result<T> = std::result::Result<T, ScenarioError>;

mod assemble;
mod host;

/// Largest profile file read (a profile is a few kilobytes).
const MAX_PROFILE_BYTES: u64 = 1 << 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParam {
    value: Spanned<f64>,
    source: Spanned<String>,
    #[serde(rename = "ref")]
    reference: String,
    ci95: Option<Spanned<[f64; 2]>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPeak {
    fp32: RawParam,
    tf32: RawParam,
    fp16: RawParam,
    bf16: RawParam,
    fp8: RawParam,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGpu {
    name: String,
    sm_count: RawParam,
    hbm_bandwidth_bytes_per_s: RawParam,
    peak_flops_per_s: RawPeak,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGemm {
    max_efficiency: Option<RawParam>,
    bf16_flops_per_s: Option<RawParam>,
    k_half: RawParam,
    tile_m: RawParam,
    tile_n: RawParam,
    ramp_ns: RawParam,
    #[serde(default)]
    ramp_per_product: bool,
    operand_bytes_per_s: Option<RawParam>,
    operand_cache_bytes: Option<RawParam>,
    pack_bytes_per_s: Option<RawParam>,
    cold_ramp_ns: Option<RawParam>,
    shape_factors: Option<toml::Spanned<Vec<Vec<f64>>>>,
    /// `[gemm.fp8]`: FP8 GEMMs' own curve.
    fp8: Option<RawGemmCurve>,
    /// `[gemm.fp8_rowwise]`: FP8 GEMMs with a scale per row of each operand.
    fp8_rowwise: Option<RawGemmCurve>,
    /// `[gemm.fp8_blockwise]`: FP8 GEMMs with a scale per 1 x 128 / 128 x 128 block.
    fp8_blockwise: Option<RawGemmCurve>,
    /// `[gemm.fp8_fast_accum]`: per-tensor FP8 GEMMs with fast accumulation (forward).
    fp8_fast_accum: Option<RawGemmCurve>,
}

/// A dtype's own GEMM curve (`[gemm.fp8]`, `[gemm.fp8_rowwise]`, `[gemm.fp8_blockwise]`):
/// efficiency against that
/// dtype's peak.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGemmCurve {
    max_efficiency: RawParam,
    k_half: RawParam,
    tile_m: RawParam,
    tile_n: RawParam,
    ramp_ns: RawParam,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMemory {
    efficiency: Option<RawParam>,
    bandwidth_bytes_per_s: Option<RawParam>,
    alloc_bytes_per_s: Option<RawParam>,
    alloc_fixed_ns: Option<RawParam>,
    spill_bytes: Option<RawParam>,
    spill_efficiency: Option<RawParam>,
    cold_efficiency: Option<RawParam>,
    state_weight: Option<RawParam>,
    state_resident_bytes: Option<RawParam>,
    state_evicted_bytes: Option<RawParam>,
    state_resident_efficiency: Option<RawParam>,
    state_evicted_efficiency: Option<RawParam>,
    state_decay_after_ns: Option<RawParam>,
    state_lifetime_ns: Option<RawParam>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    cores: RawParam,
    interruptions_per_s: Option<RawParam>,
    interruption_mean_ns: Option<RawParam>,
    wake_ns: Option<RawParam>,
    wake_per_idle: Option<RawParam>,
    handoff_ns: Option<RawParam>,
    compute_weight: Option<RawParam>,
    p2p_cpu_share: Option<RawParam>,
    memory_cores: Option<RawParam>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKernel {
    launch_ns: RawParam,
    op_overhead_ns: Option<RawParam>,
    #[serde(default)]
    launch_per_op: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    bandwidth_bytes_per_s: RawParam,
    latency_ns: RawParam,
    efficiency: RawParam,
    p2p_latency_ns: Option<RawParam>,
    p2p_bandwidth_bytes_per_s: Option<RawParam>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNvls {
    efficiency: RawParam,
    min_bytes: RawParam,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNetwork {
    algorithm: Option<Spanned<String>>,
    intra: RawLink,
    inter: RawLink,
    nvls: Option<RawNvls>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOverlap {
    compute_slowdown: RawParam,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAttentionCurve {
    max_efficiency: RawParam,
    keys_half: RawParam,
    head_dim_half: RawParam,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAttentionBackend {
    forward: Option<RawAttentionCurve>,
    backward: Option<RawAttentionCurve>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAttention {
    backend: Option<Spanned<String>>,
    flash: Option<RawAttentionBackend>,
    cudnn: Option<RawAttentionBackend>,
    triton: Option<RawAttentionBackend>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCheckpoint {
    bandwidth_bytes_per_s: RawParam,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFit {
    method: String,
    data: String,
    samples: u64,
    rms_relative_error: f64,
    max_relative_error: f64,
    #[serde(default)]
    holdout_samples: u64,
    #[serde(default)]
    holdout_max_relative_error: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    name: String,
    #[serde(default)]
    description: String,
    gpu: RawGpu,
    gemm: RawGemm,
    memory: RawMemory,
    kernel: RawKernel,
    network: RawNetwork,
    overlap: Option<RawOverlap>,
    attention: Option<RawAttention>,
    checkpoint: Option<RawCheckpoint>,
    host: Option<RawHost>,
    fit: Option<RawFit>,
    /// Where a calibration ran (machine, date, backend, versions): kept for people; nothing
    /// in the cost model depends on it. Values of any TOML type are kept as text.
    #[serde(default)]
    provenance: BTreeMap<String, toml::Value>,
}

/// Reads and checks a profile file.
pub fn load(path: &Path) -> Result<Profile> {
    let origin = path.display().to_string();
    let io_error = |message: String| ScenarioError {
        kind: ErrorKind::Io,
        origin: origin.clone(),
        line: None,
        column: None,
        key: String::new(),
        value: String::new(),
        message,
        allowed: String::new(),
    };
    let meta =
        std::fs::metadata(path).map_err(|e| io_error(format!("cannot read profile: {e}")))?;
    if meta.len() > MAX_PROFILE_BYTES {
        return Err(io_error(format!(
            "profile is {} bytes; at most {MAX_PROFILE_BYTES} are read",
            meta.len()
        )));
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| io_error(format!("cannot read profile: {e}")))?;
    parse_str(&text, &origin)
}

/// Parses and checks profile text; `origin` names it in errors.
pub fn parse_str(text: &str, origin: &str) -> Result<Profile> {
    let ctx = Ctx {
        origin: origin.to_string(),
    };
    let lines = LineIndex::new(text);
    let raw: RawProfile = toml::from_str(text).map_err(|e| {
        let loc = e.span().map(|s| lines.loc(s.start));
        let message = e.message().trim().to_string();
        ctx.error(serde_kind(&message), loc.as_ref(), "", "", message, "")
    })?;
    Checker {
        ctx: &ctx,
        lines: &lines,
    }
    .profile(raw)
}

/// What range a number must lie in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Range {
    /// > 0 (rates, bandwidths).
    Positive,
    /// >= 0 (times, thresholds).
    NonNegative,
    /// (0, 1] (efficiencies).
    Fraction,
    /// [0, 1) (slowdowns).
    Slowdown,
    /// >= 1, a whole number (counts, tiles).
    Count,
    /// >= 1 (capacities in units of one core's).
    AtLeastOne,
}

impl Range {
    pub(crate) fn allows(self, v: f64) -> bool {
        v.is_finite()
            && match self {
                Range::Positive => v > 0.0,
                Range::NonNegative => v >= 0.0,
                Range::Fraction => v > 0.0 && v <= 1.0,
                Range::Slowdown => (0.0..1.0).contains(&v),
                Range::Count => v >= 1.0 && v.fract() == 0.0,
                Range::AtLeastOne => v >= 1.0,
            }
    }

    fn describe(self) -> &'static str {
        match self {
            Range::Positive => "a finite number > 0",
            Range::NonNegative => "a finite number >= 0",
            Range::Fraction => "a fraction in (0, 1]",
            Range::Slowdown => "a fraction in [0, 1)",
            Range::Count => "a whole number >= 1",
            Range::AtLeastOne => "a finite number >= 1",
        }
    }
}

struct Checker<'a> {
    ctx: &'a Ctx,
    lines: &'a LineIndex<'a>,
}

impl Checker<'_> {
    fn invalid(
        &self,
        span: std::ops::Range<usize>,
        key: &str,
        value: String,
        message: &str,
        allowed: &str,
    ) -> ScenarioError {
        self.ctx
            .invalid_at(self.lines, span, key, &value, message, allowed)
    }

    fn param(&self, key: &str, raw: RawParam, range: Range) -> Result<Param> {
        let value = *raw.value.get_ref();
        if !range.allows(value) {
            return Err(self.invalid(
                raw.value.span(),
                &format!("{key}.value"),
                value.to_string(),
                "out of range",
                range.describe(),
            ));
        }
        let source = match raw.source.get_ref().as_str() {
            "datasheet" => Source::Datasheet,
            "published" => Source::Published,
            "fitted" => Source::Fitted,
            other => {
                return Err(self.invalid(
                    raw.source.span(),
                    &format!("{key}.source"),
                    format!("\"{other}\""),
                    "unknown source",
                    "datasheet, published, fitted",
                ))
            }
        };
        let ci95 = match raw.ci95 {
            None => None,
            Some(ci) => {
                let [lo, hi] = *ci.get_ref();
                if !(lo.is_finite() && hi.is_finite() && lo <= value && value <= hi) {
                    return Err(self.invalid(
                        ci.span(),
                        &format!("{key}.ci95"),
                        format!("[{lo}, {hi}]"),
                        &format!("the interval must be finite and contain the value {value}"),
                        "[lo, hi] with lo <= value <= hi",
                    ));
                }
                Some([lo, hi])
            }
        };
        Ok(Param {
            value,
            source,
            reference: raw.reference,
            ci95,
        })
    }

    fn link(&self, key: &str, raw: RawLink) -> Result<LinkParams> {
        Ok(LinkParams {
            bandwidth_bytes_per_s: self.param(
                &format!("{key}.bandwidth_bytes_per_s"),
                raw.bandwidth_bytes_per_s,
                Range::Positive,
            )?,
            latency_ns: self.param(
                &format!("{key}.latency_ns"),
                raw.latency_ns,
                Range::NonNegative,
            )?,
            efficiency: self.param(
                &format!("{key}.efficiency"),
                raw.efficiency,
                Range::Fraction,
            )?,
            p2p_latency_ns: raw
                .p2p_latency_ns
                .map(|l| self.param(&format!("{key}.p2p_latency_ns"), l, Range::NonNegative))
                .transpose()?,
            p2p_bandwidth_bytes_per_s: raw
                .p2p_bandwidth_bytes_per_s
                .map(|b| {
                    self.param(
                        &format!("{key}.p2p_bandwidth_bytes_per_s"),
                        b,
                        Range::Positive,
                    )
                })
                .transpose()?,
        })
    }

    fn algorithm(&self, raw: Option<Spanned<String>>) -> Result<Option<Algorithm>> {
        let Some(raw) = raw else { return Ok(None) };
        Ok(match raw.get_ref().as_str() {
            "auto" => None,
            "ring" => Some(Algorithm::Ring),
            "tree" => Some(Algorithm::Tree),
            "hierarchical" => Some(Algorithm::Hierarchical),
            "nvls" => Some(Algorithm::Nvls),
            other => {
                return Err(self.invalid(
                    raw.span(),
                    "network.algorithm",
                    format!("\"{other}\""),
                    "unknown collective algorithm",
                    "auto, ring, tree, hierarchical, nvls",
                ))
            }
        })
    }

    /// A rate given either as a fraction of a datasheet figure (`rel_key`) or as an absolute
    /// number (`abs_key`, a calibration's fit, never clipped against the datasheet): exactly
    /// one of the two. Returns the fraction, derived as absolute / `datasheet` (not sampled:
    /// no interval) when the file gives the absolute, and the absolute when given.
    fn fraction_or_absolute(
        &self,
        (rel_key, rel): (&str, Option<RawParam>),
        (abs_key, abs): (&str, Option<RawParam>),
        datasheet: (&str, &Param),
    ) -> Result<(Param, Option<Param>)> {
        let allowed = format!("exactly one of {rel_key} and {abs_key}");
        match (rel, abs) {
            (Some(r), None) => Ok((self.param(rel_key, r, Range::Fraction)?, None)),
            (None, Some(a)) => {
                let a = self.param(abs_key, a, Range::Positive)?;
                let derived = super::derived_fraction(&a, abs_key, datasheet.1, datasheet.0);
                Ok((derived, Some(a)))
            }
            (Some(_), Some(a)) => Err(self.invalid(
                a.value.span(),
                abs_key,
                a.value.get_ref().to_string(),
                &format!("{rel_key} is also given"),
                &allowed,
            )),
            (None, None) => Err(self.ctx.error(
                ErrorKind::Missing,
                None,
                rel_key,
                "",
                format!("missing {rel_key} (or {abs_key})"),
                &allowed,
            )),
        }
    }

    /// Two keys that come together (`memory.spill_*`, `host.interruption*`, `host.wake_*`):
    /// both or neither.
    fn pair(
        &self,
        (a_key, a, a_range): (&str, Option<RawParam>, Range),
        (b_key, b, b_range): (&str, Option<RawParam>, Range),
    ) -> Result<(Option<Param>, Option<Param>)> {
        let both = format!("both {a_key} and {b_key}, or neither");
        match (a, b) {
            (None, None) => Ok((None, None)),
            (Some(a), Some(b)) => Ok((
                Some(self.param(a_key, a, a_range)?),
                Some(self.param(b_key, b, b_range)?),
            )),
            (Some(a), None) => Err(self.invalid(
                a.value.span(),
                a_key,
                a.value.get_ref().to_string(),
                &format!("{b_key} is missing"),
                &both,
            )),
            (None, Some(b)) => Err(self.invalid(
                b.value.span(),
                b_key,
                b.value.get_ref().to_string(),
                &format!("{a_key} is missing"),
                &both,
            )),
        }
    }
}
