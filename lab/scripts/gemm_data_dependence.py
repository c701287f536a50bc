"""GEMM throughput by operand distribution, sustained, with the GPU's clock and power.

A GEMM's speed on a power-limited GPU depends on its data: operands that toggle fewer bits
draw less power and hold higher clocks. twin's bundled Hopper curves are fitted to normally
distributed operands (data/microbench/h200-2026-11-28.json), while a Hugging Face step from
random initialisation ran the same shapes 26% faster (docs/journal/2026-11-29-pytorch-traces.md).
This script measures which operand statistics do that, at training shapes, long enough for the
power controller to settle, so that a curve can be chosen for what a training step multiplies.

Run on the GPU machine (one call, a few minutes):
    python3 lab/scripts/gemm_data_dependence.py --out "$OUT/gemm-data.json" --seconds 1.5

Writes one JSON object: the device, torch version, and per (shape, dtype, distribution) the
median time per call, TFLOP/s, and the median SM clock (MHz) and board power (W) sampled by
nvidia-smi while that case ran. Changes no GPU setting.
"""

import argparse
import json
import shutil
import subprocess
import threading
import time

import torch

# (m, n, k): Llama 3 8B's forward QKV, FC1 and FC2 at 16k and 4k tokens, and a wgrad shape
# (k = tokens).
SHAPES = [
    (16384, 6144, 4096),
    (16384, 28672, 4096),
    (16384, 4096, 14336),
    (4096, 28672, 4096),
    (4096, 14336, 16384),
]


def distributions(m, n, k, device):
    """(name, A [m, k], B [k, n]) in fp32, to be cast to the dtype under test."""
    g = torch.Generator(device=device).manual_seed(0)

    def normal(rows, cols, std=1.0):
        return torch.randn(rows, cols, generator=g, device=device) * std

    def tiled(rows, cols):
        # twin's CUDA fill: one 1 MiB block of bf16 normals (512 Ki values) written again and
        # again over the buffer (runtime/src/backend/cuda/device.rs, fill_pattern).
        block = torch.randn(1 << 19, generator=g, device=device)
        reps = -(-(rows * cols) // block.numel())
        return block.repeat(reps)[: rows * cols].view(rows, cols)

    act = normal(m, k)
    return [
        # The bundled curves' data.
        ("normal", act, normal(k, n)),
        # twin's runtime and calibration fill: normals, tiled with a 1 MiB period.
        ("normal tiled 1 MiB", tiled(m, k), tiled(k, n)),
        # Activations after a norm times weights at a standard init (std 0.02).
        ("normal x init-0.02", act, normal(k, n, 0.02)),
        # Heavy-tailed weights, as trained weights are (Student t, 3 degrees of freedom).
        (
            "normal x student-t3-0.02",
            act,
            torch.distributions.StudentT(3.0).sample((k, n)).to(device) * 0.02,
        ),
        # SwiGLU output: silu(a) * b, many values near zero.
        (
            "swiglu x init-0.02",
            torch.nn.functional.silu(normal(m, k)) * normal(m, k),
            normal(k, n, 0.02),
        ),
        # Gradients early in training: small magnitudes.
        ("grad-1e-4 x init-0.02", normal(m, k, 1e-4), normal(k, n, 0.02)),
        # Values of one exponent (the earlier calibration's data).
        (
            "uniform[1,2) x uniform[1,2)",
            1 + torch.rand(m, k, generator=g, device=device),
            1 + torch.rand(k, n, generator=g, device=device),
        ),
        ("zeros", torch.zeros(m, k, device=device), torch.zeros(k, n, device=device)),
    ]


class SmiSampler:
    """nvidia-smi's SM clock and board power every 100 ms, in a background thread."""

    def __init__(self):
        self.samples = []
        self.proc = None
        self.thread = None

    def start(self):
        self.samples = []
        if shutil.which("nvidia-smi") is None:
            return
        self.proc = subprocess.Popen(
            [
                "nvidia-smi",
                "--query-gpu=clocks.sm,power.draw",
                "--format=csv,noheader,nounits",
                "-i",
                "0",
                "-lms",
                "100",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            try:
                self.samples.append((float(parts[0]), float(parts[1])))
            except (ValueError, IndexError):
                pass

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=5)
            self.thread.join(timeout=5)
        clocks = sorted(s[0] for s in self.samples)
        power = sorted(s[1] for s in self.samples)
        mid = lambda xs: xs[len(xs) // 2] if xs else None
        return mid(clocks), mid(power), len(self.samples)


def time_case(fn, seconds):
    """Median ms per call over back-to-back calls for `seconds`, after a 0.5 s warm-up."""
    end = time.time() + 0.5
    while time.time() < end:
        fn()
    torch.cuda.synchronize()
    times = []
    start_all = time.time()
    while time.time() - start_all < seconds:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(5):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 5)
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--shapes", help="m,n,k;m,n,k;... instead of the built-in shapes")
    ap.add_argument("--data", help="only the distributions of these names (comma-separated)")
    args = ap.parse_args()
    shapes = SHAPES
    if args.shapes:
        shapes = [tuple(int(x) for x in t.split(",")) for t in args.shapes.split(";")]
    keep = set(args.data.split(",")) if args.data else None
    dev = torch.device("cuda")
    fp8 = hasattr(torch, "float8_e4m3fn") and torch.cuda.get_device_capability() >= (8, 9)
    results = []
    smi = SmiSampler()
    for m, n, k in shapes:
        for name, a32, b32 in distributions(m, n, k, dev):
            if keep is not None and name not in keep:
                continue
            cases = [("bf16", a32.bfloat16(), b32.bfloat16().t().contiguous().t())]
            if fp8:
                amax_a = a32.abs().max().clamp(min=1e-12)
                amax_b = b32.abs().max().clamp(min=1e-12)
                sa = (amax_a / 448.0).float()
                sb = (amax_b / 448.0).float()
                a8 = (a32 / sa).to(torch.float8_e4m3fn)
                # _scaled_mm wants B column-major.
                b8 = (b32 / sb).to(torch.float8_e4m3fn).t().contiguous().t()
                cases.append(("fp8-tensorwise", a8, b8, sa, sb))
            for case in cases:
                dtype = case[0]
                if dtype == "bf16":
                    a, b = case[1], case[2]
                    fn = lambda a=a, b=b: torch.mm(a, b)
                else:
                    a, b, sa, sb = case[1:]
                    fn = lambda a=a, b=b, sa=sa, sb=sb: torch._scaled_mm(
                        a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16
                    )
                smi.start()
                ms = time_case(fn, args.seconds)
                clock, power, n_smi = smi.stop()
                flops = 2.0 * m * n * k
                row = {
                    "m": m,
                    "n": n,
                    "k": k,
                    "dtype": dtype,
                    "data": name,
                    "ms": ms,
                    "tflops": flops / (ms * 1e-3) / 1e12,
                    "sm_clock_mhz": clock,
                    "power_w": power,
                    "smi_samples": n_smi,
                }
                results.append(row)
                print(json.dumps(row), flush=True)
            del cases
        torch.cuda.empty_cache()
    out = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "seconds_per_case": args.seconds,
        "results": results,
    }
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
