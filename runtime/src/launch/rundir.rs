//! A launcher's scratch folder in the temp directory, `twin-run-<pid>` (the ranks' progress
//! files, the recovery's event files), `twin-verify-<pid>` or `twin-verify-faults-<pid>`: made
//! when a launch starts and removed however it ends. A returned result, an error and a panic
//! all drop the guard; a SIGINT/SIGTERM/SIGHUP is turned into an error by
//! [`super::interrupt`], so it returns through the guard too. SIGKILL cannot be caught: the next launcher removes the folders of earlier
//! launchers whose process is gone (only its own prefixes, only folders of this user, only
//! when the pid named is not alive).

use std::path::{Path, PathBuf};

/// The folder of a `twin run` launch (or `twin verify`'s runs).
pub const RUN_PREFIX: &str = "twin-run-";
/// The folder of a `twin verify step` (its measurements files).
pub const VERIFY_PREFIX: &str = "twin-verify-";
/// The folder of a `twin verify recovery` (its runs' checkpoints).
pub const VERIFY_FAULTS_PREFIX: &str = "twin-verify-faults-";
/// Suffixes a folder of ours may carry after the pid (older launchers kept recovery events in
/// a second folder, `twin-run-<pid>-events`).
const SUFFIXES: [&str; 2] = ["", "-events"];

/// The scratch folder; removed with everything in it when dropped.
#[derive(Debug)]
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    /// Make `TMPDIR/<prefix><pid>` (empty), after removing stale folders of `prefix`.
    pub fn create(prefix: &str) -> std::io::Result<RunDir> {
        let tmp = std::env::temp_dir();
        sweep_stale(&tmp, prefix);
        let path = tmp.join(format!("{prefix}{}", std::process::id()));
        // A folder left by a process that had this pid before: nothing in it is ours.
        if path.exists() {
            std::fs::remove_dir_all(&path)?;
        }
        std::fs::create_dir_all(&path)?;
        Ok(RunDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The pid a folder name of ours carries: `<prefix><pid>` or `<prefix><pid>-events`.
fn pid_of(name: &str, prefix: &str) -> Option<i32> {
    let rest = name.strip_prefix(prefix)?;
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (pid, suffix) = rest.split_at(digits);
    if !SUFFIXES.contains(&suffix) {
        return None;
    }
    pid.parse().ok().filter(|&p| p > 0)
}

/// Whether a process with this pid exists (possibly another user's: then it is alive too).
fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 sends nothing; it only asks whether the pid exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Remove the folders in `tmp` that a launcher with `prefix` made and whose launcher is gone;
/// returns what was removed.
pub fn sweep_stale(tmp: &Path, prefix: &str) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: getuid cannot fail.
    let me = unsafe { libc::getuid() };
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = pid_of(&name, prefix) else {
            continue;
        };
        // Not followed through a link: only a real folder of this user counts.
        let ours = std::fs::symlink_metadata(e.path()).is_ok_and(|m| m.is_dir() && m.uid() == me);
        if ours && !alive(pid) && std::fs::remove_dir_all(e.path()).is_ok() {
            removed.push(e.path());
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_ours_give_their_pid_and_others_none() {
        assert_eq!(pid_of("twin-run-123", RUN_PREFIX), Some(123));
        assert_eq!(pid_of("twin-run-123-events", RUN_PREFIX), Some(123));
        assert_eq!(pid_of("twin-verify-9", VERIFY_PREFIX), Some(9));
        for other in [
            "twin-run-",
            "twin-run-0",
            "twin-run-12x",
            "twin-run-12-other",
            "twin-runner-12",
            "xtwin-run-12",
            "twin-verify-12",
        ] {
            assert_eq!(pid_of(other, RUN_PREFIX), None, "{other}");
        }
    }

    /// A pid that no process holds right now: a child that has been reaped.
    fn dead_pid() -> i32 {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        c.wait().unwrap();
        c.id() as i32
    }

    #[test]
    fn only_our_folders_of_dead_launchers_are_swept() {
        let tmp = tempfile::tempdir().unwrap();
        let dead = dead_pid();
        let live = std::process::id();
        let names = [
            format!("twin-run-{dead}"),
            format!("twin-run-{dead}-events"),
            format!("twin-run-{live}"),
            format!("twin-verify-{dead}"),
            format!("other-{dead}"),
        ];
        for n in &names {
            std::fs::create_dir(tmp.path().join(n)).unwrap();
            std::fs::write(tmp.path().join(n).join("rank0"), b"x").unwrap();
        }
        // A file, not a folder, with our name: left alone.
        std::fs::write(tmp.path().join(format!("twin-run-{}", dead + 1)), b"x").unwrap();
        let mut gone = sweep_stale(tmp.path(), RUN_PREFIX);
        gone.sort();
        assert_eq!(
            gone,
            vec![tmp.path().join(&names[0]), tmp.path().join(&names[1])]
        );
        for n in &names[2..] {
            assert!(tmp.path().join(n).is_dir(), "{n} was removed");
        }
        assert!(tmp.path().join(format!("twin-run-{}", dead + 1)).is_file());
    }

    #[test]
    fn the_folder_goes_when_the_guard_drops_even_in_a_panic() {
        let dir = RunDir::create("twin-rundir-test-").unwrap();
        let path = dir.path().to_path_buf();
        std::fs::write(path.join("rank0"), b"x").unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _held = dir;
            panic!("a launcher panicked");
        }));
        assert!(r.is_err());
        assert!(!path.exists(), "{} is left behind", path.display());
    }
}
