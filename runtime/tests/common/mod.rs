//! What the integration tests of the single-GPU run share: the caller's side of it, which
//! predicts the scenario (with a trace, for per-op times) and hands the prediction to the
//! runtime as a [`Predicted`].

use twin_runtime::backend::cuda::single::Predicted;
use twin_sim::scenario::Scenario;
use twin_sim::{PredictOptions, Prediction};

/// The simulator's prediction of `s` with a trace, as the caller of the single-GPU run makes it.
pub fn predict_with_trace(s: &Scenario) -> Prediction {
    let opts = PredictOptions {
        trace: true,
        reproducible: true,
        ..PredictOptions::default()
    };
    twin_sim::predict(s, &opts).unwrap()
}

/// The runtime's view of `p`.
pub fn predicted(p: &Prediction) -> Predicted<'_> {
    Predicted {
        scenario: &p.staged.scenario,
        plan: &p.staged.plan,
        schedule: &p.staged.schedule,
        result: &p.result,
        report: &p.report,
    }
}
