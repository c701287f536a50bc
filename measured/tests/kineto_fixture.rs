#![cfg(test)]
//! The real H200 trace in tests/data/h200-hf-llama (its README.md and meta.json describe the
//! job): one profiled training step of an 8-layer Llama-3-8B-shaped HF model on one GPU, 4
//! micro batches, autocast bf16 over fp32 weights, fused AdamW.

use std::io::Read;
use std::path::PathBuf;
use twin_measured::kineto::{
    breakdown, class_totals, read_trace, read_traces, KernelClass, RankTrace, StepSource,
};

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/h200-hf-llama")
}

fn fixture() -> PathBuf {
    data_dir().join("hf-llama-L8-mb1-gb4-s2048-h200.trace.json.gz")
}

fn trace() -> RankTrace {
    read_trace(&fixture()).unwrap()
}

/// The fixture's events, read independently of the reader under test (serde_json::Value).
fn events() -> Vec<serde_json::Value> {
    let mut json = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(fixture()).unwrap())
        .read_to_string(&mut json)
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v["traceEvents"].as_array().unwrap().clone()
}

/// meta.json's `step_s_profiled`: the profiled step's wall time (the README's 358 ms), in ns.
fn profiled_step_ns() -> f64 {
    let meta = std::fs::read_to_string(data_dir().join("hf-llama-L8-mb1-gb4-s2048-h200.meta.json"))
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&meta).unwrap();
    v["step_s_profiled"].as_f64().unwrap() * 1e9
}

#[test]
fn one_step_spanning_the_profiled_step() {
    let t = trace();
    // The job profiled one step without `prof.step()`, so the trace has no ProfilerStep#N
    // markers: the step is the GPU activity's extent.
    assert_eq!(t.step_source, StepSource::WholeTrace);
    assert_eq!(t.steps.len(), 1);
    // The GPU timeline misses the CPU's launch latency before the first kernel and whatever
    // the wall clock saw after the last one, so it is a little shorter than the profiled step;
    // 3% allows that (about 11 ms).
    let step_ns = t.steps[0].dur_ns as f64;
    let want = profiled_step_ns();
    assert!(
        (step_ns / want - 1.0).abs() < 0.03,
        "step {step_ns} ns vs profiled {want} ns"
    );
    assert!(
        step_ns <= want,
        "the GPU span is inside the wall-clock step"
    );
    // The profiler's own window holds the step.
    let w = t.window.as_ref().unwrap();
    assert!(w.start_ns <= t.steps[0].start_ns && t.steps[0].end_ns() <= w.end_ns());
}

#[test]
fn every_gpu_activity_read_with_its_time() {
    let t = trace();
    let gpu: Vec<_> = events()
        .into_iter()
        .filter(|e| {
            matches!(
                e["cat"].as_str(),
                Some("kernel" | "gpu_memcpy" | "gpu_memset")
            )
        })
        .collect();
    assert_eq!(t.kernels.len(), gpu.len());
    // Durations: each rounded to the ns, so the sums agree within 0.5 ns per activity.
    let want_ns: f64 = gpu.iter().map(|e| e["dur"].as_f64().unwrap() * 1e3).sum();
    let got_ns: u64 = t.kernels.iter().map(|k| k.dur_ns).sum();
    assert!((got_ns as f64 - want_ns).abs() <= 0.5 * gpu.len() as f64 + 1.0);
    // The first activity starts where the JSON says, relative to the earliest ts kept.
    let first_us = gpu
        .iter()
        .map(|e| e["ts"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    let first = t.kernels.first().unwrap();
    let abs_ns = t.origin_ns + first.start_ns as i64;
    assert!((abs_ns as f64 - first_us * 1e3).abs() <= 1.0);
    assert!(t.kernels.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
}

#[test]
fn classes_and_idle_sum_exactly_to_the_step() {
    let t = trace();
    let b = breakdown(&t, 0).unwrap();
    let classes: u64 = b.by_class_ns.iter().map(|(_, ns)| ns).sum();
    assert_eq!(classes + b.idle_ns, b.step_ns);
    assert_eq!(b.step_ns, t.steps[0].dur_ns);
    assert_eq!(b.kernels as usize, t.kernels.len());
    // One stream: nothing overlaps, so each class's exclusive time is its summed durations,
    // and busy time is every duration summed.
    let streams: std::collections::BTreeSet<i64> = t.kernels.iter().map(|k| k.stream).collect();
    assert_eq!(streams.len(), 1, "the fixture ran on one stream");
    let totals = class_totals(&t, Some(0)).unwrap();
    for total in &totals {
        assert_eq!(b.class_ns(total.class), total.busy_ns, "{}", total.class);
    }
    let busy: u64 = t.kernels.iter().map(|k| k.dur_ns).sum();
    assert_eq!(b.step_ns - b.idle_ns, busy);
}

/// The README: "GEMMs took 45% of the CUDA time. Casts and copies (`aten::copy_`,
/// `_to_copy`...) took about 18%, the fused AdamW 7.5%, and the rest was elementwise
/// kernels." CUDA time is the summed duration of all GPU activity.
#[test]
fn shares_of_cuda_time_match_the_readme() {
    let t = trace();
    let totals = class_totals(&t, None).unwrap();
    let cuda_ns: u64 = totals.iter().map(|c| c.busy_ns).sum();
    let share = |ns: u64| 100.0 * ns as f64 / cuda_ns as f64;
    let class = |c: KernelClass| totals.iter().find(|t| t.class == c).unwrap().busy_ns;

    // "45%", a rounded figure: within 2 points.
    let gemm = share(class(KernelClass::Gemm));
    assert!((gemm - 45.0).abs() < 2.0, "gemm {gemm:.1}%");
    // "7.5%": within 1 point.
    let adamw = share(class(KernelClass::Optimizer));
    assert!((adamw - 7.5).abs() < 1.0, "optimizer {adamw:.1}%");
    // "about 18%": within 2 points. Casts are elementwise kernels; what marks them is the op
    // that launched them (the innermost op: `aten::copy_` under `aten::_to_copy`).
    let copies: u64 = t
        .kernels
        .iter()
        .filter(|k| matches!(k.op.as_deref(), Some("aten::copy_" | "aten::_to_copy")))
        .map(|k| k.dur_ns)
        .sum();
    let copies = share(copies);
    assert!((copies - 18.0).abs() < 2.0, "casts and copies {copies:.1}%");
    // "the rest was elementwise": the casts' kernels are in the elementwise class (or memcpy).
    assert!(t
        .kernels
        .iter()
        .filter(|k| k.op.as_deref() == Some("aten::copy_"))
        .all(|k| matches!(k.class, KernelClass::Elementwise | KernelClass::Memcpy)));
    // SDPA ran (cuDNN attention): some attention time, well below the GEMMs.
    let attention = share(class(KernelClass::Attention));
    assert!(
        attention > 1.0 && attention < gemm,
        "attention {attention:.1}%"
    );
}

#[test]
fn single_gpu_means_no_communication() {
    let t = trace();
    assert!(t.kernels.iter().all(|k| k.collective.is_none()));
    let b = breakdown(&t, 0).unwrap();
    assert_eq!(b.comm_ns, 0);
    assert_eq!(b.exposed_comm_ns, 0);
    assert_eq!(b.class_ns(KernelClass::Collective), 0);
    assert_eq!(b.class_ns(KernelClass::P2p), 0);
    assert_eq!(t.rank, None);
}

#[test]
fn every_kernel_launched_by_a_gemm_op_is_a_gemm() {
    let t = trace();
    let mm: Vec<_> = t
        .kernels
        .iter()
        .filter(|k| k.op.as_deref() == Some("aten::mm"))
        .collect();
    assert!(!mm.is_empty());
    // cuBLAS also zeroes workspaces with memsets under aten::mm: those stay memsets.
    assert!(mm
        .iter()
        .all(|k| k.class == KernelClass::Gemm || k.class == KernelClass::Memset));
}

#[test]
fn the_fixture_directory_reads_as_one_rank() {
    // The directory also holds meta.json: only the file named *.trace.json.gz is a trace.
    let traces = read_traces(&data_dir()).unwrap();
    assert_eq!(traces.len(), 1);
    assert_eq!(traces[0].kernels.len(), trace().kernels.len());
}

/// The GEMMs' shapes, from their ops' "Input Dims", against the model the README describes:
/// per layer q and o projections 4096 x 4096, k and v 4096 x 1024 (8 KV heads of 128), gate,
/// up and down 4096 x 14336, and the untied LM head 4096 x 128256; 4 micro batches of 2048
/// tokens. Every matmul runs once forward and twice backward (input and weight gradients), so
/// the `aten::mm` FLOPs are exactly 6 x matmul parameters x tokens.
#[test]
fn gemm_shapes_give_the_models_flops() {
    let t = trace();
    let layer: u64 = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336;
    let params = 8 * layer + 4096 * 128_256;
    let tokens = 4 * 2048;
    let mut flops = 0u64;
    let mut gemms = 0;
    for k in t
        .kernels
        .iter()
        .filter(|k| k.op.as_deref() == Some("aten::mm"))
    {
        if k.class != KernelClass::Gemm {
            continue;
        }
        let [a, b] = &k.op_input_dims[..] else {
            panic!("aten::mm with inputs {:?}", k.op_input_dims)
        };
        let ([m, k1], [k2, n]) = (&a[..], &b[..]) else {
            panic!("aten::mm of {a:?} and {b:?}")
        };
        assert_eq!(k1, k2, "inner dimensions agree");
        assert_eq!(
            k.op_input_types,
            ["c10::BFloat16", "c10::BFloat16"],
            "autocast bf16"
        );
        flops += 2 * m * k1 * n;
        gemms += 1;
    }
    // 7 matmuls per layer x 8 layers + the head, x 3, x 4 micro batches.
    assert_eq!(gemms, (7 * 8 + 1) * 3 * 4);
    assert_eq!(flops, 6 * params * tokens);
}
