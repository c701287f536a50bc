//! PyTorch profiler (Kineto) Chrome traces: the GPU timeline of one rank, its steps, and each
//! kernel's class.
//!
//! A trace is the JSON that `torch.profiler.profile(...).export_chrome_trace(path)` writes
//! (optionally gzip'd: `.json.gz`), as libkineto's `ChromeTraceLogger` lays it out
//! (pytorch/kineto@002d99198b93aa6eed09014a7c8b4959eb545372:libkineto/src/output_json.cpp):
//! a top-level object whose `traceEvents` array holds complete events (`"ph": "X"`) with
//! `cat`, `name`, `pid`, `tid`, `ts` and `dur` (microseconds, floats with three decimals) and
//! `args`. This reader keeps:
//! - GPU activity: `cat` "kernel", "gpu_memcpy", "gpu_memset" (one [`Kernel`] each);
//! - step markers: `ProfilerStep#N`, which `torch.profiler.profile.step()` records as a CPU
//!   `user_annotation` (`cpu_op` in older PyTorch) and, where Kineto traces GPU user
//!   annotations, as a `gpu_user_annotation` on the GPU timeline;
//! - what links a kernel to the CPU: its `args` "External id" (the launching CPU op, whose name
//!   is the kernel's [`Kernel::op`]) and "correlation" (the runtime call that launched it, a
//!   `cuda_runtime`/`cuda_driver` event);
//! - `Optimizer.step#...` annotations (see the rules in [`classify`]) and the profiler's own
//!   window (`cat` "Trace").
//!
//! Everything else (CPU ops, Python events, flows, instant and metadata events) is read past.
//!
//! Times become integer nanoseconds relative to the trace start: the earliest of the profiler
//! window, the step markers and the GPU activities. Each `ts` is rounded to the nearest ns
//! first, and each end is `start_ns + dur_ns`, so sums of ns are exact.

mod breakdown;
pub mod classify;
mod raw;

pub use breakdown::{breakdown, class_totals, ClassTotal, StepBreakdown};

use raw::{IdKey, IfArray, IfObject, Loose, RawArgs, RawEvent, RawTrace};
use serde::Serialize;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Why a trace could not be read. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: cannot read: {source}", path = path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: starts like gzip but does not decompress: {source}", path = path.display())]
    Gzip {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not JSON: {source}", path = path.display())]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error(
        "{path}: not a Chrome trace: expected a top-level JSON object with a \"traceEvents\" \
         array; {found}",
        path = path.display()
    )]
    NotATrace { path: PathBuf, found: &'static str },
    #[error(
        "{path}: traceEvents[{index}] (cat \"{cat}\", name \"{name}\"): {what}",
        path = path.display()
    )]
    BadEvent {
        path: PathBuf,
        index: usize,
        cat: String,
        name: String,
        what: String,
    },
    #[error(
        "{path}: no GPU activity: no event with cat \"kernel\", \"gpu_memcpy\" or \"gpu_memset\" \
         (was the profiler run with ProfilerActivity.CUDA?)",
        path = path.display()
    )]
    NoGpuActivity { path: PathBuf },
    #[error("{path}: step {step} is out of range: the trace has {steps} step(s)", path = path.display())]
    StepOutOfRange {
        path: PathBuf,
        step: usize,
        steps: usize,
    },
    #[error("{path}: no trace files (*.json, *.json.gz) directly in this directory", path = path.display())]
    NoTraceFiles { path: PathBuf },
    #[error(
        "{path}: {first} and {second} both state distributedInfo.rank {rank}",
        path = path.display(), first = first.display(), second = second.display()
    )]
    DuplicateRank {
        path: PathBuf,
        first: PathBuf,
        second: PathBuf,
        rank: u32,
    },
}

/// What a GPU activity is, for the step breakdown. The declaration order is the breakdown's
/// priority: compute classes first, then communication, then copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelClass {
    Gemm,
    Attention,
    Optimizer,
    Norm,
    /// Memory-bound kernels: elementwise, casts and copies, reductions, softmax, concatenation,
    /// gathers, fills.
    Elementwise,
    /// A kernel no rule recognises: counted as compute.
    Other,
    /// NCCL collectives (all-reduce, all-gather, reduce-scatter, all-to-all, broadcast, ...).
    Collective,
    /// NCCL point-to-point (send, recv, send/recv).
    P2p,
    Memcpy,
    Memset,
}

impl KernelClass {
    /// Every class, in priority order.
    pub const ALL: [KernelClass; 10] = [
        KernelClass::Gemm,
        KernelClass::Attention,
        KernelClass::Optimizer,
        KernelClass::Norm,
        KernelClass::Elementwise,
        KernelClass::Other,
        KernelClass::Collective,
        KernelClass::P2p,
        KernelClass::Memcpy,
        KernelClass::Memset,
    ];

    pub fn is_compute(self) -> bool {
        !self.is_comm() && !matches!(self, KernelClass::Memcpy | KernelClass::Memset)
    }

    pub fn is_comm(self) -> bool {
        matches!(self, KernelClass::Collective | KernelClass::P2p)
    }

    pub fn name(self) -> &'static str {
        match self {
            KernelClass::Gemm => "gemm",
            KernelClass::Attention => "attention",
            KernelClass::Optimizer => "optimizer",
            KernelClass::Norm => "norm",
            KernelClass::Elementwise => "elementwise",
            KernelClass::Other => "other",
            KernelClass::Collective => "collective",
            KernelClass::P2p => "p2p",
            KernelClass::Memcpy => "memcpy",
            KernelClass::Memset => "memset",
        }
    }
}

impl fmt::Display for KernelClass {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which communication a NCCL kernel did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveKind {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Broadcast,
    Reduce,
    Gather,
    Scatter,
    Barrier,
    Send,
    Recv,
    SendRecv,
    Other,
}

impl CollectiveKind {
    pub fn is_p2p(self) -> bool {
        matches!(
            self,
            CollectiveKind::Send | CollectiveKind::Recv | CollectiveKind::SendRecv
        )
    }
}

/// What a NCCL kernel moved, as far as the trace says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CollectiveInfo {
    pub kind: CollectiveKind,
    /// The input message: "In msg nelems" × the size of "dtype". `None` where the trace does
    /// not record them (older PyTorch, or a kernel known only by its name).
    pub bytes: Option<u64>,
    /// The output message: "Out msg nelems" × the size of "dtype" (for an all-gather, the
    /// gathered tensor; for a reduce-scatter, this rank's shard).
    pub out_bytes: Option<u64>,
    /// "Group size": the ranks in the process group.
    pub group_size: Option<u32>,
    /// "dtype" as recorded ("Float", "BFloat16"), else the type in the kernel name ("f32").
    pub dtype: Option<String>,
}

/// One GPU activity: a kernel, memcpy or memset.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Kernel {
    pub name: String,
    /// The CUDA stream ("stream" in args, else the event's tid).
    pub stream: i64,
    /// The device ("device" in args, else the event's pid).
    pub device: i64,
    pub start_ns: u64,
    pub dur_ns: u64,
    pub class: KernelClass,
    pub collective: Option<CollectiveInfo>,
    /// The CPU op that launched it (by "External id"), e.g. `aten::mm`.
    pub op: Option<String>,
    /// That op's "External id": the kernels one op call launched share it.
    pub op_id: Option<u64>,
    /// Bytes a memcpy or memset moved ("bytes" in args).
    pub bytes: Option<u64>,
    /// The launching op's input shapes ("Input Dims", recorded with `record_shapes=True`), one
    /// list per input, empty for a non-tensor input or one the trace does not give as
    /// non-negative integers; empty when unrecorded. For `aten::mm`: `[[m, k], [k, n]]`.
    pub op_input_dims: Vec<Vec<u64>>,
    /// The launching op's input types ("Input type": `c10::BFloat16`, `float`, `""`), where
    /// recorded.
    pub op_input_types: Vec<String>,
}

impl Kernel {
    pub fn end_ns(&self) -> u64 {
        self.start_ns.saturating_add(self.dur_ns)
    }
}

/// A stretch of the GPU timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Span {
    /// `ProfilerStep#N`, or `"trace"` when the trace marks no steps.
    pub name: String,
    pub start_ns: u64,
    pub dur_ns: u64,
}

impl Span {
    pub fn end_ns(&self) -> u64 {
        self.start_ns.saturating_add(self.dur_ns)
    }
}

/// Where the step spans came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepSource {
    /// `ProfilerStep#N` annotations on the GPU timeline (`gpu_user_annotation`).
    GpuAnnotation,
    /// `ProfilerStep#N` CPU annotations: a step's span runs from the first start to the last
    /// end of the GPU activities launched (by their runtime call, else their op) inside it.
    CpuAnnotation,
    /// No step markers: one step, from the first GPU activity's start to the last one's end.
    WholeTrace,
}

/// One rank's GPU timeline.
#[derive(Debug, Clone, Serialize)]
pub struct RankTrace {
    /// The file it was read from (error messages name it).
    pub path: PathBuf,
    /// `distributedInfo.rank`, where the trace states it.
    pub rank: Option<u32>,
    /// `distributedInfo.world_size`, where the trace states it.
    pub world_size: Option<u32>,
    /// The trace start in the file's own clock (its `ts`, in ns): add it to any `*_ns` here to
    /// get the file's time back.
    pub origin_ns: i64,
    /// The profiler's own window (the `cat` "Trace" event), where present.
    pub window: Option<Span>,
    pub step_source: StepSource,
    /// The steps, in time order.
    pub steps: Vec<Span>,
    /// GPU activity, by start time (then stream).
    pub kernels: Vec<Kernel>,
}

/// Reads one trace file (`.json`, or gzip'd JSON whatever its name: gzip is told by its magic
/// bytes).
pub fn read_trace(path: &Path) -> Result<RankTrace, TraceError> {
    let bytes = std::fs::read(path).map_err(|source| TraceError::Io {
        path: path.to_owned(),
        source,
    })?;
    parse_trace(path, &bytes)
}

/// The trace of `rank` among `traces` (as [`read_traces`] orders them): the one that states
/// that rank; where none states a rank, the `rank`-th.
pub fn trace_of_rank(traces: &[RankTrace], rank: u32) -> Option<&RankTrace> {
    traces.iter().find(|t| t.rank == Some(rank)).or_else(|| {
        traces
            .iter()
            .all(|t| t.rank.is_none())
            .then(|| traces.get(rank as usize))
            .flatten()
    })
}

/// Reads a trace file, or a directory of them, one per rank. In a directory the traces are the
/// files directly in it named `*.trace.json` or `*.trace.json.gz` (what PyTorch's
/// `tensorboard_trace_handler` writes: `<worker>.<ts>.pt.trace.json`), or, where none is so
/// named, every `*.json` and `*.json.gz`. They come in rank order when each states
/// `distributedInfo.rank` (two stating the same rank is an error), else in file name order.
pub fn read_traces(path: &Path) -> Result<Vec<RankTrace>, TraceError> {
    let io = |source| TraceError::Io {
        path: path.to_owned(),
        source,
    };
    if !path.is_dir() {
        return Ok(vec![read_trace(path)?]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name().to_string_lossy().to_ascii_lowercase();
        let is_trace = name.ends_with(".json") || name.ends_with(".json.gz");
        if is_trace && entry.path().is_file() {
            files.push(entry.path());
        }
    }
    let named_trace = |f: &PathBuf| {
        let name = f
            .file_name()
            .map(|n| n.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        name.ends_with(".trace.json") || name.ends_with(".trace.json.gz")
    };
    if files.iter().any(named_trace) {
        files.retain(named_trace);
    }
    if files.is_empty() {
        return Err(TraceError::NoTraceFiles {
            path: path.to_owned(),
        });
    }
    files.sort();
    let mut traces = files
        .iter()
        .map(|f| read_trace(f))
        .collect::<Result<Vec<_>, _>>()?;
    if traces.iter().all(|t| t.rank.is_some()) {
        traces.sort_by_key(|t| t.rank);
        for pair in traces.windows(2) {
            if let [a, b] = pair {
                if let (Some(rank), true) = (a.rank, a.rank == b.rank) {
                    return Err(TraceError::DuplicateRank {
                        path: path.to_owned(),
                        first: a.path.clone(),
                        second: b.path.clone(),
                        rank,
                    });
                }
            }
        }
    }
    Ok(traces)
}

/// Decompressed traces larger than this are refused (a gzip bomb would otherwise take all
/// memory): 16 GiB, far above any real trace.
const MAX_JSON_BYTES: u64 = 16 << 30;

/// Reads a trace from bytes (`path` names it in errors). JSON or gzip'd JSON.
pub fn parse_trace(path: &Path, bytes: &[u8]) -> Result<RankTrace, TraceError> {
    let json = crate::gunzip_if_gzip(bytes, MAX_JSON_BYTES).map_err(|source| TraceError::Gzip {
        path: path.to_owned(),
        source,
    })?;
    let json: &[u8] = &json;
    let top: IfObject<RawTrace> =
        serde_json::from_slice(json).map_err(|source| TraceError::Json {
            path: path.to_owned(),
            source,
        })?;
    let not_a_trace = |found| TraceError::NotATrace {
        path: path.to_owned(),
        found,
    };
    let raw = top
        .0
        .ok_or_else(|| not_a_trace("the top level is not an object"))?;
    let events = match raw.trace_events {
        IfArray::Items(events) => events,
        IfArray::Missing => return Err(not_a_trace("it has no \"traceEvents\"")),
        IfArray::NotArray => return Err(not_a_trace("its \"traceEvents\" is not an array")),
    };
    let dist = raw.distributed_info.0.unwrap_or_default();
    build(path, &events, dist.rank.as_u32(), dist.world_size.as_u32())
}

/// A GPU activity before times are made relative and before linking.
struct Gpu<'e, 'a> {
    ev: &'e RawEvent<'a>,
    args: Option<&'e RawArgs<'a>>,
    cat: &'e str,
    name: &'e str,
    start: i64,
    dur: u64,
}

/// A CPU op, for linking kernels to it.
struct CpuOp<'e, 'a> {
    name: &'e str,
    thread: (IdKey, IdKey),
    ts: Option<i64>,
    args: Option<&'e RawArgs<'a>>,
}

struct Marker {
    name: String,
    start: i64,
    dur: u64,
}

/// Microseconds (a JSON number) to integer ns, if finite and within ±2^62 ns (±146 years).
#[allow(clippy::cast_possible_truncation)]
fn us_to_ns(us: f64) -> Option<i64> {
    const LIMIT: f64 = 4.611_686_018_427_388e18; // 2^62
    let ns = (us * 1000.0).round();
    (ns.is_finite() && ns.abs() <= LIMIT).then_some(ns as i64)
}

fn build(
    path: &Path,
    events: &[IfObject<RawEvent<'_>>],
    rank: Option<u32>,
    world_size: Option<u32>,
) -> Result<RankTrace, TraceError> {
    let mut gpus: Vec<Gpu> = Vec::new();
    let mut gpu_steps: Vec<Marker> = Vec::new();
    let mut cpu_steps: Vec<(Marker, (IdKey, IdKey))> = Vec::new();
    let mut optimizer_steps: Vec<(i64, i64, (IdKey, IdKey))> = Vec::new();
    let mut ops: HashMap<u64, CpuOp> = HashMap::new();
    let mut launches: HashMap<u64, i64> = HashMap::new();
    let mut window: Option<Marker> = None;

    for (index, ev) in events.iter().enumerate() {
        let Some(ev) = ev.0.as_ref() else { continue };
        if ev.ph.as_str() != Some("X") {
            continue;
        }
        let Some(cat) = ev.cat.as_str() else { continue };
        let name = ev.name.as_str();
        let args = ev.args.0.as_ref();
        let bad = |what: String| TraceError::BadEvent {
            path: path.to_owned(),
            index,
            cat: cat.to_owned(),
            name: name.unwrap_or("").chars().take(120).collect(),
            what,
        };
        // The start and duration of an event this reader needs; an error if they are unusable.
        let timing = || -> Result<(i64, u64), TraceError> {
            let ts = ev.ts.as_f64().ok_or_else(|| {
                bad(format!(
                    "\"ts\" is {}, expected a number of µs",
                    ev.ts.describe()
                ))
            })?;
            let start =
                us_to_ns(ts).ok_or_else(|| bad(format!("\"ts\" {ts} µs is not a usable time")))?;
            let dur = ev.dur.as_f64().ok_or_else(|| {
                bad(format!(
                    "\"dur\" is {}, expected a number of µs",
                    ev.dur.describe()
                ))
            })?;
            let dur_ns = us_to_ns(dur)
                .and_then(|d| u64::try_from(d).ok())
                .ok_or_else(|| {
                    bad(format!(
                        "\"dur\" {dur} µs is not a usable duration (negative, or too large)"
                    ))
                })?;
            Ok((start, dur_ns))
        };
        let thread = || (ev.pid.id_key(), ev.tid.id_key());
        match cat {
            "kernel" | "gpu_memcpy" | "gpu_memset" => {
                let name = name.ok_or_else(|| {
                    bad(format!(
                        "\"name\" is {}, expected a string",
                        ev.name.describe()
                    ))
                })?;
                let (start, dur) = timing()?;
                gpus.push(Gpu {
                    ev,
                    args,
                    cat,
                    name,
                    start,
                    dur,
                });
            }
            "gpu_user_annotation" => {
                if let Some(n) = name.filter(|n| n.starts_with("ProfilerStep#")) {
                    let (start, dur) = timing()?;
                    gpu_steps.push(Marker {
                        name: n.to_owned(),
                        start,
                        dur,
                    });
                }
            }
            "user_annotation" | "cpu_op" => {
                if let Some(n) = name.filter(|n| n.starts_with("ProfilerStep#")) {
                    let (start, dur) = timing()?;
                    cpu_steps.push((
                        Marker {
                            name: n.to_owned(),
                            start,
                            dur,
                        },
                        thread(),
                    ));
                } else if name.is_some_and(|n| n.starts_with("Optimizer.step#")) {
                    let (start, dur) = timing()?;
                    let end = start.saturating_add(i64::try_from(dur).unwrap_or(i64::MAX));
                    optimizer_steps.push((start, end, thread()));
                }
                let id = args.and_then(|a| a.external_id.as_u64());
                if let (Some(id), Some(n)) = (id, name) {
                    ops.entry(id).or_insert(CpuOp {
                        name: n,
                        thread: thread(),
                        ts: ev.ts.as_f64().and_then(us_to_ns),
                        args,
                    });
                }
            }
            "cuda_runtime" | "cuda_driver" => {
                let corr = args.and_then(|a| a.correlation.as_u64());
                if let (Some(corr), Some(ts)) = (corr, ev.ts.as_f64().and_then(us_to_ns)) {
                    launches.entry(corr).or_insert(ts);
                }
            }
            "Trace" if window.is_none() => {
                if let Ok((start, dur)) = timing() {
                    window = Some(Marker {
                        name: name.unwrap_or("trace").to_owned(),
                        start,
                        dur,
                    });
                }
            }
            _ => {}
        }
    }

    if gpus.is_empty() {
        return Err(TraceError::NoGpuActivity {
            path: path.to_owned(),
        });
    }

    // Link, classify, and find each activity's launch time.
    let mut kernels = Vec::with_capacity(gpus.len());
    let mut launch_times = Vec::with_capacity(gpus.len());
    for g in &gpus {
        // Kineto before 2024 wrote a kernel with no linked CPU op with its own correlation id
        // as "External id" (today's output_json.cpp leaves the key out instead): such an id
        // names no op, and must not be looked up among the ops' ids.
        let op_id = g
            .args
            .filter(|a| a.external_id.as_u64() != a.correlation.as_u64())
            .and_then(|a| a.external_id.as_u64())
            .filter(|id| ops.contains_key(id));
        let op = op_id.and_then(|id| ops.get(&id));
        let launch = g
            .args
            .and_then(|a| a.correlation.as_u64())
            .and_then(|c| launches.get(&c).copied())
            .or_else(|| op.and_then(|o| o.ts));
        let in_optimizer_step = op.is_some_and(|o| {
            o.ts.is_some_and(|ts| {
                optimizer_steps
                    .iter()
                    .any(|(s, e, th)| *th == o.thread && *s <= ts && ts <= *e)
            })
        });
        let comm = comm_args(g.args, op.and_then(|o| o.args));
        let (class, collective) = classify::classify(&classify::Evidence {
            cat: g.cat,
            name: g.name,
            op: op.map(|o| o.name),
            in_optimizer_step,
            comm,
        });
        let int = |l: &Loose, fallback: &Loose| -> i64 {
            match (l, fallback) {
                (Loose::Int(v), _) | (Loose::Missing | Loose::Other, Loose::Int(v)) => *v,
                _ => l
                    .as_u64()
                    .or_else(|| fallback.as_u64())
                    .and_then(|v| i64::try_from(v).ok())
                    .unwrap_or(0),
            }
        };
        let missing = Loose::Missing;
        let (stream_arg, device_arg) = g
            .args
            .map_or((&missing, &missing), |a| (&a.stream, &a.device));
        kernels.push(Kernel {
            name: g.name.to_owned(),
            stream: int(stream_arg, &g.ev.tid),
            device: int(device_arg, &g.ev.pid),
            start_ns: 0,
            dur_ns: g.dur,
            class,
            collective,
            op: op.map(|o| o.name.to_owned()),
            op_id,
            bytes: g
                .args
                .and_then(|a| a.bytes.as_u64())
                .filter(|_| g.cat != "kernel"),
            op_input_dims: op.and_then(|o| o.args).map_or_else(Vec::new, input_dims),
            op_input_types: op.and_then(|o| o.args).map_or_else(Vec::new, input_types),
        });
        launch_times.push(launch);
    }

    // Steps, in the file's clock.
    let (step_source, mut step_markers) = if !gpu_steps.is_empty() {
        (StepSource::GpuAnnotation, merge_same_name(gpu_steps))
    } else {
        let from_cpu = cpu_step_spans(&cpu_steps, &gpus, &launch_times);
        if from_cpu.is_empty() {
            (StepSource::WholeTrace, Vec::new())
        } else {
            (StepSource::CpuAnnotation, from_cpu)
        }
    };
    if step_source == StepSource::WholeTrace {
        let start = gpus.iter().map(|g| g.start).min().unwrap_or(0);
        let end = gpus
            .iter()
            .map(|g| {
                g.start
                    .saturating_add(i64::try_from(g.dur).unwrap_or(i64::MAX))
            })
            .max()
            .unwrap_or(start);
        step_markers.push(Marker {
            name: "trace".to_owned(),
            start,
            dur: u64::try_from(end.saturating_sub(start)).unwrap_or(0),
        });
    }
    step_markers.sort_by_key(|m| m.start);

    // The origin, and everything relative to it.
    let origin = gpus
        .iter()
        .map(|g| g.start)
        .chain(step_markers.iter().map(|m| m.start))
        .chain(window.iter().map(|w| w.start))
        .min()
        .unwrap_or(0);
    let rel = |t: i64| -> u64 { u64::try_from(i128::from(t) - i128::from(origin)).unwrap_or(0) };
    for (k, g) in kernels.iter_mut().zip(&gpus) {
        k.start_ns = rel(g.start);
    }
    kernels.sort_by(|a, b| {
        (a.start_ns, a.stream, a.end_ns()).cmp(&(b.start_ns, b.stream, b.end_ns()))
    });
    let span = |m: Marker| Span {
        name: m.name,
        start_ns: rel(m.start),
        dur_ns: m.dur,
    };
    Ok(RankTrace {
        path: path.to_owned(),
        rank,
        world_size,
        origin_ns: origin,
        window: window.map(span),
        step_source,
        steps: step_markers.into_iter().map(span).collect(),
        kernels,
    })
}

/// The collective metadata of a kernel: its own args where they name a collective, else its
/// launching op's (`record_param_comms` carries the same keys).
fn comm_args<'e>(
    kernel: Option<&'e RawArgs<'_>>,
    op: Option<&'e RawArgs<'_>>,
) -> classify::CommArgs<'e> {
    let named = |a: &&RawArgs| a.collective_name.as_str().is_some();
    let Some(a) = kernel.filter(named).or_else(|| op.filter(named)) else {
        return classify::CommArgs::default();
    };
    classify::CommArgs {
        collective_name: a.collective_name.as_str(),
        in_msg_nelems: a.in_msg_nelems.as_u64(),
        out_msg_nelems: a.out_msg_nelems.as_u64(),
        group_size: a.group_size.as_u32(),
        dtype: a.dtype.as_str(),
    }
}

fn input_dims(a: &RawArgs) -> Vec<Vec<u64>> {
    let IfArray::Items(inputs) = &a.input_dims else {
        return Vec::new();
    };
    inputs
        .iter()
        .map(|dims| match dims {
            IfArray::Items(d) => d
                .iter()
                .map(Loose::as_u64)
                .collect::<Option<Vec<u64>>>()
                .unwrap_or_default(),
            _ => Vec::new(),
        })
        .collect()
}

fn input_types(a: &RawArgs) -> Vec<String> {
    let IfArray::Items(types) = &a.input_type else {
        return Vec::new();
    };
    types
        .iter()
        .map(|t| t.as_str().unwrap_or("").to_owned())
        .collect()
}

/// GPU annotations of one step may come once per stream: one span per name, from the first
/// start to the last end.
fn merge_same_name(markers: Vec<Marker>) -> Vec<Marker> {
    let mut by_name: Vec<(String, i64, i64)> = Vec::new();
    for m in markers {
        let end = m
            .start
            .saturating_add(i64::try_from(m.dur).unwrap_or(i64::MAX));
        if let Some(e) = by_name.iter_mut().find(|e| e.0 == m.name) {
            e.1 = e.1.min(m.start);
            e.2 = e.2.max(end);
        } else {
            by_name.push((m.name, m.start, end));
        }
    }
    by_name
        .into_iter()
        .map(|(name, start, end)| Marker {
            name,
            start,
            dur: u64::try_from(end.saturating_sub(start)).unwrap_or(0),
        })
        .collect()
}

/// Each CPU step's GPU span: the activities launched inside it, first start to last end.
/// A CPU step that launched nothing is dropped.
fn cpu_step_spans(
    cpu_steps: &[(Marker, (IdKey, IdKey))],
    gpus: &[Gpu],
    launch_times: &[Option<i64>],
) -> Vec<Marker> {
    let mut out = Vec::new();
    for (m, _) in cpu_steps {
        let end = m
            .start
            .saturating_add(i64::try_from(m.dur).unwrap_or(i64::MAX));
        let mut span: Option<(i64, i64)> = None;
        for (g, launch) in gpus.iter().zip(launch_times) {
            let Some(t) = launch else { continue };
            if *t < m.start || *t > end {
                continue;
            }
            let g_end = g
                .start
                .saturating_add(i64::try_from(g.dur).unwrap_or(i64::MAX));
            span = Some(span.map_or((g.start, g_end), |(s, e)| (s.min(g.start), e.max(g_end))));
        }
        if let Some((s, e)) = span {
            out.push(Marker {
                name: m.name.clone(),
                start: s,
                dur: u64::try_from(e.saturating_sub(s)).unwrap_or(0),
            });
        }
    }
    out
}
