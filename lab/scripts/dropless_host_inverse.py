#!/usr/bin/env python3
"""For each dropless MoE row of the modern table: the host time per kernel under which twin's
step would equal the published one (bisection over a scratch copy of the megatron-core
framework file). A diagnostic of the host-synchronisation mechanism, not a fit: if one host
time explained every row, the rows would agree on it
(docs/journal/2026-12-01-dropless-host-sync.md).

  cargo build --release --bin twin
  ./target/release/twin validate data/validation/throughput-modern.toml \
      --profile scenarios/profiles/h100-dgx.toml --profile scenarios/profiles/h100-grand-teton.toml \
      --emit-scenarios /tmp/emit > /tmp/validate.txt
  python3 lab/scripts/dropless_host_inverse.py /tmp/emit /tmp/validate.txt

Run from the repository root.
"""
import json, re, subprocess, sys, tempfile, pathlib

emit, table = pathlib.Path(sys.argv[1]), sys.argv[2]
work = pathlib.Path(tempfile.mkdtemp())
published = {}
for line in open(table):
    m = re.match(r"\| (\S+) \| step_time_s[^|]*\| ([0-9.]+) \| ([0-9.]+) \|", line)
    if m:
        published[m.group(1)] = (float(m.group(2)), float(m.group(3)))
base = pathlib.Path("scenarios/frameworks/megatron-core.toml").read_text()


def step(row: str, host_ns: int) -> float:
    fw = work / f"mc-{host_ns}.toml"
    if not fw.exists():
        fw.write_text(base.replace(
            "cuda_graphs_kernel_gap_ns = ",
            f'host_per_kernel_ns = {{ value = {host_ns}, ref = "inverse" }}\ncuda_graphs_kernel_gap_ns = ', 1))
    text = (emit / f"{row}.toml").read_text().replace(
        'framework = "megatron-core"', f'framework_file = "{fw}"', 1)
    scen = work / f"{row}.toml"
    scen.write_text(text)
    out = subprocess.run(["./target/release/twin", "simulate", str(scen), "--profile",
                          "scenarios/profiles/h100-dgx.toml", "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["step_time_s"]


for row in sorted(published):
    text = (emit / f"{row}.toml").read_text() if (emit / f"{row}.toml").exists() else ""
    if "moe_routing" not in text or "capacity" in text.split("moe_routing", 1)[1].split("\n", 1)[0]:
        continue
    pub, pred = published[row]
    lo, hi = 0, 1_000_000
    if step(row, hi) < pub:
        print(f"{row:32s} published {pub:7.2f} s, twin {pred:7.2f} s: not reached at {hi/1000:.0f} us")
        continue
    while hi - lo > 500:
        mid = (lo + hi) // 2
        if step(row, mid) < pub:
            lo = mid
        else:
            hi = mid
    print(f"{row:32s} published {pub:7.2f} s, twin {pred:7.2f} s: equal at {hi/1000:6.1f} us per kernel")
