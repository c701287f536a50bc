//! A real terminal for end-to-end tests: `twin ARGS` run in a tmux pane of its own server,
//! read back with capture-pane and driven with send-keys.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The pane's session name.
const SESSION: &str = "t";

/// A tmux server of our own (unique socket), killed when dropped, even if the test fails.
pub struct Tmux {
    socket: String,
}

impl Tmux {
    /// A server on its own socket running `twin ARGS` in a 120x40 pane; after twin exits the
    /// pane prints `TWIN-EXIT=<status>`, then runs `after` (shell), and stays open so it can be
    /// read. `None` (with a printed reason) when tmux is missing.
    pub fn start(name: &str, args: &str, after: &str) -> Option<Tmux> {
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
        let script = format!("cd '{dir}' && '{bin}' {args}; echo TWIN-EXIT=$?; {after} sleep 120");
        let started = tmux.cmd(&[
            "new-session",
            "-d",
            "-s",
            SESSION,
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

    pub fn cmd(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux runs")
    }

    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", SESSION]).stdout)
            .into_owned()
    }

    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", SESSION];
        args.extend_from_slice(keys);
        assert!(self.cmd(&args).status.success());
    }

    /// Polls the screen until `ok` holds, up to 120 s; panics with the last screen.
    pub fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The pane once twin has exited.
    pub fn final_screen(&self) -> String {
        self.wait_for("twin's exit", |s| s.contains("TWIN-EXIT="))
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}
