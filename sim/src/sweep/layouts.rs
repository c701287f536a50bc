//! The layouts of a sweep, as a user asks for them (`--vary` axes, `--search`, a shard),
//! numbered in full-sweep order; and the reading of saved sweep shards to merge. `twin sweep`
//! is argument parsing and a progress bar over these.

use super::{
    derive_dp, parse_axis, product, search, AxisError, MergeError, SearchSpace, Shard, ShardError,
    SweepResult,
};
use crate::scenario::ScenarioError;
use crate::setup::ScenarioSource;
use std::path::{Path, PathBuf};

/// What to sweep over a base scenario.
#[derive(Clone, Debug, Default)]
pub struct SweepRequest<'a> {
    /// `KEY=VALUE` overrides of the base scenario, applied before any layout.
    pub overrides: &'a [String],
    /// Axes: `KEY=V1,V2,...` or `KEY=A..B`.
    pub vary: &'a [String],
    /// Search every layout of the GPU count (crossed with the axes).
    pub search: bool,
    /// `I/N`: only the layouts whose index is I modulo N.
    pub shard: Option<&'a str>,
}

/// Why a sweep could not be planned or its shards read; all of them are bad input.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// Boxed: a located scenario error is large.
    #[error(transparent)]
    Scenario(Box<ScenarioError>),
    #[error(transparent)]
    Axis(#[from] AxisError),
    #[error(transparent)]
    Shard(#[from] ShardError),
    #[error("nothing to sweep: give --vary KEY=VALUES or --search")]
    Nothing,
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not a `twin sweep --out X.json` file", path.display())]
    NotSweep {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error(transparent)]
    Merge(#[from] MergeError),
}

impl From<ScenarioError> for SweepError {
    fn from(e: ScenarioError) -> Self {
        SweepError::Scenario(Box::new(e))
    }
}

/// The layouts to simulate, each numbered in full-sweep order with its overrides.
#[derive(Clone, Debug)]
pub struct SweepPlan {
    /// The base scenario's source, with the request's overrides folded in.
    pub source: ScenarioSource,
    pub scenario_name: String,
    pub layouts: Vec<(usize, Vec<String>)>,
}

impl SweepPlan {
    /// Numbers the layouts `req` asks for over `source`.
    pub fn new(mut source: ScenarioSource, req: &SweepRequest) -> Result<SweepPlan, SweepError> {
        let base = source.resolve(req.overrides)?;
        if !req.overrides.is_empty() {
            // Fold the overrides into the text so every layout starts from them.
            source.text = crate::scenario::to_toml(&base);
        }
        let axes = req
            .vary
            .iter()
            .map(|v| parse_axis(v))
            .collect::<Result<Vec<_>, _>>()?;
        if axes.is_empty() && !req.search {
            return Err(SweepError::Nothing);
        }
        let mut varied = product(&axes);
        if !req.search {
            derive_dp(&base, &mut varied);
        }
        let layouts: Vec<Vec<String>> = if req.search {
            let searched = search(&base, &SearchSpace::default());
            searched
                .iter()
                .flat_map(|s| {
                    varied.iter().map(move |v| {
                        let mut o = s.clone();
                        o.extend(v.iter().cloned());
                        o
                    })
                })
                .collect()
        } else {
            varied
        };
        let shard = req.shard.map(Shard::parse).transpose()?;
        let layouts = layouts
            .into_iter()
            .enumerate()
            .filter(|(i, _)| shard.is_none_or(|s| s.holds(*i)))
            .collect();
        Ok(SweepPlan {
            source,
            scenario_name: base.name,
            layouts,
        })
    }

    /// Simulates every layout in parallel, calling `progress` once per finished layout.
    pub fn run(self, objective: super::Objective, progress: &(dyn Fn() + Sync)) -> SweepResult {
        super::run(
            &self.source,
            &self.scenario_name,
            self.layouts,
            objective,
            progress,
        )
    }
}

/// Reads sweep results written as JSON (`twin sweep --out X.json`) and merges them.
pub fn merge_files(files: &[PathBuf]) -> Result<SweepResult, SweepError> {
    let parts = files
        .iter()
        .map(|f| read_part(f))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SweepResult::merge(parts)?)
}

fn read_part(path: &Path) -> Result<SweepResult, SweepError> {
    let text = std::fs::read_to_string(path).map_err(|source| SweepError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| SweepError::NotSweep {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> ScenarioSource {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/small.toml");
        ScenarioSource::read(&path).unwrap()
    }

    #[test]
    fn a_request_without_axes_or_search_is_refused() {
        let err = SweepPlan::new(source(), &SweepRequest::default()).unwrap_err();
        assert!(matches!(err, SweepError::Nothing), "{err}");
    }

    #[test]
    fn a_shard_keeps_its_layouts_numbered_as_in_the_whole_sweep() {
        let vary = ["parallel.tp=1,2,4".to_string()];
        let whole = SweepRequest {
            vary: &vary,
            ..Default::default()
        };
        let all = SweepPlan::new(source(), &whole).unwrap();
        assert_eq!(all.layouts.len(), 3);
        let shard = SweepRequest {
            shard: Some("1/2"),
            ..whole
        };
        let part = SweepPlan::new(source(), &shard).unwrap();
        assert_eq!(part.layouts, vec![all.layouts[1].clone()]);
    }

    #[test]
    fn overrides_are_folded_into_the_source_every_layout_starts_from() {
        let vary = ["parallel.tp=1,2".to_string()];
        let overrides = ["training.micro_batch=1".to_string()];
        let req = SweepRequest {
            vary: &vary,
            overrides: &overrides,
            ..Default::default()
        };
        let plan = SweepPlan::new(source(), &req).unwrap();
        let base = plan.source.resolve(&[]).unwrap();
        assert_eq!(base.training.micro_batch, 1);
    }
}
