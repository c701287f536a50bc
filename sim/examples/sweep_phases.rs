//! Where a layout search spends its time: parse + validate, plan, schedule generation,
//! collapsed simulation and report, summed over every layout of `--search` on a scenario
//! (single-threaded). `cargo run --release -p twin-sim --example sweep_phases [SCENARIO]`.

use std::time::{Duration, Instant};
use twin_sim::engine::SimOptions;
use twin_sim::plan::Plan;
use twin_sim::report::Report;
use twin_sim::setup::ScenarioSource;
use twin_sim::sweep::{search, SearchSpace};

fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "scenarios/512xA100.toml".to_string());
    let source = ScenarioSource::read(std::path::Path::new(&path)).expect("scenario");
    let base = source.resolve(&[]).expect("valid scenario");
    let layouts = search(&base, &SearchSpace::default());
    let mut t = [Duration::ZERO; 5];
    let (mut events, mut simulated) = (0u64, 0usize);
    let (mut caught, mut oom) = (0usize, 0usize);
    let opts = SimOptions {
        collapse: true,
        ..SimOptions::default()
    };
    for l in &layouts {
        let t0 = Instant::now();
        let Ok(s) = source.resolve(l) else { continue };
        let t1 = Instant::now();
        let Ok(plan) = Plan::new(&s) else { continue };
        let t2 = Instant::now();
        let static_bytes = (0..plan.pp())
            .map(|st| {
                let b = twin_sim::workload::state_bytes(&s, &plan, st);
                b.weights_bytes + b.grads_bytes + b.optimizer_bytes
            })
            .max()
            .unwrap_or(0);
        let over = static_bytes > s.cluster.gpu.usable_bytes();
        let Ok(schedule) = twin_sim::schedule::generate(&s, &plan) else {
            continue;
        };
        let t3 = Instant::now();
        let cost = twin_sim::cost::Analytic::new(&s);
        let Ok(r) = twin_sim::engine::simulate(&plan, &schedule, &cost, &opts) else {
            continue;
        };
        let t4 = Instant::now();
        let rep = Report::build(&s, &plan, &schedule, &r, 0.0);
        if over {
            caught += 1;
            assert!(!rep.fits, "static state over HBM but the simulation fits");
        }
        if !rep.fits {
            oom += 1;
        }
        let t5 = Instant::now();
        for (acc, d) in t
            .iter_mut()
            .zip([t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4])
        {
            *acc += d;
        }
        events += r.events;
        simulated += 1;
    }
    let total: Duration = t.iter().sum();
    println!("{oom} out of memory, {caught} of them already by their static model state");
    println!(
        "{} layouts, {simulated} simulated, {events} events",
        layouts.len()
    );
    for (name, d) in ["parse", "plan", "generate", "simulate", "report"]
        .iter()
        .zip(t)
    {
        println!(
            "{name:>9} {:>8.3} s  {:>5.1}%  {:>8.1} us/layout",
            d.as_secs_f64(),
            100.0 * d.as_secs_f64() / total.as_secs_f64(),
            d.as_secs_f64() * 1e6 / simulated.max(1) as f64
        );
    }
}
