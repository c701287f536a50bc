//! The scenario schema as one table: every key a scenario file accepts, with its type, its
//! bounds or names, its default and what it means. Everything else reads this table:
//! - the readers in `read.rs` take a [`Key`] and check the value against its [`Kind`];
//! - unknown-key errors and their did-you-mean search list [`GROUPS`];
//! - literal defaults ([`Absent`]) are applied by the readers' `*_or_default` forms;
//! - `docs/reference/keys.md` is [`markdown`]'s output (a test keeps the two equal).
//!
//! Adding a key is one row here plus its use (the field it fills, in `parse.rs` or a section
//! file): see docs/reference/contributing.md.

use super::presets::{GPU_NAMES, MODEL_NAMES, NODE_NAMES};

/// What a key accepts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    /// An integer in `min..=max` (a float with an exact integer value is accepted).
    Uint {
        min: u64,
        max: u64,
    },
    /// A finite number at most `max`: greater than 0, or from 0 when `zero_ok`.
    Number {
        zero_ok: bool,
        max: f64,
    },
    Bool,
    /// Free text (a name, a path).
    Text,
    /// One of `names`; `what` names the thing in messages ("unknown recompute policy").
    Choice {
        what: &'static str,
        names: &'static [&'static str],
    },
    /// A sub-table with keys of its own (its group in [`GROUPS`]).
    Table,
    /// Anything else (arrays, strings with a syntax); the text says what is allowed.
    Other(&'static str),
}

/// What an absent key means.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Absent {
    /// The file must give it.
    Required,
    Int(u64),
    Num(f64),
    Flag(bool),
    /// This name of a choice.
    Is(&'static str),
    /// Derived from other keys or presets, or no value at all; the text says how.
    Note(&'static str),
}

/// One key of a scenario file.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Key {
    pub name: &'static str,
    pub kind: Kind,
    pub default: Absent,
    pub doc: &'static str,
}

/// The keys of one table of the file (`""` is the top level).
#[derive(Clone, Copy, Debug)]
pub struct Group {
    pub path: &'static str,
    pub keys: &'static [Key],
}

/// One module per table: a `const` per key, and `ALL` in file order.
macro_rules! keys {
    ($module:ident { $($id:ident = $name:literal, $kind:expr, $default:expr, $doc:literal;)* }) => {
        pub mod $module {
            #[allow(unused_imports)]
            use super::{Absent::*, Kind::*, *};
            $(pub const $id: Key = Key { name: $name, kind: $kind, default: $default, doc: $doc };)*
            pub const ALL: &[Key] = &[$($id),*];
        }
    };
}

const MAX_DEGREE: u64 = 1 << 20;
const MAX_LAYERS: u64 = 1 << 16;
const MAX_FLOPS_PER_S: f64 = 1e18;
const MAX_BANDWIDTH_BYTES_PER_S: f64 = 1e15;
const MAX_BYTES: u64 = 1 << 50;
/// `[faults]`: rates far beyond any hardware, durations up to a year.
const MAX_RATE: f64 = 1e6;
const MAX_SECONDS: f64 = 365.0 * 86_400.0;
/// `[checks]` bounds on fractions; other thresholds are open-ended (a peak-memory fraction
/// above 1 is a valid, if odd, "allow oversubscription" bound).
const FRACTION: Kind = Kind::Number {
    zero_ok: true,
    max: 1.0,
};
const THRESHOLD: Kind = Kind::Number {
    zero_ok: true,
    max: MAX_FLOPS_PER_S,
};

keys!(root {
    NAME = "name", Text, Note("the file name without `.toml`"), "Name of the scenario, shown in reports.";
    MODEL = "model", Table, Required, "The model's shape: `[model]`.";
    CLUSTER = "cluster", Table, Required, "GPUs, nodes and links: `[cluster]`.";
    PARALLEL = "parallel", Table, Note("all degrees 1"), "The parallel layout: `[parallel]`.";
    TRAINING = "training", Table, Required, "Batch, precision and training mechanics: `[training]`.";
    MEMORY = "memory", Table, Note("the defaults below"), "Memory accounting: `[memory]`.";
    RUN = "run", Table, Note("the defaults below"), "What to simulate: `[run]`.";
    CHECKS = "checks", Table, Note("no checks"), "CI thresholds for `twin check`: `[checks]`.";
    FAULTS = "faults", Table, Note("no failure model"), "Failures, stragglers and checkpoints for `simulate --horizon`: `[faults]`.";
    VARIABILITY = "variability", Table, Note("every GPU and link as the profile says"), "Per-GPU, per-link and per-op variation for `simulate --samples`: `[variability]`.";
});

keys!(model {
    PRESET = "preset", Choice { what: "model preset", names: &MODEL_NAMES }, Note("none"), "Start from a published model shape; explicit keys override it. Not together with `hf_config`.";
    HF_CONFIG = "hf_config", Text, Note("none"), "Path to a Hugging Face `config.json`, relative to the scenario file. Not together with `preset`.";
    HF_FORCE = "hf_force", Bool, Flag(false), "Import an `hf_config` whose `model_type` the import does not know, as its dense shape.";
    NAME = "name", Text, Note("the preset name, the `hf_config` path as written, or `custom`"), "Informational.";
    LAYERS = "layers", Uint { min: 1, max: MAX_LAYERS }, Note("from preset or config, else required"), "Transformer layers.";
    HIDDEN = "hidden", Uint { min: 1, max: 1 << 20 }, Note("from preset or config, else required"), "Hidden size.";
    HEADS = "heads", Uint { min: 1, max: 1 << 16 }, Note("from preset or config, else required"), "Attention (query) heads.";
    KV_HEADS = "kv_heads", Uint { min: 1, max: 1 << 16 }, Note("from preset or config, else `heads`"), "Key/value heads; fewer than `heads` is grouped-query attention.";
    HEAD_DIM = "head_dim", Uint { min: 1, max: 1 << 16 }, Note("from `hf_config`, else `hidden / heads`"), "Width of one attention head. Q is `heads * head_dim` wide, K and V `kv_heads * head_dim` each; given, `hidden` need not be a multiple of `heads` (Qwen3, Gemma, GPT-OSS).";
    FFN_HIDDEN = "ffn_hidden", Uint { min: 1, max: 1 << 22 }, Note("from preset or config, else `4 * hidden`"), "MLP inner width.";
    SEQ_LEN = "seq_len", Uint { min: 1, max: 1 << 24 }, Note("from preset or config, else required"), "Tokens per sequence.";
    VOCAB = "vocab", Uint { min: 1, max: 1 << 24 }, Note("from preset or config, else required"), "Vocabulary size, as padded (twin does not pad it).";
    GATED_MLP = "gated_mlp", Bool, Note("from preset or config, else `false`"), "`true` = SwiGLU: three MLP matrices instead of two.";
    TIED_EMBEDDINGS = "tied_embeddings", Bool, Note("from preset or config, else `false`"), "The output head shares the input embedding matrix.";
    EXPERTS = "experts", Uint { min: 1, max: 1 << 16 }, Note("from preset or config, else none (dense)"), "Experts per MoE layer; makes the model a mixture of experts.";
    TOP_K = "top_k", Uint { min: 1, max: 1 << 16 }, Note("from config, else `min(2, experts)`"), "Experts per token, at most `experts`; needs `experts`.";
    MOE_EVERY = "moe_every", Uint { min: 1, max: MAX_LAYERS }, Int(1), "Layer `i` (from 0) past the `dense_layers` is an MoE layer when `i % moe_every == 0`; at most `layers`; needs `experts`.";
    MOE_FFN_HIDDEN = "moe_ffn_hidden", Uint { min: 1, max: 1 << 22 }, Note("from config, else `ffn_hidden`"), "Inner width of one routed expert's MLP; needs `experts`.";
    SHARED_EXPERTS = "shared_experts", Uint { min: 0, max: 1 << 10 }, Note("from config, else 0"), "Experts every token goes through beside its routed ones, in each MoE layer (DeepSeek, Qwen2-MoE); needs `experts`.";
    SHARED_EXPERT_FFN_HIDDEN = "shared_expert_ffn_hidden", Uint { min: 1, max: 1 << 22 }, Note("from config, else `moe_ffn_hidden`"), "Inner width of one shared expert's MLP; needs `shared_experts`.";
    DENSE_LAYERS = "dense_layers", Uint { min: 0, max: MAX_LAYERS }, Note("from config, else 0"), "The first N layers have a dense MLP (DeepSeek's `first_k_dense_replace`); below `layers`; needs `experts`.";
    DENSE_FFN_HIDDEN = "dense_ffn_hidden", Uint { min: 1, max: 1 << 22 }, Note("`ffn_hidden`"), "Inner MLP width of the dense layers of a mixture-of-experts model; needs `experts`.";
    ROUTER_GROUPS = "router_groups", Uint { min: 1, max: 1 << 16 }, Note("from config, else 1"), "Group-limited routing: the experts form this many groups of consecutive experts, and each token takes its `top_k` from `router_group_top_k` of them (DeepSeek-V3: 8 groups, one per node of its expert-parallel group, so a token reaches at most 4 nodes; Megatron-Core's `moe_router_num_groups`, the config's `n_group`). Divides `experts`; needs `experts`.";
    ROUTER_GROUP_TOP_K = "router_group_top_k", Uint { min: 1, max: 1 << 16 }, Note("from config, else `router_groups`"), "Groups a token's experts come from under `router_groups` (Megatron-Core's `moe_router_group_topk`, the config's `topk_group`); at most `router_groups`, and these groups hold at least `top_k` experts.";
    QKV_BIAS = "qkv_bias", Bool, Note("from config, else `false`"), "Biases on the query, key and value projections (Qwen2, GPT-OSS). Models without a gated MLP (GPT-style) have a bias on every linear layer anyway.";
    SLIDING_WINDOW = "sliding_window", Uint { min: 1, max: 1 << 24 }, Note("from config, else none"), "Keys a query attends to on the windowed layers: itself and the `sliding_window - 1` before it (Mistral; GPT-OSS: 128). The attention kernel's work and time follow the window; reported model FLOPs keep Megatron's full square, and activations are those of the whole sequence. Not with ring context parallelism.";
    SLIDING_WINDOW_EVERY = "sliding_window_every", Uint { min: 1, max: MAX_LAYERS }, Int(1), "Layer `i` (from 0) attends over the window when `i % sliding_window_every == 0`, the others over the whole sequence (GPT-OSS: 2, Megatron-Core's `window_attn_skip_freq`); needs `sliding_window`.";
    ATTENTION_SINKS = "attention_sinks", Bool, Note("from config, else `false`"), "A learned sink logit per head in each layer's softmax (GPT-OSS): `heads` parameters per layer, 2 FLOPs per query and head in each direction of the attention kernel.";
    MLA = "mla", Table, Note("none"), "DeepSeek's multi-head latent attention instead of Q/K/V projections: `[model.mla]`.";
    HYBRID_PATTERN = "hybrid_pattern", Text, Note("none: every layer is attention and MLP"), "A hybrid model, one symbol per layer, each layer a single block: `M` a Mamba-2 mixer (`[model.mamba]`), `*` attention, `-` a dense MLP (`ffn_hidden` wide), `E` an MoE (needs `experts`). Megatron-Core's `hybrid_override_pattern` (Nemotron-H, Nemotron 3); as long as `layers`. Not with `dense_layers`, `moe_every`, `mla`, `mtp_layers` or `sliding_window`, nor with context parallelism when a layer is a Mamba mixer.";
    MAMBA = "mamba", Table, Note("none"), "The Mamba-2 mixer of a hybrid model's `M` layers: `[model.mamba]`.";
    MTP_LAYERS = "mtp_layers", Uint { min: 0, max: 64 }, Note("from config, else 0"), "Multi-token prediction modules after the last layer (DeepSeek-V3), on the last pipeline stage: each re-embeds the tokens shifted by one, normalises that and the hidden state, projects the pair (`2h x h`), runs one more transformer layer (an MoE layer when the model has experts) and the output head and loss again.";
});

keys!(mla {
    Q_LORA_RANK = "q_lora_rank", Uint { min: 0, max: 1 << 20 }, Int(0), "Rank of the query compression (`h x r` down, norm, `r x heads*(nope+rope)` up); 0 = queries projected from the hidden state directly.";
    KV_LORA_RANK = "kv_lora_rank", Uint { min: 1, max: 1 << 20 }, Required, "Rank of the joint key/value compression: `h x (r + rope)` down (with the shared rotary key), norm, `r x heads*(nope+v)` up.";
    QK_NOPE_HEAD_DIM = "qk_nope_head_dim", Uint { min: 1, max: 1 << 16 }, Required, "Per-head query/key width without rotary position.";
    QK_ROPE_HEAD_DIM = "qk_rope_head_dim", Uint { min: 0, max: 1 << 16 }, Required, "Per-head query/key width with rotary position (the key's part is shared by all heads).";
    V_HEAD_DIM = "v_head_dim", Uint { min: 1, max: 1 << 16 }, Required, "Per-head value width; the output projection is `heads*v_head_dim x h`.";
});

keys!(mamba {
    HEADS = "heads", Uint { min: 1, max: 1 << 16 }, Required, "Mamba heads (Megatron-Core's `mamba_num_heads`); `heads * head_dim` is the mixer's inner width. Divisible by `groups` and by `parallel.tp`.";
    HEAD_DIM = "head_dim", Uint { min: 1, max: 1 << 16 }, Required, "Width of one Mamba head (`mamba_head_dim`).";
    STATE = "state", Uint { min: 1, max: 1 << 16 }, Required, "State size per group (`mamba_state_dim`): `B` and `C` are `groups * state` wide.";
    GROUPS = "groups", Uint { min: 1, max: 1 << 16 }, Required, "Groups sharing `B` and `C` (`mamba_num_groups`); divisible by `parallel.tp`.";
    CONV_KERNEL = "conv_kernel", Uint { min: 1, max: 64 }, Int(4), "Taps of the depthwise causal convolution over `x`, `B` and `C` (`d_conv`).";
    CHUNK = "chunk", Uint { min: 1, max: 1 << 16 }, Int(128), "Tokens per chunk of the state-space scan (`MambaMixer`'s `chunk_size`).";
});

keys!(cluster {
    GPU = "gpu", Other("a GPU preset name (the names of `[cluster.gpu] preset`), or a table (`[cluster.gpu]`)"), Required, "The GPU: a preset (`h200-sxm-141gb` and `b200` are accepted as aliases) or a table.";
    GPUS = "gpus", Uint { min: 1, max: MAX_DEGREE }, Required, "GPUs in the job.";
    GPUS_PER_NODE = "gpus_per_node", Uint { min: 1, max: 4096 }, Note("from `node`, else required"), "GPUs per node.";
    NODE = "node", Choice { what: "node preset", names: &NODE_NAMES }, Note("the GPU preset's usual node (the report notes it), else none"), "A node preset: sets `gpus_per_node` and both link tiers. `custom` = no preset.";
    INTRA_NODE = "intra_node", Table, Note("from `node`, else required"), "The NVLink/NVSwitch tier: `[cluster.intra_node]`.";
    INTER_NODE = "inter_node", Table, Note("from `node`, else required"), "The network tier, per GPU (one NIC rail): `[cluster.inter_node]`.";
    TOPOLOGY = "topology", Table, Note("analytic model, rail-optimized, one NIC per GPU"), "Wiring and network model: `[cluster.topology]`.";
});

keys!(topology {
    MODEL = "model", Choice { what: "network model", names: &["analytic", "flow"] }, Is("analytic"), "`analytic`: each transfer priced alone (alpha-beta); `flow`: flows share links max-min fairly.";
    FABRIC = "fabric", Choice { what: "fabric", names: &["rail-optimized", "fat-tree"] }, Is("rail-optimized"), "How nodes are wired to leaf switches.";
    NICS_PER_NODE = "nics_per_node", Uint { min: 0, max: 4096 }, Int(0), "NICs per node, shared evenly by its GPUs; 0 = one per GPU.";
    NODES_PER_LEAF = "nodes_per_leaf", Uint { min: 1, max: MAX_DEGREE }, Int(crate::scenario::topology::DEFAULT_NODES_PER_LEAF as u64), "Nodes per leaf switch (per rail when rail-optimized).";
    OVERSUBSCRIPTION = "oversubscription", Number { zero_ok: false, max: 1024.0 }, Num(1.0), "Leaf downlink / uplink capacity (4 = 4:1).";
});

keys!(gpu {
    PRESET = "preset", Choice { what: "GPU preset", names: &GPU_NAMES }, Note("none"), "Start from a GPU preset and change some fields.";
    NAME = "name", Text, Note("the preset's name, else `custom`"), "Informational.";
    PEAK_FP32_FLOPS_PER_S = "peak_fp32_flops_per_s", Number { zero_ok: false, max: MAX_FLOPS_PER_S }, Note("from `preset`, else bf16 / 16 (A100's ratio)"), "Peak dense FP32 FLOP/s.";
    PEAK_TF32_FLOPS_PER_S = "peak_tf32_flops_per_s", Number { zero_ok: false, max: MAX_FLOPS_PER_S }, Note("from `preset`, else bf16 / 2"), "Peak dense TF32 FLOP/s.";
    PEAK_FP16_FLOPS_PER_S = "peak_fp16_flops_per_s", Number { zero_ok: false, max: MAX_FLOPS_PER_S }, Note("from `preset`, else = bf16"), "Peak dense FP16 FLOP/s.";
    PEAK_BF16_FLOPS_PER_S = "peak_bf16_flops_per_s", Number { zero_ok: false, max: MAX_FLOPS_PER_S }, Note("from `preset`, else required"), "Peak dense BF16 FLOP/s.";
    PEAK_FP8_FLOPS_PER_S = "peak_fp8_flops_per_s", Number { zero_ok: false, max: MAX_FLOPS_PER_S }, Note("from `preset`, else = bf16 (no FP8 units)"), "Peak dense FP8 FLOP/s.";
    HBM_BYTES = "hbm_bytes", Uint { min: 1, max: MAX_BYTES }, Note("from `preset`, else required"), "Device memory as the driver counts it (nvidia-smi's total).";
    DRIVER_RESERVED_BYTES = "driver_reserved_bytes", Uint { min: 0, max: MAX_BYTES }, Note("from `preset` when `hbm_bytes` comes from it too, else 0"), "What the driver keeps (nvidia-smi's \"Reserved\"); the verdict compares against `hbm_bytes - driver_reserved_bytes`. Below `hbm_bytes`.";
    HBM_BANDWIDTH_BYTES_PER_S = "hbm_bandwidth_bytes_per_s", Number { zero_ok: false, max: MAX_BANDWIDTH_BYTES_PER_S }, Note("from `preset`, else required"), "HBM bandwidth.";
});

keys!(link {
    BANDWIDTH_BYTES_PER_S = "bandwidth_bytes_per_s", Number { zero_ok: false, max: MAX_BANDWIDTH_BYTES_PER_S }, Note("from `cluster.node`, else required"), "Per GPU, per direction. Not together with `bandwidth_gb_per_s`.";
    BANDWIDTH_GB_PER_S = "bandwidth_gb_per_s", Number { zero_ok: false, max: MAX_BANDWIDTH_BYTES_PER_S / 1e9 }, Note("—"), "The same in GB/s (10^9 bytes).";
    LATENCY_US = "latency_us", Number { zero_ok: true, max: 1e6 }, Note("from `cluster.node`, else required"), "Per-message latency in µs. Not together with `latency_ns`.";
    LATENCY_NS = "latency_ns", Uint { min: 0, max: 1_000_000_000 }, Note("—"), "The same in ns.";
});

keys!(parallel {
    TP = "tp", Uint { min: 1, max: MAX_DEGREE }, Int(1), "Tensor-parallel degree.";
    PP = "pp", Uint { min: 1, max: MAX_DEGREE }, Int(1), "Pipeline stages.";
    DP = "dp", Uint { min: 1, max: MAX_DEGREE }, Note("`gpus / (tp * pp * cp)`"), "Data-parallel degree of the dense layers: `tp * pp * cp * dp` is the GPU count.";
    VPP = "vpp", Uint { min: 1, max: MAX_LAYERS }, Int(1), "Model chunks (virtual stages) per device; above 1 only with `interleaved-1f1b`.";
    EP = "ep", Uint { min: 1, max: MAX_DEGREE }, Int(1), "Expert-parallel degree (MoE only): the expert layers group `ep` of the `dp` data-parallel ranks (Megatron-Core's mesh), so `ep` divides `dp`, each rank holds `experts / ep` experts, and their state is sharded over the `dp / ep` expert data-parallel ranks. It does not multiply the GPU count. With `etp = 1` under `tp > 1`, or under `cp > 1`, the expert layers refold a stage's `tp * cp * dp` ranks instead (Megatron-Core's expert rank generator): `ep` groups ranks `etp` apart, the context-parallel ones first, so `ep` divides `tp * cp * dp / etp`.";
    ETP = "etp", Uint { min: 1, max: MAX_DEGREE }, Note("`tp`"), "Expert tensor parallelism (MoE only): the ranks that split each routed expert. `tp` (the default): the experts split like the dense MLP. Any other value (it divides `moe_ffn_hidden`; 1: each expert whole on its rank) refolds a stage's `tp * cp * dp` ranks as Megatron-Core's `expert_tensor_parallel_size` does: groups of `etp` consecutive ranks split the experts, `ep` groups ranks `etp` apart, each rank dispatches its own sequence-parallel tokens (under `tp > 1` it needs sequence parallelism) and, with `etp > 1`, each group gathers what its members received before the experts and reduce-scatters after them.";
    CP = "cp", Uint { min: 1, max: MAX_DEGREE }, Int(1), "Context-parallel degree (splits the sequence).";
    CP_ALGORITHM = "cp_algorithm", Choice { what: "context-parallel algorithm", names: &["all-gather", "ring", "ulysses"] }, Note("the framework file's `attention.cp_algorithm` (megatron-core: `ring`, torchtitan: `all-gather`)"), "How context parallelism exchanges K and V: all-gather (then reduce-scatter of their gradients), ring (p2p blocks overlapped with blockwise attention, 2*cp load-balanced chunks) or ulysses (all-to-all to head sharding; heads divisible by cp).";
    ZERO = "zero", Uint { min: 0, max: 3 }, Note("0 (3 with `fsdp = true`)"), "ZeRO stage over the data-parallel group.";
    FSDP = "fsdp", Bool, Flag(false), "Fully sharded data parallel (ZeRO-3).";
    FSDP_DEGREE = "fsdp_degree", Uint { min: 1, max: MAX_DEGREE }, Note("`dp` (plain FSDP)"), "HSDP: with `fsdp = true` or `zero = 3`, model state is sharded within blocks of this many consecutive data-parallel ranks and replicated across the `dp / fsdp_degree` blocks. Divides `dp`; only with `ep = 1`.";
    SEQUENCE_PARALLEL = "sequence_parallel", Bool, Flag(false), "Megatron sequence parallelism: norms and dropout activations sharded over tp.";
    SCHEDULE = "schedule", Choice { what: "schedule", names: &["gpipe", "1f1b", "interleaved-1f1b", "zero-bubble", "dualpipe"] }, Is("1f1b"), "Pipeline schedule. `dualpipe` (DeepSeek-V3): rank `r` holds stages `r` and `pp - 1 - r`, half the micro batches enter at each end; needs pp even, vpp = 1 and the micro batches even and at least `2 * pp`.";
    LAYER_PARTITION = "layer_partition", Other("an array of layer counts (integers from 0 to 65,536; 0 only first or last)"), Note("even split; where `pp * vpp` does not divide `layers`, Megatron-Core's uneven split (docs/reference/scenarios.md)"), "Layers per (stage, chunk) in pipeline order (virtual stage `chunk * pp + stage`): `pp * vpp` entries summing to `layers`. Overrides the automatic split.";
    PIPELINE_LAYOUT = "pipeline_layout", Text, Note("none"), "Megatron-Core's `pipeline_model_parallel_layout`: the virtual stages in pipeline order separated by `|`, in each `t` a transformer layer, `E` the embedding (first stage), `m` a multi-token prediction module and `L` the loss (last stage), `(...)*n` and `x*n` repetitions, commas ignored; e.g. `Et|(tt|)*30mL` (DeepSeek-V3 on 8 stages of 4 chunks). Sets `layer_partition`; not together with it.";
    ACCOUNT_FOR_EMBEDDING_IN_PIPELINE_SPLIT = "account_for_embedding_in_pipeline_split", Bool, Flag(false), "Megatron-Core's option: the input embedding counts as one layer of the pipeline split, so the first virtual stage holds one layer fewer. Not together with `layer_partition`.";
    ACCOUNT_FOR_LOSS_IN_PIPELINE_SPLIT = "account_for_loss_in_pipeline_split", Bool, Flag(false), "Megatron-Core's option: the output layer and loss count as one layer of the pipeline split, so the last virtual stage holds one layer fewer. Not together with `layer_partition`.";
    ORDER = "order", Other("a permutation of [\"tp\", \"cp\", \"ep\", \"dp\", \"pp\"], innermost first"), Note("`[\"tp\", \"cp\", \"ep\", \"dp\", \"pp\"]`"), "Placement of mesh axes on consecutive ranks, innermost first.";
});

keys!(training {
    GLOBAL_BATCH = "global_batch", Uint { min: 1, max: 1 << 24 }, Required, "Sequences per step, whole job.";
    MICRO_BATCH = "micro_batch", Uint { min: 1, max: 1 << 24 }, Int(1), "Sequences per micro batch.";
    TOKENS = "tokens", Uint { min: 1, max: 1 << 62 }, Note("none"), "Tokens the whole training run consumes: `simulate --horizon` then reports the time to reach them (P10/P50/P90).";
    PRECISION = "precision", Choice { what: "precision", names: &["fp32", "fp16", "bf16", "fp8"] }, Is("bf16"), "Compute precision of the GEMMs.";
    FP8_RECIPE = "fp8_recipe", Choice { what: "FP8 scaling recipe", names: &["delayed", "tensorwise", "rowwise", "blockwise", "mxfp8"] }, Is("delayed"), "How FP8 GEMM inputs are scaled (with `precision = \"fp8\"`): `delayed` (Transformer Engine's amax history: the cast needs no pass before it) or `tensorwise` (current scaling, TE Float8CurrentScaling / torchao tensorwise: an amax pass over each tensor before its cast) or `rowwise` (torchao rowwise: a scale per row, GEMMs on the profile's `[gemm.fp8_rowwise]` curve, each cast along both axes) or `blockwise` (TE Float8BlockScaling, DeepSeek-V3's recipe: 1 x 128 scales for activations and gradients, 128 x 128 for weights, GEMMs on the profile's `[gemm.fp8_blockwise]` curve, each cast along both axes in one kernel) or `mxfp8` (Blackwell's microscaling, TE MXFP8BlockScaling / torchao MX: a scale per 32 elements, GPUs of compute capability 10.0 or later only; GEMMs on the FP8 curve, each cast along both axes in one kernel).";
    FP8_PARAM_GATHER = "fp8_param_gather", Bool, Flag(false), "With `precision = \"fp8\"`: the data-parallel parameter gathers (ZeRO's all-gather of the updated parameters, ZeRO-3/FSDP's gathers and their buffers) carry FP8 weights, 1 byte each, instead of the 16-bit weights' 2 (Megatron-Core's `fp8_param_gather`, torchtitan's `enable_fsdp_float8_all_gather`, both off by default). Needs a framework that can (torchtitan: the `tensorwise` recipe only).";
    RECOMPUTE = "recompute", Choice { what: "recompute policy", names: &["none", "selective", "full"] }, Is("none"), "Activation recomputation: `selective` = attention scores (Korthikanti et al. 2022).";
    RECOMPUTE_MODULES = "recompute_modules", Other("a list of \"core_attn\", \"layernorm\", \"moe_act\", \"mla_up_proj\", \"mlp\", \"moe\", \"shared_experts\""), Note("the framework's selective policy (Megatron-Core: `[\"core_attn\"]`)"), "Read with `recompute = \"selective\"` (ignored otherwise, as Megatron-Core ignores it) under a framework whose selective policy is the attention core (Megatron-Core): the modules whose outputs are not kept for the backward, which runs them again first (Megatron-Core's `recompute_modules`): the attention core, the norms that are modules of their own (an MoE layer's pre-MLP norm, latent attention's input norm), the routed experts' activation, latent attention's up-projections, a dense layer's MLP, an MoE layer's whole MoE block (router, all-to-alls, experts; its collectives run again too), the shared experts.";
    RECOMPUTE_LAYERS = "recompute_layers", Uint { min: 0, max: 1 << 16 }, Note("every layer"), "With `recompute = \"full\"`: only the first N layers of each model chunk recompute, the rest keep their activations (Megatron-Core's `recompute_method = \"block\"` with `recompute_num_layers`).";
    OVERLAP_GRAD_REDUCE = "overlap_grad_reduce", Bool, Flag(true), "Overlap gradient reduction with backward.";
    OVERLAP_PARAM_GATHER = "overlap_param_gather", Bool, Flag(true), "Overlap ZeRO/FSDP parameter gathers with compute.";
    GRAD_COMPRESSION = "grad_compression", Other("none, fp16, int8, topk:F with 0 < F <= 1 (fraction of elements kept)"), Is("none"), "Gradient compression before the data-parallel reduction.";
    SYNC = "sync", Other("sync, async, delayed:N with N >= 1 (synchronise every N steps)"), Is("sync"), "`async`: the reduction of step i overlaps step i+1.";
    OPTIMIZER = "optimizer", Choice { what: "optimizer", names: &["adam", "sgd"] }, Is("adam"), "Optimizer (its state sizes and step).";
    OPTIMIZER_STATE_DTYPE = "optimizer_state_dtype", Choice { what: "optimizer state dtype", names: &["fp32", "bf16"] }, Is("fp32"), "The dtype of the optimizer's moments (Adam's two, SGD's momentum): `bf16` halves them, as Megatron-Core's precision-aware optimizer with `exp_avg_dtype = exp_avg_sq_dtype = bf16` does. Master weights stay fp32.";
    GRAD_CLIP = "grad_clip", Bool, Flag(true), "Gradients are clipped by their global norm before the update: the optimizer step reads them once for the norm, and once more and writes them where the framework file's `optimizer.clip_scale` is `always` (PyTorch's `clip_grad_norm_`). `false`: no norm and no scaling (Megatron-Core's `clip_grad = 0`, the Trainer's `max_grad_norm = 0`).";
    OPTIMIZER_KERNEL = "optimizer_kernel", Choice { what: "optimizer implementation", names: &["fused", "multi-tensor", "foreach", "for-loop"] }, Note("the framework file's `optimizer.kernel`"), "How the optimizer step runs, which sets the bytes it moves: `fused` or `multi-tensor` (one pass over each tensor: apex / Transformer Engine FusedAdam, DeepSpeed's, `torch.optim.AdamW(fused=True)`) or `foreach` (PyTorch's default: a kernel per elementwise operation over lists of tensors, eight passes for Adam) or `for-loop` (the same operations tensor by tensor, `foreach=False`). The Hugging Face Trainer's `optim = \"adamw_torch\"` is `foreach`, `adamw_torch_fused` is `fused`.";
    GRAD_REDUCE_DTYPE = "grad_reduce_dtype", Choice { what: "gradient reduction dtype", names: &["fp32", "bf16"] }, Note("the framework file's `optimizer.grad_buffer`"), "The dtype gradients are reduced in over data parallelism: the bytes of the reduce-scatter or all-reduce and of its buckets, and under 16-bit parameters with fp32 master weights (Megatron-Core, DeepSpeed) the gradient buffer's bytes per parameter (Megatron-Core's `grad_reduce_in_fp32 = false` is `bf16`). Over fp32 parameters (`memory.fp32_params`, FSDP's `reduce_dtype`) the gradient shard stays fp32.";
    OFFLOAD = "offload", Choice { what: "offload mode", names: &["none", "optimizer", "params"] }, Is("none"), "Offload to host memory; `params` needs `zero = 3` or `fsdp`.";
    FLASH_ATTENTION = "flash_attention", Bool, Flag(true), "No s² attention-score matrix is stored.";
    FRAMEWORK = "framework", Choice { what: "framework", names: &["megatron-core", "nemo", "torchtitan", "deepspeed", "hf", "llm-foundry"] }, Is("megatron-core"), "The training framework whose behaviour and limits apply (docs/reference/frameworks.md); `nemo` is an alias of `megatron-core`. Not together with `framework_file`.";
    FRAMEWORK_FILE = "framework_file", Text, Note("none: the bundled file `framework` names"), "Path to a framework file of your own, relative to the scenario file (format: docs/reference/frameworks.md). Not together with `framework`.";
    TP_COMM_OVERLAP = "tp_comm_overlap", Bool, Flag(false), "Overlap the tensor-parallel all-gathers and reduce-scatters with the GEMMs that consume or produce them, chunk by chunk (Transformer Engine userbuffers, PyTorch async TP): one chunk of each stays exposed and the overlapped GEMMs give the framework's `overlaps.tp_comm_overlap_sms` to the communication. Needs sequence parallelism and a framework that can.";
    OVERLAP_P2P_COMM = "overlap_p2p_comm", Bool, Note("the framework file's `overlaps.p2p_overlap` under `interleaved-1f1b` (megatron-core: true); false under every other schedule"), "The pipeline's sends and receives run beside compute: a stage posts each receive as early as it can and computes on while its sends drain (Megatron-Core's `overlap_p2p_comm`, interleaved schedules only). Off: after each pass the stage posts its send and its next receive together and waits for both before computing again (Megatron-Core's 1F1B, torch.distributed.pipelining). Needs `schedule = \"interleaved-1f1b\"` and a framework that can.";
    COMPILE = "compile", Bool, Flag(false), "The model runs under `torch.compile`: the framework file's compiled elementwise fusion applies.";
    CUDA_GRAPHS = "cuda_graphs", Bool, Flag(false), "The step is captured in CUDA graphs: each kernel pays the framework file's graph launch gap when it is below the hardware's.";
    MOE_ROUTING = "moe_routing", Other("\"balanced\", \"force-balanced\", or an inline table of one key: `{ capacity_factor = F }` (0 < F ≤ 1000), `{ imbalance = F }` (1 ≤ F ≤ `parallel.ep`), `{ expert_loads = [..] }` (one number ≥ 0 per expert, not all 0), `{ expert_load_cv = F }` (0 ≤ F ≤ 10)"), Is("balanced"), "How an MoE layer's router spreads the token copies over the experts (docs/reference/scenarios.md, Routing); the busiest expert-parallel rank paces the step. Other than `balanced` needs `model.experts`.";
    MOE_A2A_OVERLAP = "moe_a2a_overlap", Bool, Flag(false), "The expert-parallel all-to-alls of one micro batch run behind the compute of another: each micro batch's backward is interleaved layer by layer with the next one's forward, one forward ahead (Megatron-Core's `overlap_moe_expert_parallel_comm`, its combined 1F1B). Needs `model.experts`, `ep > 1`, `pp = 1` or `schedule = \"interleaved-1f1b\"`, `recompute` other than `\"full\"`, `precision` other than `\"fp32\"`, `mtp_layers` at most 1, no `\"moe\"` in `recompute_modules`, a model without `hybrid_pattern`, and a framework that can.";
    MOE_DISPATCHER = "moe_dispatcher", Choice { what: "MoE dispatcher", names: &["alltoall", "deepep", "hybridep"] }, Is("alltoall"), "How the expert all-to-alls move tokens: `alltoall` (NCCL's all-to-all of every routed copy, Megatron-Core's `alltoall` dispatcher) or `deepep` (DeepEP's kernels, Megatron-Core's `flex` dispatcher: a token crosses once to each remote node holding one of its experts, over its rail, and is forwarded over NVLink once to each GPU there holding one; its NVLink and RDMA buffers are held on every GPU for the whole step, docs/memory.md; `hybridep` is priced the same, without buffers). Needs `model.experts`.";
    GRAD_BUCKET_BYTES = "grad_bucket_bytes", Uint { min: 1, max: 1 << 40 }, Note("Megatron-Core's default (docs/reference/scenarios.md)"), "DDP gradient bucket size.";
});

keys!(memory {
    RESERVED_BYTES = "reserved_bytes", Uint { min: 0, max: MAX_BYTES }, Int(crate::scenario::types::MemorySettings::DEFAULT_RESERVED_BYTES), "Held on every GPU for the whole step: CUDA context, cuBLAS and NCCL (the default is what a PyTorch process held on an H200).";
    ALLOCATOR_SLACK_FRACTION = "allocator_slack_fraction", Number { zero_ok: true, max: 1.0 }, Note("the framework file's `memory.allocator_slack_fraction` (0 in every bundled file)"), "Caching-allocator fragmentation: each activation and buffer allocation holds this fraction more.";
    ACCOUNTING = "accounting", Choice { what: "memory accounting", names: &["megatron", "deepspeed"] }, Is("megatron"), "Whose bookkeeping of model state and ZeRO buffers the memory timeline follows (docs/memory.md). Only memory changes.";
});

keys!(run {
    ITERATIONS = "iterations", Uint { min: 1, max: 1 << 20 }, Int(1), "Training steps to simulate.";
    SEED = "seed", Uint { min: 0, max: i64::MAX as u64 }, Int(1), "The run's RNG seed.";
    GRANULARITY = "granularity", Choice { what: "granularity", names: &["chunk", "layer"] }, Is("chunk"), "`chunk`: one op per (chunk, micro batch, phase); `layer`: one op per layer, finer traces.";
});

keys!(checks {
    MAX_STEP_TIME_S = "max_step_time_s", THRESHOLD, Note("no check"), "Passes when the step time (s) is at most this.";
    MIN_TOKENS_PER_S = "min_tokens_per_s", THRESHOLD, Note("no check"), "Passes when the job's tokens/s is at least this.";
    MIN_TOKENS_PER_S_PER_GPU = "min_tokens_per_s_per_gpu", THRESHOLD, Note("no check"), "Tokens/s per GPU, at least.";
    MIN_MODEL_TFLOPS_PER_GPU = "min_model_tflops_per_gpu", THRESHOLD, Note("no check"), "Model TFLOP/s per GPU, at least.";
    MIN_MFU = "min_mfu", FRACTION, Note("no check"), "Model FLOPs utilisation, at least.";
    MIN_HFU = "min_hfu", FRACTION, Note("no check"), "Hardware FLOPs utilisation, at least.";
    MAX_PEAK_MEMORY_FRACTION = "max_peak_memory_fraction", THRESHOLD, Note("no check"), "Worst rank's peak device memory / usable HBM, at most.";
    MAX_PEAK_MEMORY_BYTES = "max_peak_memory_bytes", THRESHOLD, Note("no check"), "Worst rank's peak device memory in bytes, at most.";
    MAX_BUBBLE_FRACTION = "max_bubble_fraction", FRACTION, Note("no check"), "Mean idle fraction of the step, at most.";
    MAX_EXPOSED_COMM_FRACTION = "max_exposed_comm_fraction", FRACTION, Note("no check"), "Mean exposed-communication fraction, at most.";
    MIN_GOODPUT = "min_goodput", FRACTION, Note("no check"), "Goodput, at least (not evaluated without `[faults]`).";
    MUST_FIT = "must_fit", Bool, Note("no check"), "`true`: every rank's peak fits in usable HBM.";
});

keys!(faults {
    HORIZON = "horizon", Other("a duration such as \"30d\", \"12h\", \"90m\" or \"3600s\", or a number of seconds"), Note("30 days"), "How long the job runs.";
    SEEDS = "seeds", Uint { min: 1, max: 1_000_000 }, Int(100), "Monte Carlo samples.";
    SEED = "seed", Uint { min: 0, max: i64::MAX as u64 }, Int(1), "First seed.";
    GPU_FAILURES_PER_GPU_HOUR = "gpu_failures_per_gpu_hour", Number { zero_ok: true, max: MAX_RATE }, Num(0.0), "GPU failure rate. Not together with `gpu_mtbf_hours`.";
    GPU_MTBF_HOURS = "gpu_mtbf_hours", Number { zero_ok: false, max: 1e12 }, Note("—"), "The same as a mean time between failures.";
    NODE_FAILURES_PER_NODE_DAY = "node_failures_per_node_day", Number { zero_ok: true, max: MAX_RATE }, Num(0.0065), "Node failure rate (RSC-1: 6.50 per 1,000 node-days, Kokolis et al.). Give one node rate only.";
    NODE_FAILURES_PER_1000_NODE_DAYS = "node_failures_per_1000_node_days", Number { zero_ok: true, max: MAX_RATE }, Note("—"), "The same per 1,000 node-days.";
    NODE_MTBF_HOURS = "node_mtbf_hours", Number { zero_ok: false, max: 1e12 }, Note("—"), "The same as a mean time between failures.";
    LINK_FAILURES_PER_LINK_DAY = "link_failures_per_link_day", Number { zero_ok: true, max: MAX_RATE }, Num(0.0), "Link failure rate. Not together with `link_mtbf_hours`.";
    LINK_MTBF_HOURS = "link_mtbf_hours", Number { zero_ok: false, max: 1e12 }, Note("—"), "The same as a mean time between failures.";
    DISTRIBUTION = "distribution", Choice { what: "distribution", names: &["exponential", "weibull"] }, Is("exponential"), "Distribution of times between failures.";
    WEIBULL_SHAPE = "weibull_shape", Number { zero_ok: false, max: 100.0 }, Num(0.8), "Weibull shape; only with `distribution = \"weibull\"`.";
    STRAGGLER_PER_GPU_HOUR = "straggler_per_gpu_hour", Number { zero_ok: true, max: MAX_RATE }, Num(0.0), "Straggler episodes per GPU-hour.";
    STRAGGLER_SLOWDOWN = "straggler_slowdown", Number { zero_ok: false, max: 1000.0 }, Num(1.5), "Step-time factor while a straggler lasts, at least 1.";
    STRAGGLER_DURATION_S = "straggler_duration_s", Number { zero_ok: true, max: MAX_SECONDS }, Num(600.0), "How long a straggler lasts.";
    LINK_DEGRADATION_PER_LINK_DAY = "link_degradation_per_link_day", Number { zero_ok: true, max: MAX_RATE }, Num(0.0), "Link degradations per link-day.";
    LINK_DEGRADATION_BANDWIDTH_FRACTION = "link_degradation_bandwidth_fraction", Number { zero_ok: false, max: 1.0 }, Num(0.5), "Bandwidth left on a degraded link.";
    LINK_DEGRADATION_DURATION_S = "link_degradation_duration_s", Number { zero_ok: true, max: MAX_SECONDS }, Num(3600.0), "How long a degradation lasts.";
    SCHEDULED_S = "scheduled_s", Other("an array of times in seconds"), Note("none"), "Failures at fixed times, in addition to the random ones.";
    DETECTION_TIMEOUT_S = "detection_timeout_s", Number { zero_ok: true, max: MAX_SECONDS }, Num(300.0), "Time to notice a failure.";
    RESTART = "restart", Choice { what: "restart policy", names: &["hot_spare", "wait_replacement", "elastic"] }, Is("hot_spare"), "What replaces a failed node.";
    SPARE_SWAP_S = "spare_swap_s", Number { zero_ok: true, max: MAX_SECONDS }, Num(30.0), "Time to swap in a hot spare.";
    REPLACEMENT_WAIT_S = "replacement_wait_s", Number { zero_ok: true, max: MAX_SECONDS }, Num(14400.0), "Time to wait for a replacement node.";
    PROCESS_RESTART_S = "process_restart_s", Number { zero_ok: true, max: MAX_SECONDS }, Num(60.0), "Time to restart the job's processes.";
    COMM_INIT_S = "comm_init_s", Number { zero_ok: true, max: MAX_SECONDS }, Num(30.0), "Time to rebuild communicators.";
    CHECKPOINT_EVERY_STEPS = "checkpoint_every_steps", Uint { min: 1, max: 1 << 40 }, Note("—"), "Checkpoint interval in steps. Not together with `checkpoint_every_minutes`.";
    CHECKPOINT_EVERY_MINUTES = "checkpoint_every_minutes", Number { zero_ok: false, max: MAX_SECONDS / 60.0 }, Num(30.0), "Checkpoint interval in minutes.";
    CHECKPOINT_MODE = "checkpoint_mode", Choice { what: "checkpoint mode", names: &["sync", "async"] }, Is("sync"), "`async`: training resumes after the snapshot to host memory.";
    SNAPSHOT_BYTES_PER_S = "snapshot_bytes_per_s", Number { zero_ok: false, max: MAX_BANDWIDTH_BYTES_PER_S }, Num(20e9), "Device-to-host snapshot bandwidth per GPU.";
    IN_MEMORY_REPLICAS = "in_memory_replicas", Bool, Flag(false), "Keep checkpoint replicas in peers' memory.";
    PEER_BYTES_PER_S = "peer_bytes_per_s", Number { zero_ok: false, max: MAX_BANDWIDTH_BYTES_PER_S }, Num(25e9), "Bandwidth to a peer's memory.";
    STORAGE_WRITE_BYTES_PER_S = "storage_write_bytes_per_s", Number { zero_ok: false, max: MAX_BANDWIDTH_BYTES_PER_S }, Num(100e9), "Aggregate storage write bandwidth.";
    STORAGE_READ_BYTES_PER_S = "storage_read_bytes_per_s", Number { zero_ok: false, max: MAX_BANDWIDTH_BYTES_PER_S }, Num(200e9), "Aggregate storage read bandwidth.";
    CHECKPOINT_BYTES = "checkpoint_bytes", Uint { min: 1, max: 1 << 56 }, Note("the model state's size"), "Bytes of one checkpoint.";
});

keys!(variability {
    GPU_SPEED_CV = "gpu_speed_cv", Number { zero_ok: true, max: 2.0 }, Num(0.0), "Coefficient of variation of each GPU's compute speed (lognormal, mean 1), drawn per sample.";
    LINK_BANDWIDTH_CV = "link_bandwidth_cv", Number { zero_ok: true, max: 2.0 }, Num(0.0), "Coefficient of variation of each GPU's link bandwidth (NVLink port and NIC; lognormal, mean 1); a collective runs at its slowest member's.";
    STEP_JITTER_CV = "step_jitter_cv", Number { zero_ok: true, max: 2.0 }, Num(0.0), "Coefficient of variation of every compute op's duration (lognormal, mean 1), drawn per op: noise that synchronisation turns into waiting.";
    SLOW_NODE_FRACTION = "slow_node_fraction", FRACTION, Num(0.0), "Chance that a node is slow, drawn per node per sample.";
    SLOW_NODE_FACTOR = "slow_node_factor", Number { zero_ok: false, max: 100.0 }, Num(1.0), "Compute-time factor on a slow node, at least 1.";
    SAMPLES = "samples", Text, Note("lognormal speeds"), "A file of measured relative GPU speeds (numbers, one per line or comma separated, `#` comments), relative to the scenario file: each GPU's speed is drawn from them, divided by their median; instead of `gpu_speed_cv`.";
});

/// Every table of a scenario file, in the order of the docs.
pub const GROUPS: &[Group] = &[
    Group {
        path: "",
        keys: root::ALL,
    },
    Group {
        path: "model",
        keys: model::ALL,
    },
    Group {
        path: "model.mla",
        keys: mla::ALL,
    },
    Group {
        path: "model.mamba",
        keys: mamba::ALL,
    },
    Group {
        path: "cluster",
        keys: cluster::ALL,
    },
    Group {
        path: "cluster.topology",
        keys: topology::ALL,
    },
    Group {
        path: "cluster.gpu",
        keys: gpu::ALL,
    },
    Group {
        path: "cluster.intra_node",
        keys: link::ALL,
    },
    Group {
        path: "cluster.inter_node",
        keys: link::ALL,
    },
    Group {
        path: "parallel",
        keys: parallel::ALL,
    },
    Group {
        path: "training",
        keys: training::ALL,
    },
    Group {
        path: "memory",
        keys: memory::ALL,
    },
    Group {
        path: "run",
        keys: run::ALL,
    },
    Group {
        path: "checks",
        keys: checks::ALL,
    },
    Group {
        path: "faults",
        keys: faults::ALL,
    },
    Group {
        path: "variability",
        keys: variability::ALL,
    },
];

/// The keys of the table at `path` (none for a path the schema does not know).
pub fn group(path: &str) -> &'static [Key] {
    GROUPS
        .iter()
        .find(|g| g.path == path)
        .map(|g| g.keys)
        .unwrap_or(&[])
}

impl Key {
    /// The integer range of an integer key (`(0, u64::MAX)` for any other kind).
    pub fn uint_range(&self) -> (u64, u64) {
        match self.kind {
            Kind::Uint { min, max } => (min, max),
            _ => (0, u64::MAX),
        }
    }

    /// The type column of the docs.
    pub fn type_name(&self) -> &'static str {
        match self.kind {
            Kind::Uint { .. } => "integer",
            Kind::Number { .. } => "number",
            Kind::Bool => "bool",
            Kind::Text | Kind::Choice { .. } => "string",
            Kind::Table => "table",
            Kind::Other(_) => "see allowed",
        }
    }

    /// The allowed values, as the docs and error messages say them.
    pub fn allowed(&self) -> String {
        match self.kind {
            Kind::Uint { min, max } => format!(
                "{} ..= {}",
                super::read::group_digits(min),
                super::read::group_digits(max)
            ),
            Kind::Number { zero_ok: true, max } => format!("0 ..= {max:e}"),
            Kind::Number {
                zero_ok: false,
                max,
            } => format!("> 0, ≤ {max:e}"),
            Kind::Bool => "true, false".into(),
            Kind::Text => "text".into(),
            Kind::Choice { names, .. } => names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", "),
            Kind::Table => "a table".into(),
            Kind::Other(text) => text.into(),
        }
    }

    /// The default column of the docs.
    pub fn default_text(&self) -> String {
        match self.default {
            Absent::Required => "required".into(),
            Absent::Int(v) => super::read::group_digits(v),
            Absent::Num(v) => format!("{v}"),
            Absent::Flag(b) => b.to_string(),
            Absent::Is(n) => format!("`\"{n}\"`"),
            Absent::Note(t) => t.into(),
        }
    }
}

/// The key reference: one Markdown table per group (docs/reference/keys.md).
pub fn markdown() -> String {
    let mut out = String::from(
        "# Scenario keys\n\n\
         Every key a scenario file accepts. This page is generated from the schema table \
         (`ir/src/scenario/keys.rs`); `TWIN_BLESS=1 cargo test -p twin-ir keys_doc` rewrites \
         it. Rules that relate several keys, presets and examples: \
         [scenarios.md](scenarios.md).\n",
    );
    for g in GROUPS {
        let title = if g.path.is_empty() {
            "top level".to_string()
        } else {
            format!("`[{}]`", g.path)
        };
        out.push_str(&format!(
            "\n## {title}\n\n| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n"
        ));
        for k in g.keys {
            out.push_str(&format!(
                "| `{}` | {} | {} | {} | {} |\n",
                k.name,
                k.type_name(),
                k.default_text().replace('|', "\\|"),
                k.allowed().replace('|', "\\|"),
                k.doc.replace('|', "\\|"),
            ));
        }
    }
    out
}
