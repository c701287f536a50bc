//! Scenario files: the TOML a user writes, parsed and validated into a resolved [`Scenario`].
//! Errors name the file, line and column, the key, the value and what is allowed, because a
//! user with a typo in a 500-line config deserves better than "invalid type".
//!
//! Pipeline: TOML text → located tree (`source`) → `--set` overrides merged (`overrides`) →
//! typed, preset-expanded sections (`parse`, `presets`, `hf`) → cross-field rules
//! (`validate`). The `[checks]` and `[faults]` sections (`checks`, `faults`) are parsed
//! alongside and returned beside the scenario. `to_toml` writes a resolved scenario back with
//! every value explicit. The format is documented in docs/reference/scenarios.md.
//!
//! This is schema only: it knows no plan and no modelling. Building the plan and bounding the
//! work of a scenario is the job of twin-sim's `setup`, which the loading entry points
//! (`load`, `parse_str`, `ParsedSource`) belong to.

// ScenarioError is large (its structured fields are public API); errors are the cold path and
// a scenario is parsed once, so boxing it would buy nothing.
#![allow(clippy::result_large_err)]

#[cfg(test)]
mod a2a_overlap_tests;
mod checker;
mod checks;
mod cluster;
mod emit;
pub mod error;
mod fault_config;
mod faults;
pub mod framework;
mod hf;
#[cfg(test)]
mod hybrid_tests;
pub mod keys;
#[cfg(test)]
mod keys_tests;
pub mod layout;
mod limits;
mod overrides;
mod parse;
mod presets;
mod read;
#[cfg(test)]
mod recompute_modules_tests;
#[cfg(test)]
mod routing_tests;
mod source;
mod topology;
mod types;
mod validate;
mod variability;
#[cfg(test)]
mod window_tests;

pub use checker::Checker;
pub use checks::{check_keys, parse_key as parse_check_key, Bound, Checks, Metric, Threshold};
pub use error::{ErrorKind, ScenarioError};
pub use fault_config::*;
pub use faults::fault_keys;
pub use presets::HostSide;
pub use topology::{Fabric, NetworkModel, NetworkTopology};
pub use types::*;
pub use validate::{moe_a2a_overlap_blocker, A2aOverlapBlocker};
pub use variability::{parse_speeds, SpeedSamples, VariabilityConfig, MAX_SPEED_SAMPLES};

use error::Ctx;
use std::path::Path;

/// The GPU preset of a name or one of its aliases (`h200-sxm-141gb`), under its own name;
/// `None` for a name twin has no preset for.
pub fn gpu_preset(name: &str) -> Option<Gpu> {
    presets::gpu(name)
}

/// The CUDA compute capability of the GPU preset `name` names (or an alias of it); `None` for
/// a name twin has no preset for (a `[cluster.gpu]` table under a name of its own).
pub fn gpu_compute_capability(name: &str) -> Option<(u32, u32)> {
    presets::compute_capability(name)
}

/// Whether the cluster is a GPU preset exactly as twin has it, in a node preset exactly as
/// twin has it (both link tiers, and no more GPUs per node than the preset's; a job may use
/// part of a node): the machine a bundled hardware profile of that GPU and node describes. A
/// `[cluster.gpu]` table or changed links make it another machine.
pub fn is_preset_machine(c: &Cluster) -> bool {
    let gpu = presets::gpu(&c.gpu.name).is_some_and(|g| g == c.gpu);
    let node = presets::node(&c.node).is_some_and(|n| {
        c.gpus_per_node <= n.gpus_per_node
            && n.intra_node == c.intra_node
            && n.inter_node == c.inter_node
    });
    gpu && node
}

/// The host side of one GPU of the scenario's cluster, which optimizer offload prices
/// ([`HostSide`]): its node preset's, else its GPU's usual node's, else a DGX A100's (the
/// slowest preset host); the second value says which node the figures are of.
pub fn host_side(c: &Cluster) -> (HostSide, &'static str) {
    match presets::node(&c.node) {
        Some(_) => presets::host_side(&c.node),
        None => presets::host_side(presets::default_node(&c.gpu.name).unwrap_or("dgx-a100")),
    }
}

/// The text of a scenario file (at most 16 MiB); the error names the file.
pub fn read_text(path: &Path) -> Result<String, ScenarioError> {
    hf::read_text(path).map_err(|e| ScenarioError {
        kind: ErrorKind::Io,
        origin: path.display().to_string(),
        line: None,
        column: None,
        key: String::new(),
        value: String::new(),
        message: format!("cannot read scenario file: {e}"),
        allowed: String::new(),
    })
}

/// A scenario's TOML parsed into its located tree, nothing resolved yet. [`Document::validate`]
/// resolves it against the schema as often as needed (each time from a clone of the tree),
/// which is what a sweep wants; building the plan and bounding the work is twin-sim's `setup`'s.
#[derive(Clone, Debug)]
pub struct Document {
    ctx: Ctx,
    root: source::Table,
}

impl Document {
    /// Parses `text` (TOML syntax only; nothing is resolved or validated yet). `origin` names
    /// it in errors (normally its path), and a relative `model.hf_config` is resolved against
    /// `origin`'s directory.
    pub fn parse(text: &str, origin: &str) -> Result<Document, ScenarioError> {
        let ctx = Ctx {
            origin: origin.to_string(),
        };
        let root = source::parse_document(&ctx, text)?;
        Ok(Document { ctx, root })
    }

    /// Applies `overrides` (`key=value` strings as given to `--set`, in order), resolves
    /// presets and defaults, and checks every cross-field rule.
    pub fn validate<'a>(&'a self, overrides: &'a [String]) -> Result<Validated<'a>, ScenarioError> {
        let ctx = &self.ctx;
        let mut root = self.root.clone();
        overrides::apply(ctx, &mut root, overrides)?;
        let base_dir = Path::new(&ctx.origin).parent().unwrap_or(Path::new(""));
        let mut resolved = parse::resolve(ctx, &root, base_dir)?;
        let checks = std::mem::take(&mut resolved.checks);
        let faults = resolved.faults.take();
        let variability = resolved.variability.take();
        let scenario = validate::validate(&Checker::new(ctx, &root, overrides), resolved)?;
        Ok(Validated {
            scenario,
            checks,
            faults,
            variability,
            ctx,
            root,
            overrides,
        })
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
}

/// A [`Document`] resolved with its overrides and valid against the schema: the scenario, its
/// side sections, and the resolved tree, so that a later rule can still blame the keys.
#[derive(Debug)]
pub struct Validated<'a> {
    pub scenario: Scenario,
    /// The `[checks]` section (empty when there is none).
    pub checks: Checks,
    /// The `[faults]` section (`None` when there is none).
    pub faults: Option<FaultConfig>,
    /// The `[variability]` section (`None` when there is none).
    pub variability: Option<VariabilityConfig>,
    ctx: &'a Ctx,
    root: source::Table,
    overrides: &'a [String],
}

impl Validated<'_> {
    /// The checker that locates an error about several keys of this document.
    pub fn checker(&self) -> Checker<'_> {
        Checker::new(self.ctx, &self.root, self.overrides)
    }

    /// Whether the document, with its overrides, writes `key` of `section` (rather than
    /// leaving it to its default).
    pub fn writes(&self, section: &str, key: &str) -> bool {
        matches!(
            self.root.get(section).map(|e| &e.node),
            Some(source::Node::Table(t)) if t.get(key).is_some()
        )
    }

    /// `s` (this document's scenario, or one edited from it) as [`to_toml`] writes it, but
    /// without the [`FOLLOWING_DEFAULTS`] this document leaves to their default: text that
    /// further overrides resolve as they would resolve this document, each of those keys
    /// defaulted from the settings in force then (a sweep's layouts change the data-parallel
    /// size, the schedule or ZeRO-3 after the base's overrides are folded in).
    pub fn to_toml_leaving_defaults(&self, s: &Scenario) -> String {
        emit::without(
            &emit::to_toml(s),
            FOLLOWING_DEFAULTS
                .iter()
                .filter(|(section, key)| !self.writes(section, key)),
        )
    }
}

/// Keys whose default follows other settings (`(section, key)`): the ZeRO stage (3 with
/// `fsdp`), the context-parallel algorithm and the allocator slack (the framework's),
/// `overlap_p2p_comm` (the framework's on interleaved schedules, else off) and Megatron-Core's
/// gradient bucket (from the data-parallel size times cp).
pub const FOLLOWING_DEFAULTS: [(&str, &str); 5] = [
    ("parallel", "zero"),
    ("parallel", "cp_algorithm"),
    ("training", "overlap_p2p_comm"),
    ("training", "grad_bucket_bytes"),
    ("memory", "allocator_slack_fraction"),
];

/// A complete, explicit TOML (no presets, no defaults) that parses back to an equal scenario.
pub fn to_toml(s: &Scenario) -> String {
    emit::to_toml(s)
}

pub use emit::{with_side_sections, SIDE_SECTIONS};

/// The scenario of TOML `text` (named `origin` in errors) with `--set` `overrides`, for the
/// module tests.
#[cfg(test)]
fn resolve_text(text: &str, origin: &str, overrides: &[&str]) -> Result<Scenario, ScenarioError> {
    let doc = Document::parse(text, origin)?;
    let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    doc.validate(&overrides).map(|v| v.scenario)
}

/// The error the scenario of `text` is refused with, as text; panics when it is accepted.
#[cfg(test)]
fn refused_text(text: &str, origin: &str) -> String {
    match resolve_text(text, origin, &[]) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}
