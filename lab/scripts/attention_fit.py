#!/usr/bin/env python3
"""Question: which flash-attention efficiency curve (cost::attention) fits the causal SDPA
figures measured on one H200, per backend (flash, cudnn) and direction?

    python3 lab/scripts/attention_fit.py data/microbench/h200-2026-11-28.json

Curve: eff = max_efficiency * L/(L + keys_half) * d/(d + head_dim_half), L the mean keys per
query (s/2 for a causal sequence of s), d the head dimension, as a fraction of 989 TFLOP/s (H200
dense bf16). Grid over the two half points (keys_half step 8, head_dim_half step 0.5); for each,
max_efficiency is the geometric mean of measured/shape; the pick minimises the rms relative
error. Pure Python, no dependencies.
"""
import json
import math
import sys

PEAK = 989e12


def fit(rows):
    best = None
    for hh in [x * 0.5 for x in range(0, 161)]:
        for lh in [x * 8 for x in range(0, 200)]:
            shape = [(L / (L + lh)) * (D / (D + hh)) for L, D, _ in rows]
            m = math.exp(sum(math.log(y / s) for (_, _, y), s in zip(rows, shape)) / len(rows))
            err = [m * s / y - 1 for (_, _, y), s in zip(rows, shape)]
            rms = math.sqrt(sum(e * e for e in err) / len(err))
            if best is None or rms < best[0]:
                best = (rms, max(abs(e) for e in err), m, lh, hh)
    return best


def main():
    d = json.load(open(sys.argv[1]))["attention"]
    for backend in ["flash", "cudnn"]:
        for direction in ["fwd", "bwd"]:
            rows = [(a["seq"] / 2, a["head_dim"], a[f"{backend}_{direction}_tflops"] * 1e12 / PEAK) for a in d]
            rms, mx, m, lh, hh = fit(rows)
            print(f"{backend} {direction}: max_efficiency {m:.4f} keys_half {lh} head_dim_half {hh} "
                  f"rms {rms:.3f} max {mx:.3f}")


if __name__ == "__main__":
    main()
