//! Where the schedule places the gradient accumulation of a framework with per-parameter
//! gradients (`memory.contiguous_grad_buffer = false`): after every backward of a chunk but
//! its first, so `m - 1` adds per chunk for `m` micro batches, each before the gradients are
//! reduced.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_sim::plan::Plan;
use twin_sim::scenario::framework::Bundled;
use twin_sim::schedule::{generate, OpKind};

#[test]
fn every_backward_but_the_first_of_a_chunk_adds_its_gradients() {
    for (pp, vpp, m) in [(1, 1, 1), (1, 1, 4), (2, 1, 4), (2, 2, 4)] {
        let mut s = twin_sim::testing::small_scenario(1, pp, 2, m);
        s.model.layers = 4 * pp * vpp;
        s.parallel.vpp = vpp;
        if vpp > 1 {
            s.parallel.schedule = twin_sim::scenario::PipelineSchedule::Interleaved1F1B;
        }
        let mut fw = Bundled::MegatronCore.framework().unwrap();
        fw.memory.contiguous_grad_buffer = false;
        s.training.framework = fw;
        let plan = Plan::new(&s).unwrap();
        let sched = generate(&s, &plan).unwrap();
        sched.validate(&plan).unwrap();
        for (stage, program) in sched.programs.iter().enumerate() {
            let adds: Vec<(usize, &twin_sim::schedule::Op)> = program
                .ops
                .iter()
                .enumerate()
                .filter(|(_, o)| {
                    matches!(&o.kind, OpKind::Compute(c) if c.flops == 0
                        && c.phase == twin_sim::schedule::Phase::Backward)
                })
                .collect();
            // The adds of a backward cut into gradient buckets are one per bucket; together
            // they cover the chunk's parameters once per micro batch after the first.
            let bytes: u64 = adds
                .iter()
                .map(|(_, o)| match &o.kind {
                    OpKind::Compute(c) => c.memory_bytes,
                    _ => 0,
                })
                .sum();
            let params: u64 = plan.chunks[stage]
                .iter()
                .map(|l| {
                    let p = twin_sim::workload::chunk_params(&s, &plan, l);
                    p.dense + p.expert
                })
                .sum();
            assert_eq!(
                bytes,
                (m - 1) * 12 * params,
                "pp {pp} vpp {vpp} m {m} stage {stage}"
            );
            assert!(adds.len() as u64 >= (m - 1) * u64::from(vpp));
            // Each add follows a backward of a later micro batch than the chunk's first.
            for (i, op) in adds {
                let deps = op.deps.as_slice();
                assert_eq!(deps.len(), 1);
                let before = &program.ops[deps[0] as usize];
                assert!(matches!(&before.kind, OpKind::Compute(c) if c.flops > 0));
                assert_eq!(before.label.chunk, op.label.chunk);
                assert!(i > deps[0] as usize);
            }
        }
    }
}
