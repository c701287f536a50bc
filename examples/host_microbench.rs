//! Microbenchmarks of the host backend's own building blocks, and a hardware profile fitted
//! to them (docs/validation.md, "verify"): the GEMM curve from single-threaded sgemm calls at
//! the GEMM shapes of the given scenarios plus a generic sweep, the memory-bound axpy pass,
//! the allocate-and-touch rate of an Alloc, and loopback TCP frames (p2p: one-way send +
//! checked receive; ring step: a send on a helper thread while receiving, as collectives do).
//! It never runs a scenario's schedule: only these calls, so the profile can be checked
//! against `twin verify` without having been fitted to it. Stand-in for `twin calibrate`.
//!
//!   cargo run --release --example host_microbench -- scenarios/host/*.toml > profile.toml

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::BTreeSet;
use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::time::Instant;
use twin_runtime::backend::host::{Held, Workspace};
use twin_runtime::backend::Allocation;
use twin_runtime::transport::frame::{read_frame_at, write_frame};
use twin_sim::scenario::Precision;
use twin_sim::schedule::{
    ComputeOp, Device, Gemm, Label, MemCategory, Op, OpKind, Phase, Program, Stream,
};

/// Seconds of `reps` runs of `f` after one warm-up run. Outlier rule: the fastest repetition
/// (noise on a machine shared with other work only ever adds time, so the best run estimates
/// the uncontended time); with `TWIN_BENCH_RULE=median`, the median (the typical time under
/// the machine's current load).
fn time_best(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut v: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    pick(&mut v)
}

/// The estimate of a set of timings under the stated rule (see [`time_best`]).
fn pick(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let median = std::env::var("TWIN_BENCH_RULE").is_ok_and(|r| r == "median");
    let i = if median { v.len() / 2 } else { 0 };
    v.get(i).copied().unwrap_or(0.0)
}

/// Weighted least squares minimising the relative error: rows x, targets y (all > 0).
/// Returns coefficients, their standard errors, and the rms relative residual.
fn fit_relative(x: &[Vec<f64>], y: &[f64]) -> (Vec<f64>, Vec<f64>, f64) {
    let p = x[0].len();
    let mut a = vec![vec![0.0; p]; p];
    let mut b = vec![0.0; p];
    for (row, &t) in x.iter().zip(y) {
        let w = 1.0 / (t * t);
        for i in 0..p {
            b[i] += w * row[i] * t;
            for j in 0..p {
                a[i][j] += w * row[i] * row[j];
            }
        }
    }
    let inv = invert(a);
    let c: Vec<f64> = (0..p)
        .map(|i| (0..p).map(|j| inv[i][j] * b[j]).sum())
        .collect();
    let resid: Vec<f64> = x
        .iter()
        .zip(y)
        .map(|(row, &t)| (row.iter().zip(&c).map(|(r, c)| r * c).sum::<f64>() - t) / t)
        .collect();
    let dof = (y.len().saturating_sub(p)).max(1) as f64;
    let s2 = resid.iter().map(|r| r * r).sum::<f64>() / dof;
    let se = (0..p).map(|i| (inv[i][i] * s2).sqrt()).collect();
    let rms = (resid.iter().map(|r| r * r).sum::<f64>() / y.len() as f64).sqrt();
    (c, se, rms)
}

/// Gauss-Jordan inverse of a small symmetric positive matrix.
fn invert(mut a: Vec<Vec<f64>>) -> Vec<Vec<f64>> {
    let n = a.len();
    let mut inv: Vec<Vec<f64>> = (0..n)
        .map(|i| (0..n).map(|j| if i == j { 1.0 } else { 0.0 }).collect())
        .collect();
    for col in 0..n {
        let piv = (col..n)
            .max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))
            .unwrap_or(col);
        a.swap(col, piv);
        inv.swap(col, piv);
        let d = a[col][col];
        for j in 0..n {
            a[col][j] /= d;
            inv[col][j] /= d;
        }
        for i in 0..n {
            if i != col {
                let f = a[i][col];
                for j in 0..n {
                    a[i][j] -= f * a[col][j];
                    inv[i][j] -= f * inv[col][j];
                }
            }
        }
    }
    inv
}

fn compute_program(op: ComputeOp) -> Program {
    Program {
        stage: 0,
        ops: vec![Op {
            stream: Stream::Compute,
            kind: OpKind::Compute(op),
            deps: vec![],
            label: Label::default(),
        }],
    }
}

fn gemm_op(g: Gemm, memory_bytes: u64) -> ComputeOp {
    ComputeOp {
        phase: Phase::Forward,
        dtype: Precision::Fp32,
        gemms: if g.m > 0 { vec![g] } else { vec![] },
        flops: g.flops(),
        memory_bytes,
        kernels: 1,
    }
}

/// GEMM shapes of the scenarios' schedules, plus a generic sweep.
fn shapes(paths: &[String]) -> BTreeSet<(u64, u64, u64)> {
    let mut out = BTreeSet::new();
    for p in paths {
        let Ok(s) = twin_sim::scenario::load(std::path::Path::new(p), &[]) else {
            eprintln!("skipping {p}: cannot load");
            continue;
        };
        let Ok(st) = twin_sim::Staged::new(&s) else {
            continue;
        };
        for prog in &st.schedule.programs {
            for op in &prog.ops {
                if let OpKind::Compute(c) = &op.kind {
                    for g in &c.gemms {
                        out.insert((g.m, g.n, g.k));
                    }
                }
            }
        }
    }
    for &m in &[32u64, 64, 128, 256] {
        for &n in &[32u64, 128, 512] {
            for &k in &[32u64, 128, 512] {
                out.insert((m, n, k));
            }
        }
    }
    out
}

struct Fit {
    value: f64,
    se: f64,
}

/// `dim` rounded up to a whole number of `tile`s.
fn padded(dim: u64, tile: u64) -> f64 {
    (dim.div_ceil(tile) * tile) as f64
}

/// The GEMM curve of `twin_sim::cost::GemmCurve` with `max_efficiency = 1`:
/// t = 2 pad(m) pad(n) (k + k_half) / peak + ramp, linear in (1/peak, k_half/peak, ramp) for
/// fixed tiles; the tiles are a grid search (1, 8, 16, 32, 64 each) on the rms relative error.
#[allow(clippy::type_complexity)]
fn gemm_fit(paths: &[String]) -> (Fit, Fit, Fit, f64, usize, u64, u64) {
    let mut samples = Vec::new();
    for (m, n, k) in shapes(paths) {
        let g = Gemm { m, n, k, count: 1 };
        let op = gemm_op(g, 0);
        let mut ws = Workspace::for_program(&compute_program(op.clone()));
        // Enough calls per sample for ~1 ms of work.
        let calls = ((1e-3 * 2e10 / g.flops().max(1) as f64).ceil() as u32).clamp(1, 2000);
        let batch = gemm_op(Gemm { count: calls, ..g }, 0);
        let t = time_best(9, || ws.run_gemms(&batch)) / f64::from(calls);
        samples.push((m, n, k, t));
    }
    let y: Vec<f64> = samples.iter().map(|s| s.3).collect();
    let mut best: Option<(f64, u64, u64, Vec<f64>, Vec<f64>, Vec<Vec<f64>>)> = None;
    for tm in [1u64, 8, 16, 32, 64] {
        for tn in [1u64, 8, 16, 32, 64] {
            let x: Vec<Vec<f64>> = samples
                .iter()
                .map(|&(m, n, k, _)| {
                    let mn = padded(m, tm) * padded(n, tn);
                    vec![2.0 * mn * k as f64, 2.0 * mn, 1.0]
                })
                .collect();
            let (c, se, rms) = fit_relative(&x, &y);
            if c.iter().all(|v| v.is_finite())
                && c[0] > 0.0
                && best.as_ref().map_or(true, |b| rms < b.0)
            {
                best = Some((rms, tm, tn, c, se, x));
            }
        }
    }
    let Some((rms, tm, tn, c, se, x)) = best else {
        panic!("no GEMM fit");
    };
    if std::env::var_os("TWIN_BENCH_VERBOSE").is_some() {
        for ((row, t), s) in x.iter().zip(&y).zip(&samples) {
            let fit = row.iter().zip(&c).map(|(r, c)| r * c).sum::<f64>();
            eprintln!(
                "gemm {}x{}x{}: measured {:.2} us, fitted {:.2} us ({:+.0}%), {:.1} GFLOP/s",
                s.0,
                s.1,
                s.2,
                t * 1e6,
                fit * 1e6,
                (fit - t) / t * 100.0,
                2.0 * (s.0 * s.1 * s.2) as f64 / t / 1e9
            );
        }
    }
    // t = 2 pad(m) pad(n) (k + k_half) / peak + ramp.
    let peak = 1.0 / c[0];
    let peak_se = se[0] / (c[0] * c[0]);
    let k_half = c[1] / c[0];
    let k_half_se = ((se[1] / c[0]).powi(2) + (c[1] * se[0] / (c[0] * c[0])).powi(2)).sqrt();
    (
        Fit {
            value: peak,
            se: peak_se,
        },
        Fit {
            value: k_half.max(0.0),
            se: k_half_se,
        },
        Fit {
            value: (c[2] * 1e9).max(0.0),
            se: se[2] * 1e9,
        },
        rms,
        y.len(),
        tm,
        tn,
    )
}

/// Axpy pass of `memory_bytes`: bytes/s and a fixed cost per op.
fn memory_fit() -> (Fit, f64) {
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for kib in [64u64, 256, 1024, 4096, 16384] {
        let bytes = kib * 1024;
        let op = gemm_op(
            Gemm {
                m: 0,
                n: 0,
                k: 0,
                count: 0,
            },
            bytes,
        );
        let mut ws = Workspace::for_program(&compute_program(op.clone()));
        let t = time_best(15, || ws.run_memory(&op));
        x.push(vec![bytes as f64, 1.0]);
        y.push(t);
    }
    let (c, se, rms) = fit_relative(&x, &y);
    (
        Fit {
            value: 1.0 / c[0],
            se: se[0] / (c[0] * c[0]),
        },
        rms,
    )
}

/// Allocate-and-touch rate of the backend's Alloc, in steady state (alloc, free, again).
fn alloc_fit() -> Fit {
    let (mut x, mut y) = (Vec::new(), Vec::new());
    let mut held = Held::default();
    for mib in [1u64, 4, 16, 64] {
        let bytes = mib << 20;
        let a = Allocation {
            tag: 1,
            category: MemCategory::Activations,
            device: Device::Gpu,
            bytes,
        };
        let t = time_best(9, || {
            let _ = held.alloc(a, 0, 0);
            let _ = held.free(1);
        });
        x.push(vec![bytes as f64, 1.0]);
        y.push(t);
    }
    let (c, se, _) = fit_relative(&x, &y);
    Fit {
        value: 1.0 / c[0],
        se: se[0] / (c[0] * c[0]),
    }
}

fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("listen");
    let a = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
    let (b, _) = l.accept().expect("accept");
    a.set_nodelay(true).ok();
    b.set_nodelay(true).ok();
    (a, b)
}

/// Loopback frames: latency and bandwidth of a p2p transfer (one way, from a ping-pong) and
/// of a ring step (a helper-thread send while receiving, both directions at once).
fn tcp_fit(exchange: bool) -> (Fit, Fit, f64) {
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for kib in [1u64, 4, 16, 64, 256, 1024, 4096] {
        let bytes = (kib * 1024) as usize;
        let (a, b) = pair();
        let payload = vec![7u8; bytes];
        let echo = {
            let payload = payload.clone();
            std::thread::spawn(move || {
                let mut s = &b;
                for _ in 0..40 {
                    if exchange {
                        std::thread::scope(|sc| {
                            let h = sc.spawn(|| write_frame(&mut &b, 0, 1, &payload, false));
                            let _ = read_frame_at(&mut s, 0, Some(1), Some(bytes as u64));
                            let _ = h.join();
                        });
                    } else {
                        let _ = read_frame_at(&mut s, 0, Some(1), Some(bytes as u64));
                        let _ = write_frame(&mut s, 0, 1, &payload, false);
                    }
                }
            })
        };
        let mut times = Vec::new();
        for _ in 0..40 {
            let t = Instant::now();
            if exchange {
                std::thread::scope(|sc| {
                    let h = sc.spawn(|| write_frame(&mut &a, 1, 1, &payload, false));
                    let _ = read_frame_at(&mut &a, 1, Some(1), Some(bytes as u64));
                    let _ = h.join();
                });
                times.push(t.elapsed().as_secs_f64());
            } else {
                let _ = write_frame(&mut &a, 1, 1, &payload, false);
                let _ = read_frame_at(&mut &a, 1, Some(1), Some(bytes as u64));
                times.push(t.elapsed().as_secs_f64() / 2.0);
            }
        }
        let _ = echo.join();
        x.push(vec![bytes as f64, 1.0]);
        y.push(pick(&mut times));
    }
    let (c, se, rms) = fit_relative(&x, &y);
    (
        Fit {
            value: 1.0 / c[0],
            se: se[0] / (c[0] * c[0]),
        },
        Fit {
            value: (c[1] * 1e9).max(0.0),
            se: se[1] * 1e9,
        },
        rms,
    )
}

fn param(value: f64, f: Option<&Fit>, what: &str) -> String {
    match f {
        Some(f) => {
            let lo = (value - 1.96 * f.se).max(0.0);
            let hi = value + 1.96 * f.se;
            format!("{{ value = {value:.6e}, source = \"fitted\", ref = \"{what}\", ci95 = [{lo:.6e}, {hi:.6e}] }}")
        }
        None => format!("{{ value = {value}, source = \"published\", ref = \"{what}\" }}"),
    }
}

fn main() {
    let paths: Vec<String> = std::env::args().skip(1).collect();
    if std::env::var_os("TWIN_BENCH_OPS").is_some() {
        op_diagnosis(&paths);
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (peak, k_half, ramp, gemm_rms, gemm_n, tile_m, tile_n) = gemm_fit(&paths);
    let (mem, mem_rms) = memory_fit();
    let alloc = alloc_fit();
    let (p2p_bw, p2p_lat, p2p_rms) = tcp_fit(false);
    let (ring_bw, ring_lat, ring_rms) = tcp_fit(true);
    let date = std::process::Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%d")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|x| x.trim().to_string())
        })
        .unwrap_or_default();
    let g = |v: f64, f: &Fit, w: &str| param(v, Some(f), w);
    let mut o = String::new();
    let gemm_ref = format!("examples/host_microbench.rs: relative least squares t = 2 pad(m) pad(n) (k + k_half)/peak + ramp over {gemm_n} sgemm shapes (scenario shapes + sweep), rms {:.1}%", gemm_rms * 100.0);
    o += "# Hardware profile of this machine's host backend, fitted to microbenchmarks only\n";
    o += "# (examples/host_microbench.rs: sgemm calls, the axpy pass, Alloc, loopback TCP frames).\n";
    o += "# Never fitted to `twin verify` runs. Stand-in until `twin calibrate --backend host` lands.\n\n";
    o += "name = \"host-draft\"\n";
    o += &format!("description = \"host backend on {cpu}: one CPU core per rank, f32 sgemm (matrixmultiply), loopback TCP\"\n\n");
    o += "[gpu]\nname = \"cpu-core\"\n";
    o += &format!("sm_count = {}\n", param(1.0, None, "one core per rank"));
    o += &format!(
        "hbm_bandwidth_bytes_per_s = {}\n\n",
        g(
            mem.value,
            &mem,
            &format!(
                "axpy pass over 64KiB-16MiB, 12 bytes per element, rms {:.1}%",
                mem_rms * 100.0
            )
        )
    );
    o += "[gpu.peak_flops_per_s]\n";
    for d in ["fp32", "tf32", "fp16", "bf16", "fp8"] {
        o += &format!(
            "{d} = {}\n",
            g(
                peak.value,
                &peak,
                &format!("{gemm_ref}; the host computes every dtype in f32")
            )
        );
    }
    o += "\n[gemm]\n";
    o += &format!(
        "max_efficiency = {}\n",
        param(1.0, None, "peak is the fitted sgemm rate itself")
    );
    o += &format!("k_half = {}\n", g(k_half.value.round(), &k_half, &gemm_ref));
    o += &format!(
        "tile_m = {{ value = {tile_m}, source = \"fitted\", ref = \"grid 1, 8, 16, 32, 64 in the GEMM fit\" }}\n\
         tile_n = {{ value = {tile_n}, source = \"fitted\", ref = \"as tile_m\" }}\n"
    );
    o += &format!("ramp_ns = {}\n\n", g(ramp.value.round(), &ramp, &gemm_ref));
    o += "[memory]\n";
    o += &format!(
        "efficiency = {}\n",
        param(
            1.0,
            None,
            "hbm_bandwidth_bytes_per_s is the achieved axpy rate"
        )
    );
    o += &format!(
        "alloc_bytes_per_s = {}\n\n",
        g(
            alloc.value,
            &alloc,
            "Held::alloc + free of 1-64 MiB in steady state (allocate, write every byte)"
        )
    );
    o += "[kernel]\n";
    o += &format!(
        "launch_ns = {}\n\n",
        param(0.0, None, "no kernel launches on the host")
    );
    o += "[network]\nalgorithm = \"ring\"\n\n";
    for tier in ["intra", "inter"] {
        o += &format!("[network.{tier}]\n");
        o += &format!(
            "bandwidth_bytes_per_s = {}\n",
            g(
                p2p_bw.value,
                &p2p_bw,
                &format!(
                    "loopback TCP frames 1KiB-4MiB, one way from ping-pong, rms {:.1}%",
                    p2p_rms * 100.0
                )
            )
        );
        o += &format!("latency_ns = {}\n", g(ring_lat.value.round(), &ring_lat, &format!("collective step: a ring step (helper-thread send while receiving) 1KiB-4MiB, rms {:.1}%; ring-step bandwidth {:.3e} B/s", ring_rms * 100.0, ring_bw.value)));
        o += &format!(
            "p2p_latency_ns = {}\n",
            g(
                p2p_lat.value.round(),
                &p2p_lat,
                "intercept of the p2p fit above"
            )
        );
        o += &format!(
            "efficiency = {}\n\n",
            param(1.0, None, "bandwidth is the achieved rate")
        );
    }
    o += &format!(
        "[host]\ncores = {}\n\n",
        param(cores as f64, None, "available_parallelism of the machine")
    );
    o += "[provenance]\n";
    o += &format!("machine = \"{} ({cpu}, {cores} cores)\"\n", host.trim());
    o += &format!("date = \"{date}\"\nbackend = \"host\"\nversions = \"twin {}, examples/host_microbench.rs\"\n", env!("CARGO_PKG_VERSION"));
    let _ = std::io::stdout().write_all(o.as_bytes());
}

/// Diagnosis only (`TWIN_BENCH_OPS=1`, never written to the profile): the compute ops of rank
/// 0 of each scenario, run in program order as a step runs them, GEMMs and memory pass timed
/// apart; sums per step (best of 5 steps).
#[allow(dead_code)]
pub fn op_diagnosis(paths: &[String]) {
    for p in paths {
        let Ok(s) = twin_sim::scenario::load(std::path::Path::new(p), &[]) else {
            continue;
        };
        let Ok(st) = twin_sim::Staged::new(&s) else {
            continue;
        };
        let prog = st.schedule.program(0);
        let mut ws = Workspace::for_program(prog);
        let ops: Vec<&ComputeOp> = prog
            .ops
            .iter()
            .filter_map(|o| match &o.kind {
                OpKind::Compute(c) => Some(c),
                _ => None,
            })
            .collect();
        let mut best = (f64::INFINITY, 0.0, 0.0);
        for _ in 0..5 {
            let (mut g, mut m) = (0.0, 0.0);
            for op in &ops {
                let t = Instant::now();
                ws.run_gemms(op);
                g += t.elapsed().as_secs_f64();
                let t = Instant::now();
                ws.run_memory(op);
                m += t.elapsed().as_secs_f64();
            }
            if g + m < best.0 {
                best = (g + m, g, m);
            }
        }
        let mut per: std::collections::BTreeMap<(u64, u64, u64, u32), f64> = Default::default();
        for op in &ops {
            for g in &op.gemms {
                let one = gemm_op(*g, 0);
                let t = time_best(5, || ws.run_gemms(&one));
                *per.entry((g.m, g.n, g.k, g.count)).or_default() += t;
            }
        }
        for ((m, n, k, c), t) in &per {
            eprintln!("  {m}x{n}x{k} x{c}: {:.3} ms per step", t * 1e3);
        }
        let bytes: u64 = ops.iter().map(|o| o.memory_bytes).sum();
        let flops: u64 = ops.iter().map(|o| o.flops).sum();
        eprintln!(
            "{p} rank 0: {} compute ops, gemms {:.2} ms ({:.1} GFLOP/s), memory pass {:.2} ms ({:.1} GB/s), total {:.2} ms",
            ops.len(),
            best.1 * 1e3,
            flops as f64 / best.1 / 1e9,
            best.2 * 1e3,
            bytes as f64 / best.2 / 1e9,
            best.0 * 1e3
        );
    }
}
