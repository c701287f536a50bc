//! How the CUDA backend runs the GEMMs of the FP8 scenario (scenarios/gpu/llama3-8b-1gpu-fp8.toml)
//! on a Hopper GPU, planned without one: the linear layers' GEMMs in FP8 through cuBLASLt, the
//! attention core and the output layer in bf16, each FP8 call within cuBLASLt's rules.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use std::path::PathBuf;
use twin_runtime::backend::cuda::dtype::GemmDtype;
use twin_runtime::backend::cuda::fp8::{plan_op, Exec, Fp8Device, Fp8Format};
use twin_sim::scenario::{Fp8Recipe, Precision};
use twin_sim::schedule::{OpKind, Phase};
use twin_sim::setup::load;
use twin_sim::Staged;

fn staged(sets: &[&str]) -> Staged {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenarios/gpu/llama3-8b-1gpu-fp8.toml");
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Staged::new(&load(&path, &sets).unwrap()).unwrap()
}

#[test]
fn the_fp8_scenario_runs_its_linears_in_fp8_and_the_rest_in_bf16() {
    let s = staged(&[]);
    let hopper = Fp8Device::check((9, 0), Fp8Recipe::Delayed).unwrap();
    let vocab = 128_256u64;
    let (mut fp8_forward, mut fp8_backward, mut bf16) = (0, 0, 0);
    for op in &s.schedule.programs[0].ops {
        let OpKind::Compute(c) = &op.kind else {
            continue;
        };
        let plan = plan_op(c, Ok(&hopper), false);
        // Every linear shape of the model aligns: no fallback.
        assert!(plan.notes.is_empty(), "{:?}", plan.notes);
        let attention_calls = c.attention.map_or(0, |a| a.parts().count());
        let own = plan.gemms.len() - attention_calls;
        for (i, p) in plan.gemms.iter().enumerate() {
            match p.exec {
                Exec::Fp8(f) => {
                    assert!(i < own, "an attention GEMM planned in FP8");
                    assert_eq!(c.dtype, Precision::Fp8);
                    assert!(f.k % 16 == 0 && f.ldc % 8 == 0, "{f:?}");
                    assert_eq!((f.lda, f.ldb, f.ldc), (f.k, f.k, f.m));
                    // cuBLASLt's m is twin's n (out features), its n twin's m.
                    assert_eq!((f.m, f.n, f.k), (p.gemm.n, p.gemm.m, p.gemm.k));
                    assert_eq!(f.a_format, Fp8Format::E4m3);
                    let forward = matches!(c.phase, Phase::Forward | Phase::Recompute);
                    assert_eq!(f.fast_accum, forward);
                    let want = if forward {
                        Fp8Format::E4m3
                    } else {
                        Fp8Format::E5m2
                    };
                    assert_eq!(f.b_format, want);
                    if forward {
                        fp8_forward += 1;
                    } else {
                        fp8_backward += 1;
                    }
                }
                Exec::Blas(d) => {
                    assert_eq!(d, GemmDtype::Bf16);
                    // Only the attention kernel and the output layer (the vocabulary is one of
                    // its dimensions) stay in bf16.
                    let head = [p.gemm.m, p.gemm.n, p.gemm.k].contains(&vocab);
                    assert!(i >= own || head, "{:?} in bf16", p.gemm);
                    bf16 += 1;
                }
            }
        }
    }
    assert!(fp8_forward > 0 && fp8_backward > 0 && bf16 > 0);
}

#[test]
fn without_fp8_tensor_cores_the_scenario_runs_in_bf16_and_says_why() {
    let s = staged(&[]);
    let why = Fp8Device::check((8, 0), Fp8Recipe::Delayed).unwrap_err();
    let mut notes = Vec::new();
    for op in &s.schedule.programs[0].ops {
        if let OpKind::Compute(c) = &op.kind {
            let plan = plan_op(c, Err(why.as_str()), false);
            assert!(plan
                .gemms
                .iter()
                .all(|p| p.exec == Exec::Blas(GemmDtype::Bf16)));
            notes.extend(plan.notes);
        }
    }
    assert!(!notes.is_empty());
    assert!(notes.iter().all(|n| n.contains("compute capability 8.0")));
}

#[test]
fn the_fp8_workspace_is_the_largest_fp8_operands_and_scales() {
    use twin_runtime::backend::cuda::footprint::{workspace_bytes, workspaces};
    let s = staged(&[]);
    let program = &s.schedule.programs[0];
    let w = workspaces(program, false);
    // Tokens 2048, hidden 4096, the fused gate and up projection 2 x 14336 = 28672 wide.
    // A (the weight side, k x twin's n): the gate-up forward, 4096 x 28672 (its dgrad's
    // 28672 x 4096 is the same). B (k x twin's m): the gate-up dgrad, 28672 x 2048. Scales: 1x128
    // runs over the 28672 rows of that weight, 28672 x 4096/128 x 4 bytes (MX's 28672 x
    // 4096/32 x 1 byte is the same).
    let (a, b, scales) = (4096 * 28672u64, 28672 * 2048u64, 28672 * 32 * 4u64);
    assert_eq!(w[0].fp8, [a, b, scales]);
    // Transformer Engine's Hopper cuBLASLt workspace, 32 MiB + 1 KiB.
    assert_eq!(w[0].lt_workspace, 33_555_456);
    // B is held twice (e4m3 activations, e5m2 gradients); each operand's scales twice (fp32,
    // E8M0). The rest is the bf16 scenario's workspace (docs/memory.md: 3,163,553,792 B, the
    // output head and the copy scratch), which the FP8 scenario shares.
    let fp8 = a + 2 * b + 6 * scales + 33_555_456;
    assert_eq!(fp8, 290_456_576);
    assert_eq!(workspace_bytes(program, false), 3_163_553_792 + fp8);
}
