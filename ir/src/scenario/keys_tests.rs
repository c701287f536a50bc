//! The schema table against what reads it: the generated key reference, the typed name tables
//! of choice keys, literal defaults, and the `Default` impls of the section types.

use super::keys::{self, Absent, Kind};
use super::{error::Ctx, parse, source};
use std::path::Path;

fn resolve(text: &str) -> parse::Resolved {
    let ctx = Ctx {
        origin: "<keys test>".into(),
    };
    let root = source::parse_document(&ctx, text).expect("valid TOML");
    match parse::resolve(&ctx, &root, Path::new("")) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    }
}

const MINIMAL: &str = crate::testing::MINIMAL_SCENARIO_TOML;

/// docs/reference/keys.md is the table's Markdown; `TWIN_BLESS=1` rewrites it.
#[test]
fn keys_doc_is_generated_from_the_table() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/reference/keys.md");
    let want = keys::markdown();
    if std::env::var_os("TWIN_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(&path, &want).expect("write keys.md");
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "docs/reference/keys.md is not the schema table's output: run \
         `TWIN_BLESS=1 cargo test -p twin-ir keys_doc` and commit it"
    );
}

#[test]
fn choice_rows_name_what_their_tables_read() {
    fn names<T>(t: &[(&str, T)]) -> Vec<String> {
        t.iter().map(|(n, _)| n.to_string()).collect()
    }
    let pairs: Vec<(keys::Key, Vec<String>)> = vec![
        (keys::training::PRECISION, names(&parse::PRECISIONS)),
        (keys::training::RECOMPUTE, names(&parse::RECOMPUTES)),
        (keys::training::OPTIMIZER, names(&parse::OPTIMIZERS)),
        (keys::training::OFFLOAD, names(&parse::OFFLOADS)),
        (keys::memory::ACCOUNTING, names(&parse::ACCOUNTINGS)),
        (keys::training::FRAMEWORK, names(&parse::FRAMEWORKS)),
        (keys::run::GRANULARITY, names(&parse::GRANULARITIES)),
        (
            keys::parallel::SCHEDULE,
            names(&super::types::PipelineSchedule::ALL),
        ),
        (
            keys::topology::MODEL,
            names(&super::topology::NETWORK_MODELS),
        ),
        (keys::topology::FABRIC, names(&super::topology::FABRICS)),
        (keys::faults::RESTART, names(&super::faults::RESTARTS)),
        (keys::faults::CHECKPOINT_MODE, names(&super::faults::MODES)),
        (
            keys::faults::DISTRIBUTION,
            names(&super::faults::DISTRIBUTIONS),
        ),
    ];
    for (key, table) in pairs {
        let Kind::Choice { names, .. } = key.kind else {
            panic!("{} is not a choice", key.name);
        };
        assert_eq!(names, table, "{}", key.name);
    }
}

#[test]
fn literal_defaults_are_allowed_values() {
    for g in keys::GROUPS {
        let mut seen = std::collections::HashSet::new();
        for k in g.keys {
            assert!(seen.insert(k.name), "[{}] lists {} twice", g.path, k.name);
            match (k.default, k.kind) {
                (Absent::Int(v), Kind::Uint { min, max }) => {
                    assert!((min..=max).contains(&v), "{}", k.name)
                }
                (Absent::Num(v), Kind::Number { zero_ok, max }) => {
                    assert!(v <= max && (v > 0.0 || (zero_ok && v == 0.0)), "{}", k.name)
                }
                (Absent::Flag(_), Kind::Bool) => {}
                (Absent::Is(n), Kind::Choice { names, .. }) => {
                    assert!(names.contains(&n), "{}", k.name)
                }
                (Absent::Is(_), Kind::Other(_)) => {}
                (Absent::Required | Absent::Note(_), _) => {}
                (d, kind) => panic!("{}: default {d:?} does not fit {kind:?}", k.name),
            }
        }
    }
}

/// The section types' `Default` impls (used when a section is absent and by code that
/// builds scenarios) equal what the table's defaults give for an empty section.
#[test]
fn section_defaults_agree_with_the_table() {
    let r = resolve(MINIMAL);
    assert_eq!(
        r.scenario.cluster.topology,
        super::NetworkTopology::default()
    );
    assert_eq!(r.scenario.memory, super::MemorySettings::default());
    let with_faults = resolve(&format!("{MINIMAL}\n[faults]\nseeds = 100\n"));
    assert_eq!(with_faults.faults, Some(super::FaultConfig::default()));
    let with_topology = resolve(&format!(
        "{MINIMAL}\n[cluster.topology]\nfabric = \"rail-optimized\"\n"
    ));
    assert_eq!(
        with_topology.scenario.cluster.topology,
        super::NetworkTopology::default()
    );
}

/// A reader applied to a key of another kind is an error that names the key, not a panic.
#[test]
fn a_reader_of_the_wrong_kind_is_an_error() {
    let ctx = Ctx {
        origin: "<keys test>".into(),
    };
    let root = source::parse_document(&ctx, "tp = 2\n").expect("valid TOML");
    let loc = super::error::Loc::File { line: 1, column: 1 };
    let s = super::read::Section::root(&ctx, &root, &loc);
    let e = s
        .boolean(&keys::parallel::TP)
        .expect_err("tp is an integer");
    assert!(e.to_string().contains("tp"), "{e}");
}
