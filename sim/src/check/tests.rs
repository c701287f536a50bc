//! Check tests: thresholds on either side of the value, goodput not evaluated, `--expect`
//! and tolerance parsing, baseline regressions, escaping and counts of the renderers, diffs.

use super::*;
use crate::scenario::{Bound, Checks, Metric, Threshold};
use crate::testing::small_scenario;

fn report() -> Report {
    crate::predict(
        &small_scenario(2, 2, 2, 4),
        &crate::PredictOptions::default(),
    )
    .unwrap()
    .report
}

fn t(metric: Metric, bound: Bound, value: f64) -> Threshold {
    Threshold {
        metric,
        bound,
        value,
    }
}

#[test]
fn thresholds_pass_and_fail_on_either_side_of_the_value() {
    let r = report();
    let mut c = Checks::default();
    c.set(t(Metric::StepTimeS, Bound::Max, r.step_time_s * 1.01));
    c.set(t(Metric::Mfu, Bound::Min, r.mfu * 1.01));
    c.must_fit = Some(true);
    let res = evaluate(&c, &r);
    assert_eq!(res.len(), 3);
    assert_eq!(res[0].check, "max_step_time_s");
    assert_eq!(res[0].outcome, Outcome::Pass);
    assert_eq!(res[0].value, Some(r.step_time_s));
    assert_eq!(res[1].check, "min_mfu");
    assert_eq!(res[1].outcome, Outcome::Fail);
    assert_eq!(res[2].outcome, Outcome::Pass);
    let frac = metric_value(&r, Metric::PeakMemoryFraction).unwrap();
    assert_eq!(frac, r.peak_memory_bytes as f64 / r.usable_bytes as f64);
}

#[test]
fn goodput_is_not_evaluated_without_faults() {
    let mut c = Checks::default();
    c.set(t(Metric::Goodput, Bound::Min, 0.9));
    let res = evaluate(&c, &report());
    assert!(matches!(&res[0].outcome, Outcome::NotEvaluated(s) if s.contains("no [faults]")));
    assert!(!res[0].failed());
}

#[test]
fn expect_forms_parse() {
    assert_eq!(
        parse_expect("step_time_s<=9.5").unwrap(),
        Expectation::Threshold(t(Metric::StepTimeS, Bound::Max, 9.5))
    );
    assert_eq!(
        parse_expect("peak_memory_fraction <= 90%").unwrap(),
        Expectation::Threshold(t(Metric::PeakMemoryFraction, Bound::Max, 0.9))
    );
    assert_eq!(
        parse_expect("min_mfu=0.4").unwrap(),
        Expectation::Threshold(t(Metric::Mfu, Bound::Min, 0.4))
    );
    assert_eq!(
        parse_expect("must_fit").unwrap(),
        Expectation::MustFit(true)
    );
    assert_eq!(
        parse_expect("must_fit=false").unwrap(),
        Expectation::MustFit(false)
    );
    for bad in [
        "speed>=3",
        "mfu>=-1",
        "min_mfu",
        "must_fit=maybe",
        "mfu",
        "x=1",
    ] {
        assert!(parse_expect(bad).is_err(), "{bad}");
    }
}

#[test]
fn baseline_catches_regressions_beyond_tolerance_only() {
    let r = report();
    let base = serde_json::to_value(&r).unwrap();
    let tol = Tolerances::default();
    let same = compare_baseline(&r, &base, &tol).unwrap();
    assert!(same.iter().all(|c| c.outcome == Outcome::Pass));
    assert_eq!(same.len(), BASELINE_FIELDS.len() + 1);
    // 1.5% slower passes at 2%, 3% slower fails.
    for (factor, ok) in [(1.015, true), (1.03, false)] {
        let mut worse = r.clone();
        worse.step_time_s *= factor;
        let res = compare_baseline(&worse, &base, &tol).unwrap();
        let row = res
            .iter()
            .find(|c| c.check == "baseline.step_time_s")
            .unwrap();
        assert_eq!(row.outcome == Outcome::Pass, ok, "{factor}");
    }
    // Better is always fine.
    let mut better = r.clone();
    better.peak_memory_bytes /= 2;
    assert!(compare_baseline(&better, &base, &tol)
        .unwrap()
        .iter()
        .all(|c| c.outcome == Outcome::Pass));
    assert!(compare_baseline(&r, &serde_json::json!({}), &tol).is_err());
}

#[test]
fn tolerances_parse() {
    assert_eq!(
        parse_tolerance("step_time_s=2%").unwrap(),
        ("step_time_s".to_string(), Tolerance::Relative(0.02))
    );
    assert_eq!(
        parse_tolerance("bubble_fraction=0.05").unwrap(),
        ("bubble_fraction".to_string(), Tolerance::Absolute(0.05))
    );
    assert!(parse_tolerance("speed=2%").is_err());
    assert!(parse_tolerance("mfu=-2%").is_err());
    assert!(parse_tolerance("mfu").is_err());
}

#[test]
fn junit_escapes_and_counts() {
    let files = vec![ScenarioChecks {
        file: "a&b.toml".into(),
        scenario: "x<y>".into(),
        layout: crate::json::Layout::default(),
        checks: vec![
            CheckResult {
                check: "min_mfu".into(),
                value: Some(0.1),
                operator: Some(">="),
                threshold: Some(0.5),
                threshold_text: ">= 0.5".into(),
                outcome: Outcome::Fail,
            },
            CheckResult {
                check: "min_goodput".into(),
                value: None,
                operator: Some(">="),
                threshold: Some(0.9),
                threshold_text: ">= 0.9".into(),
                outcome: Outcome::NotEvaluated("not evaluated".into()),
            },
        ],
    }];
    let x = render(&files, CheckFormat::Junit);
    assert!(x.contains("tests=\"2\" failures=\"1\" errors=\"0\" skipped=\"1\""));
    assert!(x.contains("x&lt;y&gt;") && x.contains("a&amp;b.toml") && x.contains("&gt;= 0.5"));
    assert!(!x.contains("x<y>"));
    let md = render(&files, CheckFormat::Markdown);
    assert!(md.contains("| scenario | check | value | threshold | result |"));
    assert!(md.contains("Some checks failed"));
}

#[test]
fn diff_reports_deltas() {
    let a = report();
    let mut b = a.clone();
    b.step_time_s *= 2.0;
    let rows = diff_reports(&a, &b);
    let st = rows.iter().find(|r| r.field == "step_time_s").unwrap();
    assert_eq!(st.delta, a.step_time_s);
    assert_eq!(st.delta_fraction, Some(1.0));
    let text = render_diff(&rows, "a", "b", false);
    assert!(text.contains("+100.00%"));
}
