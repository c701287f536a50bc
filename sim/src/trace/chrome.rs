//! The Chrome trace event format of a [`Trace`] (ui.perfetto.dev, chrome://tracing): typed
//! events serialized with serde, one per line, streamed to a writer; gzip for a file whose
//! name ends in `.gz`.
//!
//! - One process per rank ("rank N (stage s)"), one thread per stream.
//! - An "X" (complete) event per op. Frees and instant allocations show up on the counter
//!   track only; an allocation that takes time also gets its "X" event.
//! - A flow ("s" on the send, "f" on the receive, bound to the enclosing slices) from each
//!   point-to-point send to its receive, where both ranks are in the trace.
//! - A "memory" counter ("C") per rank with one series per category.
//!
//! Times are microseconds (JSON numbers, exact to the nanosecond). The output is a pure
//! function of the inputs.

use super::{MemorySample, Trace, TraceEvent};
use crate::plan::Plan;
use crate::schedule::{MemCategory, OpKind, Schedule};
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};
use std::path::Path;

/// Nanoseconds written as a number of microseconds. Below 2^51 ns (26 days) doubles are
/// closer than 0.0005 µs apart, so the shortest decimal that reads back as `ns / 1000` is
/// the exact one (at most three decimals), and a reader that multiplies the double by 1000
/// and rounds gets the nanoseconds back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Micros(u64);

impl Serialize for Micros {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0 as f64 / 1000.0)
    }
}

/// What a metadata event names.
#[derive(Serialize)]
#[serde(untagged)]
enum MetaArgs<'a> {
    Name { name: Cow<'a, str> },
    SortIndex { sort_index: u32 },
}

/// An op's arguments, shown when its slice is selected.
#[derive(Serialize)]
struct OpArgs {
    op: u32,
    bytes: u64,
    flops: u64,
    mem_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    issued_us: Option<Micros>,
    #[serde(skip_serializing_if = "Option::is_none")]
    solo_us: Option<Micros>,
}

/// Live memory by category, one counter series each.
struct MemoryArgs<'a>(&'a [u64; MemCategory::COUNT]);

impl Serialize for MemoryArgs<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(MemCategory::COUNT))?;
        for (cat, bytes) in MemCategory::ALL.iter().zip(self.0) {
            m.serialize_entry(cat.name(), bytes)?;
        }
        m.end()
    }
}

/// The name and category a flow's two ends share (flows pair by id, name and category).
const FLOW_NAME: &str = "p2p";

/// One Chrome trace event. Every event carries `pid`, `tid` and `ts`; metadata and counters,
/// which belong to a process, say thread 0 and time 0 (readers ignore both there).
#[derive(Serialize)]
#[serde(tag = "ph")]
enum ChromeEvent<'a> {
    #[serde(rename = "M")]
    Meta {
        name: &'static str,
        pid: u32,
        tid: u32,
        ts: Micros,
        args: MetaArgs<'a>,
    },
    #[serde(rename = "X")]
    Complete {
        name: Cow<'a, str>,
        cat: &'static str,
        pid: u32,
        tid: u32,
        ts: Micros,
        dur: Micros,
        args: OpArgs,
    },
    #[serde(rename = "s")]
    FlowStart {
        name: &'static str,
        cat: &'static str,
        id: u64,
        pid: u32,
        tid: u32,
        ts: Micros,
    },
    #[serde(rename = "f")]
    FlowEnd {
        name: &'static str,
        cat: &'static str,
        id: u64,
        pid: u32,
        tid: u32,
        ts: Micros,
        /// "e": bind to the enclosing slice (the receive), not the next one.
        bp: &'static str,
    },
    #[serde(rename = "C")]
    Counter {
        name: &'static str,
        pid: u32,
        tid: u32,
        ts: Micros,
        args: MemoryArgs<'a>,
    },
}

/// Where a flow attaches: the middle of an op's slice, so that the slice encloses it.
fn middle(e: &TraceEvent) -> (u32, u32, Micros) {
    let dur = e.end_ns.saturating_sub(e.start_ns);
    (
        e.rank,
        e.stream.index() as u32,
        Micros(e.start_ns + dur / 2),
    )
}

/// The pairs (send event, receive event) of the trace, as indices into `events`, in the
/// order of the receives: a receive pairs with the send of the same tag from the rank its
/// peer names to it (the engine's and the validator's rule). Ranks outside the plan (a trace
/// of another layout) have no peers.
fn p2p_pairs(events: &[TraceEvent], plan: &Plan, schedule: &Schedule) -> Vec<(usize, usize)> {
    let mut sends = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        if let Some(OpKind::Send { peer, tag, .. }) = schedule.get_op(e.rank, e.op).map(|o| &o.kind)
        {
            if e.rank < plan.world {
                sends
                    .entry((e.rank, peer.rank_for(plan, e.rank), *tag))
                    .or_insert(i);
            }
        }
    }
    events
        .iter()
        .enumerate()
        .filter_map(
            |(i, e)| match schedule.get_op(e.rank, e.op).map(|o| &o.kind) {
                Some(OpKind::Recv { peer, tag, .. }) if e.rank < plan.world => {
                    let src = peer.rank_for(plan, e.rank);
                    sends.get(&(src, e.rank, *tag)).map(|&s| (s, i))
                }
                _ => None,
            },
        )
        .collect()
}

/// Whether the export shows `e` as a slice: frees are instant, and so are allocations on a
/// GPU (a caching allocator); a priced allocation (the host writes every byte) takes time
/// on its stream and is shown, so a critical path through one can be read off the trace.
fn shown(e: &TraceEvent, schedule: &Schedule) -> bool {
    match schedule.get_op(e.rank, e.op).map(|o| &o.kind) {
        Some(OpKind::Free { .. }) => false,
        Some(OpKind::Alloc { .. }) => e.end_ns > e.start_ns,
        _ => true,
    }
}

/// Streams events to `out`: the document's opening, each event on its own line, its close.
struct EventWriter<W: Write> {
    out: W,
    first: bool,
}

impl<W: Write> EventWriter<W> {
    fn new(mut out: W) -> io::Result<Self> {
        out.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")?;
        Ok(EventWriter { out, first: true })
    }

    fn event(&mut self, e: &ChromeEvent) -> io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        serde_json::to_writer(&mut self.out, e).map_err(io::Error::from)
    }

    fn finish(mut self) -> io::Result<W> {
        self.out.write_all(b"\n]}\n")?;
        Ok(self.out)
    }
}

impl Trace {
    /// The Chrome trace event format of this trace, written to `out` as it is produced
    /// (give it a buffered writer); see the module's description.
    pub fn write_chrome_json<W: Write>(
        &self,
        out: W,
        plan: &Plan,
        schedule: &Schedule,
    ) -> io::Result<W> {
        let mut ranks = BTreeSet::new();
        let mut threads = BTreeSet::new();
        for e in &self.events {
            ranks.insert(e.rank);
            threads.insert((e.rank, e.stream));
        }
        for m in &self.memory {
            ranks.insert(m.rank);
        }
        let mut w = EventWriter::new(out)?;
        for &rank in &ranks {
            let stage = if rank < plan.world {
                plan.stage_of(rank)
            } else {
                0
            };
            let meta = |name, args| ChromeEvent::Meta {
                name,
                pid: rank,
                tid: 0,
                ts: Micros(0),
                args,
            };
            w.event(&meta(
                "process_name",
                MetaArgs::Name {
                    name: Cow::Owned(format!("rank {rank} (stage {stage})")),
                },
            ))?;
            w.event(&meta(
                "process_sort_index",
                MetaArgs::SortIndex { sort_index: rank },
            ))?;
        }
        for &(rank, stream) in &threads {
            let tid = stream.index() as u32;
            let meta = |name, args| ChromeEvent::Meta {
                name,
                pid: rank,
                tid,
                ts: Micros(0),
                args,
            };
            w.event(&meta(
                "thread_name",
                MetaArgs::Name {
                    name: Cow::Borrowed(stream.name()),
                },
            ))?;
            w.event(&meta(
                "thread_sort_index",
                MetaArgs::SortIndex { sort_index: tid },
            ))?;
        }
        for e in self.events.iter().filter(|e| shown(e, schedule)) {
            let op = schedule.get_op(e.rank, e.op);
            w.event(&ChromeEvent::Complete {
                name: op.map_or_else(|| Cow::Owned(format!("op {}", e.op)), |o| o.name().into()),
                cat: e.stream.name(),
                pid: e.rank,
                tid: e.stream.index() as u32,
                ts: Micros(e.start_ns),
                dur: Micros(e.end_ns.saturating_sub(e.start_ns)),
                args: OpArgs {
                    op: e.op,
                    bytes: e.bytes,
                    flops: e.flops,
                    mem_bytes: e.mem_bytes,
                    issued_us: e.issued_ns.map(Micros),
                    solo_us: e.solo_ns.map(Micros),
                },
            })?;
        }
        for (id, (send, recv)) in (1u64..).zip(p2p_pairs(&self.events, plan, schedule)) {
            let (pid, tid, ts) = middle(&self.events[send]);
            w.event(&ChromeEvent::FlowStart {
                name: FLOW_NAME,
                cat: FLOW_NAME,
                id,
                pid,
                tid,
                ts,
            })?;
            let (pid, tid, ts) = middle(&self.events[recv]);
            w.event(&ChromeEvent::FlowEnd {
                name: FLOW_NAME,
                cat: FLOW_NAME,
                id,
                pid,
                tid,
                ts,
                bp: "e",
            })?;
        }
        for MemorySample {
            rank,
            time_ns,
            bytes,
        } in &self.memory
        {
            w.event(&ChromeEvent::Counter {
                name: "memory",
                pid: *rank,
                tid: 0,
                ts: Micros(*time_ns),
                args: MemoryArgs(bytes),
            })?;
        }
        w.finish()
    }

    /// [`Trace::write_chrome_json`] into a string.
    pub fn to_chrome_json(&self, plan: &Plan, schedule: &Schedule) -> String {
        let bytes = self
            .write_chrome_json(
                Vec::with_capacity(64 + 160 * self.events.len()),
                plan,
                schedule,
            )
            // Writing to a Vec fails only where serde_json would, and these types cannot.
            .unwrap_or_default();
        String::from_utf8(bytes).unwrap_or_default()
    }

    /// Writes [`Trace::write_chrome_json`] to `path`, gzipped when its name ends in `.gz`,
    /// through a temporary file in the same directory renamed into place (no half-written
    /// trace is left behind). A path that exists and is not a regular file (`/dev/stdout`,
    /// `/dev/null`, a named pipe) is written in place instead: a rename would replace it.
    pub fn write_chrome_file(
        &self,
        path: &Path,
        plan: &Plan,
        schedule: &Schedule,
    ) -> io::Result<Written> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let gzip = name.ends_with(".gz");
        if std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
            let file = std::fs::OpenOptions::new().write(true).open(path)?;
            return self.write_file(file, gzip, plan, schedule).map(|(w, _)| w);
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let tmp = dir.join(format!(".{name}.tmp{}", std::process::id()));
        let written = std::fs::File::create(&tmp).and_then(|file| {
            let (w, file) = self.write_file(file, gzip, plan, schedule)?;
            file.sync_all().ok();
            Ok(w)
        });
        match written {
            Ok(w) => {
                std::fs::rename(&tmp, path)?;
                Ok(w)
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    /// The trace's JSON into `file` (gzipped with `gzip`), buffered; the file back once all is
    /// written.
    fn write_file(
        &self,
        file: std::fs::File,
        gzip: bool,
        plan: &Plan,
        schedule: &Schedule,
    ) -> io::Result<(Written, std::fs::File)> {
        let file = Counting::new(file);
        let (json_bytes, file) = if gzip {
            let gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
            let json = self.write_chrome_json(
                Counting::new(io::BufWriter::with_capacity(1 << 16, gz)),
                plan,
                schedule,
            )?;
            let gz = json.inner.into_inner().map_err(|e| e.into_error())?;
            (json.bytes, gz.finish()?)
        } else {
            let json = self.write_chrome_json(
                Counting::new(io::BufWriter::with_capacity(1 << 16, file)),
                plan,
                schedule,
            )?;
            let file = json.inner.into_inner().map_err(|e| e.into_error())?;
            (json.bytes, file)
        };
        let written = Written {
            json_bytes,
            file_bytes: file.bytes,
        };
        Ok((written, file.inner))
    }
}

/// What [`Trace::write_chrome_file`] wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    /// Bytes of the trace's JSON.
    pub json_bytes: u64,
    /// Bytes of the file: the JSON's, or its gzip's.
    pub file_bytes: u64,
}

/// A writer that counts the bytes through it.
struct Counting<W> {
    inner: W,
    bytes: u64,
}

impl<W> Counting<W> {
    fn new(inner: W) -> Self {
        Counting { inner, bytes: 0 }
    }
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
#[path = "chrome_tests.rs"]
mod tests;
