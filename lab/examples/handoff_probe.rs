//! How long a stream hand-off takes after real work (docs/journal/2026-11-validation-history.md,
//! 2026-11-24): chains of one of a scenario's compute ops (compute stream) and empty ops, through
//! `run_step` on a one-rank `HostBackend` with a progress file, pinned to core 0, as a launched
//! rank runs. Four chains: on one stream; alternating with an empty op on the pp-send stream; with
//! the empty op hanging off each compute op while the compute stream goes on ("fan-out"); and the
//! fan-out with an allocation for the empty op (no turn to take: what `twin calibrate` measures as
//! `[host] handoff_ns`). Prints the median and 90th percentile gap from an op's end to the next
//! op's issue and start. PROBE_TURNS=1 gives the backend turns at its core, as the launcher does.
//!
//!   PROBE_TURNS=1 cargo run --release --manifest-path lab/Cargo.toml --example handoff_probe -- scenarios/host/pp.toml 4

mod common;

use std::error::Error;
use twin_sim::schedule::{Program, Schedule, Stream};

const LINKS: u32 = 40;
const ROUNDS: usize = 15;

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: handoff_probe SCENARIO [COMPUTE_OP]")?;
    let which: usize = match args.next() {
        Some(s) => s.parse().map_err(|e| format!("COMPUTE_OP {s:?}: {e}"))?,
        None => 0,
    };
    let program = common::rank0_program(&path)?;
    let real = common::compute_op(&program, which)?;
    let empty = twin_calibration::bench::compute::compute_op(Vec::new(), 0);
    let plan = twin_calibration::bench::launch::single_rank_plan()?;
    twin_runtime::launch::affinity::pin_rank(0);
    // 0: one stream; 1: alternating; 2: the empty op on the other stream hangs off each real
    // op while the compute stream goes on (its next real op depends only on the last real one);
    // 3: `twin calibrate`'s hand-off chain: as 2 with an allocation (freed later) for the empty
    // op, a stream op that takes no turn.
    for alternate in [0, 1, 2, 3] {
        if alternate == 3 {
            let schedule = twin_calibration::bench::launch::handoff_chain(&real);
            report(alternate, &plan, &schedule)?;
            continue;
        }
        let ops: Vec<_> = (0..2 * LINKS)
            .map(|i| {
                let deps = match (i, alternate) {
                    (0, _) => Vec::new(),
                    (i, 2) if i % 2 == 0 => vec![i - 2],
                    (i, _) => vec![i - 1],
                };
                let c = if i % 2 == 0 {
                    real.clone()
                } else {
                    empty.clone()
                };
                let mut o = twin_calibration::bench::compute::op(c, deps);
                if alternate > 0 && i % 2 == 1 {
                    o.stream = Stream::PpSend;
                }
                o
            })
            .collect();
        let schedule = Schedule {
            programs: vec![Program { stage: 0, ops }],
            program_of: vec![0],
        };
        report(alternate, &plan, &schedule)?;
    }
    Ok(())
}

/// Runs `schedule` (chain shape `alternate`; its first `2 * links` ops alternate a real op and
/// the op it releases) and prints the median and 90th percentile gaps.
fn report(
    alternate: usize,
    plan: &twin_sim::plan::Plan,
    schedule: &Schedule,
) -> Result<(), Box<dyn Error>> {
    let links = if alternate == 3 {
        twin_calibration::bench::launch::HANDOFF_LINKS
    } else {
        LINKS
    };
    let dir = std::env::temp_dir().join(format!("twin-handoff-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let turns = std::env::var("PROBE_TURNS")
        .is_ok()
        .then(twin_runtime::backend::host::turns::CoreTurns::private)
        .flatten();
    let mut backend = twin_runtime::backend::host::HostBackend::single()
        .with_progress(twin_runtime::launch::progress::Progress::create(&dir, 0))
        .with_turns(turns);
    // gaps[k]: after a real op (k = 0) or after an empty op (k = 1): [to issue, to start].
    let mut gaps: [[Vec<f64>; 2]; 2] = Default::default();
    for round in 0..ROUNDS {
        let run = twin_runtime::run_step(plan, schedule, 0, &mut backend)?;
        if round == 0 {
            continue;
        }
        let mut ev = run.events.clone();
        ev.retain(|e| e.op < 2 * links);
        ev.sort_by_key(|e| e.op);
        for w in ev.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            // Fan-out: only real op -> the op it releases is an edge.
            if alternate >= 2 && a.op % 2 == 1 {
                continue;
            }
            let k = (a.op % 2) as usize;
            let issued = b.issued_ns.unwrap_or(b.start_ns);
            gaps[k][0].push(issued.saturating_sub(a.end_ns) as f64 / 1e3);
            gaps[k][1].push(b.start_ns.saturating_sub(a.end_ns) as f64 / 1e3);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    for (k, g) in gaps
        .iter_mut()
        .enumerate()
        .filter(|(_, g)| !g[0].is_empty())
    {
        for v in g.iter_mut() {
            v.sort_by(f64::total_cmp);
        }
        let q = |v: &Vec<f64>, f: f64| v[((v.len() - 1) as f64 * f) as usize];
        println!(
            "{} after {} op: to issue median {:6.2} us (p90 {:6.2}), to start median {:6.2} us (p90 {:6.2})",
            ["one stream   ", "two streams  ", "fan-out      ", "fan-out alloc"][alternate],
            if k == 0 { "a real" } else { "an empty" },
            q(&g[0], 0.5),
            q(&g[0], 0.9),
            q(&g[1], 0.5),
            q(&g[1], 0.9)
        );
    }
    Ok(())
}
