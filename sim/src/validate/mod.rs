//! `twin validate`: predict published training runs and say how far off the model is. Each
//! row of a published table (data/validation/throughput.toml layout) becomes one scenario
//! per published figure; the scenario is simulated like any other, and the predicted
//! TFLOP/s per GPU or iteration time is set against the published one.
//!
//! Rules that turn a row into a scenario (the rows do not spell everything out):
//! - GPU preset from `gpu`; the DGX node of that GPU (8 GPUs, NVSwitch, one NIC per GPU).
//! - fp16 mixed precision with fp16 gradients, as Megatron-LM trained GPT then (the A100 fp16
//!   and bf16 peaks are equal), Adam, no ZeRO, no flash attention (the published runs predate
//!   it and used Megatron's fused softmax).
//! - Gradient all-reduce not overlapped with the backward (Megatron-LM 2021-2022 reduced
//!   gradients after the backward) unless the row says `overlap_grad_reduce = true`.
//! - `micro_batch` 1 and the plain 1F1B schedule unless the row gives them.
//! - Layer granularity: each layer's tensor-parallel collectives sit between it and the next
//!   layer, as in Megatron (chunk granularity merges them and lets them overlap compute).
//! - `tflops_per_gpu` is compared with hardware FLOP/s (recompute included), as Megatron's
//!   SC'21 Table 1 counts it; iteration times with the simulated step time.
//! - Korthikanti's `iteration_s_full_recompute` is full recompute without sequence
//!   parallelism; `iteration_s_selective_sp` is selective recompute with it.
//!
//! Rows of the modern layout (they name their `precision`) follow [`modern`]'s rules instead.
//! A row twin cannot express is not an error of the whole table: it is listed with its reason
//! (the table's coverage), and the rest are compared.

// Errors are ScenarioErrors (the one located input-error type), large by design; they are the
// cold path of reading a file once, so boxing them would buy nothing.
#![allow(clippy::result_large_err)]

mod layers;
pub mod modern;
mod table;

use crate::profile::bundled::Pricing;
pub use layers::{
    fit_gemm_curve, layer_errors, layer_times, FitResult, LayerPrediction, LayerWork,
};
pub use table::{load_table, parse_table, LayerCase, LayerTiming, RunRow, Table};

use crate::profile::{check_matches, GpuMismatch, Profile};
use crate::scenario::{Scenario, ScenarioError};
use crate::setup::parse_str;
use crate::{predict_with, PredictError, PredictOptions};
use serde::Serialize;
use std::fmt::Write;

#[derive(Debug, thiserror::Error)]
pub enum ValidateError {
    #[error("row '{id}': {source}")]
    Scenario {
        id: String,
        #[source]
        source: ScenarioError,
    },
    #[error("row '{id}': {source}")]
    Predict {
        id: String,
        #[source]
        source: PredictError,
    },
    #[error("row '{id}': {source}")]
    Profile {
        id: String,
        #[source]
        source: GpuMismatch,
    },
    /// The bundled profile of the row's machine could not be read (a broken build).
    #[error("row '{id}': {message}")]
    Pricing { id: String, message: String },
    #[error(
        "row '{id}': no DGX node is known for GPU '{gpu}'; known: a100-sxm-80gb, h100-sxm-80gb"
    )]
    UnknownGpu { id: String, gpu: String },
    #[error("row '{id}': {reason}")]
    Unsupported { id: String, reason: String },
    #[error("the table has no [[run]] row with a published figure to compare")]
    NoRows,
}

/// One published figure against its prediction.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    pub id: String,
    /// Which published figure (`tflops_per_gpu`, `iteration_s_full_recompute`, ...).
    pub field: String,
    /// The layout the row was simulated with.
    pub layout: crate::json::Layout,
    pub published: f64,
    pub predicted: f64,
    /// Signed fractional error: `(predicted - published) / published`.
    pub error: f64,
    /// The summary groups the row belongs to (modern rows: precision, framework family,
    /// long context); empty for classic rows.
    pub groups: Vec<String>,
    /// Settings the row states that the prediction does not model (modern rows).
    pub unmodelled: Vec<String>,
    /// Whether the prediction has the row's layout fit in GPU memory, as the published run
    /// did; its peak and the GPU's usable memory, in GiB.
    pub fits: bool,
    pub peak_memory_gib: f64,
    pub usable_memory_gib: f64,
    /// FLOPs per token: the row's (its `tflops_per_gpu` over its `tokens_per_s_per_gpu`, when
    /// it publishes both), and twin's two counts of the row's model, attention over the full
    /// square (model FLOPs) and as the framework's log counts it.
    pub published_flops_per_token: Option<f64>,
    pub model_flops_per_token: f64,
    pub framework_flops_per_token: f64,
    /// The bundled profile that priced the row because no profile given describes its GPU
    /// ([`crate::profile::bundled`]); `None` otherwise.
    pub bundled_profile: Option<String>,
}

/// How far apart published and counted FLOPs per token may be before `twin validate` names the
/// row: either of twin's counts within 2% is a match.
pub const FLOPS_PER_TOKEN_TOLERANCE: f64 = 0.02;

impl Comparison {
    /// Whether the row publishes FLOPs per token that neither of twin's counts matches within
    /// [`FLOPS_PER_TOKEN_TOLERANCE`]: its model shape, or the FLOP convention of its source,
    /// differs from what twin simulated.
    pub fn flops_mismatch(&self) -> bool {
        self.published_flops_per_token.is_some_and(|p| {
            [self.model_flops_per_token, self.framework_flops_per_token]
                .iter()
                .all(|&c| relative_error(c, p).abs() > FLOPS_PER_TOKEN_TOLERANCE)
        })
    }
}

/// A row that could not be compared, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Uncovered {
    pub id: String,
    pub reason: String,
}

/// The errors of one group of rows.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupSummary {
    pub group: String,
    pub rows: usize,
    pub median_abs_error: f64,
    pub max_abs_error: f64,
    /// The row of the largest |error|.
    pub worst: String,
}

/// Every comparison of a table, with the summary statistics.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Validation {
    pub rows: Vec<Comparison>,
    pub median_abs_error: f64,
    pub max_abs_error: f64,
    /// Rows that could not be compared, with the reason (coverage).
    pub uncovered: Vec<Uncovered>,
    /// Per-group statistics, in first-seen order; empty when no row has groups.
    pub groups: Vec<GroupSummary>,
}

/// One scenario to simulate for one published figure.
pub struct Case {
    pub id: String,
    pub field: &'static str,
    pub published: f64,
    pub scenario: Scenario,
}

/// The node preset of a GPU preset.
fn node_for(gpu: &str) -> Option<&'static str> {
    match gpu {
        "a100-sxm-80gb" => Some("dgx-a100"),
        "h100-sxm-80gb" => Some("dgx-h100"),
        _ => None,
    }
}

/// The scenario of one row under one recompute / sequence-parallel setting (see the module
/// doc for the rules).
pub fn row_scenario(
    row: &RunRow,
    recompute: &str,
    sequence_parallel: bool,
) -> Result<Scenario, ValidateError> {
    let node = node_for(&row.gpu).ok_or_else(|| ValidateError::UnknownGpu {
        id: row.id.clone(),
        gpu: row.gpu.clone(),
    })?;
    let schedule = row.schedule.as_deref().unwrap_or("1f1b");
    let vpp = row.virtual_stages.unwrap_or(1);
    let text = format!(
        "name = {name:?}\n\
         [model]\nlayers = {layers}\nhidden = {hidden}\nheads = {heads}\nseq_len = {seq}\nvocab = {vocab}\n\
         [cluster]\ngpu = {gpu:?}\ngpus = {gpus}\nnode = {node:?}\n\
         [parallel]\ntp = {tp}\npp = {pp}\ndp = {dp}\nvpp = {vpp}\nschedule = {schedule:?}\n\
         sequence_parallel = {sequence_parallel}\n\
         [training]\nglobal_batch = {gb}\nmicro_batch = {mb}\nprecision = \"fp16\"\n\
         recompute = {recompute:?}\nflash_attention = false\noverlap_grad_reduce = {overlap}\n\
         [run]\ngranularity = \"layer\"\n",
        name = row.id,
        layers = row.layers,
        hidden = row.hidden,
        heads = row.heads,
        seq = row.seq_len,
        vocab = row.vocab,
        gpu = row.gpu,
        gpus = row.gpus,
        tp = row.tp,
        pp = row.pp,
        dp = row.dp,
        gb = row.global_batch,
        mb = row.micro_batch.unwrap_or(1),
        overlap = row.overlap_grad_reduce.unwrap_or(false),
    );
    parse_str(&text, &format!("<validation row {}>", row.id), &[]).map_err(|source| {
        ValidateError::Scenario {
            id: row.id.clone(),
            source,
        }
    })
}

/// The scenarios for every published figure of a row. A figure that is not a positive number
/// (a step of 0 s, or a TFLOP/s or tokens/s of 0 that implies an endless step) refuses the
/// row with the reason: compared, it would count as a perfect prediction.
pub fn row_cases(row: &RunRow) -> Result<Vec<Case>, ValidateError> {
    let cases = figures(row)?;
    match cases
        .iter()
        .find(|c| !(c.published.is_finite() && c.published > 0.0))
    {
        Some(c) => Err(ValidateError::Unsupported {
            id: row.id.clone(),
            reason: format!(
                "its published {} is {}: a published figure must be a positive number",
                c.field, c.published
            ),
        }),
        None => Ok(cases),
    }
}

/// The scenarios for every published figure of a row, as published ([`row_cases`]).
fn figures(row: &RunRow) -> Result<Vec<Case>, ValidateError> {
    if modern::is_modern(row) {
        return modern::modern_cases(row);
    }
    let modern_only = modern::modern_fields_set(row);
    if !modern_only.is_empty() {
        return Err(ValidateError::Unsupported {
            id: row.id.clone(),
            reason: format!(
                "{} belong to the modern layout, whose rules apply only to rows that name their \
                 `precision`",
                modern_only.join(", ")
            ),
        });
    }
    let mut cases = Vec::new();
    if let Some(published) = row.tflops_per_gpu {
        let recompute = row.recompute.as_deref().unwrap_or("none");
        cases.push(Case {
            id: row.id.clone(),
            field: "tflops_per_gpu",
            published,
            scenario: row_scenario(row, recompute, false)?,
        });
    }
    if let Some(published) = row.iteration_s_full_recompute {
        cases.push(Case {
            id: row.id.clone(),
            field: "iteration_s_full_recompute",
            published,
            scenario: row_scenario(row, "full", false)?,
        });
    }
    if let Some(published) = row.iteration_s_selective_sp {
        cases.push(Case {
            id: row.id.clone(),
            field: "iteration_s_selective_sp",
            published,
            scenario: row_scenario(row, "selective", row.tp > 1)?,
        });
    }
    Ok(cases)
}

/// What prices a case: the one of `profiles` that describes its GPU, else what `fallback`
/// prices its scenario with. The first mismatch when some profiles are given, none describes
/// the GPU and the fallback has only the defaults for it.
fn pricing_for<'p>(
    case: &Case,
    profiles: &'p [Profile],
    fallback: &Pricing,
) -> Result<Priced<'p>, ValidateError> {
    let mut mismatch = None;
    for p in profiles {
        match check_matches(&case.scenario, p) {
            Ok(()) => return Ok(Priced::Given(p)),
            Err(e) => {
                mismatch.get_or_insert(e);
            }
        }
    }
    let fell_back = fallback
        .profile_for(&case.scenario)
        .map_err(|e| ValidateError::Pricing {
            id: case.id.clone(),
            message: e.to_string(),
        })?;
    match (fell_back, mismatch) {
        (Some(p), _) => Ok(Priced::Fallback(p)),
        (None, Some(source)) => Err(ValidateError::Profile {
            id: case.id.clone(),
            source,
        }),
        (None, None) => Ok(Priced::Defaults),
    }
}

/// The cost model of one case ([`pricing_for`]).
enum Priced<'p> {
    Given(&'p Profile),
    Fallback(std::sync::Arc<Profile>),
    Defaults,
}

impl Priced<'_> {
    fn profile(&self) -> Option<&Profile> {
        match self {
            Priced::Given(p) => Some(p),
            Priced::Fallback(p) => Some(p),
            Priced::Defaults => None,
        }
    }
}

/// Simulates one case with the one of `profiles` that describes its GPU, else as `fallback`
/// prices it (the machine's bundled profile or twin's defaults), and compares. A modern row's
/// `model_tflops_per_gpu` (or its MFU times the peak it names) is compared as the step time it
/// implies (see [`modern`]).
pub fn run_case(
    case: &Case,
    profiles: &[Profile],
    fallback: &Pricing,
) -> Result<Comparison, ValidateError> {
    let priced = pricing_for(case, profiles, fallback)?;
    let profile = priced.profile();
    let opts = PredictOptions {
        reproducible: true,
        ..PredictOptions::default()
    };
    let prediction =
        predict_with(&case.scenario, &opts, profile).map_err(|source| ValidateError::Predict {
            id: case.id.clone(),
            source,
        })?;
    let report = &prediction.report;
    let (field, published, predicted) = match case.field {
        "tflops_per_gpu" => (
            case.field.to_string(),
            case.published,
            report.hardware_tflops_per_gpu,
        ),
        "model_tflops_per_gpu" | "model_tflops_from_mfu" => (
            if case.field == "model_tflops_from_mfu" {
                "step_time_s from mfu_percent"
            } else {
                "step_time_s from tflops_per_gpu"
            }
            .to_string(),
            report.step_time_s * report.model_tflops_per_gpu / case.published,
            report.step_time_s,
        ),
        _ => (case.field.to_string(), case.published, report.step_time_s),
    };
    let per_token = |tflops: f64| flops_per_token(tflops, report.tokens_per_s_per_gpu);
    Ok(Comparison {
        id: case.id.clone(),
        field,
        layout: crate::json::Layout::of(&case.scenario),
        published,
        predicted,
        error: relative_error(predicted, published),
        groups: Vec::new(),
        unmodelled: Vec::new(),
        fits: report.fits,
        peak_memory_gib: report.peak_memory_bytes as f64 / crate::report::GIB,
        usable_memory_gib: report.usable_bytes as f64 / crate::report::GIB,
        published_flops_per_token: None,
        model_flops_per_token: per_token(report.model_tflops_per_gpu),
        framework_flops_per_token: per_token(report.framework_flops.tflops_per_gpu),
        bundled_profile: profile.and_then(|p| p.bundled).map(str::to_string),
    })
}

/// FLOPs per token of `tflops_per_gpu` at a rate of `tokens_per_s_per_gpu`; 0 without tokens.
fn flops_per_token(tflops_per_gpu: f64, tokens_per_s_per_gpu: f64) -> f64 {
    if tokens_per_s_per_gpu > 0.0 {
        tflops_per_gpu * 1e12 / tokens_per_s_per_gpu
    } else {
        0.0
    }
}

/// `(predicted - published) / published`, 0 when nothing was published.
pub fn relative_error(predicted: f64, published: f64) -> f64 {
    if published == 0.0 || !published.is_finite() {
        0.0
    } else {
        (predicted - published) / published
    }
}

/// Predicts every published figure of `table`, each row costed with the one of `profiles`
/// that describes its GPU, else as `fallback` prices it ([`Pricing::Machine`]: the bundled
/// profile of its machine, or twin's defaults; a row whose GPU no given profile describes
/// and that would fall back to the defaults is reported as uncovered, with the reason).
pub fn validate_table(
    table: &Table,
    profiles: &[Profile],
    fallback: &Pricing,
) -> Result<Validation, ValidateError> {
    let mut rows = Vec::new();
    let mut uncovered = Vec::new();
    for row in &table.run {
        let compared = row_cases(row).and_then(|cases| {
            cases
                .iter()
                .map(|case| run_case(case, profiles, fallback))
                .collect::<Result<Vec<_>, _>>()
        });
        match compared {
            Ok(compared) => {
                let modern = modern::is_modern(row);
                let published = row
                    .tflops_per_gpu
                    .zip(row.tokens_per_s_per_gpu)
                    .map(|(tf, tok)| flops_per_token(tf, tok))
                    .filter(|f| *f > 0.0);
                for mut c in compared {
                    c.published_flops_per_token = published;
                    if modern {
                        c.groups = modern::groups(row);
                        c.unmodelled = modern::unmodelled(row)
                            .into_iter()
                            .map(str::to_string)
                            .collect();
                    }
                    rows.push(c);
                }
            }
            Err(e) => uncovered.push(Uncovered {
                id: row.id.clone(),
                reason: uncovered_reason(&e),
            }),
        }
    }
    if rows.is_empty() {
        return Err(match uncovered.first() {
            Some(u) => ValidateError::Unsupported {
                id: u.id.clone(),
                reason: format!("no row could be compared; the first: {}", u.reason),
            },
            None => ValidateError::NoRows,
        });
    }
    let errors: Vec<f64> = rows.iter().map(|r| r.error).collect();
    Ok(Validation {
        median_abs_error: median_abs(&errors),
        max_abs_error: max_abs(&errors),
        groups: group_summaries(&rows),
        rows,
        uncovered,
    })
}

/// The reason of an uncovered row, without the row id the error starts with.
fn uncovered_reason(e: &ValidateError) -> String {
    match e {
        ValidateError::Unsupported { reason, .. } => reason.clone(),
        ValidateError::Scenario { source, .. } => source.to_string(),
        ValidateError::Predict { source, .. } => source.to_string(),
        ValidateError::Profile { source, .. } => source.to_string(),
        other => other.to_string(),
    }
}

/// Per-group statistics over the compared rows, groups in first-seen order.
fn group_summaries(rows: &[Comparison]) -> Vec<GroupSummary> {
    let mut names: Vec<&str> = Vec::new();
    for r in rows {
        for g in &r.groups {
            if !names.contains(&g.as_str()) {
                names.push(g);
            }
        }
    }
    names
        .into_iter()
        .map(|name| {
            let members: Vec<&Comparison> = rows
                .iter()
                .filter(|r| r.groups.iter().any(|g| g == name))
                .collect();
            let errors: Vec<f64> = members.iter().map(|r| r.error).collect();
            let worst = members
                .iter()
                .max_by(|a, b| a.error.abs().total_cmp(&b.error.abs()))
                .map(|r| r.id.clone())
                .unwrap_or_default();
            GroupSummary {
                group: name.to_string(),
                rows: members.len(),
                median_abs_error: median_abs(&errors),
                max_abs_error: max_abs(&errors),
                worst,
            }
        })
        .collect()
}

/// Largest absolute value; 0 for none.
pub fn max_abs(values: &[f64]) -> f64 {
    values.iter().fold(0.0, |m, e| m.max(e.abs()))
}

/// Median of the absolute values (mean of the middle two for an even count); 0 for none.
pub fn median_abs(values: &[f64]) -> f64 {
    let abs: Vec<f64> = values.iter().map(|v| v.abs()).collect();
    crate::stats::median_or_zero(&abs)
}

impl Validation {
    /// Distinct rows compared (a classic row may publish several figures).
    pub fn compared_rows(&self) -> usize {
        let mut ids: Vec<&str> = self.rows.iter().map(|r| r.id.as_str()).collect();
        ids.dedup();
        ids.len()
    }

    /// Pretty JSON in the documented shape.
    pub fn to_json(&self) -> String {
        crate::json::document("validate", self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// A Markdown table plus the summary lines.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "| run | figure | published | predicted | error |\n|---|---|---:|---:|---:|"
        );
        for r in &self.rows {
            let _ = writeln!(
                out,
                "| {} | {} | {:.2} | {:.2} | {:+.1}% |",
                r.id,
                r.field,
                r.published,
                r.predicted,
                r.error * 100.0
            );
        }
        let _ = writeln!(
            out,
            "\nmedian |error| {:.1}%, max |error| {:.1}% over {} figures",
            self.median_abs_error * 100.0,
            self.max_abs_error * 100.0,
            self.rows.len()
        );
        if !self.groups.is_empty() {
            let _ = writeln!(
                out,
                "\n| group | rows | median abs error | max abs error | worst |\n|---|---:|---:|---:|---|"
            );
            for g in &self.groups {
                let _ = writeln!(
                    out,
                    "| {} | {} | {:.1}% | {:.1}% | {} |",
                    g.group,
                    g.rows,
                    g.median_abs_error * 100.0,
                    g.max_abs_error * 100.0,
                    g.worst
                );
            }
        }
        let unmodelled: Vec<&Comparison> = self
            .rows
            .iter()
            .filter(|r| !r.unmodelled.is_empty())
            .collect();
        if !unmodelled.is_empty() {
            let _ = writeln!(out, "\nsettings the prediction does not model:");
            for r in unmodelled {
                let _ = writeln!(out, "- {}: {}", r.id, r.unmodelled.join(", "));
            }
        }
        let mismatched: Vec<&Comparison> =
            self.rows.iter().filter(|r| r.flops_mismatch()).collect();
        if !mismatched.is_empty() {
            let _ = writeln!(
                out,
                "\npublished FLOPs per token that neither of twin's counts matches within {:.0}% \
                 (the row's model shape, or its source's FLOP convention, differs; GFLOP):",
                FLOPS_PER_TOKEN_TOLERANCE * 100.0
            );
            for r in mismatched {
                let _ = writeln!(
                    out,
                    "- {}: published {:.2}, twin {:.2} with full attention, {:.2} as the framework counts",
                    r.id,
                    r.published_flops_per_token.unwrap_or(0.0) / 1e9,
                    r.model_flops_per_token / 1e9,
                    r.framework_flops_per_token / 1e9
                );
            }
        }
        let mut bundled: Vec<(&str, usize)> = Vec::new();
        for path in self
            .rows
            .iter()
            .filter_map(|r| r.bundled_profile.as_deref())
        {
            match bundled.iter_mut().find(|(p, _)| *p == path) {
                Some((_, n)) => *n += 1,
                None => bundled.push((path, 1)),
            }
        }
        if !bundled.is_empty() {
            let _ = writeln!(
                out,
                "\nrows priced with the bundled profile of their machine (no --profile given \
                 describes it):"
            );
            for (path, n) in bundled {
                let _ = writeln!(out, "- {path}: {n} rows");
            }
        }
        let out_of_memory: Vec<&Comparison> = self.rows.iter().filter(|r| !r.fits).collect();
        if !out_of_memory.is_empty() {
            let _ = writeln!(
                out,
                "\npublished runs the prediction puts out of memory (each ran):"
            );
            for r in out_of_memory {
                let _ = writeln!(
                    out,
                    "- {}: peak {:.2} GiB of {:.2} GiB usable",
                    r.id, r.peak_memory_gib, r.usable_memory_gib
                );
            }
        }
        if !self.uncovered.is_empty() {
            let _ = writeln!(
                out,
                "\n{} of {} rows cannot be expressed:",
                self.uncovered.len(),
                self.uncovered.len() + self.compared_rows()
            );
            for u in &self.uncovered {
                let _ = writeln!(out, "- {}: {}", u.id, u.reason);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
