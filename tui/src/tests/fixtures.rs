//! Bundled scenarios simulated into UI states, and frames rendered to plain text.

use crate::measured::{parse_chrome_json, Measured};
use crate::worker::{compute, Outcome, Setup};
use crate::App;
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use twin_sim::setup::ParsedSource;

/// `scenarios/NAME` of this repository, parsed.
pub fn source(name: &str) -> ParsedSource {
    let path = format!("{}/../scenarios/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    ParsedSource::parse(&text, name).unwrap()
}

pub fn setup(name: &str, overrides: &[&str], collapse: bool) -> Setup {
    Setup {
        source: source(name),
        base_overrides: overrides.iter().map(|s| s.to_string()).collect(),
        pricing: twin_sim::profile::bundled::Pricing::Machine,
        collapse,
    }
}

pub fn outcome(setup: &Setup) -> Outcome {
    compute(setup, &[]).unwrap()
}

/// scenarios/small.toml, collapsed, no measured trace.
pub fn small() -> (App, Setup) {
    small_with(&[])
}

/// [`small`] with `--set` overrides.
pub fn small_with(overrides: &[&str]) -> (App, Setup) {
    let s = setup("small.toml", overrides, true);
    (App::new("small.toml".into(), outcome(&s), None), s)
}

/// scenarios/small.toml with every rank, and as the "measured" step the same scenario on a
/// slower NVLink (same schedule, other durations) read back from its trace file JSON.
pub fn small_with_measured() -> App {
    let s = setup("small.toml", &[], false);
    let base = outcome(&s);
    let slow = setup(
        "small.toml",
        &["cluster.intra_node.bandwidth_gb_per_s=40"],
        false,
    );
    let opts = twin_sim::PredictOptions {
        trace: true,
        reproducible: true,
        ..Default::default()
    };
    let scenario = slow.source.resolve(&slow.base_overrides).unwrap();
    let p = twin_sim::predict(&scenario, &opts).unwrap();
    let json = p.trace_json().unwrap();
    let plan = &p.staged.plan;
    let timeline = parse_chrome_json(&json, &|r| plan.stage_of(r)).unwrap();
    let measured = Measured {
        label: "measured.trace.json".into(),
        timeline,
        predicted: None,
        figures: None,
        snapshot: None,
    };
    App::new("small.toml".into(), base, Some(measured))
}

/// scenarios/512xA100-faults.toml with few trials, so the horizon is quick.
pub fn faults() -> App {
    let s = setup(
        "512xA100-faults.toml",
        &["faults.seeds=8", "faults.horizon=\"7d\""],
        true,
    );
    App::new("512xA100-faults.toml".into(), outcome(&s), None)
}

/// The frame of `app` at `width` x `height` as text, one line per row (trailing blanks cut).
pub fn frame(app: &App, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|f| crate::view::draw(f, app)).unwrap();
    let buf = terminal.backend().buffer();
    let mut out = String::new();
    for y in 0..height {
        let mut line = String::new();
        for x in 0..width {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
