//! Typed, located reads from the scenario tree: "give me `parallel.tp` as an integer in
//! 1..=2^20" either returns the value or an error that names the key, its position, the value
//! and the allowed range. Unknown keys are caught here too, with a did-you-mean suggestion.

use super::error::{closest, Ctx, ErrorKind, Loc, ScenarioError};
use super::source::{Entry, Node, Table};

pub(crate) type Result<T> = std::result::Result<T, ScenarioError>;

/// A value read from the tree, with where it was written.
#[derive(Clone, Debug)]
pub(crate) struct Field<T> {
    pub value: T,
    pub loc: Loc,
    pub raw: String,
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

/// Every key the schema knows, by section path; used for "did you mean" across sections.
pub(crate) const SCHEMA: &[(&str, &[&str])] = &[
    (
        "",
        &[
            "name", "model", "cluster", "parallel", "training", "memory", "run", "checks", "faults",
        ],
    ),
    (
        "model",
        &[
            "preset",
            "hf_config",
            "hf_force",
            "name",
            "layers",
            "hidden",
            "heads",
            "kv_heads",
            "ffn_hidden",
            "seq_len",
            "vocab",
            "gated_mlp",
            "tied_embeddings",
            "experts",
            "top_k",
            "moe_every",
        ],
    ),
    (
        "cluster",
        &[
            "gpu",
            "gpus",
            "gpus_per_node",
            "node",
            "intra_node",
            "inter_node",
            "topology",
        ],
    ),
    ("cluster.topology", super::topology::TOPOLOGY_KEYS),
    (
        "cluster.gpu",
        &[
            "preset",
            "name",
            "peak_fp32_flops_per_s",
            "peak_tf32_flops_per_s",
            "peak_fp16_flops_per_s",
            "peak_bf16_flops_per_s",
            "peak_fp8_flops_per_s",
            "hbm_bytes",
            "driver_reserved_bytes",
            "hbm_bandwidth_bytes_per_s",
        ],
    ),
    (
        "cluster.intra_node",
        &[
            "bandwidth_bytes_per_s",
            "bandwidth_gb_per_s",
            "latency_us",
            "latency_ns",
        ],
    ),
    (
        "cluster.inter_node",
        &[
            "bandwidth_bytes_per_s",
            "bandwidth_gb_per_s",
            "latency_us",
            "latency_ns",
        ],
    ),
    (
        "parallel",
        &[
            "tp",
            "pp",
            "dp",
            "vpp",
            "ep",
            "cp",
            "zero",
            "fsdp",
            "sequence_parallel",
            "schedule",
            "layer_partition",
            "order",
        ],
    ),
    (
        "training",
        &[
            "global_batch",
            "micro_batch",
            "precision",
            "recompute",
            "overlap_grad_reduce",
            "overlap_param_gather",
            "grad_compression",
            "sync",
            "optimizer",
            "offload",
            "flash_attention",
            "grad_bucket_bytes",
        ],
    ),
    (
        "memory",
        &["reserved_bytes", "allocator_slack_fraction", "accounting"],
    ),
    ("run", &["iterations", "seed", "granularity"]),
    ("checks", super::checks::CHECK_KEYS),
    ("faults", super::faults::FAULT_KEYS),
];

pub(crate) fn known_keys(path: &str) -> &'static [&'static str] {
    SCHEMA
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, k)| *k)
        .unwrap_or(&[])
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
        let raw = entry.map(|e| e.raw.as_str()).unwrap_or("");
        self.ctx
            .error(kind, loc, &self.key_path(key), raw, message, allowed)
    }

    fn type_err(&self, key: &str, entry: &Entry, want: &str) -> ScenarioError {
        self.err(
            ErrorKind::Type,
            key,
            format!("expected {want}, found a {}", entry.node.type_name()),
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
        let known = known_keys(self.path);
        let Some(table) = self.table else {
            return Ok(());
        };
        for (key, entry) in &table.entries {
            if known.contains(&key.as_str()) {
                continue;
            }
            let mut message = "unknown key".to_string();
            if let Some(near) = closest(key, known.iter().copied()) {
                message.push_str(&format!("; did you mean `{near}`?"));
            } else if let Some((other, _)) = SCHEMA
                .iter()
                .find(|(p, keys)| *p != self.path && keys.contains(&key.as_str()))
            {
                message.push_str(&format!(
                    "; did you mean `{}` (it belongs in [{other}])?",
                    join(other, key)
                ));
            }
            let allowed = if known.is_empty() {
                "no keys here".to_string()
            } else {
                known.join(", ")
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

    /// An integer in `min..=max`. Floats with an exact integer value are accepted (so
    /// `hbm_bytes = 80e9` works).
    pub(crate) fn uint(&self, key: &str, min: u64, max: u64) -> Result<Option<Field<u64>>> {
        let Some(e) = self.entry(key) else {
            return Ok(None);
        };
        let allowed = format!(
            "integers from {} to {}",
            group_digits(min),
            group_digits(max)
        );
        let value: i128 = match &e.node {
            Node::Int(i) => i128::from(*i),
            Node::Float(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e30 => *f as i128,
            Node::Float(_) => {
                return Err(self.err(ErrorKind::Type, key, "not a whole number", allowed))
            }
            _ => return Err(self.type_err(key, e, "an integer")),
        };
        if value < i128::from(min) || value > i128::from(max) {
            let what = if value < i128::from(min) {
                "too small"
            } else {
                "too large"
            };
            return Err(self.err(ErrorKind::Invalid, key, what, allowed));
        }
        Ok(Some(Field {
            value: u64::try_from(value).unwrap_or(max),
            loc: e.loc.clone(),
            raw: e.raw.clone(),
        }))
    }

    pub(crate) fn uint32(&self, key: &str, min: u32, max: u32) -> Result<Option<Field<u32>>> {
        Ok(self
            .uint(key, u64::from(min), u64::from(max))?
            .map(|f| Field {
                value: u32::try_from(f.value).unwrap_or(max),
                loc: f.loc,
                raw: f.raw,
            }))
    }

    /// A finite number in `(0, max]` (integers accepted).
    pub(crate) fn positive(&self, key: &str, max: f64) -> Result<Option<Field<f64>>> {
        self.number(key, false, max)
    }

    /// A finite number in `[0, max]` (integers accepted).
    pub(crate) fn non_negative(&self, key: &str, max: f64) -> Result<Option<Field<f64>>> {
        self.number(key, true, max)
    }

    fn number(&self, key: &str, zero_ok: bool, max: f64) -> Result<Option<Field<f64>>> {
        let Some(e) = self.entry(key) else {
            return Ok(None);
        };
        let allowed = if zero_ok {
            format!("numbers from 0 to {max:e}")
        } else {
            format!("numbers greater than 0, at most {max:e}")
        };
        let value = match &e.node {
            Node::Int(i) => *i as f64,
            Node::Float(f) => *f,
            _ => return Err(self.type_err(key, e, "a number")),
        };
        let ok = value.is_finite() && value <= max && (value > 0.0 || (zero_ok && value == 0.0));
        if !ok {
            return Err(self.err(ErrorKind::Invalid, key, "out of range", allowed));
        }
        Ok(Some(Field {
            value,
            loc: e.loc.clone(),
            raw: e.raw.clone(),
        }))
    }

    pub(crate) fn boolean(&self, key: &str) -> Result<Option<bool>> {
        match self.entry(key) {
            None => Ok(None),
            Some(Entry {
                node: Node::Bool(b),
                ..
            }) => Ok(Some(*b)),
            Some(e) => Err(self.type_err(key, e, "true or false")),
        }
    }

    pub(crate) fn string(&self, key: &str) -> Result<Option<Field<String>>> {
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

    /// A string that must be one of `names`; `what` names the thing in the message.
    pub(crate) fn choice<T: Copy>(
        &self,
        key: &str,
        what: &str,
        names: &[(&str, T)],
    ) -> Result<Option<T>> {
        let Some(f) = self.string(key)? else {
            return Ok(None);
        };
        match names.iter().find(|(n, _)| *n == f.value) {
            Some((_, v)) => Ok(Some(*v)),
            None => Err(self.unknown_name(key, what, &f.value, names.iter().map(|(n, _)| *n))),
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

    /// An array whose items are read by `item`.
    pub(crate) fn array<T>(
        &self,
        key: &str,
        want: &str,
        mut item: impl FnMut(&Entry) -> Option<T>,
    ) -> Result<Option<Vec<T>>> {
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
