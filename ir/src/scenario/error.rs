//! The one error type of scenario loading. Every failure, from a TOML syntax error to a
//! cross-field rule, becomes a [`ScenarioError`] that names where (file, line, column, or the
//! `--set` override), which key, which value, and what would have been accepted. The pieces
//! that locate an error (`Ctx`, `LineIndex`, `closest`) are public so that other file formats
//! read with a scenario (hardware profiles, published tables) report errors the same way.

use std::fmt;

/// What kind of problem a [`ScenarioError`] reports; lets tests and tools branch on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The file could not be read.
    Io,
    /// Not valid TOML (or, for `hf_config`, not valid JSON).
    Syntax,
    /// A `--set key=value` argument that is not of that form.
    Override,
    /// A key that the schema does not know.
    UnknownKey,
    /// A required key is absent.
    Missing,
    /// A value of the wrong TOML type (a string where a number belongs, ...).
    Type,
    /// A value of the right type that is not allowed (unknown name, out of range, ...).
    Invalid,
    /// Values that are fine alone but contradict each other (`tp*pp*dp != gpus`, ...).
    CrossField,
    /// A problem inside a Hugging Face `config.json`.
    HfConfig,
    /// The plan rejected a scenario that passed validation (a validation gap; never expected).
    Plan,
}

/// A located, explained scenario error. Displays as one line:
/// `origin:line:column: key = value: message; allowed: ...`, leaving out the parts that do
/// not apply (an I/O error has no line; a syntax error has no key).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ScenarioError {
    pub kind: ErrorKind,
    /// The file the problem is in, or the override (`--set parallel.pp=3`) that caused it.
    pub origin: String,
    /// 1-based line in `origin`; `None` for overrides and whole-file problems.
    pub line: Option<u32>,
    /// 1-based column (in characters) in `origin`; `None` where `line` is.
    pub column: Option<u32>,
    /// Dotted path of the key (`parallel.tp`); empty when no key applies.
    pub key: String,
    /// The offending value as TOML text (`"1fb1"`, `3`); empty when no value applies.
    pub value: String,
    /// What is wrong, with the arithmetic for cross-field rules.
    pub message: String,
    /// What would be accepted; empty when there is nothing short to say.
    pub allowed: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin)?;
        if let (Some(line), Some(column)) = (self.line, self.column) {
            write!(f, ":{line}:{column}")?;
        }
        write!(f, ": ")?;
        if !self.key.is_empty() {
            write!(f, "{}", self.key)?;
            if !self.value.is_empty() {
                write!(f, " = {}", self.value)?;
            }
            write!(f, ": ")?;
        }
        write!(f, "{}", self.message)?;
        if !self.allowed.is_empty() {
            write!(f, "; allowed: {}", self.allowed)?;
        }
        Ok(())
    }
}

impl ScenarioError {
    /// Replaces the "allowed" part (for messages whose generic list would mislead).
    pub(crate) fn with_allowed(mut self, allowed: &str) -> Self {
        self.allowed = allowed.to_string();
        self
    }
}

/// Where a value came from: a place in a file or a `--set` override.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loc {
    File {
        line: u32,
        column: u32,
    },
    /// The override's text as the user gave it, without the `--set ` prefix (shared: every
    /// entry an override sets carries it).
    Override(std::sync::Arc<str>),
}

/// Maps byte offsets of one source text to 1-based line and character column.
pub struct LineIndex<'a> {
    text: &'a str,
    line_starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub fn new(text: &'a str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { text, line_starts }
    }

    /// Line and column of byte `offset` (clamped to the text).
    pub fn loc(&self, offset: usize) -> Loc {
        let offset = offset.min(self.text.len());
        let line_idx = self.line_starts.partition_point(|&s| s <= offset).max(1) - 1;
        let start = self.line_starts.get(line_idx).copied().unwrap_or(0);
        let column = self
            .text
            .get(start..offset)
            .map(|s| s.chars().count())
            .unwrap_or(offset - start);
        Loc::File {
            line: to_u32(line_idx + 1),
            column: to_u32(column + 1),
        }
    }
}

fn to_u32(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// Builds errors for one source file (its name is the origin of located errors).
#[derive(Clone, Debug)]
pub struct Ctx {
    pub origin: String,
}

impl Ctx {
    pub fn error(
        &self,
        kind: ErrorKind,
        loc: Option<&Loc>,
        key: &str,
        value: &str,
        message: impl Into<String>,
        allowed: impl Into<String>,
    ) -> ScenarioError {
        let (origin, line, column) = match loc {
            Some(Loc::File { line, column }) => (self.origin.clone(), Some(*line), Some(*column)),
            Some(Loc::Override(text)) => (format!("--set {text}"), None, None),
            None => (self.origin.clone(), None, None),
        };
        ScenarioError {
            kind,
            origin,
            line,
            column,
            key: key.to_string(),
            value: value.to_string(),
            message: message.into(),
            allowed: allowed.into(),
        }
    }

    /// An [`ErrorKind::Invalid`] value of a file read through serde (hardware profiles,
    /// framework files), located at the start of `span` (byte offsets into the text `lines`
    /// indexes).
    pub fn invalid_at(
        &self,
        lines: &LineIndex,
        span: std::ops::Range<usize>,
        key: &str,
        value: &str,
        message: impl Into<String>,
        allowed: impl Into<String>,
    ) -> ScenarioError {
        let loc = lines.loc(span.start);
        self.error(ErrorKind::Invalid, Some(&loc), key, value, message, allowed)
    }
}

/// Error kind from a serde message (the only structure serde errors carry), for the files
/// read through serde beside a scenario (hardware profiles, framework files).
pub fn serde_kind(message: &str) -> ErrorKind {
    if message.starts_with("unknown field") {
        ErrorKind::UnknownKey
    } else if message.starts_with("missing field") {
        ErrorKind::Missing
    } else if message.starts_with("invalid type") {
        ErrorKind::Type
    } else if message.starts_with("unknown variant") || message.starts_with("invalid value") {
        ErrorKind::Invalid
    } else {
        ErrorKind::Syntax
    }
}

/// Levenshtein distance in characters; small inputs only (keys and names).
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The candidate closest to `word`, if it is close enough to be a plausible typo.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    // Keys are short; a very long word is no typo of any of them (and would be slow to compare).
    if word.chars().count() > 64 {
        return None;
    }
    let limit = (word.chars().count() / 3).clamp(1, 3);
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, c)| (*d, *c))
        .map(|(_, c)| c)
}

/// A string shortened for an error message (values can be whole tables).
pub(crate) fn shorten(text: &str) -> String {
    const MAX_CHARS: usize = 80;
    let one_line: String = text
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.chars().count() <= MAX_CHARS {
        one_line
    } else {
        let mut s: String = one_line.chars().take(MAX_CHARS - 3).collect();
        s.push_str("...");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_has_every_part() {
        let ctx = Ctx {
            origin: "scenarios/x.toml".into(),
        };
        let e = ctx.error(
            ErrorKind::Invalid,
            Some(&Loc::File {
                line: 14,
                column: 12,
            }),
            "parallel.schedule",
            "\"1fb1\"",
            "unknown schedule",
            "gpipe, 1f1b",
        );
        assert_eq!(
            e.to_string(),
            "scenarios/x.toml:14:12: parallel.schedule = \"1fb1\": unknown schedule; allowed: gpipe, 1f1b"
        );
        let e = ctx.error(
            ErrorKind::Invalid,
            Some(&Loc::Override("parallel.pp=3".into())),
            "parallel.pp",
            "3",
            "bad",
            "",
        );
        assert_eq!(e.to_string(), "--set parallel.pp=3: parallel.pp = 3: bad");
    }

    #[test]
    fn line_index_counts_characters() {
        let text = "a = 1\nbé = \"x\"\n";
        let idx = LineIndex::new(text);
        assert_eq!(idx.loc(0), Loc::File { line: 1, column: 1 });
        let off = text
            .find('=')
            .map(|_| text.rfind('=').unwrap_or(0))
            .unwrap_or(0);
        assert_eq!(idx.loc(off), Loc::File { line: 2, column: 4 });
        assert_eq!(idx.loc(10_000), Loc::File { line: 3, column: 1 });
    }

    #[test]
    fn closest_finds_typos_only() {
        let keys = ["micro_batch", "global_batch", "precision"];
        assert_eq!(closest("micro_bach", keys), Some("micro_batch"));
        assert_eq!(closest("precison", keys), Some("precision"));
        assert_eq!(closest("zzz", keys), None);
    }
}
