//! The `[faults]` section: parsed with defaults, located errors for bad values, no panics on
//! odd input, and the bundled 512-GPU faults scenario resolves.
#![cfg(test)]
// helpers too are test code, for clippy.toml's allow-*-in-tests

// ScenarioError is large by design (see scenario/mod.rs).
#![allow(clippy::result_large_err)]

use twin_sim::scenario::{CheckpointInterval, CheckpointMode, Distribution, RestartPolicy};
use twin_sim::setup::ParsedSource;

const BASE: &str = include_str!("../../scenarios/small.toml");

fn faults(
    section: &str,
) -> Result<Option<twin_sim::scenario::FaultConfig>, twin_sim::scenario::ScenarioError> {
    let text = format!("{BASE}\n{section}");
    ParsedSource::parse(&text, "t.toml")?
        .resolve_with_faults(&[])
        .map(|(_, _, f)| f)
}

#[test]
fn absent_section_is_none_and_empty_section_is_defaults() {
    assert_eq!(faults("").map_err(|e| e.to_string()), Ok(None));
    let d = faults("[faults]\n").ok().flatten();
    assert_eq!(d, Some(twin_sim::scenario::FaultConfig::default()));
}

#[test]
fn keys_resolve() {
    let c = faults(
        "[faults]\nhorizon = \"12h\"\nseeds = 7\nnode_mtbf_hours = 48\ndistribution = \"weibull\"\n\
         weibull_shape = 0.7\nrestart = \"elastic\"\ncheckpoint_every_minutes = 20\n\
         checkpoint_mode = \"async\"\nscheduled_s = [7200, 3600.5]\nin_memory_replicas = true\n",
    )
    .ok()
    .flatten()
    .unwrap_or_default();
    assert_eq!(c.horizon_ns, 12 * 3_600_000_000_000);
    assert_eq!(c.seeds, 7);
    assert!((c.node_failures_per_node_day - 0.5).abs() < 1e-12);
    assert_eq!(c.distribution, Distribution::Weibull { shape: 0.7 });
    assert_eq!(c.restart, RestartPolicy::Elastic);
    assert_eq!(c.checkpoint_interval, CheckpointInterval::Minutes(20.0));
    assert_eq!(c.checkpoint_mode, CheckpointMode::Async);
    assert_eq!(c.scheduled_ns, vec![3_600_500_000_000, 7_200_000_000_000]);
    assert!(c.in_memory_replicas);
}

#[test]
fn bad_values_name_key_and_line() {
    for (section, key) in [
        ("[faults]\nhorizon = \"forever\"\n", "faults.horizon"),
        ("[faults]\nrestart = \"hot-spare\"\n", "faults.restart"),
        ("[faults]\nnode_mtbf_hours = -1\n", "faults.node_mtbf_hours"),
        (
            "[faults]\nnode_mtbf_hours = 5\nnode_failures_per_node_day = 1\n",
            "faults.node_mtbf_hours",
        ),
        (
            "[faults]\ncheckpoint_every_steps = 0\n",
            "faults.checkpoint_every_steps",
        ),
        (
            "[faults]\nstraggler_slowdown = 0.5\n",
            "faults.straggler_slowdown",
        ),
        ("[faults]\nweibull_shape = 2\n", "faults.weibull_shape"),
        (
            "[faults]\nscheduled_s = [1, \"x\"]\n",
            "faults.scheduled_s[1]",
        ),
        (
            "[faults]\ncheckpoint_intervall = 3\n",
            "faults.checkpoint_intervall",
        ),
        ("[faults]\nseeds = 0\n", "faults.seeds"),
    ] {
        match faults(section) {
            Ok(_) => panic!("accepted: {section}"),
            Err(e) => {
                assert_eq!(e.key, key, "{section}");
                assert!(e.line.is_some(), "{section}: no line in {e}");
            }
        }
    }
}

#[test]
fn odd_inputs_never_panic() {
    let values = [
        "0",
        "-0.0",
        "1e308",
        "nan",
        "inf",
        "\"\"",
        "[]",
        "{}",
        "true",
        "9223372036854775807",
    ];
    for key in twin_sim::scenario::fault_keys() {
        for v in values {
            let _ = faults(&format!("[faults]\n{key} = {v}\n"));
        }
    }
}

#[test]
fn bundled_scenario_resolves_with_faults() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scenarios/512xA100-faults.toml"
    );
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let parsed = ParsedSource::parse(&text, path).map_err(|e| e.to_string());
    let got = parsed.and_then(|p| p.resolve_with_faults(&[]).map_err(|e| e.to_string()));
    match got {
        Ok((s, _, Some(f))) => {
            assert_eq!(s.cluster.gpus, 512);
            assert_eq!(f.horizon_ns, 30 * 86_400 * 1_000_000_000);
            assert!((f.node_failures_per_node_day - 0.0065).abs() < 1e-12);
        }
        other => panic!("{other:?}"),
    }
}
