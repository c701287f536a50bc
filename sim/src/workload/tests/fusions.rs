//! The framework file's elementwise work (`[fusions]`) at workload level: one layer's
//! memory-bound bytes and kernels follow the file's passes and kernel count, eager or
//! compiled.

use super::*;
use crate::scenario::framework::{Bundled, Elementwise};
use crate::workload::layers_work;

/// One Llama-style layer (gated MLP), no head or embedding, under `framework` and `compile`.
fn one_layer(framework: Bundled, compile: bool) -> crate::workload::ChunkWork {
    let mut s = gpt(1, 1024, 16, 512, 4096, (1, 1, 1), 2, 1);
    s.model.gated_mlp = true;
    s.model.ffn_hidden = 2816;
    s.training.framework = framework.framework().unwrap();
    s.training.compile = compile;
    let plan = plan(&s);
    let layout = plan.chunks[0][0].clone();
    layers_work(&s, &plan, &layout, 0, 1, false, false)
}

/// The difference between two frameworks' layers is exactly the difference of their passes
/// (bf16: 2 bytes per element; backward moves twice the forward's bytes) and kernels.
#[test]
fn elementwise_work_follows_the_framework_file() {
    let (tokens, h, f, act) = (2 * 512u64, 1024u64, 2816u64, 2u64);
    let bytes = |e: Elementwise| {
        tokens * h * (u64::from(e.hidden_passes) * act + 2)
            + tokens * f * u64::from(e.ffn_passes) * act
    };
    let mc = Bundled::MegatronCore.framework().unwrap().fusions.eager;
    let tt = Bundled::Torchtitan.framework().unwrap().fusions;
    // Megatron-Core's file states what the model charged before frameworks were files.
    assert_eq!((mc.kernels, mc.hidden_passes, mc.ffn_passes), (5, 10, 3));
    let base = one_layer(Bundled::MegatronCore, false);
    for (compile, e) in [(false, tt.eager), (true, tt.compiled)] {
        let w = one_layer(Bundled::Torchtitan, compile);
        let extra = bytes(e) as i64 - bytes(mc) as i64;
        assert_eq!(
            w.forward.compute.memory_bytes as i64 - base.forward.compute.memory_bytes as i64,
            extra
        );
        assert_eq!(
            w.backward_input.compute.memory_bytes as i64
                - base.backward_input.compute.memory_bytes as i64,
            2 * extra
        );
        assert_eq!(
            w.forward.compute.kernels as i64 - base.forward.compute.kernels as i64,
            i64::from(e.kernels) - i64::from(mc.kernels)
        );
        // GEMMs do not change.
        assert_eq!(w.forward.compute.gemms, base.forward.compute.gemms);
    }
    // Compiling fuses: fewer kernels and bytes than eager.
    assert!(tt.compiled.kernels < tt.eager.kernels);
    assert!(bytes(tt.compiled) < bytes(tt.eager));
}

/// The kernels a framework launches that twin does not size one by one (`extra_*` of
/// `[fusions.eager]`): the forward and the backward's input half gain exactly their kernels
/// and passes (bf16, `tokens x hidden` each), nothing else moves.
#[test]
fn extra_kernels_and_passes_add_to_forward_and_backward() {
    let (tokens, h, act) = (2 * 512u64, 1024u64, 2u64);
    let base = one_layer(Bundled::Torchtitan, false);
    let mut s = gpt(1, 1024, 16, 512, 4096, (1, 1, 1), 2, 1);
    s.model.gated_mlp = true;
    s.model.ffn_hidden = 2816;
    let mut fw = Bundled::Torchtitan.framework().unwrap();
    fw.fusions.eager.extra_forward_kernels = 3;
    fw.fusions.eager.extra_backward_kernels = 7;
    fw.fusions.eager.extra_forward_hidden_passes = 5;
    fw.fusions.eager.extra_backward_hidden_passes = 11;
    s.training.framework = fw;
    let plan = plan(&s);
    let layout = plan.chunks[0][0].clone();
    let w = layers_work(&s, &plan, &layout, 0, 1, false, false);
    let (f, bf) = (&w.forward.compute, &base.forward.compute);
    let (b, bb) = (&w.backward_input.compute, &base.backward_input.compute);
    assert_eq!(f.kernels - bf.kernels, 3);
    assert_eq!(f.memory_bytes - bf.memory_bytes, 5 * tokens * h * act);
    assert_eq!(b.kernels - bb.kernels, 7);
    assert_eq!(b.memory_bytes - bb.memory_bytes, 11 * tokens * h * act);
    assert_eq!(w.backward_weight.kernels, base.backward_weight.kernels);
    assert_eq!(f.gemms, bf.gemms);
}
