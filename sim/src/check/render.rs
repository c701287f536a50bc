//! Check results for people and machines: an aligned text table, JSON, a GitHub-flavoured
//! markdown table (for `$GITHUB_STEP_SUMMARY` or a PR comment), and JUnit XML (one
//! `<testsuite>` per scenario, one `<testcase>` per check) for CI test reporters.

use super::{format_number, CheckResult, Outcome};
use serde::Serialize;
use std::fmt::Write as _;

/// Output format of `twin check`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckFormat {
    Text,
    Json,
    Markdown,
    Junit,
}

/// The checks of one scenario file.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScenarioChecks {
    pub file: String,
    /// The scenario's `name`.
    pub scenario: String,
    pub checks: Vec<CheckResult>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
struct Counts {
    checks: usize,
    passed: usize,
    failed: usize,
    not_evaluated: usize,
}

fn counts<'a>(results: impl IntoIterator<Item = &'a CheckResult>) -> Counts {
    let mut c = Counts::default();
    for r in results {
        c.checks += 1;
        match r.outcome {
            Outcome::Pass => c.passed += 1,
            Outcome::Fail => c.failed += 1,
            Outcome::NotEvaluated(_) => c.not_evaluated += 1,
        }
    }
    c
}

fn all(files: &[ScenarioChecks]) -> impl Iterator<Item = &CheckResult> {
    files.iter().flat_map(|f| f.checks.iter())
}

/// The value column: booleans for fit checks, numbers otherwise, `-` when not measured.
fn value_text(r: &CheckResult) -> String {
    match r.value {
        None => "-".into(),
        Some(v) if r.check == "must_fit" || r.check.ends_with(".fits") => (v != 0.0).to_string(),
        Some(v) => format_number(v),
    }
}

fn result_text(r: &CheckResult) -> String {
    match &r.outcome {
        Outcome::Pass => "pass".into(),
        Outcome::Fail => "FAIL".into(),
        Outcome::NotEvaluated(reason) => reason.clone(),
    }
}

fn summary(c: Counts, files: usize) -> String {
    format!(
        "{} checks in {} scenario(s): {} passed, {} failed, {} not evaluated",
        c.checks, files, c.passed, c.failed, c.not_evaluated
    )
}

pub fn render(files: &[ScenarioChecks], format: CheckFormat) -> String {
    match format {
        CheckFormat::Text => text(files),
        CheckFormat::Json => json(files),
        CheckFormat::Markdown => markdown(files),
        CheckFormat::Junit => junit(files),
    }
}

fn rows(files: &[ScenarioChecks]) -> Vec<[String; 5]> {
    files
        .iter()
        .flat_map(|f| {
            f.checks.iter().map(move |r| {
                [
                    f.scenario.clone(),
                    r.check.clone(),
                    value_text(r),
                    r.threshold.clone(),
                    result_text(r),
                ]
            })
        })
        .collect()
}

const HEADER: [&str; 5] = ["scenario", "check", "value", "threshold", "result"];

fn text(files: &[ScenarioChecks]) -> String {
    let rows = rows(files);
    let mut widths = HEADER.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut o = String::new();
    let mut line = |cells: [&str; 5]| {
        let mut l = String::new();
        for (i, (w, c)) in widths.iter().zip(cells).enumerate() {
            if i == 2 {
                let _ = write!(l, "{c:>w$}  ");
            } else {
                let _ = write!(l, "{c:<w$}  ");
            }
        }
        o.push_str(l.trim_end());
        o.push('\n');
    };
    line(HEADER);
    for row in &rows {
        line([&row[0], &row[1], &row[2], &row[3], &row[4]]);
    }
    let _ = writeln!(o, "\n{}", summary(counts(all(files)), files.len()));
    o
}

#[derive(Serialize)]
struct JsonOut<'a> {
    passed: bool,
    summary: Counts,
    scenarios: &'a [ScenarioChecks],
}

fn json(files: &[ScenarioChecks]) -> String {
    let c = counts(all(files));
    let out = JsonOut {
        passed: c.failed == 0,
        summary: c,
        scenarios: files,
    };
    serde_json::to_string_pretty(&out).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// A table cell: pipes escaped, no line breaks.
fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

fn markdown(files: &[ScenarioChecks]) -> String {
    let c = counts(all(files));
    let mut o = String::from("## twin check\n\n");
    let verdict = if c.failed == 0 {
        "All checks passed"
    } else {
        "Some checks failed"
    };
    let _ = writeln!(o, "**{verdict}**: {}.\n", summary(c, files.len()));
    o.push_str("| scenario | check | value | threshold | result |\n");
    o.push_str("|---|---|---:|---|---|\n");
    for (row, r) in rows(files).iter().zip(all(files)) {
        let result = match &r.outcome {
            Outcome::Pass => "✅ pass".to_string(),
            Outcome::Fail => "❌ **fail**".to_string(),
            Outcome::NotEvaluated(reason) => format!("⚪ {reason}"),
        };
        let _ = writeln!(
            o,
            "| {} | `{}` | {} | {} | {} |",
            md_cell(&row[0]),
            md_cell(&row[1]),
            md_cell(&row[2]),
            md_cell(&row[3]),
            md_cell(&result)
        );
    }
    o
}

/// Text escaped for XML attributes and content.
fn xml(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => o.push(' '),
            c => o.push(c),
        }
    }
    o
}

fn junit(files: &[ScenarioChecks]) -> String {
    let c = counts(all(files));
    let mut o = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        o,
        "<testsuites name=\"twin check\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\">",
        c.checks, c.failed, c.not_evaluated
    );
    for f in files {
        let fc = counts(&f.checks);
        let _ = writeln!(
            o,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\">",
            xml(&f.scenario),
            fc.checks,
            fc.failed,
            fc.not_evaluated
        );
        let _ = writeln!(
            o,
            "    <properties><property name=\"file\" value=\"{}\"/></properties>",
            xml(&f.file)
        );
        for r in &f.checks {
            let open = format!(
                "    <testcase name=\"{}\" classname=\"twin.check.{}\"",
                xml(&r.check),
                xml(&f.scenario)
            );
            match &r.outcome {
                Outcome::Pass => {
                    let _ = writeln!(o, "{open}/>");
                }
                Outcome::Fail => {
                    let msg = format!("{} = {}, want {}", r.check, value_text(r), r.threshold);
                    let _ = writeln!(
                        o,
                        "{open}>\n      <failure message=\"{}\" type=\"threshold\">{}</failure>\n    </testcase>",
                        xml(&msg),
                        xml(&msg)
                    );
                }
                Outcome::NotEvaluated(reason) => {
                    let _ = writeln!(
                        o,
                        "{open}>\n      <skipped message=\"{}\"/>\n    </testcase>",
                        xml(reason)
                    );
                }
            }
        }
        o.push_str("  </testsuite>\n");
    }
    o.push_str("</testsuites>\n");
    o
}
