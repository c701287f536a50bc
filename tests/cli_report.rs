//! `twin report` and `--report`: one self-contained HTML file with the sections the command
//! has, and single SVG plots that parse, with their titles and axis descriptions.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

mod common;
use common::{scratch_dir, text, twin};

/// The limit for the 512xA100 report.
const MAX_REPORT_BYTES: u64 = 2_000_000;

fn run_ok(args: &[&str]) -> std::process::Output {
    let o = twin(args);
    assert!(
        o.status.success(),
        "twin {args:?} failed: {}",
        text(&o.stderr)
    );
    o
}

fn sections(html: &str) -> Vec<String> {
    html.match_indices("<section id=\"")
        .map(|(i, m)| {
            let rest = &html[i + m.len()..];
            rest[..rest.find('"').unwrap()].to_string()
        })
        .collect()
}

/// Nothing in the page is fetched: the only URLs are the SVG namespace.
fn assert_self_contained(html: &str) {
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(!html.contains("<script"), "the report needs no script");
    let ns = html.matches("xmlns=\"http://www.w3.org/2000/svg\"").count();
    assert_eq!(
        html.matches("http").count(),
        ns,
        "a URL other than the SVG namespace"
    );
    assert!(!html.contains(" src="), "nothing is loaded from elsewhere");
}

#[test]
fn report_of_512xa100_is_one_small_file_with_every_section() {
    let dir = scratch_dir("report");
    let out = dir.join("r.html");
    let o = run_ok(&[
        "report",
        "scenarios/512xA100.toml",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(text(&o.stderr).contains("wrote"), "{}", text(&o.stderr));
    let size = std::fs::metadata(&out).unwrap().len();
    assert!(size < MAX_REPORT_BYTES, "{size} bytes");
    let html = std::fs::read_to_string(&out).unwrap();
    assert_eq!(sections(&html), ["headline", "timeline", "memory"]);
    assert_eq!(html.matches("<svg").count(), 2);
    assert_self_contained(&html);
    // pp = 8: a row of the timeline and a memory chart per stage.
    for stage in 0..8 {
        assert!(
            html.contains(&format!("stage {stage} (rank ")),
            "stage {stage}"
        );
    }
    assert!(html.contains("gpt-100b-512xA100"));
}

#[test]
fn a_scenario_with_faults_adds_goodput_and_single_plots_are_svg_documents() {
    let dir = scratch_dir("report");
    let faults = "scenarios/512xA100-faults.toml";
    let html = dir.join("f.html");
    let seeds = "faults.seeds=20";
    run_ok(&[
        "report",
        faults,
        "--set",
        seeds,
        "-o",
        html.to_str().unwrap(),
    ]);
    let html = std::fs::read_to_string(&html).unwrap();
    assert_eq!(
        sections(&html),
        ["headline", "timeline", "memory", "goodput"]
    );
    assert!(html.contains("<th>ETTR</th>"));
    for (plot, title, x, y) in [
        (
            "memory",
            "Memory over the step",
            "time (ms)",
            "memory (GiB)",
        ),
        (
            "timeline",
            "Timeline of one step",
            "time in the step (ms)",
            "pipeline stage",
        ),
        (
            "goodput",
            "Goodput against checkpoint interval",
            "checkpoint interval (steps, log scale)",
            "fraction of wall time",
        ),
    ] {
        let o = run_ok(&["report", faults, "--set", seeds, "--plot", plot, "-o", "-"]);
        let svg = text(&o.stdout);
        let doc = roxmltree::Document::parse(&svg)
            .unwrap_or_else(|e| panic!("--plot {plot} is not XML: {e}"));
        assert!(doc.root_element().has_tag_name("svg"));
        let texts: Vec<String> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .map(|n| n.text().unwrap_or("").trim().to_string())
            .collect();
        for want in [title, x, y] {
            assert!(
                texts.iter().any(|t| t.starts_with(want)),
                "--plot {plot}: no `{want}`"
            );
        }
    }
}

#[test]
fn simulate_report_leaves_the_printed_report_unchanged() {
    let dir = scratch_dir("report");
    let out = dir.join("s.html");
    let base = ["simulate", "scenarios/small.toml", "--reproducible"];
    let plain = run_ok(&base);
    let with = run_ok(&[&base[..], &["--report", out.to_str().unwrap()]].concat());
    assert_eq!(text(&plain.stdout), text(&with.stdout));
    let html = std::fs::read_to_string(&out).unwrap();
    assert_eq!(sections(&html), ["headline", "timeline", "memory"]);
    assert_self_contained(&html);
}

#[test]
fn sweep_report_draws_the_layouts_and_lists_the_best_as_set_lines() {
    let dir = scratch_dir("report");
    let out = dir.join("sweep.html");
    run_ok(&[
        "sweep",
        "scenarios/small.toml",
        "--vary",
        "parallel.pp=1,2",
        "--quiet",
        "--report",
        out.to_str().unwrap(),
    ]);
    let html = std::fs::read_to_string(&out).unwrap();
    assert_eq!(sections(&html), ["headline", "sweep"]);
    assert!(html.contains("<code>--set parallel.pp="), "no --set line");
    assert_self_contained(&html);
}

#[test]
fn bad_report_arguments_exit_2_naming_what_is_missing() {
    let o = twin(&["report", "scenarios/small.toml", "--format", "svg"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("--plot"), "{}", text(&o.stderr));
    let o = twin(&[
        "report",
        "scenarios/small.toml",
        "--plot",
        "goodput",
        "-o",
        "-",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("[faults]"), "{}", text(&o.stderr));
    let dir = scratch_dir("report");
    let missing = dir.join("missing").join("r.html");
    let o = twin(&[
        "report",
        "scenarios/small.toml",
        "-o",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("--out"), "{}", text(&o.stderr));
}

#[test]
fn the_same_input_gives_byte_identical_reports() {
    for args in [
        &["report", "scenarios/small.toml", "-o", "-"][..],
        &[
            "report",
            "scenarios/512xA100-faults.toml",
            "--set",
            "faults.seeds=20",
            "--plot",
            "goodput",
            "-o",
            "-",
        ],
    ] {
        let (a, b) = (run_ok(args), run_ok(args));
        assert!(!a.stdout.is_empty());
        assert!(a.stdout == b.stdout, "twin {args:?} differs between runs");
    }
}

#[test]
fn simulate_horizon_report_adds_the_goodput_section() {
    let dir = scratch_dir("report");
    let out = dir.join("h.html");
    run_ok(&[
        "simulate",
        "scenarios/small.toml",
        "--horizon",
        "7d",
        "--seeds",
        "10",
        "--report",
        out.to_str().unwrap(),
    ]);
    let html = std::fs::read_to_string(&out).unwrap();
    assert_eq!(
        sections(&html),
        ["headline", "timeline", "memory", "goodput"]
    );
    assert!(html.contains("<th>ETTR</th>"));
}

/// `--format text` prints the report's figures (the simulate text: headline and memory per
/// stage) to stdout, and refuses a plot, which is a picture.
#[test]
fn text_format_prints_the_figures_and_refuses_a_plot() {
    let o = twin(&["report", "scenarios/small.toml", "--format", "text"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("step time") && out.contains("memory at peak"),
        "{out}"
    );
    assert!(!out.contains("<svg") && !out.contains("<html"), "{out}");
    let o = twin(&[
        "report",
        "scenarios/small.toml",
        "--format",
        "text",
        "--plot",
        "memory",
    ]);
    assert_eq!(o.status.code(), Some(2));
}

/// A scenario with `[variability]` adds the step time's spread (histogram and percentiles);
/// `--plot variability` draws it alone, and is refused where there is nothing to sample.
#[test]
fn a_scenario_with_variability_adds_the_step_times_spread() {
    let o = run_ok(&["report", "scenarios/variability.toml", "-o", "-"]);
    let html = text(&o.stdout);
    assert_self_contained(&html);
    assert_eq!(
        sections(&html),
        ["headline", "timeline", "memory", "variability"]
    );
    assert!(html.contains("P95 (ms)"), "the percentiles' table");
    let o = run_ok(&[
        "report",
        "scenarios/variability.toml",
        "--plot",
        "variability",
        "-o",
        "-",
    ]);
    let svg = text(&o.stdout);
    assert!(svg.starts_with("<svg") && svg.contains("Step time over the samples"));
    let o = twin(&[
        "report",
        "scenarios/small.toml",
        "--plot",
        "variability",
        "-o",
        "-",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("[variability]"));
}
