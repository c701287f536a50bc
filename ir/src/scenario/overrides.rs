//! `--set key=value` overrides for what-if runs. Each override is merged into the located tree
//! before resolution, so it passes exactly the same validation as the file, and any error it
//! causes names the override (`--set parallel.pp=3: ...`) instead of a line of the file.

use super::error::{Ctx, ErrorKind, Loc, ScenarioError};
use super::source::{parse_override_value, Entry, Node, Table};

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

fn apply_one(ctx: &Ctx, root: &mut Table, text: &str) -> Result<(), ScenarioError> {
    let loc = Loc::Override(text.to_string());
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
                    loc: loc.clone(),
                    key_loc: loc.clone(),
                    raw: "(table)".into(),
                },
            );
        }
        let Some(next) = table.get_mut(part) else {
            return Ok(());
        };
        let raw = next.raw.clone();
        match &mut next.node {
            Node::Table(t) => table = t,
            other => {
                return Err(ctx.error(
                    ErrorKind::Override,
                    Some(&loc),
                    &walked,
                    &raw,
                    format!(
                        "is a {}, not a table, so `{dotted}` cannot be set inside it",
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
