//! The local launcher (as torchrun): starts one worker process per rank with RANK,
//! WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set, watches them, and on the first
//! failure gives the others a moment to report their own view, then kills whatever still
//! runs. Every child is waited for, so no process outlives the launcher's return. The result
//! says which rank failed first and why (its exit signal, that it was found stopped, or its
//! last error line). A SIGINT/SIGTERM/SIGHUP to the launcher (see [`super::interrupt`]) stops
//! every rank and ends the launch with [`LaunchError::Interrupted`].

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How to start the workers.
#[derive(Clone, Debug)]
pub struct LaunchOptions {
    /// The program to start (the `twin` binary itself).
    pub exe: PathBuf,
    /// Arguments of every worker (`worker SCENARIO ...`).
    pub args: Vec<String>,
    pub world: u32,
    pub master_addr: String,
    /// `None`: pick a free port.
    pub master_port: Option<u16>,
    /// Every worker is killed when the run goes this long without progress: without any op
    /// starting or ending anywhere when `progress_dir` is set, else since the start.
    pub timeout: Duration,
    /// Extra environment for every worker (tests inject faults this way).
    pub env: Vec<(String, String)>,
    /// Where ranks record their progress (see [`super::progress`]); a failure report then
    /// says at which op each failed rank was.
    pub progress_dir: Option<PathBuf>,
}

/// Names op `op` of `rank`'s program, for failure reports.
pub type OpNamer<'a> = &'a dyn Fn(u32, u32) -> String;

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("cannot start rank {rank} ({exe}): {source}")]
    Spawn {
        rank: u32,
        exe: String,
        source: std::io::Error,
    },
    #[error("cannot find a free port on {addr}: {source}")]
    Port {
        addr: String,
        source: std::io::Error,
    },
    /// One or more ranks failed; the text names the first, why, and the others' view.
    #[error("{0}")]
    Failed(String),
    /// The launcher received this signal; every rank was stopped.
    #[error("interrupted by {} (signal {}): every rank was stopped", super::interrupt::signal_name(*.0), .0)]
    Interrupted(i32),
}

/// What the ranks printed, when all succeeded.
#[derive(Debug)]
pub struct LaunchOutput {
    pub stdout: Vec<Vec<u8>>,
    pub stderr: Vec<Vec<u8>>,
}

/// Time the others get to report after the first failure, before they are killed.
const GRACE: Duration = Duration::from_millis(1500);

fn drain(mut r: impl Read + Send + 'static) -> Drained {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let b = Arc::clone(&buf);
    let h = std::thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        while let Ok(n) = r.read(&mut chunk) {
            if n == 0 {
                break;
            }
            if let Ok(mut v) = b.lock() {
                v.extend_from_slice(chunk.get(..n).unwrap_or_default());
            }
        }
    });
    (buf, h)
}

struct Rank {
    rank: u32,
    child: Child,
    out: Drained,
    err: Drained,
    exit: Option<(ExitStatus, Instant)>,
    killed_by_launcher: bool,
    /// Found stopped (SIGSTOP, a debugger) when the launcher gave up on the run.
    stopped: bool,
}

/// Have the kernel SIGKILL the child when the launcher exits (Linux; elsewhere a no-op).
fn die_with_parent(cmd: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs between fork and exec and only makes one async-signal-safe
        // syscall.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}

/// A port nobody listens on right now.
pub fn free_port(addr: &str) -> Result<u16, LaunchError> {
    std::net::TcpListener::bind((addr, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|source| LaunchError::Port {
            addr: addr.to_string(),
            source,
        })
}

/// Start every rank, wait for all of them, and return their output or the failure.
pub fn launch(opts: &LaunchOptions, op_name: OpNamer) -> Result<LaunchOutput, LaunchError> {
    launch_attempt(opts, &AttemptControl::default(), op_name).0
}

/// How one launch attempt of a recovering run differs from a plain launch.
#[derive(Clone, Debug)]
pub struct AttemptControl {
    /// Time the other ranks get to report after the first failure before they are killed.
    pub grace: Duration,
    /// Launcher-side kills: (when, rank, injection id); each SIGKILLs the rank's process
    /// group at that instant if it still runs.
    pub kills: Vec<(Instant, u32, u32)>,
}

impl Default for AttemptControl {
    fn default() -> Self {
        AttemptControl {
            grace: GRACE,
            kills: Vec::new(),
        }
    }
}

/// When things happened in an attempt (Unix nanoseconds), for recovery accounting.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AttemptInfo {
    /// Just before the first rank was spawned.
    pub spawned_ns: u64,
    /// When the launcher noticed the first failure (a rank's exit, or the progress timeout).
    pub noticed_ns: Option<u64>,
    /// Launcher-side kills carried out: (injection id, rank, when).
    pub fired: Vec<(u32, u32, u64)>,
}

/// [`launch`] with an [`AttemptControl`], also saying when things happened.
pub fn launch_attempt(
    opts: &LaunchOptions,
    ctl: &AttemptControl,
    op_name: OpNamer,
) -> (Result<LaunchOutput, LaunchError>, AttemptInfo) {
    let mut info = AttemptInfo {
        spawned_ns: super::events::unix_ns(),
        ..AttemptInfo::default()
    };
    let out = attempt(opts, ctl, op_name, &mut info);
    (out, info)
}

fn attempt(
    opts: &LaunchOptions,
    ctl: &AttemptControl,
    op_name: OpNamer,
    info: &mut AttemptInfo,
) -> Result<LaunchOutput, LaunchError> {
    let port = match opts.master_port {
        Some(p) => p,
        None => free_port(&opts.master_addr)?,
    };
    // The ranks' shared turns at their cores, fresh for each attempt (see
    // `backend::host::turns`); kept open until every rank has been spawned.
    let turns = crate::backend::host::turns::TurnsFile::create(opts.world);
    let mut ranks: Vec<Rank> = Vec::with_capacity(opts.world as usize);
    for rank in 0..opts.world {
        if let Some(sig) = super::interrupt::received() {
            stop_all(&mut ranks);
            return Err(LaunchError::Interrupted(sig));
        }
        let mut cmd = Command::new(&opts.exe);
        // Each rank leads its own process group, so stopping it also stops anything it
        // started; and it dies with the launcher (Ctrl-C, kill), so none is left orphaned.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        die_with_parent(&mut cmd);
        cmd.args(&opts.args)
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", opts.world.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("MASTER_ADDR", &opts.master_addr)
            .env("MASTER_PORT", port.to_string())
            .envs(opts.env.iter().map(|(k, v)| (k, v)))
            .envs(turns.as_ref().map(|t| t.env()))
            .envs(
                opts.progress_dir
                    .iter()
                    .map(|d| (super::progress::PROGRESS_VAR, d.as_os_str())),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(source) => {
                stop_all(&mut ranks);
                return Err(LaunchError::Spawn {
                    rank,
                    exe: opts.exe.display().to_string(),
                    source,
                });
            }
        };
        let out = child.stdout.take().map(drain);
        let err = child.stderr.take().map(drain);
        let (Some(out), Some(err)) = (out, err) else {
            let _ = child.kill();
            let _ = child.wait();
            stop_all(&mut ranks);
            return Err(LaunchError::Failed(format!("rank {rank}: no output pipes")));
        };
        ranks.push(Rank {
            rank,
            child,
            out,
            err,
            exit: None,
            killed_by_launcher: false,
            stopped: false,
        });
    }
    let mut last_change = Instant::now();
    let mut last_look = Instant::now();
    let mut seen = Vec::new();
    let mut first_failure: Option<Instant> = None;
    let mut timed_out = false;
    let mut pending_kills = ctl.kills.clone();
    loop {
        if let Some(sig) = super::interrupt::received() {
            stop_all(&mut ranks);
            for r in ranks.iter_mut() {
                let _ = r.child.wait();
                take_output(&mut r.out);
                take_output(&mut r.err);
            }
            return Err(LaunchError::Interrupted(sig));
        }
        let now = Instant::now();
        pending_kills.retain(|&(at, rank, id)| {
            if now < at {
                return true;
            }
            if let Some(r) = ranks.iter().find(|r| r.rank == rank && r.exit.is_none()) {
                info.fired.push((id, rank, super::events::unix_ns()));
                kill_group(&r.child);
            }
            false
        });
        for r in ranks.iter_mut().filter(|r| r.exit.is_none()) {
            if let Ok(Some(status)) = r.child.try_wait() {
                r.exit = Some((status, Instant::now()));
                if !status.success() && first_failure.is_none() {
                    first_failure = Some(Instant::now());
                    info.noticed_ns = Some(super::events::unix_ns());
                }
            }
        }
        if ranks.iter().all(|r| r.exit.is_some()) {
            break;
        }
        let now = Instant::now();
        if let Some(dir) = &opts.progress_dir {
            if now >= last_look + Duration::from_millis(200) {
                last_look = now;
                let snap = super::progress::snapshot(dir, opts.world);
                if snap != seen {
                    seen = snap;
                    last_change = now;
                }
            }
        }
        // A timeout too long for an Instant never comes.
        if last_change
            .checked_add(opts.timeout)
            .is_some_and(|end| now >= end)
        {
            timed_out = true;
            info.noticed_ns.get_or_insert_with(super::events::unix_ns);
        }
        if timed_out || first_failure.is_some_and(|t| now >= t + ctl.grace) {
            // Before anything is killed: a rank that is stopped is why its peers timed out.
            for r in ranks.iter_mut().filter(|r| r.exit.is_none()) {
                r.stopped = is_stopped(r.child.id());
            }
            stop_all(&mut ranks);
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    for r in ranks.iter_mut() {
        let _ = r.child.wait();
        stdout.push(take_output(&mut r.out));
        stderr.push(take_output(&mut r.err));
    }
    if ranks
        .iter()
        .all(|r| r.exit.is_some_and(|(s, _)| s.success()))
    {
        return Ok(LaunchOutput { stdout, stderr });
    }
    let mut text = describe_failure(&ranks, &stderr, timed_out, opts.timeout);
    if let Some(dir) = &opts.progress_dir {
        text.push_str(&where_they_were(&ranks, dir, op_name));
    }
    Err(LaunchError::Failed(text))
}

/// A pipe's collected bytes and the thread that drains it.
type Drained = (Arc<Mutex<Vec<u8>>>, JoinHandle<()>);

fn take_output(o: &mut Drained) -> Vec<u8> {
    // The pipe closes when the child exits, so the reader thread ends promptly.
    let h = std::mem::replace(&mut o.1, std::thread::spawn(|| {}));
    let _ = h.join();
    o.0.lock().map(|v| v.clone()).unwrap_or_default()
}

/// SIGKILL a child's whole process group (the child leads its own, see `launch`).
fn kill_group(child: &Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: a plain syscall; the group is the child's own (process_group(0)), and the
        // child is not reaped yet, so its id cannot have been reused.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}

/// Kill every rank still running (its whole process group) and reap it. A rank already
/// exiting on its own (`is_exiting`: its own SIGKILL, an injected kill, whose closed
/// connection a peer reported first) is reaped as it is, not counted as stopped by us.
fn stop_all(ranks: &mut [Rank]) {
    for r in ranks.iter_mut().filter(|r| r.exit.is_none()) {
        if is_exiting(r.child.id()) {
            if let Ok(s) = r.child.wait() {
                r.exit = Some((s, Instant::now()));
            }
        }
    }
    for r in ranks.iter_mut().filter(|r| r.exit.is_none()) {
        kill_group(&r.child);
        let _ = r.child.kill();
        r.killed_by_launcher = true;
    }
    for r in ranks.iter_mut().filter(|r| r.exit.is_none()) {
        if let Ok(s) = r.child.wait() {
            r.exit = Some((s, Instant::now()));
        }
    }
}

/// "rank 1 was at: compute op 17 (fwd mb2 c0 L2-3, running), ..." for every failed rank.
fn where_they_were(ranks: &[Rank], dir: &std::path::Path, op_name: OpNamer) -> String {
    let mut out = String::new();
    for r in ranks
        .iter()
        .filter(|r| !r.exit.is_some_and(|(s, _)| s.success()))
    {
        let ops: Vec<String> = super::progress::read(dir, r.rank)
            .into_iter()
            .filter(|(_, _, done)| !done)
            .map(|(stream, op, _)| format!("{} op {op} ({})", stream.name(), op_name(r.rank, op)))
            .collect();
        if !ops.is_empty() {
            out.push_str(&format!(
                "\n  rank {} was running: {}",
                r.rank,
                ops.join(", ")
            ));
        }
    }
    out
}

fn signal_of(s: &ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    s.signal()
}

use super::interrupt::signal_name;

/// Whether process `pid` is stopped (state `T`, or `t` under a tracer) according to
/// `/proc/PID/stat`; `false` where there is no /proc.
fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| stat_is_stopped(&s))
}

/// Whether process `pid` is already exiting (the kernel's `PF_EXITING` in `/proc/PID/stat`'s
/// flags, set as soon as the process starts to die, before its sockets close and long before
/// `wait` can reap it): a rank that killed itself (an injected kill) while a peer that noticed
/// its closed connection was reported first. `false` where there is no /proc.
fn is_exiting(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| stat_is_exiting(&s))
}

/// `PF_EXITING` (0x4) in the flags field of a `/proc/PID/stat` line (the seventh field after
/// the command name), or the state `Z` (exited, not yet reaped) or `X` (dead).
fn stat_is_exiting(stat: &str) -> bool {
    const PF_EXITING: u64 = 0x4;
    let Some(rest) = stat.rfind(')').and_then(|i| stat.get(i + 1..)) else {
        return false;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let dead = fields.first().is_some_and(|s| *s == "Z" || *s == "X");
    let exiting = fields
        .get(6)
        .and_then(|f| f.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_EXITING != 0);
    dead || exiting
}

/// The state field of a `/proc/PID/stat` line is `T` or `t`. It follows the command name,
/// which is in parentheses and may itself hold spaces and parentheses.
fn stat_is_stopped(stat: &str) -> bool {
    stat.rfind(')')
        .and_then(|i| stat.get(i + 1..))
        .and_then(|rest| rest.split_whitespace().next())
        .is_some_and(|state| state == "T" || state == "t")
}

/// The last line of a rank's stderr that says what went wrong (its "error:" line; the
/// "caused by" lines below it repeat the inner errors the line already contains).
fn last_error_line(stderr: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(stderr);
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix("error: "))
        .map(str::to_string)
}

fn describe_failure(
    ranks: &[Rank],
    stderr: &[Vec<u8>],
    timed_out: bool,
    timeout: Duration,
) -> String {
    let why = |r: &Rank| -> String {
        let err = stderr.get(r.rank as usize).and_then(|e| last_error_line(e));
        match (r.exit.map(|(s, _)| s), r.killed_by_launcher) {
            (_, true) if r.stopped => "its process was stopped (state T: SIGSTOP or a debugger) and made no progress; its peers timed out waiting for it; killed by the launcher".into(),
            (_, true) if timed_out => {
                "still running at the timeout (hung); killed by the launcher".into()
            }
            (_, true) => "stopped by the launcher after another rank failed".into(),
            (Some(s), _) => match signal_of(&s) {
                Some(sig) => format!("killed by signal {sig} ({})", signal_name(sig)),
                None => err.unwrap_or_else(|| format!("exited with {s}")),
            },
            (None, _) => "unknown".into(),
        }
    };
    let failed: Vec<&Rank> = {
        let mut f: Vec<&Rank> = ranks
            .iter()
            .filter(|r| !r.exit.is_some_and(|(s, _)| s.success()))
            .collect();
        f.sort_by_key(|r| (r.killed_by_launcher, r.exit.map(|(_, t)| t)));
        f
    };
    // The culprit: a rank that died by a signal we did not send, else one found stopped, else
    // one whose error is its own rather than a reaction to someone else's, else the first to
    // fail.
    let culprit = failed
        .iter()
        .find(|r| !r.killed_by_launcher && r.exit.is_some_and(|(s, _)| signal_of(&s).is_some()))
        .or_else(|| failed.iter().find(|r| r.stopped))
        .or_else(|| {
            failed.iter().find(|r| {
                !r.killed_by_launcher
                    && stderr
                        .get(r.rank as usize)
                        .and_then(|e| last_error_line(e))
                        .is_some_and(|l| {
                            !l.contains("aborted:") && !l.contains("closed the connection")
                        })
            })
        })
        .or(failed.first());
    let mut out = String::new();
    if timed_out {
        out.push_str(&format!(
            "the run made no progress for {:.1} s; ",
            timeout.as_secs_f64()
        ));
    }
    match culprit {
        Some(c) => out.push_str(&format!("rank {} failed: {}", c.rank, why(c))),
        None => out.push_str("the run failed"),
    }
    for r in &failed {
        if Some(r.rank) != culprit.map(|c| c.rank) {
            out.push_str(&format!("\n  rank {}: {}", r.rank, why(r)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_lines_are_found() {
        let e = b"notice: x\nerror: rank 1 op 4 (recv): boom\n  caused by: boom\n";
        assert_eq!(last_error_line(e).unwrap(), "rank 1 op 4 (recv): boom");
        assert!(last_error_line(b"all fine\n").is_none());
    }

    #[test]
    fn a_failing_child_is_reported_and_reaped() {
        let opts = LaunchOptions {
            exe: "/bin/sh".into(),
            args: vec![
                "-c".into(),
                "if [ $RANK = 1 ]; then echo 'error: rank 1 broke' >&2; exit 3; fi; sleep 30"
                    .into(),
            ],
            world: 3,
            master_addr: "127.0.0.1".into(),
            master_port: None,
            timeout: Duration::from_secs(20),
            env: vec![],
            progress_dir: None,
        };
        let e = launch(&opts, &|_, _| String::new())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("rank 1 failed: rank 1 broke"), "{e}");
        // The sleeping ranks were killed, not waited for.
        assert!(e.contains("rank 0: stopped by the launcher"), "{e}");
        assert!(e.contains("rank 2: stopped by the launcher"), "{e}");
    }

    fn sh(script: &str, timeout_ms: u64, dir: &std::path::Path) -> LaunchOptions {
        LaunchOptions {
            exe: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            world: 2,
            master_addr: "127.0.0.1".into(),
            master_port: None,
            timeout: Duration::from_millis(timeout_ms),
            env: vec![],
            progress_dir: Some(dir.to_path_buf()),
        }
    }

    #[test]
    fn an_exiting_process_is_read_from_proc_stat_flags() {
        // pid (comm) state ppid pgrp session tty tpgid flags ...: PF_EXITING is 0x4.
        assert!(stat_is_exiting(
            "4242 (twin) R 1 4242 4242 0 -1 4194628 0 0"
        ));
        assert!(!stat_is_exiting(
            "4242 (twin) S 1 4242 4242 0 -1 4194624 0 0"
        ));
        assert!(stat_is_exiting("4242 (a) b) Z 1 4242 4242 0 -1 4194624"));
        assert!(!stat_is_exiting("4242 (twin 5) S 1 4242 4242 0 -1 4194624"));
        assert!(!stat_is_exiting("garbage"));
        // This process is alive and not exiting.
        assert!(!is_exiting(std::process::id()));
    }

    #[test]
    fn the_state_field_of_proc_stat_is_read_past_the_command_name() {
        assert!(stat_is_stopped("4242 (twin) T 1 4242 4242 0 -1"));
        assert!(stat_is_stopped("4242 (a) b) t 1 4242"));
        assert!(!stat_is_stopped("4242 (twin T) S 1 4242"));
        assert!(!stat_is_stopped("garbage"));
    }

    #[test]
    fn a_stopped_rank_is_named_before_the_peer_that_timed_out_on_it() {
        // Rank 1 stops itself; rank 0 then fails with the error a peer gives when it waited
        // too long for rank 1 (its own error line, which alone would make it the culprit).
        let opts = LaunchOptions {
            exe: "/bin/sh".into(),
            args: vec![
                "-c".into(),
                "if [ $RANK = 1 ]; then kill -STOP $$; fi; sleep 0.3; echo 'error: rank 0 op 3 (recv from 1): timed out after 0.3 s' >&2; exit 1"
                    .into(),
            ],
            world: 2,
            master_addr: "127.0.0.1".into(),
            master_port: None,
            timeout: Duration::from_secs(20),
            env: vec![],
            progress_dir: None,
        };
        let e = launch(&opts, &|_, _| String::new())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("rank 1 failed: its process was stopped (state T"),
            "{e}"
        );
        assert!(
            e.contains("\n  rank 0: rank 0 op 3 (recv from 1): timed out"),
            "{e}"
        );
    }

    #[test]
    fn a_stalled_run_is_stopped_and_a_progressing_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let e = launch(&sh("sleep 30", 1000, dir.path()), &|_, _| String::new())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("the run made no progress for 1.0 s; rank"),
            "{e}"
        );
        assert!(e.contains("still running at the timeout (hung)"), "{e}");
        // Runs longer than the timeout in total, but its progress file keeps changing.
        let moving =
            "for i in 1 2 3 4 5 6 7 8; do echo $i > $TWIN_PROGRESS_DIR/rank$RANK; sleep 0.3; done";
        launch(&sh(moving, 1000, dir.path()), &|_, _| String::new()).unwrap();
    }
}
