#!/usr/bin/env bash
# Memory edge probe on one H200: exact driver figures, twin's CUDA runtime at 28-30 layers,
# and what a PyTorch process holds for context, cuBLAS and NCCL.
B=gpu-bin/twin
S=scenarios/gpu/llama3-8b-1gpu.toml
{
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.reserved,memory.used,memory.free --format=csv
nvidia-smi -q -d MEMORY
$B doctor
} > $OUT/driver.txt 2>&1
cat $OUT/driver.txt
for L in 28 29 30; do
  timeout 120 $B run $S --backend cuda --steps 2 --set cluster.gpu=h200-141gb --set model.layers=$L > $OUT/run-L$L.txt 2>&1
  echo "L=$L rc=$?" >> $OUT/run-L$L.txt
  grep -E "measured:|device_memory|rc=|error|OUT|verdict" $OUT/run-L$L.txt
done
PYTHONUNBUFFERED=1 timeout 120 python3 - > $OUT/torch-mem.txt 2>&1 <<'PY'
import os, torch, json
def used():
    f, t = torch.cuda.mem_get_info(); return t - f, t
r = {}
torch.cuda.init(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
r["after_context"] = used()
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); c = a @ a; torch.cuda.synchronize()
r["after_bf16_matmul"] = used(); r["torch_allocated_after_matmul"] = torch.cuda.memory_allocated(); r["torch_reserved_after_matmul"] = torch.cuda.memory_reserved()
del a, c; torch.cuda.empty_cache(); r["after_empty_cache"] = used()
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29555")
import torch.distributed as dist
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
x = torch.ones(1 << 20, device="cuda"); dist.all_reduce(x); torch.cuda.synchronize()
r["after_nccl_allreduce"] = used(); r["torch_reserved_after_nccl"] = torch.cuda.memory_reserved()
dist.destroy_process_group()
r["total_bytes"] = torch.cuda.mem_get_info()[1]
r["props_total_memory"] = torch.cuda.get_device_properties(0).total_memory
r["versions"] = dict(torch=torch.__version__, cuda=torch.version.cuda, nccl=".".join(map(str, torch.cuda.nccl.version())))
print(json.dumps(r, indent=1))
PY
cat $OUT/torch-mem.txt
