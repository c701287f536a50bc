"""How a GEMM's rate follows the power controller: the ramp from idle and the rate by duty.

`gemm_data_dependence.py` found an H200 at its 700 W cap running back-to-back bf16 GEMMs at
~680 TFLOP/s (SM clock ~1,470 MHz), while short bursts (twin's calibration) run at ~855. This
script measures the two things a model of that needs, at one training shape:

- the ramp: after the GPU idles, every call's time over back-to-back calls (how fast the
  clock falls to its sustained value);
- the duty: GEMM bursts interleaved with memory-bound copies (what a training step's
  elementwise work is), the GEMMs' rate by the fraction of time they take.

Run on the GPU machine (one call, under a minute):
    python3 lab/scripts/gemm_power_duty.py --out "$OUT/gemm-power.json"
"""

import argparse
import json
import time

import torch

from gemm_data_dependence import SmiSampler

M, N, K = 16384, 6144, 4096


def ramp(fn, calls):
    torch.cuda.synchronize()
    time.sleep(2.0)
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
    t0 = time.time()
    for a, b in ev:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    ms = [a.elapsed_time(b) for a, b in ev]
    start = ev[0][0]
    at = [start.elapsed_time(a) for a, _ in ev]
    return ms, at, time.time() - t0


def shape_ramps(shapes, seconds):
    """Per shape and dtype: the rate in the first 20 ms of back-to-back calls after 2 s idle
    (the calls warmed first) and in the last half of `seconds`."""
    dev = torch.device("cuda")
    rows = []
    for m, n, k in shapes:
        a32 = torch.randn(m, k, device=dev)
        b32 = torch.randn(k, n, device=dev)
        a, b = a32.bfloat16(), b32.bfloat16().t().contiguous().t()
        sa = (a32.abs().max() / 448.0).float()
        sb = (b32.abs().max() / 448.0).float()
        a8 = (a32 / sa).to(torch.float8_e4m3fn)
        b8 = (b32 / sb).to(torch.float8_e4m3fn).t().contiguous().t()
        cases = {
            "bf16": lambda: torch.mm(a, b),
            "fp8-tensorwise": lambda: torch._scaled_mm(a8, b8, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16),
        }
        flops = 2.0 * m * n * k
        for dtype, fn in cases.items():
            for _ in range(3):
                fn()
            # Calls for `seconds`, from one timed call.
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record(); fn(); e1.record(); e1.synchronize()
            calls = max(50, min(20000, int(seconds * 1e3 / max(e0.elapsed_time(e1), 1e-3))))
            ms, at, _ = ramp(fn, calls)
            first = sorted(x for x, t in zip(ms, at) if t < 20.0)
            half = at[-1] / 2
            last = sorted(x for x, t in zip(ms, at) if t >= half)
            r = {"m": m, "n": n, "k": k, "dtype": dtype,
                 "first_20ms_tflops": flops / (first[len(first) // 2] * 1e-3) / 1e12,
                 "last_half_tflops": flops / (last[len(last) // 2] * 1e-3) / 1e12,
                 "calls": calls}
            rows.append(r)
            print(json.dumps(r), flush=True)
    return rows


def duty(gemm, copy, gemms, copies, seconds):
    """GEMM bursts of `gemms` calls then `copies` copies, for `seconds`; the GEMMs' median
    ms per call over the last half and the fraction of time in GEMMs."""
    torch.cuda.synchronize()
    time.sleep(2.0)
    rows = []
    t_end = time.time() + seconds
    while time.time() < t_end:
        a, b, c = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        a.record()
        for _ in range(gemms):
            gemm()
        b.record()
        for _ in range(copies):
            copy()
        c.record()
        c.synchronize()
        rows.append((a.elapsed_time(b) / gemms, a.elapsed_time(b), b.elapsed_time(c)))
    late = rows[len(rows) // 2:]
    per = sorted(r[0] for r in late)[len(late) // 2]
    g = sum(r[1] for r in late)
    o = sum(r[2] for r in late)
    return per, g / (g + o)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--ramp-shapes", help="m,n,k;...: only the per-shape ramps (bf16, FP8)")
    ap.add_argument("--seconds", type=float, default=1.5)
    args = ap.parse_args()
    if args.ramp_shapes:
        shapes = [tuple(int(x) for x in t.split(",")) for t in args.ramp_shapes.split(";")]
        rows = shape_ramps(shapes, args.seconds)
        with open(args.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                       "ramps": rows}, f)
        return
    dev = torch.device("cuda")
    a = torch.randn(M, K, device=dev).bfloat16()
    b = torch.randn(K, N, device=dev).bfloat16().t().contiguous().t()
    src = torch.randn(1 << 28, device=dev).bfloat16()  # 512 MiB
    dst = torch.empty_like(src)
    gemm = lambda: torch.mm(a, b)
    copy = lambda: dst.copy_(src)
    flops = 2.0 * M * N * K
    out = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "shape": [M, N, K]}
    smi = SmiSampler()
    smi.start()
    ms, at, wall = ramp(gemm, 2500)
    clock, power, n = smi.stop()
    out["ramp_bf16"] = {"ms": ms, "start_ms": at, "median_clock_mhz": clock, "median_power_w": power}
    print("ramp bf16: first 5", [round(x, 3) for x in ms[:5]], "at 50/100/200/500 ms:",
          [round(flops / (ms[min(i, len(ms) - 1)] * 1e-3) / 1e12) for i in
           [next((j for j, t in enumerate(at) if t >= s), len(at) - 1) for s in (50, 100, 200, 500, 1000, 2000)]],
          "TF; last", round(flops / (sorted(ms[-200:])[100] * 1e-3) / 1e12), "TF", flush=True)
    copy_ms = []
    for _ in range(20):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); copy(); e1.record(); e1.synchronize(); copy_ms.append(e0.elapsed_time(e1))
    out["copy_ms"] = sorted(copy_ms)[10]
    rows = []
    for gemms, copies in [(8, 0), (8, 1), (4, 1), (4, 2), (2, 2), (1, 2), (1, 4), (16, 4), (32, 8)]:
        smi.start()
        per, frac = duty(gemm, copy, gemms, copies, 2.5)
        clock, power, n = smi.stop()
        r = {"gemms": gemms, "copies": copies, "gemm_ms": per, "tflops": flops / (per * 1e-3) / 1e12,
             "gemm_time_fraction": frac, "sm_clock_mhz": clock, "power_w": power}
        rows.append(r)
        print(json.dumps(r), flush=True)
    out["duty_bf16"] = rows
    with open(args.out, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
