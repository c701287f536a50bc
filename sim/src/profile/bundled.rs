//! The hardware profiles bundled in scenarios/profiles/, by the GPU and node each describes,
//! built into the binary. A scenario on a machine one of them describes is priced with it
//! unless told otherwise ([`Pricing::Machine`]); elsewhere twin's defaults (the A100 fit)
//! price it. A report says which ([`note`], [`applied_note`]).

use super::{check_matches, GpuMismatch, Profile};
use crate::scenario::ScenarioError;
use crate::scenario::{is_preset_machine, Cluster, Scenario};
use std::sync::{Arc, OnceLock};

/// One bundled profile: the GPU preset and the node presets it describes, and its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bundled {
    pub gpu: &'static str,
    pub nodes: &'static [&'static str],
    /// Path from the repository root.
    pub path: &'static str,
    /// The file's text, as built into the binary.
    text: &'static str,
}

/// Every bundled GPU profile. The A100's shares its GEMM curve and memory efficiency with the
/// defaults, but not its attention curves or its links' efficiencies
/// (docs/reference/profiles.md).
pub const BUNDLED: [Bundled; 7] = [
    Bundled {
        gpu: "a100-sxm-80gb",
        nodes: &["dgx-a100"],
        path: "scenarios/profiles/a100-dgx.toml",
        text: include_str!("../../../scenarios/profiles/a100-dgx.toml"),
    },
    Bundled {
        gpu: "h100-sxm-80gb",
        nodes: &["dgx-h100"],
        path: "scenarios/profiles/h100-dgx.toml",
        text: include_str!("../../../scenarios/profiles/h100-dgx.toml"),
    },
    Bundled {
        gpu: "h100-sxm-96gb-500w",
        nodes: &["grand-teton"],
        path: "scenarios/profiles/h100-grand-teton.toml",
        text: include_str!("../../../scenarios/profiles/h100-grand-teton.toml"),
    },
    Bundled {
        gpu: "h800-sxm-80gb",
        nodes: &["hgx-h800"],
        path: "scenarios/profiles/h800-hgx.toml",
        text: include_str!("../../../scenarios/profiles/h800-hgx.toml"),
    },
    Bundled {
        gpu: "h200-141gb",
        nodes: &["dgx-h100", "dgx-h200", "hgx-h200"],
        path: "scenarios/profiles/h200-dgx.toml",
        text: include_str!("../../../scenarios/profiles/h200-dgx.toml"),
    },
    Bundled {
        gpu: "b200-sxm-180gb",
        nodes: &["dgx-b200"],
        path: "scenarios/profiles/b200-dgx.toml",
        text: include_str!("../../../scenarios/profiles/b200-dgx.toml"),
    },
    Bundled {
        gpu: "gb200",
        nodes: &["gb200-nvl72"],
        path: "scenarios/profiles/gb200-nvl72.toml",
        text: include_str!("../../../scenarios/profiles/gb200-nvl72.toml"),
    },
];

/// The bundled profile that describes the cluster's machine: its GPU preset in one of the
/// profile's node presets, neither changed ([`is_preset_machine`]).
pub fn for_cluster(c: &Cluster) -> Option<&'static Bundled> {
    if !is_preset_machine(c) {
        return None;
    }
    BUNDLED
        .iter()
        .find(|b| b.gpu == c.gpu.name && b.nodes.contains(&c.node.as_str()))
}

/// Each bundled profile parsed once, in [`BUNDLED`]'s order.
static PARSED: [OnceLock<Result<Arc<Profile>, ScenarioError>>; BUNDLED.len()] =
    [const { OnceLock::new() }; BUNDLED.len()];

impl Bundled {
    /// The profile, parsed from the text built into the binary (once per process), marked
    /// as this bundled file's ([`Profile::bundled`]).
    pub fn profile(&self) -> Result<Arc<Profile>, ScenarioError> {
        // Paths are unique in BUNDLED, and every Bundled is one of its entries.
        let i = BUNDLED
            .iter()
            .position(|b| b.path == self.path)
            .unwrap_or_default();
        PARSED[i]
            .get_or_init(|| {
                let mut p = super::parse_str(self.text, self.path)?;
                p.bundled = Some(self.path);
                Ok(Arc::new(p))
            })
            .clone()
    }
}

/// Which cost model prices a scenario.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Pricing {
    /// The bundled profile of the scenario's machine where one describes it
    /// ([`for_cluster`]), twin's defaults elsewhere.
    #[default]
    Machine,
    /// twin's defaults (the A100 fit) on every machine.
    Defaults,
    /// This profile, on a scenario of its GPU.
    Profile(Arc<Profile>),
}

impl Pricing {
    /// The profile that prices `scenario` (`None`: the defaults), or why this one cannot.
    pub fn profile_for(&self, scenario: &Scenario) -> Result<Option<Arc<Profile>>, PricingError> {
        match self {
            Pricing::Defaults => Ok(None),
            Pricing::Profile(p) => {
                check_matches(scenario, p)?;
                Ok(Some(Arc::clone(p)))
            }
            Pricing::Machine => match for_cluster(&scenario.cluster) {
                Some(b) => Ok(Some(b.profile()?)),
                None => Ok(None),
            },
        }
    }
}

/// Why a [`Pricing`] cannot price a scenario.
#[derive(Debug, thiserror::Error)]
pub enum PricingError {
    #[error(transparent)]
    Mismatch(#[from] GpuMismatch),
    /// A bundled profile that does not parse: a build of twin with a broken file.
    #[error("bundled profile: {0}")]
    Bundled(#[from] ScenarioError),
}

/// The report's note for a scenario priced with the bundled profile of its machine because
/// no other was given; `None` for any other profile.
pub fn applied_note(c: &Cluster, profile: &Profile) -> Option<String> {
    let path = profile.bundled?;
    Some(format!(
        "priced with the bundled profile {path}, which describes {} GPUs in {} nodes from \
         public measurements (docs/accuracy.md gives its errors on published runs); --profile \
         FILE prices with another, --profile defaults with twin's A100-fitted defaults",
        c.gpu.name, c.node
    ))
}

/// The report's note for a scenario priced with the defaults on a machine a bundled profile
/// describes; `None` otherwise.
pub fn note(c: &Cluster) -> Option<String> {
    let b = for_cluster(c)?;
    Some(format!(
        "priced with twin's default cost model, fitted to A100 layer timings, as asked; {} \
         describes {} GPUs in {} nodes from public measurements and prices them unless told \
         otherwise (docs/accuracy.md gives its errors on published runs)",
        b.path, b.gpu, c.node
    ))
}
