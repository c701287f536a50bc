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
pub mod ir;
pub mod outcome;
pub mod plan;
pub mod profile;
pub mod report;
pub mod scenario;
pub mod schedule;
pub mod setup;
pub mod simulation;
pub mod sweep;
pub mod testing;
pub mod topology;
pub mod trace;
pub mod uncertainty;
mod units;
pub mod validate;
pub mod verify;
pub mod workload;

mod predict;
pub use predict::{
    predict, predict_with, sim_options, PredictError, PredictOptions, Prediction, Staged,
};
