//! Activation bytes against Korthikanti et al. 2022, Table 2 and section 4
//! (data/validation/memory.toml, [activations]).

use super::*;
use crate::workload::{chunk_work, layers_work};

/// The per-layer activation bytes of one micro batch for `sc`'s first layer.
fn per_layer(sc: &Scenario) -> u64 {
    let plan = plan(sc);
    layers_work(sc, &plan, &plan.chunks[0][0], 0, 1, false, false).activation_bytes
}

/// (s, b, h, a, t): the 22B and 175B models of Korthikanti's Table 3, and a small one.
const SHAPES: [(u64, u64, u64, u64, u64); 3] = [
    (2048, 4, 6144, 64, 8),
    (2048, 1, 12288, 96, 8),
    (1024, 2, 1024, 16, 4),
];

fn scenario(
    (s, b, h, a, t): (u64, u64, u64, u64, u64),
    sp: bool,
    recompute: Recompute,
) -> Scenario {
    let mut sc = gpt(4, h, a as u32, s, 51200, (t as u32, 1, 1), b, 1);
    sc.parallel.sequence_parallel = sp;
    sc.training.recompute = recompute;
    sc
}

#[test]
fn table2_no_parallelism() {
    for (s, b, h, a, _) in SHAPES {
        let sc = scenario((s, b, h, a, 1), false, Recompute::None);
        // s*b*h*(34 + 5*a*s/h)
        assert_eq!(per_layer(&sc), 34 * s * b * h + 5 * a * s * s * b);
    }
}

#[test]
fn table2_tensor_parallel() {
    for shape @ (s, b, h, a, t) in SHAPES {
        let sc = scenario(shape, false, Recompute::None);
        // s*b*h*(10 + 24/t + 5*a*s/(h*t))
        assert_eq!(
            per_layer(&sc),
            10 * s * b * h + 24 * s * b * h / t + 5 * a * s * s * b / t
        );
    }
}

#[test]
fn table2_tensor_and_sequence_parallel() {
    for shape @ (s, b, h, a, t) in SHAPES {
        let sc = scenario(shape, true, Recompute::None);
        // s*b*h/t*(34 + 5*a*s/h)
        assert_eq!(per_layer(&sc), (34 * s * b * h + 5 * a * s * s * b) / t);
    }
}

#[test]
fn table2_selective_recompute() {
    for shape @ (s, b, h, _, t) in SHAPES {
        let sc = scenario(shape, false, Recompute::Selective);
        assert_eq!(per_layer(&sc), 10 * s * b * h + 24 * s * b * h / t);
        let sc = scenario(shape, true, Recompute::Selective);
        assert_eq!(per_layer(&sc), 34 * s * b * h / t);
    }
}

#[test]
fn table2_full_recompute() {
    for shape @ (s, b, h, _, t) in SHAPES {
        let sc = scenario(shape, false, Recompute::Full);
        assert_eq!(per_layer(&sc), 2 * s * b * h);
        let sc = scenario(shape, true, Recompute::Full);
        assert_eq!(per_layer(&sc), 2 * s * b * h / t);
    }
}

#[test]
fn first_stage_under_1f1b_holds_sbhl_over_t_times_34_plus_5as_over_h() {
    // p micro batches of L/p layers each: the first stage's layers times p.
    let (s, b, h, a, t, l, p) = (2048u64, 1u64, 12288u64, 96u64, 8u64, 96u64, 8u64);
    let mut sc = gpt(
        l as u32,
        h,
        a as u32,
        s,
        51200,
        (t as u32, p as u32, 1),
        b,
        8,
    );
    sc.parallel.sequence_parallel = true;
    let plan = plan(&sc);
    let c = &plan.chunks[0][0];
    let layers = layers_work(&sc, &plan, c, c.first_layer, c.num_layers, false, false);
    assert_eq!(
        p * layers.activation_bytes,
        s * b * h * l / t * 34 + 5 * a * s * s * b * l / t
    );
}

#[test]
fn flash_attention_drops_the_score_matrices_but_keeps_softmax_statistics() {
    for shape @ (s, b, h, a, t) in SHAPES {
        let mut sc = scenario(shape, true, Recompute::None);
        sc.training.flash_attention = true;
        assert_eq!(per_layer(&sc), 34 * s * b * h / t + 4 * b * a * s / t);
        // Selective recompute saves nothing of the core, flash or not.
        sc.training.recompute = Recompute::Selective;
        assert_eq!(per_layer(&sc), 34 * s * b * h / t);
    }
}

#[test]
fn context_parallel_divides_the_sequence() {
    let (s, b, h, a, t, c) = (4096u64, 1u64, 4096u64, 32u64, 2u64, 4u64);
    let mut sc = scenario((s, b, h, a, t), true, Recompute::None);
    sc.parallel.cp = c as u32;
    sc.cluster.gpus = (t * c) as u32;
    // Linear terms see s/c tokens; a rank's scores are (s/c) x s.
    assert_eq!(
        per_layer(&sc),
        34 * (s / c) * b * h / t + 5 * a * (s / c) * s * b / t
    );
}

#[test]
fn precision_sets_the_bytes_per_element() {
    let shape @ (s, b, h, a, t) = SHAPES[2];
    // fp32: every 2-byte tensor doubles; the two 1-byte dropout masks per token and the
    // score dropout mask stay 1 byte.
    let mut sc = scenario(shape, true, Recompute::None);
    sc.training.precision = Precision::Fp32;
    assert_eq!(
        per_layer(&sc),
        (2 * 32 + 2) * s * b * h / t + (2 * 4 + 1) * a * s * s * b / t
    );
    // fp8: the four GEMM inputs (QKV, output projection, MLP up and down inputs: 3h + f = 7h
    // elements per token) are 1-byte fp8 casts.
    sc.training.precision = Precision::Fp8;
    assert_eq!(
        per_layer(&sc),
        (34 - 7) * s * b * h / t + 5 * a * s * s * b / t
    );
}

#[test]
fn head_and_embedding_extras_follow_korthikanti_section_4() {
    let (s, b, h, a, t, v) = (2048u64, 1u64, 12288u64, 96u64, 8u64, 51200u64);
    let mut sc = gpt(2, h, a as u32, s, v, (t as u32, 2, 1), b, 2);
    sc.parallel.sequence_parallel = true;
    let plan = plan(&sc);
    let first = &plan.chunks[0][0];
    let last = &plan.chunks[1][0];
    let layers = layers_work(&sc, &plan, first, 0, 1, false, false).activation_bytes;
    // Embedding: dropout mask s*b*h/t.
    assert_eq!(
        chunk_work(&sc, &plan, first).activation_bytes,
        layers + s * b * h / t
    );
    // Head: 4*s*b*h/t*(1 + v/h).
    assert_eq!(
        chunk_work(&sc, &plan, last).activation_bytes,
        layers + 4 * s * b * h / t + 4 * s * b * v / t
    );
}

#[test]
fn boundary_is_the_hidden_state() {
    let shape @ (s, b, h, _, t) = SHAPES[0];
    let sc = scenario(shape, false, Recompute::None);
    let plan = plan(&sc);
    assert_eq!(
        chunk_work(&sc, &plan, &plan.chunks[0][0]).boundary_bytes,
        2 * s * b * h
    );
    let mut sc = scenario(shape, true, Recompute::None);
    sc.parallel.cp = 2;
    sc.cluster.gpus = 16;
    let plan2 = super::plan(&sc);
    assert_eq!(
        chunk_work(&sc, &plan2, &plan2.chunks[0][0]).boundary_bytes,
        2 * s * b * h / t / 2
    );
}

/// With an explicit head width, Q, the attention context (the output projection's input) and
/// K and V follow `heads * head_dim` and `kv_heads * head_dim`; the hidden-state tensors stay
/// `T*h`. bf16, no recompute, no flash attention, one GPU, gated MLP:
/// `10*T*h + (2 + 2)*T*q + 2*2*T*kv + 5*b*a*s^2 + (2*2 + 2)*T*f`.
#[test]
fn explicit_head_dim_sizes_q_k_v_and_the_context() {
    let (b, s, h, a, g, hd, f) = (2u64, 64u64, 96u64, 4u64, 2u64, 32u64, 160u64);
    let mut sc = gpt(2, h, a as u32, s, 1000, (1, 1, 1), b, 1);
    sc.model = Model {
        seq_len: s,
        head_dim: Some(hd),
        ..llama(2, h, a as u32, g as u32, f, 1000)
    };
    let (q, kv, t) = (a * hd, g * hd, b * s);
    assert_eq!(
        per_layer(&sc),
        10 * t * h + 4 * t * q + 4 * t * kv + 5 * b * a * s * s + 6 * t * f
    );
    // Without head_dim the heads are h / a = 24 wide: q = h and kv = h * g / a.
    sc.model.head_dim = None;
    assert_eq!(
        per_layer(&sc),
        10 * t * h + 4 * t * h + 4 * t * (g * h / a) + 5 * b * a * s * s + 6 * t * f
    );
}
