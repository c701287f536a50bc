//! The runtime's one error type. Every failure says where it happened (rank, op index, op
//! name) when that is known, because "NCCL error 2" without the op that issued it is useless
//! on a 64-rank run.

use twin_sim::plan::RankId;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A required shared library is missing; `searched` lists every place looked at.
    #[error("no {library} found (searched: {}); {hint}", searched.join(", "))]
    LibraryNotFound {
        library: &'static str,
        searched: Vec<String>,
        hint: &'static str,
    },
    #[error("{library} found at {path} but could not be loaded: {reason}")]
    LibraryLoad {
        library: &'static str,
        path: String,
        reason: String,
    },
    #[error("CUDA driver call {call} failed: {message}")]
    Cuda { call: &'static str, message: String },
    #[error("cuBLAS call {call} failed: {message}")]
    Cublas { call: &'static str, message: String },
    #[error("NCCL call {call} failed: {message}")]
    Nccl { call: &'static str, message: String },
    /// An op failed; `source` says how.
    #[error("rank {rank} op {index} ({name}): {source}")]
    Op {
        rank: RankId,
        index: u32,
        name: String,
        #[source]
        source: Box<RuntimeError>,
    },
    /// The schedule cannot run as given (bad dependency, unknown free tag, ...).
    #[error("invalid schedule for rank {rank}: {message}")]
    Schedule { rank: RankId, message: String },
    #[error("the schedule has {ranks} ranks but only {gpus} GPU(s) are visible; the CUDA backend needs one GPU per rank")]
    TooManyRanks { ranks: u32, gpus: u32 },
    #[error("the schedule has {ranks} ranks: multi-rank CUDA runs need one process per GPU, started by the launcher (`twin run --backend cuda` with the launcher, not yet available); run a single-rank schedule here")]
    NeedsLauncher { ranks: u32 },
    #[error("rendezvous failed: {0}")]
    Rendezvous(String),
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A TCP connection to another rank failed or closed (host backend).
    #[error("connection to rank {peer}: {message}")]
    Transport { peer: RankId, message: String },
    /// A message arrived damaged or out of order (bad magic, length, tag or checksum).
    #[error("corrupt message from rank {peer}: {message}")]
    Corrupt { peer: RankId, message: String },
    /// A collective or transfer delivered data that differs from what the algorithm must give.
    #[error("wrong result: {0}")]
    WrongResult(String),
    /// A bootstrap environment variable is missing or malformed.
    #[error("bad environment: {var}: {message}")]
    Env { var: &'static str, message: String },
    /// Writing or reading a checkpoint failed.
    #[error(transparent)]
    Checkpoint(#[from] crate::checkpoint::CheckpointError),
    /// Another rank failed first; this rank stopped because of it.
    #[error("aborted: {0}")]
    Aborted(String),
    /// A library call panicked (cudarc panics on a missing symbol); caught, not propagated.
    #[error("internal panic in {context}: {message}")]
    Panic {
        context: &'static str,
        message: String,
    },
}

impl RuntimeError {
    /// Wrap `self` with the op that failed, unless it already names one.
    pub fn at_op(self, rank: RankId, index: u32, name: impl Into<String>) -> RuntimeError {
        match self {
            e @ RuntimeError::Op { .. } => e,
            e => RuntimeError::Op {
                rank,
                index,
                name: name.into(),
                source: Box::new(e),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_errors_name_rank_index_and_op() {
        let e = RuntimeError::Nccl {
            call: "ncclAllReduce",
            message: "unhandled system error".into(),
        }
        .at_op(3, 17, "all-reduce Tp 48.0MiB");
        let text = e.to_string();
        assert!(text.starts_with("rank 3 op 17 (all-reduce Tp 48.0MiB): NCCL call ncclAllReduce"));
        // Wrapping twice keeps the innermost op.
        let again = e.at_op(0, 0, "other").to_string();
        assert_eq!(again, text);
    }

    #[test]
    fn missing_library_lists_the_search() {
        let e = RuntimeError::LibraryNotFound {
            library: "CUDA driver",
            searched: vec!["/a".into(), "/b".into()],
            hint: "install the NVIDIA driver or set TWIN_CUDA_LIB_DIR",
        };
        assert_eq!(
            e.to_string(),
            "no CUDA driver found (searched: /a, /b); install the NVIDIA driver or set TWIN_CUDA_LIB_DIR"
        );
    }
}
