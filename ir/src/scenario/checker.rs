//! Locating errors about several keys at once. A cross-field rule involves keys that may be
//! written in the file, set by `--set`, or supplied by a preset; the [`Checker`] picks the one
//! to blame (the latest override, else the first written key, else the preset that supplied
//! it) and says where implicit values came from.

use super::error::{Ctx, ErrorKind, Loc, ScenarioError};
use super::source::{Entry, Node, Table};

/// Blames the keys of one resolved document (its tree and the `--set` overrides applied).
pub struct Checker<'a> {
    ctx: &'a Ctx,
    root: &'a Table,
    overrides: &'a [String],
}

fn lookup<'t>(root: &'t Table, path: &str) -> Option<&'t Entry> {
    let mut table = root;
    let mut parts = path.split('.').peekable();
    while let Some(part) = parts.next() {
        let entry = table.get(part)?;
        if parts.peek().is_none() {
            return Some(entry);
        }
        match &entry.node {
            Node::Table(t) => table = t,
            _ => return None,
        }
    }
    None
}

impl<'a> Checker<'a> {
    pub(crate) fn new(ctx: &'a Ctx, root: &'a Table, overrides: &'a [String]) -> Self {
        Checker {
            ctx,
            root,
            overrides,
        }
    }

    /// Where an implicit value came from: the preset, config file or node that supplied it.
    fn source_of(&self, path: &str) -> Option<(&Entry, String)> {
        let parent = path.rsplit_once('.').map(|(p, _)| p).unwrap_or("");
        let mut candidates: Vec<String> = ["preset", "hf_config", "node"]
            .iter()
            .map(|k| format!("{parent}.{k}"))
            .collect();
        candidates.push(parent.to_string());
        candidates
            .into_iter()
            .find_map(|c| lookup(self.root, &c).map(|e| (e, c)))
    }

    fn override_rank(&self, loc: &Loc) -> Option<usize> {
        match loc {
            Loc::Override(text) => self.overrides.iter().rposition(|o| o.as_str() == &**text),
            Loc::File { .. } => None,
        }
    }

    /// An error that no key explains (`kind` says what failed), located at the document only.
    pub fn unlocated(&self, kind: ErrorKind, message: impl Into<String>) -> ScenarioError {
        self.ctx.error(kind, None, "", "", message, "")
    }

    /// An error about the keys involved in a rule; `keys` pairs each dotted key with its
    /// resolved value (used when the key was not written). The first key is the default.
    pub fn fail(
        &self,
        keys: &[(&str, String)],
        message: String,
        allowed: impl Into<String>,
    ) -> ScenarioError {
        let explicit: Vec<(&str, &Entry)> = keys
            .iter()
            .filter_map(|(k, _)| lookup(self.root, k).map(|e| (*k, e)))
            .collect();
        let latest_override = explicit
            .iter()
            .filter_map(|(k, e)| self.override_rank(&e.loc).map(|r| (r, *k, *e)))
            .max_by_key(|(r, _, _)| *r);
        let chosen = latest_override
            .map(|(_, k, e)| (k, e))
            .or_else(|| explicit.first().copied());
        if let Some((key, entry)) = chosen {
            // Say where the values that were not written came from, when a preset, config
            // file or node supplied them.
            let mut message = message;
            for (k, value) in keys {
                if lookup(self.root, k).is_some() {
                    continue;
                }
                if let Some((_, source)) = self.source_of(k) {
                    let leaf = source.rsplit('.').next().unwrap_or("");
                    if matches!(leaf, "preset" | "hf_config" | "node") {
                        message.push_str(&format!(" ({k} = {value} comes from {source})"));
                    }
                }
            }
            return self.ctx.error(
                ErrorKind::CrossField,
                Some(&entry.loc),
                key,
                &entry.raw,
                message,
                allowed,
            );
        }
        let (key, value) = keys
            .first()
            .map(|(k, v)| (*k, v.clone()))
            .unwrap_or_default();
        match self.source_of(key) {
            Some((entry, source)) => self.ctx.error(
                ErrorKind::CrossField,
                Some(&entry.loc),
                key,
                &value,
                format!("{message} ({key} comes from {source})"),
                allowed,
            ),
            None => self.ctx.error(
                ErrorKind::CrossField,
                None,
                key,
                &value,
                format!("{message} ({key} is the default)"),
                allowed,
            ),
        }
    }
}

/// Up to `max` divisors of `n` within `limit`, ascending, as "1, 2, 4, ...".
pub(crate) fn divisors(n: u64, limit: u64, max: usize) -> String {
    let mut small = Vec::new();
    let mut large = Vec::new();
    let mut d = 1u64;
    while d.saturating_mul(d) <= n {
        if n.is_multiple_of(d) {
            small.push(d);
            if d != n / d {
                large.push(n / d);
            }
        }
        d += 1;
    }
    small.extend(large.into_iter().rev());
    let list: Vec<String> = small
        .iter()
        .filter(|&&d| d <= limit)
        .map(|d| d.to_string())
        .collect();
    if list.len() > max {
        let mut head = list[..max].join(", ");
        head.push_str(", ...");
        head
    } else {
        list.join(", ")
    }
}
