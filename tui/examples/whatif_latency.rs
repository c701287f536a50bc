//! How long a What-if edit takes to show its result: the worker's re-simulation (resolve the
//! edited scenario, predict with a trace, build the timeline) plus drawing the new frame. For
//! a scenario with `[faults]` the worker sends the horizon afterwards; it is not counted.
//! The figure docs/performance.md quotes. Build with --release:
//!
//!   cargo run --release -p twin-tui --example whatif_latency [SCENARIO] [REPEAT]

use ratatui::backend::TestBackend;
use ratatui::Terminal;
use std::time::Instant;
use twin_tui::update::{update, Msg};
use twin_tui::{compute, compute_step, App, Setup};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "scenarios/512xA100.toml".into());
    let repeat: usize = args.get(2).map_or(Ok(5), |r| r.parse())?;
    let text = std::fs::read_to_string(&path)?;
    let setup = Setup {
        source: twin_sim::setup::ParsedSource::parse(&text, &path)?,
        base_overrides: Vec::new(),
        pricing: twin_sim::profile::bundled::Pricing::Machine,
        collapse: true,
    };
    let mut app = App::new(path.clone(), compute(&setup, &[])?, None);
    // Edits a user makes in the What-if pane, each a different re-simulation.
    let edits: [&[&str]; 5] = [
        &["training.micro_batch=2"],
        &["training.recompute=\"full\""],
        &["parallel.schedule=\"interleaved-1f1b\"", "parallel.vpp=2"],
        &["parallel.zero=2"],
        &["training.overlap_grad_reduce=false"],
    ];
    let mut terminal = Terminal::new(TestBackend::new(160, 48))?;
    println!("{path}: what-if edit -> result on screen (re-simulate + apply + draw 160x48)");
    let mut all = Vec::new();
    for edit in edits {
        let overrides: Vec<String> = edit.iter().map(|s| s.to_string()).collect();
        let mut times = Vec::new();
        for _ in 0..repeat {
            let t0 = Instant::now();
            let result = compute_step(&setup, &overrides);
            let ok = result.is_ok();
            app.pending = Some(app.next_request);
            let id = app.next_request;
            app.next_request += 1;
            app = update(
                app,
                Msg::Simulated {
                    id,
                    result: Box::new(result),
                },
            )
            .0;
            terminal.draw(|f| twin_tui::view::draw(f, &app))?;
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            if !ok {
                break;
            }
            times.push(ms);
        }
        times.sort_by(|a, b| a.total_cmp(b));
        if times.is_empty() {
            println!("  {:<60} not valid for this scenario", edit.join(" "));
            continue;
        }
        println!(
            "  {:<60} median {:>7.1} ms  max {:>7.1} ms",
            edit.join(" "),
            twin_sim::stats::median_or_zero(&times),
            times[times.len() - 1]
        );
        all.extend(times);
    }
    all.sort_by(|a, b| a.total_cmp(b));
    println!(
        "  all edits: median {:.1} ms, max {:.1} ms over {} runs",
        twin_sim::stats::median_or_zero(&all),
        all[all.len() - 1],
        all.len()
    );
    Ok(())
}
