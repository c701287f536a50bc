//! twin-sim: everything needed to predict a training step without hardware. A scenario is
//! resolved into a [`plan::Plan`], turned into a [`schedule::Schedule`] (the IR shared with the
//! runtime), and executed by a discrete-event engine over cost models; the result is a trace
//! and a report.

pub mod check;
pub mod cost;
pub mod engine;
pub mod faults;
pub mod host_backend;
pub mod host_model;
pub mod json;
pub mod known_bias;
mod limits;
pub mod outcome;
pub mod profile;
pub mod report;
pub mod rng;
pub mod schedule;
pub mod setup;
pub mod simulation;
pub mod stats;
pub mod sweep;
pub mod topology;
pub mod trace;
pub mod uncertainty;
mod units;
pub mod validate;
pub mod variability;
pub mod verify;
pub mod workload;

// The shared vocabulary lives in twin-ir; it is re-exported here so that the simulator and its
// callers name it as `twin_sim::scenario`, `twin_sim::plan`, ... as before.
pub use twin_ir::{ir, plan, scenario, testing};

mod predict;
pub use predict::{
    predict, predict_with, sim_options, PredictError, PredictOptions, Prediction, Staged,
};
