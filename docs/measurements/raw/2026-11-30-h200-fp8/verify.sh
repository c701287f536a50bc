#!/usr/bin/env bash
# The verify half of check.sh again, against the profiles that check.sh's calibrations wrote
# (copied here), its JSON packed into one archive.
set -u
D=docs/measurements/raw/2026-11-30-h200-fp8
B=$PWD/gpu-bin/twin
S8=scenarios/gpu/llama3-8b-1gpu-fp8.toml
S=scenarios/gpu/llama3-8b-1gpu.toml
H="--set cluster.gpu=h200-141gb"
BUNDLED=scenarios/profiles/h200-dgx.toml
W=/tmp/w; mkdir -p $W
L=$OUT/verify-log.txt
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >> $L 2>&1
ver() { # name profile scenario [sets...]
  local n=$1 p=$2 s=$3; shift 3
  timeout 150 $B verify step $s --backend cuda --profile $p "$@" --format json > $W/v-$n.json 2> $W/v-$n.err; echo "verify $n rc=$?" >> $L
  python3 - $n $W/v-$n.json <<'PY' | tee -a $L
import json, sys
n, f = sys.argv[1], sys.argv[2]
try:
    v = json.load(open(f))
    print(f"{n:30s} pred {v['step_time_predicted_s']*1e3:8.2f} ms  meas {v['step_time_measured_s']*1e3:8.2f} ms  err {v['step_time_error']*100:+6.2f}%  mem err {v.get('peak_memory_error',0)*100:+.3f}%")
except Exception as e:
    print(n, "no summary:", e)
PY
}
ver fp8-delayed-quick $D/h200-quick.toml $S8
ver fp8-delayed-bundled $BUNDLED $S8
ver fp8-tensorwise-quick $D/h200-quick.toml $S8 --set training.fp8_recipe=tensorwise
ver fp8-delayed-full $D/h200-full.toml $S8
ver bf16-quick $D/h200-quick.toml $S $H
ver bf16-bundled $BUNDLED $S $H
ver bf16-full $D/h200-full.toml $S $H
ver fp8-delayed-quick-16L-mb2 $D/h200-quick.toml $S8 --set model.layers=16 --set training.micro_batch=2 --set training.global_batch=8
ver bf16-quick-16L-mb2 $D/h200-quick.toml $S $H --set model.layers=16 --set training.micro_batch=2 --set training.global_batch=8
timeout 100 $B verify step $S8 --backend cuda --profile $D/h200-quick.toml > $W/verify-fp8-text.txt 2>&1
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >> $L 2>&1
tar czf $OUT/verify.tgz -C $W .
