#!/usr/bin/env python3
"""Board power and SM clock while one kind of kernel runs back to back, on one GPU.

For each kind (8192^3 bf16 and FP8 GEMMs, a 512 MiB device copy and elementwise add, causal
flash attention forward at 8k tokens), 1 s idle then 2.5 s of back-to-back work issued as
CUDA-graph replays, while a thread samples NVML every 2 ms: instantaneous power where the driver has the
field (NVML_FI_DEV_POWER_INSTANT), the averaged power, and the SM clock. What a power-cap model
needs per kind of op: how much each draws. Writes JSON to the first argument."""

import json
import sys
import threading
import time

import torch
import pynvml

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from moe_microbench import capture  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else "kernel-power.json"
pynvml.nvmlInit()
H = pynvml.nvmlDeviceGetHandleByIndex(0)
FI_POWER_INSTANT = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", 186)


def sample(stop, out):
    t0 = time.time()
    while not stop.is_set():
        t = time.time() - t0
        try:
            v = pynvml.nvmlDeviceGetFieldValues(H, [FI_POWER_INSTANT])[0]
            inst = v.value.uiVal / 1000.0 if v.nvmlReturn == 0 else None
        except Exception:
            inst = None
        try:
            avg = pynvml.nvmlDeviceGetPowerUsage(H) / 1000.0
        except Exception:
            avg = None
        try:
            sm = pynvml.nvmlDeviceGetClockInfo(H, pynvml.NVML_CLOCK_SM)
        except Exception:
            sm = None
        out.append((round(t, 4), inst, avg, sm))
        time.sleep(0.002)


def kinds():
    d = "cuda"
    a = torch.randn(8192, 8192, device=d, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=d, dtype=torch.bfloat16)
    a8 = a.to(torch.float8_e4m3fn)
    b8 = b.to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0, device=d)
    x = torch.randn(256 * 2**20, device=d, dtype=torch.bfloat16)  # 512 MiB
    y = torch.randn_like(x)
    z = torch.empty_like(x)
    q = torch.randn(4, 32, 8192, 128, device=d, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn_like(q, requires_grad=True)
    v = torch.randn_like(q, requires_grad=True)
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    go = torch.randn_like(o)
    return [
        ("gemm_bf16_8192", lambda: a @ b, 2 * 8192**3),
        ("gemm_fp8_8192", lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16), 2 * 8192**3),
        ("copy_512MiB", lambda: z.copy_(x), 0),
        ("add_512MiB", lambda: torch.add(x, y, out=z), 0),
        ("flash_fwd_8k", lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True), 0),
    ]


def run(name, fn, seconds=2.5):
    per = 10
    g = capture(fn, per)
    torch.cuda.synchronize()
    samples = []
    stop = threading.Event()
    th = threading.Thread(target=sample, args=(stop, samples))
    th.start()
    time.sleep(1.0)  # idle
    t_start = time.time()
    n = 0
    while time.time() - t_start < seconds:
        g.replay()
        n += 1
        if n % 4 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    busy_s = time.time() - t_start
    time.sleep(0.5)
    stop.set()
    th.join()
    return {"kind": name, "replays": n, "calls": n * per, "busy_s": busy_s, "idle_before_s": 1.0,
            "samples": samples}


def main():
    res = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(H) / 1000.0, "kinds": []}
    for name, fn, flops in kinds():
        r = run(name, fn)
        r["flops_per_call"] = flops
        busy = [s for s in r["samples"] if 1.0 + 0.5 < s[0] < 1.0 + r["busy_s"]]
        inst = [s[1] for s in busy if s[1] is not None]
        avg = [s[2] for s in busy if s[2] is not None]
        sm = [s[3] for s in busy if s[3] is not None]
        med = lambda v: sorted(v)[len(v) // 2] if v else None
        print(name, "calls", r["calls"], "busy", round(r["busy_s"], 2), "s; median power instant",
              med(inst), "avg", med(avg), "W; SM", med(sm), "MHz; samples", len(r["samples"]), flush=True)
        res["kinds"].append(r)
        json.dump(res, open(OUT, "w"))
    json.dump(res, open(OUT, "w"))


main()
