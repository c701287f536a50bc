//! `--inject` values: one kill, or `random` ones drawn for the run, checked against the
//! run's ranks, steps and ops before anything starts.

use super::{JobError, Work};
use crate::launch::{self, Injection};

/// One `--inject` value.
#[derive(Clone, Debug)]
pub enum InjectArg {
    /// Kills drawn by a seed (`random`).
    Random,
    /// One kill, with the text it was read from.
    One(String, Injection),
}

impl InjectArg {
    /// `random`, or one kill ("kill rank=R at=...").
    pub fn parse(text: &str) -> Result<InjectArg, String> {
        if text.trim() == "random" {
            return Ok(InjectArg::Random);
        }
        Injection::parse(text)
            .map(|i| InjectArg::One(text.to_string(), i))
            .map_err(|e| e.to_string())
    }
}

/// How a run draws and bounds its faults.
#[derive(Clone, Debug)]
pub struct InjectSpec {
    pub inject: Vec<InjectArg>,
    /// Seed of `random`.
    pub seed: u64,
    /// Kills drawn by `random`.
    pub count: u32,
    /// Most restarts after failures before the run gives up.
    pub max_restarts: u32,
}

/// The kills of `spec` for `work` run for `steps` steps, each checked against the run.
pub fn injections(
    spec: &InjectSpec,
    work: &Work<'_>,
    steps: u32,
) -> Result<Vec<Injection>, JobError> {
    let world = work.plan.world;
    let steps = u64::from(steps);
    let ops_of = |rank: u32| work.ops_of(rank);
    let mut out = Vec::new();
    for a in &spec.inject {
        match a {
            InjectArg::Random => out.extend(launch::inject::random(
                spec.seed, spec.count, world, steps, &ops_of,
            )),
            InjectArg::One(text, i) => {
                i.check(text, world, steps, &ops_of)?;
                out.push(*i);
            }
        }
    }
    Ok(out)
}
