#!/usr/bin/env bash
# `twin calibrate cuda --quick` with its back-to-back GEMM runs (bf16 and FP8), and the GPU
# test of the back-to-back timing, on one H200.
set -u
B=$PWD/gpu-bin/twin
L=$OUT/sustained-log.txt
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; } 2>> $L
TWIN_GPU_TESTS=1 timeout 120 ./gpu-bin/gpu_tests --test-threads=1 --nocapture back_to_back > $OUT/sustained-gpu-test.txt 2>&1; echo "gpu test rc=$?" >> $L
grep -E "^test |back to back|test result" $OUT/sustained-gpu-test.txt >> $L
/usr/bin/time -f 'wall %e s' timeout 150 $B calibrate cuda --quick --no-progress --scenario scenarios/gpu/llama3-8b-1gpu-fp8.toml -o $OUT/h200-quick-sustained.toml > $OUT/calibrate-quick-sustained.txt 2>&1; echo "calibrate rc=$?" >> $L
cat $OUT/calibrate-quick-sustained.txt >> $L
