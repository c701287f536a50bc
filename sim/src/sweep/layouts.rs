//! The layouts of a sweep, as a user asks for them (`--vary` axes, `--search`, a shard),
//! numbered in full-sweep order; and the reading of saved sweep shards to merge. `twin sweep`
//! is argument parsing and a progress bar over these.

use super::{
    candidates, derive_dp, parse_axis, product, AxisError, Candidate, MergeError, SearchSpace,
    Shard, ShardError, SweepResult,
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
    /// Branch and bound: simulate only the layouts that can still enter the best `keep`
    /// (`None`: simulate every layout).
    pub keep: Option<usize>,
    /// What `search` varies (`None`: [`SearchSpace::default`], every axis).
    pub space: Option<SearchSpace>,
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
    pub layouts: LayoutSet,
    /// See [`SweepRequest::keep`].
    pub keep: Option<usize>,
    /// The base scenario as written, when a search left out its own layer split
    /// (`layer_partition`, `pipeline_layout`, `account_for_*`, which fit its pipeline depth
    /// only): its layout is then not among the candidates, and a caller can price it beside
    /// them (with the request's overrides).
    pub own_split: Option<ScenarioSource>,
}

/// The layouts of a sweep (or of one shard of it), numbered in full-sweep order. A search's
/// are kept compact ([`Candidate`]) and written out as overrides one at a time.
#[derive(Clone, Debug)]
pub struct LayoutSet {
    /// The searched layouts, each crossed with every `varied` entry (empty without
    /// `--search`: then `varied` alone are the layouts).
    pub(super) searched: Vec<Candidate>,
    pub(super) varied: Vec<Vec<String>>,
    pub(super) shard: Option<Shard>,
}

impl LayoutSet {
    /// Layouts given as override lists, numbered from 0.
    pub fn listed(layouts: Vec<Vec<String>>) -> LayoutSet {
        LayoutSet {
            searched: Vec::new(),
            varied: layouts,
            shard: None,
        }
    }

    /// The whole sweep's layout count (every shard's).
    pub fn total(&self) -> usize {
        if self.searched.is_empty() {
            self.varied.len()
        } else {
            self.searched.len().saturating_mul(self.varied.len())
        }
    }

    /// The positions in this shard, in order.
    pub fn positions(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.total()).filter(|i| self.shard.is_none_or(|s| s.holds(*i)))
    }

    /// How many layouts this shard holds.
    pub fn len(&self) -> usize {
        match self.shard {
            None => self.total(),
            Some(s) => {
                let (n, count, index) = (self.total(), s.count as usize, s.index as usize);
                n / count + usize::from(index < n % count)
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The overrides of the layout at `position` (empty past the end).
    pub fn overrides(&self, position: usize) -> Vec<String> {
        if self.searched.is_empty() {
            return self.varied.get(position).cloned().unwrap_or_default();
        }
        let per = self.varied.len().max(1);
        let Some(c) = self.searched.get(position / per) else {
            return Vec::new();
        };
        let mut o = c.overrides();
        if let Some(v) = self.varied.get(position % per) {
            o.extend(v.iter().cloned());
        }
        o
    }

    /// Every layout of this shard with its position.
    pub fn numbered(&self) -> Vec<(usize, Vec<String>)> {
        self.positions().map(|i| (i, self.overrides(i))).collect()
    }
}

impl SweepPlan {
    /// Numbers the layouts `req` asks for over `source`. A search leaves the layer split to
    /// each layout's pipeline (Megatron-Core's automatic split): a base scenario's
    /// `layer_partition`, `pipeline_layout` and `account_for_*` settings describe its own
    /// pipeline depth only, so they are dropped.
    pub fn new(mut source: ScenarioSource, req: &SweepRequest) -> Result<SweepPlan, SweepError> {
        // The resolution is kept whole to tell the keys the base writes from those it
        // defaults.
        let document = crate::scenario::Document::parse(&source.text, &source.origin)?;
        let written = document.validate(req.overrides)?;
        crate::setup::planned(&written)?;
        let mut base = written.scenario.clone();
        let p = &mut base.parallel;
        let split = p.layer_partition.is_some()
            || p.account_for_embedding_in_pipeline_split
            || p.account_for_loss_in_pipeline_split;
        let own_split = (req.search && split).then(|| source.clone());
        if req.search && split {
            p.layer_partition = None;
            p.account_for_embedding_in_pipeline_split = false;
            p.account_for_loss_in_pipeline_split = false;
        }
        if !req.overrides.is_empty() || (req.search && split) {
            // Fold the overrides into the text so every layout starts from them; what the
            // base leaves to a default that follows the layout (the gradient bucket from dp,
            // overlap_p2p_comm from the schedule, ...) stays unwritten, so that each layout
            // defaults it from its own settings.
            source.text = written.to_toml_leaving_defaults(&base);
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
        let searched = if req.search {
            candidates(&base, &req.space.clone().unwrap_or_default())
        } else {
            Vec::new()
        };
        let shard = req.shard.map(Shard::parse).transpose()?;
        Ok(SweepPlan {
            source,
            scenario_name: base.name,
            layouts: LayoutSet {
                searched,
                varied,
                shard,
            },
            keep: req.keep,
            own_split,
        })
    }

    /// Simulates the layouts in parallel (only those that can still enter the best `keep`
    /// when set), each priced as `pricing` prices its scenario, calling `progress` with the
    /// layouts done since its last call.
    pub fn run(
        self,
        objective: super::Objective,
        pricing: &super::Pricing,
        progress: &(dyn Fn(u64) + Sync),
    ) -> SweepResult {
        super::run_set(
            &self.source,
            &self.scenario_name,
            &self.layouts,
            objective,
            self.keep,
            pricing,
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
        let all = all.layouts.numbered();
        let shard = SweepRequest {
            shard: Some("1/2"),
            ..whole
        };
        let part = SweepPlan::new(source(), &shard).unwrap();
        assert_eq!(part.layouts.numbered(), vec![all[1].clone()]);
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
