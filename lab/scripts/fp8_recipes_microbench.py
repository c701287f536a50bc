#!/usr/bin/env python3
"""FP8 GEMMs by scaling recipe, GPU-timed, at the shapes of data/microbench/h200-2026-11-30-graph.json.

For each shape (the 8 anchors and 144 expert shapes of lab/scripts/moe_microbench.py) and each
recipe, the GPU time per call by CUDA-graph replay (20 calls, median of 7 replays):

- tensorwise_fast: one scale per tensor, fast accumulation (what Transformer Engine and
  torchao run forward GEMMs with);
- rowwise: a scale per row of A and per column of B, without and with fast accumulation;
- blockwise: DeepSeek-V3's and Transformer Engine's Float8BlockScaling, 1 x 128 blocks for the
  activation and 128 x 128 for the weight (1 x 128 on both for a weight gradient), split
  accumulation (the recipe requires it).

Then 9 shapes per recipe back to back for 1.5 s after 1 s idle (first 20 ms, last 0.75 s), for
the rate under the power cap. Writes JSON to the first argument.
"""

import json
import statistics
import sys
import time
import traceback

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from moe_microbench import ANCHORS, PAIRS, ROWS, graph_s, normal, sustained_s  # noqa: E402

DEV = "cuda"
FP8 = torch.float8_e4m3fn
ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
ONLY_BLOCKWISE = "--only-blockwise" in sys.argv
OUT = ARGS[0] if ARGS else "fp8-recipes.json"
RESULT = {"errors": [], "blockwise_layout": None}


def log(*a):
    print(*a, flush=True)


def save():
    with open(OUT, "w") as f:
        json.dump(RESULT, f, indent=1)


def cdiv(a, b):
    return (a + b - 1) // b


def operands(m, n, k):
    a = normal((m, k)).to(FP8)
    w = normal((n, k)).to(FP8)
    return a, w.t()  # b: k x n, column-major


def tensorwise(m, n, k, fast):
    a, b = operands(m, n, k)
    s = torch.tensor(1.0, device=DEV)
    return lambda: torch._scaled_mm(a, b, s, s, out_dtype=torch.bfloat16, use_fast_accum=fast)


def rowwise(m, n, k, fast):
    a, b = operands(m, n, k)
    sa = torch.ones(m, 1, device=DEV, dtype=torch.float32)
    sb = torch.ones(1, n, device=DEV, dtype=torch.float32)
    return lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)


def outer_major(rows, cols):
    """A rows x cols fp32 tensor stored column-major (stride (1, rows))."""
    return torch.ones(cols, rows, device=DEV, dtype=torch.float32).t()


# Candidate ways to call a blockwise-scaled GEMM; the first that runs is used for every shape.
def block_scales(layout, m, n, k, wgrad):
    kb = cdiv(k, 128)
    if layout == "a-outer-major b-outer-major":
        # What torch 2.11 takes (lab/scripts/blockwise_probe.py): A's 1 x 128 scales (m, k/128)
        # outer-dim-major; B's 128 x 128 scales (k/128, n/128) with k/128 innermost, or its
        # 1 x 128 scales (k/128, n) with n innermost.
        sa = outer_major(m, kb)
        sb = torch.ones(kb, n, device=DEV) if wgrad else torch.ones(cdiv(n, 128), kb, device=DEV).t()
    elif layout == "outer-major":
        sa = outer_major(m, kb)
        sb = outer_major(n, kb).t() if wgrad else outer_major(cdiv(n, 128), kb).t()
    elif layout == "contiguous":
        sa = torch.ones(m, kb, device=DEV)
        sb = torch.ones(kb, n, device=DEV) if wgrad else torch.ones(kb, cdiv(n, 128), device=DEV)
    elif layout == "outer-major-b-rowmajor":
        sa = outer_major(m, kb)
        sb = torch.ones(kb, n, device=DEV) if wgrad else torch.ones(kb, cdiv(n, 128), device=DEV)
    else:
        raise ValueError(layout)
    return sa, sb


def blockwise(m, n, k, wgrad, layout):
    a, b = operands(m, n, k)
    sa, sb = block_scales(layout, m, n, k, wgrad)
    return lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=False)


def probe_blockwise():
    for layout in ("a-outer-major b-outer-major", "outer-major", "contiguous", "outer-major-b-rowmajor"):
        for wgrad in (False, True):
            try:
                f = blockwise(256, 512, 1024, wgrad, layout)
                f()
                torch.cuda.synchronize()
                log("blockwise", layout, "wgrad" if wgrad else "fwd", "runs")
            except Exception as e:
                log("blockwise", layout, "wgrad" if wgrad else "fwd", "fails:", repr(e)[:300])
                RESULT["errors"].append(f"probe {layout} wgrad={wgrad}: {e!r}"[:400])
                break
        else:
            return layout
    return None


def shapes():
    out = [("anchor", "fwd", m, n, k) for m, n, k in ANCHORS]
    for label, n, k in PAIRS:
        for m in ROWS:
            out += [(label, "fwd", m, n, k), (label, "dgrad", m, k, n), (label, "wgrad", n, k, m)]
    return out


def main():
    p = torch.cuda.get_device_properties(0)
    RESULT.update(gpu=p.name, torch=torch.__version__, cuda=torch.version.cuda)
    torch.manual_seed(0)
    layout = probe_blockwise()
    RESULT["blockwise_layout"] = layout
    save()
    t0 = time.time()
    rows = []
    for label, kind, m, n, k in shapes():
        r = {"label": label, "kind": kind, "m": m, "n": n, "k": k}
        for name, make in (
            ("fp8_tensorwise_fast_s", lambda: tensorwise(m, n, k, True)),
            ("fp8_rowwise_s", lambda: rowwise(m, n, k, False)),
            ("fp8_rowwise_fast_s", lambda: rowwise(m, n, k, True)),
            ("fp8_blockwise_s", (lambda: blockwise(m, n, k, kind == "wgrad", layout)) if layout else None),
        ):
            if make is None or (ONLY_BLOCKWISE and name != "fp8_blockwise_s"):
                continue
            try:
                r[name] = graph_s(make())
            except Exception as e:
                r[name.replace("_s", "_error")] = repr(e)[:200]
        rows.append(r)
        if len(rows) % 12 == 0:
            log(len(rows), label, kind, m, n, k,
                {x: round(2 * m * n * k / v / 1e12) for x, v in r.items() if x.endswith("_s")})
            torch.cuda.empty_cache()
    RESULT["gemm"] = rows
    log(f"[shapes] {time.time() - t0:.1f} s")
    save()

    sus = []
    sus_shapes = [(2048, 6144, 4096), (2048, 4096, 4096), (2048, 28672, 4096), (2048, 4096, 14336),
                  (4096, 28672, 4096), (16384, 6144, 4096), (4096, 1536, 2048), (8192, 4096, 7168),
                  (1024, 5760, 2880)]
    recipes = [("fp8_tensorwise_fast", lambda m, n, k: tensorwise(m, n, k, True)),
               ("fp8_rowwise", lambda m, n, k: rowwise(m, n, k, False))]
    if ONLY_BLOCKWISE:
        recipes = []
    if layout:
        recipes.append(("fp8_blockwise", lambda m, n, k: blockwise(m, n, k, False, layout)))
    for dtype, make in recipes:
        for m, n, k in sus_shapes:
            try:
                fn = make(m, n, k)
                fn()
                first, last, _ = sustained_s(fn, per=20)
                f = 2.0 * m * n * k / 1e12
                r = {"m": m, "n": n, "k": k, "dtype": dtype,
                     "first_20ms_tflops": round(f / first, 1),
                     "capped_tflops": round(f / last, 1)}
                sus.append(r)
                log("sustained", r)
                del fn
            except Exception as e:
                RESULT["errors"].append(f"sustained {dtype} {m}x{n}x{k}: {e!r}"[:300])
                traceback.print_exc()
            RESULT["sustained"] = sus
            save()
    log("errors:", RESULT["errors"])


if __name__ == "__main__":
    main()
