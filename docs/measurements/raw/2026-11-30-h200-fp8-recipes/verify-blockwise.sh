#!/usr/bin/env bash
# twin verify step --backend cuda of the FP8 single-GPU scenario under block scaling and under
# current (tensorwise) scaling, against the bundled H200 profile, in turn. Binary: gpu-bin/twin,
# the stripped release build of a62550b (CUDA is a default feature).
set -u
B=$PWD/gpu-bin/twin
S8=scenarios/gpu/llama3-8b-1gpu-fp8.toml
P=scenarios/profiles/h200-dgx.toml
L=$OUT/verify-log.txt
W=/tmp/vb; mkdir -p $W
ver() { # name scenario [sets...]
  local n=$1 s=$2; shift 2
  timeout 120 $B verify step $s --backend cuda --profile $P "$@" --format json > $W/$n.json 2> $W/$n.err; echo "verify $n rc=$?" >> $L
  python3 - $n $W/$n.json <<'PY' | tee -a $L
import json, sys
n, f = sys.argv[1], sys.argv[2]
try:
    v = json.load(open(f))
    g = {c['group']: (c['predicted_s'], c['measured_s']) for c in v.get('op_groups', []) if c.get('kind') == 'gemm'}
    print(f"{n:26s} pred {v['step_time_predicted_s']*1e3:8.2f} ms  meas {v['step_time_measured_s']*1e3:8.2f} ms  err {v['step_time_error']*100:+6.2f}%  gemm " + ", ".join(f"{k} {p*1e3:.1f}/{m*1e3:.1f}" for k, (p, m) in g.items()))
except Exception as e:
    print(n, "no summary:", e)
PY
}
$B --version >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >> $L 2>&1
ver blockwise $S8 --set training.fp8_recipe='"blockwise"'
ver tensorwise $S8 --set training.fp8_recipe='"tensorwise"'
ver blockwise-16L-mb2 $S8 --set training.fp8_recipe='"blockwise"' --set model.layers=16 --set training.micro_batch=2 --set training.global_batch=8
ver tensorwise-16L-mb2 $S8 --set training.fp8_recipe='"tensorwise"' --set model.layers=16 --set training.micro_batch=2 --set training.global_batch=8
timeout 60 $B verify step $S8 --backend cuda --profile $P --set training.fp8_recipe='"blockwise"' > $W/blockwise-text.txt 2>&1
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >> $L 2>&1
tar czf $OUT/verify-blockwise.tgz -C $W .
