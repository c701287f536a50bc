//! Each plot parsed as XML: its title, axis descriptions with units, tick labels, and data
//! elements found by their colour, counted against the inputs and placed in the order of
//! their values. Legend markers use the same colours; each test adds the legend's own count.

use super::plot::{colour, downsample, histogram, pareto_front, shown_stages, tick};
use super::*;
use plotters::style::RGBColor;

const MS: u64 = 1_000_000;
const GIB: u64 = 1 << 30;

fn hex(c: RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

fn num(n: roxmltree::Node, attr: &str) -> f64 {
    n.attribute(attr)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("<{}> has no numeric {attr}", n.tag_name().name()))
}

/// Elements named `tag` whose `attr` is `value`, in document order.
fn with<'a>(
    doc: &'a roxmltree::Document,
    tag: &str,
    attr: &str,
    value: &str,
) -> Vec<roxmltree::Node<'a, 'a>> {
    doc.descendants()
        .filter(|n| n.has_tag_name(tag) && n.attribute(attr) == Some(value))
        .collect()
}

fn texts(doc: &roxmltree::Document) -> Vec<String> {
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| n.text().unwrap_or("").trim().to_string())
        .collect()
}

/// Points of a polyline or polygon.
fn points(n: roxmltree::Node) -> Vec<(f64, f64)> {
    n.attribute("points")
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|p| {
            let (x, y) = p.split_once(',')?;
            Some((x.parse().ok()?, y.parse().ok()?))
        })
        .collect()
}

/// The document parses, its root is an `<svg>`, and it has `title`, both axis descriptions
/// and at least two numeric tick labels.
fn check_frame(svg: &str, title: &str, x_desc: &str, y_desc: &str) {
    let doc = roxmltree::Document::parse(svg).expect("the plot is well-formed XML");
    assert!(doc.root_element().has_tag_name("svg"));
    let t = texts(&doc);
    for want in [title, x_desc, y_desc] {
        assert!(
            t.iter().any(|s| s.starts_with(want)),
            "no text `{want}` in {t:?}"
        );
    }
    let numeric = t.iter().filter(|s| s.parse::<f64>().is_ok()).count();
    assert!(numeric >= 2, "too few tick labels in {t:?}");
    assert!(
        doc.descendants().any(|n| n.has_tag_name("polyline")),
        "no axis or tick line"
    );
}

fn timeline() -> Timeline {
    let s = |a: u64, b: u64, kind| Span {
        start_ns: a * MS,
        end_ns: b * MS,
        kind,
    };
    Timeline {
        step_time_ns: 20 * MS,
        stages: vec![
            StageTimeline {
                stage: 0,
                rank: 0,
                spans: vec![
                    s(0, 10, SpanKind::Compute),
                    s(10, 12, SpanKind::ExposedComm),
                    s(12, 20, SpanKind::Idle),
                ],
            },
            StageTimeline {
                stage: 1,
                rank: 8,
                spans: vec![
                    s(0, 5, SpanKind::Idle),
                    s(5, 15, SpanKind::Compute),
                    s(15, 15, SpanKind::ExposedComm),
                    s(15, 20, SpanKind::Idle),
                ],
            },
        ],
    }
}

#[test]
fn timeline_has_a_bar_per_span_by_kind_stage_and_time() {
    let svg = timeline_svg(&timeline()).unwrap();
    check_frame(
        &svg,
        "Timeline of one step",
        "time in the step (ms)",
        "pipeline stage",
    );
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let compute = with(&doc, "rect", "fill", &hex(colour::COMPUTE));
    let comm = with(&doc, "rect", "fill", &hex(colour::COMM));
    let idle = with(&doc, "rect", "fill", &hex(colour::IDLE));
    // Data bars plus one legend block each; the empty span draws nothing.
    assert_eq!(
        (compute.len(), comm.len(), idle.len()),
        (2 + 1, 1 + 1, 3 + 1)
    );
    let t = texts(&doc);
    assert!(t.contains(&"stage 0 (rank 0)".to_string()), "{t:?}");
    assert!(t.contains(&"stage 1 (rank 8)".to_string()), "{t:?}");
    // Stage 0 is the top row; its compute bar (0-10 ms) starts left of stage 1's (5-15 ms).
    let (c0, c1) = (compute[0], compute[1]);
    assert!(num(c0, "y") < num(c1, "y"));
    assert!(num(c0, "x") < num(c1, "x"));
    // Widths are proportional to durations: 10 ms of compute against 2 ms of communication.
    let ratio = num(c0, "width") / num(comm[0], "width");
    assert!((ratio - 5.0).abs() < 0.3, "width ratio {ratio}");
    // Stage 1's bars tile its row: 5 + 10 + 5 ms, as wide as stage 0's 10 + 2 + 8 ms.
    let row_width = |y: f64| -> f64 {
        doc.descendants()
            .filter(|n| n.has_tag_name("rect") && n.attribute("y").map(str::parse) == Some(Ok(y)))
            .map(|n| num(n, "width"))
            .sum()
    };
    let (w0, w1) = (row_width(num(c0, "y")), row_width(num(c1, "y")));
    assert!((w0 - w1).abs() <= 3.0, "{w0} vs {w1}");
}

fn memory() -> Memory {
    let p = |t: u64, w: u64, a: u64| MemoryPoint {
        time_ns: t * MS,
        bytes: vec![w * GIB, a * GIB],
    };
    Memory {
        categories: vec!["weights".into(), "activations".into()],
        hbm_bytes: 25 * GIB,
        step_time_ns: 20 * MS,
        stages: vec![StageMemory {
            stage: 0,
            rank: 0,
            samples: vec![p(0, 10, 0), p(5, 10, 20), p(10, 10, 5), p(20, 10, 0)],
            over_hbm: Some(OverHbm {
                time_ns: 5 * MS,
                op: "fwd mb3".into(),
            }),
        }],
    }
}

#[test]
fn memory_stacks_categories_against_the_hbm_line_and_marks_the_crossing() {
    let svg = memory_svg(&memory()).unwrap();
    check_frame(&svg, "Memory over the step", "time (ms)", "memory (GiB)");
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let weights = with(&doc, "polygon", "fill", &hex(colour::CATEGORIES[0]));
    let acts = with(&doc, "polygon", "fill", &hex(colour::CATEGORIES[1]));
    assert_eq!((weights.len(), acts.len()), (1, 1));
    let top = |n: roxmltree::Node| points(n).iter().map(|p| p.1).fold(f64::MAX, f64::min);
    let bottom = |n: roxmltree::Node| points(n).iter().map(|p| p.1).fold(f64::MIN, f64::max);
    // Activations sit on the weights: the band's floor is the weights' top, and its peak (30
    // GiB) is above the 25 GiB line. Pixels grow downwards.
    let hbm: Vec<_> = with(&doc, "polyline", "stroke", &hex(colour::HBM));
    let hbm_y = hbm
        .iter()
        .map(|n| points(*n))
        .find(|p| p.len() == 2 && p[0].1 == p[1].1)
        .expect("a horizontal HBM line")[0]
        .1;
    assert!((bottom(acts[0]) - top(weights[0])).abs() < 1.0);
    assert!(top(acts[0]) < hbm_y && hbm_y < top(weights[0]));
    // 10 GiB of weights and 30 GiB at the peak, on one linear axis from 0.
    let zero = bottom(weights[0]);
    let ratio = (zero - top(acts[0])) / (zero - top(weights[0]));
    assert!((ratio - 3.0).abs() < 0.1, "peak/weights {ratio}");
    assert!(texts(&doc).contains(&"over HBM at fwd mb3".to_string()));
    assert_eq!(with(&doc, "circle", "fill", &hex(colour::HBM)).len(), 1);
}

#[test]
fn downsampling_keeps_each_buckets_highest_sample() {
    let p = |t: u64, b: u64| MemoryPoint {
        time_ns: t,
        bytes: vec![b],
    };
    // Buckets of 10 ns over [0, 99]: 0-9 holds a spike of 7 between lows.
    let samples = vec![p(0, 1), p(3, 7), p(6, 2), p(15, 4), p(95, 3)];
    let kept: Vec<(u64, u64)> = downsample(&samples, 99, 10)
        .iter()
        .map(|m| (m.time_ns, m.total_bytes()))
        .collect();
    assert_eq!(kept, vec![(3, 7), (15, 4), (95, 3)]);
}

#[test]
fn many_stages_show_sixteen_with_first_and_last() {
    assert_eq!(shown_stages(3), vec![0, 1, 2]);
    let s = shown_stages(64);
    assert_eq!(s.len(), 16);
    assert_eq!((s[0], s[15]), (0, 63));
    assert!(s.windows(2).all(|w| w[0] < w[1]));
}

fn sweep() -> Sweep {
    let p = |label: &str, gib: u64, ktok: f64, fits| SweepPoint {
        label: label.into(),
        set_line: format!("--set {label}"),
        tokens_per_s: ktok * 1e3,
        peak_bytes: gib * GIB,
        fits,
    };
    Sweep {
        points: vec![
            p("a", 20, 100.0, true),
            p("b", 30, 150.0, true),
            p("c", 25, 90.0, true),
            p("d", 90, 200.0, false),
        ],
        top: vec![1, 0, 2],
        pareto: vec![1, 0],
        objective: "tokens/s".into(),
        hbm_bytes: Some(80 * GIB),
    }
}

#[test]
fn the_pareto_line_runs_by_increasing_memory() {
    // The sweep's front, a (20 GiB) and b (30 GiB), given fastest first.
    assert_eq!(pareto_front(&sweep()), vec![0, 1]);
}

#[test]
fn pareto_has_a_point_per_layout_placed_by_memory_and_throughput() {
    let s = sweep();
    let svg = pareto_svg(&s).unwrap();
    check_frame(
        &svg,
        "Layouts: throughput against peak memory",
        "peak memory per GPU (GiB)",
        "throughput (thousand tokens/s)",
    );
    let doc = roxmltree::Document::parse(&svg).unwrap();
    // Fitting points are filled; the one that does not fit is a hollow ring.
    let filled = with(&doc, "circle", "fill", &hex(colour::FITS));
    let hollow: Vec<_> = with(&doc, "circle", "stroke", &hex(colour::NO_FIT))
        .into_iter()
        .filter(|n| n.attribute("fill") == Some("none"))
        .collect();
    assert_eq!((filled.len(), hollow.len()), (3 + 1, 1));
    // Data points in input order (a, b, c), then the legend's.
    let fits: Vec<_> = s.points.iter().filter(|p| p.fits).collect();
    for (i, j) in [(0, 1), (0, 2), (1, 2)] {
        let (pi, pj) = (fits[i], fits[j]);
        let (ci, cj) = (filled[i], filled[j]);
        assert_eq!(
            pi.peak_bytes < pj.peak_bytes,
            num(ci, "cx") < num(cj, "cx"),
            "x order of {i}, {j}"
        );
        assert_eq!(
            pi.tokens_per_s > pj.tokens_per_s,
            num(ci, "cy") < num(cj, "cy"),
            "y order of {i}, {j}"
        );
    }
    // The d point (90 GiB) is right of the HBM line (80 GiB).
    let hbm_x = with(&doc, "polyline", "stroke", &hex(colour::HBM))
        .iter()
        .map(|n| points(*n))
        .find(|p| p.len() == 2 && p[0].0 == p[1].0)
        .expect("a vertical HBM line")[0]
        .0;
    assert!(num(hollow[0], "cx") > hbm_x);
    // The front is a line through a and b.
    let front = with(&doc, "polyline", "stroke", &hex(colour::FITS));
    assert!(front.iter().any(|n| points(*n).len() == 2));
    // The best three are numbered.
    let t = texts(&doc);
    for k in ["1", "2", "3"] {
        assert!(t.contains(&k.to_string()), "no rank label {k} in {t:?}");
    }
}

fn goodput() -> Goodput {
    let ci = |m: f64| Ci {
        mean: m,
        low: m - 0.01,
        high: m + 0.01,
    };
    let p = |steps: u64, g: f64, e: f64| GoodputPoint {
        interval_steps: steps,
        goodput: ci(g),
        ettr: Some(ci(e)),
    };
    Goodput {
        points: vec![p(10, 0.80, 0.85), p(100, 0.90, 0.93), p(1000, 0.70, 0.75)],
        configured_steps: 100,
        best_steps: 100,
        young_steps: 120.0,
        daly_steps: 130.0,
        horizon_hours: 720.0,
        seeds: 50,
    }
}

#[test]
fn goodput_has_points_and_bars_for_both_series_on_a_log_axis() {
    let g = goodput();
    let svg = goodput_svg(&g).unwrap();
    check_frame(
        &svg,
        "Goodput against checkpoint interval",
        "checkpoint interval (steps, log scale)",
        "fraction of wall time",
    );
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let gp = with(&doc, "circle", "fill", &hex(colour::GOODPUT));
    let et = with(&doc, "circle", "fill", &hex(colour::ETTR));
    assert_eq!((gp.len(), et.len()), (3 + 1, 3 + 1));
    // Equal ratios of interval are equal distances on the log axis.
    let x: Vec<f64> = gp.iter().take(3).map(|n| num(*n, "cx")).collect();
    assert!(x[0] < x[1] && x[1] < x[2]);
    assert!(((x[1] - x[0]) - (x[2] - x[1])).abs() <= 1.5, "{x:?}");
    // The best goodput (100 steps) is the highest point; ETTR lies above goodput.
    let y: Vec<f64> = gp.iter().take(3).map(|n| num(*n, "cy")).collect();
    assert!(y[1] < y[0] && y[0] < y[2]);
    assert!(num(et[0], "cy") < y[0]);
    // An error bar per point and series: vertical two-point lines in the series' colour.
    let bars = |c: RGBColor| {
        with(&doc, "polyline", "stroke", &hex(c))
            .iter()
            .map(|n| points(*n))
            .filter(|p| p.len() == 2 && p[0].0 == p[1].0)
            .count()
    };
    assert_eq!(bars(colour::GOODPUT), 3);
    assert_eq!(bars(colour::ETTR), 3);
}

#[test]
fn verify_has_a_point_per_pair_and_the_diagonal() {
    let v = Verify {
        times: vec![
            VerifyPair {
                label: "step".into(),
                predicted_s: 0.010,
                measured_s: 0.012,
            },
            VerifyPair {
                label: "gemm".into(),
                predicted_s: 0.006,
                measured_s: 0.005,
            },
        ],
        table: Table::default(),
    };
    let svg = verify_svg(&v).unwrap();
    check_frame(
        &svg,
        "Predicted against measured time",
        "predicted (ms)",
        "measured (ms)",
    );
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let pts = with(&doc, "circle", "fill", &hex(colour::POINT));
    assert_eq!(pts.len(), 2 + 1);
    // step: measured above predicted, so above the diagonal (smaller y than x would give).
    assert!(num(pts[0], "cx") > num(pts[1], "cx"));
    assert!(num(pts[0], "cy") < num(pts[1], "cy"));
    let t = texts(&doc);
    assert!(t.contains(&"step".to_string()) && t.contains(&"gemm".to_string()));
}

#[test]
fn html_has_each_given_section_and_no_script() {
    let full = Report {
        title: "twin report: <a & b>".into(),
        headline: vec![Figure {
            label: "step time".into(),
            value: "1.000 s".into(),
        }],
        notes: vec![],
        timeline: Some(timeline()),
        memory: Some(memory()),
        verify: None,
        sweep: Some(sweep()),
        goodput: Some(goodput()),
        variability: Some(spread()),
    };
    let html = to_html(&full).unwrap();
    for id in [
        "headline",
        "timeline",
        "memory",
        "sweep",
        "goodput",
        "variability",
    ] {
        assert!(html.contains(&format!("<section id=\"{id}\">")), "{id}");
    }
    assert!(!html.contains("<section id=\"verify\">"));
    assert_eq!(html.matches("<svg").count(), 5);
    assert!(!html.contains("<script"));
    assert!(html.contains("twin report: &lt;a &amp; b&gt;"));
    assert!(html.contains("<code>--set b</code>"));
    // No reference leaves the file.
    assert_eq!(
        html.matches("http").count(),
        html.matches("xmlns=\"http://www.w3.org/2000/svg\"").count()
    );
    let empty = to_html(&Report::default()).unwrap();
    assert!(!empty.contains("<section"));
}

#[test]
fn a_missing_section_is_an_error_naming_the_plot() {
    let err = Report::default().plot_svg(Plot::Pareto).unwrap_err();
    assert!(err.to_string().contains("pareto"), "{err}");
}

#[test]
fn ticks_have_three_significant_digits() {
    assert_eq!(tick(&0.0), "0");
    assert_eq!(tick(&1234.4), "1234");
    assert_eq!(tick(&12.34), "12.3");
    assert_eq!(tick(&2.5), "2.5");
    assert_eq!(tick(&0.1234), "0.123");
}

fn spread() -> StepSpread {
    // Ten samples from 100 to 109 ms (one each), the prediction at 95 ms.
    StepSpread {
        deterministic_ns: 95 * MS,
        samples_ns: (0..10).map(|i| (100 + i) * MS).collect(),
        p50_ns: 104 * MS,
        p95_ns: 109 * MS,
        p99_ns: 109 * MS,
    }
}

#[test]
fn histogram_counts_every_sample_once_in_its_bin() {
    let samples = [0, 1, 2, 5, 9, 10];
    // Bins over [0, 10]: [0, 2.5), [2.5, 5), [5, 7.5), [7.5, 10] (the last one closed).
    assert_eq!(histogram(&samples, 0, 10, 4), vec![3, 0, 1, 2]);
    assert_eq!(histogram(&[7, 7, 7], 7, 7, 3), vec![3, 0, 0]);
    let many: Vec<u64> = (0..1000).collect();
    assert_eq!(histogram(&many, 0, 999, 10).iter().sum::<u32>(), 1000);
}

#[test]
fn variability_has_the_samples_bars_and_a_line_per_percentile() {
    let v = spread();
    let svg = variability_svg(&v).unwrap();
    check_frame(
        &svg,
        "Step time over the samples",
        "step time (ms)",
        "samples",
    );
    let doc = roxmltree::Document::parse(&svg).unwrap();
    // ceil(sqrt(10)) = 4 bins of 3.5 ms over 95-109 ms: [95, 98.5) is empty, and the samples
    // fall 2 (100, 101), 4 (102-105) and 4 (106-109); the empty bin draws nothing.
    let bars = with(&doc, "rect", "fill", &hex(colour::SAMPLES));
    assert_eq!(bars.len(), 3 + 1, "three data bars and the legend's block");
    let heights: Vec<f64> = bars[..3].iter().map(|b| num(*b, "height")).collect();
    assert!((heights[1] - heights[2]).abs() < 1.0, "{heights:?}");
    assert!(
        (heights[1] / heights[0] - 2.0).abs() < 0.02,
        "4 samples against 2: {heights:?}"
    );
    // Bars left to right in time.
    assert!(num(bars[0], "x") < num(bars[1], "x") && num(bars[1], "x") < num(bars[2], "x"));
    for c in [colour::DIAGONAL, colour::P50, colour::P95, colour::P99] {
        let lines = with(&doc, "polyline", "stroke", &hex(c));
        assert!(lines.len() >= 2, "a line and its legend mark in {}", hex(c));
    }
    // The prediction's line (95 ms) lies left of the P50 line (104 ms).
    let x_of = |c| points(with(&doc, "polyline", "stroke", &hex(c))[0])[0].0;
    assert!(x_of(colour::DIAGONAL) < x_of(colour::P50));
    let empty = StepSpread {
        samples_ns: Vec::new(),
        ..v
    };
    assert!(variability_svg(&empty).is_err());
}
