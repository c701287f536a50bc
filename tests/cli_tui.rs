//! End-to-end tests of `twin tui`: the real binary in a real terminal (tmux), driven by keys
//! as a user would, and its refusal to draw into a pipe.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

mod common;
use common::tmux::Tmux;
use common::twin;

#[test]
fn tui_refuses_a_stdout_that_is_not_a_terminal() {
    let out = twin(&["tui", "scenarios/small.toml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs a terminal"), "{err}");
    assert!(out.stdout.is_empty(), "nothing drawn into the pipe");
}

/// The tty's canonical mode, printed after the UI exits (`MODE=icanon` or `MODE=-icanon`).
const PRINT_MODE: &str = "stty -a | tr ' ' '\\n' | grep -x -- '-*icanon' | sed 's/^/MODE=/';";

/// Quits with `q` and checks the terminal was given back: exit 0, canonical mode, the
/// alternate screen left.
fn quit_and_check_restored(tmux: &Tmux) {
    tmux.keys(&["q"]);
    let screen = tmux.final_screen();
    assert!(screen.contains("TWIN-EXIT=0"), "{screen}");
    let mode = tmux.wait_for("the tty mode", |s| s.contains("MODE="));
    assert!(mode.contains("MODE=icanon"), "raw mode left on:\n{mode}");
    assert!(
        !screen.contains("1 Timeline"),
        "the alternate screen was left: the UI is gone\n{screen}"
    );
}

/// The "now" column of the What-if pane's step time row.
fn shown_step_time(screen: &str) -> Option<(String, String)> {
    let line = screen.lines().find(|l| l.contains("step time"))?;
    let cells: Vec<&str> = line.split_whitespace().collect();
    let i = cells.iter().position(|c| *c == "time")?;
    let start = format!("{} {}", cells.get(i + 1)?, cells.get(i + 2)?);
    let now = format!("{} {}", cells.get(i + 3)?, cells.get(i + 4)?);
    Some((start, now))
}

/// `twin simulate`'s step time for small.toml with `set`, as the TUI prints milliseconds.
fn simulated_step_ms(set: &str) -> String {
    let out = twin(&[
        "simulate",
        "scenarios/small.toml",
        "--format",
        "json",
        "--set",
        set,
    ]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = v["step_time_s"].as_f64().unwrap();
    assert!(
        (1e-3..1.0).contains(&s),
        "small.toml steps take milliseconds"
    );
    format!("{:.2} ms", s * 1e3)
}

#[test]
fn tui_switches_panes_edits_a_knob_and_quits_restoring_the_terminal() {
    let Some(tmux) = Tmux::start("whatif", "tui scenarios/small.toml", PRINT_MODE) else {
        return;
    };
    tmux.wait_for("the timeline", |s| {
        s.contains("1 Timeline") && s.contains("step ")
    });
    tmux.keys(&["2"]);
    tmux.wait_for("the memory pane", |s| s.contains("at peak"));
    tmux.keys(&["Tab"]);
    tmux.wait_for("the compare pane", |s| s.contains("No measured trace"));
    tmux.keys(&["4"]);
    let screen = tmux.wait_for("the what-if pane", |s| {
        s.contains("knobs") && shown_step_time(s).is_some()
    });
    let (start, now) = shown_step_time(&screen).expect("a step time row");
    assert_eq!(start, now, "nothing edited yet");
    assert_eq!(start, simulated_step_ms("training.micro_batch=2"));

    // micro batch 2 -> 4, re-simulated in the background.
    let expected = simulated_step_ms("training.micro_batch=4");
    assert_ne!(expected, start, "the edit must change the step time");
    tmux.keys(&["Down", "Down", "Down", "Down", "Right"]);
    let screen = tmux.wait_for("the new step time", |s| {
        shown_step_time(s).is_some_and(|(_, now)| now == expected) && !s.contains("simulating")
    });
    assert!(screen.contains("--set training.micro_batch=4"), "{screen}");

    quit_and_check_restored(&tmux);
}

#[test]
fn tui_compares_with_a_measured_trace_file() {
    let dir = common::scratch_dir("tui");
    let trace = dir.join("m.trace.json");
    let out = twin(&[
        "simulate",
        "scenarios/small.toml",
        "--trace",
        trace.to_str().unwrap(),
        "--trace-ranks",
        "all",
    ]);
    assert!(out.status.success());
    let args = format!("tui scenarios/small.toml --measured '{}'", trace.display());
    let Some(tmux) = Tmux::start("measured", &args, PRINT_MODE) else {
        return;
    };
    tmux.wait_for("the timeline", |s| {
        s.contains("1 Timeline") && s.contains("step ")
    });
    tmux.keys(&["3"]);
    // Wait for the whole frame (its last timeline row), not just its first lines: under load
    // tmux can be read while the frame is still being written.
    let screen = tmux.wait_for("the comparison", |s| {
        s.contains("measured: m.trace.json") && s.contains("r7")
    });
    // The measured trace is this very prediction: no error anywhere.
    let row = screen
        .lines()
        .find(|l| l.contains("step time"))
        .expect("a step time row");
    assert!(row.trim_end().ends_with("+0.0%"), "{row}");
    assert!(
        screen.contains("predicted") && screen.contains("r7"),
        "{screen}"
    );
    quit_and_check_restored(&tmux);
    std::fs::remove_dir_all(&dir).ok();
}
