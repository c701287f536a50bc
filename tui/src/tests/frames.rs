//! Snapshots of every pane at 80x24 and 160x48 (committed under `snapshots/`; CI=true fails
//! on a missing one). Frames are plain text: op kinds are letters as well as colours.

use super::fixtures::{faults, frame, small, small_with, small_with_measured};
use super::keys::{press, settle};
use crate::state::Pane;
use crate::update::Key;
use crate::App;

const SIZES: [(u16, u16); 2] = [(80, 24), (160, 48)];

fn snap(name: &str, app: &App) {
    for (w, h) in SIZES {
        insta::assert_snapshot!(format!("{name}_{w}x{h}"), frame(app, w, h));
    }
}

#[test]
fn timeline_pane_with_a_selected_op() {
    let (app, _) = small();
    let (app, _) = press(app, &[Key::Char('n'), Key::Char('n'), Key::Char('n')]);
    snap("timeline", &app);
}

#[test]
fn timeline_pane_zoomed() {
    let (app, _) = small();
    let (app, _) = press(
        app,
        &[Key::Char('+'), Key::Char('+'), Key::Right, Key::Down],
    );
    snap("timeline_zoomed", &app);
}

#[test]
fn memory_pane() {
    let (app, _) = small();
    let (app, _) = press(app, &[Key::Char('2'), Key::Down]);
    snap("memory", &app);
}

#[test]
fn memory_pane_out_of_memory() {
    // 1.27 GB usable: the 1.21 GiB framework reserve alone does not fit.
    let (app, _) = small_with(&["cluster.gpu.hbm_bytes=1270000000"]);
    assert!(!app.current.report.fits);
    let (app, _) = press(app, &[Key::Char('2')]);
    snap("memory_oom", &app);
}

#[test]
fn compare_pane_with_a_measured_trace() {
    let app = small_with_measured();
    let (app, _) = press(app, &[Key::Char('3')]);
    snap("compare", &app);
}

#[test]
fn compare_pane_without_a_measured_trace() {
    let (app, _) = small();
    let (app, _) = press(app, &[Key::Char('3')]);
    snap("compare_none", &app);
}

#[test]
fn whatif_pane_after_an_edit() {
    let (app, setup) = small();
    // micro batch 2 -> 4: two micro batches per pipeline instead of four.
    let keys = [
        Key::Char('4'),
        Key::Down,
        Key::Down,
        Key::Down,
        Key::Down,
        Key::Right,
    ];
    let (app, effects) = press(app, &keys);
    let app = settle(app, effects, &setup);
    assert_eq!(app.pane, Pane::WhatIf);
    snap("whatif", &app);
}

#[test]
fn whatif_pane_shows_the_validator_message() {
    let (app, setup) = small();
    // tp 2 -> 4 with pp 2, dp 2 on 8 GPUs: rejected by the scenario validator.
    let (app, effects) = press(app, &[Key::Char('4'), Key::Right]);
    let app = settle(app, effects, &setup);
    assert!(app.whatif.error.is_some());
    snap("whatif_invalid", &app);
}

#[test]
fn faults_pane() {
    let app = faults();
    let (app, _) = press(app, &[Key::Char('5')]);
    snap("faults", &app);
}

#[test]
fn faults_pane_without_faults() {
    let (app, _) = small();
    let (app, _) = press(app, &[Key::Char('5')]);
    snap("faults_none", &app);
}

#[test]
fn help_overlay() {
    let (app, _) = small();
    let (app, _) = press(app, &[Key::Char('?')]);
    snap("help", &app);
}

#[test]
fn compare_aligns_a_measured_trace_that_starts_later() {
    // A measured trace keeps the run's clock: the same step, 3 s in.
    let (mut app, _) = small();
    let mut late = app.current.timeline.clone();
    let shift = 3_000_000_000;
    for row in &mut late.rows {
        for s in &mut row.spans {
            s.start_ns += shift;
            s.end_ns += shift;
        }
    }
    late.start_ns += shift;
    late.end_ns += shift;
    app.measured = Some(crate::measured::Measured {
        label: "late.trace.json".into(),
        timeline: late,
        predicted: None,
        figures: None,
        snapshot: None,
    });
    let (app, _) = press(app, &[Key::Char('3')]);
    let text = frame(&app, 120, 40);
    let lines: Vec<&str> = text.lines().collect();
    let at = |name: &str| lines.iter().position(|l| *l == name).unwrap();
    let (p, m) = (at("predicted"), at("measured"));
    let predicted = &lines[p + 1..m];
    let measured: Vec<&str> = lines[m + 1..]
        .iter()
        .take_while(|l| !l.trim_start().starts_with('┬'))
        .copied()
        .collect();
    assert!(predicted.iter().any(|l| l.contains('F')), "{text}");
    assert_eq!(predicted, &measured[..], "{text}");
    assert!(text.contains("+0.0%"), "no error on the same step: {text}");
}

#[test]
fn compare_shows_the_cores_idle_time_from_a_host_verify() {
    // A `twin verify step --trace-dir` directory of a host run: its figures, each core's idle time
    // between ops among them, replace the counts from the traces.
    let (mut app, _) = small();
    let timeline = app.current.timeline.clone();
    app.measured = Some(crate::measured::Measured {
        label: "verify/".into(),
        timeline: timeline.clone(),
        predicted: Some(timeline),
        figures: Some(crate::measured::VerifyFigures {
            bubble_fraction: [0.57, 0.52],
            exposed_comm_fraction: [0.15, 0.18],
            core_idle_between_ops_s: Some([0.000_26, 0.001_25]),
            collective_meetings: Some([(0, 136), (17, 136)]),
        }),
        snapshot: None,
    });
    let (app, _) = press(app, &[Key::Char('3')]);
    let text = frame(&app, 120, 40);
    let line = text
        .lines()
        .find(|l| l.starts_with("core idle between ops (verify.json)"))
        .unwrap_or_else(|| panic!("no core idle row: {text}"));
    // 0.26 ms predicted, 1.25 ms measured: the run idled 79.2% more of the measured time.
    assert!(line.contains("+79.2%"), "{line}");
    assert!(text.contains("bubble (verify.json)"), "{text}");
    // 17 of 136 calls met another group's on a core in the run, none in the prediction.
    let meet = text
        .lines()
        .find(|l| l.starts_with("collectives meeting on a core"))
        .unwrap_or_else(|| panic!("no meetings row: {text}"));
    assert!(
        meet.contains("0/136") && meet.contains("17/136") && meet.contains("+17"),
        "{meet}"
    );
}

#[test]
fn the_memory_pane_draws_a_snapshot_over_the_predicted_step() {
    // A measured snapshot (fractions of its step) is drawn beside the prediction, with its own
    // legend entry; without one the legend has none.
    let (mut app, _) = small();
    let timeline = app.current.timeline.clone();
    app.measured = Some(crate::measured::Measured {
        label: "snap".into(),
        timeline,
        predicted: None,
        figures: None,
        snapshot: Some(vec![(0.0, 1 << 30), (0.5, 3 << 30), (1.0, 1 << 30)]),
    });
    let (app, _) = press(app, &[Key::Char('2')]);
    let text = frame(&app, 120, 40);
    assert!(text.contains("measured"), "{text}");
    let (app, _) = small();
    let (app, _) = press(app, &[Key::Char('2')]);
    assert!(!frame(&app, 120, 40).contains("measured"));
}
