#!/usr/bin/env bash
# Issue 34's GPU checks on one H200, in one call: the memory edge with the new capacities and
# the CUDA runtime's pre-flight, calibration of a GPU with no --base-profile, verify with the
# quick and the bundled H200 profiles, and a real kill and reload on the CUDA backend.
set -u
B=$PWD/gpu-bin/twin
S=scenarios/gpu/llama3-8b-1gpu.toml
H="--set cluster.gpu=h200-141gb"
L=$OUT/log.txt
say() { echo "== $*" | tee -a $L; }
run() { echo "\$ $*" >> $L; "$@" >> $L 2>&1; local rc=$?; echo "rc=$rc" >> $L; return $rc; }
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.reserved --format=csv >> $L 2>&1
run $B doctor
say "memory edge: simulate verdicts"
for N in 29 30 31; do run $B simulate $S $H --set model.layers=$N --format text; done
say "memory edge: twin run --backend cuda"
timeout 120 $B run $S --backend cuda --steps 2 $H --set model.layers=29 --format json > $OUT/run-L29.json 2>> $L; echo "L29 rc=$?" | tee -a $L
run timeout 60 $B run $S --backend cuda --steps 2 $H --set model.layers=30; echo "L30 rc=$?" | tee -a $L
say "calibrate a GPU with no base profile"
run timeout 120 $B calibrate --backend cuda --quick --no-progress --scenario $S --gpu-name h200-141gb -o $OUT/h200-quick.toml
grep -E '^name|^\[gpu\]|^name =|bf16_flops_per_s|bandwidth_bytes_per_s =' $OUT/h200-quick.toml | head -8 | tee -a $L
say "verify with the quick profile and with the bundled one"
timeout 180 $B verify $S --backend cuda $H --profile $OUT/h200-quick.toml --format json > $OUT/verify-quick.json 2>> $L; echo "verify quick rc=$?" | tee -a $L
run timeout 180 $B verify $S --backend cuda $H --profile scenarios/profiles/h200-dgx.toml
run timeout 180 $B verify $S --backend cuda $H --profile scenarios/profiles/h200-dgx.toml --set model.layers=16 --set training.micro_batch=2 --set training.global_batch=8
say "CUDA kill and reload"
mkdir -p /tmp/cf
TWIN=$B timeout 300 bash tools/gpu/cuda-faults.sh /tmp/cf/run $H --set model.layers=1 --set model.vocab=32000 >> $L 2>&1; echo "faults rc=$?" | tee -a $L
cp /tmp/cf/run/report.json $OUT/faults-report.json 2>/dev/null
ls -la /tmp/cf/run/ckpt/*/ >> $L 2>&1
say done
tail -c 6000 $L
