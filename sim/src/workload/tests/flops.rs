//! FLOPs and GEMM shapes against Megatron-LM's closed forms (Narayanan et al. 2021,
//! Korthikanti et al. 2022 appendix A; data/validation/throughput.toml).

use super::*;
use crate::ir::{Attention, Gemm, Phase};
use crate::workload::{chunk_work, layers_work, ChunkWork};

/// Sum over every rank of the step's FLOPs of each phase: per-rank work times the ranks that
/// share it (tp*cp of them split one micro batch) times the micro batches each pipeline runs
/// times the data-parallel pipelines.
fn step_flops(s: &Scenario, pick: impl Fn(&ChunkWork) -> u64) -> u64 {
    let plan = plan(s);
    let per_rank: u64 = all_chunks(&plan)
        .iter()
        .map(|c| pick(&chunk_work(s, &plan, c)))
        .sum();
    let p = &s.parallel;
    per_rank * u64::from(p.tp * p.cp) * u64::from(plan.microbatches) * u64::from(p.dp * p.ep)
}

fn model_flops(s: &Scenario) -> u64 {
    step_flops(s, |w| w.forward.compute.flops + w.backward.compute.flops)
}

fn hardware_flops(s: &Scenario) -> u64 {
    step_flops(s, |w| {
        w.forward.compute.flops
            + w.backward.compute.flops
            + w.recompute.as_ref().map_or(0, |r| r.compute.flops)
    })
}

/// 72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)), expanded to integers.
fn megatron_model_flops(batch: u64, l: u64, h: u64, s: u64, v: u64) -> u64 {
    72 * batch * s * l * h * h + 12 * batch * l * s * s * h + 6 * batch * s * h * v
}

/// 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)), expanded to integers.
fn megatron_full_recompute_flops(batch: u64, l: u64, h: u64, s: u64, v: u64) -> u64 {
    96 * batch * s * l * h * h + 16 * batch * l * s * s * h + 6 * batch * s * h * v
}

#[test]
fn one_layer_forward_is_24bsh2_plus_4bs2h_and_head_is_2bshv() {
    let (b, s, h, v) = (2u64, 512u64, 1024u64, 32000u64);
    let sc = gpt(4, h, 16, s, v, (1, 1, 1), b, 1);
    let plan = plan(&sc);
    let layout = &plan.chunks[0][0];
    let one = layers_work(&sc, &plan, layout, 0, 1, false, false);
    assert_eq!(
        one.forward.compute.flops,
        24 * b * s * h * h + 4 * b * s * s * h
    );
    let head = layers_work(&sc, &plan, layout, 0, 0, false, true);
    assert_eq!(head.forward.compute.flops, 2 * b * s * h * v);
    // The embedding lookup is memory-bound: no FLOPs, some bytes.
    let emb = layers_work(&sc, &plan, layout, 0, 0, true, false);
    assert_eq!(emb.forward.compute.flops, 0);
    assert!(emb.forward.compute.memory_bytes > 0);
}

#[test]
fn model_flops_per_step_match_megatron_for_published_runs() {
    // (layers, hidden, heads, tp, pp, dp, global batch) of throughput.toml's SC'21 Table 1
    // rows, with dp reduced where only the per-GPU work matters (FLOPs scale with the batch).
    let rows = [
        (24u32, 2304u64, 24u32, 1u32, 1u32, 4u32, 512u64),
        (36, 4096, 32, 4, 1, 2, 512),
        (48, 8192, 64, 8, 2, 1, 1536),
        (80, 12288, 96, 8, 8, 1, 2304),
    ];
    let (s, v) = (2048u64, 51200u64);
    for (l, h, a, tp, pp, dp, batch) in rows {
        let mut sc = gpt(l, h, a, s, v, (tp, pp, dp), 1, batch / u64::from(dp));
        sc.training.recompute = Recompute::Full;
        let want_model = megatron_model_flops(batch, u64::from(l), h, s, v);
        assert_eq!(model_flops(&sc), want_model, "model FLOPs, l={l} h={h}");
        let want_hw = megatron_full_recompute_flops(batch, u64::from(l), h, s, v);
        assert_eq!(hardware_flops(&sc), want_hw, "hardware FLOPs, l={l} h={h}");
    }
}

#[test]
fn flops_do_not_depend_on_the_layout() {
    let base = gpt(16, 1024, 16, 1024, 32000, (1, 1, 1), 1, 8);
    let want = model_flops(&base);
    assert_eq!(want, megatron_model_flops(8, 16, 1024, 1024, 32000));
    for (tp, pp, dp, cp, vpp) in [
        (2, 2, 2, 1, 1),
        (4, 1, 1, 2, 1),
        (1, 4, 1, 1, 2),
        (2, 2, 1, 2, 2),
    ] {
        let mut sc = gpt(
            16,
            1024,
            16,
            1024,
            32000,
            (tp, pp, dp),
            1,
            8 / u64::from(dp),
        );
        sc.parallel.cp = cp;
        sc.parallel.vpp = vpp;
        sc.parallel.sequence_parallel = tp > 1;
        sc.cluster.gpus = tp * pp * dp * cp;
        assert_eq!(
            model_flops(&sc),
            want,
            "tp{tp} pp{pp} dp{dp} cp{cp} vpp{vpp}"
        );
    }
}

#[test]
fn selective_recompute_repeats_the_attention_core() {
    let (b, s, h, l) = (1u64, 2048u64, 4096u64, 4u64);
    let t = 4u64;
    let mut sc = gpt(l as u32, h, 32, s, 51200, (t as u32, 1, 1), b, 1);
    sc.training.recompute = Recompute::Selective;
    let plan = plan(&sc);
    let w = chunk_work(&sc, &plan, &plan.chunks[0][0]);
    let r = w.recompute.expect("selective recompute has a pass");
    assert_eq!(r.compute.phase, Phase::Recompute);
    assert_eq!(r.compute.flops, l * 4 * b * s * s * h / t);
    assert!(
        r.comms.is_empty(),
        "the attention core needs no TP collective"
    );
    // Hardware FLOPs then carry 72*B*L*s*h^2 * 2s/(9h) = 16*B*L*s^2*h over the model FLOPs'
    // 12*B*L*s^2*h (see docs/memory.md on Korthikanti's s/(3h)).
    let extra = hardware_flops(&sc) - model_flops(&sc);
    assert_eq!(extra, 4 * b * l * s * s * h);
}

#[test]
fn no_recompute_pass_without_recompute_or_layers() {
    let mut sc = gpt(4, 1024, 16, 1024, 32000, (1, 1, 1), 1, 1);
    let plan = plan(&sc);
    let layout = &plan.chunks[0][0];
    assert!(chunk_work(&sc, &plan, layout).recompute.is_none());
    sc.training.recompute = Recompute::Full;
    assert!(layers_work(&sc, &plan, layout, 0, 0, true, true)
        .recompute
        .is_none());
    let full = chunk_work(&sc, &plan, layout).recompute.expect("full");
    // Full recompute is the layers' forward, without embedding or head.
    let layers_only = layers_work(&sc, &plan, layout, 0, 4, false, false);
    assert_eq!(full.compute.flops, layers_only.forward.compute.flops);
    assert_eq!(full.compute.gemms, layers_only.forward.compute.gemms);
}

#[test]
fn backward_is_twice_forward_and_splits_into_input_and_weight_halves() {
    for gated in [false, true] {
        for flash in [false, true] {
            let mut sc = gpt(8, 2048, 16, 1024, 50000, (2, 2, 1), 2, 4);
            sc.model.gated_mlp = gated;
            sc.model.kv_heads = 4;
            sc.training.flash_attention = flash;
            let plan = plan(&sc);
            for c in all_chunks(&plan) {
                let w = chunk_work(&sc, &plan, &c);
                let (f, b) = (&w.forward.compute, &w.backward.compute);
                let (bi, bw) = (&w.backward_input.compute, &w.backward_weight);
                assert_eq!(b.flops, 2 * f.flops);
                assert_eq!(b.flops, bi.flops + bw.flops);
                assert_eq!(b.memory_bytes, bi.memory_bytes + bw.memory_bytes);
                assert_eq!(b.kernels, bi.kernels + bw.kernels);
                assert_eq!(
                    (b.phase, bi.phase, bw.phase),
                    (Phase::Backward, Phase::BackwardInput, Phase::BackwardWeight)
                );
                let gemm_flops = |g: &[Gemm]| g.iter().map(Gemm::flops).sum::<u64>();
                // The weight half is exactly the linear layers' wgrads: the forward minus
                // the attention core (4*b*s^2*h/t per layer).
                let core = u64::from(c.num_layers) * 4 * 2 * 1024 * 1024 * 2048 / 2;
                assert_eq!(bw.flops + core, f.flops);
                if flash {
                    // The core is one fused kernel per layer, outside the GEMMs, still
                    // reported with Megatron's full-square FLOPs.
                    assert_eq!(gemm_flops(&f.gemms) + core, f.flops);
                    assert_eq!(gemm_flops(&b.gemms) + 2 * core, b.flops);
                    let kernel = Attention {
                        batch: 2,
                        heads: 8,
                        head_dim: 128,
                        q_len: 1024,
                        kv_len: 1024,
                        causal: true,
                        backward: false,
                        count: c.num_layers,
                        window: 0,
                        windowed: 0,
                        sinks: false,
                    };
                    let fwd = (c.num_layers > 0).then_some(kernel);
                    assert_eq!(f.attention, fwd);
                    let bwd = fwd.map(|k| Attention {
                        backward: true,
                        ..k
                    });
                    assert_eq!((b.attention, bi.attention, bw.attention), (bwd, bwd, None));
                } else {
                    assert_eq!(gemm_flops(&b.gemms), b.flops);
                    assert_eq!(gemm_flops(&f.gemms), f.flops);
                    assert_eq!(f.attention, None);
                }
                assert_eq!(w.backward.comms, w.backward_input.comms);
            }
        }
    }
}

#[test]
fn gemm_shapes_are_the_planned_per_rank_shapes() {
    // Llama-3-8B-like: h 4096, 32 heads, 8 kv heads, f 14336 gated, V 128256; tp 4, cp 2.
    let (b, s, h, f, v) = (2u64, 8192u64, 4096u64, 14336u64, 128256u64);
    let (t, c) = (4u64, 2u64);
    let mut sc = gpt(4, h, 32, s, v, (t as u32, 1, 1), b, 1);
    sc.model = Model {
        seq_len: s,
        ..llama(4, h, 32, 8, f, v)
    };
    sc.parallel.cp = c as u32;
    sc.cluster.gpus = (t * c) as u32;
    let plan = plan(&sc);
    let layout = &plan.chunks[0][0];
    let w = layers_work(&sc, &plan, layout, 0, 1, false, true);
    let tokens = b * s / c;
    let want = [
        Gemm {
            dtype: None,
            m: tokens,
            k: h,
            n: (h + 2 * h * 8 / 32) / t,
            count: 1,
            batch: 1,
        },
        Gemm {
            dtype: None,
            m: s / c,
            k: h / 32,
            n: s,
            count: (b * 32 / t) as u32,
            batch: (b * 32 / t) as u32,
        },
        Gemm {
            dtype: None,
            m: s / c,
            k: s,
            n: h / 32,
            count: (b * 32 / t) as u32,
            batch: (b * 32 / t) as u32,
        },
        Gemm {
            dtype: None,
            m: tokens,
            k: h / t,
            n: h,
            count: 1,
            batch: 1,
        },
        Gemm {
            dtype: None,
            m: tokens,
            k: h,
            n: 2 * f / t,
            count: 1,
            batch: 1,
        },
        Gemm {
            dtype: None,
            m: tokens,
            k: f / t,
            n: h,
            count: 1,
            batch: 1,
        },
        Gemm {
            dtype: None,
            m: tokens,
            k: h,
            n: v / t,
            count: 1,
            batch: 1,
        },
    ];
    assert_eq!(w.forward.compute.gemms, want);
    // Backward of the QKV projection: dgrad [tokens, n] x [n, h]; wgrad [h, tokens] x [tokens, n].
    let qkv_n = (h + 2 * h * 8 / 32) / t;
    assert!(w.backward_input.compute.gemms.contains(&Gemm {
        dtype: None,
        m: tokens,
        k: qkv_n,
        n: h,
        count: 1,
        batch: 1,
    }));
    assert!(w.backward_weight.gemms.contains(&Gemm {
        dtype: None,
        m: h,
        k: tokens,
        n: qkv_n,
        count: 1,
        batch: 1,
    }));
}

#[test]
fn layers_of_a_chunk_fold_into_gemm_counts() {
    let sc = gpt(8, 1024, 16, 1024, 32000, (1, 1, 1), 1, 1);
    let plan = plan(&sc);
    let layout = &plan.chunks[0][0];
    let one = layers_work(&sc, &plan, layout, 0, 1, false, false);
    let eight = layers_work(&sc, &plan, layout, 0, 8, false, false);
    assert_eq!(
        eight.forward.compute.gemms.len(),
        one.forward.compute.gemms.len()
    );
    for (g8, g1) in eight
        .forward
        .compute
        .gemms
        .iter()
        .zip(&one.forward.compute.gemms)
    {
        assert_eq!(g8.count, 8 * g1.count);
    }
    assert_eq!(
        eight.forward.compute.memory_bytes,
        8 * one.forward.compute.memory_bytes
    );
    assert_eq!(
        eight.forward.compute.kernels,
        8 * one.forward.compute.kernels
    );
}

#[test]
fn flash_attention_fuses_the_core_into_fewer_kernels_and_bytes() {
    let mut sc = gpt(1, 4096, 32, 4096, 32000, (1, 1, 1), 1, 1);
    let plan = plan(&sc);
    let layout = &plan.chunks[0][0];
    let eager = layers_work(&sc, &plan, layout, 0, 1, false, false);
    sc.training.flash_attention = true;
    let flash = layers_work(&sc, &plan, layout, 0, 1, false, false);
    assert_eq!(eager.forward.compute.flops, flash.forward.compute.flops);
    assert_eq!(
        eager.forward.compute.kernels,
        flash.forward.compute.kernels + 3
    );
    assert!(flash.forward.compute.memory_bytes < eager.forward.compute.memory_bytes);
}

#[test]
fn moe_layers_route_top_k_copies_through_local_experts() {
    let (b, s, h, f) = (1u64, 1024u64, 1024u64, 4096u64);
    let mut sc = gpt(4, h, 16, s, 32000, (1, 1, 2), b, 2);
    let ffn_hidden = sc.model.ffn_hidden;
    sc.model.moe = Some(Moe::uniform(8, 2, 2, ffn_hidden));
    sc.parallel.ep = 2;
    let plan = plan(&sc);
    let layout = &plan.chunks[0][0];
    let dense = layers_work(&sc, &plan, layout, 1, 1, false, false);
    let moe = layers_work(&sc, &plan, layout, 0, 1, false, false);
    assert_eq!(
        dense.forward.compute.flops,
        24 * b * s * h * h + 4 * b * s * s * h
    );
    // MLP flops double with top-2 routing; the router adds 2*b*s*h*experts.
    let mlp = 4 * b * s * h * f;
    assert_eq!(
        moe.forward.compute.flops,
        dense.forward.compute.flops + mlp + 2 * b * s * h * 8
    );
    // Layers 0 and 2 of 0..4 are MoE (moe_every = 2, Megatron's pattern).
    let all = layers_work(&sc, &plan, layout, 0, 4, false, false);
    assert_eq!(
        all.forward.compute.flops,
        2 * dense.forward.compute.flops + 2 * moe.forward.compute.flops
    );
}

/// A model whose heads are not `hidden / heads` wide (as GPT-OSS: 64 heads of 64 over a
/// hidden size of 2880): Q is `a * head_dim`, K and V `g * head_dim`, the output projection
/// maps `a * head_dim` back to `h`, and the score GEMMs contract over `head_dim`.
#[test]
fn explicit_head_dim_sets_the_attention_gemms() {
    let (b, s, h, a, g, hd, f, v) = (2u64, 64u64, 96u64, 4u64, 2u64, 32u64, 160u64, 1000u64);
    let (l, t) = (2u64, 2u64);
    let mut sc = gpt(l as u32, h, a as u32, s, v, (t as u32, 1, 1), b, 1);
    sc.model = Model {
        seq_len: s,
        head_dim: Some(hd),
        ..llama(l as u32, h, a as u32, g as u32, f, v)
    };
    let (q, kv, tokens) = (a * hd, g * hd, b * s);
    // Forward of one layer: QKV 2*T*h*(q + 2kv), scores and context 2 * 2*b*a*s*s*hd,
    // output projection 2*T*q*h, gated MLP 3 * 2*T*h*f; the head 2*T*h*v. Backward = 2x.
    let layer = 2 * tokens * h * (q + 2 * kv)
        + 4 * b * a * s * s * hd
        + 2 * tokens * q * h
        + 6 * tokens * h * f;
    assert_eq!(model_flops(&sc), 3 * (l * layer + 2 * tokens * h * v));

    // The per-rank shapes at tp 2.
    let plan = plan(&sc);
    let one = layers_work(&sc, &plan, &plan.chunks[0][0], 0, 1, false, false);
    let shapes: Vec<(u64, u64, u64, u32)> = one
        .forward
        .compute
        .gemms
        .iter()
        .map(|g| (g.m, g.n, g.k, g.batch))
        .collect();
    let heads_here = (b * a / t) as u32;
    assert_eq!(
        shapes,
        vec![
            (tokens, (q + 2 * kv) / t, h, 1),
            (s, s, hd, heads_here),
            (s, hd, s, heads_here),
            (tokens, h, q / t, 1),
            (tokens, 2 * f / t, h, 1),
            (tokens, h, f / t, 1),
        ]
    );
}

/// Without `head_dim` the widths are today's: `q = h`, `kv = h * g / a`.
#[test]
fn head_dim_equal_to_hidden_over_heads_changes_nothing() {
    let implicit = gpt(2, 128, 4, 64, 1000, (2, 1, 1), 2, 1);
    let mut explicit = implicit.clone();
    explicit.model.head_dim = Some(32);
    let (pi, pe) = (plan(&implicit), plan(&explicit));
    for c in all_chunks(&pi) {
        assert_eq!(
            chunk_work(&implicit, &pi, &c),
            chunk_work(&explicit, &pe, &c)
        );
    }
}
