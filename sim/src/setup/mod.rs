//! Setting a scenario up for simulation: a scenario file or text is read, resolved against the
//! schema ([`crate::scenario`]), planned ([`crate::plan::Plan`]) and held to the work bound
//! (`work`, from [`crate::schedule::estimate`]) in one step, so that every accepted scenario
//! can be planned and generated. It sits above the scenario, the plan and the schedule
//! generators, which know nothing of one another's loading.

// ScenarioError is large (its structured fields are public API); errors are the cold path and
// a scenario is set up once, so boxing it would buy nothing.
#![allow(clippy::result_large_err)]

mod work;

use crate::plan::Plan;
use crate::scenario::{self, Checks, Document, ErrorKind, FaultConfig, Scenario, ScenarioError};
use std::path::Path;

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

/// Applies `--set key=value` overrides to an already resolved scenario and re-validates; for
/// what-if tools that hold only a [`Scenario`]. Works on [`scenario::to_toml`]'s explicit
/// form, so every value is pinned: changing `parallel.pp` also needs `parallel.dp`, and a
/// `model.preset` override changes nothing. Tools that still have the file should prefer
/// [`ScenarioSource::resolve`], which equals `parse_str` with the original text.
pub fn apply_overrides(s: &Scenario, overrides: &[String]) -> Result<Scenario, ScenarioError> {
    parse_str(
        &scenario::to_toml(s),
        &format!("<scenario {}>", s.name),
        overrides,
    )
}

/// A scenario's TOML parsed once into its located tree, for tools that resolve it many times
/// with different overrides (sweeps): each [`ParsedSource::resolve`] clones the tree instead
/// of parsing the text again, and is otherwise exactly [`parse_str`].
#[derive(Clone, Debug)]
pub struct ParsedSource {
    document: Document,
}

impl ParsedSource {
    /// Parses `text` (TOML syntax only; nothing is resolved or validated yet).
    pub fn parse(text: &str, origin: &str) -> Result<ParsedSource, ScenarioError> {
        Ok(ParsedSource {
            document: Document::parse(text, origin)?,
        })
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
        self.resolve_full(overrides)
            .map(|(s, _, side)| (s, side.checks))
    }

    /// [`ParsedSource::resolve`], also returning the plan that setting up builds to prove the
    /// scenario plannable (equal to `Plan::new(&scenario)`), so a sweep builds it only once.
    pub fn resolve_planned(&self, overrides: &[String]) -> Result<(Scenario, Plan), ScenarioError> {
        self.resolve_full(overrides).map(|(s, p, _)| (s, p))
    }

    /// [`ParsedSource::resolve`], also returning the plan and the `[faults]` section (`None`
    /// when the scenario has none).
    pub fn resolve_with_faults(
        &self,
        overrides: &[String],
    ) -> Result<(Scenario, Plan, Option<FaultConfig>), ScenarioError> {
        self.resolve_full(overrides)
            .map(|(s, p, side)| (s, p, side.faults))
    }

    /// [`ParsedSource::resolve`], also returning the plan and the side sections (`[checks]`,
    /// `[faults]`, `[variability]`).
    pub fn resolve_with_sections(
        &self,
        overrides: &[String],
    ) -> Result<(Scenario, Plan, Sections), ScenarioError> {
        self.resolve_full(overrides)
    }

    /// What the scenario's `model.hf_config` sets that twin does not model (each as "key =
    /// value (what it means)"); empty without an `hf_config`. For the CLI's warning.
    pub fn hf_unmodelled(&self, overrides: &[String]) -> Result<Vec<String>, ScenarioError> {
        self.document.hf_unmodelled(overrides)
    }

    /// The schema's validation, then the plan (built once, to prove the scenario plannable)
    /// and the work bound.
    fn resolve_full(
        &self,
        overrides: &[String],
    ) -> Result<(Scenario, Plan, Sections), ScenarioError> {
        let valid = self.document.validate(overrides)?;
        let plan = planned(&valid)?;
        Ok((
            valid.scenario,
            plan,
            Sections {
                checks: valid.checks,
                faults: valid.faults,
                variability: valid.variability,
            },
        ))
    }
}

/// The plan of a validated scenario (built to prove it plannable) after the work bound's
/// check: what [`ParsedSource::resolve`] adds to the schema's validation.
pub fn planned(valid: &twin_ir::scenario::Validated<'_>) -> Result<Plan, ScenarioError> {
    let checker = valid.checker();
    let plan = Plan::new(&valid.scenario).map_err(|e| {
        checker.unlocated(
            ErrorKind::Plan,
            format!("the plan rejected a scenario that passed validation (a bug in twin): {e}"),
        )
    })?;
    work::check(&checker, &valid.scenario, &plan)?;
    Ok(plan)
}

/// The sections a scenario file has beside the step it describes.
#[derive(Clone, Debug, Default)]
pub struct Sections {
    /// `[checks]` (empty when there is none).
    pub checks: Checks,
    /// `[faults]`, when present.
    pub faults: Option<FaultConfig>,
    /// `[variability]`, when present.
    pub variability: Option<twin_ir::scenario::VariabilityConfig>,
}

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
        Ok(ScenarioSource {
            origin: path.display().to_string(),
            text: scenario::read_text(path)?,
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn single() -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/host/single.toml");
        scenario::read_text(Path::new(path)).unwrap()
    }

    /// The schema alone accepts a step too large to generate; setting it up refuses it with
    /// the work bound, blaming the override through the document's checker.
    #[test]
    fn the_work_bound_is_set_ups_not_the_schemas() {
        let over = ["training.global_batch=1048576".to_string()];
        let doc = Document::parse(&single(), "single.toml").unwrap();
        let valid = doc.validate(&over).unwrap();
        assert_eq!(valid.scenario.training.global_batch, 1_048_576);
        let e = parse_str(&single(), "single.toml", &over).unwrap_err();
        assert_eq!(e.kind, ErrorKind::CrossField);
        assert_eq!(e.origin, "--set training.global_batch=1048576");
        assert!(e.message.contains("limit of 4000000 ops"), "{e}");
    }

    /// Setting up returns the plan it built, equal to planning the scenario afresh.
    #[test]
    fn the_plan_set_up_equals_a_fresh_one() {
        let parsed = ParsedSource::parse(&single(), "single.toml").unwrap();
        let (s, plan) = parsed.resolve_planned(&[]).unwrap();
        let fresh = Plan::new(&s).unwrap();
        assert_eq!(
            serde_json::to_string(&plan).unwrap(),
            serde_json::to_string(&fresh).unwrap()
        );
        assert_eq!(
            format!("{:?}", plan.groups()),
            format!("{:?}", fresh.groups())
        );
    }
}
