//! The command line stays one screen per command: every (sub)command's `-h` is at most 40
//! lines and shows its examples before its usage (the longer text is docs/reference/cli.md).
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

mod common;
use common::{text, twin};

/// Most lines of one `-h`.
const MAX_HELP_LINES: usize = 40;

/// The subcommands a help text lists under "Commands:" (clap's own `help` left out).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .filter(|c| c != "help")
        .collect()
}

/// Every command path, depth first: `[]`, `["simulate"]`, ..., `["verify", "step"]`, ...,
/// and the hidden `worker`.
fn commands() -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut todo = vec![Vec::<String>::new(), vec!["worker".to_string()]];
    while let Some(path) = todo.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("-h");
        let o = twin(&args);
        assert!(o.status.success(), "twin {args:?}: {}", text(&o.stderr));
        for sub in subcommands(&text(&o.stdout)) {
            todo.push([path.clone(), vec![sub]].concat());
        }
        out.push(path);
    }
    out
}

#[test]
fn every_help_is_one_screen_with_its_examples_first() {
    let all = commands();
    for must in [
        &["verify", "step"][..],
        &["calibrate", "refit"],
        &["run"],
        &["sweep"],
    ] {
        assert!(
            all.iter().any(|c| c == must),
            "{must:?} not found in {all:?}"
        );
    }
    for path in &all {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("-h");
        let help = text(&twin(&args).stdout);
        let lines: Vec<&str> = help.lines().collect();
        assert!(
            lines.len() <= MAX_HELP_LINES,
            "`twin {}` has {} lines:\n{help}",
            args.join(" "),
            lines.len()
        );
        let examples = lines
            .iter()
            .position(|l| l.trim_start().starts_with("Example"));
        let usage = lines.iter().position(|l| l.starts_with("Usage:"));
        assert!(
            matches!((examples, usage), (Some(e), Some(u)) if e < u),
            "`twin {}` shows no examples before its usage:\n{help}",
            args.join(" ")
        );
    }
}
