#!/usr/bin/env bash
# A real kill and reload on one GPU: runs
#
#   twin run scenarios/gpu/llama3-8b-1gpu.toml --backend cuda --steps 6 \
#       --checkpoint-dir OUT/ckpt --checkpoint-every 2 --inject "kill rank=0 at=step:4"
#
# (with --format json, and any further twin arguments given after OUT), then checks that
# checkpoints 2 and 4 are complete on disk with a verified rank file each, that the report is
# the CUDA backend's and shows exactly one recovery (the injected kill, resumed from step 4),
# and prints the evidence. Any failed check exits non-zero with FAIL on stderr.
#
# Usage: tools/gpu/cuda-faults.sh OUT_DIR [TWIN_ARGS...]
#   TWIN=path/to/twin (default: target/release/twin, else target/debug/twin)
#
# Each checkpoint holds the model state (weights and optimizer, 36.5 GiB for this scenario
# with its 8 layers), so the two take 73 GiB of disk; the script
# refuses to start when OUT_DIR's file system has less free space than two checkpoints. A
# smaller state keeps the layer shapes and takes less disk and time, e.g.
#   tools/gpu/cuda-faults.sh /tmp/cf --set model.layers=1     (16.5 GiB per checkpoint)
set -euo pipefail

fail() { echo "FAIL: $*" >&2; exit 1; }

[ $# -ge 1 ] || fail "usage: $0 OUT_DIR [TWIN_ARGS...]"
mkdir -p "$1"
out=$(cd "$1" && pwd)
shift
twin=${TWIN:-}
if [ -n "$twin" ]; then twin=$(cd "$(dirname "$twin")" && pwd)/$(basename "$twin"); fi
cd "$(dirname "$0")/../.."
scenario=scenarios/gpu/llama3-8b-1gpu.toml
if [ -z "$twin" ]; then
  for t in target/release/twin target/debug/twin; do
    if [ -x "$t" ]; then twin=$t; break; fi
  done
fi
[ -n "$twin" ] && [ -x "$twin" ] || fail "no twin binary: build one (cargo build --release) or set TWIN"
command -v python3 >/dev/null || fail "python3 is needed to read the JSON report"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

ckpt=$out/ckpt
[ ! -e "$ckpt" ] || fail "$ckpt exists: give an empty OUT_DIR"

# Two checkpoints of the model state (weights + optimizer) must fit on the disk.
"$twin" simulate "$scenario" --format json "$@" >"$out/predicted.json" \
  || fail "twin simulate $scenario $* failed"
state_bytes=$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["ranks"][0]["memory_breakdown"]
print(r["weights"] + r["optimizer"])' "$out/predicted.json")
free_bytes=$(( $(df -Pk "$out" | awk 'NR==2 {print $4}') * 1024 ))
need_bytes=$(( 2 * state_bytes + (1 << 30) ))
echo "model state ${state_bytes} bytes per checkpoint; ${free_bytes} bytes free in $out"
[ "$free_bytes" -ge "$need_bytes" ] \
  || fail "two checkpoints need ${need_bytes} bytes, $out has ${free_bytes} free: use a larger disk or add --set model.layers=1"

start=$(date +%s)
set +e
"$twin" run "$scenario" --backend cuda --steps 6 --checkpoint-dir "$ckpt" \
  --checkpoint-every 2 --inject "kill rank=0 at=step:4" --format json "$@" \
  >"$out/report.json" 2>"$out/stderr.txt"
rc=$?
set -e
echo "twin run exited $rc after $(( $(date +%s) - start )) s"
cat "$out/stderr.txt" >&2
[ "$rc" -eq 0 ] || fail "twin run exited $rc (stderr above)"

echo "--- checkpoint files"
ls -l "$ckpt"/step-*/
for step in 000002 000004; do
  [ -f "$ckpt/step-$step/COMPLETE" ] || fail "checkpoint step-$step has no COMPLETE manifest"
  [ -f "$ckpt/step-$step/rank-00000.ckpt" ] || fail "checkpoint step-$step has no rank file"
done

echo "--- report"
python3 - "$out/report.json" "$ckpt" "$state_bytes" <<'EOF'
import json, os, struct, sys

report, ckpt, state_bytes = sys.argv[1], sys.argv[2], int(sys.argv[3])
v = json.load(open(report))

def check(ok, what):
    if not ok:
        print(f"FAIL: {what}", file=sys.stderr)
        sys.exit(1)

print(json.dumps({k: v.get(k) for k in
                  ["backend", "scenario", "step_time_s", "final_weights_digest",
                   "checkpoints", "startup", "recoveries"]}, indent=2))
check(v.get("backend") == "cuda", f"backend is {v.get('backend')!r}, not 'cuda'")
rec = v.get("recoveries") or []
check(len(rec) == 1, f"{len(rec)} recoveries reported, 1 expected")
r = rec[0]
check(str(r.get("cause", "")).startswith("injected: kill rank=0 at=step:4"),
      f"recovery cause {r.get('cause')!r}")
check(r.get("failed_rank") == 0, f"failed rank {r.get('failed_rank')}")
check(r.get("at_step") == 4, f"fault at step {r.get('at_step')}, 4 expected")
check(r.get("resumed_from_step") == 4, f"resumed from {r.get('resumed_from_step')}, 4 expected")
check(r.get("reload_s") is not None, "no reload time: the restarted rank did not reload")
c = v.get("checkpoints") or {}
check(c.get("count", 0) >= 2, f"{c.get('count')} checkpoints written, 2 expected")
for step in (2, 4):
    f = os.path.join(ckpt, f"step-{step:06d}", "rank-00000.ckpt")
    with open(f, "rb") as fh:
        head = fh.read(64)
    magic, version, rank, world, _, _, st, payload = struct.unpack("<8sIIIIQQQ", head[:48])
    check(magic == b"TWINCKPT", f"{f}: bad magic")
    check((rank, world, st) == (0, 1, step), f"{f}: rank {rank} world {world} step {st}")
    check(payload >= state_bytes, f"{f}: payload {payload} bytes < state {state_bytes}")
    check(os.path.getsize(f) == payload + 72, f"{f}: size does not match its header")
    print(f"{f}: step {st}, payload {payload} bytes, file {os.path.getsize(f)} bytes")
print("OK: checkpoints written, one kill recovered by restart and reload on the CUDA backend")
EOF
