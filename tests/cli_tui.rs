//! End-to-end tests of `twin tui`: the real binary in a real terminal (tmux), driven by keys
//! as a user would, and its refusal to draw into a pipe.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod common;
use common::twin;

#[test]
fn tui_refuses_a_stdout_that_is_not_a_terminal() {
    let out = twin(&["tui", "scenarios/small.toml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs a terminal"), "{err}");
    assert!(out.stdout.is_empty(), "nothing drawn into the pipe");
}

/// A tmux server of our own (unique socket), killed when dropped, even if the test fails.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// A server on its own socket running `twin ARGS` in a 120x40 session named "tui";
    /// after the UI exits the pane prints its exit status and the tty's canonical mode, and
    /// stays open so it can be read. `None` (with a printed reason) when tmux is missing.
    fn start(name: &str, args: &str) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            println!("skipped: tmux is not installed");
            return None;
        }
        let tmux = Tmux {
            socket: format!("twin-test-{}-{name}", std::process::id()),
        };
        let bin = env!("CARGO_BIN_EXE_twin");
        let dir = env!("CARGO_MANIFEST_DIR");
        assert!(Path::new(bin).exists());
        let script = format!(
            "cd '{dir}' && '{bin}' {args}; echo TWIN-EXIT=$?; \
             stty -a | tr ' ' '\\n' | grep -x -- '-*icanon' | sed 's/^/MODE=/'; sleep 120"
        );
        let started = tmux.cmd(&[
            "new-session",
            "-d",
            "-s",
            "tui",
            "-x",
            "120",
            "-y",
            "40",
            "sh",
            "-c",
            &script,
        ]);
        assert!(started.status.success(), "{started:?}");
        Some(tmux)
    }

    /// Quits with `q` and checks the terminal was given back: exit 0, canonical mode, the
    /// alternate screen left.
    fn quit_and_check_restored(&self) {
        self.keys(&["q"]);
        let screen = self.wait_for("the shell again", |s| s.contains("TWIN-EXIT="));
        assert!(screen.contains("TWIN-EXIT=0"), "{screen}");
        let mode = self.wait_for("the tty mode", |s| s.contains("MODE="));
        assert!(mode.contains("MODE=icanon"), "raw mode left on:\n{mode}");
        assert!(
            !screen.contains("1 Timeline"),
            "the alternate screen was left: the UI is gone\n{screen}"
        );
    }

    fn cmd(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux runs")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "tui"]).stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "tui"];
        args.extend_from_slice(keys);
        assert!(self.cmd(&args).status.success());
    }

    /// Polls the screen until `ok` holds, up to a deadline; panics with the last screen.
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            if Instant::now() > deadline {
                panic!("timed out waiting for {what}; screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
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
    let Some(tmux) = Tmux::start("whatif", "tui scenarios/small.toml") else {
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

    tmux.quit_and_check_restored();
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
    let Some(tmux) = Tmux::start("measured", &args) else {
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
    tmux.quit_and_check_restored();
    std::fs::remove_dir_all(&dir).ok();
}
