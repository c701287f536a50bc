//! The spellings from before `verify` and `calibrate` had subcommands (`twin verify SCENARIO`,
//! `--faults`, `twin calibrate --backend`, `--from-nccl-tests`, `--refit`) are refused with
//! the command to write, the user's own arguments respelled, not with clap's generic error.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

mod common;
use common::{text, twin};

#[test]
fn old_spellings_name_the_command_to_write() {
    let cases: [(&[&str], &str); 6] = [
        (
            &["verify", "scenarios/host/pp.toml", "--profile", "p.toml"],
            "twin verify step scenarios/host/pp.toml --profile p.toml",
        ),
        (
            &[
                "verify",
                "scenarios/host/faults.toml",
                "--faults",
                "--repeat",
                "1",
            ],
            "twin verify recovery scenarios/host/faults.toml --repeat 1",
        ),
        (
            &["calibrate", "--backend", "host", "--quick", "-o", "h.toml"],
            "twin calibrate host --quick -o h.toml",
        ),
        (&["calibrate", "--backend", "cuda"], "twin calibrate cuda"),
        (
            &["calibrate", "--from-nccl-tests", "a.log", "b.log"],
            "twin calibrate nccl-tests a.log b.log",
        ),
        (
            &["calibrate", "--refit", "h.samples.json", "-o", "h2.toml"],
            "twin calibrate refit h.samples.json -o h2.toml",
        ),
    ];
    for (old, new) in cases {
        let o = twin(old);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{old:?}: {err}");
        assert!(
            err.contains(&format!("write:\n  {new}\n")),
            "{old:?}: {err}"
        );
        assert!(!err.contains("unrecognized"), "{old:?}: {err}");
    }
    // Today's spellings are not caught.
    let o = twin(&["calibrate", "refit", "missing.samples.json", "-o", "x.toml"]);
    assert!(!text(&o.stderr).contains("write:"), "{}", text(&o.stderr));
}
