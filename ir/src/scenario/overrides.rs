//! `--set key=value` overrides for what-if runs. Each override is merged into the located tree
//! before resolution, so it passes exactly the same validation as the file, and any error it
//! causes names the override (`--set parallel.pp=3: ...`) instead of a line of the file.

use super::error::{Ctx, ErrorKind, Loc, ScenarioError};
use super::source::{parse_override_value, Entry, Node, Table};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// Applies overrides in order (a later one wins over an earlier one for the same key).
pub(crate) fn apply(
    ctx: &Ctx,
    root: &mut Table,
    overrides: &[String],
) -> Result<(), ScenarioError> {
    for text in overrides {
        apply_one(ctx, root, text)?;
    }
    Ok(())
}

/// An override parsed: its key path and its value as a located entry.
struct Parsed {
    path: Vec<String>,
    entry: Entry,
}

/// Most parsed overrides a thread keeps (a search resolves each of a few dozen override
/// texts hundreds of thousands of times; a cache past this size is emptied, not grown).
const PARSED_KEPT: usize = 4096;

thread_local! {
    static PARSED: RefCell<HashMap<String, Rc<Parsed>>> = RefCell::new(HashMap::new());
}

/// [`parse_one`], remembered per thread by the override's text: parsing depends on nothing
/// but the text, and only successes are kept (an error is parsed again, for its message).
fn parsed(ctx: &Ctx, text: &str) -> Result<Rc<Parsed>, ScenarioError> {
    if let Some(p) = PARSED.with(|m| m.borrow().get(text).cloned()) {
        return Ok(p);
    }
    let p = Rc::new(parse_one(ctx, text)?);
    PARSED.with(|m| {
        let mut m = m.borrow_mut();
        if m.len() >= PARSED_KEPT {
            m.clear();
        }
        m.insert(text.to_string(), Rc::clone(&p));
    });
    Ok(p)
}

fn parse_one(ctx: &Ctx, text: &str) -> Result<Parsed, ScenarioError> {
    let loc = Loc::Override(text.into());
    let usage = "key=value, e.g. parallel.pp=16 (the value is TOML; a bare word is a string)";
    let Some((key_text, value_text)) = text.split_once('=') else {
        return Err(ctx.error(
            ErrorKind::Override,
            Some(&loc),
            "",
            "",
            "an override needs the form key=value",
            usage,
        ));
    };
    let path: Vec<String> = match toml_edit::Key::parse(key_text.trim()) {
        Ok(keys) if !keys.is_empty() => keys.iter().map(|k| k.get().to_string()).collect(),
        _ => {
            return Err(ctx.error(
                ErrorKind::Override,
                Some(&loc),
                key_text.trim(),
                "",
                "not a TOML key path",
                usage,
            ))
        }
    };
    let dotted = path.join(".");
    let entry = parse_override_value(ctx, text, &dotted, value_text)?;
    Ok(Parsed { path, entry })
}

fn apply_one(ctx: &Ctx, root: &mut Table, text: &str) -> Result<(), ScenarioError> {
    let parsed = parsed(ctx, text)?;
    let (path, entry) = (&parsed.path, parsed.entry.clone());
    // Only a missing parent table or an error needs these (not a search's every layout).
    let loc = || Loc::Override(text.into());
    let Some((leaf, parents)) = path.split_last() else {
        return Ok(());
    };
    let mut table = root;
    let mut walked = String::new();
    for part in parents {
        if !walked.is_empty() {
            walked.push('.');
        }
        walked.push_str(part);
        if table.get(part).is_none() {
            table.set(
                part,
                Entry {
                    node: Node::Table(Table::default()),
                    loc: loc(),
                    key_loc: loc(),
                    raw: "(table)".into(),
                },
            );
        }
        let Some(next) = table.get_mut(part) else {
            return Ok(());
        };
        match &mut next.node {
            Node::Table(t) => table = t,
            other => {
                let dotted = path.join(".");
                return Err(ctx.error(
                    ErrorKind::Override,
                    Some(&loc()),
                    &walked,
                    &next.raw,
                    format!(
                        "is {}, not a table, so `{dotted}` cannot be set inside it",
                        other.type_name()
                    ),
                    format!("set `{walked}` itself, or write it as a table in the file"),
                ));
            }
        }
    }
    table.set(leaf, entry);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{Document, ErrorKind, Scenario, ScenarioError};

    const TEXT: &str = crate::testing::MINIMAL_SCENARIO_TOML;

    fn resolve(origin: &str, overrides: &[&str]) -> Result<Scenario, ScenarioError> {
        let doc = Document::parse(TEXT, origin)?;
        let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        doc.validate(&overrides).map(|v| v.scenario)
    }

    /// An override resolved again (its parse remembered) gives the scenario its first
    /// resolution gave, and texts that share a key keep their own values.
    #[test]
    fn a_remembered_override_resolves_as_a_fresh_one() {
        let set = ["parallel.tp=2", "parallel.dp=4", "training.micro_batch=2"];
        let first = resolve("a.toml", &set).unwrap();
        let again = resolve("a.toml", &set).unwrap();
        assert_eq!(format!("{first:?}"), format!("{again:?}"));
        assert_eq!((again.parallel.tp, again.parallel.dp), (2, 4));
        let other = resolve("a.toml", &["parallel.tp=4", "parallel.dp=2"]).unwrap();
        assert_eq!((other.parallel.tp, other.parallel.dp), (4, 2));
    }

    /// A malformed override fails each time with the same message, and a valid override
    /// whose value the schema rejects names the override each time.
    #[test]
    fn override_errors_are_reported_every_time() {
        for _ in 0..2 {
            let e = resolve("a.toml", &["parallel.tp"]).expect_err("no value");
            assert_eq!(e.kind, ErrorKind::Override, "{e}");
            let e = resolve("a.toml", &["parallel.tp=[1"]).expect_err("bad TOML");
            assert_eq!(e.kind, ErrorKind::Syntax, "{e}");
            let e = resolve("a.toml", &["parallel.tp=\"two\""]).expect_err("a string");
            assert_eq!(e.key, "parallel.tp", "{e}");
            assert!(format!("{e}").contains("parallel.tp=\"two\""), "{e}");
        }
    }
}
