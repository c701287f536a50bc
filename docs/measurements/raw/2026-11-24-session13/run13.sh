#!/bin/bash
# Session-13 GPU check of the session-12 binary (68e66e6) on the CUDA path: GPU tests, quick
# calibration, verify of the single-GPU scenario and a held-out variant with the fresh profile
# and the bundled one.
set +e
W=/tmp/w; mkdir -p $W
B=./gpu-bin/twin
S=scenarios/gpu/llama3-8b-1gpu.toml
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader | tee $W/smi.txt
nproc; lscpu | grep -E 'Model name|^CPU\(s\)|Thread|L2|L3' | tee $W/lscpu.txt
TWIN_GPU_TESTS=1 TWIN_GPU_SCENARIO=$S timeout 200 ./gpu-bin/gpu_tests --test-threads=1 2>&1 | tail -15 | tee $W/gpu-tests.txt
/usr/bin/time -f 'wall %e s' timeout 120 $B calibrate --backend cuda --quick --scenario $S -o $W/h100-quick.toml 2>&1 | tee $W/calibrate-quick.txt
declare -a V=("" "--set model.layers=6 --set training.micro_batch=2 --set training.global_batch=8")
declare -a N=(base mb2-6layers)
for P in $W/h100-quick.toml scenarios/profiles/h100-dgx.toml; do
  p=$(basename $P .toml)
  for i in 0 1; do
    eval "timeout 150 $B verify $S ${V[$i]} --backend cuda --profile $P --repeat 3 --format json" > $W/v-$p-${N[$i]}.json 2> $W/v-$p-${N[$i]}.err
    python3 -c "
import json,sys
v=json.load(open('$W/v-$p-${N[$i]}.json'))
print('%-22s %-16s pred %8.3f ms meas %8.3f ms err %+5.1f%%  mem %+.2f%%' % ('$p','${N[$i]}', v['predicted']['step_time_s']*1e3, v['measured']['step_time_s']*1e3, v['step_time_error']*100, v['peak_memory_error']*100))
" || tail -3 $W/v-$p-${N[$i]}.err
  done
done
timeout 100 $B verify $S --backend cuda --profile $W/h100-quick.toml 2>&1 | head -30 | tee $W/verify-text.txt
tar czf $OUT/all.tgz -C $W .
