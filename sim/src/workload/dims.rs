//! The scenario's sizes, read once and reduced to what one rank sees (per-rank token count,
//! tensor-parallel shard widths, the bytes of each saved tensor's dtype), with arithmetic that
//! saturates instead of panicking, so every formula in this module works on any input.

use crate::scenario::{CpAlgorithm, Precision, Scenario};

/// `a * b`, saturating.
pub(crate) fn mul(a: u64, b: u64) -> u64 {
    a.saturating_mul(b)
}

/// Product of several factors, saturating.
pub(crate) fn prod(factors: &[u64]) -> u64 {
    factors.iter().fold(1u64, |acc, &x| acc.saturating_mul(x))
}

/// `ceil(a / b)`, with a zero divisor read as 1 (validation rules it out; this cannot panic).
pub(crate) fn div_ceil(a: u64, b: u64) -> u64 {
    a.div_ceil(b.max(1))
}

/// A `u64` count as `u32`, saturating.
pub(crate) fn to_u32(x: u64) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}

/// MoE shape, when the model has experts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MoeDims {
    pub experts: u64,
    pub top_k: u64,
    /// Inner width of one routed expert.
    pub f: u64,
    /// Summed inner width of the shared experts (0: none). Megatron-Core runs them as one MLP
    /// of `shared_experts * shared_expert_ffn_hidden` (NVIDIA/Megatron-LM@d98e8a64dd
    /// megatron/core/transformer/moe/shared_experts.py `SharedExpertMLP`).
    pub shared_f: u64,
    /// Routed copies this rank's experts process, relative to the balanced mean share
    /// (`[training] moe_routing`, see `workload::routing`).
    pub load: f64,
    /// Copies the busiest rank of the expert-parallel group receives, relative to the mean:
    /// the volume each dispatch and combine all-to-all carries.
    pub pace: f64,
    /// The received copies are sorted by local expert after the dispatch and back before the
    /// combine: Megatron-Core's `alltoall` dispatcher with more than one local expert and
    /// `ep > 1` (NVIDIA/Megatron-LM@d98e8a64dd megatron/core/transformer/moe/token_dispatcher.py
    /// `MoEAlltoAllTokenDispatcher`: `sort_chunks_by_idxs` in `token_dispatch` and
    /// `combine_preprocess`, or a transpose made contiguous when padded to capacity). The
    /// `flex` dispatcher (DeepEP, HybridEP) permutes what it receives once instead of the
    /// sender's permute (`_DeepepManager.get_permuted_hidden_states_by_experts`).
    pub sorts_local_experts: bool,
    /// Routing without a fixed capacity (every routing but `capacity`): the dispatcher learns
    /// each expert's and rank's token counts on the host, so each MoE layer's forward
    /// synchronises the host with the GPU ([`crate::ir::HostSyncs`]).
    pub dropless: bool,
}

/// `ceil(x * factor)`, saturating; a factor of exactly 1 returns `x` unchanged.
pub(crate) fn scale(x: u64, factor: f64) -> u64 {
    if factor == 1.0 {
        return x;
    }
    let y = (x as f64 * factor).ceil();
    if y.is_finite() && y >= 0.0 {
        if y >= u64::MAX as f64 {
            u64::MAX
        } else {
            y as u64
        }
    } else {
        0
    }
}

/// One MLP of a layer as it runs on this rank: the tokens it sees and its inner width on this
/// rank (after the tensor-parallel split it runs under).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mlp {
    pub tokens: u64,
    pub f: u64,
    /// Separate GEMMs the tokens are split over: the rank's local experts (`experts / ep`),
    /// each its own GEMM of `tokens / groups` rows, as Transformer Engine's grouped linear
    /// runs them (NVIDIA/Megatron-LM@d98e8a64dd megatron/core/transformer/moe/experts.py
    /// `TEGroupedMLP`); 1 for a dense or shared MLP.
    pub groups: u64,
}

impl Mlp {
    /// One of this MLP's projections, `k -> n`: `groups` GEMMs of `ceil(tokens / groups)` rows.
    pub fn gemm(&self, k: u64, n: u64) -> crate::ir::Gemm {
        let groups = self.groups.max(1);
        crate::ir::Gemm::single(
            div_ceil(self.tokens, groups),
            n,
            k,
            u32::try_from(groups).unwrap_or(u32::MAX),
        )
    }

    /// Width of the first GEMM's output (gate and up fused when gated).
    pub fn up(&self, gated: bool) -> u64 {
        if gated {
            mul(2, self.f)
        } else {
            self.f
        }
    }
}

/// The low-rank projections of multi-head latent attention on this rank, as (tokens x in x
/// out) GEMMs in forward order; see `Dims::attention_projections`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MlaDims {
    pub q_lora_rank: u64,
    pub kv_lora_rank: u64,
    pub rope: u64,
    /// `heads * (nope + rope)`: the queries' width after the up-projection.
    pub q_up: u64,
    /// `heads * (nope + v)`: the keys' no-position part and the values after the up-projection.
    pub kv_up: u64,
}

/// Sizes of one micro batch on one rank. Shard widths round up: a rank's planned shapes are
/// the largest shard.
#[derive(Clone, Debug)]
pub(crate) struct Dims {
    /// Micro batch (sequences).
    pub b: u64,
    /// Full sequence length.
    pub s: u64,
    pub h: u64,
    /// Attention heads.
    pub a: u64,
    pub f: u64,
    pub v: u64,
    /// Tensor-parallel size.
    pub t: u64,
    /// Context-parallel size.
    pub c: u64,
    /// How context parallelism exchanges K and V (only read when `c > 1`).
    pub cp_algorithm: CpAlgorithm,
    /// How the context-parallel attention merges its blocks (the framework's
    /// `attention.cp_merge`; only read when `c > 1`).
    pub cp_merge: crate::scenario::framework::CpMerge,
    pub ep: u64,
    /// Expert tensor parallelism: the size the routed experts' inner width splits over
    /// (`parallel.etp`, `t` unless the scenario says).
    pub et: u64,
    /// The framework's MoE dispatcher gathers the routed copies over expert tensor parallelism
    /// after the all-to-all (`moe.expert_tp_gather = "routed-copies"`), not the tokens before it.
    pub expert_copies_gather: bool,
    /// Width of one head: `model.head_dim`, else `h / a`.
    pub head_dim: u64,
    /// Width of Q, of the attention context and of the output projection's input:
    /// `a * head_dim` (`h` unless the scenario gives `head_dim`).
    pub q: u64,
    /// Width of K (and of V): `g * head_dim` (`h * g / a` unless the scenario gives
    /// `head_dim`).
    pub kv: u64,
    /// Width of the K (and of the V) the attention kernel reads, saves and context parallelism
    /// exchanges: `kv`, or `q` when the framework repeats K/V to the query heads first; under
    /// multi-head latent attention the mean of K's `heads * (nope + rope)` and V's
    /// `heads * v`, so that `2 * kv_attention` is both.
    pub kv_attention: u64,
    /// Width of the attention's output and of the output projection's input: `q`, or
    /// `heads * v_head_dim` under multi-head latent attention.
    pub attn_out: u64,
    /// Multi-head latent attention's projections, when the model has it.
    pub mla: Option<MlaDims>,
    /// Sequence positions held by this rank: `ceil(s / c)`.
    pub s_local: u64,
    /// Tokens of the micro batch on this rank: `b * s / c`.
    pub tokens: u64,
    /// Sequence parallelism is on and does something (`t > 1`).
    pub sp: bool,
    pub flash: bool,
    /// The model's sliding window (`model.sliding_window`), which the fused kernel follows on
    /// the windowed layers.
    pub window: Option<crate::scenario::SlidingWindow>,
    /// A learned sink logit per head (`model.attention_sinks`).
    pub sinks: bool,
    pub gated: bool,
    /// Bytes per element of saved and communicated activations (fp8 training keeps these in
    /// bf16; see `docs/memory.md`).
    pub act_bytes: u64,
    /// Bytes per element of a saved GEMM input (1 with fp8: Transformer Engine keeps the fp8
    /// cast of a linear layer's input for the weight gradient).
    pub gemm_in_bytes: u64,
    /// The precision of the GEMMs that stay out of FP8 under FP8 training (the attention
    /// core and the output layer run in bf16: Transformer Engine's FP8 covers its Linear
    /// modules, and neither the core attention nor Megatron-Core's output layer is one);
    /// `None`: every GEMM in the training precision.
    pub high_precision: Option<Precision>,
    /// The framework's elementwise work per layer outside the GEMMs and attention (its
    /// `[fusions.eager]`, or `[fusions.compiled]` under `training.compile`).
    pub elementwise: crate::scenario::framework::Elementwise,
    /// How FP8 casts are scaled (`training.fp8_recipe`; only read under FP8).
    pub fp8_recipe: crate::scenario::Fp8Recipe,
    /// The framework reduces a current-scaling amax inside the producing kernel
    /// (`fusions.fp8_amax_fused`).
    pub fp8_amax_fused: bool,
    /// What selective recompute runs again (the framework's `recompute.selective`).
    pub selective: crate::scenario::framework::SelectiveRecompute,
    /// Under the attention-core policy, the modules selective recompute runs again
    /// (`training.recompute_modules`, else the attention core).
    pub modules: crate::scenario::RecomputeModules,
    /// The weights are fp32 parameters cast to the compute dtype by `torch.autocast` in every
    /// forward (the framework's `memory.autocast_weight_copies`, under bf16 or fp16).
    pub autocast: bool,
    pub moe: Option<MoeDims>,
    /// A hybrid model's Mamba-2 mixer (`[model.mamba]`).
    pub mamba: Option<crate::scenario::Mamba>,
}

impl Dims {
    pub fn new(s: &Scenario) -> Dims {
        let m = &s.model;
        let p = &s.parallel;
        let heads = u64::from(m.heads);
        // Multi-head latent attention: scores over `nope + rope` per head, values `v` wide.
        // The attention kernel is described by the mean head width, which gives its FLOPs
        // exactly (`2*(qk + v)` per query-key pair).
        let (head_dim, q, kv_attention, attn_out) = match &m.mla {
            Some(mla) => (
                (mla.qk_head_dim() + mla.v_head_dim) / 2,
                mul(heads, mla.qk_head_dim()),
                mul(heads, mla.qk_head_dim().saturating_add(mla.v_head_dim)) / 2,
                mul(heads, mla.v_head_dim),
            ),
            None => (
                m.head_dim(),
                m.q_width(),
                if s.training.framework.kv_heads_repeated {
                    m.q_width()
                } else {
                    m.kv_width()
                },
                m.q_width(),
            ),
        };
        let t = u64::from(p.tp.max(1));
        let c = u64::from(p.cp.max(1));
        let a = u64::from(m.heads.max(1));
        let s_local = div_ceil(m.seq_len, c);
        let precision = s.training.precision;
        let act_bytes = match precision {
            Precision::Fp8 => 2,
            other => other.bytes(),
        };
        Dims {
            b: s.training.micro_batch,
            s: m.seq_len,
            h: m.hidden,
            a,
            f: m.moe
                .as_ref()
                .map_or(m.ffn_hidden, |moe| moe.dense_ffn_hidden),
            v: m.vocab,
            t,
            c,
            cp_algorithm: p.cp_algorithm,
            cp_merge: s.training.framework.cp_merge,
            ep: u64::from(p.ep.max(1)),
            et: u64::from(p.etp().max(1)),
            expert_copies_gather: s.training.framework.expert_tp_gather
                == crate::scenario::framework::ExpertTpGather::RoutedCopies,
            head_dim,
            q,
            kv: m.kv_width(),
            kv_attention,
            attn_out,
            mla: m.mla.as_ref().map(|mla| MlaDims {
                q_lora_rank: mla.q_lora_rank,
                kv_lora_rank: mla.kv_lora_rank,
                rope: mla.qk_rope_head_dim,
                q_up: mul(heads, mla.qk_head_dim()),
                kv_up: mul(heads, mla.qk_nope_head_dim.saturating_add(mla.v_head_dim)),
            }),
            s_local,
            tokens: mul(s.training.micro_batch, s_local),
            sp: p.sequence_parallel && t > 1,
            flash: s.training.flash_attention,
            window: m.sliding_window,
            sinks: m.attention_sinks,
            gated: m.gated_mlp,
            act_bytes,
            gemm_in_bytes: precision.bytes(),
            high_precision: (precision == Precision::Fp8).then_some(Precision::Bf16),
            elementwise: if s.training.compile {
                s.training.framework.fusions.compiled
            } else {
                s.training.framework.fusions.eager
            },
            fp8_recipe: s.training.fp8_recipe,
            fp8_amax_fused: s.training.framework.fusions.fp8_amax_fused,
            selective: s.training.framework.recompute.selective,
            modules: s
                .training
                .recompute_modules
                .unwrap_or(crate::scenario::RecomputeModules::ATTENTION_CORE),
            autocast: s.training.framework.memory.autocast_weight_copies
                && matches!(precision, Precision::Bf16 | Precision::Fp16),
            moe: m.moe.as_ref().map(|moe| MoeDims {
                experts: u64::from(moe.experts.max(1)),
                top_k: u64::from(moe.top_k),
                f: moe.ffn_hidden,
                shared_f: mul(u64::from(moe.shared_experts), moe.shared_ffn_hidden),
                load: 1.0,
                pace: 1.0,
                sorts_local_experts: s.training.moe_dispatcher
                    == crate::scenario::MoeDispatcher::AllToAll
                    && p.ep > 1
                    && moe.experts / p.ep.max(1) > 1,
                dropless: !matches!(
                    s.training.moe_routing,
                    crate::scenario::MoeRouting::Capacity { .. }
                ),
            }),
            mamba: m.hybrid.as_ref().and_then(|h| h.mamba),
        }
    }

    /// Elements of a tensor that tensor parallelism leaves whole on every rank (layer norms,
    /// dropout, residual): split over `t` only with sequence parallelism.
    pub fn replicated(&self, elements: u64) -> u64 {
        if self.sp {
            div_ceil(elements, self.t)
        } else {
            elements
        }
    }

    /// Elements of a tensor that tensor parallelism splits over `t`.
    pub fn sharded(&self, elements: u64) -> u64 {
        div_ceil(elements, self.t)
    }

    /// `tokens * h`: one hidden-state tensor of the micro batch on this rank, before any
    /// tensor-parallel split.
    pub fn hidden_elements(&self) -> u64 {
        mul(self.tokens, self.h)
    }

    /// `tokens * q`: the micro batch's Q (or attention context) on this rank, before any
    /// tensor-parallel split.
    pub fn q_elements(&self) -> u64 {
        mul(self.tokens, self.q)
    }

    /// Attention heads on this rank times micro batch: the batch count of the score GEMMs.
    pub fn head_batches(&self) -> u64 {
        mul(self.b, self.sharded(self.a))
    }

    /// Whether the attention runs as Ulysses does it: the whole sequence, heads over `t*c`.
    pub fn ulysses(&self) -> bool {
        self.c > 1 && self.cp_algorithm == CpAlgorithm::Ulysses
    }

    /// The fused attention kernel of one layer's forward on this rank: the load-balanced
    /// share `s/c` of the queries against the whole causal sequence (all-gather and ring: the
    /// same work, see [`crate::ir::Attention::causal`]), or with Ulysses every query
    /// of the sequence for `a/(t*c)` heads.
    pub fn flash_attention(&self) -> crate::ir::Attention {
        let (q_len, heads) = if self.ulysses() {
            (self.s, div_ceil(self.sharded(self.a), self.c))
        } else {
            (self.s_local, self.sharded(self.a))
        };
        crate::ir::Attention {
            batch: to_u32(self.b),
            heads: to_u32(heads),
            head_dim: self.head_dim,
            q_len,
            kv_len: self.s,
            causal: true,
            backward: false,
            count: 1,
            window: self.window.map_or(0, |w| w.tokens),
            windowed: 0,
            sinks: self.sinks,
        }
    }

    /// Score-matrix elements on this rank: `b * a/t * (s/c) * s` (Megatron counts the full
    /// square even with causal masking).
    pub fn score_elements(&self) -> u64 {
        prod(&[self.head_batches(), self.s_local, self.s])
    }

    /// Whether the routed experts are priced over their own expert-tensor-parallel group rather
    /// than like the dense MLP: when `etp` is other than `tp`, and under `etp = tp > 1` where
    /// the framework's dispatcher gathers the routed copies (`moe.expert_tp_gather`). Each rank
    /// then dispatches its own sequence-parallel tokens, and with `etp > 1` the group gathers
    /// what its members received before the experts and reduce-scatters after them.
    pub fn experts_own_group(&self) -> bool {
        self.et != self.t || (self.expert_copies_gather && self.t > 1)
    }

    /// The MLPs of a layer on this rank: a dense layer's one (every token, `f/t` wide); an MoE
    /// layer's routed experts and, when the model has them, its shared experts (every token,
    /// their summed width over `t`). The routed experts see the routed token copies
    /// ([`Dims::expert_tokens`]) at the expert width over `et`.
    pub fn mlps(&self, moe: bool) -> Vec<Mlp> {
        match (moe, self.moe) {
            (true, Some(m)) => {
                let mut v = vec![Mlp {
                    tokens: self.expert_tokens(),
                    f: div_ceil(m.f, self.et),
                    groups: div_ceil(m.experts, self.ep),
                }];
                if m.shared_f > 0 {
                    v.push(Mlp {
                        tokens: self.tokens,
                        f: self.sharded(m.shared_f),
                        groups: 1,
                    });
                }
                v
            }
            _ => vec![Mlp {
                tokens: self.tokens,
                f: self.sharded(self.f),
                groups: 1,
            }],
        }
    }

    /// Token copies this rank's routed experts process: under balanced routing `T*top_k` when the
    /// experts split like the dense MLP (`etp = tp`: its group gathers the tokens first);
    /// `T/t*top_k*etp` when they split over their own group (`etp` other than `tp`: each rank
    /// dispatches its own sequence-parallel share, gets as many copies back, and the `etp`
    /// ranks that split the same experts gather each other's); times the rank's routing load.
    pub fn expert_tokens(&self) -> u64 {
        let load = self.moe.map_or(1.0, |m| m.load);
        scale(self.balanced_expert_tokens(), load)
    }

    /// [`Dims::expert_tokens`] under balanced routing.
    fn balanced_expert_tokens(&self) -> u64 {
        if self.experts_own_group() {
            mul(div_ceil(self.routed_tokens(), self.t), self.et)
        } else {
            self.routed_tokens()
        }
    }

    /// This dims with a rank's routing load (see `workload::routing`).
    pub fn with_load(mut self, load: super::routing::ExpertLoad) -> Dims {
        if let Some(m) = self.moe.as_mut() {
            m.load = load.rank;
            m.pace = load.pace;
        }
        self
    }

    /// The attention's input projections on this rank in forward order, as GEMMs of this
    /// rank's tokens: Q, K and V fused (`h -> q + 2*kv`, split over t); under multi-head
    /// latent attention the query down-projection (`h -> q_lora`, whole on every rank) and
    /// up-projection (`q_lora -> heads*(nope+rope)`, split) or, without a query rank, one
    /// `h -> heads*(nope+rope)`, then the joint key/value down-projection with the shared
    /// rotary key (`h -> kv_lora + rope`, whole) and up-projection (`kv_lora -> heads*(nope+v)`,
    /// split), as Megatron-Core's MLASelfAttention runs them
    /// (NVIDIA/Megatron-LM@d98e8a64dd megatron/core/transformer/multi_latent_attention.py).
    pub fn attention_projections(&self) -> Vec<(u64, u64, u64)> {
        let t = self.tokens;
        match self.mla {
            None => vec![(
                t,
                self.h,
                self.sharded(self.q.saturating_add(mul(2, self.kv))),
            )],
            Some(mla) => {
                let mut v = Vec::with_capacity(4);
                if mla.q_lora_rank > 0 {
                    v.push((t, self.h, mla.q_lora_rank));
                    v.push((t, mla.q_lora_rank, self.sharded(mla.q_up)));
                } else {
                    v.push((t, self.h, self.sharded(mla.q_up)));
                }
                v.push((t, self.h, mla.kv_lora_rank.saturating_add(mla.rope)));
                v.push((t, mla.kv_lora_rank, self.sharded(mla.kv_up)));
                v
            }
        }
    }

    /// Token copies an MoE layer's experts process on this rank (balanced routing): each
    /// token goes to `top_k` experts, and the EP all-to-all evens the load across ranks.
    pub fn routed_tokens(&self) -> u64 {
        mul(self.tokens, self.moe.map_or(1, |m| m.top_k))
    }
}
