//! Print a scenario file's schedule as JSON, to join with a trace by (rank, op index) when
//! studying a measured step op by op: `cargo run --release -p twin-sim --example schedule_json
//! -- scenarios/host/pp.toml > pp.schedule.json`.
use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: schedule_json SCENARIO.toml")?;
    let s = twin_sim::setup::load(std::path::Path::new(&path), &[])?;
    let plan = twin_sim::plan::Plan::new(&s)?;
    let sched = twin_sim::schedule::generate(&s, &plan)?;
    println!("{}", serde_json::to_string(&sched)?);
    Ok(())
}
