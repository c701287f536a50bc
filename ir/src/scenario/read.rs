//! Typed, located reads from the scenario tree: "give me `parallel.tp` as an integer in
//! 1..=2^20" either returns the value or an error that names the key, its position, the value
//! and the allowed range. Unknown keys are caught here too, with a did-you-mean suggestion.

use super::error::{closest, Ctx, ErrorKind, Loc, ScenarioError};
use super::keys::{self, Absent, Key, Kind};
use super::source::{Entry, Node, Table};

pub(crate) type Result<T> = std::result::Result<T, ScenarioError>;

/// A value read from the tree, with where it was written.
#[derive(Clone, Debug)]
pub(crate) struct Field<T> {
    pub value: T,
    pub loc: Loc,
    pub raw: std::sync::Arc<str>,
}

/// The value of an optional field.
pub(crate) fn opt<T>(f: Option<Field<T>>) -> Option<T> {
    f.map(|f| f.value)
}

/// One table of the tree, addressed by its dotted path.
#[derive(Clone, Copy)]
pub(crate) struct Section<'a> {
    pub ctx: &'a Ctx,
    pub path: &'a str,
    pub table: Option<&'a Table>,
    /// Where the table is written (`None` when the table is absent).
    pub loc: Option<&'a Loc>,
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Formats an integer with thousands separators (`1,048,576`) for range messages.
pub(crate) fn group_digits(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl<'a> Section<'a> {
    pub(crate) fn root(ctx: &'a Ctx, table: &'a Table, loc: &'a Loc) -> Self {
        Section {
            ctx,
            path: "",
            table: Some(table),
            loc: Some(loc),
        }
    }

    pub(crate) fn key_path(&self, key: &str) -> String {
        join(self.path, key)
    }

    pub(crate) fn entry(&self, key: &str) -> Option<&'a Entry> {
        self.table.and_then(|t| t.get(key))
    }

    pub(crate) fn has(&self, key: &str) -> bool {
        self.entry(key).is_some()
    }

    /// A located error about `key` (its value position, or the table when absent).
    pub(crate) fn err(
        &self,
        kind: ErrorKind,
        key: &str,
        message: impl Into<String>,
        allowed: impl Into<String>,
    ) -> ScenarioError {
        let entry = self.entry(key);
        let loc = entry.map(|e| &e.loc).or(self.loc);
        let raw = entry.map(|e| &*e.raw).unwrap_or("");
        self.ctx
            .error(kind, loc, &self.key_path(key), raw, message, allowed)
    }

    fn type_err(&self, key: &str, entry: &Entry, want: &str) -> ScenarioError {
        self.err(
            ErrorKind::Type,
            key,
            format!("expected {want}, found {}", entry.node.type_name()),
            want.to_string(),
        )
    }

    /// The sub-table `key` (absent is fine: an empty section).
    pub(crate) fn section(&self, key: &str, path: &'a str) -> Result<Section<'a>> {
        match self.entry(key) {
            None => Ok(Section {
                ctx: self.ctx,
                path,
                table: None,
                loc: None,
            }),
            Some(e) => match &e.node {
                Node::Table(t) => Ok(Section {
                    ctx: self.ctx,
                    path,
                    table: Some(t),
                    loc: Some(&e.loc),
                }),
                _ => Err(self.type_err(key, e, "a table")),
            },
        }
    }

    /// Rejects keys the schema does not list for this section, suggesting the closest key
    /// (in this section, or the same key in another section).
    pub(crate) fn check_unknown(&self) -> Result<()> {
        let known = keys::group(self.path);
        let Some(table) = self.table else {
            return Ok(());
        };
        for (key, entry) in table.entries() {
            if known.iter().any(|k| k.name == key.as_str()) {
                continue;
            }
            let mut message = "unknown key".to_string();
            if let Some(near) = closest(key, known.iter().map(|k| k.name)) {
                message.push_str(&format!("; did you mean `{near}`?"));
            } else if let Some(other) = keys::GROUPS
                .iter()
                .find(|g| g.path != self.path && g.keys.iter().any(|k| k.name == key.as_str()))
            {
                message.push_str(&format!(
                    "; did you mean `{}` (it belongs in [{}])?",
                    join(other.path, key),
                    other.path
                ));
            }
            let allowed = if known.is_empty() {
                "no keys here".to_string()
            } else {
                known.iter().map(|k| k.name).collect::<Vec<_>>().join(", ")
            };
            return Err(self.ctx.error(
                ErrorKind::UnknownKey,
                Some(&entry.key_loc),
                &self.key_path(key),
                "",
                message,
                allowed,
            ));
        }
        Ok(())
    }

    /// The error for a reader applied to a key of another kind: a mistake in twin's schema
    /// table, reported rather than panicking.
    fn schema_err(&self, k: &Key, reader: &str) -> ScenarioError {
        self.err(
            ErrorKind::Type,
            k.name,
            format!(
                "twin's schema declares this key as {}, read as {reader}",
                k.type_name()
            ),
            k.allowed(),
        )
    }

    /// An integer key (`Kind::Uint`). Floats with an exact integer value are accepted (so
    /// `hbm_bytes = 80e9` works).
    pub(crate) fn uint(&self, k: &Key) -> Result<Option<Field<u64>>> {
        let Kind::Uint { min, max } = k.kind else {
            return Err(self.schema_err(k, "an integer"));
        };
        self.uint_in(k.name, min, max)
    }

    /// An integer key, or its literal default (`Absent::Int`; 0 for any other).
    pub(crate) fn uint_or_default(&self, k: &Key) -> Result<u64> {
        Ok(opt(self.uint(k)?).unwrap_or(match k.default {
            Absent::Int(v) => v,
            _ => 0,
        }))
    }

    fn uint_in(&self, key: &str, min: u64, max: u64) -> Result<Option<Field<u64>>> {
        let Some(e) = self.entry(key) else {
            return Ok(None);
        };
        // Written only for an error: a sweep reads these keys once per layout.
        let allowed = || {
            format!(
                "integers from {} to {}",
                group_digits(min),
                group_digits(max)
            )
        };
        let value: i128 = match &e.node {
            Node::Int(i) => i128::from(*i),
            Node::Float(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e30 => *f as i128,
            Node::Float(_) => {
                return Err(self.err(ErrorKind::Type, key, "not a whole number", allowed()))
            }
            _ => return Err(self.type_err(key, e, "an integer")),
        };
        if value < i128::from(min) || value > i128::from(max) {
            let what = if value < i128::from(min) {
                "too small"
            } else {
                "too large"
            };
            return Err(self.err(ErrorKind::Invalid, key, what, allowed()));
        }
        Ok(Some(Field {
            value: u64::try_from(value).unwrap_or(max),
            loc: e.loc.clone(),
            raw: e.raw.clone(),
        }))
    }

    /// An integer key whose range fits u32.
    pub(crate) fn uint32(&self, k: &Key) -> Result<Option<Field<u32>>> {
        Ok(self.uint(k)?.map(|f| Field {
            value: u32::try_from(f.value).unwrap_or(u32::MAX),
            loc: f.loc,
            raw: f.raw,
        }))
    }

    /// An integer key whose range fits u32, or its literal default.
    pub(crate) fn uint32_or_default(&self, k: &Key) -> Result<u32> {
        Ok(u32::try_from(self.uint_or_default(k)?).unwrap_or(u32::MAX))
    }

    /// A number key (`Kind::Number`): finite, at most its `max`, above 0 or from 0 (integers
    /// accepted).
    pub(crate) fn number(&self, k: &Key) -> Result<Option<Field<f64>>> {
        let Kind::Number { zero_ok, max } = k.kind else {
            return Err(self.schema_err(k, "a number"));
        };
        let key = k.name;
        let Some(e) = self.entry(key) else {
            return Ok(None);
        };
        let value = match &e.node {
            Node::Int(i) => *i as f64,
            Node::Float(f) => *f,
            _ => return Err(self.type_err(key, e, "a number")),
        };
        let ok = value.is_finite() && value <= max && (value > 0.0 || (zero_ok && value == 0.0));
        if !ok {
            let allowed = if zero_ok {
                format!("numbers from 0 to {max:e}")
            } else {
                format!("numbers greater than 0, at most {max:e}")
            };
            return Err(self.err(ErrorKind::Invalid, key, "out of range", allowed));
        }
        Ok(Some(Field {
            value,
            loc: e.loc.clone(),
            raw: e.raw.clone(),
        }))
    }

    /// A number key, or its literal default (`Absent::Num`; 0 for any other).
    pub(crate) fn number_or_default(&self, k: &Key) -> Result<f64> {
        Ok(opt(self.number(k)?).unwrap_or(match k.default {
            Absent::Num(v) => v,
            _ => 0.0,
        }))
    }

    pub(crate) fn boolean(&self, k: &Key) -> Result<Option<bool>> {
        if k.kind != Kind::Bool {
            return Err(self.schema_err(k, "true or false"));
        }
        let key = k.name;
        match self.entry(key) {
            None => Ok(None),
            Some(Entry {
                node: Node::Bool(b),
                ..
            }) => Ok(Some(*b)),
            Some(e) => Err(self.type_err(key, e, "true or false")),
        }
    }

    /// A boolean key, or its literal default (`Absent::Flag`; false for any other).
    pub(crate) fn boolean_or_default(&self, k: &Key) -> Result<bool> {
        Ok(self.boolean(k)?.unwrap_or(k.default == Absent::Flag(true)))
    }

    /// A string key (text, a choice's name, or a string with a syntax of its own).
    pub(crate) fn string(&self, k: &Key) -> Result<Option<Field<String>>> {
        if !matches!(k.kind, Kind::Text | Kind::Choice { .. } | Kind::Other(_)) {
            return Err(self.schema_err(k, "a string"));
        }
        let key = k.name;
        match self.entry(key) {
            None => Ok(None),
            Some(e) => match &e.node {
                Node::Str(s) => Ok(Some(Field {
                    value: s.clone(),
                    loc: e.loc.clone(),
                    raw: e.raw.clone(),
                })),
                _ => Err(self.type_err(key, e, "a string")),
            },
        }
    }

    /// A choice key: a string that must be one of `names` (the typed table of the names its
    /// row lists; a test keeps the two equal).
    pub(crate) fn choice<T: Copy>(&self, k: &Key, names: &[(&str, T)]) -> Result<Option<T>> {
        let Kind::Choice { what, .. } = k.kind else {
            return Err(self.schema_err(k, "a name"));
        };
        let Some(f) = self.string(k)? else {
            return Ok(None);
        };
        match names.iter().find(|(n, _)| *n == f.value) {
            Some((_, v)) => Ok(Some(*v)),
            None => Err(self.unknown_name(k.name, what, &f.value, names.iter().map(|(n, _)| *n))),
        }
    }

    /// A choice key, or its literal default (`Absent::Is`; the table's first name for any
    /// other).
    pub(crate) fn choice_or_default<T: Copy>(&self, k: &Key, names: &[(&str, T)]) -> Result<T> {
        if let Some(v) = self.choice(k, names)? {
            return Ok(v);
        }
        let default = match k.default {
            Absent::Is(name) => names.iter().find(|(n, _)| *n == name),
            _ => None,
        };
        match default.or(names.first()) {
            Some((_, v)) => Ok(*v),
            None => Err(self.schema_err(k, "a name from an empty table")),
        }
    }

    /// "unknown schedule; did you mean `1f1b`?" with the list of names as allowed values.
    pub(crate) fn unknown_name<'n>(
        &self,
        key: &str,
        what: &str,
        got: &str,
        names: impl Iterator<Item = &'n str> + Clone,
    ) -> ScenarioError {
        let mut message = format!("unknown {what}");
        if let Some(near) = closest(got, names.clone()) {
            message.push_str(&format!("; did you mean `{near}`?"));
        }
        let allowed: Vec<&str> = names.collect();
        self.err(ErrorKind::Invalid, key, message, allowed.join(", "))
    }

    /// An array key (`Kind::Other`, whose text says what it holds) read item by item.
    pub(crate) fn array<T>(
        &self,
        k: &Key,
        mut item: impl FnMut(&Entry) -> Option<T>,
    ) -> Result<Option<Vec<T>>> {
        let Kind::Other(want) = k.kind else {
            return Err(self.schema_err(k, "an array"));
        };
        let key = k.name;
        let Some(e) = self.entry(key) else {
            return Ok(None);
        };
        let Node::Array(items) = &e.node else {
            return Err(self.type_err(key, e, want));
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, it) in items.iter().enumerate() {
            match item(it) {
                Some(v) => out.push(v),
                None => {
                    return Err(self.ctx.error(
                        ErrorKind::Type,
                        Some(&it.loc),
                        &format!("{}[{i}]", self.key_path(key)),
                        &it.raw,
                        format!("not allowed in {want}"),
                        want.to_string(),
                    ))
                }
            }
        }
        Ok(Some(out))
    }

    /// A required value: the error for an absent key.
    pub(crate) fn missing(&self, key: &str, hint: &str) -> ScenarioError {
        let mut message = "required key is missing".to_string();
        if !hint.is_empty() {
            message.push_str(&format!(" ({hint})"));
        }
        self.ctx.error(
            ErrorKind::Missing,
            self.loc,
            &self.key_path(key),
            "",
            message,
            "",
        )
    }
}
