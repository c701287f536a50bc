#!/usr/bin/env python3
"""FP8 GEMMs with an e5m2 operand (Transformer Engine's HYBRID format: e5m2 gradients) against
e4m3 on both, at the gradient shapes of lab/scripts/moe_microbench.py and its anchors, GPU-timed
by CUDA-graph replay, split accumulation, one scale per tensor. Writes JSON to the first
argument."""

import json
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from moe_microbench import ANCHORS, PAIRS, ROWS, graph_s, normal  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else "fp8-hybrid.json"
E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2


def gemm(m, n, k, a_dtype, b_dtype):
    a = normal((m, k)).to(a_dtype)
    b = normal((n, k)).to(b_dtype).t()
    s = torch.tensor(1.0, device="cuda")
    return lambda: torch._scaled_mm(a, b, s, s, out_dtype=torch.bfloat16, use_fast_accum=False)


shapes = [("anchor", "fwd", m, n, k) for m, n, k in ANCHORS]
for label, n, k in PAIRS:
    for m in ROWS:
        shapes += [(label, "dgrad", m, k, n), (label, "wgrad", n, k, m)]
rows = []
errors = []
for label, kind, m, n, k in shapes:
    r = {"label": label, "kind": kind, "m": m, "n": n, "k": k}
    # dgrad: the gradient (A, m x k here) is e5m2; wgrad: the gradient is the second operand.
    for name, (da, db) in (("e4m3_e4m3_s", (E4, E4)), ("e5m2_e4m3_s", (E5, E4)), ("e4m3_e5m2_s", (E4, E5))):
        try:
            r[name] = graph_s(gemm(m, n, k, da, db))
        except Exception as e:
            errors.append(f"{m}x{n}x{k} {name}: {e!r}"[:300])
    rows.append(r)
    if len(rows) % 16 == 0:
        print(len(rows), r, flush=True)
    torch.cuda.empty_cache()
json.dump({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "gemm": rows, "errors": errors},
          open(OUT, "w"), indent=1)
print("errors:", errors[:5])
