//! GPU check: doctor, a cuBLAS GEMM sweep against the GPU's peak, and a single-GPU run of a
//! Llama-3-8B layer-stack probe schedule with measured memory. Run on a GPU machine:
//! `cargo run --release -p twin-runtime --example gpu_check [layers] [microbatches]`.

use twin_runtime::backend::cuda::{doctor, dtype::GemmDtype, gemm_sweep, run_single_gpu};
use twin_runtime::probe::{h100, llama_probe};
use twin_sim::schedule::{Gemm, OpKind, Stream};

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

fn main() {
    let args: Vec<u32> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let layers = args.first().copied().unwrap_or(4);
    let microbatches = args.get(1).copied().unwrap_or(2);

    println!("== doctor\n{}", doctor());

    let peak = h100().peak;
    let g = |m, n, k| Gemm { m, n, k, count: 1 };
    let square: Vec<Gemm> = [1024, 2048, 4096, 8192, 16384]
        .iter()
        .map(|&s| g(s, s, s))
        .collect();
    // Llama-3-8B, 2048 tokens: QKV, O, gate+up, down, and the per-head attention GEMMs.
    let llama = [
        g(2048, 6144, 4096),
        g(2048, 4096, 4096),
        g(2048, 28672, 4096),
        g(2048, 4096, 14336),
        g(4096, 28672, 2048),
        Gemm {
            m: 2048,
            n: 2048,
            k: 128,
            count: 32,
        },
        Gemm {
            m: 2048,
            n: 128,
            k: 2048,
            count: 32,
        },
    ];
    for dtype in [GemmDtype::Bf16, GemmDtype::Tf32, GemmDtype::Fp32] {
        let peak_flops = dtype.peak_flops_per_s(&peak);
        println!(
            "== GEMM sweep {} (H100 SXM dense peak {:.1} TFLOP/s)",
            dtype.name(),
            peak_flops / 1e12
        );
        let shapes: Vec<Gemm> = square.iter().chain(llama.iter()).copied().collect();
        let shapes = if dtype == GemmDtype::Fp32 {
            shapes[..4].to_vec()
        } else {
            shapes
        };
        match gemm_sweep(&shapes, dtype, 20) {
            Ok(samples) => {
                for s in samples {
                    println!(
                        "  m={:<6} n={:<6} k={:<6} x{:<3} median {:>9.1} us  best {:>9.1} us  {:>7.1} TFLOP/s  {:>5.1}% of peak",
                        s.gemm.m, s.gemm.n, s.gemm.k, s.gemm.count,
                        s.median_ns as f64 / 1e3, s.best_ns as f64 / 1e3,
                        s.achieved_flops_per_s / 1e12,
                        100.0 * s.achieved_flops_per_s / peak_flops
                    );
                }
            }
            Err(e) => println!("  failed: {e}"),
        }
    }

    println!("== single-GPU probe: Llama-3-8B x {layers} layers, micro batch 1, seq 2048, {microbatches} micro batches");
    let (s, plan, sched) = match llama_probe(layers, microbatches, true) {
        Ok(x) => x,
        Err(e) => {
            println!("  plan failed: {e}");
            std::process::exit(1);
        }
    };
    match run_single_gpu(&s, &plan, &sched, 3) {
        Ok(run) => {
            let ops = &sched.programs[0].ops;
            let steps: Vec<String> = run
                .step_times_ns
                .iter()
                .map(|t| format!("{:.2} ms", *t as f64 / 1e6))
                .collect();
            println!("  step times: {}", steps.join(", "));
            let mut gemm_flops = 0u64;
            let mut compute_ns = 0u64;
            let mut dp_ns = 0u64;
            for (e, op) in run.events.iter().zip(ops) {
                if let OpKind::Compute(c) = &op.kind {
                    gemm_flops += c.flops;
                    compute_ns += e.end_ns - e.start_ns;
                }
                if op.stream == Stream::Dp {
                    dp_ns += e.end_ns - e.start_ns;
                }
            }
            let mfu = gemm_flops as f64 / (run.step_time_ns as f64 * 1e-9) / peak.bf16_flops_per_s;
            println!(
                "  last step {:.2} ms; compute ops busy {:.2} ms; dp all-reduce busy {:.2} ms (overlapped on its own stream); model FLOPs {:.2} TFLOP -> {:.1}% of bf16 peak",
                run.step_time_ns as f64 / 1e6, compute_ns as f64 / 1e6, dp_ns as f64 / 1e6,
                gemm_flops as f64 / 1e12, 100.0 * mfu
            );
            for (e, op) in run.events.iter().zip(ops).take(12) {
                println!(
                    "    op {:>3} {:<8} {:<28} {:>10.1} .. {:>10.1} us",
                    e.op,
                    op.stream.name(),
                    op.name(),
                    e.start_ns as f64 / 1e3,
                    e.end_ns as f64 / 1e3
                );
            }
            let m = &run.memory;
            let d = &run.device_memory;
            println!("  schedule's own account (what the plan says is held): peak {:.2} GiB = weights {:.2} + grads {:.2} + optimizer {:.2} + activations {:.2}",
                gib(m.peak_bytes), gib(m.peak_breakdown.weights), gib(m.peak_breakdown.grads), gib(m.peak_breakdown.optimizer), gib(m.peak_breakdown.activations));
            let o = |v: Option<u64>| v.map_or("n/a".to_string(), |b| format!("{:.2} GiB", gib(b)));
            println!("  measured: allocator peak {} (reserved {}; held in reserve at step start {}), device used before step {}, after step {}, baseline (context + cuBLAS) {}, runtime workspace {:.2} GiB, total {}",
                o(d.allocator_peak_bytes), o(d.allocator_reserved_peak_bytes), o(d.allocator_reserved_at_start_bytes), o(d.used_before_step_bytes), o(d.used_after_step_bytes), o(d.baseline_used_bytes), gib(d.workspace_bytes), o(d.total_bytes));
            for n in &d.notes {
                println!("  note: {n}");
            }
            match serde_json::to_string(&run.device_memory) {
                Ok(j) => println!("  device_memory json: {j}"),
                Err(e) => println!("  json failed: {e}"),
            }
        }
        Err(e) => {
            println!("  run failed: {e}");
            std::process::exit(1);
        }
    }
}
