//! The scenario as written: a small TOML tree in which every key and value remembers where it
//! came from (a line and column in the file, or a `--set` override). The resolver reads this
//! tree, so any error it raises can point at the exact spot, and overrides are merged into it
//! before anything is resolved.

use super::error::{shorten, Ctx, ErrorKind, LineIndex, Loc, ScenarioError};
use std::ops::Range;
use std::sync::Arc;

/// A TOML value with its position.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub node: Node,
    /// Where the value starts.
    pub loc: Loc,
    /// Where the key that names it starts (equal to `loc` for array items and overrides).
    pub key_loc: Loc,
    /// The value as written (shortened), for error messages (shared by the copies a sweep
    /// makes of the entry).
    pub raw: Arc<str>,
}

#[derive(Clone, Debug)]
pub(crate) enum Node {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Datetime,
    Array(Vec<Entry>),
    Table(Table),
}

impl Node {
    /// The value's TOML type with its article, for "found ..." in errors.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Node::Str(_) => "a string",
            Node::Int(_) => "an integer",
            Node::Float(_) => "a float",
            Node::Bool(_) => "a boolean",
            Node::Datetime => "a datetime",
            Node::Array(_) => "an array",
            Node::Table(_) => "a table",
        }
    }
}

/// Key/value pairs in document order (TOML forbids duplicate keys, so a key appears once).
/// The pairs are shared between copies of a table until one of them changes (copy on write):
/// a sweep copies the whole document for every layout and overrides a few keys, so a copy
/// costs a count per table and an override copies only the tables on its path.
#[derive(Clone, Debug, Default)]
pub(crate) struct Table {
    entries: Arc<Vec<(String, Entry)>>,
}

impl Table {
    /// The pairs, in document order.
    pub(crate) fn entries(&self) -> &[(String, Entry)] {
        &self.entries
    }

    pub(crate) fn get(&self, key: &str) -> Option<&Entry> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, e)| e)
    }

    /// `key`'s entry, for changing it (this table's pairs are copied first when shared).
    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut Entry> {
        Arc::make_mut(&mut self.entries)
            .iter_mut()
            .find(|(k, _)| k == key)
            .map(|(_, e)| e)
    }

    /// Sets `key`, replacing an existing value in place (keeps document order).
    pub(crate) fn set(&mut self, key: &str, entry: Entry) {
        match self.get_mut(key) {
            Some(e) => *e = entry,
            None => self.push(key, entry),
        }
    }

    /// Appends `key`, which the table does not hold yet.
    fn push(&mut self, key: &str, entry: Entry) {
        Arc::make_mut(&mut self.entries).push((key.to_string(), entry));
    }
}

/// Where positions of converted values come from.
enum Origin<'a> {
    File {
        text: &'a str,
        index: &'a LineIndex<'a>,
    },
    Override(&'a str),
}

impl Origin<'_> {
    fn loc(&self, span: Option<Range<usize>>, fallback: &Loc) -> Loc {
        match (self, span) {
            (Origin::File { index, .. }, Some(span)) => index.loc(span.start),
            (Origin::Override(text), _) => Loc::Override((*text).into()),
            (Origin::File { .. }, None) => fallback.clone(),
        }
    }

    fn raw(&self, span: Option<Range<usize>>, fallback: &str) -> String {
        match (self, span) {
            (Origin::File { text, .. }, Some(span)) => text
                .get(span)
                .map(shorten)
                .unwrap_or_else(|| shorten(fallback)),
            _ => shorten(fallback),
        }
    }
}

/// Parses a TOML document into a located tree.
pub(crate) fn parse_document(ctx: &Ctx, text: &str) -> Result<Table, ScenarioError> {
    let doc = toml_edit::Document::parse(text).map_err(|e| {
        let index = LineIndex::new(text);
        let loc = e.span().map(|s| index.loc(s.start));
        ctx.error(
            ErrorKind::Syntax,
            loc.as_ref(),
            "",
            "",
            format!("TOML syntax error: {}", e.message().trim()),
            "",
        )
    })?;
    let index = LineIndex::new(text);
    let origin = Origin::File {
        text,
        index: &index,
    };
    let top = Loc::File { line: 1, column: 1 };
    Ok(convert_table(&origin, doc.as_table(), &top))
}

/// Parses one override value: TOML syntax, or a bare word taken as a string.
pub(crate) fn parse_override_value(
    ctx: &Ctx,
    override_text: &str,
    key: &str,
    value_text: &str,
) -> Result<Entry, ScenarioError> {
    let loc = Loc::Override(override_text.into());
    let origin = Origin::Override(override_text);
    match value_text.trim().parse::<toml_edit::Value>() {
        Ok(v) => Ok(convert_value(&origin, &v, &loc, &loc)),
        Err(e) => {
            let looks_like_toml = value_text.trim_start().starts_with(['"', '\'', '[', '{']);
            if looks_like_toml {
                Err(ctx.error(
                    ErrorKind::Syntax,
                    Some(&loc),
                    key,
                    &shorten(value_text),
                    format!("not a TOML value: {}", e.message().trim()),
                    "a TOML value (8, 1.5, true, \"text\", [1, 2], {a = 1}) or a bare word",
                ))
            } else {
                Ok(Entry {
                    node: Node::Str(value_text.to_string()),
                    loc: loc.clone(),
                    key_loc: loc,
                    raw: shorten(&format!("{:?}", value_text)).into(),
                })
            }
        }
    }
}

fn convert_table(origin: &Origin<'_>, table: &toml_edit::Table, here: &Loc) -> Table {
    let mut out = Table::default();
    for (key, item) in table.iter() {
        let key_loc = origin.loc(table.key(key).and_then(|k| k.span()), here);
        if let Some(entry) = convert_item(origin, item, &key_loc) {
            out.push(key, entry);
        }
    }
    out
}

fn convert_item(origin: &Origin<'_>, item: &toml_edit::Item, key_loc: &Loc) -> Option<Entry> {
    match item {
        toml_edit::Item::None => None,
        toml_edit::Item::Value(v) => Some(convert_value(origin, v, key_loc, key_loc)),
        toml_edit::Item::Table(t) => {
            let loc = origin.loc(t.span(), key_loc);
            Some(Entry {
                node: Node::Table(convert_table(origin, t, &loc)),
                loc,
                key_loc: key_loc.clone(),
                raw: "(table)".into(),
            })
        }
        toml_edit::Item::ArrayOfTables(a) => {
            let loc = origin.loc(a.span(), key_loc);
            let items = a
                .iter()
                .map(|t| {
                    let tloc = origin.loc(t.span(), &loc);
                    Entry {
                        node: Node::Table(convert_table(origin, t, &tloc)),
                        loc: tloc.clone(),
                        key_loc: tloc,
                        raw: "(table)".into(),
                    }
                })
                .collect();
            Some(Entry {
                node: Node::Array(items),
                loc,
                key_loc: key_loc.clone(),
                raw: "(array of tables)".into(),
            })
        }
    }
}

fn convert_value(
    origin: &Origin<'_>,
    value: &toml_edit::Value,
    key_loc: &Loc,
    fallback: &Loc,
) -> Entry {
    use toml_edit::Value as V;
    let span = value.span();
    let loc = origin.loc(span.clone(), fallback);
    let display = value.to_string();
    let raw = origin.raw(span, &display);
    let node = match value {
        V::String(s) => Node::Str(s.value().clone()),
        V::Integer(i) => Node::Int(*i.value()),
        V::Float(f) => Node::Float(*f.value()),
        V::Boolean(b) => Node::Bool(*b.value()),
        V::Datetime(_) => Node::Datetime,
        V::Array(a) => Node::Array(
            a.iter()
                .map(|v| convert_value(origin, v, &loc, &loc))
                .collect(),
        ),
        V::InlineTable(t) => {
            let mut out = Table::default();
            for (key, v) in t.iter() {
                let kloc = origin.loc(t.key(key).and_then(|k| k.span()), &loc);
                out.push(key, convert_value(origin, v, &kloc, &kloc));
            }
            Node::Table(out)
        }
    };
    Entry {
        node,
        loc,
        key_loc: key_loc.clone(),
        raw: raw.into(),
    }
}
