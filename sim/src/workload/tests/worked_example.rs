//! The worked example of docs/memory.md (the 512xA100 scenario: a ~100B GPT), checked
//! against the closed forms the document derives it from.

use super::*;
use crate::workload::{chunk_params, chunk_work, state_bytes, StateBytes};

const L: u64 = 80;
const H: u64 = 10240;
const A: u64 = 80;
const S: u64 = 2048;
const V: u64 = 51200;
const T: u64 = 8;

fn example() -> Scenario {
    // tp 8, pp 8, dp 8; micro batch 1, global batch 512; bf16, selective recompute, sequence
    // parallel, ZeRO-1, flash attention.
    let mut s = gpt(L as u32, H, A as u32, S, V, (8, 8, 8), 1, 64);
    s.training.recompute = Recompute::Selective;
    s.training.flash_attention = true;
    s.parallel.sequence_parallel = true;
    s.parallel.zero = 1;
    s
}

#[test]
fn worked_example_matches_docs() {
    let s = example();
    let plan = plan(&s);
    let layers = L / 8;
    // Per layer and rank: 12h^2/t sharded weights; biases 3h/t + 4h/t sharded, h + h
    // replicated; two layer norms 4h.
    let layer_params = 12 * H * H / T + 7 * H / T + 6 * H;
    assert_eq!(layer_params, 157_356_800);
    let embedding = V / T * H + S * H;
    let head = V / T * H + 2 * H;
    let expect_params = [
        (0usize, layers * layer_params + embedding),
        (3, layers * layer_params),
        (7, layers * layer_params + head),
    ];
    for (stage, want) in expect_params {
        let p = chunk_params(&s, &plan, &plan.chunks[stage][0]);
        assert_eq!(p.dense, want, "stage {stage}");
        // bf16 weights 2, fp32 main grads 4, optimizer 12 sharded over dp 8 (ZeRO-1).
        assert_eq!(
            state_bytes(&s, &plan, stage as u32),
            StateBytes {
                weights_bytes: 2 * want,
                grads_bytes: 4 * want,
                optimizer_bytes: 12 * want / 8,
                host_bytes: 0,
                host_init_bytes: 0,
            }
        );
    }
    assert_eq!(expect_params[0].1, 1_660_075_520);

    // Activations per micro batch: 34*s*b*h/t per layer (selective + SP), plus the
    // embedding's dropout mask on stage 0 and 4*s*b*h/t*(1 + V/h) on stage 7.
    let layer_act = 34 * S * H / T;
    let w0 = chunk_work(&s, &plan, &plan.chunks[0][0]);
    assert_eq!(w0.activation_bytes, layers * layer_act + S * H / T);
    assert_eq!(w0.activation_bytes, 893_911_040);
    let w7 = chunk_work(&s, &plan, &plan.chunks[7][0]);
    assert_eq!(
        w7.activation_bytes,
        layers * layer_act + 4 * S * H / T + 4 * S * V / T
    );
    assert_eq!(w0.boundary_bytes, 2 * S * H / T);

    // FLOPs per rank and micro batch.
    let layer_fwd = (24 * S * H * H + 4 * S * S * H) / T;
    assert_eq!(w0.forward.compute.flops, layers * layer_fwd);
    assert_eq!(
        w7.forward.compute.flops,
        layers * layer_fwd + 2 * S * H * V / T
    );
    assert_eq!(
        w0.recompute.map(|r| r.compute.flops),
        Some(layers * 4 * S * S * H / T)
    );
}
