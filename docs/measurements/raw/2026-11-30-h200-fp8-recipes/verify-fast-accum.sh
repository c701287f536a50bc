#!/usr/bin/env bash
# twin verify step --backend cuda of the FP8 scenario (current and delayed scaling, 8 and 16
# layers) against the bundled H200 profile with [gemm.fp8_fast_accum], whose forward GEMMs the
# runtime runs with fast accumulation as Transformer Engine does. Binary: gpu-bin/twin, the
# stripped release build of the fast-accumulation change (3627902).
set -u
B=$PWD/gpu-bin/twin
S8=scenarios/gpu/llama3-8b-1gpu-fp8.toml
P=scenarios/profiles/h200-dgx.toml
L=$OUT/verify-log.txt
W=/tmp/vf; mkdir -p $W
ver() { # name [sets...]
  local n=$1; shift
  timeout 120 $B verify step $S8 --backend cuda --profile $P "$@" --format json > $W/$n.json 2> $W/$n.err; echo "verify $n rc=$?" >> $L
  python3 - $n $W/$n.json <<'PY' | tee -a $L
import json, sys
n, f = sys.argv[1], sys.argv[2]
try:
    v = json.load(open(f))
    g = {c['group']: (c['predicted_s'], c['measured_s']) for c in v.get('op_groups', []) if c.get('kind') == 'gemm'}
    notes = [x for x in v['measured'].get('notes', []) if x.startswith('measured: ')]
    print(f"{n:22s} pred {v['step_time_predicted_s']*1e3:8.2f} ms  meas {v['step_time_measured_s']*1e3:8.2f} ms  err {v['step_time_error']*100:+6.2f}%  gemm " + ", ".join(f"{k} {p*1e3:.1f}/{m*1e3:.1f}" for k, (p, m) in g.items()) + f"  notes {len(notes)}")
except Exception as e:
    print(n, "no summary:", e)
PY
}
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >> $L 2>&1
ver delayed
ver tensorwise --set training.fp8_recipe='"tensorwise"'
ver delayed-16L-mb2 --set model.layers=16 --set training.micro_batch=2 --set training.global_batch=8
ver blockwise --set training.fp8_recipe='"blockwise"'
timeout 60 $B verify step $S8 --backend cuda --profile $P --set training.fp8_recipe='"blockwise"' > $W/blockwise-text.txt 2>&1
grep -n "note" $W/blockwise-text.txt | head -5 | tee -a $L
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >> $L 2>&1
tar czf $OUT/verify-fast-accum.tgz -C $W .
