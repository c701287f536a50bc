//! Training frameworks as data. What Megatron-Core, torchtitan, DeepSpeed, the Hugging Face
//! Trainer or MosaicML's llm-foundry do differently (when they overlap which collective, which
//! elementwise kernels they fuse, how their optimizer and memory habits look, which layouts they
//! cannot launch) is written in a file under `scenarios/frameworks/`, every value with its
//! source, instead of being spread over the model as code. A scenario picks one with
//! `[training] framework` (a bundled file, embedded in the binary) or `[training]
//! framework_file` (a user's own).
//!
//! This module holds the resolved, typed [`Framework`]; `file.rs` reads and checks the file
//! format (docs/reference/frameworks.md) and `rules.rs` the layouts a framework refuses.

mod file;
mod rules;

pub use file::parse_str;
pub use rules::{Cond, Limit};

use super::error::{ErrorKind, Loc, ScenarioError};
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

/// The bundled framework files, by their canonical name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bundled {
    MegatronCore,
    Torchtitan,
    Deepspeed,
    Hf,
    LlmFoundry,
}

/// The names `[training] framework` accepts: every bundled file's name, and `nemo`, an alias
/// of megatron-core (NeMo and Megatron-Bridge train through Megatron-Core).
pub const FRAMEWORKS: [(&str, Bundled); 6] = [
    ("megatron-core", Bundled::MegatronCore),
    ("nemo", Bundled::MegatronCore),
    ("torchtitan", Bundled::Torchtitan),
    ("deepspeed", Bundled::Deepspeed),
    ("hf", Bundled::Hf),
    ("llm-foundry", Bundled::LlmFoundry),
];

impl Bundled {
    pub const ALL: [Bundled; 5] = [
        Bundled::MegatronCore,
        Bundled::Torchtitan,
        Bundled::Deepspeed,
        Bundled::Hf,
        Bundled::LlmFoundry,
    ];

    /// The canonical name (the file's stem).
    pub fn name(self) -> &'static str {
        match self {
            Bundled::MegatronCore => "megatron-core",
            Bundled::Torchtitan => "torchtitan",
            Bundled::Deepspeed => "deepspeed",
            Bundled::Hf => "hf",
            Bundled::LlmFoundry => "llm-foundry",
        }
    }

    /// The file's text, embedded at build time.
    pub fn text(self) -> &'static str {
        match self {
            Bundled::MegatronCore => {
                include_str!("../../../../scenarios/frameworks/megatron-core.toml")
            }
            Bundled::Torchtitan => include_str!("../../../../scenarios/frameworks/torchtitan.toml"),
            Bundled::Deepspeed => include_str!("../../../../scenarios/frameworks/deepspeed.toml"),
            Bundled::Hf => include_str!("../../../../scenarios/frameworks/hf.toml"),
            Bundled::LlmFoundry => {
                include_str!("../../../../scenarios/frameworks/llm-foundry.toml")
            }
        }
    }

    /// The parsed file. Each is parsed once per process (a sweep resolves thousands of
    /// scenarios); a bundled file that does not parse is a build defect, reported as an error
    /// naming the file rather than a panic.
    pub fn framework(self) -> Result<Framework, ScenarioError> {
        static CACHE: [OnceLock<Result<Framework, ScenarioError>>; 5] = [
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
        ];
        let index = match self {
            Bundled::MegatronCore => 0,
            Bundled::Torchtitan => 1,
            Bundled::Deepspeed => 2,
            Bundled::Hf => 3,
            Bundled::LlmFoundry => 4,
        };
        CACHE[index]
            .get_or_init(|| {
                let origin = format!("scenarios/frameworks/{}.toml", self.name());
                let mut fw = parse_str(self.text(), &origin)?;
                fw.origin = Origin::Bundled(self);
                Ok(fw)
            })
            .clone()
    }
}

/// Where a framework came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    Bundled(Bundled),
    /// A user's file (`[training] framework_file`), by its path as resolved.
    File(String),
}

/// A framework's behaviour, resolved from its file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Framework {
    /// The file's `name`.
    pub name: String,
    pub origin: Origin,
    /// The attention kernel it calls (on every GPU, or below sm90 where
    /// `attention_backend_from_sm90` is set); see [`Framework::attention_backend_on`].
    pub attention_backend: AttentionBackend,
    /// The kernel it calls instead on a GPU of compute capability 9.0 or later (Transformer
    /// Engine prefers cuDNN's fused attention from Hopper on); `None`: `attention_backend`
    /// there too.
    pub attention_backend_from_sm90: Option<AttentionBackend>,
    /// How its context parallelism exchanges K and V unless the scenario says
    /// (`parallel.cp_algorithm`).
    pub cp_algorithm: crate::scenario::CpAlgorithm,
    /// Grouped-query attention's K and V are repeated to the query heads before the attention
    /// kernel (`repeat_kv`), so the kernel, the saved K and V and a context-parallel exchange
    /// carry the query heads' width.
    pub kv_heads_repeated: bool,
    /// How a context-parallel attention combines the partial results of its blocks
    /// (`attention.cp_merge`, optional: `fused` where the file leaves it out).
    #[serde(default)]
    pub cp_merge: CpMerge,
    pub overlaps: Overlaps,
    /// Elementwise work of one transformer layer's forward, eager and with `compile`.
    pub fusions: Fusions,
    pub optimizer: OptimizerImpl,
    pub memory: MemoryHabits,
    pub recompute: RecomputeHabits,
    pub launch: Launch,
    /// How its own throughput log counts the attention core in its model FLOPs
    /// (`report.attention_flops`; `full` where the file leaves it out).
    #[serde(default)]
    pub attention_flops: AttentionFlops,
    /// What its MoE layers gather over tensor parallelism when the experts split like the
    /// dense MLP (`moe.expert_tp_gather`; `tokens` where the file leaves it out).
    #[serde(default)]
    pub expert_tp_gather: ExpertTpGather,
    /// Layouts it cannot launch, each with the reason.
    pub cannot_run: Vec<Limit>,
}

impl Framework {
    /// The first of its limits that `s` hits (`None`: the framework can launch `s`).
    pub fn refusal(&self, s: &super::Scenario) -> Option<&Limit> {
        self.cannot_run.iter().find(|l| l.hits(s))
    }

    /// The attention kernel the framework calls on a GPU of `compute_capability` (`None`: not
    /// known, a GPU that is no preset): `attention_backend_from_sm90` from 9.0 on where the
    /// file sets it, else `attention_backend`.
    pub fn attention_backend_on(&self, compute_capability: Option<(u32, u32)>) -> AttentionBackend {
        match (compute_capability, self.attention_backend_from_sm90) {
            (Some(cc), Some(from_sm90)) if cc >= (9, 0) => from_sm90,
            _ => self.attention_backend,
        }
    }
}

/// The default framework: megatron-core, the one twin's model describes.
pub fn default_framework() -> Result<Framework, ScenarioError> {
    Bundled::MegatronCore.framework()
}

/// Loads a user's framework file; `at` and `key` locate `framework_file` in the scenario for
/// an error about the file as a whole.
pub(crate) fn load(
    scenario_ctx: &super::error::Ctx,
    at: &Loc,
    key: &str,
    raw: &str,
    path: &std::path::Path,
) -> Result<Framework, ScenarioError> {
    let text = super::hf::read_text(path).map_err(|e| {
        scenario_ctx.error(
            ErrorKind::Io,
            Some(at),
            key,
            raw,
            format!("cannot read framework file {}: {e}", path.display()),
            "a path to a framework file (docs/reference/frameworks.md), relative to the scenario file",
        )
    })?;
    let mut fw = parse_str(&text, &path.display().to_string())?;
    // The absolute path, so that the scenario written back (`to_toml`) names the same file
    // wherever it is read from.
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    fw.origin = Origin::File(absolute.display().to_string());
    Ok(fw)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttentionBackend {
    /// FlashAttention (Dao et al.), directly or through PyTorch SDPA's flash kernel.
    Flash,
    /// cuDNN's fused attention (Transformer Engine's `FusedAttention`, SDPA's cudnn kernel).
    Cudnn,
    /// The 2022 Triton FlashAttention (HazyResearch's `flash_attn_triton.py`, which
    /// llm-foundry's MPT runs as `attn_impl: triton`).
    Triton,
}

/// The head dimensions FlashAttention-2 compiles kernels for: a call of head dimension `d`
/// runs the first of them at least `d` (Dao-AILab/flash-attention@2bce87c98509448b6fe3d5d8bdcd68b68e7f87af:
/// csrc/flash_attn/src/static_switch.h `HEADDIM_SWITCH`; PyTorch's SDPA flash kernel
/// carries the same switch).
pub const FLASH2_KERNEL_HEAD_DIMS: [u64; 7] = [32, 64, 96, 128, 160, 192, 256];

impl AttentionBackend {
    /// The head dimension the backend's kernel computes over for heads of `d`: the tiles of a
    /// compiled kernel span its own head dimension, and a call of a smaller one loads its
    /// heads with the rest masked to zero, so it takes the larger kernel's time.
    /// - flash: the next of [`FLASH2_KERNEL_HEAD_DIMS`] (a head of 112 runs the 128 kernel);
    /// - triton: the next power of two, at least 16 (`BLOCK_HEADDIM = max(next_power_of_2(d),
    ///   16)`, loads masked by `EVEN_HEADDIM`: mosaicml/llm-foundry@0227d9f7b9c792e275e018bfac3a21dea4739323:
    ///   llmfoundry/models/layers/flash_attn_triton.py `_flash_attn_forward`);
    /// - cudnn: `d` itself; no public account of cuDNN's head-dimension padding was found, and
    ///   its curve was measured at 64 and 128 only.
    ///
    /// Beyond the largest kernel `d` is returned unchanged.
    pub fn kernel_head_dim(self, d: u64) -> u64 {
        match self {
            AttentionBackend::Flash => FLASH2_KERNEL_HEAD_DIMS
                .iter()
                .copied()
                .find(|&k| d <= k)
                .unwrap_or(d),
            AttentionBackend::Triton => d.max(16).checked_next_power_of_two().unwrap_or(d),
            AttentionBackend::Cudnn => d,
        }
    }
}

/// The names of [`AttentionBackend`] in framework and profile files.
pub const ATTENTION_BACKENDS: [(&str, AttentionBackend); 3] = [
    ("flash", AttentionBackend::Flash),
    ("cudnn", AttentionBackend::Cudnn),
    ("triton", AttentionBackend::Triton),
];

/// How a context-parallel attention merges the partial outputs of its K/V blocks and
/// returns the gradients of K and V.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CpMerge {
    /// Inside the attention kernels (Transformer Engine's CP: the correction of the output is
    /// part of its kernels, dK/dV reduced in the compute dtype); nothing priced beyond the
    /// kernels and the exchange of `cp_algorithm`.
    #[default]
    Fused,
    /// PyTorch's `_templated_ring_attention` with `convert_to_f32`: each ring step's output
    /// and log-sum-exp are merged into fp32 accumulators by eager elementwise kernels, and the
    /// backward accumulates dK/dV in fp32 and passes them around the ring, one step at a time
    /// (`workload::cp_merge`).
    EagerFp32,
}

/// When the data-parallel gradient reduction runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GradReduce {
    /// During the backward of the last micro batch only (gradients accumulate locally before).
    LastMicrobatch,
    /// During the backward of every micro batch.
    EveryMicrobatch,
    /// After the last backward, not overlapped.
    AfterBackward,
}

/// When sharded parameters are gathered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ParamGather {
    /// Bucket by bucket during the first micro batch's forward (a distributed optimizer's
    /// updated shards).
    FirstMicrobatchForward,
    /// Layer by layer before each forward and backward, prefetching the next (FSDP, ZeRO-3).
    PerLayer,
    /// Before the forward, not overlapped.
    BeforeForward,
}

/// What one ZeRO-3 / FSDP parameter gather covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FsdpUnit {
    /// One transformer layer (FSDP's per-block `fully_shard`, Megatron-FSDP's
    /// `fsdp_unit_modules = [TransformerLayer]`, ZeRO-3's submodules).
    Layer,
    /// The whole model chunk of a pipeline stage at once.
    Chunk,
}

/// When FSDP frees the gathered parameters of a layer after its forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reshard {
    Always,
    Never,
    /// Except under pipeline parallelism (torchtitan's "default" policy).
    UnlessPipelined,
}

/// Which collectives a framework overlaps with compute, and when.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Overlaps {
    pub grad_reduce: GradReduce,
    /// Gradients are reduced in buckets as they become ready (not one collective at the end).
    pub grad_reduce_bucketed: bool,
    pub param_gather: ParamGather,
    /// Under ZeRO 3 / FSDP, what one gather covers: a transformer layer (the FSDP unit of every
    /// bundled framework) or a whole model chunk.
    pub fsdp_unit: FsdpUnit,
    /// FSDP / ZeRO-3: gathers issued ahead of the one computing.
    pub fsdp_prefetch: u32,
    pub reshard_after_forward: Reshard,
    /// It can overlap TP all-gathers and reduce-scatters with the GEMMs (`tp_comm_overlap`).
    pub tp_comm_overlap: bool,
    /// SMs an overlapped reduce-scatter takes from the GEMMs it overlaps (the GEMMs run on the
    /// rest); an overlapped all-gather takes none (copy engines).
    pub tp_comm_overlap_sms: u32,
    /// The overlap covers the backward's collectives too; `false`: only the forward's (and a
    /// recompute's, which is a forward).
    pub tp_comm_overlap_backward: bool,
    /// It can overlap the pipeline's sends and receives with compute (`overlap_p2p_comm`).
    pub p2p_overlap: bool,
    /// It can overlap the expert-parallel all-to-alls of one micro batch with another's compute
    /// (`moe_a2a_overlap`); false where the file leaves the key out.
    #[serde(default)]
    pub moe_a2a_overlap: bool,
    /// Under ZeRO 3 / FSDP with pipeline parallelism, when gradients are reduced instead of
    /// `grad_reduce` (`overlaps.grad_reduce_pipelined`, optional): `after-backward`, once per
    /// step after a chunk's last backward, gradients accumulating unsharded meanwhile, as
    /// `torch.distributed.pipelining` drives FSDP2; `None`: as `grad_reduce` says.
    #[serde(default)]
    pub grad_reduce_pipelined: Option<GradReduce>,
    /// Under ZeRO 3 / FSDP, the compute stream copies each gathered unit out of its all-gather
    /// buffer into the unit's parameters before the unit's first pass, and each unit's
    /// gradients into the reduce-scatter buffer, in the reduce dtype, before each of its
    /// reductions (FSDP2's copy-out and copy-in; `overlaps.fsdp_copies`, optional); false: the
    /// collectives read and write the parameters and gradients where they are.
    #[serde(default)]
    pub fsdp_copies: bool,
}

/// Elementwise kernels of one transformer layer's forward, outside the GEMMs and the
/// attention core.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Elementwise {
    /// Kernel launches.
    pub kernels: u32,
    /// Reads and writes of `tokens x hidden` activations (each counts one tensor's bytes).
    pub hidden_passes: u32,
    /// Reads and writes of `tokens x ffn_hidden` activations, for a gated (SwiGLU) MLP.
    pub ffn_passes: u32,
    /// Kernels per layer and micro batch that the framework launches and twin does not size
    /// otherwise, in the forward and in the backward (casts of activations under autocast,
    /// GEMM workspace memsets, copies, the backward's gradient adds and slices): each costs
    /// the GPU its launch gap and the host its issue time, and moves no bytes twin counts.
    /// 0 where the file leaves `extra_forward_kernels` / `extra_backward_kernels` out.
    #[serde(default)]
    pub extra_forward_kernels: u32,
    #[serde(default)]
    pub extra_backward_kernels: u32,
    /// What those kernels move per layer and micro batch, in reads and writes of
    /// `tokens x hidden` activations (as `hidden_passes`), forward and backward; 0 where the
    /// file leaves `extra_forward_hidden_passes` / `extra_backward_hidden_passes` out.
    #[serde(default)]
    pub extra_forward_hidden_passes: u32,
    #[serde(default)]
    pub extra_backward_hidden_passes: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fusions {
    /// Under FP8 current (tensorwise) scaling, the amax each cast needs is reduced inside the
    /// kernel that produces the tensor (a norm, an activation); otherwise it is a pass of its
    /// own over the tensor before the cast.
    pub fp8_amax_fused: bool,
    pub eager: Elementwise,
    /// With `[training] compile = true`.
    pub compiled: Elementwise,
}

/// How the optimizer step is launched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OptimizerKernel {
    /// One fused kernel over many tensors (apex / TE FusedAdam, `torch.optim.AdamW(fused=True)`).
    Fused,
    /// Multi-tensor apply: a few kernels per group of tensors.
    MultiTensor,
    /// PyTorch's `foreach` implementation: a kernel per operation over lists of tensors.
    Foreach,
    /// A Python loop over the parameters with a kernel per operation and tensor (PyTorch's
    /// single-tensor implementation, `foreach=False`; Composer's `DecoupledAdamW`).
    ForLoop,
}

/// The names of [`OptimizerKernel`] in framework and scenario files.
pub const OPTIMIZER_KERNELS: [(&str, OptimizerKernel); 4] = [
    ("fused", OptimizerKernel::Fused),
    ("multi-tensor", OptimizerKernel::MultiTensor),
    ("foreach", OptimizerKernel::Foreach),
    ("for-loop", OptimizerKernel::ForLoop),
];

impl OptimizerKernel {
    pub fn as_str(self) -> &'static str {
        match self {
            OptimizerKernel::Fused => "fused",
            OptimizerKernel::MultiTensor => "multi-tensor",
            OptimizerKernel::Foreach => "foreach",
            OptimizerKernel::ForLoop => "for-loop",
        }
    }

    /// Whether the update runs as one pass over each tensor (a fused or multi-tensor Adam
    /// kernel) rather than as one pass per elementwise operation.
    pub fn fuses_update(self) -> bool {
        matches!(self, OptimizerKernel::Fused | OptimizerKernel::MultiTensor)
    }
}

/// When gradient clipping multiplies the gradients by its coefficient.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClipScale {
    /// Only on steps whose norm exceeds the threshold (Megatron-Core tests the coefficient on
    /// the host); a trained-in step does not clip, so no pass is priced.
    #[default]
    WhenClipping,
    /// On every step, by the coefficient clamped to 1 (PyTorch's `clip_grad_norm_` and FSDP's,
    /// which multiply without a host test): a read and a write of every gradient.
    Always,
}

/// The names of [`ClipScale`] in framework files.
pub const CLIP_SCALES: [(&str, ClipScale); 2] = [
    ("when-clipping", ClipScale::WhenClipping),
    ("always", ClipScale::Always),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dtype {
    Fp32,
    Bf16,
}

/// The names of [`Dtype`] in framework and scenario files.
pub const DTYPES: [(&str, Dtype); 2] = [("fp32", Dtype::Fp32), ("bf16", Dtype::Bf16)];

impl Dtype {
    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::Fp32 => "fp32",
            Dtype::Bf16 => "bf16",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct OptimizerImpl {
    pub kernel: OptimizerKernel,
    /// The dtype of the master weights the optimizer updates.
    pub master_weights: Dtype,
    /// The dtype gradients accumulate and are reduced in.
    pub grad_buffer: Dtype,
    /// When gradient clipping scales the gradients.
    #[serde(default)]
    pub clip_scale: ClipScale,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryHabits {
    /// Gradients live in one contiguous buffer (no per-parameter allocations).
    pub contiguous_grad_buffer: bool,
    /// Autocast keeps 16-bit copies of fp32 weights during the forward.
    pub autocast_weight_copies: bool,
    /// The model's parameters are fp32 and are what the optimizer updates: no 16-bit copy is
    /// kept beside a separate fp32 master, and the 16-bit weights exist only as the copies made
    /// for compute (PyTorch FSDP's mixed precision casts the fp32 shards at each gather).
    /// `autocast_weight_copies` implies it. False (the default): 16-bit parameters beside fp32
    /// master weights in the optimizer (Megatron-Core, DeepSpeed).
    #[serde(default)]
    pub fp32_params: bool,
    /// Bytes per logit element the loss keeps from the forward for the backward (4: the
    /// fp32 softmax).
    pub loss_logits_bytes: u64,
    /// Bytes per logit element the loss's backward holds beyond `loss_logits_bytes`, from
    /// its start to its end (gradients of the log-probabilities and of the logits, upcast and
    /// cast copies); 0 when the file does not say (`memory.loss_backward_bytes`, optional).
    #[serde(default)]
    pub loss_backward_bytes: u64,
    /// The default of `[memory] allocator_slack_fraction` under this framework.
    pub allocator_slack_fraction: f64,
}

/// What `[training] recompute = "selective"` runs again in the backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SelectiveRecompute {
    /// The attention core (Megatron-Core's `recompute_granularity = "selective"`): its
    /// activations are not saved, everything else is.
    AttentionCore,
    /// Per-op selective checkpointing that saves the outputs of the matmuls, the attention
    /// kernel and the reductions, except every second matmul of the block in forward order,
    /// and recomputes everything else (every elementwise op and the unsaved matmuls).
    EverySecondMatmul,
}

/// How the framework's activation recompute modes work.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecomputeHabits {
    pub selective: SelectiveRecompute,
}

/// How a framework's own model-FLOP count (the TFLOP/s per GPU and MFU its logs print) counts
/// the attention core, the `QK^T` and `PV` products; everything else it counts as twin does
/// (Megatron's GEMMs of the layer, the logits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttentionFlops {
    /// Every query against every key, whatever the mask (Narayanan et al. 2021; PaLM's MFU):
    /// twin's model FLOPs.
    #[default]
    Full,
    /// The pairs the causal mask (and a sliding window) leave: about half the square.
    Causal,
    /// Not counted: `6 x parameters` per token.
    None,
}

/// What a mixture-of-experts layer whose experts split over tensor parallelism like the dense
/// MLP (`etp = tp > 1`) gathers over the tensor-parallel group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExpertTpGather {
    /// The tokens, before routing, as a dense MLP gathers them (its sequence-parallel all-gather
    /// of `tokens x hidden` and reduce-scatter after; torchtitan's tensor-parallel experts).
    #[default]
    Tokens,
    /// The routed copies each member received from the expert-parallel all-to-all, after it
    /// (`top_k` times the tokens' bytes; Megatron-Core's all-to-all dispatcher): the layer is
    /// priced as any expert-tensor-parallel group's (`workload::comms`).
    RoutedCopies,
}

/// The names of [`ExpertTpGather`] in framework files.
pub const EXPERT_TP_GATHERS: [(&str, ExpertTpGather); 2] = [
    ("tokens", ExpertTpGather::Tokens),
    ("routed-copies", ExpertTpGather::RoutedCopies),
];

/// The names of [`AttentionFlops`] in framework files.
pub const ATTENTION_FLOPS: [(&str, AttentionFlops); 3] = [
    ("full", AttentionFlops::Full),
    ("causal", AttentionFlops::Causal),
    ("none", AttentionFlops::None),
];

impl AttentionFlops {
    /// The model FLOPs of work counted as `model_flops` (twin's count, the attention core's
    /// full square `attention_full` included) with the core counted this way instead
    /// (`attention_masked`: the pairs the mask and window leave).
    pub fn model_flops(self, model_flops: u64, attention_full: u64, attention_masked: u64) -> u64 {
        let rest = model_flops.saturating_sub(attention_full);
        match self {
            AttentionFlops::Full => model_flops,
            AttentionFlops::Causal => rest.saturating_add(attention_masked),
            AttentionFlops::None => rest,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            AttentionFlops::Full => "full",
            AttentionFlops::Causal => "causal",
            AttentionFlops::None => "none",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    /// The gap between dependent kernels replayed from a CUDA graph. With `cuda_graphs` the
    /// cost model's per-kernel launch gap is the smaller of this and the hardware's.
    pub cuda_graphs_kernel_gap_ns: u64,
    /// CPU time the host spends issuing one kernel of an eager step (Python, dispatch,
    /// autograd, the launch call): the GPU cannot start a kernel before the host issued it.
    /// 0 where the file leaves `launch.host_per_kernel_ns` out: the host is never the floor.
    #[serde(default)]
    pub host_per_kernel_ns: u64,
    /// The same under `[training] compile = true` (`launch.compiled_host_per_kernel_ns`;
    /// the eager value where the file leaves it out).
    #[serde(default)]
    pub compiled_host_per_kernel_ns: u64,
    /// The same under `[training] cuda_graphs = true`, which replays a step's kernels from
    /// one graph launch (`launch.cuda_graphs_host_per_kernel_ns`; 0 where left out).
    #[serde(default)]
    pub cuda_graphs_host_per_kernel_ns: u64,
}

#[cfg(test)]
mod tests;
