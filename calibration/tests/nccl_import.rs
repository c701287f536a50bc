//! nccl-tests import on the sample logs of tests/data (see its README): parsing of the header,
//! rank lines and rows; the alpha-beta fit reproduces each log's busbw; the written profile
//! loads with twin's profile loader.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_calibration::nccl_tests::{parse, ParseError, Test, Tier};

fn data(name: &str) -> (String, String) {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    (path, text)
}

const SINGLE_NODE: [(&str, Test, u32); 6] = [
    ("all_reduce_perf-8xA100.log", Test::AllReduce, 8),
    ("all_gather_perf-8xA100.log", Test::AllGather, 8),
    ("reduce_scatter_perf-8xA100.log", Test::ReduceScatter, 8),
    ("alltoall_perf-8xA100.log", Test::AllToAll, 8),
    ("broadcast_perf-8xA100.log", Test::Broadcast, 8),
    ("sendrecv_perf-2xA100.log", Test::SendRecv, 2),
];

#[test]
fn logs_parse_with_ranks_nodes_and_rows() {
    for (name, test, ranks) in SINGLE_NODE {
        let (origin, text) = data(name);
        let log = parse(&text, &origin).unwrap();
        assert_eq!(log.test, test, "{name}");
        assert_eq!((log.ranks, log.nodes), (ranks, 1), "{name}");
        assert_eq!(log.tier(), Tier::Intra);
        assert_eq!(log.gpu.as_deref(), Some("NVIDIA A100-SXM4-80GB"));
        assert!(log.rows.iter().all(|r| r.in_place.is_some()), "{name}");
    }
    let (origin, text) = data("all_reduce_perf-8xA100.log");
    let log = parse(&text, &origin).unwrap();
    assert_eq!(log.rows.len(), 28);
    let last = log.rows.last().unwrap();
    assert_eq!(last.size_bytes, 1 << 30);
    assert_eq!(last.count, 1 << 28);
    assert_eq!(last.dtype, "float");
    assert_eq!(last.redop.as_deref(), Some("sum"));
    assert_eq!(last.root, Some(-1));
    let (origin, text) = data("broadcast_perf-8xA100.log");
    assert_eq!(parse(&text, &origin).unwrap().rows[0].root, Some(0));
}

#[test]
fn multi_node_log_is_the_inter_tier() {
    let (origin, text) = data("all_reduce_perf-2x8xA100.log");
    let log = parse(&text, &origin).unwrap();
    assert_eq!((log.ranks, log.nodes, log.max_per_node), (16, 2, 8));
    assert_eq!(log.tier(), Tier::Inter);
    let f = log.fit(0).unwrap();
    // 192 GB/s ring over 8 rails: 24 GB/s per rail; 6 us per step.
    let rail = f.link_bandwidth_bytes_per_s.value;
    assert!((rail / 24e9 - 1.0).abs() < 0.03, "{rail}");
    assert!(
        (f.fit.latency_ns.value / 6_000.0 - 1.0).abs() < 0.15,
        "{:?}",
        f.fit
    );
}

#[test]
fn fits_reproduce_each_logs_busbw() {
    for name in SINGLE_NODE
        .iter()
        .map(|s| s.0)
        .chain(["all_reduce_perf-2x8xA100.log"])
    {
        let (origin, text) = data(name);
        let log = parse(&text, &origin).unwrap();
        let f = log.fit(0).unwrap();
        let mut checked = 0;
        for r in log
            .rows
            .iter()
            .filter(|r| r.out_of_place.busbw_gb_per_s >= 1.0)
        {
            let want = (r.out_of_place.busbw_gb_per_s + r.in_place.unwrap().busbw_gb_per_s) / 2.0;
            let got = f.busbw_gb_per_s(r.size_bytes);
            assert!(
                (got / want - 1.0).abs() < 0.04,
                "{name} size {}: fit {got:.2} GB/s, log {want:.2} GB/s",
                r.size_bytes
            );
            checked += 1;
        }
        assert!(checked >= 5, "{name}: only {checked} rows checked");
    }
}

#[test]
fn import_writes_a_profile_the_loader_reads() {
    let logs: Vec<(String, String)> = [
        "all_reduce_perf-8xA100.log",
        "all_gather_perf-8xA100.log",
        "all_reduce_perf-2x8xA100.log",
    ]
    .iter()
    .map(|n| data(n))
    .collect();
    let (base_origin, base_text) =
        twin_calibration::gpu_base::bundled_base("NVIDIA A100-SXM4-80GB").unwrap();
    let base = twin_sim::profile::parse_str(base_text, base_origin).unwrap();
    let out = twin_calibration::from_nccl_tests(&logs, &base, base_origin, 0).unwrap();
    let back = twin_sim::profile::parse_str(&out.toml, "imported").unwrap();
    assert_eq!(back.gpu, "a100-sxm-80gb");
    // Intra: 235 GB/s effective on the 300 GB/s NVLink line rate.
    let eff = back.intra.efficiency.value * back.intra.bandwidth_bytes_per_s.value;
    assert!((eff / 235e9 - 1.0).abs() < 0.03, "{eff}");
    // Inter: 24 GB/s per rail on the 25 GB/s HDR line rate.
    let eff = back.inter.efficiency.value * back.inter.bandwidth_bytes_per_s.value;
    assert!((eff / 24e9 - 1.0).abs() < 0.03, "{eff}");
    assert_eq!(back.gemm_max_efficiency, base.gemm_max_efficiency);
    assert_eq!(out.tiers.len(), 2);
}

#[test]
fn a_log_of_unknown_origin_is_an_actionable_error() {
    let (_, text) = data("all_gather_perf-8xA100.log");
    let e = parse(&text, "cluster.log").unwrap_err();
    assert!(matches!(e, ParseError::UnknownTest { .. }));
    assert!(e.to_string().contains("rename it"), "{e}");
    let e = parse("# Collective test starting: all_reduce_perf\n", "x.log").unwrap_err();
    assert!(matches!(e, ParseError::NoRanks { .. }), "{e}");
    let (origin, text) = data("all_reduce_perf-8xA100.log");
    let broken = text.replace("    22.53    0.00", "    fast    0.00");
    let e = parse(&broken, &origin).unwrap_err().to_string();
    assert!(e.contains("time is 'fast'"), "{e}");
}

/// A row whose `#wrong` column counts wrong elements is refused with its file and line; N/A
/// (checking disabled) and 0 are accepted.
#[test]
fn rows_with_wrong_results_are_refused() {
    let (origin, text) = data("all_reduce_perf-8xA100.log");
    let line_of = |t: &str, needle: &str| t.lines().position(|l| l.contains(needle)).unwrap() + 1;
    let row = "    22.53    0.00    0.00      0    21.92    0.00    0.00      0";
    assert!(text.contains(row));
    let line = line_of(&text, row);
    let bad = text.replace(
        row,
        "    22.53    0.00    0.00      0    21.92    0.00    0.00      3",
    );
    let e = parse(&bad, &origin).unwrap_err();
    assert_eq!(
        e,
        ParseError::Wrong {
            origin: origin.clone(),
            line,
            size_bytes: 8,
            place: "in-place",
            wrong: 3,
        }
    );
    assert!(e.to_string().contains(&format!("{origin}:{line}:")), "{e}");
    let bad = text.replace(
        row,
        "    22.53    0.00    0.00     12    21.92    0.00    0.00      0",
    );
    assert!(matches!(
        parse(&bad, &origin).unwrap_err(),
        ParseError::Wrong {
            place: "out-of-place",
            wrong: 12,
            ..
        }
    ));
    let unchecked = text.replace(
        row,
        "    22.53    0.00    0.00    N/A    21.92    0.00    0.00    N/A",
    );
    let log = parse(&unchecked, &origin).unwrap();
    assert_eq!(log.rows[0].out_of_place.wrong, None);
    assert_eq!(
        parse(&text, &origin).unwrap().rows[0].out_of_place.wrong,
        Some(0)
    );
    let garbled = text.replace(
        row,
        "    22.53    0.00    0.00      x    21.92    0.00    0.00      0",
    );
    let e = parse(&garbled, &origin).unwrap_err().to_string();
    assert!(
        e.contains("#wrong is 'x'") && e.contains("expected a result row"),
        "{e}"
    );
}
