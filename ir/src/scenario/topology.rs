//! The `[cluster.topology]` section: how GPUs, NICs and switches are wired, and whether the
//! engine prices communication with the flow-level network model or per call (alpha-beta).
//! Everything has a default, so scenarios without the section keep their meaning.

use super::read::{Result, Section};
use serde::{Deserialize, Serialize};

/// Which network model prices transfers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkModel {
    /// Each collective or send costs its alpha-beta time; transfers never slow each other.
    #[default]
    Analytic,
    /// Transfers are flows over the links of the topology, sharing them max-min fairly.
    Flow,
}

/// How nodes' NICs reach the rest of the cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fabric {
    /// NIC j of every node hangs on rail j's leaf switch (DGX SuperPOD).
    #[default]
    RailOptimized,
    /// All NICs of a node hang on the same leaf switch.
    FatTree,
}

/// The resolved `[cluster.topology]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NetworkTopology {
    pub model: NetworkModel,
    pub fabric: Fabric,
    /// NICs per node; the GPUs of a node share them evenly. 0: one NIC per GPU.
    pub nics_per_node: u32,
    /// Nodes under one leaf switch (per rail on a rail-optimized fabric).
    pub nodes_per_leaf: u32,
    /// Leaf switch downlink over uplink capacity (1 = non-blocking, 4 = 4:1).
    pub oversubscription: f64,
}

pub const DEFAULT_NODES_PER_LEAF: u32 = 32;

impl Default for NetworkTopology {
    fn default() -> Self {
        NetworkTopology {
            model: NetworkModel::Analytic,
            fabric: Fabric::RailOptimized,
            nics_per_node: 0,
            nodes_per_leaf: DEFAULT_NODES_PER_LEAF,
            oversubscription: 1.0,
        }
    }
}

impl NetworkTopology {
    pub fn is_default(&self) -> bool {
        *self == NetworkTopology::default()
    }
}

pub(crate) fn topology(t: Section<'_>) -> Result<NetworkTopology> {
    t.check_unknown()?;
    use super::keys::topology as k;
    Ok(NetworkTopology {
        model: t.choice_or_default(&k::MODEL, &NETWORK_MODELS)?,
        fabric: t.choice_or_default(&k::FABRIC, &FABRICS)?,
        nics_per_node: t.uint32_or_default(&k::NICS_PER_NODE)?,
        nodes_per_leaf: t.uint32_or_default(&k::NODES_PER_LEAF)?,
        oversubscription: t.number_or_default(&k::OVERSUBSCRIPTION)?,
    })
}

pub(crate) const NETWORK_MODELS: [(&str, NetworkModel); 2] = [
    ("analytic", NetworkModel::Analytic),
    ("flow", NetworkModel::Flow),
];
pub(crate) const FABRICS: [(&str, Fabric); 2] = [
    ("rail-optimized", Fabric::RailOptimized),
    ("fat-tree", Fabric::FatTree),
];
