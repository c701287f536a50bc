#!/usr/bin/env python3
"""GEMM and memory-bound kernel timings at mixture-of-experts shapes, on one GPU.

What it measures (PyTorch only; no Megatron-Core or Transformer Engine on the machine):

- anchors: shapes of data/microbench/h200-2026-11-28.json, timed the way that file was (eager,
  mean of 20 calls after 5 warm-ups) and by graph replay, to tie this run to that one;
- single: expert GEMM shapes (forward, data gradient, weight gradient) of the MoE rows of the
  modern validation table, m (rows per expert) from 256 to 8192, bf16 and FP8 e4m3 with one
  scale per tensor, timed by CUDA-graph replay (GPU time per call, no host launch cost);
- grouped: G experts' GEMMs of one shape as a loop on one stream, round-robin over four
  streams (what Transformer Engine's grouped linear does on Hopper), and torch._grouped_mm /
  torch._scaled_grouped_mm (one grouped kernel);
- elementwise: a bf16 add and an FP8 cast by bytes moved, 64 KiB to 1 GiB (fixed cost and
  bandwidth of a memory-bound kernel);
- permute: gathering T*top_k token copies and their weighted sum back;
- sustained: expert shapes back to back for 1.5 s (the rate under the power cap).

Writes JSON to the path given as the first argument (default: moe-microbench.json).
"""

import json
import statistics
import sys
import time
import traceback

import torch

DEV = "cuda"
FP8 = torch.float8_e4m3fn
OUT = sys.argv[1] if len(sys.argv) > 1 else "moe-microbench.json"
RESULT = {"errors": []}


def log(*a):
    print(*a, flush=True)


def section(name):
    def wrap(fn):
        def run():
            t0 = time.time()
            try:
                fn()
            except Exception as e:  # keep the other sections
                RESULT["errors"].append(f"{name}: {e!r}")
                traceback.print_exc()
            log(f"[{name}] {time.time() - t0:.1f} s")
            with open(OUT, "w") as f:
                json.dump(RESULT, f, indent=1)

        return run

    return wrap


def normal(shape, dtype=torch.bfloat16, std=1.0):
    return (torch.randn(shape, device=DEV, dtype=torch.float32) * std).to(dtype)


def eager_s(fn, calls=20, warm=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(calls):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) * 1e-3 / calls


def capture(fn, per, warm=1):
    """`fn` run `warm` times on a side stream, then `per` calls of it captured in one graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warm):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(per):
            fn()
    return g


def graph_s(fn, per_graph=20, replays=7):
    """GPU seconds per call of fn: a graph of per_graph calls, median of replays."""
    g = capture(fn, per_graph, warm=3)
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e-3 / per_graph)
    del g
    return statistics.median(times)


def sustained_s(fn, per, seconds=1.5, idle_s=1.0):
    """Seconds per call of `fn` replayed back to back for `seconds` after `idle_s` idle (graphs
    of `per` calls): the median in the first 20 ms, the median over the last 0.75 s, and the
    replays."""
    g = capture(fn, per)
    torch.cuda.synchronize()
    time.sleep(idle_s)
    marks = []
    t0 = time.time()
    while time.time() - t0 < seconds:
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        marks.append((a, b))
        if len(marks) % 20 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    series = [a.elapsed_time(b) * 1e-3 / per for a, b in marks]
    starts = [marks[0][0].elapsed_time(a) * 1e-3 for a, _ in marks]
    first = [x for x, t in zip(series, starts) if t < 0.02]
    last = [x for x, t in zip(series, starts) if t > starts[-1] - 0.75]
    med = lambda v: statistics.median(v) if v else None  # noqa: E731
    return med(first), med(last), len(series)


def bf16_gemm(m, n, k):
    a = normal((m, k))
    w = normal((n, k))
    return lambda: a @ w.t()


def fp8_gemm(m, n, k, fast=False):
    a = normal((m, k)).to(FP8)
    w = normal((n, k)).to(FP8)
    sa = torch.tensor(1.0, device=DEV)
    sb = torch.tensor(1.0, device=DEV)
    b = w.t()
    return lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)


def tflops(m, n, k, s, g=1):
    return 2.0 * m * n * k * g / s / 1e12


ANCHORS = [
    (2048, 4096, 4096), (2048, 14336, 4096), (2048, 1024, 4096), (2048, 6144, 4096),
    (4096, 4096, 4096), (4096, 1024, 4096), (8192, 8192, 8192), (16384, 6144, 4096),
]

# (label, n, k) of each expert's first (gate+up) and second projection, per model.
PAIRS = [
    ("qwen3-30b fc1", 1536, 2048), ("qwen3-30b fc2", 2048, 768),
    ("qwen3-235b fc1", 3072, 4096), ("qwen3-235b fc2", 4096, 1536),
    ("gpt-oss fc1", 5760, 2880), ("gpt-oss fc2", 2880, 2880),
    ("deepseek-v3 fc1", 4096, 7168), ("deepseek-v3 fc2", 7168, 2048),
]
ROWS = [256, 512, 1024, 2048, 4096, 8192]


@section("anchors")
def anchors():
    out = []
    for m, n, k in ANCHORS:
        r = {"m": m, "n": n, "k": k}
        for name, make in (("bf16", bf16_gemm), ("fp8", fp8_gemm)):
            fn = make(m, n, k)
            r[f"{name}_eager_s"] = eager_s(fn)
            r[f"{name}_graph_s"] = graph_s(fn)
            del fn
        log("anchor", m, n, k, {x: round(tflops(m, n, k, v)) for x, v in r.items() if x.endswith("_s")})
        out.append(r)
    RESULT["anchors"] = out


@section("single")
def single():
    out = []
    for label, n, k in PAIRS:
        for m in ROWS:
            # forward (m x n x k), data gradient (m x k x n), weight gradient (n x k x m)
            for kind, (mm, nn, kk) in (("fwd", (m, n, k)), ("dgrad", (m, k, n)), ("wgrad", (n, k, m))):
                r = {"label": label, "kind": kind, "m": mm, "n": nn, "k": kk}
                r["bf16_s"] = graph_s(bf16_gemm(mm, nn, kk))
                r["fp8_s"] = graph_s(fp8_gemm(mm, nn, kk))
                if kind == "fwd":
                    r["fp8_fast_s"] = graph_s(fp8_gemm(mm, nn, kk, fast=True))
                out.append(r)
            log(label, m, [round(tflops(x["m"], x["n"], x["k"], x["bf16_s"])) for x in out[-3:]],
                [round(tflops(x["m"], x["n"], x["k"], x["fp8_s"])) for x in out[-3:]])
        torch.cuda.empty_cache()
    RESULT["single"] = out


def loop_streams(fns, streams):
    cur = torch.cuda.current_stream

    def run():
        c = cur()
        for s in streams:
            s.wait_stream(c)
        for i, f in enumerate(fns):
            with torch.cuda.stream(streams[i % len(streams)]):
                f()
        for s in streams:
            c.wait_stream(s)

    return run


@section("grouped")
def grouped():
    out = []
    streams = [torch.cuda.Stream() for _ in range(4)]
    for label, n, k in PAIRS:
        for g in (4, 8, 16):
            for m in (512, 2048, 8192):
                r = {"label": label, "groups": g, "m": m, "n": n, "k": k}
                bf = [bf16_gemm(m, n, k) for _ in range(g)]
                r["bf16_loop_s"] = graph_s(lambda: [f() for f in bf], per_graph=5)
                r["bf16_streams4_s"] = graph_s(loop_streams(bf, streams), per_graph=5)
                del bf
                f8 = [fp8_gemm(m, n, k) for _ in range(g)]
                r["fp8_loop_s"] = graph_s(lambda: [f() for f in f8], per_graph=5)
                r["fp8_streams4_s"] = graph_s(loop_streams(f8, streams), per_graph=5)
                del f8
                a = normal((g * m, k))
                w = normal((g, n, k))
                offs = torch.arange(1, g + 1, device=DEV, dtype=torch.int32) * m
                try:
                    wt = w.transpose(-2, -1)
                    r["bf16_grouped_mm_s"] = graph_s(lambda: torch._grouped_mm(a, wt, offs=offs), per_graph=5)
                except Exception as e:
                    r["bf16_grouped_mm_error"] = repr(e)[:200]
                try:
                    a8 = a.to(FP8)
                    w8 = w.to(FP8).transpose(-2, -1)
                    sa = torch.ones(g * m, device=DEV, dtype=torch.float32)
                    sb = torch.ones(g, n, device=DEV, dtype=torch.float32)
                    r["fp8_rowwise_grouped_mm_s"] = graph_s(
                        lambda: torch._scaled_grouped_mm(a8, w8, sa, sb, offs=offs, out_dtype=torch.bfloat16),
                        per_graph=5)
                except Exception as e:
                    r["fp8_rowwise_grouped_mm_error"] = repr(e)[:200]
                del a, w
                out.append(r)
                log("grouped", label, g, m, {x: round(tflops(m, n, k, v, g)) for x, v in r.items() if x.endswith("_s")})
        torch.cuda.empty_cache()
    RESULT["grouped"] = out


@section("elementwise")
def elementwise():
    out = []
    for mib in (0.0625, 0.25, 1, 4, 16, 64, 256, 1024):
        elems = int(mib * 2**20 / 2)
        x = normal((elems,))
        y = normal((elems,))
        z = torch.empty_like(x)
        q = torch.empty(elems, device=DEV, dtype=FP8)
        r = {"elems": elems}
        r["add_bf16_s"] = graph_s(lambda: torch.add(x, y, out=z))
        r["add_bf16_bytes"] = 6 * elems
        r["copy_bf16_s"] = graph_s(lambda: z.copy_(x))
        r["copy_bf16_bytes"] = 4 * elems
        r["cast_fp8_s"] = graph_s(lambda: q.copy_(x))
        r["cast_fp8_bytes"] = 3 * elems
        r["amax_bf16_s"] = graph_s(lambda: x.abs().amax())
        r["amax_bf16_bytes"] = 2 * elems
        out.append(r)
        log("elementwise", mib, "MiB", {kk: f"{v*1e6:.1f}us" for kk, v in r.items() if kk.endswith("_s")})
        del x, y, z, q
    RESULT["elementwise"] = out


@section("permute")
def permute():
    out = []
    for t, h, topk, experts in ((8192, 2048, 8, 128), (4096, 4096, 8, 128), (16384, 2880, 4, 128), (4096, 7168, 8, 256)):
        x = normal((t, h))
        logits = torch.randn(t, experts, device=DEV)
        probs, idx = torch.topk(torch.softmax(logits, -1), topk, dim=-1)
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)
        src = order // topk
        y = normal((t * topk, h))
        p = probs.reshape(-1)[order].to(torch.bfloat16).unsqueeze(1)
        inv = torch.empty_like(order)
        inv[order] = torch.arange(order.numel(), device=DEV)
        r = {"tokens": t, "hidden": h, "top_k": topk, "experts": experts}
        r["gather_s"] = graph_s(lambda: x.index_select(0, src))
        r["gather_bytes"] = t * topk * h * 2 * 2
        r["combine_s"] = graph_s(lambda: (y * p).index_select(0, inv).view(t, topk, h).sum(1))
        r["route_s"] = graph_s(lambda: torch.topk(torch.softmax(logits, -1), topk, dim=-1))
        r["sort_s"] = graph_s(lambda: torch.argsort(idx.reshape(-1), stable=True))
        out.append(r)
        log("permute", t, h, topk, {kk: f"{v*1e6:.1f}us" for kk, v in r.items() if kk.endswith("_s")})
    RESULT["permute"] = out


@section("sustained")
def sustained():
    out = []
    for label, m, n, k in (("qwen3-30b fc1", 4096, 1536, 2048), ("deepseek-v3 fc1", 8192, 4096, 7168),
                           ("gpt-oss fc1 m1024", 1024, 5760, 2880)):
        for name, make in (("bf16", bf16_gemm), ("fp8", fp8_gemm)):
            fn = make(m, n, k)
            first, last, replays = sustained_s(fn, per=50)
            r = {"label": label, "dtype": name, "m": m, "n": n, "k": k,
                 "first_20ms_s": first, "last_750ms_s": last, "replays": replays}
            out.append(r)
            log("sustained", label, name, {kk: round(tflops(m, n, k, v)) for kk, v in r.items() if kk.endswith("_s") and v})
            del fn
    RESULT["sustained"] = out


if __name__ == "__main__":
    p = torch.cuda.get_device_properties(0)
    RESULT["gpu"] = p.name
    RESULT["sm_count"] = p.multi_processor_count
    RESULT["torch"] = torch.__version__
    RESULT["cuda"] = torch.version.cuda
    log(RESULT)
    torch.manual_seed(0)
    for run in (anchors, single, grouped, elementwise, permute, sustained):
        run()
    log("errors:", RESULT["errors"])
