//! Prediction against measurement, as library calls with resolved arguments (the binary's
//! `twin verify` parses arguments and prints): `step` simulates a scenario with a hardware
//! profile, runs the same schedule for real and compares the steps; `recovery` injects one
//! kill into real host runs and compares the measured recovery with the simulator's recovery
//! model. `machine_check` times this machine around the runs, so that a step-time error can
//! be told apart from the machine's drift.

mod machine_check;
pub mod recovery;
pub mod step;

use twin_runtime::job::JobError;

/// Why a verification could not be made (a verification that was made and failed its
/// thresholds is a result, not an error).
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error(transparent)]
    Job(#[from] JobError),
    #[error(transparent)]
    Inject(#[from] twin_runtime::launch::InjectError),
    #[error(transparent)]
    Stage(#[from] twin_sim::PredictError),
    /// The simulation of the scenario failed.
    #[error("simulating {scenario}")]
    Simulate {
        scenario: String,
        #[source]
        source: twin_sim::PredictError,
    },
    /// The verification cannot be made as asked; the message says why and what to do.
    #[error("{0}")]
    Refused(String),
    /// A file or folder of the verification could not be made, read or written.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A measurements file or report that is not the JSON expected.
    #[error("{what}")]
    Json {
        what: String,
        #[source]
        source: serde_json::Error,
    },
}

impl VerifyError {
    /// The job's own error, when the real run failed (for the caller's exit code).
    pub fn job(&self) -> Option<&JobError> {
        match self {
            VerifyError::Job(e) => Some(e),
            _ => None,
        }
    }

    fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> VerifyError {
        let what = what.into();
        move |source| VerifyError::Io { what, source }
    }

    fn json(what: impl Into<String>) -> impl FnOnce(serde_json::Error) -> VerifyError {
        let what = what.into();
        move |source| VerifyError::Json { what, source }
    }
}

/// The simulator's prediction of each rank of `scenario` (default cost model), which the
/// runtime checks a real run against before it starts (`twin_runtime::job::fit`).
pub fn demand(
    scenario: &twin_sim::scenario::Scenario,
) -> Result<Vec<twin_runtime::job::RankDemand>, twin_sim::PredictError> {
    let prediction = twin_sim::predict(scenario, &twin_sim::PredictOptions::default())?;
    Ok(prediction
        .result
        .ranks
        .iter()
        .map(|r| twin_runtime::job::RankDemand {
            peak_memory_bytes: r.peak_memory_bytes,
            host_memory_peak_bytes: r.host_memory_peak_bytes,
            flops: r.flops,
        })
        .collect())
}

/// The median of `v` (0 for none).
use twin_sim::stats::median_or_zero as median;

#[cfg(test)]
mod tests {
    #[test]
    fn the_median_of_odd_even_and_no_values() {
        assert_eq!(super::median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(super::median(&[]), 0.0);
    }
}
