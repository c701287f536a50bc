//! Exact times of fused attention kernels on the default curves, the backend switch, and the
//! host profiles' fallback to GEMMs. Expected figures are worked out by hand from the curve in
//! the module doc (A100 bf16 peak 312 TFLOP/s, `testing::a100`).

use super::*;
use crate::cost::{Analytic, CostModel};
use crate::schedule::{ComputeOp, Phase};
use crate::testing::small_scenario;

/// Two sequences, 16 heads of 128, 4096 positions, three layers.
fn kernel(causal: bool, backward: bool) -> Attention {
    Attention {
        batch: 2,
        heads: 16,
        head_dim: 128,
        q_len: 4096,
        kv_len: 4096,
        causal,
        backward,
        count: 3,
        window: 0,
        windowed: 0,
        sinks: false,
    }
}

fn op(a: Attention) -> ComputeOp {
    ComputeOp {
        phase: if a.backward {
            Phase::Backward
        } else {
            Phase::Forward
        },
        dtype: Precision::Bf16,
        gemms: Vec::new().into(),
        attention: Some(a),
        // Megatron's count, full square: 4 * b * h * d * s^2 per layer forward.
        flops: 4 * 2 * 16 * 128 * 4096 * 4096 * 3 * if a.backward { 2 } else { 1 },
        memory_bytes: 0,
        kernels: 0,
        sms_reserved: 0,
        host_syncs: Default::default(),
    }
}

#[test]
fn causal_forward_time_follows_the_flash_curve() {
    let model = Analytic::new(&small_scenario(1, 1, 1, 1));
    let a = kernel(true, false);
    // 4096 * 4097 / 2 = 8,390,656 pairs per head; 2 products of 2*128 FLOPs each.
    assert_eq!(a.work_flops(), 2 * 2 * 16 * 128 * 8_390_656 * 2 * 3);
    assert_eq!(a.work_flops(), 412_417_523_712);
    // L = 2048.5 keys per query: eff = 0.4351 * 2048.5/2368.5 * 128/151 = 0.318996;
    // 412.42e9 / (312e12 * 0.318996) = 4,143,791 ns. The Megatron FLOPs in `flops` add nothing.
    assert_eq!(model.compute_ns(0, &op(a)), 4_143_791);
}

/// Two of the three layers attend over a window of 128 keys (GPT-OSS's): their calls run at
/// the efficiency of their own, short, inner loop; the third as above.
#[test]
fn windowed_calls_follow_the_curve_at_their_own_keys_per_query() {
    let model = Analytic::new(&small_scenario(1, 1, 1, 1));
    let a = Attention {
        window: 128,
        windowed: 2,
        ..kernel(true, false)
    };
    // Full call: 137,472,507,904 FLOPs at eff 0.318996 (a third of the first test's time).
    // Windowed: 128 * 129 / 2 + 3968 * 128 = 516,160 pairs per head, L = 126.015625 keys per
    // query, eff = 0.4351 * 126.015625/446.015625 * 128/151 = 0.104207; 16,913,530,880 FLOPs
    // for the two calls. 1,381,264 + 520,215 = 1,901,479 ns.
    assert_eq!(
        a.work_flops(),
        137_472_507_904 + 2 * 2 * 16 * 128 * 516_160 * 2 * 2
    );
    assert_eq!(model.compute_ns(0, &op(a)), 1_901_479);
}

#[test]
fn backward_is_two_and_a_half_forwards_on_its_own_curve() {
    let model = Analytic::new(&small_scenario(1, 1, 1, 1));
    // 1.031e12 FLOPs at 0.3673 * 2048.5/2560.5 * 128/144 = 0.261204 of 312 TFLOP/s.
    assert_eq!(model.compute_ns(0, &op(kernel(true, true))), 12_651_527);
}

#[test]
fn without_a_mask_the_work_doubles_and_the_loop_is_longer() {
    let model = Analytic::new(&small_scenario(1, 1, 1, 1));
    // 824.6e9 FLOPs at 0.4351 * 4096/4416 * 128/151 of peak.
    assert_eq!(model.compute_ns(0, &op(kernel(false, false))), 7_725_979);
}

#[test]
fn the_cudnn_backend_has_its_own_curve() {
    let mut model = Analytic::new(&small_scenario(1, 1, 1, 1));
    model.attention = Some(AttentionModel {
        backend: AttentionBackend::Cudnn,
        ..DEFAULT_ATTENTION
    });
    // eff = 1.0233 * 2048.5/2200.5 * 128/202.5 = 0.602147.
    assert_eq!(model.compute_ns(0, &op(kernel(true, false))), 2_195_230);
}

/// A head smaller than the kernel compiled for it takes the kernel's time: FlashAttention-2
/// runs heads of 112 in its 128 kernel, the Triton kernel heads of 80 in its 128 one, so both
/// price exactly the head-128 call above; cuDNN computes over 112 (its work 112/128 of the
/// head-128 call's, at its curve's efficiency for 112). The op's Megatron `flops` are the
/// model's either way.
#[test]
fn a_head_smaller_than_its_kernel_takes_the_kernels_time() {
    let with = |backend: AttentionBackend, head_dim: u64| {
        let mut model = Analytic::new(&small_scenario(1, 1, 1, 1));
        model.attention = Some(AttentionModel {
            backend,
            ..DEFAULT_ATTENTION
        });
        model.compute_ns(
            0,
            &op(Attention {
                head_dim,
                ..kernel(true, false)
            }),
        )
    };
    // Flash at 128: 4,143,791 ns (the first test).
    assert_eq!(with(AttentionBackend::Flash, 112), 4_143_791);
    assert_eq!(with(AttentionBackend::Flash, 128), 4_143_791);
    // 96 is a kernel of its own: 3/4 of the work at eff 0.4351 * 2048.5/2368.5 * 96/119.
    assert!(with(AttentionBackend::Flash, 96) < 4_143_791);
    assert_eq!(
        with(AttentionBackend::Triton, 80),
        with(AttentionBackend::Triton, 128)
    );
    // cuDNN: 360,865,333,248 FLOPs at 1.0233 * 2048.5/2200.5 * 112/186.5 = 0.572080.
    assert_eq!(with(AttentionBackend::Cudnn, 112), 2_021_780);
    assert_eq!(with(AttentionBackend::Cudnn, 128), 2_195_230);
}

/// The scenario's framework file picks the kernel: llm-foundry's Triton FlashAttention on its
/// own curve, torchtitan's SDPA flash kernel, Megatron-Core's flash-attn; a profile supplies
/// the same curves. Each time
/// is `work / (peak * eff)` of the causal forward above (412,417,523,712 FLOPs, 2048.5 keys per
/// query, head_dim 128).
#[test]
fn the_scenarios_framework_picks_the_backend_and_its_curve() {
    use crate::scenario::framework::Bundled;
    let scenario = |fw: Bundled, gpu: &str| {
        let mut s = small_scenario(1, 1, 1, 1);
        s.training.framework = fw.framework().unwrap();
        s.cluster.gpu = crate::scenario::gpu_preset(gpu).unwrap();
        s
    };
    let on = |fw: Bundled, gpu: &str| {
        let model = Analytic::new(&scenario(fw, gpu));
        model.compute_ns(0, &op(kernel(true, false)))
    };
    // Triton: eff = 0.18 * 2048.5/2272.5 * 128/151 = 0.137543; at 312 TFLOP/s (A100) and
    // 989 TFLOP/s (H100).
    assert_eq!(on(Bundled::LlmFoundry, "a100-sxm-80gb"), 9_610_476);
    assert_eq!(on(Bundled::LlmFoundry, "h100-sxm-80gb"), 3_031_819);
    // Flash: eff = 0.318996 (see the first test) at 989 TFLOP/s.
    assert_eq!(on(Bundled::Torchtitan, "h100-sxm-80gb"), 1_307_242);
    assert_eq!(on(Bundled::MegatronCore, "h100-sxm-80gb"), 1_307_242);
    assert_eq!(on(Bundled::MegatronCore, "a100-sxm-80gb"), 4_143_791);

    let h100 = crate::profile::parse_str(
        include_str!("../../../scenarios/profiles/h100-dgx.toml"),
        "h100-dgx.toml",
    )
    .unwrap();
    let model = Analytic::from_profile(&scenario(Bundled::LlmFoundry, "h100-sxm-80gb"), &h100);
    assert_eq!(model.attention.unwrap().backend, AttentionBackend::Triton);
    assert_eq!(model.compute_ns(0, &op(kernel(true, false))), 3_031_819);
}

#[test]
fn efficiency_never_exceeds_the_peak() {
    let c = AttentionCurve {
        max_efficiency: 1.5,
        keys_half: 0.0,
        head_dim_half: 0.0,
    };
    assert_eq!(c.efficiency(1e6, 256.0), 1.0);
    assert_eq!(DEFAULT_FLASH.forward.efficiency(0.0, 128.0), 0.0);
}

#[test]
fn without_an_attention_model_the_kernel_runs_as_its_equivalent_gemm() {
    let mut model = Analytic::new(&small_scenario(1, 1, 1, 1));
    model.attention = None;
    let a = kernel(true, true);
    let g = a.equivalent_gemm();
    let as_gemm = ComputeOp {
        gemms: vec![g].into(),
        attention: None,
        flops: g.flops(),
        ..op(a)
    };
    // 2048.5 keys per query rounded up to 2049; 5 products per head and layer.
    assert_eq!(
        (g.m, g.n, g.k, g.count, g.batch),
        (4096, 2049, 128, 32 * 5 * 3, 32)
    );
    assert_eq!(model.compute_ns(0, &op(a)), model.compute_ns(0, &as_gemm));
}

/// The default curves reproduce the H200 measurement they were fitted to within the fit's
/// stated errors (docs/measurements/2026-11-28-h200-attention.md): flash forward 20.2%,
/// backward 7.3%; cuDNN 5.5% and 3.0%.
#[test]
fn default_curves_reproduce_the_h200_measurement() {
    let text = include_str!("../../../data/microbench/h200-2026-11-28.json");
    let data: serde_json::Value = serde_json::from_str(text).unwrap();
    let rows = data["attention"].as_array().unwrap();
    assert_eq!(rows.len(), 14);
    let peak = 989e12;
    for (backend, curves, fwd_max, bwd_max) in [
        ("flash", DEFAULT_FLASH, 0.203, 0.074),
        ("cudnn", DEFAULT_CUDNN, 0.056, 0.031),
    ] {
        for row in rows {
            let s = row["seq"].as_f64().unwrap();
            let d = row["head_dim"].as_f64().unwrap();
            for (dir, curve, max) in [
                ("fwd", curves.forward, fwd_max),
                ("bwd", curves.backward, bwd_max),
            ] {
                let measured = row[format!("{backend}_{dir}_tflops")].as_f64().unwrap() * 1e12;
                let predicted = curve.efficiency(s / 2.0, d) * peak;
                let err = (predicted / measured - 1.0).abs();
                assert!(err <= max, "{backend} {dir} s {s} d {d}: {err}");
            }
        }
    }
}
