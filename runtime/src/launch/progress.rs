//! Where each rank is, readable after it died: a worker started by the launcher records, per
//! stream, the op it last started and whether it finished, in a small file of its own
//! (`TWIN_PROGRESS_DIR/rankN`). A SIGKILLed rank cannot say anything; its file still tells
//! the launcher at which op it was.
//!
//! The file is mapped into memory (`MAP_SHARED`), so a record is one store into the page cache:
//! the kernel keeps the page when the process dies, and the launcher reads it as a file. A
//! `pwrite` per record (two per op) cost, on the development VM, about a quarter of a send
//! thread's CPU time in ext4's write path, between ops on the critical path (`perf record` of
//! `pp.toml`, docs/journal/2026-11-validation-history.md, 2026-11-24).

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use twin_sim::schedule::Stream;

pub const PROGRESS_VAR: &str = "TWIN_PROGRESS_DIR";
const DONE_BIT: u64 = 1 << 63;
const LEN_BYTES: usize = Stream::COUNT * 8;

fn path(dir: &Path, rank: u32) -> PathBuf {
    dir.join(format!("rank{rank}"))
}

/// This rank's progress file, mapped.
pub struct Progress {
    /// `LEN_BYTES` of a shared mapping of the file, one little-endian word per stream.
    words: *mut AtomicU64,
    /// Kept open for the mapping's life (not needed by it, but it names what is mapped).
    _file: File,
}

// SAFETY: the mapping is only touched through atomic stores, which any thread may make.
unsafe impl Send for Progress {}
// SAFETY: as above; `&Progress` offers atomic stores only.
unsafe impl Sync for Progress {}

impl Progress {
    /// Open the file when the launcher asked for one (`TWIN_PROGRESS_DIR` set).
    pub fn from_env(rank: u32) -> Option<Progress> {
        let dir = std::env::var_os(PROGRESS_VAR)?;
        Progress::create(Path::new(&dir), rank)
    }

    /// The progress file of `rank` in `dir` (as the launcher's workers write it; the
    /// calibration's op-overhead benchmark too, so that it times what a launched run does).
    /// `None` when it cannot be created or mapped: progress is a diagnostic, never a reason to
    /// fail the run.
    pub fn create(dir: &Path, rank: u32) -> Option<Progress> {
        // Not truncated to zero first: a mapping of the same file still alive elsewhere in the
        // process would fault (SIGBUS) on a store in between. Set to its length, then cleared.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path(dir, rank))
            .ok()?;
        file.set_len(LEN_BYTES as u64).ok()?;
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh shared mapping of `LEN_BYTES` of an open file that is that long; the
        // kernel picks the address. Nothing else in this process maps or resizes the file.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LEN_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        let progress = Progress {
            words: ptr.cast(),
            _file: file,
        };
        for &s in &Stream::ALL {
            progress.write(s, 0);
        }
        Some(progress)
    }

    fn write(&self, stream: Stream, value: u64) {
        let i = stream.index();
        debug_assert!(i < Stream::COUNT);
        if i >= Stream::COUNT {
            return;
        }
        // SAFETY: `i` is within the mapping's `Stream::COUNT` words, which are page-aligned
        // (so 8-byte aligned) and live until `drop`.
        let word = unsafe { &*self.words.add(i) };
        // The file is little-endian whatever the host; `read` decodes it so.
        word.store(value.to_le(), Ordering::Release);
    }

    pub fn started(&self, stream: Stream, op: u32) {
        self.write(stream, u64::from(op) + 1);
    }

    pub fn finished(&self, stream: Stream, op: u32) {
        self.write(stream, (u64::from(op) + 1) | DONE_BIT);
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `create`, of that length, unmapped once.
        unsafe {
            libc::munmap(self.words.cast(), LEN_BYTES);
        }
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
        let p = Progress::create(dir.path(), 3).unwrap();
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
        // What was recorded stays in the file once the mapping is gone (a rank that died).
        drop(p);
        assert_eq!(
            read(dir.path(), 3),
            vec![(Stream::Compute, 4, false), (Stream::PpRecv, 2, true)]
        );
    }

    #[test]
    fn another_thread_records_through_a_shared_reference() {
        let dir = tempfile::tempdir().unwrap();
        let p = std::sync::Arc::new(Progress::create(dir.path(), 0).unwrap());
        let q = std::sync::Arc::clone(&p);
        std::thread::spawn(move || q.finished(Stream::PpSend, 7))
            .join()
            .unwrap();
        assert_eq!(read(dir.path(), 0), vec![(Stream::PpSend, 7, true)]);
    }

    #[test]
    fn a_file_created_again_starts_clear_while_the_old_mapping_lives() {
        let dir = tempfile::tempdir().unwrap();
        let old = Progress::create(dir.path(), 1).unwrap();
        old.finished(Stream::Compute, 5);
        let new = Progress::create(dir.path(), 1).unwrap();
        assert!(read(dir.path(), 1).is_empty());
        // Both map the same page: the old one can still record without faulting.
        old.started(Stream::Dp, 2);
        new.started(Stream::Compute, 0);
        assert_eq!(
            read(dir.path(), 1),
            vec![(Stream::Compute, 0, false), (Stream::Dp, 2, false)]
        );
    }

    #[test]
    fn a_directory_that_does_not_exist_gives_no_progress_and_no_panic() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Progress::create(&dir.path().join("missing"), 0).is_none());
    }
}
