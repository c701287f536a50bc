#![cfg(test)]
//! The memory-snapshot reader on the H200 HF-Llama fixture, on small hand-built snapshots,
//! and on malformed input.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_pickle::{HashableValue, Value};
use twin_measured::snapshot::{
    parse_snapshot, read_snapshot, snapshot_from_value, MemoryCategory, SnapshotError,
};

const GIB: f64 = (1u64 << 30) as f64;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/h200-hf-llama")
}

fn fixture() -> PathBuf {
    fixture_dir().join("hf-llama-L8-mb1-gb4-s2048-h200.memsnap.pickle.gz")
}

fn meta() -> serde_json::Value {
    let text =
        std::fs::read_to_string(fixture_dir().join("hf-llama-L8-mb1-gb4-s2048-h200.meta.json"))
            .expect("meta.json");
    serde_json::from_str(&text).expect("meta.json parses")
}

fn meta_gib(key: &str) -> f64 {
    meta()[key].as_f64().expect("a number in meta.json")
}

/// Parameters of the fixture's model, from its README: 8 Llama layers of the Llama-3-8B
/// shape, untied embeddings, RMSNorm (weight only).
fn llama_params() -> u64 {
    let (hidden, heads, kv_heads, ffn, vocab, layers) =
        (4096u64, 32u64, 8u64, 14336u64, 128256u64, 8u64);
    let head_dim = hidden / heads;
    assert_eq!(head_dim, 128);
    let attn = hidden * hidden * 2 + hidden * kv_heads * head_dim * 2; // q, o; k, v
    let mlp = 3 * hidden * ffn; // gate, up, down
    let norms = 2 * hidden;
    let embed = vocab * hidden;
    let lm_head = vocab * hidden;
    layers * (attn + mlp + norms) + embed + lm_head + hidden
}

#[test]
fn fixture_peaks_match_torch() {
    let snap = read_snapshot(&fixture()).expect("the fixture reads");
    assert_eq!(snap.devices.len(), 1);
    let d = &snap.devices[0];
    assert_eq!(d.device, 0);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert!(d.trace_events > 0);

    let want_alloc = meta_gib("max_alloc_gib");
    let got_alloc = d.peak_allocated_bytes as f64 / GIB;
    assert!(
        (got_alloc / want_alloc - 1.0).abs() < 0.005,
        "peak allocated {got_alloc} GiB, torch reported {want_alloc}"
    );
    // The replay counts allocator blocks as torch does, so the figure agrees to the byte up to
    // what the reader cannot see (unsplit remainders of freed blocks): allow 1 MiB.
    let want_bytes = want_alloc * GIB;
    assert!(
        (d.peak_allocated_bytes as f64 - want_bytes).abs() <= 1048576.0,
        "peak allocated {} bytes, torch reported {want_bytes}",
        d.peak_allocated_bytes
    );
    let want_res = meta_gib("max_reserved_gib");
    let got_res = d.peak_reserved_bytes as f64 / GIB;
    assert!(
        (got_res / want_res - 1.0).abs() < 0.01,
        "peak reserved {got_res} GiB, torch reported {want_res}"
    );
    assert!(
        d.peak_time_us.is_some(),
        "the peak lies inside the step, not before it"
    );
    assert_eq!(d.timeline.len(), d.trace_events + 1);
    let tl_max = d.timeline.iter().map(|p| p.allocated_bytes).max();
    assert_eq!(tl_max, Some(d.peak_allocated_bytes));
    assert_eq!(
        d.timeline.get(d.peak_index).map(|p| p.allocated_bytes),
        Some(d.peak_allocated_bytes)
    );
}

#[test]
fn fixture_end_state_equals_segments() {
    let snap = read_snapshot(&fixture()).expect("the fixture reads");
    let d = &snap.devices[0];
    assert_eq!(d.replayed_end_allocated_bytes, d.end_allocated_bytes);
    assert_eq!(d.replayed_end_reserved_bytes, d.end_reserved_bytes);
    assert_eq!(d.end_allocated_bytes, d.segments_allocated_bytes);
    let last = d.timeline.last().expect("a timeline");
    assert_eq!(last.allocated_bytes, d.end_allocated_bytes);
    // Reserved at the end is what torch reports as the reserved peak: the allocator grew its
    // cache in warm-up and released nothing during the step.
    let want_res = meta_gib("max_reserved_gib");
    assert!((d.end_reserved_bytes as f64 / GIB / want_res - 1.0).abs() < 0.01);
}

#[test]
fn fixture_categories_at_peak() {
    let snap = read_snapshot(&fixture()).expect("the fixture reads");
    let d = &snap.devices[0];
    let sum: u64 = d.by_category_at_peak.iter().map(|(_, b)| b).sum();
    assert_eq!(sum, d.peak_allocated_bytes);
    let blocks: u64 = d.at_peak.iter().map(|b| b.size_bytes).sum();
    assert_eq!(blocks, d.peak_allocated_bytes);
    assert_eq!(d.by_category_at_peak.len(), MemoryCategory::ALL.len());

    let get = |c: MemoryCategory| {
        d.by_category_at_peak
            .iter()
            .find(|(k, _)| *k == c)
            .map(|(_, b)| *b)
            .unwrap_or(0)
    };
    let fp32_weights = llama_params() * 4;
    let weights = get(MemoryCategory::Weights);
    let ratio = weights as f64 / fp32_weights as f64;
    assert!(
        (ratio - 1.0).abs() < 0.03,
        "weights {weights} vs fp32 parameters {fp32_weights}"
    );
    // AdamW keeps two fp32 moments per parameter (plus tiny step counters).
    let opt = get(MemoryCategory::OptimizerState);
    let ratio = opt as f64 / (2 * fp32_weights) as f64;
    assert!(
        (ratio - 1.0).abs() < 0.03,
        "optimizer state {opt} vs 2 x fp32 parameters"
    );
    // Gradients are fp32 and never more than one per parameter.
    assert!(get(MemoryCategory::Gradients) <= fp32_weights + fp32_weights / 50);
    // The rest of the peak is what the step itself holds.
    assert!(get(MemoryCategory::Activations) > 0);
    for b in &d.at_peak {
        if b.alloc_time_us.is_some() {
            assert!(
                !b.frames.is_empty(),
                "a block allocated in the window has its frames"
            );
        }
    }
}

fn s(x: &str) -> Value {
    Value::String(x.to_string())
}

fn dict(items: Vec<(&str, Value)>) -> Value {
    let map: BTreeMap<HashableValue, Value> = items
        .into_iter()
        .map(|(k, v)| (HashableValue::String(k.to_string()), v))
        .collect();
    Value::Dict(map)
}

fn frame(file: &str, name: &str) -> Value {
    dict(vec![
        ("filename", s(file)),
        ("line", Value::I64(1)),
        ("name", s(name)),
    ])
}

fn ev(action: &str, addr: i64, size: i64, t: i64, frames: Vec<Value>) -> Value {
    dict(vec![
        ("action", s(action)),
        ("addr", Value::I64(addr)),
        ("size", Value::I64(size)),
        ("stream", Value::I64(0)),
        ("time_us", Value::I64(t)),
        ("frames", Value::List(frames)),
    ])
}

fn block(addr: i64, size: i64, state: &str, frames: Vec<Value>) -> Value {
    dict(vec![
        ("address", Value::I64(addr)),
        ("size", Value::I64(size)),
        ("requested_size", Value::I64(size)),
        ("state", s(state)),
        ("frames", Value::List(frames)),
    ])
}

/// A hand-built step: a weight of 1024 bytes built before the window; the window allocates
/// an activation (40 bytes requested, a 512-byte block) in forward, a gradient (1000 bytes
/// requested, the 1024-byte block the segment shows at the end) in backward and a temporary
/// (30 requested, 512) in backward, then frees the temporary and the activation in backward.
/// Peak = 1024 + 512 + 1024 + 512 = 3072 right after the temporary's alloc; the end holds the
/// weight and the gradient (2048).
fn small_snapshot() -> Value {
    let engine = || frame("", "torch::autograd::Engine::evaluate_function(x)");
    let fwd = || frame("/x/torch/nn/modules/linear.py", "forward");
    let ctor = || frame("/x/torch/nn/modules/linear.py", "__init__");
    let segment = dict(vec![
        ("device", Value::I64(0)),
        ("address", Value::I64(0)),
        ("total_size", Value::I64(8192)),
        ("allocated_size", Value::I64(2048)),
        ("active_size", Value::I64(2048)),
        ("stream", Value::I64(0)),
        ("segment_type", s("large")),
        (
            "blocks",
            Value::List(vec![
                block(0, 1024, "active_allocated", vec![ctor()]),
                block(1024, 1024, "active_allocated", vec![engine()]),
                block(2048, 6144, "inactive", vec![]),
            ]),
        ),
    ]);
    let trace = vec![
        ev("alloc", 2048, 40, 10, vec![fwd()]),
        ev("alloc", 1024, 1000, 20, vec![engine()]),
        ev("alloc", 2560, 30, 30, vec![engine()]),
        ev("free_requested", 2560, 30, 40, vec![engine()]),
        ev("free_completed", 2560, 30, 41, vec![engine()]),
        ev("free_requested", 2048, 40, 50, vec![engine()]),
        ev("free_completed", 2048, 40, 51, vec![engine()]),
    ];
    dict(vec![
        ("segments", Value::List(vec![segment])),
        ("device_traces", Value::List(vec![Value::List(trace)])),
    ])
}

#[test]
fn small_hand_built_snapshot() {
    let snap = snapshot_from_value(&small_snapshot(), Path::new("small")).expect("reads");
    let d = &snap.devices[0];
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert_eq!(d.start_allocated_bytes, 1024);
    assert_eq!(d.peak_allocated_bytes, 3072);
    assert_eq!(d.peak_time_us, Some(30));
    assert_eq!(d.peak_reserved_bytes, 8192);
    assert_eq!(d.end_allocated_bytes, 2048);
    assert_eq!(d.replayed_end_allocated_bytes, 2048);
    let cats: BTreeMap<MemoryCategory, u64> = d.by_category_at_peak.iter().copied().collect();
    assert_eq!(cats[&MemoryCategory::Weights], 1024);
    assert_eq!(cats[&MemoryCategory::Gradients], 1024);
    assert_eq!(cats[&MemoryCategory::Activations], 512);
    assert_eq!(cats[&MemoryCategory::Temporaries], 512);
    assert_eq!(cats[&MemoryCategory::OptimizerState], 0);
    assert_eq!(d.at_peak.len(), 4);
}

#[test]
fn requests_are_counted_as_blocks() {
    // Requests of 4 and 1000 bytes take blocks of 512 and 1024 bytes (the caching
    // allocator's 512-byte rounding); a block live at the end counts with the segment's size.
    let seg = dict(vec![
        ("device", Value::I64(0)),
        ("total_size", Value::I64(2 << 20)),
        ("allocated_size", Value::I64(1536)),
        (
            "blocks",
            Value::List(vec![block(4096, 1536, "active_allocated", vec![])]),
        ),
    ]);
    let trace = vec![
        ev("alloc", 0, 4, 1, vec![]),
        ev("alloc", 512, 1000, 2, vec![]),
        ev("free_requested", 0, 4, 3, vec![]),
        ev("free_requested", 512, 1000, 4, vec![]),
        ev("alloc", 4096, 1100, 5, vec![]),
    ];
    let v = dict(vec![
        ("segments", Value::List(vec![seg])),
        ("device_traces", Value::List(vec![Value::List(trace)])),
    ]);
    let d = &snapshot_from_value(&v, Path::new("round"))
        .expect("reads")
        .devices[0];
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert_eq!(d.start_allocated_bytes, 0);
    assert_eq!(d.peak_allocated_bytes, 1536);
    let points: Vec<u64> = d.timeline.iter().map(|p| p.allocated_bytes).collect();
    assert_eq!(points, vec![0, 512, 1536, 1024, 0, 1536]);
    assert_eq!(d.replayed_end_allocated_bytes, 1536);
}

#[test]
fn segment_events_move_reserved() {
    let mut v = small_snapshot();
    if let Value::Dict(top) = &mut v {
        let key = HashableValue::String("device_traces".into());
        if let Some(Value::List(devs)) = top.get_mut(&key) {
            if let Some(Value::List(t)) = devs.get_mut(0) {
                t.insert(0, ev("segment_alloc", 0, 6000, 5, vec![]));
            }
        }
    }
    let d = &snapshot_from_value(&v, Path::new("seg"))
        .expect("reads")
        .devices[0];
    assert_eq!(d.start_reserved_bytes, 2192);
    assert_eq!(d.peak_reserved_bytes, 8192);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn inconsistent_trace_warns() {
    // An alloc that is neither freed nor live at the end.
    let mut v = small_snapshot();
    if let Value::Dict(top) = &mut v {
        let key = HashableValue::String("device_traces".into());
        if let Some(Value::List(devs)) = top.get_mut(&key) {
            if let Some(Value::List(t)) = devs.get_mut(0) {
                t.push(ev("alloc", 900, 8, 60, vec![]));
            }
        }
    }
    let d = &snapshot_from_value(&v, Path::new("bad"))
        .expect("reads")
        .devices[0];
    assert!(!d.warnings.is_empty());
}

fn name_in(err: &SnapshotError, name: &str) -> bool {
    err.to_string().contains(name)
}

#[test]
fn errors_name_the_file() {
    let dir = std::env::temp_dir().join(format!("twin-snapshot-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");

    let not_pickle = dir.join("not-a-pickle.bin");
    std::fs::write(&not_pickle, b"this is plain text").expect("write");
    let e = read_snapshot(&not_pickle).expect_err("not a pickle");
    assert!(matches!(e, SnapshotError::NotPickle { .. }), "{e}");
    assert!(name_in(&e, "not-a-pickle.bin"), "{e}");

    let list = dir.join("a-list.pickle");
    std::fs::write(
        &list,
        serde_pickle::value_to_vec(&Value::List(vec![Value::I64(1)]), Default::default())
            .expect("pickle"),
    )
    .expect("write");
    let e = read_snapshot(&list).expect_err("a list is not a snapshot");
    assert!(matches!(e, SnapshotError::NotSnapshot { .. }), "{e}");
    assert!(name_in(&e, "a-list.pickle"), "{e}");

    let no_segments = dir.join("no-segments.pickle");
    let v = dict(vec![("device_traces", Value::List(vec![]))]);
    std::fs::write(
        &no_segments,
        serde_pickle::value_to_vec(&v, Default::default()).expect("pickle"),
    )
    .expect("write");
    let e = read_snapshot(&no_segments).expect_err("no segments");
    assert!(
        matches!(
            e,
            SnapshotError::Missing {
                key: "segments",
                ..
            }
        ),
        "{e}"
    );
    assert!(name_in(&e, "no-segments.pickle"), "{e}");

    let missing = dir.join("missing.pickle");
    let e = read_snapshot(&missing).expect_err("no file");
    assert!(
        matches!(e, SnapshotError::Io { .. }) && name_in(&e, "missing.pickle"),
        "{e}"
    );

    let bad_gz = dir.join("bad.pickle.gz");
    std::fs::write(&bad_gz, [0x1f, 0x8b, 8, 0, 1, 2, 3]).expect("write");
    let e = read_snapshot(&bad_gz).expect_err("bad gzip");
    assert!(
        matches!(e, SnapshotError::Gzip { .. }) && name_in(&e, "bad.pickle.gz"),
        "{e}"
    );

    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn wrong_types_say_where() {
    let v = dict(vec![(
        "segments",
        Value::List(vec![dict(vec![("device", s("zero"))])]),
    )]);
    let e = snapshot_from_value(&v, Path::new("typed.pickle")).expect_err("device is a string");
    let msg = e.to_string();
    assert!(
        msg.contains("typed.pickle") && msg.contains("segments[0].device"),
        "{msg}"
    );

    let v = dict(vec![(
        "segments",
        Value::List(vec![dict(vec![
            ("device", Value::I64(0)),
            ("total_size", Value::I64(-5)),
            ("blocks", Value::List(vec![])),
        ])]),
    )]);
    let e = snapshot_from_value(&v, Path::new("neg.pickle")).expect_err("negative size");
    assert!(matches!(e, SnapshotError::OutOfRange { .. }), "{e}");
}

#[test]
fn plain_and_gzip_read_the_same() {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(fixture()).expect("fixture"))
        .read_to_end(&mut raw)
        .expect("gunzip");
    let plain = parse_snapshot(&raw, Path::new("plain")).expect("plain pickle reads");
    let gz = read_snapshot(&fixture()).expect("gzip reads");
    assert_eq!(plain, gz);
}
