//! The resolved scenario: every preset expanded, every default filled in, every cross-field
//! rule checked. Everything downstream (plan, schedule generators, cost models, the runtime)
//! reads these types and never the raw TOML, so a default lives in exactly one place: the
//! parser that builds them.

use serde::{Deserialize, Serialize};

/// A whole training job: model, cluster, parallel layout, training recipe and run settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    pub name: String,
    pub model: Model,
    pub cluster: Cluster,
    pub parallel: Parallel,
    pub training: Training,
    /// Framework memory outside the model (`[memory]`).
    #[serde(default)]
    pub memory: MemorySettings,
    pub run: Run,
}

/// Transformer shape. Dense GPT/Llama-style decoder; MoE when `moe` is set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Model {
    /// Preset name or the file the shape came from; informational.
    pub name: String,
    pub layers: u32,
    pub hidden: u64,
    pub heads: u32,
    /// Key/value heads (GQA); equals `heads` for classic multi-head attention.
    pub kv_heads: u32,
    /// Width of one attention head when it is not `hidden / heads` (Qwen3, Gemma, GPT-OSS);
    /// `None` = `hidden / heads`. Read it through [`Model::head_dim`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<u64>,
    pub ffn_hidden: u64,
    pub seq_len: u64,
    pub vocab: u64,
    /// Gated MLP (SwiGLU, as Llama): three ffn matrices instead of two.
    pub gated_mlp: bool,
    /// Input embedding and output head share one matrix.
    pub tied_embeddings: bool,
    /// Biases on the query, key and value projections (`qkv_bias`; GPT-style models, without a
    /// gated MLP, have biases on every linear layer whatever this says).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub qkv_bias: bool,
    /// Multi-head latent attention (DeepSeek-V2/V3) instead of Q/K/V projections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mla: Option<Mla>,
    /// Multi-token prediction modules after the last layer (`mtp_layers`).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub mtp_layers: u32,
    /// Sliding-window attention on some layers (`sliding_window`, `sliding_window_every`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<SlidingWindow>,
    /// A learned sink logit per head in each layer's softmax (`attention_sinks`, GPT-OSS).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub attention_sinks: bool,
    pub moe: Option<Moe>,
    /// A hybrid model (`hybrid_pattern`, `[model.mamba]`): each layer one block, a Mamba-2
    /// mixer, an attention, a dense MLP or an MoE, instead of attention and MLP together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hybrid: Option<Hybrid>,
}

/// The block kinds of a hybrid model's layers, with Megatron-Core's symbols
/// (NVIDIA/Megatron-LM@d98e8a64dd megatron/core/models/hybrid/hybrid_layer_allocation.py
/// `Symbols`: `M` Mamba, `*` attention, `-` MLP, `E` MoE).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Block {
    Mamba,
    Attention,
    Mlp,
    Moe,
}

impl Block {
    /// Every kind with its symbol.
    pub const ALL: [(char, Block); 4] = [
        ('M', Block::Mamba),
        ('*', Block::Attention),
        ('-', Block::Mlp),
        ('E', Block::Moe),
    ];

    pub fn of(symbol: char) -> Option<Block> {
        Self::ALL
            .iter()
            .find(|(c, _)| *c == symbol)
            .map(|(_, b)| *b)
    }
}

/// A hybrid model's layer pattern and its Mamba-2 mixer's shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hybrid {
    /// One symbol of [`Block::ALL`] per layer, as Megatron-Core's `hybrid_override_pattern`
    /// writes it (checked when read).
    pub pattern: String,
    /// `None` when no layer is a Mamba mixer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mamba: Option<Mamba>,
}

impl Hybrid {
    /// Layers of kind `block` among global layers `first .. first + n`.
    pub fn count_in(&self, block: Block, first: u64, n: u64) -> u64 {
        let first = usize::try_from(first).unwrap_or(usize::MAX);
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        self.pattern
            .chars()
            .skip(first)
            .take(n)
            .filter(|&c| Block::of(c) == Some(block))
            .count() as u64
    }
}

/// A Mamba-2 mixer (`[model.mamba]`; Megatron-Core's `MambaMixer`,
/// NVIDIA/Megatron-LM@d98e8a64dd megatron/core/ssm/mamba_mixer.py): `in_proj` maps the hidden
/// state to `z`, `x` (`heads * head_dim` each), `B` and `C` (`groups * state` each) and `dt`
/// (`heads`); a depthwise causal convolution of `conv_kernel` taps runs over `x`, `B` and `C`;
/// the state-space scan runs in chunks of `chunk` tokens; a gated RMSNorm and `out_proj`
/// (`heads * head_dim` to hidden) follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mamba {
    pub heads: u64,
    pub head_dim: u64,
    pub state: u64,
    pub groups: u64,
    pub conv_kernel: u64,
    pub chunk: u64,
}

impl Mamba {
    /// `heads * head_dim`: the width of `x`, `z` and the scan's output.
    pub fn inner(&self) -> u64 {
        self.heads.saturating_mul(self.head_dim)
    }

    /// The width `in_proj` writes: `z`, `x`, `B`, `C` and `dt`.
    pub fn in_proj_width(&self) -> u64 {
        self.inner()
            .saturating_mul(2)
            .saturating_add(self.groups.saturating_mul(self.state).saturating_mul(2))
            .saturating_add(self.heads)
    }

    /// The channels the convolution runs over: `x`, `B` and `C`.
    pub fn conv_channels(&self) -> u64 {
        self.inner()
            .saturating_add(self.groups.saturating_mul(self.state).saturating_mul(2))
    }
}

/// Sliding-window attention: on layer `i` (from 0) with `i % every == 0` each query sees
/// itself and the `tokens - 1` keys before it, as Transformer Engine's `window_size =
/// (tokens - 1, 0)` on the layers Megatron-Core's `window_attn_skip_freq = every` selects
/// (NVIDIA/Megatron-LM@d98e8a64dd megatron/core/transformer/utils.py
/// `is_layer_window_attention`, 1-based `layer_number % every != 0`); the other layers see
/// the whole sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlidingWindow {
    pub tokens: u64,
    pub every: u32,
}

impl SlidingWindow {
    /// Whether global layer `i` attends over the window.
    pub fn is_windowed_layer(&self, i: u64) -> bool {
        i.is_multiple_of(u64::from(self.every.max(1)))
    }

    /// Windowed layers among global layers `first .. first + n`.
    pub fn windowed_layers_in(&self, first: u64, n: u64) -> u64 {
        let every = u64::from(self.every.max(1));
        let end = first.saturating_add(n);
        end.div_ceil(every) - first.div_ceil(every)
    }
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

/// DeepSeek's multi-head latent attention (`[model.mla]`): queries from an optional
/// low-rank compression, keys and values from one joint low-rank compression plus a rotary
/// key shared by all heads (arXiv 2405.04434, section 2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mla {
    /// 0: queries projected from the hidden state directly.
    pub q_lora_rank: u64,
    pub kv_lora_rank: u64,
    pub qk_nope_head_dim: u64,
    pub qk_rope_head_dim: u64,
    pub v_head_dim: u64,
}

impl Mla {
    /// Per-head query/key width the attention scores are taken over.
    pub fn qk_head_dim(&self) -> u64 {
        self.qk_nope_head_dim.saturating_add(self.qk_rope_head_dim)
    }
}

impl Model {
    /// Width of one attention head: `head_dim` when given, else `hidden / heads`.
    /// MoE layers among global layers `first .. first + n`: the pattern's `E` layers in a
    /// hybrid model, else those [`Moe::moe_layers_in`] places; 0 without experts.
    pub fn moe_layers_in(&self, first: u64, n: u64) -> u64 {
        match (&self.hybrid, &self.moe) {
            (Some(h), Some(_)) => h.count_in(Block::Moe, first, n),
            (None, Some(moe)) => moe.moe_layers_in(first, n),
            (_, None) => 0,
        }
    }

    pub fn head_dim(&self) -> u64 {
        self.head_dim
            .unwrap_or(self.hidden / u64::from(self.heads.max(1)))
    }

    /// Width of Q, of the attention context and of the output projection's input:
    /// `heads * head_dim` (`hidden` without an explicit `head_dim`).
    pub fn q_width(&self) -> u64 {
        match self.head_dim {
            Some(d) => u64::from(self.heads).saturating_mul(d),
            None => self.hidden,
        }
    }

    /// Width of K (and of V): `kv_heads * head_dim` (`hidden * kv_heads / heads` without an
    /// explicit `head_dim`).
    pub fn kv_width(&self) -> u64 {
        match self.head_dim {
            Some(d) => u64::from(self.kv_heads).saturating_mul(d),
            None => {
                self.hidden.saturating_mul(u64::from(self.kv_heads)) / u64::from(self.heads.max(1))
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Moe {
    pub experts: u32,
    pub top_k: u32,
    /// Layer `i` at or past `dense_layers` is an MoE layer when `i % moe_every == 0` (1 = all
    /// of them).
    pub moe_every: u32,
    /// Inner width of one routed expert's MLP (`moe_ffn_hidden`).
    pub ffn_hidden: u64,
    /// Experts every token goes through beside its routed ones (`shared_experts`).
    #[serde(default)]
    pub shared_experts: u32,
    /// Inner width of one shared expert's MLP (`shared_expert_ffn_hidden`).
    #[serde(default)]
    pub shared_ffn_hidden: u64,
    /// The first `dense_layers` layers have a dense MLP.
    #[serde(default)]
    pub dense_layers: u32,
    /// Inner MLP width of the dense layers (`dense_ffn_hidden`).
    pub dense_ffn_hidden: u64,
    /// Group-limited routing (`router_groups`, `router_group_top_k`): the experts form
    /// `groups` groups of consecutive experts, and each token picks its `top_k` among the
    /// experts of `group_top_k` of them (DeepSeek-V3's node-limited routing); `(1, 1)`: no
    /// grouping.
    #[serde(default = "one_group")]
    pub router_groups: (u32, u32),
}

fn one_group() -> (u32, u32) {
    (1, 1)
}

impl Moe {
    /// Mixtral-style experts: every MoE layer's experts `ffn_hidden` wide, no shared experts,
    /// no dense first layers.
    pub fn uniform(experts: u32, top_k: u32, moe_every: u32, ffn_hidden: u64) -> Moe {
        Moe {
            experts,
            top_k,
            moe_every,
            ffn_hidden,
            shared_experts: 0,
            shared_ffn_hidden: ffn_hidden,
            dense_layers: 0,
            dense_ffn_hidden: ffn_hidden,
            router_groups: one_group(),
        }
    }

    /// Whether global layer `i` (from 0) is an MoE layer (of a model without a hybrid pattern;
    /// [`Model::moe_layers_in`] reads the pattern where there is one).
    pub fn is_moe_layer(&self, i: u64) -> bool {
        i >= u64::from(self.dense_layers) && i.is_multiple_of(u64::from(self.moe_every.max(1)))
    }

    /// MoE layers among global layers `first .. first + n`.
    pub fn moe_layers_in(&self, first: u64, n: u64) -> u64 {
        let every = u64::from(self.moe_every.max(1));
        // Multiples of `every` in [lo, hi).
        let count = |lo: u64, hi: u64| {
            if hi <= lo {
                0
            } else {
                hi.div_ceil(every) - lo.div_ceil(every)
            }
        };
        let lo = first.max(u64::from(self.dense_layers));
        count(lo, first.saturating_add(n))
    }
}

/// Peak dense throughput per dtype, FLOP/s.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeakFlops {
    pub fp32_flops_per_s: f64,
    pub tf32_flops_per_s: f64,
    pub fp16_flops_per_s: f64,
    pub bf16_flops_per_s: f64,
    pub fp8_flops_per_s: f64,
}

impl PeakFlops {
    /// Dense peak FLOP/s for a compute dtype.
    pub fn for_precision(&self, dtype: Precision) -> f64 {
        match dtype {
            Precision::Fp32 => self.fp32_flops_per_s,
            Precision::Fp16 => self.fp16_flops_per_s,
            Precision::Bf16 => self.bf16_flops_per_s,
            Precision::Fp8 => self.fp8_flops_per_s,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    pub name: String,
    pub peak: PeakFlops,
    /// Device memory as the driver counts it (nvidia-smi's total, MiB x 2^20).
    pub hbm_bytes: u64,
    /// What the driver keeps of `hbm_bytes` for itself (nvidia-smi's "Reserved"): no process
    /// can allocate it, and cuMemGetInfo's total leaves it out.
    #[serde(default)]
    pub driver_reserved_bytes: u64,
    pub hbm_bandwidth_bytes_per_s: f64,
}

impl Gpu {
    /// The bytes a process can hold: `hbm_bytes` less the driver's share, i.e. cuMemGetInfo's
    /// total. The memory verdict compares a rank's peak against this.
    pub fn usable_bytes(&self) -> u64 {
        self.hbm_bytes.saturating_sub(self.driver_reserved_bytes)
    }
}

/// One direction of a link tier, as seen by one GPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// Unidirectional bandwidth available to one GPU on this tier.
    pub bandwidth_bytes_per_s: f64,
    pub latency_ns: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cluster {
    pub gpu: Gpu,
    pub gpus: u32,
    pub gpus_per_node: u32,
    /// Node preset name ("dgx-a100", ...) or "custom".
    pub node: String,
    /// The scenario named no node and `node` is the GPU preset's usual one.
    #[serde(default)]
    pub node_from_gpu: bool,
    /// NVLink/NVSwitch tier inside a node.
    pub intra_node: Link,
    /// Network tier between nodes (per GPU, i.e. one NIC rail).
    pub inter_node: Link,
    /// Wiring and network model (`[cluster.topology]`, see docs/reference/topology.md).
    #[serde(default)]
    pub topology: super::topology::NetworkTopology,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PipelineSchedule {
    Gpipe,
    #[serde(rename = "1f1b")]
    OneFOneB,
    #[serde(rename = "interleaved-1f1b")]
    Interleaved1F1B,
    ZeroBubble,
    /// DeepSeek-V3's bidirectional pipeline: rank `r` holds stages `r` and `pp - 1 - r`.
    #[serde(rename = "dualpipe")]
    DualPipe,
}

/// The name `value` has in a table of (name, value) choices; `?` if it has none.
pub(crate) fn name_of<T: PartialEq>(names: &[(&'static str, T)], value: T) -> &'static str {
    names
        .iter()
        .find(|(_, v)| *v == value)
        .map(|(n, _)| *n)
        .unwrap_or("?")
}

impl PipelineSchedule {
    pub const ALL: [(&'static str, PipelineSchedule); 5] = [
        ("gpipe", PipelineSchedule::Gpipe),
        ("1f1b", PipelineSchedule::OneFOneB),
        ("interleaved-1f1b", PipelineSchedule::Interleaved1F1B),
        ("zero-bubble", PipelineSchedule::ZeroBubble),
        ("dualpipe", PipelineSchedule::DualPipe),
    ];
    pub fn as_str(self) -> &'static str {
        name_of(&Self::ALL, self)
    }
}

/// How context parallelism exchanges keys and values (`[parallel] cp_algorithm`), as
/// Transformer Engine's `cp_comm_type` names them (TransformerEngine
/// `transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py`):
/// - `AllGather` ("all_gather"): K and V all-gathered over the cp group before attention, the
///   gradients of K and V reduce-scattered after its backward.
/// - `Ring` ("p2p"): K and V blocks passed around the cp group by point-to-point transfers,
///   each overlapped with the attention of the block before; the backward passes K, V and
///   their gradients the same way.
/// - `Ulysses` ("a2a", DeepSpeed-Ulysses): all-to-alls turn Q, K and V from sequence- to
///   head-sharded before attention and the output back after it (heads divisible by cp).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CpAlgorithm {
    AllGather,
    Ring,
    Ulysses,
}

impl CpAlgorithm {
    pub const ALL: [(&'static str, CpAlgorithm); 3] = [
        ("all-gather", CpAlgorithm::AllGather),
        ("ring", CpAlgorithm::Ring),
        ("ulysses", CpAlgorithm::Ulysses),
    ];
    pub fn as_str(self) -> &'static str {
        name_of(&Self::ALL, self)
    }
}

/// How FP8 training scales the tensors it casts (`[training] fp8_recipe`):
/// - `Delayed`: Transformer Engine's delayed scaling, each scale from the amax history of
///   earlier steps, so a cast is one pass (TransformerEngine `DelayedScaling`).
/// - `Tensorwise`: current (just-in-time) per-tensor scaling: the tensor's amax is reduced in
///   a pass of its own before the cast (TE `Float8CurrentScaling`, torchao's tensorwise
///   `Float8Linear`).
/// - `Rowwise`: a scale per row of each operand (torchao's rowwise `Float8Linear`, cuBLASLt's
///   outer-vector scales on Hopper): its GEMMs on their own curve (a profile's
///   `[gemm.fp8_rowwise]`), each cast along both axes.
/// - `Blockwise`: DeepSeek-V3's and Transformer Engine's `Float8BlockScaling`, a scale per
///   1 x 128 block of activations and gradients and per 128 x 128 block of weights: its GEMMs
///   on their own curve (a profile's `[gemm.fp8_blockwise]`), each cast along both axes in one
///   kernel that reduces each block's amax as it goes.
/// - `Mxfp8` (Blackwell's microscaling, Transformer Engine's `MXFP8BlockScaling`, torchao's
///   MX recipe): an E8M0 scale per 32 elements, applied by the tensor cores of compute
///   capability 10.0 and later (refused on older GPUs): its GEMMs on the FP8 curve (a
///   profile's `[gemm.fp8]`; Blackwell's block-scaled MMA runs at the FP8 rate, and no
///   measured MXFP8 curve exists yet), each cast along both axes in one kernel, as block
///   scaling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fp8Recipe {
    Delayed,
    Tensorwise,
    Rowwise,
    Blockwise,
    Mxfp8,
}

impl Fp8Recipe {
    /// The compute capability of `gpu` (a preset's name) when it is known and too old for the
    /// recipe: MXFP8 needs 10.0 (Blackwell's block-scaled tensor cores); the other recipes run
    /// on any GPU with FP8. `None`: the recipe may run there.
    pub fn too_old_on(self, gpu: &str) -> Option<(u32, u32)> {
        match (self, super::presets::compute_capability(gpu)) {
            (Fp8Recipe::Mxfp8, Some(cc)) if cc.0 < 10 => Some(cc),
            _ => None,
        }
    }

    pub const ALL: [(&'static str, Fp8Recipe); 5] = [
        ("delayed", Fp8Recipe::Delayed),
        ("tensorwise", Fp8Recipe::Tensorwise),
        ("rowwise", Fp8Recipe::Rowwise),
        ("blockwise", Fp8Recipe::Blockwise),
        ("mxfp8", Fp8Recipe::Mxfp8),
    ];
    pub fn as_str(self) -> &'static str {
        name_of(&Self::ALL, self)
    }
}

/// Order in which mesh axes are laid onto consecutive ranks, innermost first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Axis {
    Tp,
    Cp,
    Ep,
    Dp,
    Pp,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Parallel {
    pub tp: u32,
    pub pp: u32,
    /// Data-parallel size of the dense layers: `tp*pp*cp*dp` is the GPU count.
    pub dp: u32,
    /// Virtual pipeline stages (model chunks) per device; 1 unless interleaved.
    pub vpp: u32,
    /// Expert parallelism: the expert layers group `ep` of the `dp` ranks (Megatron-Core's
    /// mesh), leaving `dp / ep` expert data-parallel ranks ([`Parallel::edp`]).
    pub ep: u32,
    /// Expert tensor parallelism (`etp`); `None` = `tp`. Read it through [`Parallel::etp`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etp: Option<u32>,
    pub cp: u32,
    /// How context parallelism exchanges keys and values.
    #[serde(default = "default_cp_algorithm")]
    pub cp_algorithm: CpAlgorithm,
    /// ZeRO stage 0..=3 over the data-parallel group.
    pub zero: u8,
    /// FSDP (full sharding); behaves as ZeRO-3 with per-layer gather/scatter.
    pub fsdp: bool,
    /// HSDP: ZeRO-3/FSDP shards model state within blocks of this many consecutive
    /// data-parallel ranks and replicates it across the `dp / fsdp_degree` blocks; `None` =
    /// one block of `dp` (plain FSDP). Read it through [`Parallel::fsdp_degree`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fsdp_degree: Option<u32>,
    pub sequence_parallel: bool,
    pub schedule: PipelineSchedule,
    /// Explicit layers per (stage, chunk) in pipeline order, length pp*vpp; `None` = the rule
    /// of `plan::partition` (even where the layers divide).
    pub layer_partition: Option<Vec<u32>>,
    /// Megatron-Core's `account_for_embedding_in_pipeline_split`: the embedding counts as one
    /// layer of the pipeline split (`plan::partition`).
    #[serde(default)]
    pub account_for_embedding_in_pipeline_split: bool,
    /// Megatron-Core's `account_for_loss_in_pipeline_split`: the loss counts as one layer.
    #[serde(default)]
    pub account_for_loss_in_pipeline_split: bool,
    /// Rank placement, innermost axis first. Default: tp, cp, ep, dp, pp (Megatron order).
    pub order: [Axis; 5],
}

fn default_cp_algorithm() -> CpAlgorithm {
    CpAlgorithm::AllGather
}

impl Parallel {
    /// Data-parallel size of the expert layers: `dp / ep`, or `tp * cp * dp / (etp * ep)` when
    /// the expert layers refold a stage's ranks.
    pub fn edp(&self) -> u32 {
        if self.expert_refold() {
            let block = self.expert_block();
            let experts = u64::from(self.etp()) * u64::from(self.ep.max(1));
            u32::try_from(block / experts.max(1)).unwrap_or(u32::MAX)
        } else {
            self.dp / self.ep.max(1)
        }
    }

    /// Expert tensor parallelism: `etp`, else `tp`.
    pub fn etp(&self) -> u32 {
        self.etp.unwrap_or(self.tp)
    }

    /// Whether the expert layers refold a stage's `tp * cp * dp` ranks as `etp * ep * edp`
    /// (Megatron-Core's expert rank generator, expert tp innermost, then ep, then the expert
    /// data parallelism): when `etp` is other than `tp`, and when expert parallelism meets
    /// context parallelism (the expert-parallel group then takes the context-parallel ranks
    /// first, `etp` apart, where the dense mesh would put it along dp). Otherwise the expert
    /// layers keep the dense mesh: `ep` groups `ep` of the data-parallel ranks.
    pub fn expert_refold(&self) -> bool {
        self.etp() != self.tp || (self.cp > 1 && self.ep > 1)
    }

    /// The ranks of a stage that the expert layers refold: `tp * cp * dp`.
    pub fn expert_block(&self) -> u64 {
        u64::from(self.tp) * u64::from(self.cp.max(1)) * u64::from(self.dp)
    }

    pub const DEFAULT_ORDER: [Axis; 5] = [Axis::Tp, Axis::Cp, Axis::Ep, Axis::Dp, Axis::Pp];

    /// Data-parallel ranks that share one copy of the model state: `fsdp_degree` under
    /// ZeRO-3/FSDP when given (HSDP), else `dp`.
    pub fn fsdp_degree(&self) -> u32 {
        match self.fsdp_degree {
            Some(f) if self.fsdp || self.zero >= 3 => f,
            _ => self.dp,
        }
    }

    /// Copies of each model-state shard across data parallelism: `dp / fsdp_degree` (1 but
    /// for HSDP).
    pub fn dp_replicas(&self) -> u32 {
        self.dp / self.fsdp_degree().max(1)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    Fp32,
    Fp16,
    Bf16,
    Fp8,
}

impl Precision {
    /// Bytes per element of weights/activations in the compute dtype.
    pub fn bytes(self) -> u64 {
        match self {
            Precision::Fp32 => 4,
            Precision::Fp16 | Precision::Bf16 => 2,
            Precision::Fp8 => 1,
        }
    }
}

/// The modules Megatron-Core's selective recompute runs again (`recompute_modules`,
/// NVIDIA/Megatron-LM@d98e8a64dd megatron/core/transformer/transformer_config.py
/// `recompute_modules`: their outputs are not kept for the backward, which runs their forward
/// again first).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RecomputeModules {
    /// The attention core (`core_attn`, Megatron-Core's default).
    pub core_attn: bool,
    /// The norms that are modules of their own (`layernorm`): an MoE layer's pre-MLP norm,
    /// multi-head latent attention's input norm; Transformer Engine fuses the others into the
    /// linear layer after them.
    pub layernorm: bool,
    /// The routed experts' activation function (`moe_act`).
    pub moe_act: bool,
    /// Multi-head latent attention's up-projections (`mla_up_proj`).
    pub mla_up_proj: bool,
    /// A dense layer's whole MLP (`mlp`).
    pub mlp: bool,
    /// An MoE layer's whole MoE block: router, dispatch, experts, combine (`moe`).
    pub moe: bool,
    /// The shared experts (`shared_experts`).
    pub shared_experts: bool,
}

impl RecomputeModules {
    /// The module names, as Megatron-Core spells them.
    pub const NAMES: [&'static str; 7] = [
        "core_attn",
        "layernorm",
        "moe_act",
        "mla_up_proj",
        "mlp",
        "moe",
        "shared_experts",
    ];

    /// Megatron-Core's default: the attention core only.
    pub const ATTENTION_CORE: RecomputeModules = RecomputeModules {
        core_attn: true,
        layernorm: false,
        moe_act: false,
        mla_up_proj: false,
        mlp: false,
        moe: false,
        shared_experts: false,
    };

    fn flag(&mut self, name: &str) -> Option<&mut bool> {
        Some(match name {
            "core_attn" => &mut self.core_attn,
            "layernorm" => &mut self.layernorm,
            "moe_act" => &mut self.moe_act,
            "mla_up_proj" => &mut self.mla_up_proj,
            "mlp" => &mut self.mlp,
            "moe" => &mut self.moe,
            "shared_experts" => &mut self.shared_experts,
            _ => return None,
        })
    }

    /// Sets module `name`; false for a name that is none of [`RecomputeModules::NAMES`].
    pub fn set(&mut self, name: &str) -> bool {
        match self.flag(name) {
            Some(f) => {
                *f = true;
                true
            }
            None => false,
        }
    }

    /// The names of the modules set, in [`RecomputeModules::NAMES`]' order.
    pub fn names(&self) -> Vec<&'static str> {
        let mut copy = *self;
        Self::NAMES
            .into_iter()
            .filter(|n| copy.flag(n).is_some_and(|f| *f))
            .collect()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Recompute {
    None,
    Selective,
    Full,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind", content = "value")]
pub enum GradCompression {
    None,
    Fp16,
    Int8,
    /// Top-k sparsification keeping this fraction of elements.
    Topk(f64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind", content = "value")]
pub enum SyncMode {
    Sync,
    /// Gradients are synchronised every N steps (local accumulation in between).
    Delayed(u32),
    /// Gradient reduction of step i overlaps step i+1 (one step stale).
    Async,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Optimizer {
    Adam,
    Sgd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Offload {
    None,
    Optimizer,
    Params,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Training {
    pub global_batch: u64,
    pub micro_batch: u64,
    /// Tokens the whole run consumes (`tokens`), for the time to train; `None`: not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    pub precision: Precision,
    /// How FP8 GEMM inputs are scaled (with `precision = "fp8"`).
    pub fp8_recipe: Fp8Recipe,
    /// Under FP8 training, the data-parallel parameter gathers (ZeRO's all-gather of the
    /// updated parameters, FSDP's per-unit gathers) carry FP8 weights instead of 16-bit ones
    /// (`fp8_param_gather`: Megatron-Core's `fp8_param_gather`, torchtitan's
    /// `enable_fsdp_float8_all_gather`).
    #[serde(default)]
    pub fp8_param_gather: bool,
    pub recompute: Recompute,
    /// With full recompute, the layers of each model chunk that recompute, counted from its
    /// first (Megatron-Core's block method); `None`: every layer.
    pub recompute_layers: Option<u32>,
    /// With selective recompute under Megatron-Core, the modules that recompute
    /// (`recompute_modules`); `None`: the framework's selective policy (the attention core).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recompute_modules: Option<RecomputeModules>,
    pub overlap_grad_reduce: bool,
    pub overlap_param_gather: bool,
    pub grad_compression: GradCompression,
    /// The dtype of the data-parallel gradient reduction (`grad_reduce_dtype`); `None`: the
    /// framework's `optimizer.grad_buffer`. See [`Training::grad_elem_bytes`].
    #[serde(default)]
    pub grad_reduce_dtype: Option<super::framework::Dtype>,
    /// The dtype of the optimizer's moments (`optimizer_state_dtype`); `None`: fp32.
    #[serde(default)]
    pub optimizer_state_dtype: Option<super::framework::Dtype>,
    /// Gradients are clipped by their global norm (`grad_clip`, default true).
    #[serde(default = "default_true")]
    pub grad_clip: bool,
    /// How the optimizer step runs (`optimizer_kernel`); `None`: the framework's
    /// `optimizer.kernel`. See [`Training::optimizer_kernel`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer_kernel: Option<super::framework::OptimizerKernel>,
    pub sync: SyncMode,
    pub optimizer: Optimizer,
    pub offload: Offload,
    /// Flash attention: no s^2 score matrix is saved. Default true.
    pub flash_attention: bool,
    /// The framework whose behaviour and limits apply (`framework` or `framework_file`).
    pub framework: super::framework::Framework,
    /// Tensor-parallel collectives overlap the GEMMs next to them (`tp_comm_overlap`).
    pub tp_comm_overlap: bool,
    /// Pipeline sends and receives overlap compute (`overlap_p2p_comm`); false: each pass
    /// waits for the send before it and the receive it consumes, both posted after the pass
    /// before. Resolved at parse from the framework and the schedule when not written.
    pub overlap_p2p_comm: bool,
    /// The model runs under `torch.compile`.
    pub compile: bool,
    /// The step is captured in CUDA graphs.
    pub cuda_graphs: bool,
    /// How an MoE layer's router spreads the tokens over the experts (`moe_routing`).
    #[serde(default)]
    pub moe_routing: MoeRouting,
    /// MoE all-to-alls overlap the compute of another micro batch (`moe_a2a_overlap`):
    /// Megatron-Core's combined 1F1B (`overlap_moe_expert_parallel_comm`).
    #[serde(default)]
    pub moe_a2a_overlap: bool,
    /// How the expert all-to-alls move tokens (`moe_dispatcher`).
    #[serde(default)]
    pub moe_dispatcher: MoeDispatcher,
    /// DDP gradient bucket size. Default (set by the parser): Megatron-Core's
    /// max(40M, 1M * dp * cp) fp32 elements, i.e. 160 MB up to dp*cp = 40.
    pub grad_bucket_bytes: u64,
}

impl Training {
    /// The dtype gradients are reduced in over data parallelism: `grad_reduce_dtype`, else the
    /// framework's `optimizer.grad_buffer`.
    pub fn grad_reduce_dtype(&self) -> super::framework::Dtype {
        self.grad_reduce_dtype
            .unwrap_or(self.framework.optimizer.grad_buffer)
    }

    /// How the optimizer step runs: `optimizer_kernel`, else the framework's
    /// `optimizer.kernel`.
    pub fn optimizer_kernel(&self) -> super::framework::OptimizerKernel {
        self.optimizer_kernel
            .unwrap_or(self.framework.optimizer.kernel)
    }

    /// Bytes of one element of the optimizer's moments: 4 (fp32, the default) or 2 (bf16).
    pub fn moment_elem_bytes(&self) -> u64 {
        match self.optimizer_state_dtype {
            Some(super::framework::Dtype::Bf16) => 2,
            _ => 4,
        }
    }

    /// Bytes of one parameter element in a data-parallel parameter gather (and its gather
    /// buffer): 1 under FP8 training with `fp8_param_gather`, the 16-bit weights' 2 under FP8
    /// training without it, the precision's bytes otherwise.
    pub fn param_gather_elem_bytes(&self) -> u64 {
        match self.precision {
            Precision::Fp8 if self.fp8_param_gather => 1,
            Precision::Fp8 => 2,
            p => p.bytes(),
        }
    }

    /// Bytes of one gradient element in the data-parallel reduction (and its buckets): 4 for
    /// fp32, 2 for bf16.
    pub fn grad_elem_bytes(&self) -> u64 {
        match self.grad_reduce_dtype() {
            super::framework::Dtype::Fp32 => 4,
            super::framework::Dtype::Bf16 => 2,
        }
    }
}

/// How an MoE layer's router spreads the routed token copies over the experts
/// (`[training] moe_routing`). Each token picks `top_k` experts; what varies is how many copies
/// each expert-parallel rank receives, relative to the mean share `tokens * top_k / ep`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "value")]
pub enum MoeRouting {
    /// Every expert receives its mean share (the default).
    #[default]
    Balanced,
    /// The router is forced to the mean share, as NVIDIA's benchmarks run
    /// (Megatron-Core's `moe_router_force_load_balancing`); priced as `Balanced`.
    ForceBalanced,
    /// Token drop with padding: each expert takes at most `factor` times its mean share, and
    /// its input is padded up to that capacity, so every expert processes exactly `factor`
    /// times the mean (Megatron-Core's `moe_expert_capacity_factor` with
    /// `moe_pad_expert_input_to_capacity`).
    Capacity { factor: f64 },
    /// The busiest expert-parallel rank (the first of each group) receives `max_load` times the
    /// mean share; the others split the rest evenly.
    Imbalance { max_load: f64 },
    /// Relative load of each expert, one entry per expert (any positive scale). Experts are
    /// placed on the expert-parallel ranks in contiguous blocks, as Megatron-Core places them.
    ExpertLoads(Vec<f64>),
    /// Per-expert loads drawn from a lognormal of mean 1 and this coefficient of variation,
    /// with the run's seed (`[run] seed`).
    ExpertLoadCv { cv: f64 },
}

/// How the expert all-to-alls move the routed tokens (`[training] moe_dispatcher`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MoeDispatcher {
    /// NCCL all-to-all of every routed copy (Megatron-Core's `alltoall` dispatcher).
    #[default]
    AllToAll,
    /// DeepEP's kernels (Megatron-Core's `flex` dispatcher, `deepep` backend): each token
    /// crosses once to each remote node holding one of its experts and is forwarded inside it.
    DeepEp,
    /// HybridEP (the `flex` dispatcher's `hybridep` backend): priced as `DeepEp`.
    HybridEp,
}

impl MoeDispatcher {
    pub const ALL: [(&'static str, MoeDispatcher); 3] = [
        ("alltoall", MoeDispatcher::AllToAll),
        ("deepep", MoeDispatcher::DeepEp),
        ("hybridep", MoeDispatcher::HybridEp),
    ];
    pub fn as_str(self) -> &'static str {
        name_of(&Self::ALL, self)
    }
}

/// Device memory the framework holds beyond the model's tensors (see docs/memory.md).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemorySettings {
    /// Held on every GPU for the whole step: CUDA context, cuBLAS and NCCL workspaces.
    pub reserved_bytes: u64,
    /// Caching-allocator fragmentation: every transient allocation (activations, buffers)
    /// holds this fraction of its size more, in category reserved. In [0, 1].
    pub allocator_slack_fraction: f64,
    /// Whose bookkeeping of model state and ZeRO buffers the timeline follows.
    #[serde(default)]
    pub accounting: MemoryAccounting,
}

/// How model state and ZeRO buffers are counted (docs/memory.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryAccounting {
    /// Megatron-LM: fp32 main gradients, ZeRO-3 gathers per pass with prefetch. The default.
    #[default]
    Megatron,
    /// DeepSpeed's estimator (`estimate_zero{2,3}_model_states_mem_needs`): all 16-bit
    /// gradients live under ZeRO 0-2, an fp32 gradient partition beside the optimizer state
    /// (offloaded with it), ZeRO-3 holding one module's 16-bit parameters and gradients, and
    /// host memory for initialisation with the 1.5 buffer factor.
    Deepspeed,
}

impl MemorySettings {
    /// Device memory a CUDA context takes in a PyTorch process (torch 2.11, CUDA 13.0, H200:
    /// bytes in use after the first tensor; docs/measurements/2026-11-28-h200-memory-edge.md).
    pub const CUDA_CONTEXT_BYTES: u64 = 650_969_088;
    /// cuBLAS's handle, workspace and loaded kernels after the first bf16 GEMM, the caching
    /// allocator emptied (same measurement: 751,632,384 in use less the context; 96 MiB).
    pub const CUBLAS_BYTES: u64 = 100_663_296;
    /// One NCCL communicator after its first all-reduce (torch 2.11, NCCL 2.28.9, same
    /// measurement: 1,357,709,312 in use less 54,525,952 the allocator cached, less the
    /// context and cuBLAS; 526 MiB). Twin's own CUDA runtime holds about the same: 3,425,501,184
    /// in use before a step less its 2,181,070,848 of workspace is 1,244,430,336 on an H100
    /// (docs/measurements/2026-11-22-h100-cuda-backend.md).
    pub const NCCL_BYTES: u64 = 551_550_976;
    /// What every rank of a framework job holds outside its tensors: the CUDA context, cuBLAS
    /// and one NCCL communicator (1.21 GiB).
    pub const DEFAULT_RESERVED_BYTES: u64 =
        Self::CUDA_CONTEXT_BYTES + Self::CUBLAS_BYTES + Self::NCCL_BYTES;
    /// The stream-ordered pool the runtime uses reserved 0.2% over its peak in the same
    /// measurement; 0 keeps the timeline exact. PyTorch's caching allocator users may set
    /// 0.05 - 0.1.
    pub const DEFAULT_ALLOCATOR_SLACK_FRACTION: f64 = 0.0;
}

impl Default for MemorySettings {
    fn default() -> Self {
        MemorySettings {
            reserved_bytes: Self::DEFAULT_RESERVED_BYTES,
            allocator_slack_fraction: Self::DEFAULT_ALLOCATOR_SLACK_FRACTION,
            accounting: MemoryAccounting::Megatron,
        }
    }
}

/// How finely the generators cut work into ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Granularity {
    /// One compute op per (chunk, micro batch, phase); per-layer TP collectives are merged
    /// into one collective op of the summed bytes and call count. Fast; the default.
    Chunk,
    /// One compute op and its TP collectives per layer. Slower to simulate, finer traces.
    Layer,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub iterations: u32,
    pub seed: u64,
    pub granularity: Granularity,
}

impl Scenario {
    /// Micro batches per pipeline per step: global_batch / (micro_batch * dp).
    /// Validation guarantees the division is exact and non-zero.
    pub fn num_microbatches(&self) -> u64 {
        let denom = self
            .training
            .micro_batch
            .saturating_mul(u64::from(self.parallel.dp));
        self.training.global_batch.checked_div(denom).unwrap_or(0)
    }

    /// Tokens processed by the whole job in one step.
    pub fn tokens_per_step(&self) -> u64 {
        self.training
            .global_batch
            .saturating_mul(self.model.seq_len)
    }
}

fn default_true() -> bool {
    true
}
