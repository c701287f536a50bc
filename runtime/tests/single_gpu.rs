//! The single-GPU comparison with the simulator's prediction, without a GPU: the caller (here
//! the test, in the product the binary) predicts the scenario with a trace and hands the
//! prediction to the runtime's `compare`, with a rank run by a serial fake backend.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

mod common;
use common::{predict_with_trace, predicted};

use twin_runtime::backend::cuda::single::{check_single_gpu, compare, op_kind};
use twin_runtime::{run_step, Backend, MemoryReport, OpContext, OpTiming, RuntimeError};
use twin_sim::scenario::Scenario;
use twin_sim::schedule::Op;

fn bundled() -> Scenario {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/gpu/llama3-8b-1gpu.toml");
    twin_sim::setup::load(&path, &[]).unwrap()
}

/// Runs ops back to back on one timeline, op i taking (i % 7 + 1) microseconds, so
/// per-kind sums can be checked by hand. Not a performance model.
#[derive(Default)]
struct Serial {
    issued: Vec<u32>,
}

fn fake_ns(index: u32) -> u64 {
    u64::from(index % 7 + 1) * 1000
}

impl Backend for Serial {
    fn name(&self) -> &'static str {
        "serial"
    }
    fn enqueue(&mut self, index: u32, _op: &Op, _ctx: &OpContext) -> Result<(), RuntimeError> {
        self.issued.push(index);
        Ok(())
    }
    fn finish_step(&mut self) -> Result<Vec<OpTiming>, RuntimeError> {
        let mut t = 0;
        Ok(self
            .issued
            .drain(..)
            .map(|index| {
                let start_ns = t;
                t += fake_ns(index);
                OpTiming {
                    index,
                    start_ns,
                    end_ns: t,
                    issued_ns: None,
                    wait_ns: None,
                }
            })
            .collect())
    }
    fn memory(&self) -> MemoryReport {
        MemoryReport::default()
    }
}

#[test]
fn the_bundled_gpu_scenario_is_one_h100_that_fits() {
    let s = bundled();
    check_single_gpu(&s).unwrap();
    assert_eq!(s.cluster.gpu.name, "h100-sxm-80gb");
    let p = predict_with_trace(&s);
    assert!(p.report.fits, "{}", p.report.to_text());
    assert_eq!(p.staged.plan.world, 1);
    assert_eq!(p.staged.plan.microbatches, 4);
}

#[test]
fn the_runtime_account_of_the_schedule_equals_the_simulated_peak() {
    let s = bundled();
    let p = predict_with_trace(&s);
    let mut backend = Serial::default();
    let run = run_step(&p.staged.plan, &p.staged.schedule, 0, &mut backend).unwrap();
    let c = compare(&predicted(&p), &run).unwrap();
    // Same schedule, same Alloc/Free: the runtime's own account and the simulator's peak
    // agree byte for byte, by category.
    assert_eq!(c.schedule_memory.peak_bytes, c.predicted_peak_memory_bytes);
    let b = &c.schedule_memory.peak_breakdown;
    let pm = &c.predicted_memory;
    assert_eq!(
        [b.weights, b.grads, b.optimizer, b.activations, b.buffers],
        [
            pm.weights,
            pm.grads,
            pm.optimizer,
            pm.activations,
            pm.buffers
        ]
    );
    assert_eq!(c.schedule_memory.final_bytes, 0);
    assert!(c.predicted_peak_memory_bytes > 40_000_000_000);
    assert_eq!(c.predicted_step_time_ns, p.result.step_time_ns);
}

#[test]
fn comparison_sums_measured_and_predicted_time_by_kind() {
    let s = bundled();
    let p = predict_with_trace(&s);
    let ops = p.staged.schedule.program(0).ops.clone();
    let run = run_step(
        &p.staged.plan,
        &p.staged.schedule,
        0,
        &mut Serial::default(),
    )
    .unwrap();
    let c = compare(&predicted(&p), &run).unwrap();
    let total_ops: u32 = c.by_kind.iter().map(|r| r.ops).sum();
    assert_eq!(total_ops as usize, ops.len());
    for row in &c.by_kind {
        let want: u64 = (0..ops.len() as u32)
            .filter(|&i| op_kind(&ops[i as usize]) == row.kind)
            .map(fake_ns)
            .sum();
        assert_eq!(row.measured_busy_ns, want, "{}", row.kind);
    }
    let fwd = c.by_kind.iter().find(|r| r.kind == "fwd").unwrap();
    assert!(fwd.predicted_busy_ns > 0);
    let kinds: Vec<&str> = c.by_kind.iter().map(|r| r.kind.as_str()).collect();
    assert!(
        kinds.contains(&"alloc") && kinds.contains(&"optimizer"),
        "{kinds:?}"
    );
    assert_eq!(
        c.measured_step_time_ns,
        (0..ops.len() as u32).map(fake_ns).sum::<u64>()
    );
    assert!(c.measured_mfu > 0.0 && c.predicted_mfu > 0.0);
}
