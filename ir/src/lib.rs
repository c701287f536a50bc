//! twin-ir: the vocabulary the simulator and the runtime share, with no modelling. A scenario
//! file is parsed and validated against the schema ([`scenario`], one key table), resolved
//! into a [`plan::Plan`] (mesh, rank coordinates, layer layout, groups), and scheduled into
//! per-rank programs of the IR's ops ([`ir`]). Generating schedules and pricing them is
//! twin-sim's; executing them for real is twin-runtime's.

pub mod ir;
pub mod plan;
pub mod scenario;
pub mod testing;
