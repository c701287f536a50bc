//! Propagating a profile's uncertainty to a prediction: the step is simulated once per draw of
//! the profile ([`Profile::sample`]) on the already compiled schedule, and the 2.5% and 97.5%
//! quantiles of the step times are the interval. Seeded, so the same scenario seed gives the
//! same interval. It sits above the engine, as the predict pipeline does.

use crate::cost::Analytic;
use crate::engine::{simulate, SimError, SimOptions};
use crate::profile::{Profile, Rng};
use crate::Staged;

/// The 95% interval of the step time (ns) under the profile's parameter uncertainty, from
/// `samples` draws seeded by `seed`; `None` when no parameter has an interval. `staged` must
/// hold the scenario already planned and generated (it is simulated, not rebuilt).
pub fn step_time_ci95(
    staged: &Staged,
    profile: &Profile,
    samples: u32,
    seed: u64,
    opts: &SimOptions,
) -> Result<Option<[u64; 2]>, SimError> {
    if !profile.has_intervals() || samples == 0 {
        return Ok(None);
    }
    // Only the step time is read: no trace, no memory replay, and representative ranks
    // wherever the engine proves the collapsed run exact, whatever the reported run asked
    // for (`--full` simulates every rank for the report, not for each draw).
    let opts = SimOptions {
        trace: false,
        trace_ranks: None,
        memory: false,
        ..opts.clone()
    };
    let mut rng = Rng::new(seed);
    let mut times = Vec::with_capacity(samples as usize);
    for i in 0..samples {
        let mut cost = Analytic::from_profile(&staged.scenario, &profile.sample(&mut rng));
        cost.node_step_bytes = staged.cost.node_step_bytes;
        // With the machine's interruptions in the profile, each draw meets its own: the
        // interval is then one step's, as a run measures it.
        let opts = SimOptions {
            jitter_seed: cost
                .interruptions
                .map(|_| seed.wrapping_add(u64::from(i) + 1)),
            collapse: cost.interruptions.is_none(),
            ..opts.clone()
        };
        times.push(simulate(&staged.plan, &staged.schedule, &cost, &opts)?.step_time_ns);
    }
    times.sort_unstable();
    let q = |f: f64| {
        let i = ((times.len() as f64 - 1.0) * f).round() as usize;
        times.get(i).copied().unwrap_or(0)
    };
    Ok(Some([q(0.025), q(0.975)]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Source;
    use crate::testing::small_scenario;

    const A100: &str = include_str!("../../scenarios/profiles/a100-dgx.toml");

    fn setup(width: f64) -> (Staged, Profile, u64) {
        let mut p = crate::profile::parse_str(A100, "a100-dgx.toml").unwrap();
        let e = p.gemm_max_efficiency.value;
        p.intra.latency_ns.source = Source::Fitted;
        p.gemm_max_efficiency.ci95 = Some([e - width, (e + width).min(1.0)]);
        let l = p.intra.latency_ns.value;
        p.intra.latency_ns.ci95 = Some([l * (1.0 - width), l * (1.0 + width)]);
        let s = small_scenario(2, 2, 2, 4);
        let staged = Staged::with_profile(&s, Some(&p)).unwrap();
        let point = staged
            .simulate(&SimOptions::default())
            .unwrap()
            .step_time_ns;
        (staged, p, point)
    }

    #[test]
    fn interval_contains_the_point_estimate_and_widens_with_wider_cis() {
        let (staged, narrow_p, point) = setup(0.02);
        let narrow = step_time_ci95(&staged, &narrow_p, 64, 7, &SimOptions::default())
            .unwrap()
            .unwrap();
        assert!(
            narrow[0] <= point && point <= narrow[1],
            "{narrow:?} {point}"
        );
        assert!(narrow[0] < narrow[1]);
        let (staged, wide_p, _) = setup(0.08);
        let wide = step_time_ci95(&staged, &wide_p, 64, 7, &SimOptions::default())
            .unwrap()
            .unwrap();
        assert!(
            wide[1] - wide[0] > narrow[1] - narrow[0],
            "{wide:?} {narrow:?}"
        );
        assert!(wide[0] <= point && point <= wide[1]);
    }

    /// The draws read only step times, which a collapsed run gives exactly: asked for every
    /// rank, a trace and the memory replay, the interval is the one of collapsed draws.
    #[test]
    fn the_interval_of_a_full_run_is_that_of_collapsed_draws() {
        let (staged, p, _) = setup(0.05);
        let collapsed = SimOptions {
            collapse: true,
            ..SimOptions::default()
        };
        let full = SimOptions {
            collapse: false,
            trace: true,
            memory: true,
            ..SimOptions::default()
        };
        let a = step_time_ci95(&staged, &p, 16, 3, &collapsed).unwrap();
        let b = step_time_ci95(&staged, &p, 16, 3, &full).unwrap();
        assert!(a.is_some());
        assert_eq!(a, b);
    }

    #[test]
    fn deterministic_per_seed_and_absent_without_intervals() {
        let (staged, p, _) = setup(0.05);
        let a = step_time_ci95(&staged, &p, 32, 1, &SimOptions::default()).unwrap();
        let b = step_time_ci95(&staged, &p, 32, 1, &SimOptions::default()).unwrap();
        assert_eq!(a, b);
        let mut plain = crate::profile::parse_str(A100, "a100-dgx.toml").unwrap();
        assert!(!plain.has_intervals());
        // A published spread is not a fit's uncertainty: not sampled.
        plain.intra.latency_ns.ci95 = Some([1000.0, 5000.0]);
        assert_eq!(plain.intra.latency_ns.source, Source::Published);
        assert!(!plain.has_intervals());
        assert_eq!(
            step_time_ci95(&staged, &plain, 32, 1, &SimOptions::default()).unwrap(),
            None
        );
    }
}
