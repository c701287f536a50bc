//! The trace size estimate against written traces: `trace::TRACE_BYTES_PER_EVENT` bytes per
//! op of the traced ranks' programs bounds the Chrome JSON written (the engine refuses a
//! trace beyond its byte limit on this estimate, before simulating), and does not overshoot
//! it by more than a factor of two, on every bundled scenario: the default trace (one rank
//! per pipeline stage) and, where the layout is small, every rank.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use std::path::{Path, PathBuf};
use twin_sim::setup::load;
use twin_sim::trace::{representative_ranks, TRACE_BYTES_PER_EVENT};
use twin_sim::{predict, PredictOptions};

fn bundled() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if p.is_dir() && !matches!(name.as_str(), "profiles" | "frameworks" | "checks") {
                walk(&p, out);
            } else if name.ends_with(".toml") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios"),
        &mut out,
    );
    out.sort();
    out
}

/// (bytes written, bytes estimated) for a trace of `ranks` (`None`: every rank).
fn written_and_estimated(path: &Path, ranks: Option<Vec<u32>>) -> (u64, u64) {
    let s = load(path, &[]).unwrap();
    let p = predict(
        &s,
        &PredictOptions {
            trace: true,
            collapse: ranks.is_some(),
            trace_ranks: ranks.clone(),
            reproducible: true,
            ..Default::default()
        },
    )
    .unwrap();
    let schedule = &p.staged.schedule;
    let traced: Vec<u32> = ranks.unwrap_or_else(|| (0..p.staged.plan.world).collect());
    let ops: u64 = traced
        .iter()
        .map(|&r| schedule.get_program(r).map_or(0, |p| p.ops.len() as u64))
        .sum();
    let trace = p.result.trace.as_ref().unwrap();
    assert_eq!(trace.events.len() as u64, ops, "{}", path.display());
    let json = trace
        .write_chrome_json(Vec::new(), &p.staged.plan, schedule)
        .unwrap();
    (json.len() as u64, ops * TRACE_BYTES_PER_EVENT)
}

#[test]
fn the_estimate_bounds_every_bundled_trace() {
    let files = bundled();
    assert!(files.len() >= 15, "{files:?}");
    let mut every_rank = 0;
    for f in &files {
        let s = load(f, &[]).unwrap();
        let plan = twin_sim::plan::Plan::new(&s).unwrap();
        let mut cases = vec![Some(representative_ranks(&plan))];
        if plan.world <= 64 {
            cases.push(None);
            every_rank += 1;
        }
        for ranks in cases {
            let (written, estimate) = written_and_estimated(f, ranks);
            assert!(
                written <= estimate && 2 * written >= estimate,
                "{}: {written} bytes written, {estimate} estimated",
                f.display()
            );
        }
    }
    assert!(every_rank >= 5, "{every_rank}");
}
