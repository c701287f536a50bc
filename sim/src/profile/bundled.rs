//! The hardware profiles bundled in scenarios/profiles/, by the GPU and node each describes.
//! twin's default cost model is the A100 fit; a scenario on another GPU that one of these
//! describes is priced better with it, and a report priced with the defaults says so
//! ([`note`]).

use crate::scenario::{is_preset_machine, Cluster};

/// One bundled profile: the GPU preset and the node presets it describes, and its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bundled {
    pub gpu: &'static str,
    pub nodes: &'static [&'static str],
    /// Path from the repository root.
    pub path: &'static str,
}

/// Every bundled GPU profile but the A100's, whose GEMM curve and memory efficiency are the
/// defaults themselves.
pub const BUNDLED: [Bundled; 4] = [
    Bundled {
        gpu: "h100-sxm-80gb",
        nodes: &["dgx-h100"],
        path: "scenarios/profiles/h100-dgx.toml",
    },
    Bundled {
        gpu: "h100-sxm-96gb-500w",
        nodes: &["grand-teton"],
        path: "scenarios/profiles/h100-grand-teton.toml",
    },
    Bundled {
        gpu: "h200-141gb",
        nodes: &["dgx-h100", "dgx-h200", "hgx-h200"],
        path: "scenarios/profiles/h200-dgx.toml",
    },
    Bundled {
        gpu: "b200-sxm-180gb",
        nodes: &["dgx-b200"],
        path: "scenarios/profiles/b200-dgx.toml",
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

/// The report's note for a scenario priced with the defaults on a machine a bundled profile
/// describes; `None` otherwise.
pub fn note(c: &Cluster) -> Option<String> {
    let b = for_cluster(c)?;
    Some(format!(
        "priced with twin's default cost model, fitted to A100 layer timings; {} describes {} \
         GPUs in {} nodes from public measurements, and --profile {} prices with it \
         (docs/accuracy.md gives its errors on published runs)",
        b.path, b.gpu, c.node, b.path
    ))
}
