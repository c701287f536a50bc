//! The trace both executors write: one [`TraceEvent`] per executed op and memory samples per
//! rank. The simulator and the runtime share this schema (serde), so a predicted and a
//! measured step can be compared op by op; [`Trace::write_chrome_json`] (`chrome`) exports
//! either one for ui.perfetto.dev or chrome://tracing.

use crate::plan::{Coords, Plan};
use crate::schedule::{MemCategory, Stream};
use serde::{Deserialize, Serialize};

mod chrome;
pub use crate::limits::TRACE_BYTES_PER_EVENT;
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

/// Which ranks a trace holds, as `twin simulate --trace-ranks` spells it: `all`, or ranks and
/// inclusive ranges separated by commas (`0-63,128`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceRanks {
    All,
    /// Inclusive ranges (a single rank is a range of one), as written.
    List(Vec<(u32, u32)>),
}

/// A `--trace-ranks` list that names a rank outside the layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--trace-ranks names rank {rank}, but the layout has ranks 0-{last} only")]
pub struct RankOutOfLayout {
    pub rank: u32,
    pub last: u32,
}

impl std::str::FromStr for TraceRanks {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text == "all" {
            return Ok(TraceRanks::All);
        }
        let rank = |t: &str| {
            t.trim().parse::<u32>().map_err(|_| {
                format!(
                    "`{text}`: `{}` is not a rank; give all, or ranks and ranges such as 0-63,128",
                    t.trim()
                )
            })
        };
        let mut ranges = Vec::new();
        for item in text.split(',') {
            let (a, b) = match item.split_once('-') {
                Some((a, b)) => (rank(a)?, rank(b)?),
                None => {
                    let r = rank(item)?;
                    (r, r)
                }
            };
            if a > b {
                return Err(format!("`{text}`: the range {a}-{b} runs backwards"));
            }
            ranges.push((a, b));
        }
        Ok(TraceRanks::List(ranges))
    }
}

impl TraceRanks {
    /// The listed ranks, ascending and each once, checked against a layout of `world` ranks;
    /// `None` for every rank.
    pub fn resolve(&self, world: u32) -> Result<Option<Vec<u32>>, RankOutOfLayout> {
        let TraceRanks::List(ranges) = self else {
            return Ok(None);
        };
        let last = world.saturating_sub(1);
        if let Some(&(_, b)) = ranges.iter().find(|r| r.1 >= world) {
            return Err(RankOutOfLayout { rank: b, last });
        }
        let mut ranks: Vec<u32> = ranges.iter().flat_map(|&(a, b)| a..=b).collect();
        ranks.sort_unstable();
        ranks.dedup();
        Ok(Some(ranks))
    }
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

    #[test]
    fn trace_rank_lists_parse_and_resolve_against_the_layout() {
        let parse = |t: &str| t.parse::<TraceRanks>();
        assert_eq!(parse("all"), Ok(TraceRanks::All));
        assert_eq!(parse("all").unwrap().resolve(8), Ok(None));
        assert_eq!(
            parse("5,0-2, 7 ,1").unwrap().resolve(8),
            Ok(Some(vec![0, 1, 2, 5, 7]))
        );
        assert_eq!(parse("3").unwrap().resolve(4), Ok(Some(vec![3])));
        assert_eq!(
            parse("0-8").unwrap().resolve(8),
            Err(RankOutOfLayout { rank: 8, last: 7 })
        );
        // A huge range outside the layout is refused before it is expanded.
        assert_eq!(
            parse("0-4294967295").unwrap().resolve(16),
            Err(RankOutOfLayout {
                rank: u32::MAX,
                last: 15
            })
        );
        for bad in ["", "x", "1-", "-3", "3-1", "1,,2", "1-2-3", "all,1"] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(bad), "{bad}: {e}");
        }
        assert!(parse("3-1").unwrap_err().contains("backwards"));
    }
}
