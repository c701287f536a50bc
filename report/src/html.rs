//! The HTML report: one file, inline SVG and a little CSS, no script and nothing fetched (the
//! favicon is an empty data URL, so a browser asks the network for nothing).

use crate::plot::{goodput_svg, memory_svg, pareto_svg, timeline_svg, variability_svg, verify_svg};
use crate::{Report, ReportError, Table};
use std::fmt::Write as _;

const STYLE: &str = "body{font-family:sans-serif;margin:24px auto;max-width:1000px;color:#222}\
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}\
table{border-collapse:collapse;margin:8px 0}td,th{padding:3px 10px;text-align:left;\
border-bottom:1px solid #eee}th{background:#f5f5f5}td.n{text-align:right}\
svg{max-width:100%;height:auto;display:block}code{font-size:13px}.note{color:#555}";

/// Escapes text for HTML element content and attribute values.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The SVG element of a plotters document (what follows any XML declaration).
fn inline(svg: &str) -> &str {
    svg.find("<svg").map_or(svg, |i| &svg[i..])
}

fn table(out: &mut String, t: &Table) {
    out.push_str("<table>");
    if !t.header.is_empty() {
        out.push_str("<tr>");
        for h in &t.header {
            let _ = write!(out, "<th>{}</th>", escape(h));
        }
        out.push_str("</tr>");
    }
    for row in &t.rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{}</td>", escape(cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>\n");
}

fn section(out: &mut String, id: &str, heading: &str, caption: &str, svg: &str) {
    let _ = write!(
        out,
        "<section id=\"{id}\">\n<h2>{}</h2>\n<p class=\"note\">{}</p>\n{}\n",
        escape(heading),
        escape(caption),
        inline(svg)
    );
}

/// The whole report as one HTML document; sections appear only for the data given, in the
/// order headline, timeline, memory, predicted against measured, sweep, goodput.
pub fn to_html(r: &Report) -> Result<String, ReportError> {
    let mut out = String::with_capacity(256 * 1024);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"generator\" content=\"twin\">\n<link rel=\"icon\" href=\"data:,\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n",
        escape(&r.title),
        escape(&r.title)
    );
    if !r.headline.is_empty() || !r.notes.is_empty() {
        out.push_str("<section id=\"headline\">\n<h2>Headline</h2>\n<table>");
        for f in &r.headline {
            let _ = write!(
                out,
                "<tr><th>{}</th><td class=\"n\">{}</td></tr>",
                escape(&f.label),
                escape(&f.value)
            );
        }
        out.push_str("</table>\n");
        for n in &r.notes {
            let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(n));
        }
        out.push_str("</section>\n");
    }
    if let Some(t) = &r.timeline {
        section(
            &mut out,
            "timeline",
            "Timeline",
            "One representative rank per pipeline stage: compute, communication that no compute \
             hides, and idle time (bubbles and waits).",
            &timeline_svg(t)?,
        );
        out.push_str("</section>\n");
    }
    if let Some(m) = &r.memory {
        section(
            &mut out,
            "memory",
            "Memory",
            "Live device memory of each stage's representative rank, stacked by category, \
             against the usable HBM (red); a red mark shows where memory first crosses it.",
            &memory_svg(m)?,
        );
        out.push_str("</section>\n");
    }
    if let Some(v) = &r.verify {
        section(
            &mut out,
            "verify",
            "Predicted against measured",
            "Each point is one compared time; on the grey diagonal the prediction is exact.",
            &verify_svg(v)?,
        );
        table(&mut out, &v.table);
        out.push_str("</section>\n");
    }
    if let Some(s) = &r.sweep {
        section(
            &mut out,
            "sweep",
            "Layouts",
            &format!(
                "Throughput against peak memory per GPU of every simulated layout; the green \
                 line is the Pareto front of the layouts that fit. The best by {}:",
                s.objective
            ),
            &pareto_svg(s)?,
        );
        out.push_str("<ol>\n");
        for &i in &s.top {
            if let Some(p) = s.points.get(i) {
                let _ = writeln!(
                    out,
                    "<li><code>{}</code> ({}: {:.0} tokens/s, {:.1} GiB)</li>",
                    escape(&p.set_line),
                    escape(&p.label),
                    p.tokens_per_s,
                    p.peak_bytes as f64 / (1u64 << 30) as f64
                );
            }
        }
        out.push_str("</ol>\n</section>\n");
    }
    if let Some(g) = &r.goodput {
        section(
            &mut out,
            "goodput",
            "Goodput",
            "Goodput (committed work over wall time) and ETTR (wall time on kept work over \
             wall time) against the checkpoint interval, with 95% confidence intervals over \
             the Monte Carlo trials.",
            &goodput_svg(g)?,
        );
        let mut t = Table {
            header: vec![
                "interval (steps)".into(),
                "goodput".into(),
                "goodput 95% CI".into(),
            ],
            rows: Vec::new(),
        };
        let with_ettr = g.points.iter().all(|p| p.ettr.is_some());
        if with_ettr {
            t.header.push("ETTR".into());
            t.header.push("ETTR 95% CI".into());
        }
        for p in &g.points {
            let mut row = vec![
                p.interval_steps.to_string(),
                format!("{:.4}", p.goodput.mean),
                format!("{:.4}\u{2013}{:.4}", p.goodput.low, p.goodput.high),
            ];
            if let Some(e) = p.ettr.filter(|_| with_ettr) {
                row.push(format!("{:.4}", e.mean));
                row.push(format!("{:.4}\u{2013}{:.4}", e.low, e.high));
            }
            t.rows.push(row);
        }
        table(&mut out, &t);
        out.push_str("</section>\n");
    }
    if let Some(v) = &r.variability {
        section(
            &mut out,
            "variability",
            "Step time under variability",
            &format!(
                "The step time of {} samples, each on a cluster drawn from the scenario's \
                 [variability] with every rank simulated; the grey line is the step without \
                 variation.",
                v.samples_ns.len()
            ),
            &variability_svg(v)?,
        );
        let ms = |ns: u64| format!("{:.3}", ns as f64 / 1e6);
        table(
            &mut out,
            &Table {
                header: vec![
                    "without variation (ms)".into(),
                    "P50 (ms)".into(),
                    "P95 (ms)".into(),
                    "P99 (ms)".into(),
                ],
                rows: vec![vec![
                    ms(v.deterministic_ns),
                    ms(v.p50_ns),
                    ms(v.p95_ns),
                    ms(v.p99_ns),
                ]],
            },
        );
        out.push_str("</section>\n");
    }
    out.push_str("</body>\n</html>\n");
    Ok(out)
}
