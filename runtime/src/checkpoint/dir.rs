//! The checkpoint directory: `DIR/step-NNNNNN/rank-NNNNN.ckpt` per rank and a `COMPLETE`
//! manifest that rank 0 writes last, after every rank's file is durable. Every file is written
//! atomically (temp file, fsync, rename, fsync of the directory), so a crash leaves either the
//! old state or the new one, plus at most a temp file that nothing reads.

use super::format::{self, Header};
use super::CheckpointError;
use std::io::Write;
use std::path::{Path, PathBuf};

pub const MANIFEST: &str = "COMPLETE";

pub fn step_dir(root: &Path, step: u64) -> PathBuf {
    root.join(format!("step-{step:06}"))
}

pub fn rank_file(root: &Path, step: u64, rank: u32) -> PathBuf {
    step_dir(root, step).join(format!("rank-{rank:05}.ckpt"))
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn sync_dir(dir: &Path) -> Result<(), CheckpointError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))
}

/// Write `bytes` to `path` atomically and durably.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    write_parts_atomic(path, &[bytes])
}

/// Write `parts`, one after the other, to `path` atomically and durably.
fn write_parts_atomic(path: &Path, parts: &[&[u8]]) -> Result<(), CheckpointError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    for p in parts {
        f.write_all(p).map_err(io(&tmp))?;
    }
    f.sync_all().map_err(io(&tmp))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io(path))?;
    sync_dir(dir)
}

/// Write this rank's file of checkpoint `h.step`; returns the bytes written.
pub fn write_rank(root: &Path, h: &Header, payload: &[u8]) -> Result<u64, CheckpointError> {
    let dir = step_dir(root, h.step);
    if !dir.exists() {
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        sync_dir(root)?;
    }
    let (head, trailer) = format::frame(h, payload);
    write_parts_atomic(
        &rank_file(root, h.step, h.rank),
        &[&head, payload, &trailer],
    )?;
    Ok((head.len() + payload.len() + trailer.len()) as u64)
}

fn manifest_text(step: u64, world: u32, fingerprint: u64) -> String {
    format!("twin checkpoint\nstep={step}\nworld={world}\nfingerprint={fingerprint:016x}\n")
}

/// Mark checkpoint `step` complete (rank 0, once every rank's file is durable).
pub fn mark_complete(
    root: &Path,
    step: u64,
    world: u32,
    fingerprint: u64,
) -> Result<(), CheckpointError> {
    write_atomic(
        &step_dir(root, step).join(MANIFEST),
        manifest_text(step, world, fingerprint).as_bytes(),
    )
}

/// Whether `root` holds any checkpoint step directory (complete or not).
pub fn has_checkpoints(root: &Path) -> bool {
    std::fs::read_dir(root).is_ok_and(|d| {
        d.flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("step-"))
    })
}

/// Steps of every checkpoint of this job whose manifest exists and matches, newest first.
pub fn complete_steps(root: &Path, world: u32, fingerprint: u64) -> Vec<u64> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut steps: Vec<u64> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let step: u64 = name.strip_prefix("step-")?.parse().ok()?;
            let text = std::fs::read_to_string(e.path().join(MANIFEST)).ok()?;
            (text == manifest_text(step, world, fingerprint)).then_some(step)
        })
        .collect();
    steps.sort_unstable_by(|a, b| b.cmp(a));
    steps
}

/// Read and verify this rank's file of checkpoint `want.step`; returns the payload.
pub fn load_rank(root: &Path, want: &Header) -> Result<Vec<u8>, CheckpointError> {
    let path = rank_file(root, want.step, want.rank);
    let mut bytes = std::fs::read(&path).map_err(io(&path))?;
    let bad = |reason: format::FormatError| CheckpointError::Rejected {
        path: path.display().to_string(),
        reason,
    };
    let (h, payload) = format::decode(&bytes).map_err(bad)?;
    format::expect(&h, want).map_err(bad)?;
    // The payload in place: no second copy of a file that may be tens of GB.
    let end = format::HEADER_BYTES + payload.len();
    bytes.truncate(end);
    bytes.drain(..format::HEADER_BYTES);
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(step: u64, rank: u32) -> Header {
        Header {
            rank,
            world: 2,
            fingerprint: 7,
            step,
            payload_bytes: 0,
        }
    }

    #[test]
    fn only_manifested_steps_of_this_job_count() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        assert!(!has_checkpoints(root));
        for step in [2, 4, 6] {
            for r in 0..2 {
                write_rank(root, &h(step, r), b"abc").unwrap();
            }
        }
        mark_complete(root, 2, 2, 7).unwrap();
        mark_complete(root, 4, 2, 7).unwrap();
        // Step 6 has its files but no manifest: not complete.
        assert!(has_checkpoints(root));
        assert_eq!(complete_steps(root, 2, 7), vec![4, 2]);
        // Another job (fingerprint, world) sees none of them.
        assert!(complete_steps(root, 2, 8).is_empty());
        assert!(complete_steps(root, 3, 7).is_empty());
        assert_eq!(load_rank(root, &h(4, 1)).unwrap(), b"abc");
        // A file read for the wrong step (renamed directory) is a mismatch.
        std::fs::rename(step_dir(root, 2), step_dir(root, 3)).unwrap();
        let e = load_rank(root, &h(3, 0)).unwrap_err().to_string();
        assert!(e.contains("step is 2 but 3 was expected"), "{e}");
    }

    #[test]
    fn atomic_writes_leave_no_temp_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 1);
    }
}
