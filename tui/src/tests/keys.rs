//! Key sequences through `update`, without a terminal: pane switching, zoom and pan,
//! selection, knob edits that request a re-simulation, results applied or superseded,
//! validator errors, saving, quitting.

use super::fixtures::small;
use crate::state::{KnobValue, Pane};
use crate::update::{update, Effect, Key, Msg};
use crate::worker::{compute, Request, Setup};
use crate::App;

/// Feeds `keys` in order; returns the state and every effect asked for.
pub fn press(mut app: App, keys: &[Key]) -> (App, Vec<Effect>) {
    let mut all = Vec::new();
    for k in keys {
        let (next, effects) = update(app, Msg::Key(*k));
        app = next;
        all.extend(effects);
    }
    (app, all)
}

/// Carries out the Simulate effects synchronously, as the worker would, and applies results.
pub fn settle(mut app: App, effects: Vec<Effect>, setup: &Setup) -> App {
    for e in effects {
        if let Effect::Simulate(r) = e {
            app = answer(app, &r, setup);
        }
    }
    app
}

fn answer(app: App, r: &Request, setup: &Setup) -> App {
    let result = Box::new(compute(setup, &r.overrides));
    update(app, Msg::Simulated { id: r.id, result }).0
}

fn requests(effects: &[Effect]) -> Vec<Request> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Simulate(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn tab_numbers_and_backtab_switch_panes() {
    let (app, _) = small();
    assert_eq!(app.pane, Pane::Timeline);
    let (app, _) = press(app, &[Key::Tab]);
    assert_eq!(app.pane, Pane::Memory);
    let (app, _) = press(app, &[Key::Char('5')]);
    assert_eq!(app.pane, Pane::Faults);
    let (app, _) = press(app, &[Key::Tab]);
    assert_eq!(app.pane, Pane::Timeline);
    let (app, _) = press(app, &[Key::BackTab]);
    assert_eq!(app.pane, Pane::Faults);
}

#[test]
fn help_opens_and_the_next_key_only_closes_it() {
    let (app, _) = small();
    let (app, _) = press(app, &[Key::Char('?')]);
    assert!(app.help);
    let (app, _) = press(app, &[Key::Char('q')]);
    assert!(!app.help);
    assert!(!app.quit, "the key that closes help does nothing else");
    let (app, _) = press(app, &[Key::Char('q')]);
    assert!(app.quit);
}

#[test]
fn zoom_halves_the_window_and_pan_moves_it_within_the_step() {
    let (app, _) = small();
    let full = app.current.timeline.span_ns();
    assert_eq!(app.window().1 - app.window().0, full);
    let (app, _) = press(app, &[Key::Char('+')]);
    let w = app.window().1 - app.window().0;
    assert_eq!(w, full.div_ceil(2));
    assert_eq!(
        app.timeline.offset_ns,
        full / 2 - w / 2,
        "zoomed around the centre"
    );
    let (app, _) = press(app, &[Key::Right]);
    assert_eq!(app.timeline.offset_ns, full / 2 - w / 2 + w / 8);
    // Panning stops at the end of the step.
    let (app, _) = press(app, &[Key::Right; 20]);
    assert_eq!(app.window().1, app.current.timeline.end_ns);
    let (app, _) = press(app, &[Key::Home]);
    assert_eq!(app.timeline.offset_ns, 0);
    let (app, _) = press(app, &[Key::Char('-')]);
    assert_eq!(app.timeline.window_ns, 0, "zoomed out to the whole step");
    let (app, _) = press(app, &[Key::Char('+'), Key::Char('+'), Key::Char('0')]);
    assert_eq!((app.timeline.window_ns, app.timeline.offset_ns), (0, 0));
}

#[test]
fn selection_walks_ops_and_follows_rows() {
    let (app, _) = small();
    let (app, _) = press(app, &[Key::Char('n')]);
    assert_eq!(app.timeline.selected, Some(0));
    let (app, _) = press(app, &[Key::Char('n'), Key::Char('n'), Key::Char('p')]);
    assert_eq!(app.timeline.selected, Some(1));
    let at = app.current.timeline.rows[0].spans[1].start_ns;
    let (app, _) = press(app, &[Key::Down]);
    assert_eq!(app.timeline.row, 1);
    // The new row's selected op is the one starting nearest to the old one.
    let spans = &app.current.timeline.rows[1].spans;
    let chosen = &spans[app.timeline.selected.unwrap()];
    let best = spans.iter().map(|s| s.start_ns.abs_diff(at)).min().unwrap();
    assert_eq!(chosen.start_ns.abs_diff(at), best);
    let (app, _) = press(app, &[Key::Down]);
    assert_eq!(app.timeline.row, 1, "small.toml collapsed has two rows");
    let (app, _) = press(app, &[Key::Esc]);
    assert_eq!(app.timeline.selected, None);
}

#[test]
fn selecting_an_op_outside_the_window_pans_to_it() {
    let (app, _) = small();
    let keys = [Key::Char('+'), Key::Char('+'), Key::Char('+'), Key::Home];
    let (app, _) = press(app, &keys);
    let (app, _) = press(app, &[Key::Char('p')]); // the last op of the row
    let row = &app.current.timeline.rows[0];
    let s = &row.spans[app.timeline.selected.unwrap()];
    assert_eq!(app.timeline.selected, Some(row.spans.len() - 1));
    let (a, b) = app.window();
    assert!(
        a <= s.start_ns && s.start_ns < b,
        "{a}..{b} must hold {}",
        s.start_ns
    );
}

#[test]
fn a_knob_edit_requests_a_resimulation_whose_result_is_applied() {
    let (app, setup) = small();
    let base_step = app.base.step_time_ns;
    let (app, effects) = press(app, &[Key::Char('4'), Key::Down, Key::Down, Key::Down]);
    assert!(effects.is_empty(), "moving the cursor simulates nothing");
    assert_eq!(app.whatif.knobs[app.whatif.cursor].key, "parallel.vpp");
    let (app, _) = press(app, &[Key::Down]);
    let (app, effects) = press(app, &[Key::Right]);
    let reqs = requests(&effects);
    assert_eq!(reqs.len(), 1);
    assert_eq!(
        reqs[0].overrides,
        vec!["training.micro_batch=4".to_string()]
    );
    assert_eq!(app.pending, Some(reqs[0].id));
    let app = settle(app, effects, &setup);
    assert_eq!(app.pending, None);
    assert_eq!(app.current.scenario.training.micro_batch, 4);
    assert_ne!(app.current.step_time_ns, base_step);
    assert_eq!(
        app.base.step_time_ns, base_step,
        "the start stays for deltas"
    );
}

#[test]
fn a_newer_request_supersedes_an_older_answer() {
    let (app, setup) = small();
    let keys = [Key::Char('4'), Key::Down, Key::Down, Key::Down, Key::Down];
    let (app, _) = press(app, &keys);
    let (app, first) = press(app, &[Key::Right]); // micro batch 4
    let (app, second) = press(app, &[Key::Left]); // back to 2
    let (r1, r2) = (&requests(&first)[0], &requests(&second)[0]);
    assert!(r2.id > r1.id);
    // The older answer arrives late: ignored, still pending.
    let app = answer(app, r1, &setup);
    assert_eq!(app.pending, Some(r2.id));
    assert_eq!(app.current.scenario.training.micro_batch, 2);
    let app = answer(app, r2, &setup);
    assert_eq!(app.pending, None);
    assert_eq!(app.current.step_time_ns, app.base.step_time_ns);
}

#[test]
fn an_invalid_combination_shows_the_validator_message_and_keeps_the_result() {
    let (app, setup) = small();
    let (app, effects) = press(app, &[Key::Char('4'), Key::Right]); // tp 2 -> 4
    assert_eq!(
        requests(&effects)[0].overrides,
        vec!["parallel.tp=4".to_string()]
    );
    let app = settle(app, effects, &setup);
    let err = app.whatif.error.clone().expect("rejected");
    assert!(err.contains("tp"), "{err}");
    assert_eq!(app.current.scenario.parallel.tp, 2);
    // Saving an invalid edit is refused.
    let (app, effects) = press(app, &[Key::Char('s')]);
    assert!(effects.is_empty());
    assert!(app.status.contains("not valid"), "{}", app.status);
    // Back to a valid value clears the error.
    let (app, effects) = press(app, &[Key::Left]);
    let app = settle(app, effects, &setup);
    assert_eq!(app.whatif.error, None);
}

#[test]
fn typing_a_number_sets_a_knob() {
    let (app, _) = small();
    let keys = [
        Key::Char('4'),
        Key::Down,
        Key::Down, // dp
        Key::Enter,
        Key::Char('1'),
        Key::Char('6'),
        Key::Backspace,
        Key::Char('4'),
    ];
    let (app, effects) = press(app, &keys);
    assert!(effects.is_empty());
    assert_eq!(app.whatif.editing.as_deref(), Some("14"));
    assert_eq!(
        app.pane,
        Pane::WhatIf,
        "digits while typing do not switch panes"
    );
    let (app, effects) = press(app, &[Key::Enter]);
    assert_eq!(
        app.whatif.knobs[2].value,
        KnobValue::Int(14, crate::state::Step::Double)
    );
    assert_eq!(
        requests(&effects)[0].overrides,
        vec!["parallel.dp=14".to_string()]
    );
    let (app, effects) = press(app, &[Key::Enter, Key::Char('9'), Key::Esc]);
    assert!(effects.is_empty() && app.whatif.editing.is_none());
}

#[test]
fn reset_and_choices_cycle() {
    let (app, setup) = small();
    let mut keys = vec![Key::Char('4')];
    keys.extend([Key::Down; 6]); // schedule
    keys.push(Key::Right);
    let (app, effects) = press(app, &keys);
    assert_eq!(
        requests(&effects)[0].overrides,
        vec!["parallel.schedule=\"interleaved-1f1b\"".to_string()]
    );
    let app = settle(app, effects, &setup);
    let (app, effects) = press(app, &[Key::Char('r')]);
    assert!(requests(&effects)[0].overrides.is_empty());
    let app = settle(app, effects, &setup);
    assert!(app.whatif.knobs.iter().all(|k| !k.changed()));
}

#[test]
fn save_writes_the_edited_scenario_as_toml() {
    let (app, setup) = small();
    let keys = [
        Key::Char('4'),
        Key::Down,
        Key::Down,
        Key::Down,
        Key::Down,
        Key::Right,
    ];
    let (app, effects) = press(app, &keys);
    // While the re-simulation runs, saving waits.
    let (app, none) = press(app, &[Key::Char('s')]);
    assert!(none.is_empty());
    let app = settle(app, effects, &setup);
    let (app, effects) = press(app, &[Key::Char('s')]);
    let [Effect::Save { toml }] = &effects[..] else {
        panic!("expected one save, got {effects:?}");
    };
    let back = twin_sim::setup::parse_str(toml, "saved.toml", &[]).unwrap();
    assert_eq!(back, app.current.scenario);
    assert_eq!(back.training.micro_batch, 4);
    let (app, _) = update(app, Msg::Saved(Ok("small-whatif.toml".into())));
    assert_eq!(app.status, "saved small-whatif.toml");
}

#[test]
fn a_horizon_is_applied_only_to_the_step_it_belongs_to() {
    let (app, _) = small();
    let msg = |id| Msg::Horizon {
        id,
        result: Box::new(Err(format!("horizon of {id}"))),
    };
    let (app, _) = update(app, msg(9));
    assert_eq!(app.current.horizon, None, "request 9 is not the step shown");
    let (app, _) = update(app, msg(0));
    assert_eq!(app.current.horizon, Some(Err("horizon of 0".to_string())));
}
