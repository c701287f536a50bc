//! The compute of one micro batch through a transformer layer, the input embedding and the
//! output head: the GEMMs with their per-rank shapes, the bytes the memory-bound kernels move,
//! and the kernel launches, for the forward, the two halves of the backward, and what selective
//! recompute runs again (the attention core, or every second matmul with the elementwise work,
//! as the framework's `recompute.selective` says).
//!
//! FLOPs are counted as Megatron-LM does (Narayanan et al. 2021): the GEMMs', with full `s*s`
//! score matrices even under causal masking, backward = 2x forward, nothing for softmax, norms
//! or elementwise work. Those are memory-bound and are carried by `memory_bytes` instead, so
//! model FLOPs, MFU and HFU match the published closed forms exactly. With flash attention the
//! attention core is one fused kernel ([`crate::schedule::Attention`]) whose time the cost
//! model takes from its causal work; only its reported FLOPs keep Megatron's full square.
//!
//! Memory-bound bytes (an estimate; see docs/memory.md): each elementwise kernel reads its
//! inputs and writes its outputs once; a backward elementwise kernel moves twice its forward's
//! bytes (it reads the saved input and the incoming gradient, writes the outgoing gradient,
//! and for norms also reduces the weight gradient).

use super::dims::{div_ceil, mul, prod, to_u32, Dims};
use super::{Ffn, LayerShape};
use crate::ir::{Attention, ComputeOp, Gemm, HostSyncs, Phase};
use crate::scenario::framework::SelectiveRecompute;
use crate::scenario::{Fp8Recipe, Precision};

/// Work of one kind inside a pass, before it becomes a [`ComputeOp`].
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Parts {
    /// Distinct shapes in first-use order; repeats are folded into `count`.
    pub gemms: Vec<Gemm>,
    pub memory_bytes: u64,
    pub kernels: u32,
    /// The fused attention kernel (flash attention); one scenario's layers share one shape,
    /// so merging parts adds calls.
    pub attention: Option<Attention>,
    /// Megatron's FLOPs of `attention` (full `s*s` products), reported, not priced.
    pub attention_flops: u64,
    /// Where the host waits for the GPU inside these parts ([`HostSyncs`]).
    pub host_syncs: HostSyncs,
}

impl Parts {
    fn add_attention(&mut self, a: Option<Attention>, flops: u64) {
        self.attention = match (self.attention, a) {
            (Some(x), Some(y)) => Some(Attention {
                count: x.count.saturating_add(y.count),
                windowed: x.windowed.saturating_add(y.windowed),
                window: x.window.max(y.window),
                ..x
            }),
            (x, y) => x.or(y),
        };
        self.attention_flops = self.attention_flops.saturating_add(flops);
    }

    pub fn add_gemm(&mut self, g: Gemm) {
        if g.count == 0 {
            return;
        }
        match self
            .gemms
            .iter_mut()
            .find(|x| (x.m, x.n, x.k, x.batch, x.dtype) == (g.m, g.n, g.k, g.batch, g.dtype))
        {
            Some(x) => x.count = x.count.saturating_add(g.count),
            None => self.gemms.push(g),
        }
    }

    pub fn add(&mut self, other: &Parts) {
        for g in &other.gemms {
            self.add_gemm(*g);
        }
        self.memory_bytes = self.memory_bytes.saturating_add(other.memory_bytes);
        self.kernels = self.kernels.saturating_add(other.kernels);
        self.add_attention(other.attention, other.attention_flops);
        self.host_syncs = self.host_syncs.plus(other.host_syncs);
    }

    /// The same work `n` times (n layers).
    pub fn repeat(&self, n: u64) -> Parts {
        let n32 = to_u32(n);
        let mut out = Parts {
            gemms: Vec::with_capacity(self.gemms.len()),
            memory_bytes: mul(self.memory_bytes, n),
            kernels: self.kernels.saturating_mul(n32),
            attention: self.attention.map(|a| Attention {
                count: a.count.saturating_mul(n32),
                windowed: a.windowed.saturating_mul(n32),
                ..a
            }),
            attention_flops: mul(self.attention_flops, n),
            host_syncs: self.host_syncs.repeat(n32),
        };
        for g in &self.gemms {
            out.add_gemm(Gemm {
                count: g.count.saturating_mul(n32),
                ..*g
            });
        }
        out
    }

    /// Marks `n` of the attention kernel's calls as attending over the model's sliding
    /// window (the windowed layers among these parts' layers); nothing without a window or a
    /// fused kernel.
    fn window_calls(&mut self, n: u64) {
        if let Some(a) = self.attention.as_mut().filter(|a| a.window > 0) {
            a.windowed = to_u32(n).min(a.count);
        }
    }

    pub fn flops(&self) -> u64 {
        self.gemms
            .iter()
            .fold(self.attention_flops, |acc, g| acc.saturating_add(g.flops()))
    }

    pub fn into_op(self, phase: Phase, dtype: Precision) -> ComputeOp {
        let flops = self.flops();
        ComputeOp {
            phase,
            dtype,
            gemms: self.gemms.into(),
            attention: self.attention,
            flops,
            memory_bytes: self.memory_bytes,
            kernels: self.kernels,
            sms_reserved: 0,
            host_syncs: self.host_syncs,
        }
    }
}

/// Forward and backward halves of one block of the model for one micro batch.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct BlockParts {
    pub forward: Parts,
    /// Input gradients: GEMM dgrads, attention-core backward, elementwise backward.
    pub backward_input: Parts,
    /// Weight gradients: GEMM wgrads (and the embedding's scatter-add).
    pub backward_weight: Parts,
    /// The forward work that selective recompute runs again, as the framework's
    /// `recompute.selective` says: the attention core (QK^T, softmax, dropout, AV), or every
    /// second matmul with all the elementwise work. Empty for blocks without attention.
    pub selective: Parts,
}

impl BlockParts {
    /// [`Parts::window_calls`] on the forward, the input-gradient half and what selective
    /// recompute runs again: `n` of the layers attend over the sliding window.
    pub fn window_layers(&mut self, n: u64) {
        for p in [
            &mut self.forward,
            &mut self.backward_input,
            &mut self.selective,
        ] {
            p.window_calls(n);
        }
    }

    pub fn add(&mut self, other: &BlockParts) {
        self.forward.add(&other.forward);
        self.backward_input.add(&other.backward_input);
        self.backward_weight.add(&other.backward_weight);
        self.selective.add(&other.selective);
    }

    pub fn repeat(&self, n: u64) -> BlockParts {
        BlockParts {
            forward: self.forward.repeat(n),
            backward_input: self.backward_input.repeat(n),
            backward_weight: self.backward_weight.repeat(n),
            selective: self.selective.repeat(n),
        }
    }
}

/// `C[m,n] = A[m,k] B[k,n]` once.
fn gemm(m: u64, k: u64, n: u64) -> Gemm {
    Gemm::single(m, n, k, 1)
}

/// Gradient of A: `dA[m,k] = dC[m,n] B^T[n,k]` (a linear layer's dgrad).
fn grad_a(g: Gemm) -> Gemm {
    Gemm {
        dtype: g.dtype,
        m: g.m,
        n: g.k,
        k: g.n,
        count: g.count,
        batch: g.batch,
    }
}

/// Gradient of B: `dB[k,n] = A^T[k,m] dC[m,n]` (a linear layer's wgrad).
fn grad_b(g: Gemm) -> Gemm {
    Gemm {
        dtype: g.dtype,
        m: g.k,
        n: g.n,
        k: g.m,
        count: g.count,
        batch: g.batch,
    }
}

/// Adds linear layers (activation x weight) to a block: forward GEMM, dgrad, wgrad, one kernel
/// each.
fn add_linears(block: &mut BlockParts, linears: &[Gemm]) {
    for &g in linears {
        block.forward.add_gemm(g);
        block.forward.kernels += 1;
        block.backward_input.add_gemm(grad_a(g));
        block.backward_input.kernels += 1;
        block.backward_weight.add_gemm(grad_b(g));
        block.backward_weight.kernels += 1;
    }
}

/// Under autocast over fp32 weights ([`Dims::autocast`]) every linear layer's forward first
/// casts its weight to the compute dtype (`aten::_to_copy`: read 4, write 2 bytes per
/// element, one kernel), and its backward casts the weight gradient, computed in the compute
/// dtype, back to fp32 for the parameter (the cast's backward: read 2, write 4, one kernel,
/// beside the weight-gradient GEMM). pytorch/pytorch@v2.11.0 aten/src/ATen/autocast_mode.h:
/// `linear`, `matmul` and `mm` are in the lower-precision list, whose ops cast their fp32
/// arguments with `cached_cast`; the cached copy lives for the autocast region, one forward.
fn add_weight_casts(block: &mut BlockParts, d: &Dims, linears: &[Gemm]) {
    if !d.autocast {
        return;
    }
    let fp32 = Precision::Fp32.bytes();
    let per_element = fp32.saturating_add(d.act_bytes);
    for g in linears {
        let elements = weight_elements(g);
        let bytes = mul(per_element, elements);
        block.forward.memory_bytes = block.forward.memory_bytes.saturating_add(bytes);
        block.forward.kernels = block.forward.kernels.saturating_add(g.count);
        block.backward_weight.memory_bytes =
            block.backward_weight.memory_bytes.saturating_add(bytes);
        block.backward_weight.kernels = block.backward_weight.kernels.saturating_add(g.count);
    }
}

/// Weight elements of a linear layer's GEMM (`count` weights of `k x n`).
fn weight_elements(g: &Gemm) -> u64 {
    prod(&[g.k, g.n, u64::from(g.count)])
}

/// Weight elements of one layer's linear layers on this rank: what autocast casts in each
/// forward and autograd saves for the backward.
pub(crate) fn layer_weight_elements(d: &Dims, shape: LayerShape) -> u64 {
    linears_in_order(d, shape, router_of(d, shape))
        .iter()
        .fold(0u64, |acc, g| acc.saturating_add(weight_elements(g)))
}

/// Weight tensors of one layer's linear layers on this rank (each expert's its own).
pub(crate) fn layer_weight_tensors(d: &Dims, shape: LayerShape) -> u64 {
    linears_in_order(d, shape, router_of(d, shape))
        .iter()
        .fold(0u64, |acc, g| acc.saturating_add(u64::from(g.count)))
}

/// Weight elements of the output layer on this rank.
pub(crate) fn head_weight_elements(d: &Dims) -> u64 {
    mul(d.h, div_ceil(d.v, d.t))
}

/// Bytes per element that Transformer Engine's FP8 cast moves: it reads the bf16 tensor (2)
/// and writes its FP8 copy twice, row-major for this GEMM and transposed for the one of the
/// backward that needs it (1 + 1; Hopper's FP8 GEMMs take only the TN layout), in one fused
/// cast-transpose kernel (TransformerEngine `cast_transpose`, delayed scaling: the scale comes
/// from the amax history, so no pass over the tensor precedes the cast).
pub(crate) const FP8_CAST_BYTES_PER_ELEMENT: u64 = 4;

/// Bytes per element of the amax pass that current (tensorwise) scaling runs before each
/// cast: it reads the bf16 tensor once to reduce its absolute maximum, which the cast's scale
/// needs before any element is written (TransformerEngine `Float8CurrentScaling`, torchao's
/// tensorwise `Float8Linear`: `amax = tensor.abs().max()`, then the cast).
pub(crate) const FP8_AMAX_BYTES_PER_ELEMENT: u64 = 2;

/// Bytes per element that rowwise scaling adds to a cast: a scale per row cannot serve the
/// transposed copy the backward's other GEMM reads (its rows are the columns), so the first
/// kernel also writes a transposed bf16 copy (2) that a second kernel reads (2) to cast along
/// the other axis. With the first kernel's cast (read 2, write 1) and the second's write (1),
/// a rowwise cast moves 8 bytes per element in 2 kernels, and reduces each row's amax inside
/// the kernel that casts it (torchao's own roofline of its rowwise recipe:
/// pytorch/ao@36027d82d1ad9949597ea16002ff4940374b1b94:torchao/testing/training/roofline_utils.py
/// get_tensor_memory_traffic_ovhd_s, input and grad_output under "rowwise").
pub(crate) const FP8_ROWWISE_TRANSPOSE_BYTES_PER_ELEMENT: u64 = 4;

/// Linear layers under the scenario's precision: [`add_linears`], plus, under FP8 training,
/// the casts of each FP8 GEMM's inputs: the activation before the forward GEMM, and the
/// output gradient before the dgrad (whose transposed copy the wgrad reads). The weight's
/// cast is cached across the micro batches of a step (Transformer Engine's
/// `is_first_microbatch`, which Megatron-Core passes) and left out.
fn add_linears_in(block: &mut BlockParts, d: &Dims, linears: &[Gemm]) {
    add_linears(block, linears);
    if d.high_precision.is_none() {
        return;
    }
    let (per_element, kernels_per_cast) = fp8_cast_traffic(d.fp8_recipe, d.fp8_amax_fused);
    for g in linears.iter().filter(|g| g.dtype.is_none()) {
        let count = u64::from(g.count);
        let input = prod(&[per_element, g.m, g.k, count]);
        let grad = prod(&[per_element, g.m, g.n, count]);
        let kernels = g.count.saturating_mul(kernels_per_cast);
        block.forward.memory_bytes = block.forward.memory_bytes.saturating_add(input);
        block.forward.kernels = block.forward.kernels.saturating_add(kernels);
        block.backward_input.memory_bytes = block.backward_input.memory_bytes.saturating_add(grad);
        block.backward_input.kernels = block.backward_input.kernels.saturating_add(kernels);
    }
}

/// Bytes per element and kernels of one FP8 cast of a GEMM input under `recipe`. Current
/// (tensorwise) scaling adds an amax pass (and its kernel) before every cast, unless the
/// framework reduces the amax in the kernel that produced the tensor (`amax_fused`); rowwise
/// scaling casts along both axes in two kernels (see
/// [`FP8_ROWWISE_TRANSPOSE_BYTES_PER_ELEMENT`]), and where the framework fuses with the
/// producing kernel its first read is that kernel's (the same 2 bytes less); delayed scaling
/// takes its scale from the amax history and casts in one pass, and block scaling casts in one
/// pass too: each 1 x 128 or 128 x 128 block's amax is reduced inside the kernel that casts
/// it, which writes the row-major and the transposed copy together
/// (NVIDIA/TransformerEngine@3a27d07b0aafa547df1762fba906e83e770a5c73:transformer_engine/common/transpose/quantize_transpose_vector_blockwise.cu,
/// `quantize_transpose_square_blockwise.cu` beside it for weights), and so does MXFP8's, whose
/// one kernel writes the row-wise and the column-wise copy with their E8M0 scales per 32
/// elements (Transformer Engine's `cast_mxfp8_2D_kernel`, `output_rowwise` and
/// `output_colwise`).
pub(crate) fn fp8_cast_traffic(recipe: Fp8Recipe, amax_fused: bool) -> (u64, u32) {
    let fused_read = if amax_fused {
        FP8_AMAX_BYTES_PER_ELEMENT
    } else {
        0
    };
    match recipe {
        Fp8Recipe::Tensorwise if !amax_fused => {
            (FP8_CAST_BYTES_PER_ELEMENT + FP8_AMAX_BYTES_PER_ELEMENT, 2)
        }
        Fp8Recipe::Rowwise => (
            FP8_CAST_BYTES_PER_ELEMENT + FP8_ROWWISE_TRANSPOSE_BYTES_PER_ELEMENT - fused_read,
            2,
        ),
        _ => (FP8_CAST_BYTES_PER_ELEMENT, 1),
    }
}

/// Adds elementwise kernels that move `bytes` forward (twice that backward, in the input
/// half).
fn add_elementwise(block: &mut BlockParts, bytes: u64, kernels: u32) {
    block.forward.memory_bytes = block.forward.memory_bytes.saturating_add(bytes);
    block.forward.kernels = block.forward.kernels.saturating_add(kernels);
    block.backward_input.memory_bytes = block
        .backward_input
        .memory_bytes
        .saturating_add(mul(2, bytes));
    block.backward_input.kernels = block.backward_input.kernels.saturating_add(kernels);
}

/// The attention core: `S = Q K^T` and `O = P V` per head as batched GEMMs, with softmax and
/// dropout in between, or one fused flash-attention kernel forward and one backward whose
/// work follows the causal mask (FLOPs still reported as the GEMMs', Megatron's convention).
fn attention_core(d: &Dims) -> BlockParts {
    let batches = to_u32(d.head_batches());
    // One strided-batched call per layer computes every head's product.
    let scores = Gemm {
        count: batches,
        batch: batches,
        dtype: d.high_precision,
        ..gemm(d.s_local, d.head_dim, d.s)
    };
    let av = Gemm {
        count: batches,
        batch: batches,
        dtype: d.high_precision,
        ..gemm(d.s_local, d.s, d.head_dim)
    };
    let mut core = Parts::default();
    let mut bwd = Parts::default();
    if d.flash {
        let fwd_kernel = d.flash_attention();
        let fwd_flops = scores.flops().saturating_add(av.flops());
        core.add_attention(Some(fwd_kernel), fwd_flops);
        let bwd_kernel = Attention {
            backward: true,
            ..fwd_kernel
        };
        bwd.add_attention(Some(bwd_kernel), mul(2, fwd_flops));
        // One kernel reads Q, K, V and writes O and the fp32 softmax statistics.
        let qo = d
            .sharded(d.q_elements())
            .saturating_add(d.sharded(mul(d.tokens, d.attn_out)));
        let kv = mul(2, d.sharded(prod(&[d.b, d.s, d.kv_attention])));
        let stats = prod(&[4, d.head_batches(), d.s_local]);
        let bytes = mul(d.act_bytes, qo.saturating_add(kv)).saturating_add(stats);
        core.memory_bytes = bytes;
        core.kernels = 1;
        bwd.memory_bytes = mul(2, bytes);
        bwd.kernels = 1;
    } else {
        core.add_gemm(scores);
        core.add_gemm(av);
        // Both operands of both GEMMs are activations: all four gradients are input gradients.
        for g in [scores, av] {
            bwd.add_gemm(grad_a(g));
            bwd.add_gemm(grad_b(g));
        }
        // Fused scale-mask-softmax reads and writes S; dropout reads S, writes S and a
        // one-byte mask. Two batched GEMMs and two elementwise kernels.
        let scores_n = d.score_elements();
        let bytes = mul(scores_n, mul(4, d.act_bytes).saturating_add(1));
        core.memory_bytes = bytes;
        core.kernels = 4;
        bwd.memory_bytes = mul(2, bytes);
        bwd.kernels = 6;
    }
    // PyTorch's context parallelism merges the blocks' outputs and accumulates dK/dV in fp32
    // with eager kernels (`cp_merge`); a recompute of the attention runs the forward's again.
    let (fwd_bytes, fwd_kernels) = super::cp_merge::forward(d);
    core.memory_bytes = core.memory_bytes.saturating_add(fwd_bytes);
    core.kernels = core.kernels.saturating_add(fwd_kernels);
    let (bwd_bytes, bwd_kernels) = super::cp_merge::backward(d);
    bwd.memory_bytes = bwd.memory_bytes.saturating_add(bwd_bytes);
    bwd.kernels = bwd.kernels.saturating_add(bwd_kernels);
    BlockParts {
        forward: core.clone(),
        backward_input: bwd,
        backward_weight: Parts::default(),
        selective: core,
    }
}

/// The linear layers of one layer of `shape` in the order its forward calls them, one GEMM
/// per projection: Q, K, V (or multi-head latent attention's down- and up-projections) and the
/// output projection, or a Mamba mixer's `in_proj` and `out_proj`; the MoE router, then each
/// MLP's gate and up (gated) or up, and down: the routed experts on the routed token copies,
/// then the shared experts, in an MoE layer.
fn linears_in_order(d: &Dims, shape: LayerShape, router: Option<Gemm>) -> Vec<Gemm> {
    let t = d.tokens;
    let mut out: Vec<Gemm> = Vec::new();
    if shape.attention {
        out = match d.mla {
            None => {
                let (q, kv) = (d.sharded(d.q), d.sharded(d.kv));
                vec![gemm(t, d.h, q), gemm(t, d.h, kv), gemm(t, d.h, kv)]
            }
            Some(_) => d
                .attention_projections()
                .into_iter()
                .map(|(m, k, n)| gemm(m, k, n))
                .collect(),
        };
        out.push(gemm(t, d.sharded(d.attn_out), d.h));
    }
    if let (true, Some(mamba)) = (shape.mamba, d.mamba) {
        out.extend(mamba_projections(d, &mamba));
    }
    out.extend(router);
    for mlp in mlps_of(d, shape) {
        let f = mlp.f;
        if d.gated {
            out.push(mlp.gemm(d.h, f));
        }
        out.push(mlp.gemm(d.h, f));
        out.push(mlp.gemm(f, d.h));
    }
    out
}

/// The MLPs of a layer of `shape` ([`Dims::mlps`]; none in a block without one).
pub(crate) fn mlps_of(d: &Dims, shape: LayerShape) -> Vec<super::dims::Mlp> {
    match shape.mlp {
        Ffn::None => Vec::new(),
        Ffn::Dense => d.mlps(false),
        Ffn::Moe => d.mlps(true),
    }
}

/// The router's GEMM of a layer of `shape` (an MoE layer's).
pub(crate) fn router_of(d: &Dims, shape: LayerShape) -> Option<Gemm> {
    match (shape.mlp, d.moe) {
        (Ffn::Moe, Some(m)) => Some(router_gemm(d, m.experts)),
        _ => None,
    }
}

/// A Mamba mixer's projections: `in_proj` (hidden to `z`, `x`, `B`, `C`, `dt`, column
/// parallel) and `out_proj` (inner width to hidden, row parallel).
fn mamba_projections(d: &Dims, mamba: &crate::scenario::Mamba) -> [Gemm; 2] {
    let t = d.tokens;
    [
        gemm(t, d.h, d.sharded(mamba.in_proj_width())),
        gemm(t, d.sharded(mamba.inner()), d.h),
    ]
}

/// The linears of [`linears_in_order`] split as a per-op selective policy that saves every
/// second matmul splits them: `(saved, recomputed)`, the 1st, 3rd, ... saved and the 2nd,
/// 4th, ... recomputed (torchtitan counts `aten.mm` calls per block from one and recomputes
/// the even ones).
pub(crate) fn every_second_linear(
    d: &Dims,
    shape: LayerShape,
    router: Option<Gemm>,
) -> (Vec<Gemm>, Vec<Gemm>) {
    let (mut saved, mut recomputed) = (Vec::new(), Vec::new());
    for (i, g) in linears_in_order(d, shape, router).into_iter().enumerate() {
        if i % 2 == 0 {
            saved.push(g);
        } else {
            recomputed.push(g);
        }
    }
    (saved, recomputed)
}

/// The MoE router's GEMM (replicated over tp, kept in high precision under FP8).
pub(crate) fn router_gemm(d: &Dims, experts: u64) -> Gemm {
    Gemm {
        dtype: d.high_precision,
        ..gemm(d.tokens, d.h, experts)
    }
}

/// Forward kernels of a Mamba mixer between its projections: the causal convolution, the
/// scan's five (chunk cumsum, chunk state, state passing, the `C B^T` products, chunk scan)
/// and the gated norm (mamba_ssm's `mamba_split_conv1d_scan_combined`, which Megatron-Core's
/// `MambaMixer` trains with, and its `_mamba_chunk_scan_combined_fwd`).
const MAMBA_FORWARD_KERNELS: u32 = 7;

/// Backward kernels of the same: the convolution, cumsum, `C B^T` and chunk states run again
/// (the combined function saves neither), then the scan's eight backward kernels, the
/// convolution's and the norm's (`_mamba_chunk_scan_combined_bwd`).
const MAMBA_BACKWARD_KERNELS: u32 = 15;

/// A Mamba-2 mixer for one micro batch: `in_proj`, the depthwise causal convolution over `x`,
/// `B` and `C`, the state-space scan in chunks of `chunk` tokens (Dao and Gu 2024, arXiv
/// 2405.21060, section 6: within a chunk `Y = (L ∘ C Bᵀ) X`, each chunk's state `Bᵀ X`, passed
/// from chunk to chunk, and its contribution `C · state`), the gated RMSNorm and `out_proj`.
/// The scan's products are batched GEMMs on the GEMM curve, one call each per layer over every
/// chunk and head (or group) of the micro batch, in the high precision (they are no FP8
/// linear layers); the convolution, the state passing (fp32 states) and the norm are
/// memory-bound. The backward runs the gradients of both operands of each product and, first,
/// the convolution, `C Bᵀ` and the chunk states again.
fn mamba_mixer(d: &Dims, mamba: &crate::scenario::Mamba) -> BlockParts {
    let [in_proj, out_proj] = mamba_projections(d, mamba);
    let mut block = BlockParts::default();
    add_linears_in(&mut block, d, &[in_proj]);
    let q = mamba.chunk.min(d.s_local).max(1);
    let chunks = mul(d.b, div_ceil(d.s_local, q));
    let (heads, groups) = (d.sharded(mamba.heads), d.sharded(mamba.groups));
    let (n, p) = (mamba.state, mamba.head_dim);
    // One strided-batched call per layer: `count` products in all, `batch` a call.
    let batched = |m: u64, k: u64, cols: u64, over: u64| {
        let products = to_u32(mul(chunks, over));
        Gemm {
            dtype: d.high_precision,
            count: products,
            batch: products,
            ..gemm(m, k, cols)
        }
    };
    let cb = batched(q, n, q, groups);
    let states = batched(n, q, p, heads);
    let diagonal = batched(q, q, p, heads);
    let off_diagonal = batched(q, n, p, heads);
    let mut scan = Parts::default();
    let mut bwd = Parts::default();
    for g in [cb, states, diagonal, off_diagonal] {
        scan.add_gemm(g);
        bwd.add_gemm(grad_a(g));
        bwd.add_gemm(grad_b(g));
    }
    bwd.add_gemm(cb);
    bwd.add_gemm(states);
    let act = d.act_bytes;
    let (inner, bc) = (
        d.sharded(mamba.inner()),
        d.sharded(prod(&[2, mamba.groups, mamba.state])),
    );
    let t = d.tokens;
    // The convolution reads and writes x, B and C; the scan reads x, B and C twice each and
    // dt, and writes y; the fp32 chunk states are written, passed (read and written) and read;
    // the gated norm reads y and z and writes its output.
    let conv = prod(&[2, act, t, inner.saturating_add(bc)]);
    let scan_io = prod(&[
        act,
        t,
        mul(2, inner.saturating_add(bc)).saturating_add(inner),
    ]);
    let state_bytes = prod(&[4, 4, chunks, heads, p, n]);
    let norm = prod(&[3, act, t, inner]);
    let forward_bytes = conv
        .saturating_add(scan_io)
        .saturating_add(state_bytes)
        .saturating_add(norm);
    scan.memory_bytes = forward_bytes;
    scan.kernels = MAMBA_FORWARD_KERNELS;
    bwd.memory_bytes = mul(2, forward_bytes).saturating_add(conv);
    bwd.kernels = MAMBA_BACKWARD_KERNELS;
    block.add(&BlockParts {
        forward: scan,
        backward_input: bwd,
        backward_weight: Parts::default(),
        selective: Parts::default(),
    });
    add_linears_in(&mut block, d, &[out_proj]);
    block
}

/// Bytes the framework's elementwise passes over one MLP's inner width move (its
/// `ffn_passes`, given for SwiGLU, which reads 2f and writes f; a plain activation reads one
/// tensor fewer).
fn mlp_activation_bytes(d: &Dims, mlp: &super::dims::Mlp) -> u64 {
    let passes = if d.gated {
        d.elementwise.ffn_passes
    } else {
        d.elementwise.ffn_passes.saturating_sub(1)
    };
    prod(&[u64::from(passes), d.act_bytes, mlp.tokens, mlp.f])
}

/// An MoE layer's router and permutations, added to `block`: the router GEMM (replicated over
/// tp), softmax and top-k in fp32, and the permutations of the token copies, which each read
/// and write every copy, before and after the experts and, with the local-expert sorts
/// (`MoeDims::sorts_local_experts`), twice more. Returns the router GEMM and the bytes the
/// elementwise part moves (`(None, 0)` without experts).
fn add_router(block: &mut BlockParts, d: &Dims) -> (Option<Gemm>, u64) {
    let Some(m) = d.moe else {
        return (None, 0);
    };
    let router = router_gemm(d, m.experts);
    add_linears(block, &[router]);
    let permutations = router_permutations(d);
    let bytes = prod(&[2, 4, d.tokens, m.experts]).saturating_add(prod(&[
        u64::from(permutations),
        2,
        d.act_bytes,
        d.expert_tokens(),
        d.h,
    ]));
    add_elementwise(block, bytes, 1 + permutations);
    (Some(router), bytes)
}

/// The permutation kernels of an MoE layer's router (see [`add_router`]): before and after
/// the experts, and twice more with the local-expert sorts; 0 without experts.
fn router_permutations(d: &Dims) -> u32 {
    match d.moe {
        Some(m) if m.sorts_local_experts => 4,
        Some(_) => 2,
        None => 0,
    }
}

/// The host synchronisation of an MoE layer's dispatch under dropless routing
/// ([`HostSyncs`]; none under `capacity`), before the router's permutations and the
/// `after_router` other kernels the layer issues after its router.
fn dispatch_sync(d: &Dims, after_router: u32) -> HostSyncs {
    match d.moe {
        Some(m) if m.dropless => HostSyncs {
            count: 1,
            tail_kernels: after_router.saturating_add(router_permutations(d)),
        },
        _ => HostSyncs::NONE,
    }
}

/// What Megatron-Core's selective recompute runs again in a layer of `shape` beyond the
/// attention core, by `recompute_modules` (its forward parts; the attention core is
/// [`attention_core`]'s): the norms that are modules of their own (an MoE layer's pre-MLP norm,
/// latent attention's input norm: one read and one write each), latent attention's
/// up-projections, a dense layer's whole MLP, an MoE layer's whole block (router,
/// permutations, every expert and shared expert, their activation), else the routed experts'
/// activation and the shared experts. NVIDIA/Megatron-LM@d98e8a64dd
/// megatron/core/transformer/transformer_layer.py (`recompute_pre_mlp_layernorm`,
/// `recompute_mlp`), megatron/core/transformer/moe/moe_layer.py (`moe_layer_recompute`,
/// `shared_experts_recompute`), megatron/core/transformer/moe/experts.py (`activation_recompute`).
fn recomputed_modules(d: &Dims, shape: LayerShape) -> BlockParts {
    let m = d.modules;
    let mut again = BlockParts::default();
    if !(m.layernorm || m.mla_up_proj || m.mlp || m.moe || m.moe_act || m.shared_experts) {
        return again;
    }
    let t = d.tokens;
    let act = d.act_bytes;
    if m.layernorm {
        let norms =
            u64::from(shape.mlp == Ffn::Moe) + u64::from(shape.attention && d.mla.is_some());
        let x = d.replicated(d.hidden_elements());
        add_elementwise(&mut again, prod(&[2, act, x, norms]), to_u32(norms));
    }
    if let (true, true, Some(mla)) = (m.mla_up_proj, shape.attention, d.mla) {
        let mut up = vec![gemm(t, mla.kv_lora_rank, d.sharded(mla.kv_up))];
        if mla.q_lora_rank > 0 {
            up.insert(0, gemm(t, mla.q_lora_rank, d.sharded(mla.q_up)));
        }
        add_linears_in(&mut again, d, &up);
    }
    let activation = |again: &mut BlockParts, mlp: &super::dims::Mlp| {
        add_elementwise(again, mlp_activation_bytes(d, mlp), 1);
    };
    let whole = |again: &mut BlockParts, mlp: &super::dims::Mlp| {
        add_linears_in(
            again,
            d,
            &[mlp.gemm(d.h, mlp.up(d.gated)), mlp.gemm(mlp.f, d.h)],
        );
        activation(again, mlp);
    };
    let mlps = mlps_of(d, shape);
    match shape.mlp {
        Ffn::Dense if m.mlp => mlps.iter().for_each(|mlp| whole(&mut again, mlp)),
        Ffn::Moe if m.moe => {
            add_router(&mut again, d);
            let routed = again.forward.kernels;
            mlps.iter().for_each(|mlp| whole(&mut again, mlp));
            // The recomputed dispatch synchronises as the forward's did.
            again.forward.host_syncs =
                dispatch_sync(d, again.forward.kernels.saturating_sub(routed));
        }
        Ffn::Moe => {
            // The routed experts come first in `mlps`, the shared ones after them.
            for (i, mlp) in mlps.iter().enumerate() {
                match i {
                    0 if m.moe_act => activation(&mut again, mlp),
                    1.. if m.shared_experts => whole(&mut again, mlp),
                    _ => {}
                }
            }
        }
        _ => {}
    }
    again
}

/// One layer of `shape` for one micro batch: a transformer layer (attention, then a dense MLP
/// or routed experts) or a hybrid model's block.
pub(crate) fn layer(d: &Dims, shape: LayerShape) -> BlockParts {
    let t = d.tokens;
    let x = d.replicated(d.hidden_elements());
    let act = d.act_bytes;
    let mut block = BlockParts::default();
    if shape.attention {
        let projections: Vec<Gemm> = d
            .attention_projections()
            .into_iter()
            .map(|(m, k, n)| gemm(m, k, n))
            .collect();
        add_linears_in(&mut block, d, &projections);
        if let Some(mla) = d.mla {
            // The norms of the compressed query and key/value (one read, one write each).
            let latent = mla.q_lora_rank.saturating_add(mla.kv_lora_rank);
            let kernels = if mla.q_lora_rank > 0 { 2 } else { 1 };
            add_elementwise(&mut block, prod(&[2, act, t, latent]), kernels);
        }
        let mut core = attention_core(d);
        if !d.modules.core_attn {
            // Megatron-Core's selective recompute leaves the attention core alone when
            // `recompute_modules` omits it.
            core.selective = Parts::default();
        }
        block.add(&core);
        add_linears_in(&mut block, d, &[gemm(t, d.sharded(d.attn_out), d.h)]);
    }
    if let (true, Some(mamba)) = (shape.mamba, d.mamba) {
        block.add(&mamba_mixer(d, &mamba));
    }
    let (router, router_bytes) = match shape.mlp {
        Ffn::Moe => add_router(&mut block, d),
        _ => (None, 0),
    };
    // The dispatch's synchronisation follows the router: what the layer issues from the
    // permutations on is issued after it.
    let routed = block.forward.kernels;
    let mlps = mlps_of(d, shape);
    for mlp in &mlps {
        add_linears_in(
            &mut block,
            d,
            &[mlp.gemm(d.h, mlp.up(d.gated)), mlp.gemm(mlp.f, d.h)],
        );
    }
    let mut after_router = block.forward.kernels.saturating_sub(routed);
    // One cast per weight tensor of the PyTorch modules (Q, K and V each their own).
    let before_casts = block.forward.kernels;
    add_weight_casts(&mut block, d, &linears_in_order(d, shape, router));
    if block.forward.kernels > before_casts {
        let mlp_casts: u32 = mlps
            .iter()
            .map(|m| m.gemm(d.h, m.up(d.gated)).count.saturating_mul(2))
            .sum();
        after_router = after_router.saturating_add(mlp_casts);
    }
    // The framework's elementwise kernels (docs/reference/frameworks.md, `[fusions]`): its
    // passes over `tokens x hidden` (norms, residual adds, rotary, copies; Megatron-Core's 10
    // are two norms of one read and one write and two fused bias-dropout-adds of two reads and
    // one write), the one-byte dropout mask of each residual add, and its passes over the
    // MLP's inner width (given for SwiGLU, which reads 2f and writes f; GeLU reads one tensor
    // fewer). A hybrid model's block has one norm and one residual add, half a transformer
    // layer's (`LayerShape::share`).
    let e = d.elementwise;
    let hidden_bytes = mul(
        x,
        mul(shape.share(u64::from(e.hidden_passes)), act).saturating_add(shape.sublayers()),
    );
    let ffn_bytes = mlps.iter().fold(0u64, |acc, mlp| {
        acc.saturating_add(mlp_activation_bytes(d, mlp))
    });
    let elementwise_bytes = hidden_bytes.saturating_add(ffn_bytes);
    let kernels = to_u32(shape.share(u64::from(e.kernels)));
    add_elementwise(&mut block, elementwise_bytes, kernels);
    // The framework's kernels twin does not size one by one, with what they move.
    block.forward.kernels = block
        .forward
        .kernels
        .saturating_add(to_u32(shape.share(u64::from(e.extra_forward_kernels))));
    block.forward.memory_bytes = block.forward.memory_bytes.saturating_add(mul(
        x,
        mul(shape.share(u64::from(e.extra_forward_hidden_passes)), act),
    ));
    block.backward_input.kernels = block
        .backward_input
        .kernels
        .saturating_add(to_u32(shape.share(u64::from(e.extra_backward_kernels))));
    block.backward_input.memory_bytes = block.backward_input.memory_bytes.saturating_add(mul(
        x,
        mul(shape.share(u64::from(e.extra_backward_hidden_passes)), act),
    ));
    if shape.mlp == Ffn::Moe {
        // With the MLP sublayer's half of the framework's elementwise kernels (its activation
        // and residual add; the norm before the router is issued before the synchronisation).
        let framework = e.kernels.saturating_add(e.extra_forward_kernels) / 2;
        block.forward.host_syncs = dispatch_sync(d, after_router.saturating_add(framework));
    }
    if d.selective == SelectiveRecompute::AttentionCore {
        let again = recomputed_modules(d, shape);
        block.selective.add(&again.forward);
    }
    if d.selective == SelectiveRecompute::EverySecondMatmul {
        // The recompute runs the unsaved matmuls (with their FP8 input casts) and every
        // elementwise op of the forward again; the attention kernel's output is saved.
        let mut again = BlockParts::default();
        add_linears_in(&mut again, d, &every_second_linear(d, shape, router).1);
        add_elementwise(
            &mut again,
            elementwise_bytes.saturating_add(router_bytes),
            kernels.saturating_add(if router.is_some() { 3 } else { 0 }),
        );
        block.selective = again.forward;
    }
    block
}

/// The input embedding: a memory-bound lookup plus dropout. Its only gradient is the weight
/// gradient (a scatter-add into the main gradient, `grad_bytes` per element).
pub(crate) fn embedding(d: &Dims, grad_bytes: u64) -> BlockParts {
    let full = d.hidden_elements();
    let x = d.replicated(full);
    let act = d.act_bytes;
    let lookup = mul(2 * act, full);
    let dropout = mul(x, mul(2, act).saturating_add(1));
    let scatter = mul(full, act.saturating_add(mul(2, grad_bytes)));
    BlockParts {
        forward: Parts {
            gemms: Vec::new(),
            memory_bytes: lookup.saturating_add(dropout),
            kernels: 2,
            ..Parts::default()
        },
        backward_input: Parts::default(),
        backward_weight: Parts {
            gemms: Vec::new(),
            memory_bytes: dropout.saturating_add(scatter),
            kernels: 2,
            ..Parts::default()
        },
        selective: Parts::default(),
    }
}

/// A multi-token prediction module's own work besides its layer and head: the norms of the
/// embedded shifted tokens and of the hidden state (one read and one write each) and the
/// projection of their concatenation (`T x 2h x h`, column parallel).
pub(crate) fn mtp_projection(d: &Dims) -> BlockParts {
    let x = d.replicated(d.hidden_elements());
    let mut block = BlockParts::default();
    add_elementwise(&mut block, prod(&[2, 2, d.act_bytes, x]), 2);
    let projection = gemm(d.tokens, mul(2, d.h), d.sharded(d.h));
    add_linears_in(&mut block, d, &[projection]);
    add_weight_casts(&mut block, d, &[projection]);
    block
}

/// The output head: final layer norm, the logits GEMM (vocab split over tp) and the
/// vocab-parallel cross-entropy in fp32.
pub(crate) fn head(d: &Dims) -> BlockParts {
    let x = d.replicated(d.hidden_elements());
    let act = d.act_bytes;
    let mut block = BlockParts::default();
    add_elementwise(&mut block, mul(2 * act, x), 1);
    let logits_gemm = Gemm {
        dtype: d.high_precision,
        ..gemm(d.tokens, d.h, div_ceil(d.v, d.t))
    };
    add_linears(&mut block, &[logits_gemm]);
    add_weight_casts(&mut block, d, &[logits_gemm]);
    let logits = mul(d.tokens, div_ceil(d.v, d.t));
    // Forward: cast to fp32 and ~4 passes (max, subtract, exp-sum, gather target).
    block.forward.memory_bytes = block
        .forward
        .memory_bytes
        .saturating_add(mul(logits, act.saturating_add(16)));
    block.forward.kernels += 4;
    // Backward: read the fp32 softmax, write the gradient of the logits.
    block.backward_input.memory_bytes = block
        .backward_input
        .memory_bytes
        .saturating_add(mul(logits, act.saturating_add(4)));
    block.backward_input.kernels += 1;
    block
}
