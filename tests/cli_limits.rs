//! End-to-end tests of the launcher's limits: a `--timeout-s` beyond its range is refused
//! before anything starts, the run's `twin-run-<pid>` temp folder is gone however the run ends
//! (success, a panic while printing, SIGINT/SIGTERM, and, for a launcher killed outright,
//! at the next start), a closed stdout ends any command quietly, a stopped rank is the rank
//! named, a `--resume` that restored nothing says so, and `--inject` / `--master-port` values
//! that cannot work are refused.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::text;

/// A fresh, empty directory for one test, used as the child's TMPDIR.
fn fresh_tmp(name: &str) -> PathBuf {
    let d = common::scratch_dir("limits").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `twin ARGS` in the repository root with TMPDIR set to `tmp`.
fn twin_cmd(args: &[&str], tmp: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_twin"));
    c.args(args)
        .env("TMPDIR", tmp)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

fn twin_in(args: &[&str], tmp: &Path) -> Output {
    twin_cmd(args, tmp).output().expect("the twin binary runs")
}

/// Everything left in `dir`.
fn left_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Wait for `child` at most `limit`; kill it (and fail) beyond.
fn wait_bounded(child: &mut Child, limit: Duration) -> ExitStatus {
    let end = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("twin did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Pids of `parent`'s children, each with its RANK (Linux /proc).
fn ranks_of(parent: u32) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the command name: state, ppid, ...
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat.get(i + 1..))
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid != Some(parent) {
            continue;
        }
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let rank = env
            .split(|&b| b == 0)
            .find_map(|kv| kv.strip_prefix(b"RANK="))
            .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok());
        if let Some(rank) = rank {
            out.push((pid, rank));
        }
    }
    out
}

/// Wait (at most 20 s) until `parent` runs `world` ranks that have all started ops (their
/// progress files exist in the run's folder); their pids by rank.
fn wait_for_ranks(parent: u32, world: u32, tmp: &Path) -> Vec<u32> {
    let end = Instant::now() + Duration::from_secs(20);
    let folder = tmp.join(format!("twin-run-{parent}"));
    loop {
        let mut r = ranks_of(parent);
        let started = (0..world).all(|k| folder.join(format!("rank{k}")).exists());
        if r.len() == world as usize && started {
            r.sort_by_key(|&(_, rank)| rank);
            return r.into_iter().map(|(pid, _)| pid).collect();
        }
        assert!(
            Instant::now() < end,
            "the ranks of {parent} did not start within 20 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn send(pid: u32, sig: i32) {
    // SAFETY: a plain syscall on a process this test started (or its child).
    let r = unsafe { libc::kill(pid as i32, sig) };
    assert_eq!(r, 0, "kill({pid}, {sig})");
}

#[test]
fn a_timeout_beyond_a_day_is_refused_before_anything_starts() {
    let tmp = fresh_tmp("timeout");
    for cmd in [&["run"][..], &["verify", "step"], &["verify", "recovery"]] {
        for t in ["1e300", "9223372036854775807", "86401", "0", "nan"] {
            let args = [cmd, &["scenarios/host/single.toml", "--timeout-s", t]].concat();
            let o = twin_in(&args, &tmp);
            let e = text(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{cmd:?} --timeout-s {t}: {e}");
            assert!(e.contains("--timeout-s"), "{e}");
            assert!(e.contains("more than 0 and at most 86400"), "{e}");
            assert!(!e.contains("panicked"), "{e}");
        }
    }
    assert!(left_in(&tmp).is_empty(), "left behind: {:?}", left_in(&tmp));
    // The longest allowed value runs (no Duration or Instant overflow anywhere).
    let o = twin_in(
        &[
            "run",
            "scenarios/host/single.toml",
            "--steps",
            "1",
            "--timeout-s",
            "86400",
        ],
        &tmp,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(left_in(&tmp).is_empty(), "left behind: {:?}", left_in(&tmp));
}

#[test]
fn sigint_or_sigterm_to_the_launcher_stops_the_ranks_and_removes_its_folder() {
    for (sig, code) in [(libc::SIGTERM, 143), (libc::SIGINT, 130)] {
        let tmp = fresh_tmp(&format!("signal-{sig}"));
        let mut child = twin_cmd(&["run", "scenarios/host/pp.toml", "--steps", "1000"], &tmp)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let ranks = wait_for_ranks(child.id(), 2, &tmp);
        send(child.id(), sig);
        let status = wait_bounded(&mut child, Duration::from_secs(15));
        let mut err = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(code), "signal {sig}: {err}");
        assert!(err.contains("interrupted by SIG"), "{err}");
        assert!(left_in(&tmp).is_empty(), "left behind: {:?}", left_in(&tmp));
        for pid in ranks {
            assert!(
                !Path::new(&format!("/proc/{pid}")).exists(),
                "rank process {pid} outlived the launcher"
            );
        }
    }
}

#[test]
fn folders_of_launchers_that_were_killed_are_swept_at_the_next_start() {
    let tmp = fresh_tmp("sweep");
    // A pid no process holds: a child that has been reaped.
    let mut gone = Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let dead = gone.id();
    let live = std::process::id();
    let stale = [
        format!("twin-run-{dead}"),
        format!("twin-run-{dead}-events"),
    ];
    let kept = [format!("twin-run-{live}"), format!("twin-runner-{dead}")];
    for n in stale.iter().chain(&kept) {
        std::fs::create_dir(tmp.join(n)).unwrap();
        std::fs::write(tmp.join(n).join("rank0"), b"x").unwrap();
    }
    let o = twin_in(&["run", "scenarios/host/single.toml", "--steps", "1"], &tmp);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let mut left = left_in(&tmp);
    left.sort();
    let mut want = kept.to_vec();
    want.sort();
    assert_eq!(left, want);
}

/// Run `twin ARGS` with stdout a pipe whose reader is closed before the child writes.
fn with_stdout_closed(args: &[&str], tmp: &Path) -> (ExitStatus, String) {
    let mut child = twin_cmd(args, tmp)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let status = wait_bounded(&mut child, Duration::from_secs(20));
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    (status, err)
}

#[test]
fn a_closed_stdout_ends_a_command_quietly() {
    let tmp = fresh_tmp("pipe");
    for args in [
        &["simulate", "scenarios/512xA100.toml"][..],
        &["simulate", "scenarios/512xA100.toml", "--format", "json"][..],
        &["check", "scenarios/512xA100.toml"][..],
    ] {
        let (status, err) = with_stdout_closed(args, &tmp);
        assert_eq!(status.code(), Some(0), "{args:?}: {err}");
        assert!(err.is_empty(), "{args:?}: {err}");
    }
}

#[test]
fn a_run_that_panics_while_printing_still_removes_its_folder() {
    // A recovering run prints its report while its folder is held: the print fails (the
    // reader is gone), which unwinds through the folder's guard.
    let tmp = fresh_tmp("panic");
    let ck = tmp.join("ck");
    let (status, err) = with_stdout_closed(
        &[
            "run",
            "scenarios/host/pp.toml",
            "--steps",
            "2",
            "--checkpoint-dir",
            ck.to_str().unwrap(),
        ],
        &tmp,
    );
    assert_eq!(status.code(), Some(0), "{err}");
    let _ = std::fs::remove_dir_all(&ck);
    assert!(left_in(&tmp).is_empty(), "left behind: {:?}", left_in(&tmp));
}

#[test]
fn a_stopped_rank_is_the_rank_named() {
    let tmp = fresh_tmp("sigstop");
    let mut child = twin_cmd(
        &[
            "run",
            "scenarios/host/pp.toml",
            "--steps",
            "1000",
            "--timeout-s",
            "3",
        ],
        &tmp,
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let ranks = wait_for_ranks(child.id(), 2, &tmp);
    send(ranks[1], libc::SIGSTOP);
    let status = wait_bounded(&mut child, Duration::from_secs(20));
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    let first = err.lines().find(|l| l.starts_with("error: ")).unwrap_or("");
    assert!(
        first.starts_with("error: rank 1 failed: its process was stopped"),
        "{err}"
    );
    assert!(left_in(&tmp).is_empty(), "left behind: {:?}", left_in(&tmp));
}

fn rank_files(ck: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for step in std::fs::read_dir(ck).unwrap().flatten() {
        for f in std::fs::read_dir(step.path()).unwrap().flatten() {
            if f.file_name().to_string_lossy().ends_with(".ckpt") {
                files.push(f.path());
            }
        }
    }
    files
}

/// Flip the last byte of every rank's file of the two checkpoints a 3-step run writes.
fn corrupt_every_checkpoint(ck: &Path) {
    let files = rank_files(ck);
    assert_eq!(
        files.len(),
        2 * 4,
        "checkpoints after steps 1 and 2: {files:?}"
    );
    for f in &files {
        let mut b = std::fs::read(f).unwrap();
        let last = b.len() - 1;
        b[last] ^= 0x01;
        std::fs::write(f, b).unwrap();
    }
}

#[test]
fn a_resume_that_finds_every_checkpoint_corrupt_says_so() {
    let tmp = fresh_tmp("resume");
    let ck = tmp.join("ck");
    let c = ck.to_str().unwrap();
    let scenario = "scenarios/host/faults.toml";
    let o = twin_in(
        &["run", scenario, "--steps", "3", "--checkpoint-dir", c],
        &tmp,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    corrupt_every_checkpoint(&ck);
    let o = twin_in(
        &[
            "run",
            scenario,
            "--steps",
            "3",
            "--checkpoint-dir",
            c,
            "--resume",
            "--format",
            "json",
        ],
        &tmp,
    );
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["startup"]["resumed_from_step"], 0, "{}", v["startup"]);
    assert_eq!(
        v["startup"]["rejected"].as_array().map(Vec::len),
        Some(8),
        "every rank's file of both checkpoints: {}",
        v["startup"]
    );
    let w = v["warnings"][0].as_str().unwrap_or_default();
    assert!(
        w.starts_with("--resume restored no checkpoint from")
            && w.contains("started again from step 0"),
        "{v}"
    );
    assert!(err.contains(&format!("warning: {w}")), "{err}");
    // The text report says it too (the run above wrote good checkpoints again).
    corrupt_every_checkpoint(&ck);
    let o = twin_in(
        &[
            "run",
            scenario,
            "--steps",
            "3",
            "--checkpoint-dir",
            c,
            "--resume",
        ],
        &tmp,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("warning         --resume restored no checkpoint"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn inject_specs_that_cannot_work_are_refused() {
    let tmp = fresh_tmp("inject");
    let scenario = "scenarios/host/pp.toml";
    for (spec, want) in [
        (
            "kill rank=1 rank=0 at=step:1",
            "bad part `rank=0`: rank= is given twice",
        ),
        (
            "kill rank=1 at=step:1 at=step:0",
            "bad part `at=step:0`: at= is given twice",
        ),
        ("kill rank=1 at=time:1e300", "0 to 86400"),
        ("kill rank=1 at=step:5", "step 5 is not run (--steps 2"),
        (
            "kill rank=2 at=step:0",
            "rank 2 does not exist (the run has 2 ranks)",
        ),
        (
            "kill rank=0 at=op:100000",
            "op 100000 is not in rank 0's program",
        ),
    ] {
        let o = twin_in(&["run", scenario, "--steps", "2", "--inject", spec], &tmp);
        let e = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{spec}: {e}");
        assert!(e.contains(want), "{spec}: {e}");
        assert!(e.contains(spec), "the error names the spec: {e}");
    }
    // A time kill due after the run's end never fires: said in the report.
    let o = twin_in(
        &[
            "run",
            scenario,
            "--steps",
            "1",
            "--format",
            "json",
            "--inject",
            "kill rank=1 at=time:86400",
        ],
        &tmp,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["warnings"][0],
        "--inject \"kill rank=1 at=time:86400\" never fired: the run had finished before it was due",
        "{v}"
    );
    assert!(left_in(&tmp).is_empty(), "left behind: {:?}", left_in(&tmp));
}

#[test]
fn master_port_0_is_refused_up_front() {
    let tmp = fresh_tmp("port");
    let o = twin_in(
        &["run", "scenarios/host/pp.toml", "--master-port", "0"],
        &tmp,
    );
    let e = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("--master-port") && e.contains("1..=65535"),
        "{e}"
    );
    assert!(left_in(&tmp).is_empty(), "left behind: {:?}", left_in(&tmp));
}
