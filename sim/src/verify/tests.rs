//! Comparison logic on synthetic inputs: a simulated step of a small tp 2 x pp 2 scenario is
//! the prediction, and a copy with chosen ops slowed down is the "measurement".

use super::*;
use crate::schedule::OpKind;
use crate::{predict, PredictOptions, Prediction};

fn predicted() -> Prediction {
    predicted_layout(2, 2, 1, 0)
}

/// A traced, reproducible prediction of a small 4-layer scenario of this layout (also the
/// critical path's tests' input).
pub(super) fn predicted_layout(tp: u32, pp: u32, dp: u32, zero: u8) -> Prediction {
    let mut s = crate::testing::small_scenario(tp, pp, dp, 4);
    s.model.layers = 4;
    s.parallel.zero = zero;
    predict(
        &s,
        &PredictOptions {
            trace: true,
            reproducible: true,
            ..Default::default()
        },
    )
    .unwrap()
}

/// The predicted trace with every op for which `slow` holds taking `factor` times as long
/// (its end moved; later ops are not shifted, which the op comparison does not need).
fn slowed(p: &Prediction, slow: impl Fn(&OpKind) -> bool, factor: u64) -> Trace {
    let mut t = p.result.trace.clone().unwrap();
    for e in &mut t.events {
        let op = p.staged.schedule.get_op(e.rank, e.op).unwrap();
        if slow(&op.kind) {
            e.end_ns = e.start_ns + (e.end_ns - e.start_ns) * factor;
        }
    }
    t
}

/// The prediction of `p` compared with a measurement of `report` and `trace`.
fn against(p: &Prediction, report: &Report, trace: &Trace, opts: &CompareOptions) -> Comparison {
    let predicted = Side {
        report: &p.report,
        trace: p.result.trace.as_ref().unwrap(),
    };
    compare(&p.staged.schedule, predicted, Side { report, trace }, opts)
}

fn is_tp_collective(k: &OpKind) -> bool {
    matches!(k, OpKind::Collective { group, .. } if *group == crate::plan::GroupKind::Tp)
}

#[test]
fn identical_sides_have_zero_errors() {
    let p = predicted();
    let t = p.result.trace.as_ref().unwrap();
    let side = Side {
        report: &p.report,
        trace: t,
    };
    let c = compare(&p.staged.schedule, side, side, &CompareOptions::default());
    assert_eq!(c.step_time_error, 0.0);
    assert_eq!(c.bubble_fraction_error_points, 0.0);
    assert_eq!(c.peak_memory_error, 0.0);
    assert_eq!(c.unmatched_ops, 0);
    assert_eq!(c.peak_memory.len(), 4, "one entry per rank");
    assert!(c.op_groups.iter().all(|g| g.abs_error_s == 0.0));
    assert!(c.op_groups.iter().any(|g| g.kind == "gemm"));
    assert!(c.op_groups.iter().any(|g| g.kind == "collective"));
    assert!(c.op_groups.iter().any(|g| g.kind == "p2p"));
}

#[test]
fn signs_follow_measured_minus_predicted() {
    let p = predicted();
    let t = p.result.trace.as_ref().unwrap();
    let mut m = p.report.clone();
    m.step_time_s = p.report.step_time_s * 1.25;
    m.bubble_fraction = p.report.bubble_fraction + 0.05;
    m.exposed_comm_fraction = p.report.exposed_comm_fraction - 0.01;
    for e in &mut m.ranks {
        e.peak_memory_bytes = e.peak_memory_bytes * 9 / 10;
    }
    let c = against(&p, &m, t, &CompareOptions::default());
    // Measured 1.25x the prediction: (1.25 - 1) / 1.25 = +20%.
    assert!(
        (c.step_time_error - 0.2).abs() < 1e-12,
        "{}",
        c.step_time_error
    );
    assert!((c.bubble_fraction_error_points - 5.0).abs() < 1e-9);
    assert!((c.exposed_comm_error_points + 1.0).abs() < 1e-9);
    // Measured holds less than predicted: negative, (0.9 - 1) / 0.9 (up to rounding).
    assert!(
        (c.peak_memory_error + 1.0 / 9.0).abs() < 1e-6,
        "{}",
        c.peak_memory_error
    );
    // The median of several steps replaces the measured report's own step time.
    let c2 = against(
        &p,
        &m,
        t,
        &CompareOptions {
            measured_step_time_s: Some(p.report.step_time_s * 0.5),
            ..Default::default()
        },
    );
    assert!((c2.step_time_error + 1.0).abs() < 1e-12);
}

#[test]
fn the_slowed_kind_tops_the_groups_and_the_op_list() {
    let p = predicted();
    let mt = slowed(&p, is_tp_collective, 3);
    let opts = CompareOptions {
        top_ops: 5,
        ..Default::default()
    };
    let c = against(&p, &p.report, &mt, &opts);
    let first = &c.op_groups[0];
    assert_eq!(first.kind, "collective");
    assert!(first.group.contains("Tp"), "{}", first.group);
    // Three times as long: (3 - 1) / 3 of the measured time is unpredicted.
    let e = first.error.unwrap();
    assert!((e - 2.0 / 3.0).abs() < 1e-6, "{e}");
    assert!(first.worst.is_some());
    // Every other group matches exactly.
    for g in c.op_groups.iter().filter(|g| !g.group.contains("Tp")) {
        assert_eq!(g.abs_error_s, 0.0, "{}", g.group);
    }
    assert_eq!(c.largest_op_errors.len(), 5);
    for w in c.largest_op_errors.windows(2) {
        let a = w[0].measured_s - w[0].predicted_s;
        let b = w[1].measured_s - w[1].predicted_s;
        assert!(a.abs() >= b.abs());
    }
    assert!(c.largest_op_errors.iter().all(|o| o.group.contains("Tp")));
    // Deterministic.
    let again = against(&p, &p.report, &mt, &opts);
    assert_eq!(c, again);
}

#[test]
fn ops_missing_from_one_trace_are_counted() {
    let p = predicted();
    let pt = p.result.trace.as_ref().unwrap();
    let mut mt = pt.clone();
    mt.events.truncate(mt.events.len() - 3);
    let c = against(&p, &p.report, &mt, &CompareOptions::default());
    assert_eq!(c.unmatched_ops, 3);
}

#[test]
fn thresholds_name_what_they_exceed() {
    let p = predicted();
    let t = p.result.trace.as_ref().unwrap();
    let mut m = p.report.clone();
    m.step_time_s *= 2.0;
    m.bubble_fraction += 0.03;
    let c = against(&p, &m, t, &CompareOptions::default());
    assert!(c.violations(&Thresholds::default()).is_empty());
    let v = c.violations(&Thresholds {
        step_time_error: Some(0.05),
        peak_memory_error: Some(0.02),
        bubble_error_points: Some(2.0),
    });
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(v[0].contains("--max-step-time-error"));
    assert!(v[1].contains("--max-bubble-error-points"));
    let ok = c.violations(&Thresholds {
        step_time_error: Some(0.6),
        bubble_error_points: Some(3.5),
        ..Default::default()
    });
    assert!(ok.is_empty(), "{ok:?}");
}

#[test]
fn json_fields_are_stable() {
    let p = predicted();
    let t = p.result.trace.as_ref().unwrap();
    let side = Side {
        report: &p.report,
        trace: t,
    };
    let c = compare(&p.staged.schedule, side, side, &CompareOptions::default());
    let v = serde_json::to_value(&c).unwrap();
    for key in [
        "step_time_predicted_s",
        "step_time_measured_s",
        "step_time_error",
        "bubble_fraction_predicted",
        "bubble_fraction_measured",
        "bubble_fraction_error_points",
        "exposed_comm_fraction_predicted",
        "exposed_comm_fraction_measured",
        "exposed_comm_error_points",
        "exposed_comm_predicted_s",
        "exposed_comm_measured_s",
        "peak_memory_error",
        "peak_memory",
        "op_groups",
        "largest_op_errors",
        "unmatched_ops",
        "op_times_exclude_core_wait",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    let g = &v["op_groups"][0];
    for key in [
        "group",
        "kind",
        "ops",
        "predicted_s",
        "measured_s",
        "error",
        "abs_error_s",
    ] {
        assert!(g.get(key).is_some(), "missing op_groups[].{key}");
    }
    assert!(c.to_text().contains("step time"));
}

#[test]
fn size_buckets_are_powers_of_four() {
    assert_eq!(size_bucket(0), "0B");
    assert_eq!(size_bucket(1), "1B-4B");
    assert_eq!(size_bucket(3), "1B-4B");
    assert_eq!(size_bucket(4), "4B-16B");
    assert_eq!(size_bucket(65536), "64.0KiB-256.0KiB");
    assert_eq!(size_bucket(262143), "64.0KiB-256.0KiB");
    assert!(!size_bucket(u64::MAX).is_empty());
}

#[test]
fn relative_error_edges() {
    assert_eq!(relative_error(0.0, 0.0), Some(0.0));
    assert_eq!(relative_error(1.0, 0.0), None);
    assert_eq!(relative_error(1.0, 2.0), Some(0.5));
    assert_eq!(relative_error(3.0, 2.0), Some(-0.5));
}

#[test]
fn ops_are_compared_by_their_own_time_when_a_trace_knows_it() {
    let p = predicted();
    let pt = p.result.trace.as_ref().unwrap();
    assert!(pt.events.iter().all(|e| e.solo_ns.is_none()));
    let gemm = |k: &OpKind| matches!(k, OpKind::Compute(c) if !c.gemms.is_empty());
    // The measured GEMMs ran three times as long, two thirds of it waiting for a shared core.
    let mut mt = slowed(&p, gemm, 3);
    let mut waited = 0;
    for e in &mut mt.events {
        let op = p.staged.schedule.get_op(e.rank, e.op).unwrap();
        if gemm(&op.kind) {
            e.solo_ns = Some((e.end_ns - e.start_ns) / 3);
            waited += 1;
        }
    }
    assert!(waited > 0);
    let c = against(&p, &p.report, &mt, &CompareOptions::default());
    assert!(c.op_times_exclude_core_wait);
    // Spans are rounded only by the division: every group is within a nanosecond per op.
    for g in &c.op_groups {
        assert!(
            g.abs_error_s <= g.ops as f64 * 1e-9,
            "{}: {}",
            g.group,
            g.abs_error_s
        );
    }
    assert!(c.to_text().contains("each op's own time"));
    // Without the solo times the same traces show the stretch.
    for e in &mut mt.events {
        e.solo_ns = None;
    }
    let c = against(&p, &p.report, &mt, &CompareOptions::default());
    assert!(!c.op_times_exclude_core_wait);
    assert_eq!(c.op_groups[0].kind, "gemm");
    assert!(c.op_groups[0].error.unwrap() > 0.6);
    assert!(!c.to_text().contains("each op's own time"));
    // A solo time on the predicted side counts the same way.
    let mut pt2 = pt.clone();
    for e in &mut pt2.events {
        e.solo_ns = Some(e.end_ns - e.start_ns);
    }
    let side = |t| Side {
        report: &p.report,
        trace: t,
    };
    let c = compare(
        &p.staged.schedule,
        side(&pt2),
        side(pt),
        &CompareOptions::default(),
    );
    assert!(
        !c.op_times_exclude_core_wait,
        "a solo time equal to the span waited for nothing"
    );
}
