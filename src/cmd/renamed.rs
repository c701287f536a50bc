//! Spellings of `twin verify` and `twin calibrate` from before they had subcommands: each is
//! refused with the command to write instead (the user's own arguments, respelled), not with
//! clap's generic "unrecognized subcommand".

/// The subcommand words after `verify` and `calibrate` (and help) that are today's spelling.
const CURRENT: [&str; 10] = [
    "step",
    "recovery",
    "host",
    "cuda",
    "nccl-tests",
    "refit",
    "trace",
    "help",
    "-h",
    "--help",
];

/// For an old spelling in `args` (the whole command line, program name first): what changed
/// and the command to write.
pub fn renamed(args: &[String]) -> Option<String> {
    let cmd = args.get(1)?.as_str();
    let rest = args.get(2..)?;
    if !matches!(cmd, "verify" | "calibrate")
        || rest.first().is_none_or(|a| CURRENT.contains(&a.as_str()))
    {
        return None;
    }
    let (old, new, rest) = if cmd == "verify" {
        let faults = rest.iter().any(|a| a == "--faults");
        let rest = without(rest, "--faults", false);
        if faults {
            (
                "twin verify SCENARIO --faults",
                "twin verify recovery",
                rest,
            )
        } else {
            ("twin verify SCENARIO", "twin verify step", rest)
        }
    } else if let Some(samples) = value_of(rest, "--refit") {
        let rest = [vec![samples], without(rest, "--refit", true)].concat();
        (
            "twin calibrate --refit SAMPLES",
            "twin calibrate refit",
            rest,
        )
    } else if rest.iter().any(|a| a == "--from-nccl-tests") {
        let rest = without(rest, "--from-nccl-tests", false);
        (
            "twin calibrate --from-nccl-tests LOG...",
            "twin calibrate nccl-tests",
            rest,
        )
    } else {
        let rest_without = without(rest, "--backend", true);
        match value_of(rest, "--backend").as_deref() {
            Some("cuda") => (
                "twin calibrate --backend cuda",
                "twin calibrate cuda",
                rest_without,
            ),
            _ => (
                "twin calibrate --backend host",
                "twin calibrate host",
                rest_without,
            ),
        }
    };
    let line = [vec![new.to_string()], rest].concat().join(" ");
    Some(format!(
        "`{old}` is now `{new} ...` (docs/reference/cli.md); write:\n  {line}"
    ))
}

/// The value of `flag` in `args` (`--flag VALUE` or `--flag=VALUE`).
fn value_of(args: &[String], flag: &str) -> Option<String> {
    let eq = format!("{flag}=");
    args.iter()
        .enumerate()
        .find_map(|(i, a)| match a.strip_prefix(&eq) {
            Some(v) => Some(v.to_string()),
            None if a == flag => args.get(i + 1).cloned(),
            None => None,
        })
}

/// `args` without `flag` (and its value, when `valued`).
fn without(args: &[String], flag: &str, valued: bool) -> Vec<String> {
    let eq = format!("{flag}=");
    let mut out = Vec::new();
    let mut skip = false;
    for a in args {
        if std::mem::take(&mut skip) {
            continue;
        }
        if a == flag {
            skip = valued;
        } else if !(valued && a.starts_with(&eq)) {
            out.push(a.clone());
        }
    }
    out
}
