//! Real checkpoints of a run on any backend: each rank writes its shard of the model state (the
//! weight and optimizer buffers its backend keeps across steps, see [`state`]) to
//! `DIR/step-NNNNNN/rank-NNNNN.ckpt`, verified on load, written atomically, synchronously or
//! on a background thread. A checkpoint counts only once rank 0 has written its `COMPLETE`
//! manifest after every rank's file is durable; loading takes the newest complete one whose
//! file verifies, and never a torn, truncated, corrupt or foreign one.

pub mod dir;
pub mod format;
pub mod state;
pub mod writer;

pub use format::{FormatError, Header};
pub use state::{StateBuffers, StateInfo};
pub use writer::Writer;

use std::path::PathBuf;

/// Why a checkpoint could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint I/O on {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("checkpoint {path} rejected: {reason}")]
    Rejected { path: String, reason: FormatError },
    #[error("checkpoint payload: {0}")]
    Payload(String),
}

/// Where and how a run checkpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointOptions {
    pub dir: PathBuf,
    /// A checkpoint after every this many completed steps (the run's last step excepted: the
    /// run ends there).
    pub every_steps: u64,
    /// Snapshot to host memory and write on a background thread (the next checkpoint waits
    /// for the previous write).
    pub asynchronous: bool,
    /// Start from the newest complete checkpoint in `dir` (else `dir` must hold none).
    pub resume: bool,
}

impl CheckpointOptions {
    /// Whether a checkpoint is due after `completed` of `total` steps.
    pub fn due(&self, completed: u64, total: u64) -> bool {
        self.every_steps > 0 && completed.is_multiple_of(self.every_steps) && completed < total
    }
}

/// The newest complete checkpoint of this job strictly older than `below` whose file for
/// `rank` verifies: its step and payload, and why each newer candidate was rejected.
pub fn load_newest(
    root: &std::path::Path,
    want: Header,
    below: u64,
) -> (Option<(u64, Vec<u8>)>, Vec<String>) {
    let mut rejected = Vec::new();
    for step in dir::complete_steps(root, want.world, want.fingerprint) {
        if step >= below {
            continue;
        }
        match dir::load_rank(root, &Header { step, ..want }) {
            Ok(payload) => return (Some((step, payload)), rejected),
            Err(e) => rejected.push(e.to_string()),
        }
    }
    (None, rejected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_newest_checkpoint_falls_back_to_the_previous_one() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let want = Header {
            rank: 0,
            world: 1,
            fingerprint: 9,
            step: 0,
            payload_bytes: 0,
        };
        for step in [1u64, 2, 3] {
            let payload = vec![step as u8; 100];
            dir::write_rank(root, &Header { step, ..want }, &payload).unwrap();
            dir::mark_complete(root, step, 1, 9).unwrap();
        }
        // Truncate the newest, flip a bit in the one before.
        let f3 = dir::rank_file(root, 3, 0);
        let len = std::fs::metadata(&f3).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&f3)
            .unwrap()
            .set_len(len - 10)
            .unwrap();
        let f2 = dir::rank_file(root, 2, 0);
        let mut b = std::fs::read(&f2).unwrap();
        b[format::HEADER_BYTES + 50] ^= 0x10;
        std::fs::write(&f2, b).unwrap();
        let (got, rejected) = load_newest(root, want, u64::MAX);
        assert_eq!(got, Some((1, vec![1u8; 100])));
        assert_eq!(rejected.len(), 2);
        assert!(rejected[0].contains("truncated"), "{}", rejected[0]);
        assert!(rejected[1].contains("payload checksum"), "{}", rejected[1]);
        // Below step 1 nothing is left: start from scratch.
        assert_eq!(load_newest(root, want, 1).0, None);
    }

    #[test]
    fn due_every_k_steps_but_not_at_the_end() {
        let o = CheckpointOptions {
            dir: PathBuf::new(),
            every_steps: 2,
            asynchronous: false,
            resume: false,
        };
        let due: Vec<u64> = (1..=6).filter(|&c| o.due(c, 6)).collect();
        assert_eq!(due, vec![2, 4]);
    }
}
