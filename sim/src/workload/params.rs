//! Parameter counts and model-state bytes: what a rank holds for its layers after tensor and
//! expert sharding, and what weights, gradients and optimizer state cost after ZeRO/FSDP
//! sharding and offload.
//!
//! The scenario has no switches for biases, norm type or position embeddings, so the MLP kind
//! stands for the model family: a gated MLP (SwiGLU) means Llama-style (no linear biases,
//! RMSNorm with one weight vector, rotary positions); otherwise GPT-style (biases, LayerNorm
//! with weight and bias, learned position embeddings of `s*h`). This reproduces Llama 2/3,
//! Mixtral and GPT-3 parameter counts exactly. The vocabulary is used as given (Megatron pads
//! it to a multiple of `128*t`; give the padded size if that matters).
//!
//! Tied embeddings: with the embedding and the head on different virtual stages Megatron keeps
//! a copy of the word embeddings on the last stage (and all-reduces its gradient with the first
//! stage), so the head's rank holds `V*h/t` either way; only when one chunk holds both is the
//! matrix held once. [`model_params`] counts unique parameters.

use super::dims::{div_ceil, mul};
use super::{Ffn, LayerCounts, LayerShape, ParamCount, StateBytes};
use crate::scenario::{
    Block, MemoryAccounting, Model, Offload, Optimizer, Precision, Scenario, Training,
};

/// How tensor parallelism splits a linear layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Split {
    /// Output columns split over t.
    Column,
    /// Input rows split over t.
    Row,
    /// Whole on every rank.
    None,
}

/// A linear layer `rows x cols` (input x output).
#[derive(Clone, Copy, Debug)]
struct Linear {
    rows: u64,
    cols: u64,
    split: Split,
    bias: bool,
}

impl Linear {
    fn column(rows: u64, cols: u64, bias: bool) -> Linear {
        Linear {
            rows,
            cols,
            split: Split::Column,
            bias,
        }
    }
    fn row(rows: u64, cols: u64, bias: bool) -> Linear {
        Linear {
            rows,
            cols,
            split: Split::Row,
            bias,
        }
    }
    fn replicated(rows: u64, cols: u64) -> Linear {
        Linear {
            rows,
            cols,
            split: Split::None,
            bias: false,
        }
    }
}

/// Shapes that decide parameter counts, with the tensor, expert-tensor and expert parallel
/// sizes they are split by (1, 1 and 1 for the unsharded model).
#[derive(Clone, Copy)]
struct Shapes<'a> {
    m: &'a Model,
    t: u64,
    /// What the routed experts' linear layers split over (`etp`).
    et: u64,
    ep: u64,
}

impl Shapes<'_> {
    /// GPT-style: LayerNorm with a bias, a bias on every linear layer and learned positions,
    /// as the models without a gated MLP have them; a hybrid model's (Nemotron-H: squared
    /// ReLU, RMSNorm, no biases, no position embedding) does not.
    fn gpt_style(&self) -> bool {
        !self.m.gated_mlp && self.m.hybrid.is_none()
    }

    /// One layer norm (weight and bias) or RMSNorm (weight).
    fn norm(&self) -> u64 {
        if self.gpt_style() {
            mul(2, self.m.hidden)
        } else {
            self.m.hidden
        }
    }

    /// The attention's linear layers as (rows, cols, column-parallel, biased): QKV
    /// (`h x (q + 2*kv)`) and output projection (`q x h`), with `q = heads * head_dim` and
    /// `kv = kv_heads * head_dim` (`h` and `h*g/a` when the head width is `h / a`). Under
    /// multi-head latent attention: the query down-projection (`h x q_lora`, replicated) and
    /// up-projection (`q_lora x heads*(nope+rope)`, column parallel) or, without a query rank,
    /// one `h x heads*(nope+rope)`; the joint key/value down-projection with the shared rotary
    /// key (`h x (kv_lora + rope)`, replicated) and up-projection (`kv_lora x
    /// heads*(nope+v)`, column parallel); the output projection (`heads*v x h`, row parallel).
    /// Megatron-Core's MLASelfAttention shards them so (NVIDIA/Megatron-LM@d98e8a64dd
    /// megatron/core/transformer/multi_latent_attention.py).
    fn attention_linears(&self) -> Vec<Linear> {
        let h = self.m.hidden;
        let biased = self.gpt_style() || self.m.qkv_bias;
        let out_bias = self.gpt_style();
        match &self.m.mla {
            None => {
                let (q, kv) = (self.m.q_width(), self.m.kv_width());
                vec![
                    Linear::column(h, q.saturating_add(mul(2, kv)), biased),
                    Linear::row(q, h, out_bias),
                ]
            }
            Some(mla) => {
                let heads = u64::from(self.m.heads);
                let q_out = mul(heads, mla.qk_head_dim());
                let mut l = Vec::with_capacity(5);
                if mla.q_lora_rank > 0 {
                    l.push(Linear::replicated(h, mla.q_lora_rank));
                    l.push(Linear::column(mla.q_lora_rank, q_out, false));
                } else {
                    l.push(Linear::column(h, q_out, false));
                }
                l.push(Linear::replicated(
                    h,
                    mla.kv_lora_rank.saturating_add(mla.qk_rope_head_dim),
                ));
                l.push(Linear::column(
                    mla.kv_lora_rank,
                    mul(heads, mla.qk_nope_head_dim.saturating_add(mla.v_head_dim)),
                    false,
                ));
                l.push(Linear::row(mul(heads, mla.v_head_dim), h, out_bias));
                l
            }
        }
    }

    /// Parameters of one linear layer on this rank.
    fn linear(&self, l: &Linear) -> u64 {
        let (rows, cols) = match l.split {
            Split::Column => (l.rows, div_ceil(l.cols, self.t)),
            Split::Row => (div_ceil(l.rows, self.t), l.cols),
            Split::None => (l.rows, l.cols),
        };
        // A row-parallel layer's bias is replicated, a column-parallel one's split.
        let bias = if l.bias { cols } else { 0 };
        mul(rows, cols).saturating_add(bias)
    }

    /// Attention: its linear layers, the norms of the latent ranks under MLA, and the sink
    /// logits (one per head, split over tensor parallelism with the heads: Megatron-Core's
    /// `softmax_offset` of `num_attention_heads_per_partition` under `softmax_type =
    /// "learnable"`, NVIDIA/Megatron-LM@d98e8a64dd
    /// megatron/core/transformer/dot_product_attention.py).
    fn attention(&self) -> u64 {
        let norms = self
            .m
            .mla
            .map_or(0, |mla| mla.q_lora_rank.saturating_add(mla.kv_lora_rank));
        let sinks = if self.m.attention_sinks {
            div_ceil(u64::from(self.m.heads), self.t)
        } else {
            0
        };
        self.attention_linears()
            .iter()
            .map(|l| self.linear(l))
            .fold(norms.saturating_add(sinks), u64::saturating_add)
    }

    /// The MLP's linear layers for an inner width `f`: up (`h x f`, or gate and up `h x 2f`
    /// gated) and down (`f x h`).
    fn mlp_linears(&self, f: u64) -> [Linear; 2] {
        let h = self.m.hidden;
        let up = if self.m.gated_mlp { mul(2, f) } else { f };
        [
            Linear::column(h, up, self.gpt_style()),
            Linear::row(f, h, self.gpt_style()),
        ]
    }

    /// One MLP (or one expert) of inner width `f`: `2*h*f`, or `3*h*f` gated.
    fn mlp(&self, f: u64) -> u64 {
        self.mlp_linears(f)
            .iter()
            .map(|l| self.linear(l))
            .fold(0, u64::saturating_add)
    }

    /// One routed expert of inner width `f`, split over the expert tensor parallelism.
    fn expert_mlp(&self, f: u64) -> u64 {
        Shapes {
            t: self.et,
            ..*self
        }
        .mlp(f)
    }

    /// Inner MLP width of a dense layer: the MoE model's `dense_ffn_hidden`, else `ffn_hidden`.
    fn dense_width(&self) -> u64 {
        self.m
            .moe
            .as_ref()
            .map_or(self.m.ffn_hidden, |moe| moe.dense_ffn_hidden)
    }

    /// One Mamba-2 mixer on this rank: `in_proj` (column parallel), the convolution's weights
    /// and biases over its channels, `dt_bias`, `A_log` and `D` per head, the gated norm's
    /// weight over the inner width (each split over tensor parallelism with the heads and
    /// groups), and `out_proj` (row parallel); none has a bias (NVIDIA/Megatron-LM@d98e8a64dd
    /// megatron/core/ssm/mamba_mixer.py `MambaMixer.__init__`).
    fn mamba(&self) -> u64 {
        let Some(mamba) = self.mamba_shape() else {
            return 0;
        };
        let projections = self
            .mamba_linears()
            .iter()
            .map(|l| self.linear(l))
            .fold(0, u64::saturating_add);
        let conv = mul(
            div_ceil(mamba.conv_channels(), self.t),
            mamba.conv_kernel.saturating_add(1),
        );
        let per_head = mul(3, div_ceil(mamba.heads, self.t));
        projections
            .saturating_add(conv)
            .saturating_add(per_head)
            .saturating_add(div_ceil(mamba.inner(), self.t))
    }

    fn mamba_shape(&self) -> Option<crate::scenario::Mamba> {
        self.m.hybrid.as_ref().and_then(|h| h.mamba)
    }

    /// The Mamba-2 mixer's linear layers: `in_proj` and `out_proj` (none without a mixer).
    fn mamba_linears(&self) -> Vec<Linear> {
        let h = self.m.hidden;
        self.mamba_shape().map_or(Vec::new(), |mamba| {
            vec![
                Linear::column(h, mamba.in_proj_width(), false),
                Linear::row(mamba.inner(), h, false),
            ]
        })
    }

    /// One layer of shape `shape`: its blocks and one norm per block.
    fn layer(&self, shape: LayerShape) -> ParamCount {
        let mut common = mul(shape.sublayers(), self.norm());
        if shape.attention {
            common = common.saturating_add(self.attention());
        }
        if shape.mamba {
            common = common.saturating_add(self.mamba());
        }
        match (shape.mlp, &self.m.moe) {
            (Ffn::Moe, Some(moe)) => {
                let experts = u64::from(moe.experts);
                // The router (`h x experts`) and the shared experts (tensor parallel like a
                // dense MLP) are replicated over the expert-parallel ranks.
                let shared = mul(
                    u64::from(moe.shared_experts),
                    self.mlp(moe.shared_ffn_hidden),
                );
                ParamCount {
                    dense: common
                        .saturating_add(mul(self.m.hidden, experts))
                        .saturating_add(shared),
                    expert: mul(div_ceil(experts, self.ep), self.expert_mlp(moe.ffn_hidden)),
                }
            }
            (Ffn::None, _) => ParamCount {
                dense: common,
                expert: 0,
            },
            _ => ParamCount {
                dense: common.saturating_add(self.mlp(self.dense_width())),
                expert: 0,
            },
        }
    }

    /// Word embeddings split over the vocabulary, plus learned positions (GPT-style).
    fn embedding(&self) -> u64 {
        let words = mul(div_ceil(self.m.vocab, self.t), self.m.hidden);
        let positions = if self.gpt_style() {
            mul(self.m.seq_len, self.m.hidden)
        } else {
            0
        };
        words.saturating_add(positions)
    }

    /// Final norm and output layer (`word_matrix`: whether this chunk holds its own matrix).
    fn head(&self, word_matrix: bool) -> u64 {
        let out = if word_matrix {
            mul(div_ceil(self.m.vocab, self.t), self.m.hidden)
        } else {
            0
        };
        self.norm().saturating_add(out)
    }

    /// The largest single module (a weight matrix with its bias, a norm, an embedding table,
    /// one expert's matrix) among layers `first .. first + n` and the embedding / head: the
    /// unit DeepSpeed's ZeRO-3 gathers. Fused as Megatron fuses them (QKV; gate and up).
    fn largest_module(&self, layers: LayerCounts, embedding: bool, head: bool) -> u64 {
        let h = self.m.hidden;
        let mut largest = 0;
        let (n, moe_layers) = (layers.all(), layers.moe_layers());
        if n > 0 {
            let attention = layers
                .dense
                .saturating_add(layers.moe)
                .saturating_add(layers.count(Block::Attention));
            let mut linears = if attention > 0 {
                self.attention_linears()
            } else {
                Vec::new()
            };
            if layers.dense.saturating_add(layers.count(Block::Mlp)) > 0 {
                linears.extend(self.mlp_linears(self.dense_width()));
            }
            if layers.count(Block::Mamba) > 0 {
                linears.extend(self.mamba_linears());
            }
            if let (Some(moe), true) = (&self.m.moe, moe_layers > 0) {
                // A routed expert's matrices split over the expert tensor parallelism.
                let expert = Shapes {
                    t: self.et,
                    ..*self
                };
                largest = expert
                    .mlp_linears(moe.ffn_hidden)
                    .iter()
                    .map(|l| expert.linear(l))
                    .fold(largest, u64::max);
                if moe.shared_experts > 0 {
                    linears.extend(self.mlp_linears(moe.shared_ffn_hidden));
                }
                largest = largest.max(mul(h, u64::from(moe.experts)));
            }
            largest = linears
                .iter()
                .map(|l| self.linear(l))
                .fold(largest.max(self.norm()), u64::max);
        }
        if embedding {
            // Word and position embeddings are separate tables.
            let positions = if self.gpt_style() {
                mul(self.m.seq_len, h)
            } else {
                0
            };
            largest = largest.max(self.embedding().saturating_sub(positions).max(positions));
        }
        if head {
            // A tied head in the embedding's chunk is the embedding table, counted above.
            largest = largest.max(self.head(!(self.m.tied_embeddings && embedding)));
        }
        largest
    }

    /// `layers` of each shape, embedding and head as asked.
    fn range(&self, layers: LayerCounts, embedding: bool, head: bool) -> ParamCount {
        let mut p = layers.shapes().filter(|&(_, n)| n > 0).fold(
            ParamCount::default(),
            |acc, (shape, n)| {
                let layer = self.layer(shape);
                ParamCount {
                    dense: acc.dense.saturating_add(mul(layer.dense, n)),
                    expert: acc.expert.saturating_add(mul(layer.expert, n)),
                }
            },
        );
        if embedding {
            p.dense = p.dense.saturating_add(self.embedding());
        }
        if head {
            // A chunk with both the embedding and a tied head holds the matrix once.
            let own_matrix = !(self.m.tied_embeddings && embedding);
            p.dense = p.dense.saturating_add(self.head(own_matrix));
            let mtp = self.mtp();
            p.dense = p.dense.saturating_add(mtp.dense);
            p.expert = p.expert.saturating_add(mtp.expert);
            // The modules embed with the word embeddings: a head chunk without the embedding
            // holds a copy, as for a tied head.
            if self.m.mtp_layers > 0 && !embedding && !self.m.tied_embeddings {
                let words = mul(div_ceil(self.m.vocab, self.t), self.m.hidden);
                p.dense = p.dense.saturating_add(words);
            }
        }
        p
    }

    /// The multi-token prediction modules (on the head's chunk): each an embedding norm, a
    /// hidden-state norm, the `2h x h` projection (column parallel), one transformer layer (an
    /// MoE layer when the model has experts) and a final norm; the embedding and the output
    /// head are the model's (Megatron-Core's `MultiTokenPredictionLayer`,
    /// NVIDIA/Megatron-LM@d98e8a64dd megatron/core/transformer/multi_token_prediction.py).
    fn mtp(&self) -> ParamCount {
        let n = u64::from(self.m.mtp_layers);
        if n == 0 {
            return ParamCount::default();
        }
        let layer = self.layer(LayerShape::transformer(self.m.moe.is_some()));
        let h = self.m.hidden;
        let own = mul(3, self.norm()).saturating_add(self.linear(&Linear::column(
            mul(2, h),
            h,
            self.gpt_style(),
        )));
        ParamCount {
            dense: mul(n, layer.dense.saturating_add(own)),
            expert: mul(n, layer.expert),
        }
    }
}

/// The sharding of a rank of `s`: its model, tensor, expert-tensor and expert parallelism.
fn rank_shapes(s: &Scenario) -> Shapes<'_> {
    Shapes {
        m: &s.model,
        t: u64::from(s.parallel.tp.max(1)),
        et: u64::from(s.parallel.etp().max(1)),
        ep: u64::from(s.parallel.ep.max(1)),
    }
}

/// Parameters one rank holds for layers `first .. first + n` (and the embedding / head),
/// after tensor and expert sharding.
pub(crate) fn range_params(
    s: &Scenario,
    first: u64,
    n: u64,
    embedding: bool,
    head: bool,
) -> ParamCount {
    counted_range_params(s, LayerCounts::of(&s.model, first, n), embedding, head)
}

/// [`range_params`] of a range holding `layers`: a range's parameters depend on how many of
/// its layers are dense and how many MoE, not on where it starts.
pub(crate) fn counted_range_params(
    s: &Scenario,
    layers: LayerCounts,
    embedding: bool,
    head: bool,
) -> ParamCount {
    rank_shapes(s).range(layers, embedding, head)
}

/// The largest module one rank holds in a range of `layers` (and the embedding / head),
/// after tensor and expert sharding: what DeepSpeed's ZeRO-3 gathers at a time.
pub(crate) fn range_largest_module(
    s: &Scenario,
    layers: LayerCounts,
    embedding: bool,
    head: bool,
) -> u64 {
    rank_shapes(s).largest_module(layers, embedding, head)
}

/// Unique parameters of the whole model, unsharded (tied embeddings counted once).
pub fn model_params(m: &Model) -> ParamCount {
    Shapes {
        m,
        t: 1,
        et: 1,
        ep: 1,
    }
    .range(LayerCounts::of(m, 0, u64::from(m.layers)), true, true)
}

/// Parameters one token passes through, of the whole model: every dense parameter (attention,
/// norms, routers, shared experts, dense MLPs, both embedding matrices) and `top_k` routed
/// experts of each MoE layer. Model cards differ on the embeddings: some leave the input
/// embedding out (docs/reference/scenarios.md).
pub fn activated_params(m: &Model) -> u64 {
    let total = model_params(m);
    match &m.moe {
        None => total.dense,
        Some(moe) => {
            let expert = Shapes {
                m,
                t: 1,
                et: 1,
                ep: 1,
            }
            .mlp(moe.ffn_hidden);
            // The multi-token prediction modules' layers are MoE layers too.
            let layers = m
                .moe_layers_in(0, u64::from(m.layers))
                .saturating_add(u64::from(m.mtp_layers));
            let routed = mul(layers, mul(u64::from(moe.top_k), expert));
            total.dense.saturating_add(routed)
        }
    }
}

/// Bytes per parameter of each kind of model state, before sharding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateCoefficients {
    pub weight_bytes: u64,
    pub grad_bytes: u64,
    pub optimizer_bytes: u64,
    /// Whether the optimizer keeps a separate fp32 master copy of the weights (counted in
    /// `optimizer_bytes`).
    pub master_copy: bool,
}

/// Bytes per parameter of weights, gradients and optimizer state:
/// - fp16: 2 + 2 + 12 (the ZeRO paper's mixed-precision Adam: fp32 master, momentum,
///   variance);
/// - bf16: 2 + 4 + 12 (Megatron-LM accumulates bf16 gradients in fp32 main grads; 2 + 2 + 12
///   with `grad_reduce_dtype = "bf16"`, its `grad_reduce_in_fp32 = false`);
/// - fp8: as bf16 (weights are kept in bf16; fp8 casts are transient per GEMM);
/// - fp32: 4 + 4 + 8 (no master copy);
/// - bf16, fp16 or fp8 over fp32 parameters (the framework's `memory.fp32_params`: PyTorch
///   FSDP's mixed precision, which casts the fp32 shards at each gather; or
///   `memory.autocast_weight_copies`: PyTorch AMP): 4 + 4 + 8, as fp32, the 16-bit copies
///   being transient.
///
/// SGD with momentum keeps 4 bytes of momentum (+ 4 for the master copy). Moments in bf16
/// (`optimizer_state_dtype`) take half: Adam's 8 bytes become 4.
pub fn state_coefficients(training: &Training) -> StateCoefficients {
    let memory = &training.framework.memory;
    let autocast = memory.autocast_weight_copies;
    let fp32_params = memory.fp32_params;
    let (weight_bytes, grad_bytes, master_copy) = match training.precision {
        Precision::Fp32 => (4, 4, false),
        // Autocast over fp32 parameters: they are the weights the optimizer updates, with
        // fp32 gradients; the compute-dtype copies are transient (`workload::activations`).
        Precision::Fp16 | Precision::Bf16 if autocast => (4, 4, false),
        // FSDP's mixed precision: the fp32 shards are the parameters the optimizer updates;
        // the gathered 16-bit (or FP8) copies are transient (the gather buffers).
        Precision::Fp16 | Precision::Bf16 | Precision::Fp8 if fp32_params => (4, 4, false),
        Precision::Fp16 => (2, 2, true),
        // The gradient buffer holds the reduction's dtype (Megatron-Core's
        // `grad_reduce_in_fp32`): fp32 unless `grad_reduce_dtype` says bf16.
        Precision::Bf16 | Precision::Fp8 => (2, training.grad_elem_bytes(), true),
    };
    // Adam keeps two moments, SGD one momentum, each in `optimizer_state_dtype`.
    let moments = match training.optimizer {
        Optimizer::Adam => 2 * training.moment_elem_bytes(),
        Optimizer::Sgd => training.moment_elem_bytes(),
    };
    StateCoefficients {
        weight_bytes,
        grad_bytes,
        optimizer_bytes: moments + if master_copy { 4 } else { 0 },
        master_copy,
    }
}

/// Bytes per rank of `params` parameters at `bytes_per_param`: split over the `dp` ranks once
/// the ZeRO stage reaches `from_stage` (1: optimizer state, 2: gradients, 3: weights).
pub(crate) fn zero_shard_bytes(
    params: u64,
    dp: u64,
    zero: u8,
    bytes_per_param: u64,
    from_stage: u8,
) -> u64 {
    let bytes = mul(params, bytes_per_param);
    if zero >= from_stage {
        div_ceil(bytes, dp)
    } else {
        bytes
    }
}

/// ZeRO stage in effect (FSDP behaves as stage 3).
pub(crate) fn zero_stage(s: &Scenario) -> u8 {
    if s.parallel.fsdp {
        3
    } else {
        s.parallel.zero
    }
}

/// Model state per rank for `params`, dense parameters sharded over `dense_dp` ranks and
/// expert parameters over `expert_dp` ranks as the scenario's ZeRO stage says: stage 1 shards
/// the optimizer state, 2 also the gradients, 3 (or FSDP) also the weights. Offload moves the
/// optimizer state (and, for `params`, the weights too) to host memory. This is Megatron's
/// bookkeeping; `[memory] accounting = "deepspeed"` counts as [`super::deepspeed`] says.
/// `host_init_bytes` is not model state and stays 0 here (see [`super::state_bytes`]).
pub fn model_state_bytes(
    s: &Scenario,
    params: ParamCount,
    dense_dp: u64,
    expert_dp: u64,
) -> StateBytes {
    if s.memory.accounting == MemoryAccounting::Deepspeed {
        return super::deepspeed::model_state_bytes(s, params, dense_dp, expert_dp);
    }
    let k = state_coefficients(&s.training);
    let zero = zero_stage(s);
    let mut out = StateBytes::default();
    for (p, n) in [(params.dense, dense_dp), (params.expert, expert_dp)] {
        let shard = |bytes_per_param: u64, from_stage: u8| {
            zero_shard_bytes(p, n, zero, bytes_per_param, from_stage)
        };
        let weights = shard(k.weight_bytes, 3);
        let grads = shard(k.grad_bytes, 2);
        let optimizer = shard(k.optimizer_bytes, 1);
        out.grads_bytes = out.grads_bytes.saturating_add(grads);
        match s.training.offload {
            Offload::None => {
                out.weights_bytes = out.weights_bytes.saturating_add(weights);
                out.optimizer_bytes = out.optimizer_bytes.saturating_add(optimizer);
            }
            Offload::Optimizer => {
                out.weights_bytes = out.weights_bytes.saturating_add(weights);
                out.host_bytes = out.host_bytes.saturating_add(optimizer);
            }
            Offload::Params => {
                out.host_bytes = out
                    .host_bytes
                    .saturating_add(optimizer)
                    .saturating_add(weights);
            }
        }
    }
    out
}

/// Parameters whose optimizer update this rank runs: its shard under ZeRO >= 1.
pub(crate) fn optimizer_shard(
    s: &Scenario,
    params: ParamCount,
    dense_dp: u64,
    expert_dp: u64,
) -> u64 {
    if zero_stage(s) >= 1 {
        div_ceil(params.dense, dense_dp).saturating_add(div_ceil(params.expert, expert_dp))
    } else {
        params.dense.saturating_add(params.expert)
    }
}

/// Sizes of the data-parallel groups that shard dense and expert state: DenseDp is `dp*cp`,
/// ExpertDp is `dp/ep*cp` (`tp*cp*dp/(etp*ep)` when the expert layers refold a stage), with `fsdp_degree` for `dp` under HSDP (the state is replicated
/// across the `dp / fsdp_degree` shard groups; validation keeps HSDP to `ep = 1`).
pub(crate) fn dp_sizes(s: &Scenario) -> (u64, u64) {
    let p = &s.parallel;
    let (dp, ep, cp) = (
        u64::from(p.fsdp_degree().max(1)),
        u64::from(p.ep.max(1)),
        u64::from(p.cp.max(1)),
    );
    // Expert layers that refold the tensor-parallel ranks have their own data parallelism
    // (`tp * cp * dp / (etp * ep)`, no HSDP there).
    let expert = if p.expert_refold() {
        u64::from(p.edp().max(1))
    } else {
        mul((dp / ep).max(1), cp)
    };
    (mul(dp, cp), expert)
}
