use super::*;
use twin_sim::schedule::Attention;

fn hopper(recipe: Fp8Recipe) -> Fp8Device {
    Fp8Device::check((9, 0), recipe).unwrap()
}

/// A linear layer's forward GEMM: 8192 tokens, 4096 in, 4096 out features.
fn linear() -> Gemm {
    Gemm::single(8192, 4096, 4096, 1)
}

#[test]
fn e4m3_codes_follow_the_format() {
    let f = Fp8Format::E4m3;
    // 1.0: exponent field 7 (bias 7), mantissa 0.
    assert_eq!(f.encode(1.0), 0x38);
    assert_eq!(f.encode(0.5), 0x30);
    assert_eq!(f.encode(-1.0), 0xB8);
    // Largest finite: 1.75 x 2^8; beyond it saturates, never NaN (0x7F).
    assert_eq!(f.encode(448.0), 0x7E);
    assert_eq!(f.encode(1e6), 0x7E);
    assert_eq!(f.encode(-1e6), 0xFE);
    assert_eq!(f.decode(0x7E), 448.0);
    // Smallest subnormal: 1/8 x 2^-6.
    assert_eq!(f.decode(0x01), 2f32.powi(-9));
    assert_eq!(f.encode(2f32.powi(-9)), 0x01);
    // Half of the smallest subnormal ties to the even code, zero.
    assert_eq!(f.encode(2f32.powi(-10)), 0x00);
    // Ties between neighbours go to the even code: 1.0625 lies between 1.0 (0x38) and
    // 1.125 (0x39); 1.1875 between 1.125 (0x39) and 1.25 (0x3A).
    assert_eq!(f.encode(1.0625), 0x38);
    assert_eq!(f.encode(1.1875), 0x3A);
    assert_eq!(f.encode(1.1), 0x39);
    assert_eq!(f.encode(f32::NAN), 0);
    for code in 0..=0x7Eu8 {
        assert_eq!(f.encode(f.decode(code)), code, "code {code:#x}");
        assert_eq!(f.encode(f.decode(code | 0x80)), code | 0x80);
    }
}

#[test]
fn e5m2_codes_follow_the_format() {
    let f = Fp8Format::E5m2;
    assert_eq!(f.encode(1.0), 0x3C);
    assert_eq!(f.encode(57344.0), 0x7B);
    assert_eq!(f.encode(1e9), 0x7B);
    assert_eq!(f.decode(0x7B), 57344.0);
    assert_eq!(f.decode(0x01), 2f32.powi(-16));
    for code in 0..=0x7Bu8 {
        assert_eq!(f.encode(f.decode(code)), code, "code {code:#x}");
    }
}

#[test]
fn scales_come_from_the_amax() {
    // 448 / 4 = 112: the tensor's largest element lands on e4m3's largest value.
    assert_eq!(scale_from_amax(4.0, E4M3_MAX), 112.0);
    assert_eq!(scale_from_amax(0.0, E4M3_MAX), 1.0);
    assert_eq!(scale_from_amax(f32::INFINITY, E4M3_MAX), 1.0);
    assert_eq!(scale_from_amax(f32::NAN, E4M3_MAX), 1.0);
    assert_eq!(scale_from_amax(1e-40, E4M3_MAX), f32::MAX);
    assert_eq!(scale_from_amax(8.0, E5M2_MAX), 7168.0);
}

#[test]
fn delayed_scaling_uses_the_history_maximum() {
    // Largest of the history is 3.5: 448 / 3.5 = 128; a margin of 1 halves it.
    assert_eq!(delayed_scale(&[1.0, 3.5, 2.0], E4M3_MAX, 0), 128.0);
    assert_eq!(delayed_scale(&[1.0, 3.5, 2.0], E4M3_MAX, 1), 64.0);
    assert_eq!(delayed_scale(&[1.0, f32::NAN, 2.0], E4M3_MAX, 0), 224.0);
    assert_eq!(delayed_scale(&[], E4M3_MAX, 0), 1.0);
}

#[test]
fn mx_scales_are_powers_of_two_below_the_amax() {
    // floor(log2 448) = 8: exponent 0, the E8M0 code 127 (2^0).
    assert_eq!(mx_scale_code(448.0), 127);
    assert_eq!(mx_scale_code(1.0), 119);
    assert_eq!(mx_scale_code(3.9), 120);
    assert_eq!(mx_scale_code(0.0), 127);
}

#[test]
fn forward_gemms_run_tn_with_fast_accumulation() {
    let (p, note) = plan_fp8_gemm(&linear(), Role::Forward, &hopper(Fp8Recipe::Delayed)).unwrap();
    assert_eq!(note, None);
    // cuBLASLt's m is the out features (twin's n), its n the tokens (twin's m).
    assert_eq!((p.m, p.n, p.k), (4096, 8192, 4096));
    assert_eq!((p.lda, p.ldb, p.ldc), (4096, 4096, 4096));
    assert_eq!((p.a_format, p.b_format), (Fp8Format::E4m3, Fp8Format::E4m3));
    assert_eq!(
        (p.a_scale, p.b_scale),
        (ScaleMode::Tensor, ScaleMode::Tensor)
    );
    assert!(p.fast_accum);
    assert_eq!(p.calls, 1);
    assert_eq!(p.operand_bytes(), [4096 * 4096, 4096 * 8192]);
    assert_eq!(p.scale_bytes(), [4, 4]);
}

#[test]
fn backward_gemms_take_e5m2_gradients_under_hybrid_recipes() {
    // dgrad of the linear: dX[8192,4096] = dY[8192,4096] W^T.
    let dgrad = Gemm::single(8192, 4096, 4096, 3);
    for recipe in [Fp8Recipe::Delayed, Fp8Recipe::Tensorwise] {
        let (p, _) = plan_fp8_gemm(&dgrad, Role::Backward, &hopper(recipe)).unwrap();
        assert_eq!((p.a_format, p.b_format), (Fp8Format::E4m3, Fp8Format::E5m2));
        assert!(!p.fast_accum, "{recipe:?}");
        assert_eq!(p.calls, 3);
    }
    let (p, _) = plan_fp8_gemm(&dgrad, Role::WeightGradient, &hopper(Fp8Recipe::Delayed)).unwrap();
    assert_eq!(p.b_format, Fp8Format::E5m2);
    assert!(!p.fast_accum);
    // Rowwise keeps e4m3 for gradients, with one scale per row of each operand.
    let (p, note) = plan_fp8_gemm(&dgrad, Role::Backward, &hopper(Fp8Recipe::Rowwise)).unwrap();
    assert_eq!(note, None);
    assert_eq!(p.b_format, Fp8Format::E4m3);
    assert_eq!(
        (p.a_scale, p.b_scale),
        (ScaleMode::OuterVector, ScaleMode::OuterVector)
    );
    assert_eq!(p.scale_bytes(), [4096 * 4, 8192 * 4]);
}

#[test]
fn blockwise_scales_weights_by_blocks_and_activations_by_runs() {
    let d = hopper(Fp8Recipe::Blockwise);
    let (f, _) = plan_fp8_gemm(&linear(), Role::Forward, &d).unwrap();
    assert_eq!(
        (f.a_scale, f.b_scale),
        (ScaleMode::Block128, ScaleMode::Vec128)
    );
    // Split accumulation everywhere under block scaling.
    assert!(!f.fast_accum);
    // Weight: (4096/128)^2 blocks; activations: 8192 rows x 4096/128 runs; 4 bytes each.
    assert_eq!(f.scale_bytes(), [32 * 32 * 4, 8192 * 32 * 4]);
    let (w, _) = plan_fp8_gemm(&linear(), Role::WeightGradient, &d).unwrap();
    assert_eq!(
        (w.a_scale, w.b_scale),
        (ScaleMode::Vec128, ScaleMode::Vec128)
    );
}

#[test]
fn recipes_the_gpu_lacks_run_per_tensor_with_a_note() {
    let (p, note) = plan_fp8_gemm(&linear(), Role::Forward, &hopper(Fp8Recipe::Mxfp8)).unwrap();
    assert_eq!(
        (p.a_scale, p.b_scale),
        (ScaleMode::Tensor, ScaleMode::Tensor)
    );
    let note = note.unwrap();
    assert!(note.contains("mxfp8") && note.contains("9.0"), "{note}");
    let blackwell = Fp8Device::check((10, 0), Fp8Recipe::Mxfp8).unwrap();
    let (p, note) = plan_fp8_gemm(&linear(), Role::Forward, &blackwell).unwrap();
    assert_eq!(note, None);
    assert_eq!((p.a_scale, p.b_scale), (ScaleMode::Mx32, ScaleMode::Mx32));
    // 4096 rows (a multiple of 128) x 4096/32 = 128 scale columns, one byte each.
    assert_eq!(p.scale_bytes()[0], 4096 * 128);
    let ada = Fp8Device::check((8, 9), Fp8Recipe::Rowwise).unwrap();
    let (p, note) = plan_fp8_gemm(&linear(), Role::Forward, &ada).unwrap();
    assert_eq!(p.a_scale, ScaleMode::Tensor);
    assert!(note.unwrap().contains("rowwise"));
}

#[test]
fn gpus_without_fp8_tensor_cores_are_refused() {
    let why = Fp8Device::check((8, 0), Fp8Recipe::Delayed).unwrap_err();
    assert!(why.contains("8.0") && why.contains("8.9"), "{why}");
    assert!(Fp8Device::check((8, 9), Fp8Recipe::Delayed).is_ok());
    assert_eq!(lt_workspace_bytes((9, 0)), 33_555_456);
    assert_eq!(lt_workspace_bytes((8, 9)), 4_194_304);
}

#[test]
fn shapes_off_the_alignment_run_in_bf16_naming_the_shape() {
    let d = hopper(Fp8Recipe::Delayed);
    let odd_k = Gemm::single(8192, 4096, 4100, 1);
    let why = plan_fp8_gemm(&odd_k, Role::Forward, &d).unwrap_err();
    assert!(
        why.contains("8192x4096x4100") && why.contains("bf16"),
        "{why}"
    );
    let odd_n = Gemm::single(8192, 4100, 4096, 1);
    assert!(plan_fp8_gemm(&odd_n, Role::Forward, &d).is_err());
    // An odd token count is cuBLASLt's n, which has no alignment rule.
    assert!(plan_fp8_gemm(&Gemm::single(8191, 4096, 4096, 1), Role::Forward, &d).is_ok());
    let batched = Gemm {
        batch: 4,
        ..Gemm::single(64, 64, 64, 4)
    };
    assert!(plan_fp8_gemm(&batched, Role::Forward, &d)
        .unwrap_err()
        .contains("batched"));
}

fn fp8_forward_op() -> ComputeOp {
    let head = Gemm {
        dtype: Some(Precision::Bf16),
        ..Gemm::single(8192, 128256, 4096, 1)
    };
    ComputeOp {
        phase: Phase::Forward,
        dtype: Precision::Fp8,
        gemms: vec![linear(), head].into(),
        attention: Some(Attention {
            batch: 1,
            heads: 32,
            head_dim: 128,
            q_len: 8192,
            kv_len: 8192,
            causal: true,
            backward: false,
            count: 1,
            window: 0,
            windowed: 0,
            sinks: false,
        }),
        flops: 0,
        memory_bytes: 0,
        kernels: 3,
        sms_reserved: 0,
        host_syncs: Default::default(),
    }
}

#[test]
fn attention_and_output_layer_stay_bf16_under_fp8() {
    let op = fp8_forward_op();
    let d = hopper(Fp8Recipe::Tensorwise);
    let plan = plan_op(&op, Ok(&d), false);
    assert!(plan.notes.is_empty(), "{:?}", plan.notes);
    let execs: Vec<Exec> = plan.gemms.iter().map(|p| p.exec).collect();
    assert!(matches!(execs[0], Exec::Fp8(p) if p.fast_accum && p.k == 4096));
    assert_eq!(execs[1], Exec::Blas(GemmDtype::Bf16));
    // The attention kernel's equivalent GEMMs (one kind of call here).
    assert_eq!(execs.len(), 3);
    assert_eq!(execs[2], Exec::Blas(GemmDtype::Bf16));
    assert_eq!(plan.gemms[0].gemm, linear());
}

#[test]
fn without_an_fp8_gpu_every_gemm_runs_bf16_with_the_reason() {
    let plan = plan_op(&fp8_forward_op(), Err("no FP8 here"), false);
    assert!(plan
        .gemms
        .iter()
        .all(|p| p.exec == Exec::Blas(GemmDtype::Bf16)));
    assert_eq!(plan.notes.len(), 1);
    assert!(plan.notes[0].contains("no FP8 here"));
    // A bf16 op plans bf16 GEMMs and no note, FP8 device or not.
    let bf16 = ComputeOp {
        dtype: Precision::Bf16,
        ..fp8_forward_op()
    };
    let plan = plan_op(&bf16, Ok(&hopper(Fp8Recipe::Delayed)), false);
    assert!(plan.notes.is_empty());
    assert!(plan
        .gemms
        .iter()
        .all(|p| p.exec == Exec::Blas(GemmDtype::Bf16)));
}

#[test]
fn fp8_workspace_covers_every_scale_mode() {
    let ws = fp8_workspace(&fp8_forward_op());
    // A: 4096 x 4096 weight bytes; B: 4096 x 8192 activation bytes; scales: the largest
    // mode is 1x128 over 8192 rows (8192 x 32 x 4) = MX over 8192 rows (8192 x 128 x 1).
    assert_eq!(ws, [4096 * 4096, 4096 * 8192, 1 << 20]);
    let bf16 = ComputeOp {
        dtype: Precision::Bf16,
        ..fp8_forward_op()
    };
    assert_eq!(fp8_workspace(&bf16), [0, 0, 0]);
}

#[test]
fn quantized_operands_fill_the_format_with_training_like_values() {
    let n = 1 << 14;
    let t = quantize_block(n, 5, Fp8Format::E4m3, Fp8Recipe::Tensorwise);
    assert_eq!(t.codes.len(), n);
    // Current scaling maps this tensor's amax onto 448 exactly.
    let own = amax(&standard_normals(n, 5));
    assert!((t.scale_inv - own / E4M3_MAX).abs() <= 1e-6 * t.scale_inv);
    assert!(t.codes.iter().any(|&c| c & 0x7F == 0x7E));
    assert!(t.codes.iter().all(|&c| c & 0x7F != 0x7F), "no NaN codes");
    // Dequantised, they are standard normal: mean near 0, variance near 1 (5 sigma).
    let xs: Vec<f64> = t
        .codes
        .iter()
        .map(|&c| f64::from(Fp8Format::E4m3.decode(c) * t.scale_inv))
        .collect();
    let mean = xs.iter().sum::<f64>() / n as f64;
    let var = xs.iter().map(|x| x * x).sum::<f64>() / n as f64 - mean * mean;
    assert!(mean.abs() < 5.0 / (n as f64).sqrt(), "{mean}");
    assert!(
        (var - 1.0).abs() < 5.0 * (2.0 / n as f64).sqrt() + 0.01,
        "{var}"
    );
    // Delayed scaling's scale comes from earlier draws, not from this tensor.
    let d = quantize_block(n, 5, Fp8Format::E5m2, Fp8Recipe::Delayed);
    assert_ne!(d.scale_inv, own / E5M2_MAX);
    assert!(d.codes.iter().all(|&c| c & 0x7F <= 0x7B));
    // Seeded.
    assert_eq!(
        t.codes,
        quantize_block(n, 5, Fp8Format::E4m3, Fp8Recipe::Tensorwise).codes
    );
    assert_ne!(
        t.codes,
        quantize_block(n, 6, Fp8Format::E4m3, Fp8Recipe::Tensorwise).codes
    );
}
