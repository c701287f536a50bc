//! What a layer holds. A transformer layer is attention followed by an MLP (dense, or a
//! mixture of experts); a hybrid model's layer (`model.hybrid_pattern`) is one block, a Mamba-2
//! mixer, an attention, a dense MLP or an MoE, each with its own norm and residual add
//! (Megatron-Core's `MambaLayer`, `TransformerLayer` with an identity MLP or attention:
//! NVIDIA/Megatron-LM@d98e8a64dd megatron/core/models/hybrid/hybrid_layer_specs.py). The
//! workload sizes a layer from its [`LayerShape`], and a layer range by how many layers of each
//! shape it holds ([`LayerCounts`]).

use crate::scenario::{Block, Model};

/// The MLP of a layer (its feed-forward block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ffn {
    None,
    Dense,
    Moe,
}

/// The blocks of one layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LayerShape {
    pub attention: bool,
    pub mlp: Ffn,
    pub mamba: bool,
}

impl LayerShape {
    /// A transformer layer: attention and a dense MLP, or attention and an MoE (`moe`).
    pub fn transformer(moe: bool) -> LayerShape {
        LayerShape {
            attention: true,
            mlp: if moe { Ffn::Moe } else { Ffn::Dense },
            mamba: false,
        }
    }

    /// A hybrid model's layer of one block.
    pub fn block(b: Block) -> LayerShape {
        LayerShape {
            attention: b == Block::Attention,
            mlp: match b {
                Block::Mlp => Ffn::Dense,
                Block::Moe => Ffn::Moe,
                Block::Mamba | Block::Attention => Ffn::None,
            },
            mamba: b == Block::Mamba,
        }
    }

    /// Attention and an MLP: a transformer layer, not a hybrid block.
    pub fn is_transformer(self) -> bool {
        self.attention && self.mlp != Ffn::None
    }

    /// Norm-and-residual sublayers: 2 in a transformer layer, 1 in a hybrid block. The
    /// framework file's per-layer elementwise work (`[fusions]`: norms, residual adds, their
    /// kernels) is a transformer layer's; a block does half of it.
    pub fn sublayers(self) -> u64 {
        u64::from(self.attention || self.mamba) + u64::from(self.mlp != Ffn::None)
    }

    /// This shape's part of `per_layer`, a transformer layer's elementwise work (passes or
    /// kernels of the framework file's `[fusions]`): all of it for a transformer layer; half
    /// for a block, rounded up for an MLP block (which has the activation's kernel) and down
    /// for the others, so that an attention block and an MLP block add up to a transformer
    /// layer exactly.
    pub fn share(self, per_layer: u64) -> u64 {
        match (self.sublayers(), self.mlp) {
            (2, _) => per_layer,
            (_, Ffn::None) => per_layer / 2,
            _ => per_layer.div_ceil(2),
        }
    }
}

/// The layers of a layer range by shape: transformer layers with a dense MLP (`dense`) and
/// with an MoE (`moe`), and a hybrid model's blocks (`blocks`, in [`Block::ALL`]'s order).
/// Two ranges with equal counts have equal work, whatever layers they start at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LayerCounts {
    pub dense: u64,
    pub moe: u64,
    pub blocks: [u64; 4],
}

impl LayerCounts {
    /// Those of layers `first .. first + n` of `m`.
    pub fn of(m: &Model, first: u64, n: u64) -> LayerCounts {
        match &m.hybrid {
            Some(h) => LayerCounts {
                dense: 0,
                moe: 0,
                blocks: Block::ALL.map(|(_, b)| h.count_in(b, first, n)),
            },
            None => {
                let moe = m.moe_layers_in(first, n);
                LayerCounts {
                    dense: n.saturating_sub(moe),
                    moe,
                    blocks: [0; 4],
                }
            }
        }
    }

    /// Every layer of the range.
    pub fn all(self) -> u64 {
        self.blocks
            .iter()
            .fold(self.dense.saturating_add(self.moe), |a, &b| {
                a.saturating_add(b)
            })
    }

    /// Layers with attention: every transformer layer and a hybrid model's attention blocks.
    pub fn attention_layers(self) -> u64 {
        self.dense
            .saturating_add(self.moe)
            .saturating_add(self.count(Block::Attention))
    }

    /// Layers with an MoE: transformer MoE layers and MoE blocks.
    pub fn moe_layers(self) -> u64 {
        self.moe.saturating_add(self.count(Block::Moe))
    }

    /// Blocks of kind `b` (0 outside a hybrid model).
    pub fn count(self, b: Block) -> u64 {
        Block::ALL
            .iter()
            .position(|(_, k)| *k == b)
            .and_then(|i| self.blocks.get(i).copied())
            .unwrap_or(0)
    }

    /// Each shape with how many layers of the range have it, transformer layers first (dense,
    /// then MoE), then the blocks; shapes the range lacks have 0.
    pub(crate) fn shapes(self) -> impl Iterator<Item = (LayerShape, u64)> {
        [
            (LayerShape::transformer(false), self.dense),
            (LayerShape::transformer(true), self.moe),
        ]
        .into_iter()
        .chain(
            Block::ALL
                .into_iter()
                .zip(self.blocks)
                .map(|((_, b), n)| (LayerShape::block(b), n)),
        )
    }
}
