//! What a framework cannot launch. A [`Limit`] is a conjunction of conditions on scenario keys
//! ("zero >= 2 and pp >= 2") with the reason and its source; a scenario that meets every
//! condition of one limit is refused at validation, and `sweep --search` does not propose it.

use super::super::types::{Fp8Recipe, Offload, PipelineSchedule, Precision, Scenario};
use serde::{Deserialize, Serialize};

/// A layout the framework cannot launch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Limit {
    /// All of these hold in the refused layouts.
    pub when: Vec<Cond>,
    pub reason: String,
    /// Where the framework says so (repo@commit:path).
    pub reference: String,
}

impl Limit {
    /// Whether `s` meets every condition.
    pub fn hits(&self, s: &Scenario) -> bool {
        self.when.iter().all(|c| c.holds(s))
    }

    /// The conditions as text: "parallel.zero >= 2 and parallel.pp >= 2".
    pub fn describe(&self) -> String {
        self.when
            .iter()
            .map(Cond::describe)
            .collect::<Vec<_>>()
            .join(" and ")
    }
}

/// An integer key a condition can test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Count {
    Tp,
    Pp,
    Dp,
    Cp,
    Ep,
    Vpp,
    Zero,
}

/// A boolean key a condition can test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Flag {
    Fsdp,
    SequenceParallel,
    Compile,
    CudaGraphs,
    /// FP8 training that gathers FP8 parameters (`training.fp8_param_gather` under
    /// `precision = "fp8"`).
    Fp8ParamGather,
}

/// One condition of a [`Limit`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cond {
    /// `min <= key <= max`.
    Range {
        key: Count,
        min: u64,
        max: u64,
    },
    Flag {
        key: Flag,
        value: bool,
    },
    /// `parallel.schedule` is one of these.
    Schedule(Vec<PipelineSchedule>),
    /// `training.offload` is one of these.
    Offload(Vec<Offload>),
    /// FP8 training (`training.precision = "fp8"`) with `training.fp8_recipe` one of these.
    Fp8Recipe(Vec<Fp8Recipe>),
}

/// The names of the condition keys in a framework file, with the scenario key each tests.
pub(crate) const COUNTS: [(&str, Count, &str); 7] = [
    ("tp", Count::Tp, "parallel.tp"),
    ("pp", Count::Pp, "parallel.pp"),
    ("dp", Count::Dp, "parallel.dp"),
    ("cp", Count::Cp, "parallel.cp"),
    ("ep", Count::Ep, "parallel.ep"),
    ("vpp", Count::Vpp, "parallel.vpp"),
    ("zero", Count::Zero, "parallel.zero"),
];
pub(crate) const FLAGS: [(&str, Flag, &str); 5] = [
    ("fsdp", Flag::Fsdp, "parallel.fsdp"),
    (
        "sequence_parallel",
        Flag::SequenceParallel,
        "parallel.sequence_parallel",
    ),
    ("compile", Flag::Compile, "training.compile"),
    ("cuda_graphs", Flag::CudaGraphs, "training.cuda_graphs"),
    (
        "fp8_param_gather",
        Flag::Fp8ParamGather,
        "training.fp8_param_gather",
    ),
];

impl Count {
    fn of(self, s: &Scenario) -> u64 {
        let p = &s.parallel;
        match self {
            Count::Tp => u64::from(p.tp),
            Count::Pp => u64::from(p.pp),
            Count::Dp => u64::from(p.dp),
            Count::Cp => u64::from(p.cp),
            Count::Ep => u64::from(p.ep),
            Count::Vpp => u64::from(p.vpp),
            Count::Zero => u64::from(p.zero),
        }
    }

    fn key(self) -> &'static str {
        COUNTS
            .iter()
            .find(|(_, c, _)| *c == self)
            .map_or("?", |(_, _, k)| k)
    }
}

impl Flag {
    fn of(self, s: &Scenario) -> bool {
        match self {
            Flag::Fsdp => s.parallel.fsdp,
            Flag::SequenceParallel => s.parallel.sequence_parallel,
            Flag::Compile => s.training.compile,
            Flag::CudaGraphs => s.training.cuda_graphs,
            Flag::Fp8ParamGather => {
                s.training.precision == Precision::Fp8 && s.training.fp8_param_gather
            }
        }
    }

    fn key(self) -> &'static str {
        FLAGS
            .iter()
            .find(|(_, f, _)| *f == self)
            .map_or("?", |(_, _, k)| k)
    }
}

fn offload_name(o: Offload) -> &'static str {
    super::super::parse::name_of(&super::super::parse::OFFLOADS, o)
}

impl Cond {
    pub fn holds(&self, s: &Scenario) -> bool {
        match self {
            Cond::Range { key, min, max } => (*min..=*max).contains(&key.of(s)),
            Cond::Flag { key, value } => key.of(s) == *value,
            Cond::Schedule(list) => list.contains(&s.parallel.schedule),
            Cond::Offload(list) => list.contains(&s.training.offload),
            Cond::Fp8Recipe(list) => {
                s.training.precision == Precision::Fp8 && list.contains(&s.training.fp8_recipe)
            }
        }
    }

    /// The scenario key it tests (`parallel.pp`).
    pub fn key(&self) -> &'static str {
        match self {
            Cond::Range { key, .. } => key.key(),
            Cond::Flag { key, .. } => key.key(),
            Cond::Schedule(_) => "parallel.schedule",
            Cond::Offload(_) => "training.offload",
            Cond::Fp8Recipe(_) => "training.fp8_recipe",
        }
    }

    /// The value of its key in `s`, as the scenario writes it.
    pub fn value(&self, s: &Scenario) -> String {
        match self {
            Cond::Range { key, .. } => key.of(s).to_string(),
            Cond::Flag { key, .. } => key.of(s).to_string(),
            Cond::Schedule(_) => format!("\"{}\"", s.parallel.schedule.as_str()),
            Cond::Offload(_) => format!("\"{}\"", offload_name(s.training.offload)),
            Cond::Fp8Recipe(_) => format!("\"{}\"", s.training.fp8_recipe.as_str()),
        }
    }

    /// The condition as text: "parallel.pp >= 2", "parallel.zero in 1..=2".
    pub fn describe(&self) -> String {
        let key = self.key();
        match self {
            Cond::Range { min, max, .. } => match (*min, *max) {
                (a, b) if a == b => format!("{key} = {a}"),
                (a, u64::MAX) => format!("{key} >= {a}"),
                (0, b) => format!("{key} <= {b}"),
                (a, b) => format!("{key} in {a}..={b}"),
            },
            Cond::Flag { value, .. } => format!("{key} = {value}"),
            Cond::Schedule(list) => {
                let names: Vec<&str> = list.iter().map(|s| s.as_str()).collect();
                format!("{key} in [{}]", names.join(", "))
            }
            Cond::Offload(list) => {
                let names: Vec<&str> = list.iter().map(|o| offload_name(*o)).collect();
                format!("{key} in [{}]", names.join(", "))
            }
            Cond::Fp8Recipe(list) => {
                let names: Vec<&str> = list.iter().map(|r| r.as_str()).collect();
                format!(
                    "training.precision = fp8 and {key} in [{}]",
                    names.join(", ")
                )
            }
        }
    }
}
