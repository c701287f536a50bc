#!/usr/bin/env python3
"""Finds how torch._scaled_mm takes blockwise (1x128 x 128x128) scales, and times them if it can."""
import sys
import torch
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from moe_microbench import graph_s, normal  # noqa: E402

FP8 = torch.float8_e4m3fn
D = "cuda"


def cd(a, b):
    return (a + b - 1) // b


def up(a, b):
    return cd(a, b) * b


def om(r, c):  # r x c, outer-dim-major (stride (1, r))
    return torch.ones(c, r, device=D).t()


def nim(r, c):  # r x c, stride (1, up(r,4)): near-inner-dim-major, 16-byte aligned
    return torch.ones(c, up(r, 4), device=D)[:, :r].t()


def cands(m, n, k):
    kb = cd(k, 128)
    return {
        "a1x128-om b128x128-nim": (om(m, kb), nim(kb, cd(n, 128))),
        "a1x128-om b128x128-om": (om(m, kb), om(kb, cd(n, 128))),
        "a1x128-om b128x128-rowmajor": (om(m, kb), torch.ones(kb, cd(n, 128), device=D)),
        "a1x128-om b1x128-om": (om(m, kb), om(n, kb).t()),
        "a1x128-om b(n,kb)-om-T": (om(m, kb), om(kb, n)),
        "a128x128-nim b128x128-nim": (nim(cd(m, 128), kb), nim(kb, cd(n, 128))),
    }


m, n, k = 2048, 4096, 4096
a = normal((m, k)).to(FP8)
b = normal((n, k)).to(FP8).t()
ok = {}
for name, (sa, sb) in cands(m, n, k).items():
    try:
        f = lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
        f()
        torch.cuda.synchronize()
        t = graph_s(f)
        ok[name] = t
        print("RUNS", name, sa.shape, sa.stride(), sb.shape, sb.stride(), f"{2*m*n*k/t/1e12:.0f} TFLOP/s", flush=True)
    except Exception as e:
        print("FAILS", name, sa.shape, sa.stride(), sb.shape, sb.stride(), flush=True)
        print(str(e)[:1500], flush=True)
print("ok:", list(ok))
