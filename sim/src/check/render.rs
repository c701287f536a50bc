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
    /// The layout the scenario was simulated with.
    pub layout: crate::json::Layout,
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
        // Writing into memory cannot fail.
        CheckFormat::Junit => junit(files).unwrap_or_else(|e| format!("<!-- error: {e} -->\n")),
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
                    r.threshold_text.clone(),
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
    crate::json::document("check", &out).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
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

/// Text without the control characters XML 1.0 forbids (each becomes a space); quick-xml
/// escapes the rest.
fn xml_text(s: &str) -> String {
    s.chars()
        .map(|c| {
            if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// JUnit XML: `<testsuites>`, one `<testsuite>` per scenario file with its file as a
/// property, one `<testcase>` per check with a `<failure>` or `<skipped>` child.
fn junit(files: &[ScenarioChecks]) -> std::io::Result<String> {
    use quick_xml::events::{BytesDecl, BytesText, Event};
    let mut w = quick_xml::Writer::new_with_indent(Vec::new(), b' ', 2);
    w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
    let c = counts(all(files));
    let (tests, failures, skipped) = (
        c.checks.to_string(),
        c.failed.to_string(),
        c.not_evaluated.to_string(),
    );
    w.create_element("testsuites")
        .with_attributes([
            ("name", "twin check"),
            ("tests", tests.as_str()),
            ("failures", failures.as_str()),
            ("errors", "0"),
            ("skipped", skipped.as_str()),
        ])
        .write_inner_content(|w| {
            for f in files {
                let fc = counts(&f.checks);
                let (name, file) = (xml_text(&f.scenario), xml_text(&f.file));
                let (tests, failures, skipped) = (
                    fc.checks.to_string(),
                    fc.failed.to_string(),
                    fc.not_evaluated.to_string(),
                );
                w.create_element("testsuite")
                    .with_attributes([
                        ("name", name.as_str()),
                        ("tests", tests.as_str()),
                        ("failures", failures.as_str()),
                        ("errors", "0"),
                        ("skipped", skipped.as_str()),
                    ])
                    .write_inner_content(|w| {
                        w.create_element("properties").write_inner_content(|w| {
                            w.create_element("property")
                                .with_attributes([("name", "file"), ("value", file.as_str())])
                                .write_empty()?;
                            Ok(())
                        })?;
                        let classname = format!("twin.check.{name}");
                        for r in &f.checks {
                            let check = xml_text(&r.check);
                            let case = w.create_element("testcase").with_attributes([
                                ("name", check.as_str()),
                                ("classname", classname.as_str()),
                            ]);
                            match &r.outcome {
                                Outcome::Pass => {
                                    case.write_empty()?;
                                }
                                Outcome::Fail => {
                                    let msg = xml_text(&format!(
                                        "{} = {}, want {}",
                                        r.check,
                                        value_text(r),
                                        r.threshold_text
                                    ));
                                    case.write_inner_content(|w| {
                                        w.create_element("failure")
                                            .with_attributes([
                                                ("message", msg.as_str()),
                                                ("type", "threshold"),
                                            ])
                                            .write_text_content(BytesText::new(&msg))?;
                                        Ok(())
                                    })?;
                                }
                                Outcome::NotEvaluated(reason) => {
                                    let reason = xml_text(reason);
                                    case.write_inner_content(|w| {
                                        w.create_element("skipped")
                                            .with_attribute(("message", reason.as_str()))
                                            .write_empty()?;
                                        Ok(())
                                    })?;
                                }
                            }
                        }
                        Ok(())
                    })?;
            }
            Ok(())
        })?;
    let mut text = String::from_utf8_lossy(&w.into_inner()).into_owned();
    text.push('\n');
    Ok(text)
}
