//! The optimizer-state fit (`fit::state`) on a calibration's raw samples file, timed, with
//! and without the time since the last update (the decay): how much the decay explains and
//! what the fit costs (docs/journal/2026-11-validation-history.md, 2026-11-24).
//!
//!   cargo run --release -p twin-calibration --example state_fit_probe -- profile.samples.json

use std::error::Error;
use twin_calibration::fit::state::{self, StatePoint};

fn main() -> Result<(), Box<dyn Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: state_fit_probe SAMPLES_JSON")?;
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    let mut pts = Vec::new();
    let num = |x: &serde_json::Value, k: &str| x[k].as_f64().unwrap_or(f64::NAN);
    let runs = v["samples"]["state_update"]
        .as_array()
        .ok_or("no samples.state_update in the file")?;
    for x in runs {
        for t in x["kept_ns"].as_array().into_iter().flatten() {
            pts.push(StatePoint {
                other_bytes: num(x, "evict_bytes"),
                state_bytes: num(x, "state_bytes"),
                moved_bytes: num(x, "moved_bytes"),
                elapsed_ns: num(x, "elapsed_ns"),
                time_ns: t.as_f64().unwrap_or(f64::NAN),
            });
        }
    }
    let t = std::time::Instant::now();
    let f = state::fit(&pts, &state::grid(&pts), &state::WEIGHTS)?;
    println!(
        "{f:?}\n{} points, {:.2} s",
        pts.len(),
        t.elapsed().as_secs_f64()
    );
    for p in &mut pts {
        p.elapsed_ns = f64::NAN;
    }
    let t = std::time::Instant::now();
    let f = state::fit(&pts, &state::grid(&pts), &state::WEIGHTS)?;
    println!("untimed {f:?}\n{:.2} s", t.elapsed().as_secs_f64());
    Ok(())
}
