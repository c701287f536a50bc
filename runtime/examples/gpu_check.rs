//! GPU check: doctor, a cuBLAS GEMM sweep against the GPU's peak, and a single-GPU scenario's
//! generated schedule run for a few steps, printed next to the simulator's prediction of the
//! same schedule (step time, busy time per kind of op, peak memory by category). Run on a GPU
//! machine:
//! `cargo run --release -p twin-runtime --example gpu_check [SCENARIO] [--steps N] [--no-sweep]
//! [--release-pool]` (default scenario: scenarios/gpu/llama3-8b-1gpu.toml; `--release-pool`
//! trims the allocator pool after every step, to measure what mapping memory costs).

use twin_runtime::backend::cuda::single::{Comparison, Predicted};
use twin_runtime::backend::cuda::{
    doctor, dtype::GemmDtype, gemm_sweep, run_scenario_single_gpu, CudaOptions,
};
use twin_runtime::probe::h100;
use twin_sim::schedule::Gemm;

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

struct Args {
    scenario: String,
    steps: u32,
    sweep: bool,
    keep_pool: bool,
}

fn args() -> Args {
    let mut a = Args {
        scenario: "scenarios/gpu/llama3-8b-1gpu.toml".into(),
        steps: 4,
        sweep: true,
        keep_pool: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--steps" => a.steps = it.next().and_then(|s| s.parse().ok()).unwrap_or(a.steps),
            "--no-sweep" => a.sweep = false,
            "--release-pool" => a.keep_pool = false,
            _ => a.scenario = arg,
        }
    }
    a
}

fn sweep() {
    let peak = h100().peak;
    let g = |m, n, k| Gemm::single(m, n, k, 1);
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
            dtype: None,
            m: 2048,
            n: 2048,
            k: 128,
            count: 32,
            batch: 32,
        },
        Gemm {
            dtype: None,
            m: 2048,
            n: 128,
            k: 2048,
            count: 32,
            batch: 32,
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
}

fn print_comparison(c: &Comparison) {
    let steps: Vec<String> = c
        .measured_step_times_ns
        .iter()
        .map(|t| format!("{:.2}", ms(*t)))
        .collect();
    println!("  measured step times (ms): {}", steps.join(", "));
    println!(
        "  step time: predicted {:.2} ms, measured {:.2} ms (last step), measured/predicted {:.3}",
        ms(c.predicted_step_time_ns),
        ms(c.measured_step_time_ns),
        c.measured_step_time_ns as f64 / c.predicted_step_time_ns.max(1) as f64
    );
    println!(
        "  MFU: predicted {:.1}%, measured {:.1}%",
        100.0 * c.predicted_mfu,
        100.0 * c.measured_mfu
    );
    println!(
        "  busy time by kind of op:\n    {:<22} {:>5} {:>14} {:>14} {:>8}",
        "kind", "ops", "predicted ms", "measured ms", "ratio"
    );
    for r in &c.by_kind {
        let ratio = if r.predicted_busy_ns == 0 {
            "-".to_string()
        } else {
            format!(
                "{:.3}",
                r.measured_busy_ns as f64 / r.predicted_busy_ns as f64
            )
        };
        println!(
            "    {:<22} {:>5} {:>14.3} {:>14.3} {:>8}",
            r.kind,
            r.ops,
            ms(r.predicted_busy_ns),
            ms(r.measured_busy_ns),
            ratio
        );
    }
    let p = &c.predicted_memory;
    let s = &c.schedule_memory.peak_breakdown;
    println!(
        "  peak memory by category (GiB):\n    {:<12} {:>10} {:>10}",
        "category", "predicted", "schedule"
    );
    for (name, a, b) in [
        ("weights", p.weights, s.weights),
        ("grads", p.grads, s.grads),
        ("optimizer", p.optimizer, s.optimizer),
        ("activations", p.activations, s.activations),
        ("buffers", p.buffers, s.buffers),
        ("reserved", p.reserved, s.reserved),
    ] {
        println!("    {name:<12} {:>10.3} {:>10.3}", gib(a), gib(b));
    }
    println!(
        "    {:<12} {:>10.3} {:>10.3}",
        "total",
        gib(c.predicted_peak_memory_bytes),
        gib(c.schedule_memory.peak_bytes)
    );
    let d = &c.device_memory;
    let o = |v: Option<u64>| v.map_or("n/a".to_string(), |b| format!("{:.3} GiB", gib(b)));
    println!(
        "  measured: allocator used high-water {} (reserved high-water {}; held in reserve at step start {}), baseline (context + cuBLAS) {}, runtime workspace {:.3} GiB, device used before last step {}, after {}, total {}",
        o(d.allocator_peak_bytes),
        o(d.allocator_reserved_peak_bytes),
        o(d.allocator_reserved_at_start_bytes),
        o(d.baseline_used_bytes),
        gib(d.workspace_bytes),
        o(d.used_before_step_bytes),
        o(d.used_after_step_bytes),
        o(d.total_bytes)
    );
    if let (Some(base), Some(pool)) = (d.baseline_used_bytes, d.allocator_reserved_peak_bytes) {
        println!(
            "  measured device peak = baseline + workspace + pool reserved high-water = {:.3} GiB (predicted {:.3} GiB)",
            gib(base + d.workspace_bytes + pool),
            gib(c.predicted_peak_memory_bytes)
        );
    }
    for n in &d.notes {
        println!("  note: {n}");
    }
}

fn main() {
    let a = args();
    println!("== doctor\n{}", doctor());
    if a.sweep {
        sweep();
    }
    println!("== generated single-GPU schedule: {}", a.scenario);
    let scenario = match twin_sim::setup::load(std::path::Path::new(&a.scenario), &[]) {
        Ok(s) => s,
        Err(e) => {
            println!("  scenario failed: {e}");
            std::process::exit(2);
        }
    };
    let options = CudaOptions {
        keep_pool_between_steps: a.keep_pool,
        ..CudaOptions::default()
    };
    if !a.keep_pool {
        println!("  (--release-pool: the allocator pool is trimmed after every step)");
    }
    // The simulator's prediction of the same scenario, with a trace (per-op times).
    let opts = twin_sim::PredictOptions {
        trace: true,
        reproducible: true,
        ..twin_sim::PredictOptions::default()
    };
    let p = match twin_sim::predict(&scenario, &opts) {
        Ok(p) => p,
        Err(e) => {
            println!("  prediction failed: {e}");
            std::process::exit(1);
        }
    };
    let predicted = Predicted {
        scenario: &p.staged.scenario,
        plan: &p.staged.plan,
        schedule: &p.staged.schedule,
        result: &p.result,
        report: &p.report,
    };
    match run_scenario_single_gpu(&predicted, a.steps, options) {
        Ok(r) => {
            print_comparison(&r.comparison);
            let ops = r.run.events.len();
            println!("  first ops of the last step ({ops} ops in all):");
            for e in r.run.events.iter().take(8) {
                println!(
                    "    op {:>4} {:<8} {:>10.1} .. {:>10.1} us",
                    e.op,
                    e.stream.name(),
                    e.start_ns as f64 / 1e3,
                    e.end_ns as f64 / 1e3
                );
            }
            match serde_json::to_string(&r.comparison) {
                Ok(j) => println!("  comparison json: {j}"),
                Err(e) => println!("  json failed: {e}"),
            }
        }
        Err(e) => {
            println!("  run failed: {e}");
            std::process::exit(1);
        }
    }
}
