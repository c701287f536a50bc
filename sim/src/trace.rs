//! The trace both executors write: one [`TraceEvent`] per executed op and memory samples per
//! rank. The simulator and the runtime share this schema (serde), so a predicted and a
//! measured step can be compared op by op; [`Trace::write_chrome_json`] (`chrome`) exports
//! either one for ui.perfetto.dev or chrome://tracing.

use crate::plan::{Coords, Plan};
use crate::schedule::{MemCategory, Stream};
use serde::{Deserialize, Serialize};

mod chrome;
pub use chrome::Written;

/// One executed op of one rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEvent {
    pub rank: u32,
    pub stream: Stream,
    /// Index of the op in the rank's program.
    pub op: u32,
    /// For communication ops: when the transfer started (all parties had arrived).
    pub start_ns: u64,
    pub end_ns: u64,
    /// Bytes moved over links ([`crate::schedule::Op::comm_bytes`]) or allocated.
    pub bytes: u64,
    pub flops: u64,
    /// Live device (GPU) memory of the rank when the op ended.
    pub mem_bytes: u64,
    /// When the executor issued the op: its deps were done and its stream was free, as the
    /// executor saw them. The op then starts at once, or waits for a core's turn (a compute
    /// op on a shared core) or for its peers (communication). `None` where the executor does
    /// not know (a GPU's streams start an op on the device, unseen by the host). The critical
    /// path splits a wait at this time: before it, the executor was late to notice; after it,
    /// the op waited for something else (`verify::critical`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issued_ns: Option<u64>,
    /// The op's time alone on its core, where it shared a CPU core with other work and ran
    /// longer (the host model's `[host] cores`): the wall time beyond it was waiting for the
    /// core, which the simulator's report counts as idle, not as work (`host_model::share`), so a
    /// bubble counted from the trace must too. `None` where the op ran alone or the executor
    /// does not know (a measured trace: its ops take turns on a shared core instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solo_ns: Option<u64>,
}

impl TraceEvent {
    /// The op's own time: its span less its waiting for a shared core (`solo_ns`, where the
    /// trace knows it).
    pub fn own_ns(&self) -> u64 {
        let span_ns = self.end_ns.saturating_sub(self.start_ns);
        self.solo_ns.map_or(span_ns, |s| s.min(span_ns))
    }
}

#[cfg(test)]
impl TraceEvent {
    /// Op 0 of `rank` on `stream` over [`start_ns`, `end_ns`), nothing else known: the
    /// verify tests' hand-made traces.
    pub(crate) fn span(rank: u32, stream: Stream, start_ns: u64, end_ns: u64) -> TraceEvent {
        TraceEvent {
            rank,
            stream,
            op: 0,
            start_ns,
            end_ns,
            bytes: 0,
            flops: 0,
            mem_bytes: 0,
            issued_ns: None,
            solo_ns: None,
        }
    }
}

/// Live device memory of one rank by category, from one moment on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemorySample {
    pub rank: u32,
    pub time_ns: u64,
    /// Indexed by [`MemCategory`].
    pub bytes: [u64; MemCategory::COUNT],
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trace {
    /// In completion order (ties in the order the executor handled them).
    pub events: Vec<TraceEvent>,
    /// One sample after every change, in time order per rank.
    pub memory: Vec<MemorySample>,
}

/// The representative ranks of `plan`, ascending: one per pipeline stage, the rank with
/// every other coordinate zero (the ranks a collapsed simulation runs where the ranks of a
/// stage are symmetric). What `twin simulate --trace` traces by default.
pub fn representative_ranks(plan: &Plan) -> Vec<u32> {
    let mut ranks: Vec<u32> = (0..plan.sizes.pp.max(1))
        .map(|pp| {
            plan.rank_of(Coords {
                pp,
                ..Coords::default()
            })
        })
        .collect();
    ranks.sort_unstable();
    ranks.dedup();
    ranks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_events_round_trip_through_serde() {
        let t = Trace {
            events: vec![TraceEvent {
                rank: 3,
                stream: Stream::PpSend,
                op: 7,
                start_ns: 10,
                end_ns: 25,
                bytes: 1 << 20,
                flops: 0,
                mem_bytes: 99,
                issued_ns: Some(4),
                solo_ns: Some(9),
            }],
            memory: vec![MemorySample {
                rank: 3,
                time_ns: 10,
                bytes: [1, 2, 3, 4, 5, 6],
            }],
        };
        let json = serde_json::to_string(&t).unwrap();
        assert!(json.contains("\"stream\":\"pp-send\""), "{json}");
        let back: Trace = serde_json::from_str(&json).unwrap();
        assert_eq!(back, t);
    }
}
