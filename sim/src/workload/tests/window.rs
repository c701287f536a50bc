//! Sliding-window attention and attention sinks: which layers' kernels attend over the
//! window, their exact work, and what stays as it was (Megatron's reported FLOPs, the saved
//! activations, the parameters apart from the sinks).

use super::*;
use crate::workload::{layers_work, model_params};

/// Four GPT-style layers, 16 heads of 16, s = 512, flash attention on one GPU; a window of
/// 100 keys on the even layers when `window`, sinks when `sinks`.
fn model(window: bool, sinks: bool) -> Scenario {
    let mut sc = gpt(4, 256, 16, 512, 32000, (1, 1, 1), 2, 1);
    sc.training.flash_attention = true;
    if window {
        sc.model.sliding_window = Some(SlidingWindow {
            tokens: 100,
            every: 2,
        });
    }
    sc.model.attention_sinks = sinks;
    sc
}

#[test]
fn only_the_windowed_layers_of_a_range_attend_over_the_window() {
    let sc = model(true, false);
    let plan = plan(&sc);
    let layout = &plan.chunks[0][0];
    // Layers 1 and 2: layer 2 is windowed (2 % 2 == 0), layer 1 is not.
    let w = layers_work(&sc, &plan, layout, 1, 2, false, false);
    let a = w.forward.compute.attention.expect("flash kernel");
    assert_eq!((a.count, a.windowed, a.window), (2, 1, 100));
    let b = w.backward.compute.attention.expect("flash kernel");
    assert_eq!((b.count, b.windowed, b.backward), (2, 1, true));
    // Layers 0..4: 0 and 2.
    let all = layers_work(&sc, &plan, layout, 0, 4, false, false);
    let a = all.forward.compute.attention.expect("flash kernel");
    assert_eq!((a.count, a.windowed), (4, 2));
    // Per (sequence, head): full layers 512 * 513 / 2 = 131,328 pairs; windowed layers
    // 100 * 101 / 2 + 412 * 100 = 46,250. Two of each, b = 2, 16 heads of 16, 2 products.
    let pairs = 2 * 131_328 + 2 * 46_250;
    assert_eq!(a.work_flops(), 2 * 2 * 16 * 16 * pairs * 2);
}

#[test]
fn reported_flops_and_saved_activations_ignore_the_window() {
    let (with, without) = (model(true, false), model(false, false));
    let (pw, po) = (plan(&with), plan(&without));
    let w = layers_work(&with, &pw, &pw.chunks[0][0], 0, 4, true, true);
    let o = layers_work(&without, &po, &po.chunks[0][0], 0, 4, true, true);
    // Megatron-LM's num_floating_point_operations has no window term; flash attention saves
    // Q, K, V, O and the statistics of the whole sequence whatever it attends over.
    assert_eq!(w.forward.compute.flops, o.forward.compute.flops);
    assert_eq!(w.backward.compute.flops, o.backward.compute.flops);
    assert_eq!(w.activation_bytes, o.activation_bytes);
    assert!(
        w.forward.compute.attention.unwrap().work_flops()
            < o.forward.compute.attention.unwrap().work_flops()
    );
}

#[test]
fn sinks_are_one_parameter_per_head_and_layer_and_two_flops_per_query_and_head() {
    let (with, without) = (model(false, true), model(false, false));
    let pw = model_params(&with.model);
    let po = model_params(&without.model);
    assert_eq!(pw.dense - po.dense, 4 * 16);
    let (plw, plo) = (plan(&with), plan(&without));
    let w = layers_work(&with, &plw, &plw.chunks[0][0], 0, 4, false, false);
    let o = layers_work(&without, &plo, &plo.chunks[0][0], 0, 4, false, false);
    // 2 sequences x 16 heads x 512 queries x 4 layers x 2 FLOPs, each way.
    let sink = 2 * 16 * 512 * 4 * 2;
    let (fw, fo) = (
        w.forward.compute.attention.unwrap(),
        o.forward.compute.attention.unwrap(),
    );
    assert_eq!(fw.work_flops() - fo.work_flops(), sink);
    let (bw, bo) = (
        w.backward.compute.attention.unwrap(),
        o.backward.compute.attention.unwrap(),
    );
    assert_eq!(bw.work_flops() - bo.work_flops(), sink);
    assert_eq!(w.forward.compute.flops, o.forward.compute.flops);
}

#[test]
fn sinks_split_over_tensor_parallelism_with_the_heads() {
    let mut sc = model(false, true);
    sc.parallel.tp = 2;
    sc.cluster.gpus = 2;
    let mut plain = sc.clone();
    plain.model.attention_sinks = false;
    let (p, q) = (plan(&sc), plan(&plain));
    let with = crate::workload::chunk_params(&sc, &p, &p.chunks[0][0]);
    let without = crate::workload::chunk_params(&plain, &q, &q.chunks[0][0]);
    // 16 heads over tp 2: 8 sink logits per layer on each rank.
    assert_eq!(with.dense - without.dense, 4 * 8);
}
