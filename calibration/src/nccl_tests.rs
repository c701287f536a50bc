//! Import of nccl-tests logs (`all_reduce_perf`, `all_gather_perf`, `reduce_scatter_perf`,
//! `alltoall_perf`, `broadcast_perf`, `sendrecv_perf`): the standard text output is parsed
//! (the `#  Rank  N Group G Pid P on HOST device D [..] NAME` lines give ranks, nodes and the
//! GPU; the column header says which columns a row has; each row gives size, count, type,
//! redop, root and time / algbw / busbw / #wrong for out-of-place and in-place) and the
//! alpha-beta model is fitted to the row times with the step counts of the algorithm the
//! simulator assumes (ring; pipelined chain for broadcast; one step for sendrecv). A log whose
//! ranks sit on one host fits the intra-node tier; a multi-node log the inter-node tier, per
//! rail: NCCL runs one ring per NIC, so the fitted bandwidth is divided by the ranks per node.

use crate::fit::alpha_beta::{self, AlphaBeta, Point};
use crate::fit::FitError;
use serde::Serialize;
use std::collections::BTreeSet;

/// Which test produced a log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Test {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Broadcast,
    SendRecv,
}

impl Test {
    pub const ALL: [Test; 6] = [
        Test::AllReduce,
        Test::AllGather,
        Test::ReduceScatter,
        Test::AllToAll,
        Test::Broadcast,
        Test::SendRecv,
    ];
    /// The binary's name.
    pub fn binary(self) -> &'static str {
        match self {
            Test::AllReduce => "all_reduce_perf",
            Test::AllGather => "all_gather_perf",
            Test::ReduceScatter => "reduce_scatter_perf",
            Test::AllToAll => "alltoall_perf",
            Test::Broadcast => "broadcast_perf",
            Test::SendRecv => "sendrecv_perf",
        }
    }
    /// Latency-bound steps and bytes through one rank's link for one call of `size` bytes
    /// over `n` ranks (the simulator's model, sim/src/topology/tiers.rs).
    pub fn steps_and_bytes(self, n: u32, size: f64) -> (f64, f64) {
        let nf = f64::from(n.max(1));
        match self {
            Test::AllReduce => (2.0 * (nf - 1.0), 2.0 * (nf - 1.0) / nf * size),
            Test::AllGather | Test::ReduceScatter | Test::AllToAll => {
                (nf - 1.0, (nf - 1.0) / nf * size)
            }
            Test::Broadcast => (nf - 1.0, size),
            Test::SendRecv => (1.0, size),
        }
    }
    /// busbw / algbw, as nccl-tests computes it.
    pub fn bus_factor(self, n: u32) -> f64 {
        let nf = f64::from(n.max(1));
        match self {
            Test::AllReduce => 2.0 * (nf - 1.0) / nf,
            Test::AllGather | Test::ReduceScatter | Test::AllToAll => (nf - 1.0) / nf,
            Test::Broadcast | Test::SendRecv => 1.0,
        }
    }
}

/// Why a log could not be read.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ParseError {
    #[error("{origin}: cannot tell which nccl-tests binary wrote it; it has no '# Collective test starting: NAME' line and its file name names none of {}; rename it after the binary (e.g. all_reduce_perf.log)", Test::ALL.map(Test::binary).join(", "))]
    UnknownTest { origin: String },
    #[error(
        "{origin}: no '#  Rank N ... on HOST device D' lines: cannot tell the ranks and nodes"
    )]
    NoRanks { origin: String },
    #[error("{origin}: no column header line ('#  size  count  type ... time  algbw  busbw ...')")]
    NoHeader { origin: String },
    #[error("{origin}:{line}: {message}")]
    Row {
        origin: String,
        line: usize,
        message: String,
    },
    #[error("{origin}: no result rows")]
    NoRows { origin: String },
    #[error(
        "{origin}:{line}: the {place} measurement of {size_bytes} bytes reports #wrong = \
         {wrong}: the collective returned wrong results, so its time is not a valid \
         measurement; rerun nccl-tests on a healthy system, or delete the row"
    )]
    Wrong {
        origin: String,
        line: usize,
        size_bytes: u64,
        place: &'static str,
        wrong: u64,
    },
}

/// One table row: the out-of-place and in-place measurements of one size.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    pub size_bytes: u64,
    pub count: u64,
    pub dtype: String,
    pub redop: Option<String>,
    pub root: Option<i64>,
    pub out_of_place: Measurement,
    pub in_place: Option<Measurement>,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Measurement {
    pub time_us: f64,
    pub algbw_gb_per_s: f64,
    pub busbw_gb_per_s: f64,
    /// Elements that failed nccl-tests' check (`#wrong`); `None` where the log says N/A
    /// (checking disabled). Rows with wrong elements are refused ([`ParseError::Wrong`]).
    pub wrong: Option<u64>,
}

/// A parsed log.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Log {
    pub origin: String,
    pub test: Test,
    pub ranks: u32,
    pub nodes: u32,
    /// Most ranks on one host.
    pub max_per_node: u32,
    /// The GPU name of the first rank line, when given.
    pub gpu: Option<String>,
    pub rows: Vec<Row>,
}

fn detect_test(text: &str, origin: &str) -> Option<Test> {
    for line in text.lines() {
        if let Some(rest) = line.split("Collective test starting:").nth(1) {
            let name = rest.trim();
            if let Some(t) = Test::ALL.into_iter().find(|t| t.binary() == name) {
                return Some(t);
            }
        }
    }
    let file = std::path::Path::new(origin)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    Test::ALL.into_iter().find(|t| file.contains(t.binary()))
}

/// A `#  Rank  0 Group  0 Pid 1234 on host device  0 [0x07] NVIDIA A100` line: (host, gpu).
fn rank_line(line: &str) -> Option<(String, Option<String>)> {
    let body = line.trim_start_matches('#').trim_start();
    let mut tok = body.split_whitespace();
    if tok.next()? != "Rank" {
        return None;
    }
    tok.next()?.parse::<u32>().ok()?;
    let words: Vec<&str> = body.split_whitespace().collect();
    let on = words.iter().position(|w| *w == "on")?;
    let host = words.get(on + 1)?.to_string();
    let gpu = words
        .iter()
        .position(|w| w.starts_with("[0x"))
        .map(|i| words.get(i + 1..).unwrap_or_default().join(" "))
        .filter(|s| !s.is_empty());
    Some((host, gpu))
}

/// Parses the text of one log; `origin` (its path) names it in errors and, when the log does
/// not say, tells the test by the binary name in the file name.
pub fn parse(text: &str, origin: &str) -> Result<Log, ParseError> {
    let test = detect_test(text, origin).ok_or_else(|| ParseError::UnknownTest {
        origin: origin.to_string(),
    })?;
    let mut hosts: Vec<String> = Vec::new();
    let mut gpu = None;
    let mut columns: Option<Vec<String>> = None;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if trimmed.starts_with('#') {
            if let Some((host, g)) = rank_line(trimmed) {
                hosts.push(host);
                if gpu.is_none() {
                    gpu = g;
                }
                continue;
            }
            let words: Vec<String> = trimmed
                .trim_start_matches('#')
                .split_whitespace()
                .map(str::to_string)
                .collect();
            if words.first().map(String::as_str) == Some("size")
                && words.iter().any(|w| w == "time")
            {
                columns = Some(words);
            }
            continue;
        }
        let Some(cols) = &columns else {
            continue;
        };
        let row = parse_row(trimmed, cols).map_err(|message| ParseError::Row {
            origin: origin.to_string(),
            line: i + 1,
            message: format!(
                "{message}; expected a result row of the columns `{}`",
                cols.join(" ")
            ),
        })?;
        for (place, m) in [
            ("out-of-place", Some(&row.out_of_place)),
            ("in-place", row.in_place.as_ref()),
        ] {
            if let Some(wrong) = m.and_then(|m| m.wrong).filter(|&w| w > 0) {
                return Err(ParseError::Wrong {
                    origin: origin.to_string(),
                    line: i + 1,
                    size_bytes: row.size_bytes,
                    place,
                    wrong,
                });
            }
        }
        rows.push(row);
    }
    if hosts.is_empty() {
        return Err(ParseError::NoRanks {
            origin: origin.to_string(),
        });
    }
    if columns.is_none() {
        return Err(ParseError::NoHeader {
            origin: origin.to_string(),
        });
    }
    if rows.is_empty() {
        return Err(ParseError::NoRows {
            origin: origin.to_string(),
        });
    }
    let distinct: BTreeSet<&String> = hosts.iter().collect();
    let max_per_node = distinct
        .iter()
        .map(|h| hosts.iter().filter(|x| x == h).count())
        .max()
        .unwrap_or(1) as u32;
    Ok(Log {
        origin: origin.to_string(),
        test,
        ranks: hosts.len() as u32,
        nodes: distinct.len() as u32,
        max_per_node,
        gpu,
        rows,
    })
}

/// One data row against the header's columns (`size count type [redop] [root] time algbw
/// busbw #wrong time algbw busbw #wrong`).
fn parse_row(line: &str, cols: &[String]) -> Result<Row, String> {
    let vals: Vec<&str> = line.split_whitespace().collect();
    let has = |name: &str| cols.iter().any(|c| c == name);
    let (has_redop, has_root) = (has("redop"), has("root"));
    let lead = 3 + usize::from(has_redop) + usize::from(has_root);
    let get = |i: usize, what: &str| {
        vals.get(i)
            .copied()
            .ok_or_else(|| format!("row has no {what} column ({} values)", vals.len()))
    };
    let num = |i: usize, what: &str| -> Result<f64, String> {
        let v = get(i, what)?;
        v.parse::<f64>()
            .map_err(|_| format!("{what} is '{v}', not a number"))
    };
    let size_bytes = get(0, "size")?.parse::<u64>().map_err(|_| {
        format!(
            "size '{}' is not a whole number",
            vals.first().unwrap_or(&"")
        )
    })?;
    let count = get(1, "count")?
        .parse::<u64>()
        .map_err(|_| "count is not a whole number".to_string())?;
    let dtype = get(2, "type")?.to_string();
    let redop = if has_redop {
        Some(get(3, "redop")?.to_string())
    } else {
        None
    };
    let root = if has_root {
        Some(
            get(3 + usize::from(has_redop), "root")?
                .parse::<i64>()
                .map_err(|_| "root is not a whole number".to_string())?,
        )
    } else {
        None
    };
    // `#wrong` is a count, or N/A when nccl-tests ran without checking (-c 0).
    let wrong = |at: usize| -> Result<Option<u64>, String> {
        match vals.get(at) {
            None | Some(&"N/A") => Ok(None),
            Some(v) => v
                .parse::<u64>()
                .map(Some)
                .map_err(|_| format!("#wrong is '{v}', not a count or N/A")),
        }
    };
    let measurement = |at: usize| -> Result<Measurement, String> {
        Ok(Measurement {
            time_us: num(at, "time")?,
            algbw_gb_per_s: num(at + 1, "algbw")?,
            busbw_gb_per_s: num(at + 2, "busbw")?,
            wrong: wrong(at + 3)?,
        })
    };
    let out_of_place = measurement(lead)?;
    // Each block is time, algbw, busbw, #wrong (the last may be "N/A").
    let in_place = if vals.len() >= lead + 7 {
        Some(measurement(lead + 4)?)
    } else {
        None
    };
    if out_of_place.time_us.is_nan() || out_of_place.time_us <= 0.0 {
        return Err(format!("time {} us is not positive", out_of_place.time_us));
    }
    Ok(Row {
        size_bytes,
        count,
        dtype,
        redop,
        root,
        out_of_place,
        in_place,
    })
}

/// The link tier a log measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Intra,
    Inter,
}

/// The fit of one log.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LogFit {
    pub origin: String,
    pub test: Test,
    pub ranks: u32,
    pub nodes: u32,
    pub tier: Tier,
    pub fit: AlphaBeta,
    /// Per-rank (per-rail for the inter tier) bandwidth for the profile.
    pub link_bandwidth_bytes_per_s: crate::fit::Estimate,
}

impl Log {
    pub fn tier(&self) -> Tier {
        if self.nodes > 1 {
            Tier::Inter
        } else {
            Tier::Intra
        }
    }

    /// Samples for the alpha-beta fit: every out-of-place and in-place time. Rows of size 0
    /// are skipped.
    pub fn points(&self) -> Vec<Point> {
        let mut out = Vec::new();
        for r in self.rows.iter().filter(|r| r.size_bytes > 0) {
            let (steps, bytes) = self.test.steps_and_bytes(self.ranks, r.size_bytes as f64);
            for m in std::iter::once(&r.out_of_place).chain(&r.in_place) {
                out.push(Point {
                    steps,
                    bytes,
                    time_ns: m.time_us * 1e3,
                });
            }
        }
        out
    }

    /// Fits the log; `min_bytes` drops smaller rows (NCCL switches protocol for small
    /// messages, which one alpha-beta line does not describe).
    pub fn fit(&self, min_bytes: u64) -> Result<LogFit, FitError> {
        let kept = Log {
            rows: self
                .rows
                .iter()
                .filter(|r| r.size_bytes >= min_bytes)
                .cloned()
                .collect(),
            ..self.clone()
        };
        let fit = alpha_beta::fit(&kept.points())?;
        let rails = f64::from(if self.nodes > 1 {
            self.max_per_node.max(1)
        } else {
            1
        });
        Ok(LogFit {
            origin: self.origin.clone(),
            test: self.test,
            ranks: self.ranks,
            nodes: self.nodes,
            tier: self.tier(),
            link_bandwidth_bytes_per_s: fit.bandwidth_bytes_per_s.map_monotone(|b| b / rails),
            fit,
        })
    }
}

impl LogFit {
    /// The bus bandwidth (GB/s) the fit predicts for one call of `size` bytes.
    pub fn busbw_gb_per_s(&self, size: u64) -> f64 {
        let (steps, bytes) = self.test.steps_and_bytes(self.ranks, size as f64);
        let t_ns = self.fit.predict_ns(steps, bytes);
        size as f64 / t_ns * self.test.bus_factor(self.ranks)
    }
}
