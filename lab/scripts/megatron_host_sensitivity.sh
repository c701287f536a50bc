#!/usr/bin/env bash
# Megatron-Core rows of the modern table under a scratch copy of the megatron-core framework
# file with `[launch] host_per_kernel_ns` and `[attention] backend` set
# (docs/journal/2026-11-30-megatron-host-time-sensitivity.md asks and answers).
#
#   cargo build --release --bin twin
#   ./target/release/twin validate data/validation/throughput-modern.toml \
#       --profile scenarios/profiles/h100-dgx.toml --profile scenarios/profiles/h100-grand-teton.toml \
#       --emit-scenarios /tmp/emit > /tmp/validate.txt
#   bash lab/scripts/megatron_host_sensitivity.sh /tmp/emit /tmp/validate.txt 15000 cudnn
#
# Arguments: the emitted scenarios, the validate table (for the published step times), the
# host time per kernel in ns, the attention backend. Run from the repository root.
set -euo pipefail
emit=$1; table=$2; ns=$3; backend=$4
work=$(mktemp -d)
fw=$work/megatron-core.toml
sed -e "s|^cuda_graphs_kernel_gap_ns = |host_per_kernel_ns = { value = $ns, ref = \"sensitivity\" }\ncuda_graphs_kernel_gap_ns = |" \
    -e "s|^backend = { value = \"flash\"|backend = { value = \"$backend\"|" \
    scenarios/frameworks/megatron-core.toml > "$fw"
grep "^| \(nemo\|mb\)" "$table" | awk -F'|' '{gsub(/ /,"",$2); print $2, $4, $5}' |
while read -r id published base; do
    sed -e "s|^framework = \"megatron-core\"|framework_file = \"$fw\"|" "$emit/$id.toml" > "$work/$id.toml"
    predicted=$(./target/release/twin simulate "$work/$id.toml" --profile scenarios/profiles/h100-dgx.toml \
        --format json | python3 -c "import json, sys; print(json.load(sys.stdin)['step_time_s'])")
    echo "$id $published $base $predicted"
done > "$work/rows.txt"
python3 - "$work/rows.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
err = lambda p, pub: (float(p) - float(pub)) / float(pub) * 100
e = [(r[0], err(r[3], r[1]), err(r[2], r[1])) for r in rows]
moe = lambda i: i.startswith("mb") and "llama" not in i
groups = [
    ("nemo2407", lambda i: i.startswith("nemo2407")),
    ("nemo-lc", lambda i: i.startswith("nemo-lc")),
    ("mb dense", lambda i: i.startswith("mb") and "llama" in i),
    ("mb moe", moe),
]
for name, f in groups:
    sel = [x for x in e if f(x[0])]
    signed = " ".join(f"{x[1]:+.0f}" for x in sel)
    print(f"{name:10s} n={len(sel):2d} median |error| {statistics.median(abs(x[1]) for x in sel):5.1f}%"
          f" (file as it is: {statistics.median(abs(x[2]) for x in sel):5.1f}%)  signed: {signed}")
dense = [x for x in e if not moe(x[0])]
print(f"dense n={len(dense)} median {statistics.median(abs(x[1]) for x in dense):.1f}%"
      f" max {max(abs(x[1]) for x in dense):.1f}%")
PY
rm -rf "$work"
