//! Times the simulation of one scenario as `twin bench` does (plan and schedule generation,
//! then the event simulation, repeated; median printed), with or without collapsed mode, so
//! that the flow model's collapsed runs can be measured next to the full ones
//! (docs/journal/2026-11-performance-history.md, "Flow model speed"). Run in release:
//! `cargo run --release -p twin-sim --example flow_speed -- FILE [REPEAT] [--collapse] [KEY=VALUE...]`
//! (scenario overrides as `twin simulate --set` takes them).

use std::path::PathBuf;
use std::time::Instant;
use twin_sim::engine::SimOptions;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let collapse = args.iter().any(|a| a == "--collapse");
    let overrides: Vec<String> = args.iter().filter(|a| a.contains('=')).cloned().collect();
    let mut positional = args
        .iter()
        .filter(|a| !a.starts_with("--") && !a.contains('='));
    let path = PathBuf::from(
        positional
            .next()
            .ok_or("usage: FILE [REPEAT] [--collapse]")?,
    );
    let repeat: usize = match positional.next() {
        Some(n) => n.parse()?,
        None => 5,
    };
    let scenario = twin_sim::setup::load(&path, &overrides)?;
    let opts = SimOptions {
        collapse,
        ..SimOptions::default()
    };
    let (mut gen_ms, mut sim_ms) = (Vec::new(), Vec::new());
    let mut last = None;
    for _ in 0..repeat.max(1) {
        let t0 = Instant::now();
        let staged = twin_sim::Staged::new(&scenario)?;
        let t1 = Instant::now();
        let result = staged.simulate(&opts)?;
        let t2 = Instant::now();
        gen_ms.push((t1 - t0).as_secs_f64() * 1e3);
        sim_ms.push((t2 - t1).as_secs_f64() * 1e3);
        last = Some(result);
    }
    let median = |v: &mut Vec<f64>| twin_sim::stats::median_or_zero(v);
    let r = last.ok_or("no run")?;
    println!(
        "{} collapse={} collapsed={} step_ns={} events={} gen_ms={:.1} sim_ms={:.1}",
        path.display(),
        collapse,
        r.collapsed,
        r.step_time_ns,
        r.events,
        median(&mut gen_ms),
        median(&mut sim_ms)
    );
    Ok(())
}
