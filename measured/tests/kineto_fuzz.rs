#![cfg(test)]
//! The reader never panics: on random bytes, on truncated traces (the real fixture and a small
//! hand-written one), and on events whose fields hold the wrong types, NaN-like strings,
//! negative or huge numbers. Where it does read a trace, the breakdown's sum still holds.

use proptest::prelude::*;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use twin_measured::kineto::{breakdown, class_totals, parse_trace, RankTrace};

/// Whatever the reader returns for a trace it accepted, its steps break down exactly.
fn check(t: &RankTrace) {
    for step in 0..t.steps.len() {
        let b = breakdown(t, step).expect("a step in range breaks down");
        let sum: u64 = b.by_class_ns.iter().map(|(_, ns)| ns).sum();
        assert_eq!(sum + b.idle_ns, b.step_ns);
        assert!(b.exposed_comm_ns <= b.comm_ns);
        class_totals(t, Some(step)).expect("a step in range has totals");
    }
    class_totals(t, None).expect("totals of the whole trace");
}

fn parse(bytes: &[u8]) {
    if let Ok(t) = parse_trace(Path::new("fuzz.json"), bytes) {
        check(&t);
    }
}

fn fixture_json() -> &'static [u8] {
    static JSON: OnceLock<Vec<u8>> = OnceLock::new();
    JSON.get_or_init(|| {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/h200-hf-llama/hf-llama-L8-mb1-gb4-s2048-h200.trace.json.gz");
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
            .read_to_end(&mut out)
            .unwrap();
        out
    })
}

fn fixture_gz() -> &'static [u8] {
    static GZ: OnceLock<Vec<u8>> = OnceLock::new();
    GZ.get_or_init(|| {
        std::fs::read(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data/h200-hf-llama/hf-llama-L8-mb1-gb4-s2048-h200.trace.json.gz"),
        )
        .unwrap()
    })
}

const SMALL: &str = r#"{"schemaVersion": 1, "distributedInfo": {"rank": 1, "world_size": 2},
 "traceEvents": [
  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": 5.5, "dur": 100.25},
  {"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#AdamW.step", "pid": 1, "tid": 1, "ts": 60, "dur": 10},
  {"ph": "X", "cat": "cpu_op", "name": "aten::_fused_adamw_", "pid": 1, "tid": 1, "ts": 61, "dur": 2, "args": {"External id": 9}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 1, "args": {"correlation": 1}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 62, "dur": 1, "args": {"correlation": 2}},
  {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "pid": 0, "tid": 9, "ts": 20, "dur": 30.5,
   "args": {"stream": 9, "correlation": 1, "Collective name": "allreduce", "In msg nelems": 100, "Out msg nelems": 100, "Group size": 2, "dtype": "BFloat16"}},
  {"ph": "X", "cat": "kernel", "name": "multi_tensor_apply_kernel", "pid": 0, "tid": 7, "ts": 70, "dur": 4, "args": {"stream": 7, "correlation": 2, "External id": 9}},
  {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": 75, "dur": 0.001, "args": {"stream": 7, "bytes": 4}},
  {"ph": "i", "cat": "cpu_instant_event", "name": "x", "pid": 1, "tid": 1, "ts": 3, "s": "t"}
 ]}"#;

#[test]
fn the_small_trace_reads() {
    let t = parse_trace(Path::new("small.json"), SMALL.as_bytes()).unwrap();
    assert_eq!(t.kernels.len(), 3);
    assert_eq!(t.rank, Some(1));
    check(&t);
}

#[test]
fn every_prefix_of_the_small_trace() {
    let bytes = SMALL.as_bytes();
    for cut in 0..bytes.len() {
        parse(&bytes[..cut]);
    }
}

#[test]
fn deep_nesting_neither_overflows_the_stack_nor_matters() {
    // Values nested 100,000 deep where the reader wants a number, where it wants an event, and
    // as the whole document: read past (serde_json skips ignored values without recursion).
    let (open, close) = ("[".repeat(100_000), "]".repeat(100_000));
    let deep_arg = format!(
        r#"{{"traceEvents": [{open}{close}, {{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {{"stream": {open}1{close}}}}}]}}"#
    );
    let t = parse_trace(Path::new("deep.json"), deep_arg.as_bytes()).unwrap();
    assert_eq!(t.kernels.len(), 1);
    assert_eq!(
        t.kernels[0].stream, 0,
        "a stream that is not a number falls back to tid, else 0"
    );
    let deep_doc = format!("{open}{close}");
    assert!(parse_trace(Path::new("deep.json"), deep_doc.as_bytes()).is_err());
}

/// JSON texts a field may hold: every type, edge numbers, and strings that look like numbers.
const VALUES: &[&str] = &[
    "0",
    "1",
    "-1",
    "0.5",
    "-0.0",
    "1e308",
    "-1e308",
    "1e-320",
    "4.6e15",
    "9.3e18",
    "-9.3e18",
    "18446744073709551615",
    "-9223372036854775808",
    "null",
    "true",
    "false",
    r#""NaN""#,
    r#""Infinity""#,
    r#""-1""#,
    r#""""#,
    "[]",
    "{}",
    "[1, [2, {}]]",
    r#"{"a": {"b": []}}"#,
    "[[2048, 4096], [4096, -1]]",
    r#"[[1.5], "x", null, [[]]]"#,
    r#"["c10::BFloat16", 3]"#,
];

const CATS: &[&str] = &[
    r#""kernel""#,
    r#""gpu_memcpy""#,
    r#""gpu_memset""#,
    r#""gpu_user_annotation""#,
    r#""user_annotation""#,
    r#""cpu_op""#,
    r#""cuda_runtime""#,
    r#""cuda_driver""#,
    r#""Trace""#,
    r#""ac2g""#,
    "5",
    "null",
];

const NAMES: &[&str] = &[
    r#""ProfilerStep#1""#,
    r#""ProfilerStep#""#,
    r#""Optimizer.step#AdamW.step""#,
    r#""ncclDevKernel_AllReduce_Sum_f32_RING_LL""#,
    r#""ncclDevKernel_SendRecv""#,
    r#""nvjet_sm90_tst""#,
    r#""aten::mm""#,
    r#""record_param_comms""#,
    r#""""#,
    r#""\u00e9\n\"""#,
    "7",
    "[]",
];

const ARG_KEYS: &[&str] = &[
    "External id",
    "correlation",
    "stream",
    "device",
    "bytes",
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "Group size",
    "dtype",
    "Input Dims",
    "Input type",
];

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        12 => prop::sample::select(VALUES).prop_map(str::to_owned),
        // Beyond f64: serde_json refuses the whole document.
        1 => Just("1e999".to_owned()),
        4 => (-1e7f64..1e7).prop_map(|v| format!("{v}")),
        4 => any::<i64>().prop_map(|v| v.to_string()),
    ]
}

fn args() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::collection::vec((prop::sample::select(ARG_KEYS), value()), 0..6).prop_map(|kv| {
            // A key twice in one object is a JSON error for serde; keep the first.
            let mut seen = std::collections::HashSet::new();
            let body: Vec<String> = kv
                .into_iter()
                .filter(|(k, _)| seen.insert(*k))
                .map(|(k, v)| format!(r#""{k}": {v}"#))
                .collect();
            format!("{{{}}}", body.join(", "))
        }),
        1 => value(),
    ]
}

fn event() -> impl Strategy<Value = String> {
    (
        prop::sample::select(&["\"X\"", "\"i\"", "\"s\"", "1"][..]),
        prop::sample::select(CATS),
        prop::sample::select(NAMES),
        value(),
        value(),
        value(),
        value(),
        args(),
        any::<u8>(),
    )
        .prop_map(|(ph, cat, name, ts, dur, pid, tid, args, drop)| {
            let fields = [
                format!(r#""ph": {ph}"#),
                format!(r#""cat": {cat}"#),
                format!(r#""name": {name}"#),
                format!(r#""ts": {ts}"#),
                format!(r#""dur": {dur}"#),
                format!(r#""pid": {pid}"#),
                format!(r#""tid": {tid}"#),
                format!(r#""args": {args}"#),
            ];
            // Drop one field now and then: missing fields.
            let kept: Vec<&String> = fields
                .iter()
                .enumerate()
                .filter(|(i, _)| drop % 16 != *i as u8)
                .map(|(_, f)| f)
                .collect();
            format!(
                "{{{}}}",
                kept.iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// A well-formed kernel, so that many generated traces get past "no GPU activity".
fn good_kernel() -> impl Strategy<Value = String> {
    (
        0u32..1000,
        0u32..100,
        0u32..4,
        0u32..8,
        prop::sample::select(&NAMES[..9]),
        args(),
    )
        .prop_map(|(ts, dur, stream, id, name, args)| {
            // Half the time, the kernel's args are well-formed links to CPU ops and launches.
            let args = if ts % 2 == 0 {
                format!(r#"{{"stream": {stream}, "correlation": {id}, "External id": {id}}}"#)
            } else {
                args
            };
            format!(
                r#"{{"ph": "X", "cat": "kernel", "name": {name}, "pid": 0, "tid": {stream}, "ts": {ts}, "dur": {dur}, "args": {args}}}"#
            )
        })
}

/// Well-formed step markers, optimizer annotations, CPU ops and launches, so that generated
/// traces reach the step logic.
fn good_cpu_event() -> impl Strategy<Value = String> {
    (
        prop::sample::select(
            &[
                ("user_annotation", "ProfilerStep#1"),
                ("user_annotation", "ProfilerStep#2"),
                ("gpu_user_annotation", "ProfilerStep#1"),
                ("user_annotation", "Optimizer.step#SGD.step"),
                ("cpu_op", "aten::mm"),
                ("cpu_op", "record_param_comms"),
                ("cuda_runtime", "cudaLaunchKernel"),
                ("Trace", "PyTorch Profiler (0)"),
            ][..],
        ),
        0u32..1000,
        0u32..400,
        0u32..8,
        args(),
    )
        .prop_map(|((cat, name), ts, dur, id, args)| {
            let args = if ts % 3 == 0 {
                args
            } else {
                format!(r#"{{"correlation": {id}, "External id": {id}}}"#)
            };
            format!(
                r#"{{"ph": "X", "cat": "{cat}", "name": "{name}", "pid": 1, "tid": 1, "ts": {ts}, "dur": {dur}, "args": {args}}}"#
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512), gz in any::<bool>()) {
        let mut input = if gz { vec![0x1f, 0x8b] } else { Vec::new() };
        input.extend(bytes);
        parse(&input);
    }

    #[test]
    fn events_with_wrong_types(
        odd in prop::collection::vec(event(), 0..12),
        good in prop::collection::vec(good_kernel(), 0..6),
        cpu in prop::collection::vec(good_cpu_event(), 0..8),
        dist in value(),
    ) {
        let mut events = odd;
        events.extend(good);
        events.extend(cpu);
        let text = format!(
            r#"{{"distributedInfo": {{"rank": {dist}, "world_size": {dist}}}, "traceEvents": [{}]}}"#,
            events.join(", ")
        );
        parse(text.as_bytes());
    }
}

proptest! {
    // The fixture is tens of MB decompressed: a few prefixes each run.
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn truncated_fixture(frac in 0.0f64..1.0) {
        let json = fixture_json();
        let cut = ((json.len() as f64) * frac) as usize;
        parse(&json[..cut.min(json.len())]);
        let gz = fixture_gz();
        let cut = ((gz.len() as f64) * frac) as usize;
        parse(&gz[..cut.min(gz.len())]);
    }
}
