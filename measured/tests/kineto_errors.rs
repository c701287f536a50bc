#![cfg(test)]
//! What the reader refuses, and that each refusal names the file and says what was expected.

use std::path::{Path, PathBuf};
use twin_measured::kineto::{
    breakdown, class_totals, parse_trace, read_trace, read_traces, TraceError,
};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("twin-kineto-err-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &Path, name: &str, text: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const ONE_KERNEL: &str = r#"{"traceEvents": [
  {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": {"stream": 7}}
]}"#;

#[test]
fn not_json() {
    let dir = temp_dir("not-json");
    let path = write(&dir, "rank0.json", b"hello, not json");
    let err = read_trace(&path).unwrap_err();
    assert!(matches!(err, TraceError::Json { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("rank0.json") && msg.contains("not JSON"),
        "{msg}"
    );
    // serde_json's error locates the fault.
    assert!(msg.contains("line 1"), "{msg}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn json_but_not_a_trace() {
    let dir = temp_dir("not-trace");
    for (file, text, found) in [
        (
            "object.json",
            r#"{"schemaVersion": 1}"#,
            "no \"traceEvents\"",
        ),
        ("array.json", "[1, 2, 3]", "top level is not an object"),
        (
            "events.json",
            r#"{"traceEvents": {"ph": "X"}}"#,
            "not an array",
        ),
    ] {
        let path = write(&dir, file, text.as_bytes());
        let err = read_trace(&path).unwrap_err();
        assert!(matches!(err, TraceError::NotATrace { .. }), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains(file) && msg.contains("traceEvents") && msg.contains(found),
            "{msg}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_trace_with_no_gpu_activity() {
    let text = r#"{"traceEvents": [
      {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 2},
      {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0, "dur": 9}
    ]}"#;
    let err = parse_trace(Path::new("cpu-only.json"), text.as_bytes()).unwrap_err();
    assert!(matches!(err, TraceError::NoGpuActivity { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("cpu-only.json") && msg.contains("\"kernel\""),
        "{msg}"
    );
}

#[test]
fn a_step_out_of_range() {
    let t = parse_trace(Path::new("one.json"), ONE_KERNEL.as_bytes()).unwrap();
    assert_eq!(t.steps.len(), 1);
    assert!(breakdown(&t, 0).is_ok());
    let err = breakdown(&t, 1).unwrap_err();
    assert!(
        matches!(
            err,
            TraceError::StepOutOfRange {
                step: 1,
                steps: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("one.json"));
    assert!(class_totals(&t, Some(3)).is_err());
}

#[test]
fn a_kernel_with_unusable_times_names_the_event() {
    for (ts, dur, want) in [
        (r#""10""#, "5", "\"ts\" is a string"),
        ("10", "-5", "\"dur\" -5"),
        ("null", "5", "\"ts\" is not a string or number"),
        ("1e300", "5", "not a usable time"),
        ("10", "1e300", "not a usable duration"),
    ] {
        let text = format!(
            r#"{{"traceEvents": [
              {{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2}},
              {{"ph": "X", "cat": "kernel", "name": "gemm_kernel", "ts": {ts}, "dur": {dur}}}
            ]}}"#
        );
        let err = parse_trace(Path::new("bad.json"), text.as_bytes()).unwrap_err();
        assert!(
            matches!(err, TraceError::BadEvent { index: 1, .. }),
            "{err}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("bad.json")
                && msg.contains("traceEvents[1]")
                && msg.contains("gemm_kernel")
                && msg.contains(want),
            "{msg}"
        );
    }
}

#[test]
fn wrong_types_outside_gpu_activity_are_read_past() {
    // A CPU op with a string ts, a flow with no name, a non-object event, a kernel-less
    // annotation: none of them is GPU activity, so the trace still reads.
    let text = r#"{"traceEvents": [
      {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": "soon", "dur": [1]},
      {"ph": "f", "cat": "ac2g", "ts": 3},
      42, "event", null, [1, 2],
      {"ph": "X", "cat": 7, "name": {"a": 1}},
      {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "ts": 10, "dur": 5, "args": "none"}
    ], "distributedInfo": "rank zero"}"#;
    let t = parse_trace(Path::new("odd.json"), text.as_bytes()).unwrap();
    assert_eq!(t.kernels.len(), 1);
    assert_eq!(t.rank, None);
}

#[test]
fn gzip_that_does_not_decompress() {
    let err = parse_trace(Path::new("broken.json.gz"), &[0x1f, 0x8b, 8, 0, 1, 2, 3]).unwrap_err();
    assert!(matches!(err, TraceError::Gzip { .. }), "{err}");
    assert!(err.to_string().contains("broken.json.gz"));
}

#[test]
fn gzip_is_told_by_its_bytes_not_its_name() {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(ONE_KERNEL.as_bytes()).unwrap();
    let bytes = gz.finish().unwrap();
    let t = parse_trace(Path::new("plain-name.json"), &bytes).unwrap();
    assert_eq!(t.kernels.len(), 1);
    assert_eq!(t.kernels[0].dur_ns, 5000);
}

#[test]
fn missing_files_and_empty_directories() {
    let dir = temp_dir("empty");
    let err = read_traces(&dir).unwrap_err();
    assert!(matches!(err, TraceError::NoTraceFiles { .. }), "{err}");
    assert!(err.to_string().contains("twin-kineto-err"));
    let missing = dir.join("absent.json");
    let err = read_traces(&missing).unwrap_err();
    assert!(matches!(err, TraceError::Io { .. }), "{err}");
    assert!(err.to_string().contains("absent.json"));
    // One bad file in a directory fails the whole read, naming that file.
    write(&dir, "r0.json", ONE_KERNEL.as_bytes());
    write(&dir, "r1.json", b"{");
    let err = read_traces(&dir).unwrap_err();
    assert!(err.to_string().contains("r1.json"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_external_id_equal_to_the_correlation_links_no_op() {
    // Kineto before 2024 wrote a kernel with no linked op with "External id" = its correlation
    // id, which may collide with an unrelated op's id (here aten::mm's): no link, and the
    // kernel is classed by its name.
    let text = r#"{"traceEvents": [
      {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2, "args": {"External id": 5}},
      {"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel", "ts": 10, "dur": 5,
       "args": {"External id": 5, "correlation": 5}},
      {"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel", "ts": 20, "dur": 5,
       "args": {"External id": 5, "correlation": 6}}
    ]}"#;
    let t = parse_trace(Path::new("old.json"), text.as_bytes()).unwrap();
    assert_eq!(t.kernels[0].op, None);
    assert_eq!(
        t.kernels[0].class,
        twin_measured::kineto::KernelClass::Elementwise
    );
    assert_eq!(t.kernels[1].op.as_deref(), Some("aten::mm"));
    assert_eq!(t.kernels[1].class, twin_measured::kineto::KernelClass::Gemm);
}
