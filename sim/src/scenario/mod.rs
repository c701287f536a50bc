//! Scenario files: the TOML a user writes, parsed and validated into a resolved [`Scenario`].
//! Errors name the file, line and column, the key, the value and what is allowed, because a
//! user with a typo in a 500-line config deserves better than "invalid type".
//!
//! Pipeline: TOML text → located tree (`source`) → `--set` overrides merged (`overrides`) →
//! typed, preset-expanded sections (`parse`, `presets`, `hf`) → cross-field rules and a trial
//! plan (`validate`). The `[checks]` section (`checks`) is parsed alongside and returned
//! beside the scenario. `to_toml` writes a resolved scenario back with every value explicit.
//! The format is documented in docs/scenarios.md.

// ScenarioError is large (its structured fields are public API); errors are the cold path and
// a scenario is parsed once, so boxing it would buy nothing.
#![allow(clippy::result_large_err)]

mod checker;
mod checks;
mod cluster;
mod emit;
pub(crate) mod error;
mod fault_config;
mod faults;
mod hf;
pub(crate) mod limits;
mod overrides;
mod parse;
mod presets;
mod read;
mod source;
mod topology;
mod types;
mod validate;
mod work;

pub use checks::{parse_key as parse_check_key, Bound, Checks, Metric, Threshold, CHECK_KEYS};
pub use error::{ErrorKind, ScenarioError};
pub use fault_config::*;
pub use faults::FAULT_KEYS;
pub use topology::{Fabric, NetworkModel, NetworkTopology, TOPOLOGY_KEYS};
pub use types::*;

use error::Ctx;
use std::path::Path;

/// The GPU preset of a name or one of its aliases (`h200-sxm-141gb`), under its own name;
/// `None` for a name twin has no preset for.
pub fn gpu_preset(name: &str) -> Option<Gpu> {
    presets::gpu(name)
}

/// Reads, parses and validates a scenario file, applying `overrides` (`key=value` strings as
/// given to `--set`, without the `--set`) in order.
pub fn load(path: &Path, overrides: &[String]) -> Result<Scenario, ScenarioError> {
    ScenarioSource::read(path)?.resolve(overrides)
}

/// Parses and validates scenario text. `origin` names it in errors (normally its path), and
/// a relative `model.hf_config` is resolved against `origin`'s directory.
pub fn parse_str(
    text: &str,
    origin: &str,
    overrides: &[String],
) -> Result<Scenario, ScenarioError> {
    parse_with_checks(text, origin, overrides).map(|(s, _)| s)
}

/// [`parse_str`], also returning the scenario's `[checks]` (empty when it has none).
pub fn parse_with_checks(
    text: &str,
    origin: &str,
    overrides: &[String],
) -> Result<(Scenario, Checks), ScenarioError> {
    ParsedSource::parse(text, origin)?.resolve_with_checks(overrides)
}

/// A scenario's TOML parsed once into its located tree, for tools that resolve it many times
/// with different overrides (sweeps): each [`ParsedSource::resolve`] clones the tree instead
/// of parsing the text again, and is otherwise exactly [`parse_str`].
#[derive(Clone, Debug)]
pub struct ParsedSource {
    ctx: Ctx,
    root: source::Table,
}

impl ParsedSource {
    /// Parses `text` (TOML syntax only; nothing is resolved or validated yet).
    pub fn parse(text: &str, origin: &str) -> Result<ParsedSource, ScenarioError> {
        let ctx = Ctx {
            origin: origin.to_string(),
        };
        let root = source::parse_document(&ctx, text)?;
        Ok(ParsedSource { ctx, root })
    }

    /// Applies `overrides`, resolves and validates.
    pub fn resolve(&self, overrides: &[String]) -> Result<Scenario, ScenarioError> {
        self.resolve_with_checks(overrides).map(|(s, _)| s)
    }

    /// [`ParsedSource::resolve`], also returning the `[checks]` section.
    pub fn resolve_with_checks(
        &self,
        overrides: &[String],
    ) -> Result<(Scenario, Checks), ScenarioError> {
        self.resolve_full(overrides).map(|(s, _, c, _)| (s, c))
    }

    /// [`ParsedSource::resolve`], also returning the plan that validation builds to prove the
    /// scenario plannable (equal to `Plan::new(&scenario)`), so a sweep builds it only once.
    pub fn resolve_planned(
        &self,
        overrides: &[String],
    ) -> Result<(Scenario, crate::plan::Plan), ScenarioError> {
        self.resolve_full(overrides).map(|(s, p, _, _)| (s, p))
    }

    /// [`ParsedSource::resolve`], also returning the plan and the `[faults]` section (`None`
    /// when the scenario has none).
    pub fn resolve_with_faults(
        &self,
        overrides: &[String],
    ) -> Result<(Scenario, crate::plan::Plan, Option<FaultConfig>), ScenarioError> {
        self.resolve_full(overrides).map(|(s, p, _, f)| (s, p, f))
    }

    /// What the scenario's `model.hf_config` sets that twin does not model (each as "key =
    /// value (what it means)"); empty without an `hf_config`. For the CLI's warning.
    pub fn hf_unmodelled(&self, overrides: &[String]) -> Result<Vec<String>, ScenarioError> {
        let ctx = &self.ctx;
        let mut root = self.root.clone();
        overrides::apply(ctx, &mut root, overrides)?;
        let base_dir = Path::new(&ctx.origin).parent().unwrap_or(Path::new(""));
        Ok(parse::resolve(ctx, &root, base_dir)?.hf_unmodelled)
    }

    fn resolve_full(
        &self,
        overrides: &[String],
    ) -> Result<(Scenario, crate::plan::Plan, Checks, Option<FaultConfig>), ScenarioError> {
        let ctx = &self.ctx;
        let mut root = self.root.clone();
        overrides::apply(ctx, &mut root, overrides)?;
        let base_dir = Path::new(&ctx.origin).parent().unwrap_or(Path::new(""));
        let mut resolved = parse::resolve(ctx, &root, base_dir)?;
        let checks = std::mem::take(&mut resolved.checks);
        let faults = resolved.faults.take();
        let (scenario, plan) = validate::validate(ctx, &root, overrides, resolved)?;
        Ok((scenario, plan, checks, faults))
    }
}

/// Applies `--set key=value` overrides to an already resolved scenario and re-validates; for
/// what-if tools that hold only a [`Scenario`]. Works on [`to_toml`]'s explicit form, so every
/// value is pinned: changing `parallel.pp` also needs `parallel.dp`, and a `model.preset`
/// override changes nothing. Tools that still have the file should prefer
/// [`ScenarioSource::resolve`], which equals `parse_str` with the original text.
pub fn apply_overrides(s: &Scenario, overrides: &[String]) -> Result<Scenario, ScenarioError> {
    parse_str(&to_toml(s), &format!("<scenario {}>", s.name), overrides)
}

/// A complete, explicit TOML (no presets, no defaults) that parses back to an equal scenario.
pub fn to_toml(s: &Scenario) -> String {
    emit::to_toml(s)
}

pub use emit::{with_side_sections, SIDE_SECTIONS};

/// The text of a scenario file, kept so that what-if tools can re-resolve it with more
/// overrides exactly as `load` would (presets and derived values recomputed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioSource {
    /// Path (or any name) used in error messages and to resolve `hf_config`.
    pub origin: String,
    pub text: String,
}

impl ScenarioSource {
    /// Reads a scenario file (at most 16 MiB).
    pub fn read(path: &Path) -> Result<Self, ScenarioError> {
        let origin = path.display().to_string();
        let text = hf::read_text(path).map_err(|e| ScenarioError {
            kind: ErrorKind::Io,
            origin: origin.clone(),
            line: None,
            column: None,
            key: String::new(),
            value: String::new(),
            message: format!("cannot read scenario file: {e}"),
            allowed: String::new(),
        })?;
        Ok(ScenarioSource { origin, text })
    }

    /// Parses and validates the text with `overrides`.
    pub fn resolve(&self, overrides: &[String]) -> Result<Scenario, ScenarioError> {
        parse_str(&self.text, &self.origin, overrides)
    }

    /// Parses the text once for many resolutions (see [`ParsedSource`]).
    pub fn parse(&self) -> Result<ParsedSource, ScenarioError> {
        ParsedSource::parse(&self.text, &self.origin)
    }

    /// [`ScenarioSource::resolve`], also returning the `[checks]` section.
    pub fn resolve_with_checks(
        &self,
        overrides: &[String],
    ) -> Result<(Scenario, Checks), ScenarioError> {
        parse_with_checks(&self.text, &self.origin, overrides)
    }
}
