#![cfg(test)]
//! The memory-snapshot reader never panics: random bytes, truncated and corrupted copies of
//! the fixture, and small hand-built values with wrong types and out-of-range numbers all give
//! `Ok` or `Err`.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::sync::OnceLock;

use proptest::prelude::*;
use serde_pickle::{HashableValue, Value};
use twin_measured::snapshot::{parse_snapshot, snapshot_from_value};

fn fixture_pickle() -> &'static [u8] {
    static RAW: OnceLock<Vec<u8>> = OnceLock::new();
    RAW.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/h200-hf-llama/hf-llama-L8-mb1-gb4-s2048-h200.memsnap.pickle.gz");
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(path).expect("fixture"))
            .read_to_end(&mut raw)
            .expect("gunzip");
        raw
    })
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(bytes).expect("gzip");
    enc.finish().expect("gzip")
}

const KEYS: &[&str] = &[
    "segments",
    "device_traces",
    "device",
    "address",
    "total_size",
    "allocated_size",
    "blocks",
    "size",
    "state",
    "frames",
    "filename",
    "line",
    "name",
    "action",
    "addr",
    "time_us",
    "stream",
];

const STRINGS: &[&str] = &[
    "active_allocated",
    "inactive",
    "alloc",
    "free_requested",
    "free_completed",
    "segment_alloc",
    "segment_free",
    "segment_map",
    "segment_unmap",
    "oom",
    "snapshot",
    "free",
    "/x/torch/optim/adam.py",
    "torch::autograd::Engine::evaluate_function",
    "__init__",
    "",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::None),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::I64),
        (0i64..4096).prop_map(Value::I64),
        Just(Value::I64(i64::MAX)),
        Just(Value::I64(-1)),
        any::<f64>().prop_map(Value::F64),
        prop::sample::select(STRINGS).prop_map(|s| Value::String(s.to_string())),
        prop::collection::vec(any::<u8>(), 0..8).prop_map(Value::Bytes),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::List),
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Tuple),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..8).prop_map(|kv| {
                let map: BTreeMap<HashableValue, Value> = kv
                    .into_iter()
                    .map(|(k, v)| (HashableValue::String(k.to_string()), v))
                    .collect();
                Value::Dict(map)
            }),
        ]
    })
}

fn snapshot_like() -> impl Strategy<Value = Value> {
    (value(), value(), any::<bool>()).prop_map(|(segments, traces, with_traces)| {
        let mut map = BTreeMap::new();
        map.insert(HashableValue::String("segments".into()), segments);
        if with_traces {
            map.insert(HashableValue::String("device_traces".into()), traces);
        }
        Value::Dict(map)
    })
}

fn s(x: &str) -> Value {
    Value::String(x.to_string())
}

fn dict(items: Vec<(&str, Value)>) -> Value {
    Value::Dict(
        items
            .into_iter()
            .map(|(k, v)| (HashableValue::String(k.to_string()), v))
            .collect(),
    )
}

fn number() -> impl Strategy<Value = i64> {
    prop_oneof![0i64..64, Just(i64::MAX), Just(i64::MAX / 2), any::<i64>()]
}

/// Well-shaped snapshots with random, mostly inconsistent, contents: the replay's paths
/// (unmatched frees, reused addresses, sizes that overflow, segments events) must not panic.
fn shaped_snapshot() -> impl Strategy<Value = Value> {
    let block = (0i64..8, number(), any::<bool>()).prop_map(|(addr, size, live)| {
        dict(vec![
            ("address", Value::I64(addr)),
            ("size", Value::I64(size)),
            (
                "state",
                s(if live { "active_allocated" } else { "inactive" }),
            ),
            (
                "frames",
                Value::List(vec![dict(vec![
                    ("filename", s("a.py")),
                    ("name", s("__init__")),
                ])]),
            ),
        ])
    });
    let segment =
        (0i64..3, number(), prop::collection::vec(block, 0..6)).prop_map(|(dev, total, blocks)| {
            dict(vec![
                ("device", Value::I64(dev)),
                ("total_size", Value::I64(total)),
                ("allocated_size", Value::I64(total / 2)),
                ("blocks", Value::List(blocks)),
            ])
        });
    let event = (prop::sample::select(STRINGS), 0i64..8, number(), number()).prop_map(
        |(a, addr, size, t)| {
            dict(vec![
                ("action", s(a)),
                ("addr", Value::I64(addr)),
                ("size", Value::I64(size)),
                ("time_us", Value::I64(t)),
                ("frames", Value::List(vec![])),
            ])
        },
    );
    let trace = prop::collection::vec(event, 0..24).prop_map(Value::List);
    (
        prop::collection::vec(segment, 0..4),
        prop::collection::vec(trace, 0..3),
    )
        .prop_map(|(segs, traces)| {
            dict(vec![
                ("segments", Value::List(segs)),
                ("device_traces", Value::List(traces)),
            ])
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn shaped_snapshots_never_panic(v in shaped_snapshot()) {
        if let Ok(snap) = snapshot_from_value(&v, Path::new("shaped")) {
            for d in &snap.devices {
                prop_assert_eq!(d.timeline.len(), d.trace_events + 1);
            }
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let _ = parse_snapshot(&bytes, Path::new("random"));
        let mut pickled = vec![0x80, 0x04];
        pickled.extend_from_slice(&bytes);
        let _ = parse_snapshot(&pickled, Path::new("random-pickle"));
        let _ = parse_snapshot(&gzip(&pickled), Path::new("random.gz"));
    }

    #[test]
    fn hand_built_values_never_panic(v in snapshot_like()) {
        let _ = snapshot_from_value(&v, Path::new("value"));
        // The same value through serde-pickle's writer and this crate's decoder.
        if let Ok(bytes) = serde_pickle::value_to_vec(&v, serde_pickle::SerOptions::new()) {
            let _ = parse_snapshot(&bytes, Path::new("value.pickle"));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn truncated_fixture_never_panics(cut in 0usize..fixture_pickle().len()) {
        let raw = fixture_pickle();
        let r = parse_snapshot(raw.get(..cut).unwrap_or(raw), Path::new("truncated"));
        prop_assert!(r.is_err(), "a truncated pickle has no STOP opcode");
    }

    #[test]
    fn corrupted_fixture_never_panics(
        flips in prop::collection::vec((0usize..fixture_pickle().len(), any::<u8>()), 1..8)
    ) {
        let mut raw = fixture_pickle().to_vec();
        for (at, byte) in flips {
            if let Some(b) = raw.get_mut(at) {
                *b = byte;
            }
        }
        let _ = parse_snapshot(&raw, Path::new("corrupted"));
    }
}
