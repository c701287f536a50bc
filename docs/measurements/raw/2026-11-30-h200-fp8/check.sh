#!/usr/bin/env bash
# Issue 36's GPU items on one H200, in one call: the GPU tests (FP8 through cuBLASLt included),
# `twin calibrate cuda` with its FP8 columns, and `twin verify step --backend cuda` of the FP8
# single-GPU scenario (delayed and tensorwise scaling) and of the bf16 one, each with the fresh
# calibration and with the bundled H200 profile (whose GEMM curves describe normally
# distributed operands, as the runtime's fill now is).
set -u
B=$PWD/gpu-bin/twin
S8=scenarios/gpu/llama3-8b-1gpu-fp8.toml
S=scenarios/gpu/llama3-8b-1gpu.toml
H="--set cluster.gpu=h200-141gb"
BUNDLED=scenarios/profiles/h200-dgx.toml
L=$OUT/log.txt
say() { echo "== $* ($(date +%T))" | tee -a $L; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv >> $L 2>&1
nproc >> $L
$B doctor >> $L 2>&1
# The test binary names the scenario by the path it was built at.
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; } 2>> $L
say "GPU tests"
TWIN_GPU_TESTS=1 TWIN_GPU_PRESET=h200-141gb TWIN_GPU_SCENARIO=$S timeout 200 ./gpu-bin/gpu_tests --test-threads=1 --nocapture > $OUT/gpu-tests.txt 2>&1; echo "gpu tests rc=$?" | tee -a $L
grep -E "^test |test result|TFLOP|note:" $OUT/gpu-tests.txt | tee -a $L
say "calibrate cuda --quick on the FP8 scenario's shapes"
/usr/bin/time -f 'wall %e s' timeout 150 $B calibrate cuda --quick --no-progress --scenario $S8 -o $OUT/h200-quick.toml > $OUT/calibrate-quick.txt 2>&1; echo "calibrate rc=$?" | tee -a $L
tail -30 $OUT/calibrate-quick.txt >> $L
summ() {
  python3 - "$1" "$2" <<'PY' | tee -a $L
import json, sys
name, f = sys.argv[1], sys.argv[2]
try:
    v = json.load(open(f))
except Exception as e:
    print(f"{name}: no JSON ({e})"); sys.exit()
pm = v.get('peak_memory') or {}
print(f"{name:34s} pred {v['step_time_predicted_s']*1e3:8.2f} ms  meas {v['step_time_measured_s']*1e3:8.2f} ms  err {v['step_time_error']*100:+6.2f}%  spread {v.get('measured_step_time_spread_s',0)*1e3:.2f} ms  mem err {v.get('peak_memory_error',0)*100:+.3f}%")
for g in v.get('op_groups', [])[:12]:
    print("   ", json.dumps(g)[:220])
PY
}
ver() { # name profile scenario [sets...]
  local n=$1 p=$2 s=$3; shift 3
  timeout 150 $B verify step $s --backend cuda --profile $p "$@" --format json > $OUT/v-$n.json 2> $OUT/v-$n.err; echo "verify $n rc=$?" >> $L
  summ $n $OUT/v-$n.json; tail -3 $OUT/v-$n.err >> $L
}
say "verify"
ver fp8-delayed-quick $OUT/h200-quick.toml $S8
ver fp8-delayed-bundled $BUNDLED $S8
ver fp8-tensorwise-quick $OUT/h200-quick.toml $S8 --set training.fp8_recipe=tensorwise
ver bf16-quick $OUT/h200-quick.toml $S $H
ver bf16-bundled $BUNDLED $S $H
ver fp8-delayed-quick-16L-mb2 $OUT/h200-quick.toml $S8 --set model.layers=16 --set training.micro_batch=2 --set training.global_batch=8
timeout 100 $B verify step $S8 --backend cuda --profile $OUT/h200-quick.toml > $OUT/verify-fp8-text.txt 2>&1
say "full calibration"
/usr/bin/time -f 'wall %e s' timeout 200 $B calibrate cuda --no-progress --scenario $S8 -o $OUT/h200-full.toml > $OUT/calibrate-full.txt 2>&1; echo "calibrate full rc=$?" | tee -a $L
tail -30 $OUT/calibrate-full.txt >> $L
ver fp8-delayed-full $OUT/h200-full.toml $S8
ver bf16-full $OUT/h200-full.toml $S $H
say done
