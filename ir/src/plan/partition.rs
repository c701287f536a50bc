//! How the model's layers are split over the pipeline's virtual stages, as Megatron-Core splits
//! them, so that a layer count that does not divide `pp * vpp` (Llama 3.1 405B's 126 layers on
//! 8 or 16 stages) needs no hand-written partition.
//!
//! Sources, NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553:
//! - `megatron/core/transformer/transformer_block.py`, `get_num_layers_to_build`: with
//!   `account_for_embedding_in_pipeline_split` / `account_for_loss_in_pipeline_split` the
//!   embedding and the loss each count as one layer of the split, every virtual stage gets
//!   `(layers + slots) / (pp * vpp)`, and the first (last) virtual stage builds one layer fewer;
//!   with `num_layers_in_first_pipeline_stage` / `num_layers_in_last_pipeline_stage` the first
//!   and last pipeline ranks hold the given counts, the middle ranks split the rest evenly, and
//!   every rank's count is divided evenly over its `vpp` model chunks.
//! - `megatron/core/transformer/transformer_config.py`, `__post_init__`: the divisibility
//!   checks of both options (the slot count by `pp`, then by `vpp`; the first, last and middle
//!   ranks' counts by `vpp`), and `pipeline_model_parallel_layout` (an explicit layout), which
//!   may not be combined with either option.
//!
//! The rule, in order:
//! 1. `parallel.layer_partition` given: used as written (Megatron's explicit layout); the
//!    `account_for_*` keys may not be set with it.
//! 2. `account_for_embedding_in_pipeline_split` or `account_for_loss_in_pipeline_split` set:
//!    exactly Megatron's slot split above.
//! 3. Neither, and `pp * vpp` divides the layers: the even split.
//! 4. Neither, and it does not divide (automatic):
//!    - first the embedding and the loss each count as one slot, as in 2 with both set, when
//!      `layers + 2` divides `pp * vpp` and every virtual stage keeps a layer;
//!    - else lighter first and last stages, as Megatron's first/last-stage options would set
//!      them: each middle stage holds `m`, the fewest layers that are a multiple of `vpp` and
//!      at least `layers / pp` (so no stage holds more than the least possible maximum); the
//!      `r = layers - (pp - 2) * m` left go to the first and last stages in multiples of
//!      `vpp`, the first taking the larger half (the last also runs the output layer and the
//!      loss). It needs `pp >= 2`, `layers` a multiple of `vpp` and at least `vpp` layers for
//!      the last stage.
//!
//! twin needs at least one layer in every (stage, chunk), as `layer_partition` does, so a
//! split that would leave a chunk with the embedding or the loss alone is refused.

use serde::Serialize;

/// Which rule chose the split (what the report prints beside the counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "rule", rename_all = "kebab-case")]
pub enum PartitionRule {
    /// `layers / (pp * vpp)` on every virtual stage.
    Even,
    /// `parallel.layer_partition` as written.
    Given,
    /// The embedding and/or the loss counted as one layer slot each.
    Slots {
        embedding: bool,
        loss: bool,
        /// Chosen by twin because the layers do not divide, rather than set by the keys.
        automatic: bool,
    },
    /// Lighter first and last stages (chosen by twin: neither the even nor the slot split
    /// divides).
    LighterEnds {
        first_stage_layers: u32,
        middle_stage_layers: u32,
        last_stage_layers: u32,
    },
}

impl PartitionRule {
    /// The split was derived by twin rather than even or written by the user: the reports
    /// show it.
    pub fn is_derived(&self) -> bool {
        !matches!(self, PartitionRule::Even | PartitionRule::Given)
    }

    /// One line for the text report.
    pub fn describe(&self) -> String {
        match *self {
            PartitionRule::Even => "even split".into(),
            PartitionRule::Given => "parallel.layer_partition".into(),
            PartitionRule::Slots {
                embedding,
                loss,
                automatic,
            } => {
                let what = match (embedding, loss) {
                    (true, true) => "embedding and loss each counted as a layer",
                    (true, false) => "embedding counted as a layer",
                    (false, true) => "loss counted as a layer",
                    (false, false) => "even split",
                };
                if automatic {
                    format!("{what} (automatic: the layers do not divide pp*vpp)")
                } else {
                    what.into()
                }
            }
            PartitionRule::LighterEnds {
                first_stage_layers,
                middle_stage_layers,
                last_stage_layers,
            } => format!(
                "lighter first and last stages ({first_stage_layers}, {middle_stage_layers} per middle stage, {last_stage_layers}; automatic: the layers do not divide pp*vpp, nor with the embedding and loss as layers)"
            ),
        }
    }
}

/// What the split is computed from (the scenario's keys).
#[derive(Clone, Copy, Debug)]
pub struct SplitInput<'a> {
    pub layers: u32,
    pub pp: u32,
    pub vpp: u32,
    pub given: Option<&'a [u32]>,
    pub account_for_embedding: bool,
    pub account_for_loss: bool,
}

/// Layers per virtual stage (index `chunk * pp + stage`) and the rule that chose them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    pub layers_per_virtual_stage: Vec<u32>,
    pub rule: PartitionRule,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PartitionError {
    #[error("layer partition has {got} entries; pp*vpp = {want}")]
    Length { got: usize, want: u64 },
    #[error("layer partition sums to {got} layers; the model has {want}")]
    Sum { got: u64, want: u32 },
    #[error("layer partition entries must be at least 1, but for the first and last virtual stages (they hold the embedding and the loss)")]
    EmptyChunk,
    #[error("layer_partition gives the split; account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split cannot be set with it (as in Megatron-Core)")]
    GivenWithSlots,
    #[error("{layers} layers plus {slots} slot(s) for the embedding/loss = {total} do not divide over pp*vpp = {chunks} virtual stages")]
    SlotsUneven {
        layers: u32,
        slots: u32,
        total: u64,
        chunks: u64,
    },
    #[error("{layers} layers plus {slots} slot(s) over pp*vpp = {chunks} virtual stages leave the first or last virtual stage with no layer")]
    SlotsEmpty {
        layers: u32,
        slots: u32,
        chunks: u64,
    },
    #[error("{layers} layers do not split over pp = {pp}, vpp = {vpp}: not evenly ({layers} % {chunks} = {rem}), not with the embedding and loss as layers ({plus_two} % {chunks} = {rem2}), and not with lighter first and last stages ({why})")]
    Automatic {
        layers: u32,
        pp: u32,
        vpp: u32,
        chunks: u64,
        rem: u64,
        plus_two: u64,
        rem2: u64,
        why: String,
    },
}

/// The automatic split of `layers` over `pp * vpp` virtual stages: no `layer_partition` and
/// no `account_for_*` key (the split a layout search gives every pipeline).
pub fn automatic(layers: u32, pp: u32, vpp: u32) -> Result<Split, PartitionError> {
    split(SplitInput {
        layers,
        pp,
        vpp,
        given: None,
        account_for_embedding: false,
        account_for_loss: false,
    })
}

/// The split of `input.layers` over `pp * vpp` virtual stages (module docs give the rule).
pub fn split(input: SplitInput<'_>) -> Result<Split, PartitionError> {
    let SplitInput {
        layers,
        pp,
        vpp,
        given,
        account_for_embedding,
        account_for_loss,
    } = input;
    let chunks = u64::from(pp) * u64::from(vpp);
    let slots_set = account_for_embedding || account_for_loss;
    if let Some(part) = given {
        if slots_set {
            return Err(PartitionError::GivenWithSlots);
        }
        if part.len() as u64 != chunks {
            return Err(PartitionError::Length {
                got: part.len(),
                want: chunks,
            });
        }
        // Only the virtual stages with the embedding or the loss may hold no layer, as in
        // Megatron-Core's pipeline layouts ("E|..." and "...|L").
        let inner = part.get(1..part.len().saturating_sub(1)).unwrap_or(&[]);
        if inner.contains(&0) || part.len() == 1 && part.first() == Some(&0) {
            return Err(PartitionError::EmptyChunk);
        }
        let sum: u64 = part.iter().map(|&x| u64::from(x)).sum();
        if sum != u64::from(layers) {
            return Err(PartitionError::Sum {
                got: sum,
                want: layers,
            });
        }
        return Ok(Split {
            layers_per_virtual_stage: part.to_vec(),
            rule: PartitionRule::Given,
        });
    }
    if slots_set {
        return slot_split(
            layers,
            chunks,
            account_for_embedding,
            account_for_loss,
            false,
        );
    }
    if chunks > 0 && u64::from(layers).is_multiple_of(chunks) {
        let per = (u64::from(layers) / chunks) as u32;
        return Ok(Split {
            layers_per_virtual_stage: vec![per; chunks as usize],
            rule: PartitionRule::Even,
        });
    }
    if let Ok(s) = slot_split(layers, chunks, true, true, true) {
        return Ok(s);
    }
    lighter_ends(layers, pp, vpp).map_err(|why| {
        let plus_two = u64::from(layers) + 2;
        PartitionError::Automatic {
            layers,
            pp,
            vpp,
            chunks,
            rem: u64::from(layers) % chunks.max(1),
            plus_two,
            rem2: plus_two % chunks.max(1),
            why,
        }
    })
}

/// Megatron's `account_for_*_in_pipeline_split`: every virtual stage gets `(layers + slots) /
/// chunks`; the first gives one to the embedding, the last one to the loss.
fn slot_split(
    layers: u32,
    chunks: u64,
    embedding: bool,
    loss: bool,
    automatic: bool,
) -> Result<Split, PartitionError> {
    let slots = u32::from(embedding) + u32::from(loss);
    let total = u64::from(layers) + u64::from(slots);
    if chunks == 0 || !total.is_multiple_of(chunks) {
        return Err(PartitionError::SlotsUneven {
            layers,
            slots,
            total,
            chunks,
        });
    }
    let per = total / chunks;
    let n = chunks as usize;
    let mut out = vec![per; n];
    if embedding {
        out[0] -= 1;
    }
    if loss {
        out[n - 1] -= 1;
    }
    if out.contains(&0) {
        return Err(PartitionError::SlotsEmpty {
            layers,
            slots,
            chunks,
        });
    }
    Ok(Split {
        // `per <= total <= u32::MAX + 2`; a count that survives the zero check fits a u32
        layers_per_virtual_stage: out.into_iter().map(|x| x as u32).collect(),
        rule: PartitionRule::Slots {
            embedding,
            loss,
            automatic,
        },
    })
}

/// Lighter first and last stages (rule 4b of the module docs); the error says why not.
fn lighter_ends(layers: u32, pp: u32, vpp: u32) -> Result<Split, String> {
    if pp < 2 {
        return Err("that needs pp >= 2".into());
    }
    if !layers.is_multiple_of(vpp) {
        return Err(format!(
            "each stage's layers must be a multiple of vpp = {vpp}, but {layers} is not"
        ));
    }
    let (layers, pp, vpp) = (u64::from(layers), u64::from(pp), u64::from(vpp));
    let middle = layers.div_ceil(pp).div_ceil(vpp) * vpp;
    let rest = layers
        .checked_sub((pp - 2) * middle)
        .ok_or_else(|| format!("{} middle stages of {middle} exceed the layers", pp - 2))?;
    let last = rest / vpp / 2 * vpp;
    let first = rest - last;
    if last < vpp {
        return Err(format!(
            "with {middle} layers per middle stage, {rest} are left for the first and last stages, fewer than one per chunk"
        ));
    }
    let mut per_stage = vec![middle; pp as usize];
    per_stage[0] = first;
    per_stage[pp as usize - 1] = last;
    let mut out = vec![0u32; (pp * vpp) as usize];
    for chunk in 0..vpp {
        for stage in 0..pp {
            out[(chunk * pp + stage) as usize] = (per_stage[stage as usize] / vpp) as u32;
        }
    }
    Ok(Split {
        layers_per_virtual_stage: out,
        rule: PartitionRule::LighterEnds {
            first_stage_layers: first as u32,
            middle_stage_layers: middle as u32,
            last_stage_layers: last as u32,
        },
    })
}

#[cfg(test)]
#[path = "partition_tests.rs"]
mod tests;
