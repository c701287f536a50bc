//! The trace both executors write: one [`TraceEvent`] per executed op and memory samples per
//! rank. The simulator and the runtime share this schema (serde), so a predicted and a
//! measured step can be compared op by op; [`Trace::to_chrome_json`] exports either one for
//! ui.perfetto.dev or chrome://tracing.

use crate::plan::Plan;
use crate::schedule::{MemCategory, OpKind, Schedule, Stream};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt::Write as _;

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

impl Trace {
    /// Chrome trace event format: one process per rank ("rank N (stage s)"), one thread per
    /// stream, an "X" event per op (frees and instant allocations show up on the counter track
    /// only; an allocation that takes time also gets its "X" event), and a
    /// "memory" counter per rank with one series per category. Times are microseconds with
    /// nanosecond precision. Output is a pure function of the inputs.
    pub fn to_chrome_json(&self, plan: &Plan, schedule: &Schedule) -> String {
        let mut ranks = BTreeSet::new();
        let mut threads = BTreeSet::new();
        for e in &self.events {
            ranks.insert(e.rank);
            threads.insert((e.rank, e.stream));
        }
        for m in &self.memory {
            ranks.insert(m.rank);
        }
        let mut out = String::with_capacity(64 + 160 * self.events.len());
        out.push_str("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
        let mut first = true;
        let mut sep = |out: &mut String| {
            if !first {
                out.push_str(",\n");
            }
            first = false;
        };
        for &rank in &ranks {
            let stage = if rank < plan.world {
                plan.stage_of(rank)
            } else {
                0
            };
            sep(&mut out);
            let _ = write!(
                out,
                "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{rank},\"args\":{{\"name\":\"rank {rank} (stage {stage})\"}}}}"
            );
            sep(&mut out);
            let _ = write!(
                out,
                "{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{rank},\"args\":{{\"sort_index\":{rank}}}}}"
            );
        }
        for &(rank, stream) in &threads {
            let tid = stream.index();
            sep(&mut out);
            let _ = write!(
                out,
                "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{rank},\"tid\":{tid},\"args\":{{\"name\":\"{}\"}}}}",
                stream.name()
            );
            sep(&mut out);
            let _ = write!(
                out,
                "{{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":{rank},\"tid\":{tid},\"args\":{{\"sort_index\":{tid}}}}}"
            );
        }
        for e in &self.events {
            let op = schedule.get_op(e.rank, e.op);
            // Frees are instant, and so are allocations on a GPU (a caching allocator); a
            // priced allocation (the host writes every byte) takes time on its stream and is
            // shown, so a critical path through one can be read off the trace.
            let instant = e.end_ns <= e.start_ns;
            match op.map(|o| &o.kind) {
                Some(OpKind::Free { .. }) => continue,
                Some(OpKind::Alloc { .. }) if instant => continue,
                _ => {}
            }
            let name = op.map_or_else(|| format!("op {}", e.op), |o| o.name());
            sep(&mut out);
            out.push_str("{\"ph\":\"X\",\"name\":");
            push_json_str(&mut out, &name);
            let _ = write!(
                out,
                ",\"cat\":\"{}\",\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{},\"args\":{{\"op\":{},\"bytes\":{},\"flops\":{},\"mem_bytes\":{}",
                e.stream.name(),
                e.rank,
                e.stream.index(),
                Micros(e.start_ns),
                Micros(e.end_ns.saturating_sub(e.start_ns)),
                e.op,
                e.bytes,
                e.flops,
                e.mem_bytes
            );
            if let Some(i) = e.issued_ns {
                let _ = write!(out, ",\"issued_us\":{}", Micros(i));
            }
            if let Some(s) = e.solo_ns {
                let _ = write!(out, ",\"solo_us\":{}", Micros(s));
            }
            // Close args, then the event.
            out.push_str("}}");
        }
        for m in &self.memory {
            sep(&mut out);
            let _ = write!(
                out,
                "{{\"ph\":\"C\",\"name\":\"memory\",\"pid\":{},\"ts\":{},\"args\":{{",
                m.rank,
                Micros(m.time_ns)
            );
            for (i, cat) in MemCategory::ALL.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "\"{}\":{}", cat.name(), m.bytes[i]);
            }
            out.push_str("}}");
        }
        out.push_str("\n]}\n");
        out
    }
}

/// Nanoseconds printed as microseconds with exactly three decimals (exact, no float).
struct Micros(u64);

impl std::fmt::Display for Micros {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

/// Append `s` as a JSON string literal.
pub(crate) fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micros_are_exact() {
        assert_eq!(Micros(0).to_string(), "0.000");
        assert_eq!(Micros(1).to_string(), "0.001");
        assert_eq!(Micros(1_234_567).to_string(), "1234.567");
    }

    #[test]
    fn json_strings_are_escaped() {
        let mut s = String::new();
        push_json_str(&mut s, "a\"b\\c\nd\u{1}");
        assert_eq!(s, "\"a\\\"b\\\\c\\nd\\u0001\"");
        let parsed: String = serde_json::from_str(&s).unwrap();
        assert_eq!(parsed, "a\"b\\c\nd\u{1}");
    }

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
    fn the_chrome_export_carries_issue_times_where_the_trace_has_them() {
        let s = crate::testing::small_scenario(1, 2, 1, 2);
        let p = crate::predict(
            &s,
            &crate::PredictOptions {
                trace: true,
                reproducible: true,
                ..Default::default()
            },
        )
        .unwrap();
        let mut trace = p.result.trace.clone().unwrap();
        let (plan, schedule) = (&p.staged.plan, &p.staged.schedule);
        let ops = |t: &Trace| -> Vec<serde_json::Value> {
            let v: serde_json::Value =
                serde_json::from_str(&t.to_chrome_json(plan, schedule)).unwrap();
            v["traceEvents"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["ph"] == "X")
                .cloned()
                .collect()
        };
        let with = ops(&trace);
        assert!(!with.is_empty());
        assert!(
            with.iter().all(|e| e["args"]["issued_us"].is_number()),
            "{with:?}"
        );
        for e in &mut trace.events {
            e.issued_ns = None;
        }
        let without = ops(&trace);
        assert_eq!(without.len(), with.len());
        assert!(without
            .iter()
            .all(|e| e["args"].get("issued_us").is_none() && e["args"]["op"].is_number()));
        // No op of this run shared a core, so none says how long it would have taken alone.
        assert!(with.iter().all(|e| e["args"].get("solo_us").is_none()));
        let e = trace
            .events
            .iter_mut()
            .find(|e| e.end_ns > e.start_ns)
            .unwrap();
        e.solo_ns = Some(1_500);
        let (rank, op) = (e.rank, e.op);
        let x = ops(&trace)
            .into_iter()
            .find(|x| x["pid"] == rank && x["args"]["op"] == op)
            .unwrap();
        assert_eq!(x["args"]["solo_us"], 1.5);
    }
}
