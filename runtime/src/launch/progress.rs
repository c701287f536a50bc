//! Where each rank is, readable after it died: a worker started by the launcher records, per
//! stream, the op it last started and whether it finished, in a small file of its own
//! (`TWIN_PROGRESS_DIR/rankN`, one positioned write per op start and end, about a microsecond
//! against ops of milliseconds). A SIGKILLed rank cannot say anything; its file still tells
//! the launcher at which op it was.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use twin_sim::schedule::Stream;

pub const PROGRESS_VAR: &str = "TWIN_PROGRESS_DIR";
const DONE_BIT: u64 = 1 << 63;

fn path(dir: &Path, rank: u32) -> PathBuf {
    dir.join(format!("rank{rank}"))
}

/// This rank's progress file.
pub struct Progress {
    file: File,
}

impl Progress {
    /// Open the file when the launcher asked for one (`TWIN_PROGRESS_DIR` set).
    pub fn from_env(rank: u32) -> Option<Progress> {
        let dir = std::env::var_os(PROGRESS_VAR)?;
        Progress::create(Path::new(&dir), rank)
    }

    /// The progress file of `rank` in `dir` (as the launcher's workers write it; the
    /// calibration's op-overhead benchmark too, so that it times what a launched run does).
    pub fn create(dir: &Path, rank: u32) -> Option<Progress> {
        let file = File::create(path(dir, rank)).ok()?;
        file.set_len((Stream::COUNT * 8) as u64).ok()?;
        Some(Progress { file })
    }

    fn write(&self, stream: Stream, value: u64) {
        // Best effort: progress is a diagnostic, never a reason to fail the run.
        let _ = self
            .file
            .write_at(&value.to_le_bytes(), (stream.index() * 8) as u64);
    }

    pub fn started(&self, stream: Stream, op: u32) {
        self.write(stream, u64::from(op) + 1);
    }

    pub fn finished(&self, stream: Stream, op: u32) {
        self.write(stream, (u64::from(op) + 1) | DONE_BIT);
    }
}

/// The raw progress of ranks `0..world`, to tell whether anything moved since the last look.
pub fn snapshot(dir: &Path, world: u32) -> Vec<Vec<u8>> {
    (0..world)
        .map(|r| std::fs::read(path(dir, r)).unwrap_or_default())
        .collect()
}

/// Per stream that started anything: (stream, last op, whether it had finished).
pub fn read(dir: &Path, rank: u32) -> Vec<(Stream, u32, bool)> {
    let Ok(bytes) = std::fs::read(path(dir, rank)) else {
        return Vec::new();
    };
    Stream::ALL
        .iter()
        .filter_map(|&s| {
            let b = bytes.get(s.index() * 8..s.index() * 8 + 8)?;
            let mut w = [0u8; 8];
            w.copy_from_slice(b);
            let v = u64::from_le_bytes(w);
            let op = (v & !DONE_BIT).checked_sub(1)?;
            Some((s, u32::try_from(op).ok()?, v & DONE_BIT != 0))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_the_last_op_per_stream() {
        let dir = tempfile::tempdir().unwrap();
        let p = Progress {
            file: File::create(path(dir.path(), 3)).unwrap(),
        };
        p.file.set_len((Stream::COUNT * 8) as u64).unwrap();
        p.started(Stream::Compute, 0);
        p.finished(Stream::Compute, 0);
        p.started(Stream::Compute, 4);
        p.started(Stream::PpRecv, 2);
        p.finished(Stream::PpRecv, 2);
        assert_eq!(
            read(dir.path(), 3),
            vec![(Stream::Compute, 4, false), (Stream::PpRecv, 2, true)]
        );
        assert!(read(dir.path(), 9).is_empty());
    }
}
