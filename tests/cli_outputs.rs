//! Every command that writes a file checks its output flag before its work: a calibration or a
//! real run whose `-o` names a missing directory must not spend minutes and then fail.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

mod common;
use common::{scratch_dir, twin};

#[test]
fn every_writing_command_refuses_an_unwritable_output_first_naming_the_flag() {
    let dir = scratch_dir("outputs");
    let missing = dir.join("missing");
    let file = |name: &str| missing.join(name).display().to_string();
    let plain = dir.join("plain-file");
    std::fs::write(&plain, "x").unwrap();
    let plain = plain.display().to_string();
    let profile = "scenarios/profiles/host-example.toml";
    let argv = |head: &[&str], last: String| -> Vec<String> {
        head.iter().map(|a| a.to_string()).chain([last]).collect()
    };
    let cases = [
        (
            argv(&["calibrate", "host", "-o"], file("p.toml")),
            "--output",
        ),
        (
            argv(
                &["simulate", "scenarios/512xA100.toml", "--trace"],
                file("t.json"),
            ),
            "--trace",
        ),
        (
            argv(
                &["run", "scenarios/host/single.toml", "--trace"],
                file("t.json"),
            ),
            "--trace",
        ),
        (
            argv(
                &["run", "scenarios/host/single.toml", "--checkpoint-dir"],
                plain.clone(),
            ),
            "--checkpoint-dir",
        ),
        (
            argv(
                &["sweep", "scenarios/512xA100.toml", "--out"],
                file("s.csv"),
            ),
            "--out",
        ),
        (
            argv(
                &["check", "scenarios/512xA100.toml", "--out"],
                file("c.json"),
            ),
            "--out",
        ),
        (
            argv(
                &[
                    "verify",
                    "step",
                    "scenarios/host/single.toml",
                    "--profile",
                    profile,
                    "--trace-dir",
                ],
                plain.clone(),
            ),
            "--trace-dir",
        ),
    ];
    for (args, flag) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = twin(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        let first = err.lines().next().unwrap_or_default();
        assert!(
            first.starts_with(&format!("error: {flag} ")),
            "{args:?}: {err}"
        );
        // Nothing ran: no output, and the missing directory was not created behind its back.
        assert!(
            o.stdout.is_empty(),
            "{args:?} printed {}",
            String::from_utf8_lossy(&o.stdout)
        );
        assert!(!missing.exists(), "{args:?} created {}", missing.display());
    }
}
