//! Progress bars: drawn on a terminal and leaving a clean screen behind (a sweep in a real
//! terminal, tmux, read back with capture-pane), and never drawn when stderr is not a
//! terminal or with `--quiet`.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use std::process::Output;

mod common;
use common::tmux::Tmux;
use common::twin;

/// The layouts a sweep considered, from its summary line ("... N layouts, ...").
fn layouts_in_summary(screen: &str) -> u64 {
    let line = screen
        .lines()
        .find(|l| l.starts_with("small: "))
        .unwrap_or_else(|| panic!("no summary line:\n{screen}"));
    let n = line["small: ".len()..].split(' ').next().unwrap();
    n.parse().unwrap()
}

#[test]
fn a_sweep_on_a_terminal_leaves_one_complete_bar_and_no_fragments() {
    let Some(tmux) = Tmux::start("sweep", "sweep scenarios/small.toml --search --top 3", "") else {
        return;
    };
    let screen = tmux.final_screen();
    assert!(screen.contains("TWIN-EXIT=0"), "{screen}");
    let total = layouts_in_summary(&screen);
    assert!(total > 10, "{screen}");
    // Exactly one bar line is left: the finished bar, complete, with nothing after its ETA.
    let bars: Vec<&str> = screen.lines().filter(|l| l.contains(" [")).collect();
    assert_eq!(bars.len(), 1, "one bar line:\n{screen}");
    let bar = bars[0].trim_end();
    let inside = bar
        .strip_prefix("  layouts [")
        .and_then(|rest| rest.split_once("] "))
        .unwrap_or_else(|| panic!("the bar's shape: {bar:?}"));
    assert!(
        !inside.0.is_empty() && inside.0.chars().all(|c| c == '='),
        "a finished bar is full: {bar:?}"
    );
    let figures: Vec<&str> = inside.1.split_whitespace().collect();
    assert_eq!(
        figures.first().copied(),
        Some(format!("{total}/{total}").as_str()),
        "{bar:?}"
    );
    assert!(figures.get(1).is_some_and(|r| r.ends_with("/s")), "{bar:?}");
    assert_eq!(figures.get(2..), Some(&["ETA", "0s"][..]), "{bar:?}");
    // Nothing of an earlier, longer draw survives anywhere on the screen.
    for line in screen.lines() {
        assert!(
            !line.contains("s  s") && !line.contains("ETA") || line.trim_end() == bar,
            "a fragment of a bar: {line:?}\n{screen}"
        );
    }
    // The table follows the bar, on lines of its own.
    let at = |p: &str| screen.lines().position(|l| l.starts_with(p));
    assert!(at("  layouts [") < at("small: "), "{screen}");
    assert!(at("rank ").is_some(), "{screen}");
}

#[test]
fn quiet_on_a_terminal_draws_nothing() {
    let Some(tmux) = Tmux::start(
        "quiet",
        "sweep scenarios/small.toml --search --top 1 --quiet",
        "",
    ) else {
        return;
    };
    let screen = tmux.final_screen();
    assert!(screen.contains("TWIN-EXIT=0"), "{screen}");
    assert!(!screen.contains("layouts ["), "{screen}");
    assert!(!screen.contains("ETA"), "{screen}");
}

#[test]
fn a_horizon_draws_its_trials_and_a_plain_simulate_draws_nothing() {
    let Some(plain) = Tmux::start("plain", "simulate scenarios/small.toml", "") else {
        return;
    };
    let screen = plain.final_screen();
    assert!(screen.contains("TWIN-EXIT=0"), "{screen}");
    assert!(
        !screen.contains("ETA") && !screen.contains(" ["),
        "{screen}"
    );
    let Some(horizon) = Tmux::start(
        "horizon",
        "simulate scenarios/small.toml --horizon 1d --seeds 40",
        "",
    ) else {
        return;
    };
    let screen = horizon.final_screen();
    assert!(screen.contains("TWIN-EXIT=0"), "{screen}");
    let bar = screen
        .lines()
        .find(|l| l.starts_with("  seeds ["))
        .unwrap_or_else(|| panic!("no bar:\n{screen}"));
    assert!(bar.contains("] 40/40 "), "{bar}");
    assert!(bar.trim_end().ends_with("ETA 0s"), "{bar}");
}

/// No bar, no carriage return and no escape sequence reaches a stderr that is a pipe.
fn assert_nothing_drawn(o: &Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains('\r'), "{err:?}");
    assert!(!err.contains('\u{1b}'), "{err:?}");
    assert!(!err.contains("ETA"), "{err:?}");
}

#[test]
fn no_bar_when_stderr_is_not_a_terminal() {
    assert_nothing_drawn(&twin(&["sweep", "scenarios/small.toml", "--search"]));
    assert_nothing_drawn(&twin(&[
        "simulate",
        "scenarios/512xA100-faults.toml",
        "--horizon",
        "2d",
        "--seeds",
        "20",
    ]));
}

#[test]
fn quiet_is_accepted_by_every_command() {
    for args in [
        &["simulate", "scenarios/small.toml", "--quiet"][..],
        &["--quiet", "simulate", "scenarios/small.toml"],
        &[
            "diff",
            "scenarios/small.toml",
            "scenarios/small.toml",
            "--quiet",
        ],
        &["validate", "--quiet", "-h"],
        &["doctor", "--quiet", "-h"],
    ] {
        let o = twin(args);
        assert!(
            o.status.success(),
            "twin {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
