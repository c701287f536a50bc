//! CUDA caching-allocator memory snapshots.
//!
//! Reads the pickle that `torch.cuda.memory._snapshot()` returns and `_dump_snapshot` writes
//! (plain, or gzip'd: detected by the magic bytes `1f 8b`). The format is the `Snapshot`,
//! `Segment`, `Block`, `Frame` and `TraceEntry` typed dicts in the `_snapshot` docstring,
//! pytorch/pytorch@00b65a04a2d30e498eedcb1e3476abd547f428f1:torch/cuda/memory.py, filled in by
//! torch/csrc/cuda/memory_snapshot.cpp. The pickle holds plain dicts, lists, tuples, ints and
//! strings. It is decoded by this crate's own small decoder of plain-data pickles ([`pickle`]
//! says why not serde-pickle's `value_from_slice`, which fails on real snapshots) and walked
//! field by field; every field is checked (a missing or mistyped one is an error naming the
//! file and the field's path). Values built with serde-pickle's [`serde_pickle::Value`] can be
//! read with [`snapshot_from_value`].
//!
//! # What the replay does
//!
//! `segments` is the allocator's state when the snapshot was taken ("the end"); `device_traces`
//! holds, per device, the last events the allocator recorded ("the window", which may start
//! part-way through the job when `max_entries` dropped older events). Per device:
//!
//! - End state: reserved = the sum of the segments' `total_size`; allocated = the sum of the
//!   `size` of the blocks whose state is `active_allocated`. Those blocks are the live set at
//!   the end. (`allocated_size` of the segments, summed, is kept apart as
//!   [`DeviceMemory::segments_allocated_bytes`] to check against.)
//! - Allocated bytes follow `torch.cuda.memory_allocated()`: the caching allocator raises its
//!   `allocated_bytes` stat by the block's size in `malloc` (trace `alloc`) and lowers it in
//!   `free` (trace `free_requested`); `free_completed` (the block becoming reusable, possibly
//!   later when other streams used it) leaves it unchanged. A trace entry's `size` is the
//!   size the program requested (in the fixture, 4-byte requests sit in 512-byte blocks), so
//!   a block's size is [`block_size`] of it, or, for a block still live at the end, the
//!   segment's own block size. The legacy action `free` counts as a `free_requested`.
//! - Reserved bytes rise on `segment_alloc` and `segment_map` and fall on `segment_free` and
//!   `segment_unmap`, by the entry's `size`.
//! - Start state (just before the window's first event): a forward pass pairs each
//!   `free_requested` with the latest unmatched `alloc` of the same address. The blocks live
//!   at the start are the end's live blocks that no `alloc` in the window produced, plus the
//!   blocks whose `free_requested` in the window has no `alloc` before it (allocated before the
//!   window; their size is [`block_size`] of the free entry's). Start allocated is their sum; start reserved is
//!   end reserved minus the net of the window's segment events.
//! - If `allocator_settings.roundup_power2_divisions` asks for power-of-two rounding,
//!   [`block_size`] underestimates blocks; a warning says so.
//! - Then the events are replayed forward from the start: one [`MemoryPoint`] for the start and
//!   one per event. The peak is the first point with the highest allocated bytes; the blocks
//!   live there are listed with their allocation frames. The replay's last point must equal the
//!   end state; where it does not (or an `alloc` reuses a live address, or a block allocated
//!   in the window is neither freed nor live at the end) a warning says so in
//!   [`DeviceMemory::warnings`].
//!
//! # Categories
//!
//! Each block live at the peak gets a [`MemoryCategory`] from its allocation frames ("A"), the
//! frames of its `free_requested` ("F", when freed in the window) and its lifetime. The frame
//! tests:
//! - optimizer: a frame whose file path contains `torch/optim/`;
//! - backward: a C++ frame of the autograd engine (`autograd::Engine`, `AccumulateGrad`), or a
//!   Python frame `backward`/`_make_grads`/`_engine_run_backward` in `torch/autograd/` or
//!   `torch/_tensor.py`;
//! - construction: a Python frame named `__init__`, `reset_parameters`, `_init_weights`,
//!   `init_weights`, `_apply`, `to_empty`, `from_pretrained`, `load_state_dict` or
//!   `_load_from_state_dict`, or any frame in `torch/nn/parameter.py` or `torch/nn/init.py`;
//! - zero_grad: a Python frame named `zero_grad`.
//!
//! "Long-lived" means allocated before the window or still live at its end. The rules, first
//! match wins:
//! 1. A optimizer: long-lived → `OptimizerState`, else `Temporaries`.
//! 2. A backward: freed in the window with F backward (an intermediate or a gradient summed
//!    into `.grad` by `AccumulateGrad`) → `Temporaries`; otherwise (it outlived the backward
//!    pass: freed by `zero_grad`, the optimizer or Python, or live at the end) → `Gradients`.
//! 3. A construction and live at the end → `Weights`.
//! 4. Allocated before the window and freed in it (no allocation frames known): F zero_grad →
//!    `Gradients`; F backward → `Activations`; else `Unknown`.
//! 5. Allocated in the window, freed with F backward (kept for the backward pass) →
//!    `Activations`; freed otherwise → `Temporaries`.
//! 6. Anything else (long-lived with no telling frames) → `Unknown`.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_pickle::Value;

pub mod pickle;
use pickle::{Arena, ObjKind, Val};

/// The most bytes a gzip'd snapshot may decompress to (a guard against gzip bombs).
pub const MAX_DECOMPRESSED_BYTES: u64 = 8 << 30;

/// Why a file is not a readable memory snapshot. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: gzip'd, but does not decompress: {source}")]
    Gzip {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: decompresses to more than {limit_bytes} bytes")]
    TooLarge { path: PathBuf, limit_bytes: u64 },
    #[error("{path}: not a pickle: {message}")]
    NotPickle { path: PathBuf, message: String },
    #[error("{path}: not a CUDA memory snapshot: expected {expected}")]
    NotSnapshot {
        path: PathBuf,
        expected: &'static str,
    },
    #[error("{path}: missing `{key}` at {at}")]
    Missing {
        path: PathBuf,
        at: String,
        key: &'static str,
    },
    #[error("{path}: {at}: expected {expected}, found {found}")]
    WrongType {
        path: PathBuf,
        at: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("{path}: {at}: {value} is out of range (expected {expected})")]
    OutOfRange {
        path: PathBuf,
        at: String,
        value: String,
        expected: &'static str,
    },
}

/// What the snapshot says about each device that has segments or trace entries.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// Ordered by device index.
    pub devices: Vec<DeviceMemory>,
}

/// One device's memory over the recorded window, its peak and its end state.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceMemory {
    pub device: u32,
    /// The start point (time of the first event) then one point per trace entry.
    pub timeline: Vec<MemoryPoint>,
    pub start_allocated_bytes: u64,
    pub start_reserved_bytes: u64,
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    /// When allocated bytes first reached the peak (the trace's `time_us` clock); `None` when
    /// the peak is the start state of the window or there is no trace.
    pub peak_time_us: Option<i64>,
    /// Index into `timeline` of the allocated peak.
    pub peak_index: usize,
    /// Blocks live at the allocated peak, largest first.
    pub at_peak: Vec<LiveBlock>,
    /// Bytes live at the peak by category, every category once in [`MemoryCategory::ALL`]
    /// order; they sum to `peak_allocated_bytes` when `warnings` is empty.
    pub by_category_at_peak: Vec<(MemoryCategory, u64)>,
    /// From `segments` (the end state).
    pub end_allocated_bytes: u64,
    pub end_reserved_bytes: u64,
    /// Sum of the segments' own `allocated_size` fields.
    pub segments_allocated_bytes: u64,
    /// The last point of the replay; equal to the `end_*` fields when the trace is consistent.
    pub replayed_end_allocated_bytes: u64,
    pub replayed_end_reserved_bytes: u64,
    /// Trace entries on this device, and the time span they cover.
    pub trace_events: usize,
    pub window_us: Option<(i64, i64)>,
    /// Inconsistencies met in the replay; empty for a consistent snapshot.
    pub warnings: Vec<String>,
}

/// Allocated and reserved bytes just after a trace entry (or at the window's start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryPoint {
    pub time_us: i64,
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
}

/// A block live at the peak.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveBlock {
    pub address: u64,
    /// The block's size, as the allocator counts it in `allocated_bytes`.
    pub size_bytes: u64,
    /// What the program asked for.
    pub requested_bytes: u64,
    /// `None` when allocated before the trace window.
    pub alloc_time_us: Option<i64>,
    /// `None` when still live at the end of the window.
    pub free_time_us: Option<i64>,
    pub category: MemoryCategory,
    /// Allocation stack (innermost first); empty when unknown.
    pub frames: Vec<Frame>,
}

/// One stack frame as the allocator recorded it (C++ frames have line 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub filename: String,
    pub line: i64,
    pub name: String,
}

/// What a block of memory holds, as far as its lifetime and stack frames tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemoryCategory {
    Weights,
    Gradients,
    OptimizerState,
    Activations,
    Temporaries,
    Unknown,
}

impl MemoryCategory {
    pub const ALL: [MemoryCategory; 6] = [
        MemoryCategory::Weights,
        MemoryCategory::Gradients,
        MemoryCategory::OptimizerState,
        MemoryCategory::Activations,
        MemoryCategory::Temporaries,
        MemoryCategory::Unknown,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MemoryCategory::Weights => "weights",
            MemoryCategory::Gradients => "gradients",
            MemoryCategory::OptimizerState => "optimizer_state",
            MemoryCategory::Activations => "activations",
            MemoryCategory::Temporaries => "temporaries",
            MemoryCategory::Unknown => "unknown",
        }
    }
}

/// Reads a snapshot pickle (plain or gzip'd) and replays its trace.
pub fn read_snapshot(path: &Path) -> Result<Snapshot, SnapshotError> {
    let bytes = std::fs::read(path).map_err(|source| SnapshotError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_snapshot(&bytes, path)
}

/// Like [`read_snapshot`], from bytes already read; `path` only names them in errors.
pub fn parse_snapshot(bytes: &[u8], path: &Path) -> Result<Snapshot, SnapshotError> {
    let decoded = if bytes.starts_with(&[0x1f, 0x8b]) {
        let raw = gunzip(bytes, path)?;
        pickle::decode(&raw)
    } else {
        pickle::decode(bytes)
    };
    let (arena, root) = decoded.map_err(|message| SnapshotError::NotPickle {
        path: path.to_path_buf(),
        message,
    })?;
    from_decoded(&arena, &root, path)
}

/// Builds the [`Snapshot`] from a [`serde_pickle::Value`] (for callers that unpickled it
/// themselves, and for tests); `path` names it in errors. It recurses over the value's nesting,
/// as the value's own `Drop` does; [`read_snapshot`] and [`parse_snapshot`] never recurse.
pub fn snapshot_from_value(value: &Value, path: &Path) -> Result<Snapshot, SnapshotError> {
    let mut arena = Arena::default();
    let root = from_serde(&mut arena, value);
    from_decoded(&arena, &root, path)
}

fn from_serde(arena: &mut Arena, v: &Value) -> Val {
    match v {
        Value::None => Val::None,
        Value::Bool(b) => Val::Bool(*b),
        Value::I64(i) => Val::Int(*i),
        Value::Int(_) => Val::BigInt,
        Value::F64(f) => Val::Float(*f),
        Value::Bytes(b) => Val::Bytes(b.as_slice().into()),
        Value::String(s) => Val::Str(s.as_str().into()),
        Value::List(l) => {
            let items = l.iter().map(|x| from_serde(arena, x)).collect();
            arena.push(ObjKind::List, items, Vec::new())
        }
        Value::Tuple(l) => {
            let items = l.iter().map(|x| from_serde(arena, x)).collect();
            arena.push(ObjKind::Tuple, items, Vec::new())
        }
        Value::Set(s) | Value::FrozenSet(s) => {
            let items = s
                .iter()
                .map(|x| from_serde(arena, &x.clone().into_value()))
                .collect();
            arena.push(ObjKind::Set, items, Vec::new())
        }
        Value::Dict(d) => {
            let entries = d
                .iter()
                .map(|(k, x)| {
                    (
                        from_serde(arena, &k.clone().into_value()),
                        from_serde(arena, x),
                    )
                })
                .collect();
            arena.push(ObjKind::Dict, Vec::new(), entries)
        }
    }
}

fn gunzip(bytes: &[u8], path: &Path) -> Result<Vec<u8>, SnapshotError> {
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(bytes)
        .take(MAX_DECOMPRESSED_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|source| SnapshotError::Gzip {
            path: path.to_path_buf(),
            source,
        })?;
    if out.len() as u64 > MAX_DECOMPRESSED_BYTES {
        return Err(SnapshotError::TooLarge {
            path: path.to_path_buf(),
            limit_bytes: MAX_DECOMPRESSED_BYTES,
        });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Walking the decoded pickle.

struct Ctx<'a> {
    path: &'a Path,
    arena: &'a Arena,
    /// Frames already read, by the arena index of their dict (frames are shared).
    frame_ids: HashMap<usize, u32>,
    frames: Vec<Frame>,
}

impl<'a> Ctx<'a> {
    fn wrong(&self, at: &str, expected: &'static str, v: &Val) -> SnapshotError {
        SnapshotError::WrongType {
            path: self.path.to_path_buf(),
            at: at.to_string(),
            expected,
            found: self.arena.kind(v),
        }
    }

    fn range(&self, at: &str, value: String, expected: &'static str) -> SnapshotError {
        SnapshotError::OutOfRange {
            path: self.path.to_path_buf(),
            at: at.to_string(),
            value,
            expected,
        }
    }

    fn missing(&self, at: &str, key: &'static str) -> SnapshotError {
        SnapshotError::Missing {
            path: self.path.to_path_buf(),
            at: at.to_string(),
            key,
        }
    }

    fn dict(&self, v: &Val, at: &str) -> Result<&'a [(Val, Val)], SnapshotError> {
        match self.arena.obj(v) {
            Some(o) if o.kind == ObjKind::Dict => Ok(&o.entries),
            _ => Err(self.wrong(at, "a dict", v)),
        }
    }

    fn list(&self, v: &Val, at: &str) -> Result<&'a [Val], SnapshotError> {
        match self.arena.obj(v) {
            Some(o) if matches!(o.kind, ObjKind::List | ObjKind::Tuple) => Ok(&o.items),
            _ => Err(self.wrong(at, "a list", v)),
        }
    }

    fn int(&self, v: &Val, at: &str) -> Result<i64, SnapshotError> {
        match v {
            Val::Int(i) => Ok(*i),
            Val::Bool(b) => Ok(i64::from(*b)),
            Val::BigInt => {
                Err(self.range(at, "an integer beyond 64 bits".into(), "a 64-bit integer"))
            }
            other => Err(self.wrong(at, "an integer", other)),
        }
    }

    fn uint(&self, v: &Val, at: &str) -> Result<u64, SnapshotError> {
        let i = self.int(v, at)?;
        u64::try_from(i).map_err(|_| self.range(at, i.to_string(), "a non-negative integer"))
    }

    fn string(&self, v: &Val, at: &str) -> Result<String, SnapshotError> {
        match v {
            Val::Str(s) => Ok(s.to_string()),
            Val::Bytes(b) => Ok(String::from_utf8_lossy(b).into_owned()),
            other => Err(self.wrong(at, "a string", other)),
        }
    }

    /// A field of a frame or name: absent or `None` reads as empty.
    fn opt_string(&self, v: Option<&Val>, at: &str) -> Result<String, SnapshotError> {
        match v {
            None | Some(Val::None) => Ok(String::new()),
            Some(v) => self.string(v, at),
        }
    }

    /// Reads a frames list into indices into `self.frames`.
    fn frame_list(&mut self, v: &Val, at: &str) -> Result<Vec<u32>, SnapshotError> {
        let list = self.list(v, at)?;
        let mut out = Vec::with_capacity(list.len());
        for (k, f) in list.iter().enumerate() {
            if let Val::Obj(id) = f {
                if let Some(&ix) = self.frame_ids.get(id) {
                    out.push(ix);
                    continue;
                }
            }
            let fat = format!("{at}[{k}]");
            let d = self.dict(f, &fat)?;
            let filename = self.opt_string(get(d, "filename"), &format!("{fat}.filename"))?;
            let name = self.opt_string(get(d, "name"), &format!("{fat}.name"))?;
            let line = match get(d, "line") {
                None | Some(Val::None) => 0,
                Some(v) => self.int(v, &format!("{fat}.line"))?,
            };
            let ix = u32::try_from(self.frames.len()).map_err(|_| {
                self.range(&fat, "too many frames".into(), "fewer than 2^32 frames")
            })?;
            self.frames.push(Frame {
                filename,
                line,
                name,
            });
            if let Val::Obj(id) = f {
                self.frame_ids.insert(*id, ix);
            }
            out.push(ix);
        }
        Ok(out)
    }
}

/// The value under the string (or bytes) key `key`; the last entry wins, as when Python
/// builds the dict.
fn get<'v>(entries: &'v [(Val, Val)], key: &str) -> Option<&'v Val> {
    entries.iter().rev().find_map(|(k, v)| match k {
        Val::Str(s) if s.as_ref() == key => Some(v),
        Val::Bytes(b) if b.as_ref() == key.as_bytes() => Some(v),
        _ => None,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentUp,
    SegmentDown,
    Other,
}

struct TraceEvent {
    action: Action,
    addr: u64,
    size: u64,
    time_us: i64,
    /// Indices into the frame table.
    frames: Vec<u32>,
}

struct EndBlock {
    size: u64,
    requested: u64,
    frames: Vec<u32>,
}

#[derive(Default)]
struct DeviceEnd {
    reserved: u64,
    allocated: u64,
    segments_allocated: u64,
    /// `active_allocated` blocks by address.
    live: BTreeMap<u64, EndBlock>,
    warnings: Vec<String>,
}

fn from_decoded(arena: &Arena, root: &Val, path: &Path) -> Result<Snapshot, SnapshotError> {
    let mut cx = Ctx {
        path,
        arena,
        frame_ids: HashMap::new(),
        frames: Vec::new(),
    };
    let top = match arena.obj(root) {
        Some(o) if o.kind == ObjKind::Dict => o.entries.as_slice(),
        _ => {
            return Err(SnapshotError::NotSnapshot {
                path: path.to_path_buf(),
                expected: "a dict with `segments` at the top level",
            })
        }
    };
    let segments = get(top, "segments").ok_or_else(|| cx.missing("the top level", "segments"))?;
    let segments = cx.list(segments, "segments")?;
    let mut ends: BTreeMap<u32, DeviceEnd> = BTreeMap::new();
    for (i, seg) in segments.iter().enumerate() {
        read_segment(&mut cx, seg, i, &mut ends)?;
    }

    let mut traces: BTreeMap<u32, Vec<TraceEvent>> = BTreeMap::new();
    if let Some(dt) = get(top, "device_traces") {
        let per_device = cx.list(dt, "device_traces")?;
        for (d, entries) in per_device.iter().enumerate() {
            let at = format!("device_traces[{d}]");
            let entries = cx.list(entries, &at)?;
            if entries.is_empty() {
                continue;
            }
            let device =
                u32::try_from(d).map_err(|_| cx.range(&at, d.to_string(), "a device index"))?;
            let mut events = Vec::with_capacity(entries.len());
            for (j, e) in entries.iter().enumerate() {
                events.push(read_event(&mut cx, e, &format!("{at}[{j}]"))?);
            }
            traces.insert(device, events);
        }
    }

    let rounding_warning = power2_rounding(arena, top).then(|| {
        "allocator_settings.roundup_power2_divisions is set: block sizes of freed blocks are \
         estimated with 512-byte rounding only"
            .to_string()
    });

    let mut devices: Vec<u32> = ends.keys().chain(traces.keys()).copied().collect();
    devices.sort_unstable();
    devices.dedup();
    let frames = cx.frames;
    let devices = devices
        .into_iter()
        .map(|d| {
            let mut end = ends.remove(&d).unwrap_or_default();
            end.warnings.extend(rounding_warning.clone());
            let events = traces.remove(&d).unwrap_or_default();
            replay(d, end, events, &frames)
        })
        .collect();
    Ok(Snapshot { devices })
}

/// Whether the snapshot's allocator settings round requests to power-of-two divisions (any
/// division count above 1); unreadable settings count as not.
fn power2_rounding(arena: &Arena, top: &[(Val, Val)]) -> bool {
    let settings = get(top, "allocator_settings").and_then(|v| arena.obj(v));
    let Some(settings) = settings.filter(|o| o.kind == ObjKind::Dict) else {
        return false;
    };
    match get(&settings.entries, "roundup_power2_divisions") {
        Some(Val::Int(n)) => *n > 1,
        Some(v) => arena
            .obj(v)
            .map(|o| {
                o.entries
                    .iter()
                    .map(|(_, x)| x)
                    .chain(o.items.iter())
                    .any(|x| matches!(x, Val::Int(n) if *n > 1))
            })
            .unwrap_or(false),
        None => false,
    }
}

fn read_segment(
    cx: &mut Ctx,
    seg: &Val,
    i: usize,
    ends: &mut BTreeMap<u32, DeviceEnd>,
) -> Result<(), SnapshotError> {
    let at = format!("segments[{i}]");
    let seg = cx.dict(seg, &at)?;
    let device_v = get(seg, "device").ok_or_else(|| cx.missing(&at, "device"))?;
    let device = cx.uint(device_v, &format!("{at}.device"))?;
    let device = u32::try_from(device).map_err(|_| {
        cx.range(
            &format!("{at}.device"),
            device.to_string(),
            "a device index",
        )
    })?;
    let total_v = get(seg, "total_size").ok_or_else(|| cx.missing(&at, "total_size"))?;
    let total = cx.uint(total_v, &format!("{at}.total_size"))?;
    let allocated = match get(seg, "allocated_size") {
        Some(v) => cx.uint(v, &format!("{at}.allocated_size"))?,
        None => 0,
    };
    let blocks = get(seg, "blocks").ok_or_else(|| cx.missing(&at, "blocks"))?;
    let blocks = cx.list(blocks, &format!("{at}.blocks"))?;
    let mut live = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let bat = format!("{at}.blocks[{j}]");
        let b = cx.dict(b, &bat)?;
        let state = get(b, "state").ok_or_else(|| cx.missing(&bat, "state"))?;
        let state = cx.string(state, &format!("{bat}.state"))?;
        if state != "active_allocated" {
            continue;
        }
        let size_v = get(b, "size").ok_or_else(|| cx.missing(&bat, "size"))?;
        let size = cx.uint(size_v, &format!("{bat}.size"))?;
        let addr_v = get(b, "address").ok_or_else(|| cx.missing(&bat, "address"))?;
        let addr = cx.uint(addr_v, &format!("{bat}.address"))?;
        let requested = match get(b, "requested_size") {
            Some(v) => cx.uint(v, &format!("{bat}.requested_size"))?,
            None => size,
        };
        let frames = match get(b, "frames") {
            Some(f) => cx.frame_list(f, &format!("{bat}.frames"))?,
            None => Vec::new(),
        };
        live.push((
            bat,
            addr,
            EndBlock {
                size,
                requested,
                frames,
            },
        ));
    }
    let end = ends.entry(device).or_default();
    end.reserved = end.reserved.saturating_add(total);
    end.segments_allocated = end.segments_allocated.saturating_add(allocated);
    for (bat, addr, block) in live {
        end.allocated = end.allocated.saturating_add(block.size);
        if end.live.insert(addr, block).is_some() {
            end.warnings
                .push(format!("{bat}: a second live block at address {addr:#x}"));
        }
    }
    Ok(())
}

fn read_event(cx: &mut Ctx, v: &Val, at: &str) -> Result<TraceEvent, SnapshotError> {
    let e = cx.dict(v, at)?;
    let action = get(e, "action").ok_or_else(|| cx.missing(at, "action"))?;
    let action = match cx.string(action, &format!("{at}.action"))?.as_str() {
        "alloc" => Action::Alloc,
        "free_requested" | "free" => Action::FreeRequested,
        "free_completed" => Action::FreeCompleted,
        "segment_alloc" | "segment_map" => Action::SegmentUp,
        "segment_free" | "segment_unmap" => Action::SegmentDown,
        _ => Action::Other,
    };
    let counts = action != Action::Other;
    // `addr` is absent for `oom`; an event that moves memory needs it and `size`.
    let addr = match get(e, "addr") {
        Some(v) if counts => cx.uint(v, &format!("{at}.addr"))?,
        None if counts => return Err(cx.missing(at, "addr")),
        _ => 0,
    };
    let size = match get(e, "size") {
        Some(v) if counts => cx.uint(v, &format!("{at}.size"))?,
        None if counts => return Err(cx.missing(at, "size")),
        _ => 0,
    };
    let time_us = match get(e, "time_us") {
        Some(v) => cx.int(v, &format!("{at}.time_us"))?,
        None => 0,
    };
    let frames = match get(e, "frames") {
        Some(f) if matches!(action, Action::Alloc | Action::FreeRequested) => {
            cx.frame_list(f, &format!("{at}.frames"))?
        }
        _ => Vec::new(),
    };
    Ok(TraceEvent {
        action,
        addr,
        size,
        time_us,
        frames,
    })
}

// ---------------------------------------------------------------------------------------------
// The replay.

/// A block live at some point of the window: allocated in it (`alloc` = event index) or
/// before it; freed in it (`free` = event index) or not.
struct Lifetime {
    addr: u64,
    /// The block's size: the segment's for a block live at the end, else [`block_size`] of
    /// the requested size.
    size: u64,
    requested: u64,
    alloc: Option<usize>,
    free: Option<usize>,
    /// Allocation frames of a block allocated before the window and live at its end.
    end_frames: Option<usize>,
}

fn replay(device: u32, end: DeviceEnd, events: Vec<TraceEvent>, frames: &[Frame]) -> DeviceMemory {
    let resolve = |ix: &[u32]| -> Vec<Frame> {
        ix.iter()
            .filter_map(|&i| frames.get(i as usize))
            .cloned()
            .collect()
    };
    let DeviceEnd {
        reserved: end_reserved,
        allocated: end_allocated,
        segments_allocated,
        live: end_live,
        mut warnings,
    } = end;

    // Pair frees with allocs.
    let mut blocks: Vec<Lifetime> = Vec::new();
    let mut open: BTreeMap<u64, usize> = BTreeMap::new(); // addr -> index in `blocks`
    let mut seg_net: i128 = 0;
    for (i, e) in events.iter().enumerate() {
        match e.action {
            Action::Alloc => {
                let b = blocks.len();
                blocks.push(Lifetime {
                    addr: e.addr,
                    size: block_size(e.size),
                    requested: e.size,
                    alloc: Some(i),
                    free: None,
                    end_frames: None,
                });
                if let Some(prev) = open.insert(e.addr, b) {
                    warnings.push(format!(
                        "trace entry {i}: alloc at {:#x}, which entry {} allocated and no entry freed",
                        e.addr,
                        blocks.get(prev).and_then(|p| p.alloc).unwrap_or(0)
                    ));
                }
            }
            Action::FreeRequested => match open.remove(&e.addr) {
                Some(b) => {
                    if let Some(blk) = blocks.get_mut(b) {
                        blk.free = Some(i);
                        if blk.requested != e.size {
                            warnings.push(format!(
                                "trace entry {i}: frees {} bytes at {:#x}, allocated as {}",
                                e.size, e.addr, blk.requested
                            ));
                        }
                    }
                }
                None => blocks.push(Lifetime {
                    addr: e.addr,
                    size: block_size(e.size),
                    requested: e.size,
                    alloc: None,
                    free: Some(i),
                    end_frames: None,
                }),
            },
            Action::SegmentUp => seg_net += i128::from(e.size),
            Action::SegmentDown => seg_net -= i128::from(e.size),
            Action::FreeCompleted | Action::Other => {}
        }
    }
    // Blocks allocated in the window and never freed must be live at the end.
    let open_addrs: BTreeMap<u64, usize> = open;
    for (addr, b) in &open_addrs {
        match (end_live.get(addr), blocks.get_mut(*b)) {
            (Some(eb), Some(blk)) => {
                // The segment knows the block's real size (the allocator may have kept a
                // remainder too small to split off); use it for the block's whole life.
                if eb.size < blk.size {
                    warnings.push(format!(
                        "block at {addr:#x} allocated in the trace for {} bytes is live at the end with only {}",
                        blk.requested, eb.size
                    ));
                }
                blk.size = eb.size;
            }
            _ => warnings.push(format!(
                "block at {addr:#x} allocated in the trace is neither freed nor live at the end"
            )),
        }
    }
    // End-live blocks the window did not allocate were live across the whole window.
    let end_list: Vec<(&u64, &EndBlock)> = end_live.iter().collect();
    for (k, (addr, eb)) in end_list.iter().enumerate() {
        if !open_addrs.contains_key(*addr) {
            blocks.push(Lifetime {
                addr: **addr,
                size: eb.size,
                requested: eb.requested,
                alloc: None,
                free: None,
                end_frames: Some(k),
            });
        }
    }

    let start_allocated: u128 = blocks
        .iter()
        .filter(|b| b.alloc.is_none())
        .map(|b| u128::from(b.size))
        .sum();
    let start_allocated = clamp_u64(start_allocated as i128);
    let start_reserved_wide = i128::from(end_reserved) - seg_net;
    if start_reserved_wide < 0 {
        warnings.push(format!(
            "the trace's segment events add {seg_net} bytes, more than the {end_reserved} reserved at the end"
        ));
    }
    let start_reserved = clamp_u64(start_reserved_wide);

    // Forward replay.
    let first_time = events.first().map(|e| e.time_us).unwrap_or(0);
    let mut timeline = Vec::with_capacity(events.len() + 1);
    timeline.push(MemoryPoint {
        time_us: first_time,
        allocated_bytes: start_allocated,
        reserved_bytes: start_reserved,
    });
    // Allocated bytes move by the block sizes, at each block's alloc and free_requested.
    let mut delta = vec![0i128; events.len()];
    for b in &blocks {
        if let Some(d) = b.alloc.and_then(|a| delta.get_mut(a)) {
            *d += i128::from(b.size);
        }
        if let Some(d) = b.free.and_then(|f| delta.get_mut(f)) {
            *d -= i128::from(b.size);
        }
    }
    let mut alloc_now = i128::from(start_allocated);
    let mut res_now = i128::from(start_reserved);
    let (mut peak_a, mut peak_i) = (start_allocated, 0usize);
    let mut peak_r = start_reserved;
    for (e, d) in events.iter().zip(&delta) {
        alloc_now += d;
        match e.action {
            Action::SegmentUp => res_now += i128::from(e.size),
            Action::SegmentDown => res_now -= i128::from(e.size),
            _ => {}
        }
        let p = MemoryPoint {
            time_us: e.time_us,
            allocated_bytes: clamp_u64(alloc_now),
            reserved_bytes: clamp_u64(res_now),
        };
        if p.allocated_bytes > peak_a {
            peak_a = p.allocated_bytes;
            peak_i = timeline.len();
        }
        peak_r = peak_r.max(p.reserved_bytes);
        timeline.push(p);
    }
    if alloc_now < 0 || res_now < 0 {
        warnings.push("the replay went below zero bytes".to_string());
    }
    let last = timeline.last().copied().unwrap_or(MemoryPoint {
        time_us: 0,
        allocated_bytes: 0,
        reserved_bytes: 0,
    });
    if last.allocated_bytes != end_allocated {
        warnings.push(format!(
            "the replay ends with {} bytes allocated, the segments hold {end_allocated}",
            last.allocated_bytes
        ));
    }
    if last.reserved_bytes != end_reserved {
        warnings.push(format!(
            "the replay ends with {} bytes reserved, the segments hold {end_reserved}",
            last.reserved_bytes
        ));
    }

    // Blocks live at the peak: timeline point `peak_i` is after event `peak_i - 1`.
    let after = peak_i.checked_sub(1); // None: the start state
    let live_at = |b: &Lifetime| {
        let allocated = match (b.alloc, after) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(a), Some(p)) => a <= p,
        };
        let freed = match (b.free, after) {
            (None, _) => false,
            (Some(_), None) => false,
            (Some(f), Some(p)) => f <= p,
        };
        allocated && !freed
    };
    let mut at_peak = Vec::new();
    for b in blocks.iter().filter(|b| live_at(b)) {
        let alloc_ix: &[u32] = match (b.alloc, b.end_frames) {
            (Some(a), _) => events.get(a).map(|e| e.frames.as_slice()).unwrap_or(&[]),
            (None, Some(k)) => end_list
                .get(k)
                .map(|(_, eb)| eb.frames.as_slice())
                .unwrap_or(&[]),
            (None, None) => &[],
        };
        let alloc_frames = resolve(alloc_ix);
        let free_frames = b
            .free
            .and_then(|f| events.get(f))
            .map(|e| resolve(&e.frames));
        let category = classify(&alloc_frames, free_frames.as_deref(), b.alloc.is_some());
        at_peak.push(LiveBlock {
            address: b.addr,
            size_bytes: b.size,
            requested_bytes: b.requested,
            alloc_time_us: b.alloc.and_then(|a| events.get(a)).map(|e| e.time_us),
            free_time_us: b.free.and_then(|f| events.get(f)).map(|e| e.time_us),
            category,
            frames: alloc_frames,
        });
    }
    at_peak.sort_by(|x, y| {
        y.size_bytes
            .cmp(&x.size_bytes)
            .then(x.address.cmp(&y.address))
    });
    let by_category_at_peak = MemoryCategory::ALL
        .iter()
        .map(|&c| {
            let sum = at_peak
                .iter()
                .filter(|b| b.category == c)
                .fold(0u64, |s, b| s.saturating_add(b.size_bytes));
            (c, sum)
        })
        .collect();

    DeviceMemory {
        device,
        peak_allocated_bytes: peak_a,
        peak_reserved_bytes: peak_r,
        peak_time_us: after.and_then(|p| events.get(p)).map(|e| e.time_us),
        peak_index: peak_i,
        at_peak,
        by_category_at_peak,
        start_allocated_bytes: start_allocated,
        start_reserved_bytes: start_reserved,
        end_allocated_bytes: end_allocated,
        end_reserved_bytes: end_reserved,
        segments_allocated_bytes: segments_allocated,
        replayed_end_allocated_bytes: last.allocated_bytes,
        replayed_end_reserved_bytes: last.reserved_bytes,
        trace_events: events.len(),
        window_us: match (events.first(), events.last()) {
            (Some(a), Some(b)) => Some((a.time_us, b.time_us)),
            _ => None,
        },
        timeline,
        warnings,
    }
}

/// The size of the block the caching allocator hands out for a request of `requested` bytes:
/// at least 512, rounded up to a multiple of 512 (`round_size` in
/// pytorch/pytorch@001074d25084fdb87a799823e395a50f5ec044d3:c10/cuda/CUDACachingAllocator.cpp,
/// `kMinBlockSize`). The trace records the requested size; `allocated_bytes` counts blocks.
/// Not modelled: `roundup_power2_divisions` (off by default), and a best-fit block that the
/// allocator does not split because the rest would be too small (up to 1 MiB more for
/// requests over 1 MiB). For blocks live at the end the segment's real size is used instead.
pub fn block_size(requested: u64) -> u64 {
    const MIN_BLOCK_BYTES: u64 = 512;
    if requested < MIN_BLOCK_BYTES {
        MIN_BLOCK_BYTES
    } else {
        requested
            .div_ceil(MIN_BLOCK_BYTES)
            .saturating_mul(MIN_BLOCK_BYTES)
    }
}

fn clamp_u64(v: i128) -> u64 {
    u64::try_from(v.max(0)).unwrap_or(u64::MAX)
}

// ---------------------------------------------------------------------------------------------
// Classification (the rules are in the module docs).

fn is_py(f: &Frame) -> bool {
    f.filename.ends_with(".py")
}

fn is_optimizer(frames: &[Frame]) -> bool {
    frames.iter().any(|f| f.filename.contains("torch/optim/"))
}

fn is_backward(frames: &[Frame]) -> bool {
    frames.iter().any(|f| {
        f.name.contains("autograd::Engine")
            || f.name.contains("AccumulateGrad")
            || (is_py(f)
                && (f.filename.contains("torch/autograd/")
                    || f.filename.ends_with("torch/_tensor.py"))
                && matches!(
                    f.name.as_str(),
                    "backward" | "_make_grads" | "_engine_run_backward"
                ))
    })
}

fn is_construction(frames: &[Frame]) -> bool {
    frames.iter().any(|f| {
        f.filename.ends_with("torch/nn/parameter.py")
            || f.filename.ends_with("torch/nn/init.py")
            || (is_py(f)
                && matches!(
                    f.name.as_str(),
                    "__init__"
                        | "reset_parameters"
                        | "_init_weights"
                        | "init_weights"
                        | "_apply"
                        | "to_empty"
                        | "from_pretrained"
                        | "load_state_dict"
                        | "_load_from_state_dict"
                ))
    })
}

fn is_zero_grad(frames: &[Frame]) -> bool {
    frames.iter().any(|f| is_py(f) && f.name == "zero_grad")
}

/// `alloc` frames of the block, `free` frames when it was freed in the window, and whether
/// it was allocated in the window.
fn classify(alloc: &[Frame], free: Option<&[Frame]>, allocated_in_window: bool) -> MemoryCategory {
    let long_lived = !allocated_in_window || free.is_none();
    if is_optimizer(alloc) {
        return if long_lived {
            MemoryCategory::OptimizerState
        } else {
            MemoryCategory::Temporaries
        };
    }
    if is_backward(alloc) {
        return match free {
            Some(f) if is_backward(f) => MemoryCategory::Temporaries,
            _ => MemoryCategory::Gradients,
        };
    }
    if free.is_none() && is_construction(alloc) {
        return MemoryCategory::Weights;
    }
    match (allocated_in_window, free) {
        (false, Some(f)) if is_zero_grad(f) => MemoryCategory::Gradients,
        (_, Some(f)) if is_backward(f) => MemoryCategory::Activations,
        (true, Some(_)) => MemoryCategory::Temporaries,
        _ => MemoryCategory::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn py(file: &str, name: &str) -> Frame {
        Frame {
            filename: file.to_string(),
            line: 1,
            name: name.to_string(),
        }
    }

    #[test]
    fn rules() {
        let optim = [py("/x/torch/optim/adam.py", "_init_group")];
        let engine = [Frame {
            filename: String::new(),
            line: 0,
            name: "torch::autograd::Engine::evaluate_function(...)".into(),
        }];
        let ctor = [py("/x/torch/nn/modules/linear.py", "__init__")];
        let fwd = [py("/x/torch/nn/modules/linear.py", "forward")];
        let zg = [py("/x/torch/optim/optimizer.py", "zero_grad")];
        use MemoryCategory::*;
        assert_eq!(classify(&optim, None, true), OptimizerState);
        assert_eq!(classify(&optim, Some(&fwd), true), Temporaries);
        assert_eq!(classify(&engine, Some(&zg), true), Gradients);
        assert_eq!(classify(&engine, Some(&engine), true), Temporaries);
        assert_eq!(classify(&engine, None, true), Gradients);
        assert_eq!(classify(&ctor, None, false), Weights);
        assert_eq!(classify(&fwd, Some(&engine), true), Activations);
        assert_eq!(classify(&fwd, Some(&fwd), true), Temporaries);
        assert_eq!(classify(&[], Some(&zg), false), Gradients);
        assert_eq!(classify(&fwd, None, false), Unknown);
    }
}
