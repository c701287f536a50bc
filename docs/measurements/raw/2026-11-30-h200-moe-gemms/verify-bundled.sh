#!/usr/bin/env bash
# twin verify step --backend cuda of the single-GPU scenarios against the bundled H200 profile
# with the GPU-timed GEMM curve, and against the profile before it (carried in gpu-bin/prof/),
# run in turn so both see the same GPU state. Binary: gpu-bin/twin (the CUDA build).
set -u
B=$PWD/gpu-bin/twin
S8=scenarios/gpu/llama3-8b-1gpu-fp8.toml
S=scenarios/gpu/llama3-8b-1gpu.toml
H="--set cluster.gpu=h200-141gb"
NEW=scenarios/profiles/h200-dgx.toml
OLD=gpu-bin/prof/h200-dgx-2026-11-28-fit.toml
L=$OUT/verify-log.txt
W=$OUT/verify; mkdir -p $W
ver() { # name profile scenario [sets...]
  local n=$1 p=$2 s=$3; shift 3
  timeout 120 $B verify step $s --backend cuda --profile $p "$@" --format json > $W/$n.json 2> $W/$n.err; echo "verify $n rc=$?" >> $L
  python3 - $n $W/$n.json <<'PY' | tee -a $L
import json, sys
n, f = sys.argv[1], sys.argv[2]
try:
    v = json.load(open(f))
    print(f"{n:24s} pred {v['step_time_predicted_s']*1e3:8.2f} ms  meas {v['step_time_measured_s']*1e3:8.2f} ms  err {v['step_time_error']*100:+6.2f}%")
except Exception as e:
    print(n, "no summary:", e)
PY
}
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >> $L 2>&1
ver fp8-new $NEW $S8
ver fp8-old $OLD $S8
ver bf16-new $NEW $S $H
ver bf16-old $OLD $S $H
ver fp8-16L-mb2-new $NEW $S8 --set model.layers=16 --set training.micro_batch=2 --set training.global_batch=8
ver fp8-16L-mb2-old $OLD $S8 --set model.layers=16 --set training.micro_batch=2 --set training.global_batch=8
ver bf16-16L-mb2-new $NEW $S $H --set model.layers=16 --set training.micro_batch=2 --set training.global_batch=8
ver bf16-16L-mb2-old $OLD $S $H --set model.layers=16 --set training.micro_batch=2 --set training.global_batch=8
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >> $L 2>&1
