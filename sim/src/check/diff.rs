//! `twin diff`: two reports side by side with the change of each headline field, for
//! reviewing a configuration change before it costs GPU hours.

use super::format_number;
use crate::report::Report;
use serde::Serialize;
use std::fmt::Write as _;

/// One compared field.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiffRow {
    pub field: &'static str,
    pub a: f64,
    pub b: f64,
    /// `b - a`.
    pub delta: f64,
    /// `(b - a) / a`; `None` when `a` is zero.
    pub delta_fraction: Option<f64>,
}

/// Headline fields of both reports, in report order.
pub fn diff_reports(a: &Report, b: &Report) -> Vec<DiffRow> {
    type Field = (&'static str, fn(&Report) -> f64);
    let fields: [Field; 14] = [
        ("step_time_s", |r| r.step_time_s),
        ("tokens_per_s", |r| r.tokens_per_s),
        ("tokens_per_s_per_gpu", |r| r.tokens_per_s_per_gpu),
        ("model_tflops_per_gpu", |r| r.model_tflops_per_gpu),
        ("hardware_tflops_per_gpu", |r| r.hardware_tflops_per_gpu),
        ("mfu", |r| r.mfu),
        ("hfu", |r| r.hfu),
        ("bubble_fraction", |r| r.bubble_fraction),
        ("exposed_comm_fraction", |r| r.exposed_comm_fraction),
        ("peak_memory_bytes", |r| r.peak_memory_bytes as f64),
        ("hbm_free_bytes", |r| r.hbm_free_bytes as f64),
        ("fits", |r| if r.fits { 1.0 } else { 0.0 }),
        ("world", |r| f64::from(r.world)),
        ("microbatches", |r| f64::from(r.microbatches)),
    ];
    fields
        .iter()
        .map(|&(field, get)| {
            let (va, vb) = (get(a), get(b));
            DiffRow {
                field,
                a: va,
                b: vb,
                delta: vb - va,
                delta_fraction: (va != 0.0).then(|| (vb - va) / va),
            }
        })
        .collect()
}

fn cells(r: &DiffRow) -> [String; 5] {
    let shown = |v: f64| {
        if r.field == "fits" {
            (v != 0.0).to_string()
        } else {
            format_number(v)
        }
    };
    let delta = if r.field == "fits" {
        if r.delta == 0.0 { "=" } else { "changed" }.to_string()
    } else if r.delta == 0.0 {
        "=".to_string()
    } else {
        format!(
            "{}{}",
            if r.delta > 0.0 { "+" } else { "" },
            format_number(r.delta)
        )
    };
    let pct = match r.delta_fraction {
        Some(f) if r.field != "fits" && f != 0.0 => format!("{:+.2}%", f * 100.0),
        _ => String::new(),
    };
    [r.field.to_string(), shown(r.a), shown(r.b), delta, pct]
}

/// An aligned text table (`markdown = false`) or a GitHub-flavoured markdown table.
pub fn render_diff(rows: &[DiffRow], a_name: &str, b_name: &str, markdown: bool) -> String {
    let header = [
        "field".to_string(),
        a_name.to_string(),
        b_name.to_string(),
        "delta".to_string(),
        "change".to_string(),
    ];
    let body: Vec<[String; 5]> = rows.iter().map(cells).collect();
    let mut o = String::new();
    if markdown {
        let esc = |s: &str| s.replace('|', "\\|");
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} |",
            header[0],
            esc(&header[1]),
            esc(&header[2]),
            header[3],
            header[4]
        );
        o.push_str("|---|---:|---:|---:|---:|\n");
        for c in &body {
            let _ = writeln!(
                o,
                "| `{}` | {} | {} | {} | {} |",
                c[0], c[1], c[2], c[3], c[4]
            );
        }
        return o;
    }
    let mut widths = header.clone().map(|h| h.chars().count());
    for c in &body {
        for (w, cell) in widths.iter_mut().zip(c) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for c in std::iter::once(&header).chain(&body) {
        let mut l = String::new();
        for (i, (w, cell)) in widths.iter().zip(c).enumerate() {
            if i == 0 {
                let _ = write!(l, "{cell:<w$}  ");
            } else {
                let _ = write!(l, "{cell:>w$}  ");
            }
        }
        o.push_str(l.trim_end());
        o.push('\n');
    }
    o
}
