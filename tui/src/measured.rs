//! Reads a measured step back for the Compare pane: a Chrome/Perfetto trace file as written by
//! `twin run --trace FILE` or `twin simulate --trace FILE` (see
//! [`twin_sim::trace::Trace::to_chrome_json`]), or a directory written by
//! `twin verify step --trace-dir DIR`, whose `predicted.trace.json` and `measured.trace.json` are
//! read the same way, and whose `verify.json` gives the bubble and exposed communication as
//! `twin verify` reported them. A PyTorch profiler (Kineto) trace, `.json` or `.json.gz`, or a
//! directory of one per rank, is read too ([`twin_measured::kineto`]): its last step's kernels
//! become the measured timeline, compute kernels on the compute stream, NCCL collectives on the
//! data-parallel one, point-to-point on the pipeline's.

use crate::timeline::{RawOp, Timeline};
use std::path::{Path, PathBuf};
use twin_sim::schedule::{MemCategory, Stream};
use twin_sim::trace::MemorySample;

#[derive(Debug, thiserror::Error)]
pub enum MeasuredError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a trace: {message}")]
    Format { path: PathBuf, message: String },
    #[error(
        "{path} is a directory without {file} (expected one written by `twin verify step --trace-dir`)"
    )]
    MissingFile { path: PathBuf, file: &'static str },
}

/// A measured step (and, from a verify directory, the prediction it was checked against).
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// File name shown in the pane (no directories, so frames do not depend on where it is).
    pub label: String,
    pub timeline: Timeline,
    /// `predicted.trace.json` of a verify directory, when the input was one.
    pub predicted: Option<Timeline>,
    /// The verify directory's `verify.json` figures, when it has them.
    pub figures: Option<VerifyFigures>,
    /// Allocated device bytes over the measured step from a CUDA memory snapshot
    /// (`twin tui --memory-snapshot`), as (fraction of the step, bytes) after each change; the
    /// Memory pane draws it over the predicted step's length.
    pub snapshot: Option<Vec<(f64, u64)>>,
}

/// Bubble and exposed communication as `twin verify` reported them, [predicted, measured]. On
/// cores shared by ranks the predicted trace shows compute stretched by the sharing, which a
/// count from the trace takes for busy time; the simulator's report counts that stretch as
/// waiting (twin-sim's `host_model::share`), as the runtime's measurement does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VerifyFigures {
    pub bubble_fraction: [f64; 2],
    pub exposed_comm_fraction: [f64; 2],
    /// Mean idle time per CPU core between its ops, [predicted, measured] seconds
    /// (`core_activity`: host profiles only; `None` without it or in older verify files).
    pub core_idle_between_ops_s: Option<[f64; 2]>,
    /// Collective calls of the step that met another group's call on a core, and all calls,
    /// [predicted, measured] (`collective_meetings`: host profiles only;
    /// `None` without it or in older verify files).
    pub collective_meetings: Option<[(u64, u64); 2]>,
}

impl VerifyFigures {
    /// The figures of a `verify.json` text; `None` when any is missing or not a number.
    pub fn parse(text: &str) -> Option<VerifyFigures> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        let f = |k: &str| v.get(k).and_then(|x| x.as_f64()).filter(|x| x.is_finite());
        let idle = |side: &str| {
            v.get("core_activity")?
                .get(side)?
                .get("idle_between_ops_s")?
                .as_f64()
                .filter(|x| x.is_finite())
        };
        let core_idle_between_ops_s = idle("predicted").zip(idle("measured")).map(|(p, m)| [p, m]);
        let meetings = |side: &str| {
            let m = v.get("collective_meetings")?.get(side)?;
            Some((m.get("meeting_calls")?.as_u64()?, m.get("calls")?.as_u64()?))
        };
        let collective_meetings = meetings("predicted")
            .zip(meetings("measured"))
            .map(|(p, m)| [p, m]);
        Some(VerifyFigures {
            core_idle_between_ops_s,
            collective_meetings,
            bubble_fraction: [
                f("bubble_fraction_predicted")?,
                f("bubble_fraction_measured")?,
            ],
            exposed_comm_fraction: [
                f("exposed_comm_fraction_predicted")?,
                f("exposed_comm_fraction_measured")?,
            ],
        })
    }
}

/// Trace files larger than this are refused rather than read into memory.
const MAX_TRACE_BYTES: u64 = 1 << 30;

/// Reads `path`: a trace file, or a `twin verify step --trace-dir` directory.
pub fn load(path: &Path, stage_of: &dyn Fn(u32) -> u32) -> Result<Measured, MeasuredError> {
    let verify_dir = ["measured.trace.json", "predicted.trace.json"]
        .iter()
        .any(|f| path.join(f).is_file());
    if path.is_dir() && !verify_dir {
        return read_pytorch(path, stage_of).map_err(|e| MeasuredError::Format {
            path: path.to_path_buf(),
            message: format!(
                "neither a `twin verify step --trace-dir` directory (no measured.trace.json) \
                 nor one of PyTorch profiler traces ({e})"
            ),
        });
    }
    if path.is_dir() {
        let file = |name: &'static str| {
            let p = path.join(name);
            if p.is_file() {
                Ok(p)
            } else {
                Err(MeasuredError::MissingFile {
                    path: path.to_path_buf(),
                    file: name,
                })
            }
        };
        let measured = read_trace_file(&file("measured.trace.json")?, stage_of)?;
        let predicted = read_trace_file(&file("predicted.trace.json")?, stage_of)?;
        // Optional: without it (or unreadable) the pane counts from the traces.
        let figures = std::fs::read_to_string(path.join("verify.json"))
            .ok()
            .and_then(|t| VerifyFigures::parse(&t));
        Ok(Measured {
            label: format!("{}/", file_label(path)),
            timeline: measured,
            predicted: Some(predicted),
            figures,
            snapshot: None,
        })
    } else {
        match read_trace_file(path, stage_of) {
            Ok(timeline) if !timeline_is_empty(&timeline) => Ok(Measured {
                label: file_label(path),
                timeline,
                predicted: None,
                figures: None,
                snapshot: None,
            }),
            // Not twin's own trace: a PyTorch one, or the error of twin's reader.
            twin => read_pytorch(path, stage_of).map_err(|pytorch| match twin {
                Err(e) => e,
                Ok(_) => pytorch,
            }),
        }
    }
}

fn timeline_is_empty(t: &Timeline) -> bool {
    t.rows.iter().all(|r| r.spans.is_empty())
}

/// A PyTorch profiler trace (a file, or a directory of one per rank): each rank's last step,
/// its kernels as ops from the step's start.
fn read_pytorch(path: &Path, stage_of: &dyn Fn(u32) -> u32) -> Result<Measured, MeasuredError> {
    use twin_measured::kineto::{read_traces, KernelClass};
    let traces = read_traces(path).map_err(|e| MeasuredError::Format {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let mut ops = Vec::new();
    for (i, t) in traces.iter().enumerate() {
        let rank = t.rank.unwrap_or(u32::try_from(i).unwrap_or(u32::MAX));
        let Some(step) = t.steps.last() else {
            continue;
        };
        for (n, k) in t
            .kernels
            .iter()
            .filter(|k| step.start_ns <= k.start_ns && k.start_ns < step.end_ns())
            .enumerate()
        {
            let stream = match k.class {
                KernelClass::Collective => Stream::Dp,
                KernelClass::P2p => Stream::PpSend,
                KernelClass::Memcpy | KernelClass::Memset => Stream::Io,
                _ => Stream::Compute,
            };
            let start_ns = k.start_ns - step.start_ns;
            ops.push(RawOp {
                rank,
                op: u32::try_from(n).unwrap_or(u32::MAX),
                stream,
                name: format!("{} {}", k.class.name(), short_kernel_name(&k.name)),
                start_ns,
                end_ns: start_ns.saturating_add(k.dur_ns),
                bytes: k
                    .collective
                    .as_ref()
                    .and_then(|c| c.bytes)
                    .or(k.bytes)
                    .unwrap_or(0),
                flops: 0,
                solo_ns: None,
            });
        }
    }
    Ok(Measured {
        label: format!("{} (PyTorch)", file_label(path)),
        timeline: Timeline::build(ops.into_iter(), &[], stage_of),
        predicted: None,
        figures: None,
        snapshot: None,
    })
}

/// A kernel's name without its template arguments and parameter list: "void
/// at::native::vectorized_elementwise_kernel<4, ...>(...)" is "vectorized_elementwise_kernel".
fn short_kernel_name(name: &str) -> &str {
    let name = name.strip_prefix("void ").unwrap_or(name);
    let end = name.find(['<', '(']).unwrap_or(name.len());
    let base = &name[..end];
    base.rsplit("::").next().unwrap_or(base)
}

fn file_label(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

fn read_trace_file(path: &Path, stage_of: &dyn Fn(u32) -> u32) -> Result<Timeline, MeasuredError> {
    let io = |source| MeasuredError::Io {
        path: path.to_path_buf(),
        source,
    };
    let len = std::fs::metadata(path).map_err(io)?.len();
    if len > MAX_TRACE_BYTES {
        return Err(MeasuredError::Format {
            path: path.to_path_buf(),
            message: format!("{len} bytes is more than the {MAX_TRACE_BYTES} read"),
        });
    }
    let bytes = std::fs::read(path).map_err(io)?;
    // `twin simulate --trace FILE.json.gz` writes gzip: told by its magic, whatever the name.
    let json = twin_measured::gunzip_if_gzip(&bytes, MAX_TRACE_BYTES).map_err(io)?;
    let text = std::str::from_utf8(&json).map_err(|e| MeasuredError::Format {
        path: path.to_path_buf(),
        message: format!("not UTF-8 text: {e}"),
    })?;
    parse_chrome_json(text, stage_of).map_err(|message| MeasuredError::Format {
        path: path.to_path_buf(),
        message,
    })
}

/// Parses the Chrome trace JSON of [`twin_sim::trace::Trace::to_chrome_json`]: "X" events
/// are ops (pid = rank, tid = stream, ts/dur in microseconds, args.op/bytes/flops), "C"
/// events named "memory" are memory samples; metadata and anything else is skipped.
pub fn parse_chrome_json(text: &str, stage_of: &dyn Fn(u32) -> u32) -> Result<Timeline, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let events = v
        .get("traceEvents")
        .and_then(|e| e.as_array())
        .ok_or("no traceEvents array")?;
    let mut ops = Vec::new();
    let mut memory = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let ph = e.get("ph").and_then(|p| p.as_str()).unwrap_or("");
        let uint = |key: &str| e.get(key).and_then(|x| x.as_u64());
        let bad = |what: &str| format!("event {i}: {what}");
        match ph {
            "X" => {
                let rank = uint("pid").ok_or_else(|| bad("no pid"))?;
                let tid = uint("tid").ok_or_else(|| bad("no tid"))?;
                let stream = usize::try_from(tid)
                    .ok()
                    .and_then(|t| Stream::ALL.get(t).copied())
                    .ok_or_else(|| bad("tid is not a stream"))?;
                let start_ns = micros_to_ns(e.get("ts")).ok_or_else(|| bad("bad ts"))?;
                let dur_ns = micros_to_ns(e.get("dur")).ok_or_else(|| bad("bad dur"))?;
                let args = e.get("args");
                let arg = |k: &str| args.and_then(|a| a.get(k)).and_then(|x| x.as_u64());
                ops.push(RawOp {
                    rank: u32::try_from(rank).map_err(|_| bad("pid out of range"))?,
                    op: arg("op")
                        .and_then(|o| u32::try_from(o).ok())
                        .unwrap_or(u32::MAX),
                    stream,
                    name: e
                        .get("name")
                        .and_then(|n| n.as_str())
                        .unwrap_or("?")
                        .to_string(),
                    start_ns,
                    end_ns: start_ns.saturating_add(dur_ns),
                    bytes: arg("bytes").unwrap_or(0),
                    flops: arg("flops").unwrap_or(0),
                    solo_ns: micros_to_ns(args.and_then(|a| a.get("solo_us"))),
                });
            }
            "C" if e.get("name").and_then(|n| n.as_str()) == Some("memory") => {
                let rank = uint("pid").ok_or_else(|| bad("no pid"))?;
                let time_ns = micros_to_ns(e.get("ts")).ok_or_else(|| bad("bad ts"))?;
                let args = e.get("args");
                let mut bytes = [0u64; MemCategory::COUNT];
                for (slot, cat) in bytes.iter_mut().zip(MemCategory::ALL) {
                    *slot = args
                        .and_then(|a| a.get(cat.name()))
                        .and_then(|x| x.as_u64())
                        .unwrap_or(0);
                }
                memory.push(MemorySample {
                    rank: u32::try_from(rank).map_err(|_| bad("pid out of range"))?,
                    time_ns,
                    bytes,
                });
            }
            _ => {}
        }
    }
    Ok(Timeline::build(ops.into_iter(), &memory, stage_of))
}

/// Microseconds (a JSON number, three decimals) to whole nanoseconds.
fn micros_to_ns(v: Option<&serde_json::Value>) -> Option<u64> {
    let v = v?;
    if let Some(u) = v.as_u64() {
        return u.checked_mul(1000);
    }
    let f = v.as_f64()?;
    if (0.0..1.8e16).contains(&f) {
        Some((f * 1000.0).round() as u64)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use twin_sim::{predict, PredictOptions};

    #[test]
    fn a_simulated_trace_reads_back_as_the_same_timeline() {
        let scenario = twin_sim::testing::small_scenario(2, 2, 2, 4);
        let opts = PredictOptions {
            trace: true,
            reproducible: true,
            ..Default::default()
        };
        let p = predict(&scenario, &opts).unwrap();
        let json = p.trace_json().unwrap();
        let plan = &p.staged.plan;
        let stage_of = |r: u32| plan.stage_of(r);
        let back = parse_chrome_json(&json, &stage_of).unwrap();
        let direct = Timeline::from_trace(
            p.result.trace.as_ref().unwrap(),
            &p.staged.schedule,
            stage_of,
        );
        assert_eq!(back, direct);
        assert!(!back.rows.is_empty());
        assert!(!back.memory.is_empty());
    }

    /// `twin simulate --trace FILE.json.gz` writes gzip; it loads as the plain file does.
    #[test]
    fn a_gzipped_simulated_trace_loads_as_the_plain_one() {
        let scenario = twin_sim::testing::small_scenario(2, 2, 2, 4);
        let opts = PredictOptions {
            trace: true,
            reproducible: true,
            ..Default::default()
        };
        let p = predict(&scenario, &opts).unwrap();
        let trace = p.result.trace.as_ref().unwrap();
        let (plan, schedule) = (&p.staged.plan, &p.staged.schedule);
        let dir = std::env::temp_dir().join(format!("twin-tui-gz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (plain, gz) = (dir.join("t.json"), dir.join("t.json.gz"));
        trace.write_chrome_file(&plain, plan, schedule).unwrap();
        trace.write_chrome_file(&gz, plan, schedule).unwrap();
        assert_ne!(std::fs::read(&plain).unwrap(), std::fs::read(&gz).unwrap());
        let stage_of = |r: u32| plan.stage_of(r);
        let (a, b) = (
            load(&plain, &stage_of).unwrap(),
            load(&gz, &stage_of).unwrap(),
        );
        assert_eq!(a.timeline, b.timeline);
        assert!(!b.timeline.rows.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let none = |_| 0;
        assert!(parse_chrome_json("{", &none).is_err());
        assert!(parse_chrome_json("{\"traceEvents\":3}", &none).is_err());
        let bad_tid = r#"{"traceEvents":[{"ph":"X","pid":0,"tid":99,"ts":1,"dur":1}]}"#;
        assert!(parse_chrome_json(bad_tid, &none)
            .unwrap_err()
            .contains("stream"));
        let neg = r#"{"traceEvents":[{"ph":"X","pid":0,"tid":0,"ts":-1,"dur":1}]}"#;
        assert!(parse_chrome_json(neg, &none).is_err());
    }

    /// The bundled H200 PyTorch trace reads as a measured timeline: its step's kernels, one
    /// rank, compute on the compute stream, and the spans end where the step does.
    #[test]
    fn a_pytorch_trace_reads_as_the_measured_timeline() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(
            "../measured/tests/data/h200-hf-llama/hf-llama-L8-mb1-gb4-s2048-h200.trace.json.gz",
        );
        let m = load(&path, &|_| 0).unwrap();
        assert!(m.label.ends_with("(PyTorch)"), "{}", m.label);
        let trace = twin_measured::kineto::read_trace(&path).unwrap();
        let step = trace.steps.last().unwrap();
        let spans: usize = m.timeline.rows.iter().map(|r| r.spans.len()).sum();
        let in_step = trace
            .kernels
            .iter()
            .filter(|k| step.start_ns <= k.start_ns && k.start_ns < step.end_ns())
            .count();
        assert_eq!(spans, in_step);
        assert!(m.timeline.rows.iter().all(|r| r.rank == 0));
        assert_eq!(short_kernel_name("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)"), "vectorized_elementwise_kernel");
        assert_eq!(
            short_kernel_name("nvjet_sm90_tst_256x128"),
            "nvjet_sm90_tst_256x128"
        );
        // Neither twin's trace nor a PyTorch one: an error, no panic.
        let dir = std::env::temp_dir().join(format!("twin-tui-neither-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("x.json"), "{\"traceEvents\": []}").unwrap();
        assert!(load(&dir.join("x.json"), &|_| 0).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_verify_directory_needs_both_traces() {
        let dir = std::env::temp_dir().join(format!("twin-tui-verify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = load(&dir, &|_| 0).unwrap_err();
        assert!(err.to_string().contains("measured.trace.json"), "{err}");
        let t = r#"{"traceEvents":[{"ph":"X","name":"fwd mb0","pid":0,"tid":0,"ts":1.5,"dur":2.25,"args":{"op":3}}]}"#;
        std::fs::write(dir.join("measured.trace.json"), t).unwrap();
        std::fs::write(dir.join("predicted.trace.json"), t).unwrap();
        let m = load(&dir, &|_| 0).unwrap();
        let span = &m.timeline.rows[0].spans[0];
        assert_eq!((span.op, span.start_ns, span.end_ns), (3, 1500, 3750));
        assert!(m.predicted.is_some());
        // No verify.json: no figures. A partial one: none either. A whole one: its figures.
        assert_eq!(m.figures, None);
        std::fs::write(
            dir.join("verify.json"),
            r#"{"bubble_fraction_predicted":0.5}"#,
        )
        .unwrap();
        assert_eq!(load(&dir, &|_| 0).unwrap().figures, None);
        std::fs::write(
            dir.join("verify.json"),
            r#"{"bubble_fraction_predicted":0.57,"bubble_fraction_measured":0.52,
                "exposed_comm_fraction_predicted":0.15,"exposed_comm_fraction_measured":0.18}"#,
        )
        .unwrap();
        let f = load(&dir, &|_| 0).unwrap().figures;
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(
            f,
            Some(VerifyFigures {
                bubble_fraction: [0.57, 0.52],
                exposed_comm_fraction: [0.15, 0.18],
                core_idle_between_ops_s: None,
                collective_meetings: None,
            })
        );
        // A host profile's verify: each core's idle time between ops too.
        let with_cores = VerifyFigures::parse(
            r#"{"bubble_fraction_predicted":0.57,"bubble_fraction_measured":0.52,
                "exposed_comm_fraction_predicted":0.15,"exposed_comm_fraction_measured":0.18,
                "core_activity":{"predicted":{"idle_between_ops_s":0.00026},
                                 "measured":{"idle_between_ops_s":0.00125}}}"#,
        );
        assert_eq!(
            with_cores.and_then(|f| f.core_idle_between_ops_s),
            Some([0.00026, 0.00125])
        );
        assert_eq!(with_cores.and_then(|f| f.collective_meetings), None);
        // And, where present, the collective calls that met another group's on a core.
        let with_meetings = VerifyFigures::parse(
            r#"{"bubble_fraction_predicted":0.57,"bubble_fraction_measured":0.52,
                "exposed_comm_fraction_predicted":0.15,"exposed_comm_fraction_measured":0.18,
                "collective_meetings":{"predicted":{"meeting_calls":0,"calls":136},
                                       "measured":{"meeting_calls":17,"calls":136}}}"#,
        );
        assert_eq!(
            with_meetings.and_then(|f| f.collective_meetings),
            Some([(0, 136), (17, 136)])
        );
    }
}
