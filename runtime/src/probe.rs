//! A hand-built single-GPU probe schedule: a few Llama-3-8B layers, micro batch 1, sequence
//! 2048, gradient accumulation over a few micro batches, with the Alloc/Free of weights,
//! gradients, optimizer state and activations. It exists so the CUDA backend can be checked
//! end to end before the schedule generators land; its GEMM shapes are Llama's, its
//! memory-bound bytes a stated estimate.

use twin_sim::plan::{GroupKind, Plan, PlanError};
use twin_sim::scenario::{Gpu, PeakFlops, Precision, Scenario};
use twin_sim::schedule::{
    CollectiveKind, ComputeOp, Device, Gemm, Label, MemCategory, Op, OpKind, Phase, Program,
    Schedule, Stream,
};

/// H100 SXM 80GB datasheet figures (dense).
pub fn h100() -> Gpu {
    Gpu {
        name: "h100-sxm-80gb".into(),
        peak: PeakFlops {
            fp32_flops_per_s: 66.9e12,
            tf32_flops_per_s: 494.7e12,
            fp16_flops_per_s: 989.4e12,
            bf16_flops_per_s: 989.4e12,
            fp8_flops_per_s: 1978.9e12,
        },
        hbm_bytes: 80 * 1_000_000_000,
        driver_reserved_bytes: 0,
        hbm_bandwidth_bytes_per_s: 3.35e12,
    }
}

/// Llama-3-8B shape with `layers` layers on one H100, `microbatches` micro batches of 1.
pub fn llama_scenario(layers: u32, microbatches: u64) -> Scenario {
    let mut s = twin_sim::testing::small_scenario(1, 1, 1, microbatches);
    s.name = format!("llama3-8b-{layers}layers-probe");
    s.model.name = "llama-3-8b".into();
    s.model.layers = layers;
    s.model.hidden = 4096;
    s.model.heads = 32;
    s.model.kv_heads = 8;
    s.model.ffn_hidden = 14336;
    s.model.seq_len = 2048;
    s.model.vocab = 128_256;
    s.model.gated_mlp = true;
    s.cluster.gpu = h100();
    s.training.precision = Precision::Bf16;
    s
}

/// y = x W with x [t, k] and W [k, n]: forward, input-gradient and weight-gradient GEMMs.
fn linear(t: u64, k: u64, n: u64) -> [Gemm; 3] {
    let g = |m, n, k| Gemm::single(m, n, k, 1);
    [g(t, n, k), g(t, k, n), g(k, n, t)]
}

/// Parameters of one Llama layer (attention, gated MLP, two norms).
pub fn layer_params(s: &Scenario) -> u64 {
    let m = &s.model;
    let head_dim = m.hidden / u64::from(m.heads);
    let qkv = m.hidden * (u64::from(m.heads) + 2 * u64::from(m.kv_heads)) * head_dim;
    qkv + m.hidden * m.hidden + 3 * m.hidden * m.ffn_hidden + 2 * m.hidden
}

/// Forward and backward GEMMs of one layer for one micro batch.
fn layer_gemms(s: &Scenario) -> (Vec<Gemm>, Vec<Gemm>) {
    let m = &s.model;
    let t = m.seq_len * s.training.micro_batch;
    let heads = m.heads;
    let head_dim = m.hidden / u64::from(heads);
    let kv = (u64::from(m.heads) + 2 * u64::from(m.kv_heads)) * head_dim;
    let mut fwd = Vec::new();
    let mut bwd = Vec::new();
    for [f, di, dw] in [
        linear(t, m.hidden, kv),
        linear(t, m.hidden, m.hidden),
        linear(t, m.hidden, 2 * m.ffn_hidden),
        linear(t, m.ffn_hidden, m.hidden),
    ] {
        fwd.push(f);
        bwd.extend([di, dw]);
    }
    // Attention core per head: scores = Q K^T, out = P V; backward twice each.
    let scores = Gemm {
        dtype: None,
        m: t,
        n: t,
        k: head_dim,
        count: heads,
        batch: heads,
    };
    let pv = Gemm {
        dtype: None,
        m: t,
        n: head_dim,
        k: t,
        count: heads,
        batch: heads,
    };
    fwd.extend([scores, pv]);
    bwd.extend([scores, scores, pv, pv]);
    (fwd, bwd)
}

struct Builder {
    ops: Vec<Op>,
    next_tag: u32,
}

impl Builder {
    fn push(&mut self, stream: Stream, kind: OpKind, deps: Vec<u32>, label: Label) -> u32 {
        self.ops.push(Op {
            stream,
            kind,
            deps: deps.into(),
            label,
        });
        (self.ops.len() - 1) as u32
    }
    fn alloc(&mut self, category: MemCategory, bytes: u64, label: Label) -> (u32, u32) {
        let tag = self.next_tag;
        self.next_tag += 1;
        let i = self.push(
            Stream::Compute,
            OpKind::Alloc {
                category,
                device: Device::Gpu,
                bytes,
                tag,
            },
            vec![],
            label,
        );
        (i, tag)
    }
}

/// The probe: weights (bf16), gradients (fp32 main grads), Adam state (fp32 master, m, v)
/// allocated up front; per micro batch a forward op per layer that allocates its saved
/// activations, backward ops in reverse that free them; with `grad_allreduce`, each layer's
/// gradients are all-reduced over the (single-member) DP group on the DP stream after the
/// last micro batch's backward of that layer, overlapping the remaining backward; then the
/// optimizer step; then everything is freed.
pub fn llama_probe(
    layers: u32,
    microbatches: u32,
    grad_allreduce: bool,
) -> Result<(Scenario, Plan, Schedule), PlanError> {
    let s = llama_scenario(layers, u64::from(microbatches));
    let plan = Plan::new(&s)?;
    let m = &s.model;
    let t = m.seq_len * s.training.micro_batch;
    let p = layer_params(&s) * u64::from(layers);
    let (fwd_gemms, bwd_gemms) = layer_gemms(&s);
    // Korthikanti et al. with flash attention: 34 * s * b * h bytes saved per layer.
    let act_bytes = 34 * t * m.hidden;
    // Memory-bound traffic estimate per layer and pass: ~24 reads/writes of a [t, h] bf16
    // tensor (norms, rope, residuals, SwiGLU on [t, ffn] counted as 3.5 [t, h]).
    let mem_fwd = 24 * t * m.hidden * 2;
    let mut b = Builder {
        ops: Vec::new(),
        next_tag: 0,
    };
    let none = Label::default();
    let (w, w_tag) = b.alloc(MemCategory::Weights, 2 * p, none);
    let (g, g_tag) = b.alloc(MemCategory::Grads, 4 * p, none);
    let (o, o_tag) = b.alloc(MemCategory::Optimizer, 12 * p, none);
    let mut last = vec![w, g, o];
    let mut reduces = Vec::new();
    let compute = |phase, gemms: &Vec<Gemm>, mem| {
        OpKind::Compute(ComputeOp {
            attention: None,
            phase,
            dtype: Precision::Bf16,
            flops: gemms.iter().map(Gemm::flops).sum(),
            gemms: gemms.clone().into(),
            memory_bytes: mem,
            kernels: gemms.len() as u32 + 8,
            sms_reserved: 0,
            host_syncs: Default::default(),
        })
    };
    for mb in 0..microbatches {
        let mut acts = Vec::new();
        for layer in 0..layers {
            let label = Label {
                microbatch: Some(mb),
                chunk: 0,
                first_layer: layer,
                num_layers: 1,
            };
            let (a, tag) = b.alloc(MemCategory::Activations, act_bytes, label);
            let f = b.push(
                Stream::Compute,
                compute(Phase::Forward, &fwd_gemms, mem_fwd),
                last.clone(),
                label,
            );
            last = vec![a, f];
            acts.push(tag);
        }
        for layer in (0..layers).rev() {
            let label = Label {
                microbatch: Some(mb),
                chunk: 0,
                first_layer: layer,
                num_layers: 1,
            };
            let bw = b.push(
                Stream::Compute,
                compute(Phase::Backward, &bwd_gemms, 2 * mem_fwd),
                last.clone(),
                label,
            );
            let tag = acts.pop().unwrap_or_default();
            let fr = b.push(Stream::Compute, OpKind::Free { tag }, vec![bw], label);
            last = vec![fr];
            if grad_allreduce && mb + 1 == microbatches {
                let r = b.push(
                    Stream::Dp,
                    OpKind::Collective {
                        kind: CollectiveKind::AllReduce,
                        group: GroupKind::Dp,
                        bytes: 4 * layer_params(&s),
                        calls: 1,
                    },
                    vec![bw],
                    label,
                );
                reduces.push(r);
            }
        }
    }
    let mut deps = last;
    deps.extend(reduces);
    // Adam: read grads (4), read+write master, m, v (24), write bf16 weights (2) per param.
    let opt = b.push(
        Stream::Compute,
        compute(Phase::Optimizer, &Vec::new(), 30 * p),
        deps,
        none,
    );
    for tag in [w_tag, g_tag, o_tag] {
        b.push(Stream::Compute, OpKind::Free { tag }, vec![opt], none);
    }
    let schedule = Schedule {
        programs: vec![Program {
            stage: 0,
            ops: b.ops,
        }],
        program_of: vec![0],
    };
    Ok((s, plan, schedule))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_layer_has_the_published_parameter_count() {
        // Llama-3-8B: 32 layers of ~218M parameters (plus 1.05B of embedding and head).
        let s = llama_scenario(32, 1);
        assert_eq!(layer_params(&s), 218_112_000);
    }

    #[test]
    fn probe_frees_everything_it_allocates_and_deps_point_back() {
        let (_, plan, sched) = llama_probe(2, 2, true).unwrap();
        assert_eq!(plan.world, 1);
        let ops = &sched.programs[0].ops;
        let allocs = ops
            .iter()
            .filter(|o| matches!(o.kind, OpKind::Alloc { .. }))
            .count();
        let frees = ops
            .iter()
            .filter(|o| matches!(o.kind, OpKind::Free { .. }))
            .count();
        assert_eq!(allocs, 3 + 2 * 2);
        assert_eq!(allocs, frees);
        for (i, op) in ops.iter().enumerate() {
            assert!(op.deps.iter().all(|&d| (d as usize) < i));
        }
        let reduces = ops.iter().filter(|o| o.stream == Stream::Dp).count();
        assert_eq!(reduces, 2);
    }
}
