//! Output paths are checked before the work that fills them. A calibration, a real run or a
//! sweep can take minutes; one whose `-o` named a directory that does not exist used to fail
//! only at the end, with the work lost and an error naming a temporary file. Each command
//! checks its output flags first, and the files are then written atomically
//! ([`write_atomic`]), so a crash never leaves half a file.

use super::JobError;
use std::path::Path;

/// An output flag whose path cannot be written. Bad input: the command exits 2.
#[derive(Debug, thiserror::Error)]
#[error("{flag} {path}: {reason}")]
pub struct OutputError {
    flag: &'static str,
    path: String,
    reason: String,
}

fn fail(flag: &'static str, path: &Path, reason: String) -> OutputError {
    OutputError {
        flag,
        path: path.display().to_string(),
        reason,
    }
}

/// The directory a file path lands in (`.` for a bare name).
fn parent_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Creates and removes a file in `dir`: the one sure test that the process may write there.
fn probe_write(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".twin-probe-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)?;
    std::fs::remove_file(&probe)
}

/// Checks that the file `path`, given as `flag`, can be written: not a directory, in an
/// existing directory this process may write in. Nothing is left behind.
pub fn check_file(path: Option<&Path>, flag: &'static str) -> Result<(), OutputError> {
    let Some(path) = path else {
        return Ok(());
    };
    if path.is_dir() {
        return Err(fail(flag, path, "is a directory; give a file name".into()));
    }
    let dir = parent_dir(path);
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(fail(
                flag,
                path,
                format!("{} is not a directory", dir.display()),
            ))
        }
        Err(_) => {
            return Err(fail(
                flag,
                path,
                format!(
                    "directory {} does not exist (create it first)",
                    dir.display()
                ),
            ))
        }
    }
    probe_write(dir).map_err(|e| {
        fail(
            flag,
            path,
            format!("cannot write in {}: {e}", dir.display()),
        )
    })
}

/// Creates the directory `path`, given as `flag`, if it is missing (with its parents), and
/// checks that this process may write in it.
pub fn prepare_dir(path: Option<&Path>, flag: &'static str) -> Result<(), OutputError> {
    let Some(path) = path else {
        return Ok(());
    };
    if path.exists() && !path.is_dir() {
        return Err(fail(flag, path, "exists and is not a directory".into()));
    }
    std::fs::create_dir_all(path)
        .map_err(|e| fail(flag, path, format!("cannot create the directory: {e}")))?;
    probe_write(path).map_err(|e| fail(flag, path, format!("cannot write in it: {e}")))
}

/// Write `text` to `path` atomically (temp file + rename), so a crash never leaves half a file.
pub fn write_atomic(path: &Path, text: &str) -> Result<(), JobError> {
    write_atomic_with(path, &mut |w| w.write_all(text.as_bytes()))
}

/// Write what `write` writes to `path` atomically, as [`write_atomic`] does, through a buffer:
/// for output too large to hold as one string first.
pub fn write_atomic_with(
    path: &Path,
    write: &mut dyn FnMut(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<(), JobError> {
    let dir = parent_dir(path);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp{}", std::process::id()));
    let written = std::fs::File::create(&tmp).and_then(|f| {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        write(&mut w)?;
        let f = w.into_inner().map_err(|e| e.into_error())?;
        f.sync_all().ok();
        Ok(())
    });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(JobError::io(format!("cannot write {}", path.display()))(e));
    }
    std::fs::rename(&tmp, path).map_err(JobError::io(format!("cannot write {}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("twin-output-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_file_in_a_missing_directory_is_refused_naming_flag_path_and_directory() {
        let d = scratch("missing");
        let p = d.join("nope").join("profile.toml");
        let e = check_file(Some(&p), "--output").unwrap_err().to_string();
        assert!(e.starts_with("--output "), "{e}");
        assert!(e.contains("profile.toml"), "{e}");
        assert!(e.contains("does not exist"), "{e}");
        assert!(e.contains(&d.join("nope").display().to_string()), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_writable_file_passes_and_leaves_nothing_behind() {
        let d = scratch("ok");
        check_file(Some(&d.join("out.json")), "--out").unwrap();
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
        // A bare name lands in the working directory, which exists.
        check_file(None, "--out").unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_directory_given_as_a_file_or_a_file_as_a_directory_is_refused() {
        let d = scratch("kinds");
        let e = check_file(Some(&d), "--trace").unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        let f = d.join("plain");
        std::fs::write(&f, "x").unwrap();
        let e = prepare_dir(Some(&f), "--trace-dir")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a directory"), "{e}");
        // A file's "directory" that is a file.
        let e = check_file(Some(&f.join("x.json")), "--out")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a directory"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn an_output_directory_is_created_with_its_parents() {
        let d = scratch("mkdir");
        let t = d.join("a").join("b");
        prepare_dir(Some(&t), "--trace-dir").unwrap();
        assert!(t.is_dir());
        assert_eq!(std::fs::read_dir(&t).unwrap().count(), 0);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn an_atomic_write_into_a_missing_directory_names_the_file_not_a_temporary() {
        let d = scratch("atomic");
        let p = d.join("missing").join("x.toml");
        let e = write_atomic(&p, "a = 1").unwrap_err();
        assert!(std::error::Error::source(&e).is_some(), "{e}");
        let e = e.to_string();
        assert!(
            e.starts_with(&format!("cannot write {}", p.display())),
            "{e}"
        );
        assert!(!e.contains(".tmp"), "{e}");
        let ok = d.join("x.toml");
        write_atomic(&ok, "a = 1").unwrap();
        assert_eq!(std::fs::read_to_string(&ok).unwrap(), "a = 1");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
