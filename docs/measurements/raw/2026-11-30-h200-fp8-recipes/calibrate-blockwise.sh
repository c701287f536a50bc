#!/usr/bin/env bash
# twin calibrate cuda --quick with its blockwise FP8 column, then twin verify step --backend cuda
# of the FP8 scenario under block and current scaling against that profile. Binary: gpu-bin/twin,
# the stripped release build of 1e4f16a.
set -u
B=$PWD/gpu-bin/twin
S8=scenarios/gpu/llama3-8b-1gpu-fp8.toml
L=$OUT/log.txt
W=/tmp/cb; mkdir -p $W
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >> $L 2>&1
/usr/bin/time -f 'wall %e s' timeout 150 $B calibrate cuda --quick --quiet --scenario $S8 -o $W/h200-quick.toml > $W/calibrate-quick.txt 2>&1; echo "calibrate rc=$?" | tee -a $L
grep -i -E "FP8|note|wall" $W/calibrate-quick.txt | tee -a $L
P=$W/h200-quick.toml
ver() { # name [sets...]
  local n=$1; shift
  timeout 120 $B verify step $S8 --backend cuda --profile $P "$@" --format json > $W/$n.json 2> $W/$n.err; echo "verify $n rc=$?" >> $L
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
ver blockwise-quick --set training.fp8_recipe='"blockwise"'
ver tensorwise-quick --set training.fp8_recipe='"tensorwise"'
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >> $L 2>&1
tar czf $OUT/calibrate-blockwise.tgz -C $W .
