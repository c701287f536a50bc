//! The golden set: every bundled scenario's `twin simulate --format json --reproducible` report
//! and `--trace` file, byte for byte. It guards refactors that must not change any result: a
//! single changed byte in any report or trace fails here.
//!
//! Layout, under `tests/golden/`, mirroring `scenarios/` (`host/pp.toml` → `host/pp.*`):
//! - `NAME.json`: the report of `simulate --format json --reproducible` (collapsed ranks where
//!   that is exact, the default).
//! - `NAME.traced.json`: the report of the traced run (`--trace-ranks all`: every rank; or the
//!   default trace, one rank per pipeline stage, where noted).
//! - `NAME.trace.json.gz`: the trace itself, gzipped, when it is at most `STORE_TRACE_BYTES`;
//!   larger traces are kept as `NAME.trace.sha256` (hex digest and byte length).
//!
//! `--reproducible` zeroes `sim_wall_s`, the one field that varies run to run; traces carry no
//! wall-clock field. `TWIN_BLESS=1 cargo test --test golden` rewrites the set after an
//! intended change (and removes goldens of scenarios that no longer exist).
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

mod common;
use common::twin;

/// Traces up to this size are stored (gzipped) so that a failure shows the changed events.
const STORE_TRACE_BYTES: u64 = 1 << 20;

/// Scenarios whose full trace is over the binary's trace limit: traced by default (one
/// representative rank per pipeline stage); the others with `--trace-ranks all`.
const COLLAPSED_TRACE: &[&str] = &[
    "16384xH100.toml",
    "131072xH100.toml",
    "1048576xH100.toml",
    "moe/deepseek-v3-1024xH100.toml",
];

/// Lines of unified diff shown per failing file.
const DIFF_LINES: usize = 80;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn golden_root() -> PathBuf {
    repo().join("tests/golden")
}

fn blessing() -> bool {
    std::env::var_os("TWIN_BLESS").is_some_and(|v| v == "1")
}

/// Every `.toml` under `scenarios/` except the hardware profiles and the framework files
/// (`scenarios/profiles/`, `scenarios/frameworks/`: other formats, not runnable), as paths
/// relative to `scenarios/`, sorted.
fn scenarios() -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if p.file_name()
                    .is_some_and(|n| n == "profiles" || n == "frameworks")
                {
                    continue;
                }
                walk(root, &p, out);
            } else if p.extension().is_some_and(|e| e == "toml") {
                let rel = p.strip_prefix(root).unwrap();
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let root = repo().join("scenarios");
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out.sort();
    out
}

/// `host/pp.toml` → `tests/golden/host/pp`, to which each golden file adds its suffix.
fn golden_stem(rel: &str) -> PathBuf {
    golden_root().join(rel.strip_suffix(".toml").unwrap())
}

/// The golden file `STEM.SUFFIX` (`with_extension` would cut a dotted scenario name).
fn golden_file(stem: &Path, suffix: &str) -> PathBuf {
    let mut name = stem.as_os_str().to_owned();
    name.push(".");
    name.push(suffix);
    PathBuf::from(name)
}

/// The suffixes of one scenario's golden files.
const SUFFIXES: &[&str] = &["json", "traced.json", "trace.json.gz", "trace.sha256"];

/// Runs `twin simulate scenarios/REL --format json --reproducible EXTRA` and returns stdout.
fn simulate(rel: &str, extra: &[&str]) -> Result<Vec<u8>, String> {
    let path = format!("scenarios/{rel}");
    let mut args = vec![
        "simulate",
        path.as_str(),
        "--format",
        "json",
        "--reproducible",
    ];
    args.extend_from_slice(extra);
    let o = twin(&args);
    if !o.status.success() {
        return Err(format!(
            "twin {} failed ({}):\n{}",
            args.join(" "),
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    Ok(o.stdout)
}

/// The first byte offset at which `a` and `b` differ (the shorter length when one is a prefix).
fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    if a == b {
        return None;
    }
    Some(
        a.iter()
            .zip(b)
            .position(|(x, y)| x != y)
            .unwrap_or(a.len().min(b.len())),
    )
}

/// Why `actual` is not `expected`: lengths, the first differing byte offset and the start of a
/// unified diff.
fn explain(expected: &[u8], actual: &[u8]) -> String {
    let offset = first_difference(expected, actual).unwrap_or(0);
    let mut msg = format!(
        "expected {} bytes, got {}; first difference at byte {offset}\n",
        expected.len(),
        actual.len()
    );
    let (e, a) = (
        String::from_utf8_lossy(expected),
        String::from_utf8_lossy(actual),
    );
    let diff = similar::TextDiff::from_lines(e.as_ref(), a.as_ref());
    let text = diff
        .unified_diff()
        .context_radius(2)
        .header("golden", "now")
        .to_string();
    let total = text.lines().count();
    for line in text.lines().take(DIFF_LINES) {
        msg.push_str(line);
        msg.push('\n');
    }
    if total > DIFF_LINES {
        let _ = writeln!(msg, "... ({} more diff lines)", total - DIFF_LINES);
    }
    msg
}

fn write_file(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// Compares `actual` with the golden file `path`, or (blessing) writes it.
fn check_bytes(path: &Path, actual: &[u8]) -> Result<(), String> {
    if blessing() {
        write_file(path, actual);
        return Ok(());
    }
    let expected = std::fs::read(path).map_err(|e| {
        format!(
            "{}: {e} (a new scenario? record it with TWIN_BLESS=1)",
            path.display()
        )
    })?;
    match first_difference(&expected, actual) {
        None => Ok(()),
        Some(_) => Err(format!(
            "{} differs: {}",
            path.display(),
            explain(&expected, actual)
        )),
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

fn gunzip(path: &Path) -> Result<Vec<u8>, String> {
    let f = std::fs::File::open(path).map_err(|e| {
        format!(
            "{}: {e} (a new scenario, or a trace that grew? record it with TWIN_BLESS=1)",
            path.display()
        )
    })?;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(f)
        .read_to_end(&mut out)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(out)
}

/// `HEX BYTES` of a file, read in a stream (traces reach hundreds of MB).
fn digest_line(path: &Path) -> String {
    let mut f = std::fs::File::open(path).unwrap();
    let mut hasher = Sha256::new();
    let bytes = std::io::copy(&mut f, &mut hasher).unwrap();
    let hex: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{hex} {bytes}\n")
}

/// Compares the trace at `trace` with its golden (`.trace.json.gz` or `.trace.sha256`).
fn check_trace(stem: &Path, trace: &Path) -> Result<(), String> {
    let gz = golden_file(stem, "trace.json.gz");
    let sha = golden_file(stem, "trace.sha256");
    let size = std::fs::metadata(trace).unwrap().len();
    let stored = size <= STORE_TRACE_BYTES;
    if blessing() {
        let (keep, drop) = if stored { (&gz, &sha) } else { (&sha, &gz) };
        let bytes = if stored {
            gzip(&std::fs::read(trace).unwrap())
        } else {
            digest_line(trace).into_bytes()
        };
        write_file(keep, &bytes);
        let _ = std::fs::remove_file(drop);
        return Ok(());
    }
    if gz.is_file() {
        let expected = gunzip(&gz)?;
        let actual = std::fs::read(trace).unwrap();
        return match first_difference(&expected, &actual) {
            None => Ok(()),
            Some(_) => Err(format!(
                "{} differs (trace): {}",
                gz.display(),
                explain(&expected, &actual)
            )),
        };
    }
    let expected = std::fs::read_to_string(&sha).map_err(|e| {
        format!(
            "{}: {e} (a new scenario? record it with TWIN_BLESS=1)",
            sha.display()
        )
    })?;
    let actual = digest_line(trace);
    if expected == actual {
        Ok(())
    } else {
        Err(format!(
            "{} differs (trace too large to store): golden sha256 and bytes {}, now {}",
            sha.display(),
            expected.trim(),
            actual.trim()
        ))
    }
}

/// Both golden runs of one scenario; every mismatch is returned, not only the first.
fn check_scenario(rel: &str, scratch: &Path) -> Vec<String> {
    let stem = golden_stem(rel);
    let mut errors = Vec::new();
    match simulate(rel, &[]) {
        Ok(out) => errors.extend(check_bytes(&golden_file(&stem, "json"), &out).err()),
        Err(e) => errors.push(e),
    }
    let trace = scratch.join(format!("{}.trace.json", rel.replace('/', "_")));
    let trace_arg = trace.to_string_lossy().into_owned();
    let mut extra = vec!["--trace", trace_arg.as_str()];
    if !COLLAPSED_TRACE.contains(&rel) {
        extra.extend(["--trace-ranks", "all"]);
    }
    match simulate(rel, &extra) {
        Ok(out) => {
            errors.extend(check_bytes(&golden_file(&stem, "traced.json"), &out).err());
            errors.extend(check_trace(&stem, &trace).err());
        }
        Err(e) => errors.push(e),
    }
    let _ = std::fs::remove_file(&trace);
    errors
}

/// Golden files whose scenario is gone (relative to `tests/golden/`).
fn orphans(scenarios: &[String]) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    let expected: Vec<PathBuf> = scenarios
        .iter()
        .flat_map(|s| SUFFIXES.iter().map(|x| golden_file(&golden_stem(s), x)))
        .collect();
    let mut files = Vec::new();
    walk(&golden_root(), &mut files);
    files.retain(|f| !expected.contains(f));
    files.sort();
    files
}

#[test]
fn every_bundled_scenario_matches_its_golden_report_and_trace() {
    let scenarios = scenarios();
    assert!(scenarios.len() >= 7, "found only {scenarios:?}");
    let scratch = common::scratch_dir("golden");
    let next = AtomicUsize::new(0);
    let errors = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(rel) = scenarios.get(i) else {
                    break;
                };
                let found = check_scenario(rel, &scratch);
                errors.lock().unwrap().extend(found);
            });
        }
    });
    let mut errors = errors.into_inner().unwrap();
    for orphan in orphans(&scenarios) {
        if blessing() {
            std::fs::remove_file(&orphan).unwrap();
        } else {
            errors.push(format!(
                "{} belongs to no bundled scenario (remove it, or run with TWIN_BLESS=1)",
                orphan.display()
            ));
        }
    }
    assert!(
        errors.is_empty(),
        "{} golden mismatch(es); if the change is intended, rerun with TWIN_BLESS=1 \
         and review the diff of tests/golden/:\n\n{}",
        errors.len(),
        errors.join("\n\n")
    );
}

#[test]
fn first_difference_finds_the_offset_and_a_prefix() {
    assert_eq!(first_difference(b"abc", b"abc"), None);
    assert_eq!(first_difference(b"abc", b"abd"), Some(2));
    assert_eq!(first_difference(b"ab", b"abc"), Some(2));
    assert_eq!(first_difference(b"", b"x"), Some(0));
}
