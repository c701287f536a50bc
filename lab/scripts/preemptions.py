#!/usr/bin/env python3
"""Who took each rank's core from its compute thread, from a `perf sched` recording of a host run.

The host runtime's traces say when an op was issued and when it ran (`issued_us`), not what
the core did in between. The kernel's scheduler events do: for every time a compute stream
thread (`twin-stream-0`) was switched out while still runnable (preempted, or it yielded), this
sums the time until it ran again, grouped by the set of threads that ran meanwhile. A `*`
marks threads of rank 0's process (it also serves the store).
docs/journal/2026-11-validation-history.md (2026-11-24) has the figures this found (the progress
file's writes, a wake per stream reply, sends).

    perf sched record -k CLOCK_MONOTONIC -o /tmp/pp.sched -- \\
        target/release/twin verify step scenarios/host/pp.toml --profile P --repeat 1 --steps 20
    perf script -i /tmp/pp.sched -F comm,tid,pid,cpu,time,event,trace > /tmp/pp.script
    lab/scripts/preemptions.py /tmp/pp.script

`perf record -e cpu-clock -F 25000 -g` of the same command, then `perf report --comm
twin-stream-5 --no-children --sort sym --percentage relative`, says what a thread spent its
own time on. Both work inside the development VM (as root).
"""
import collections
import re
import sys

LINE = re.compile(r"\s*(\S.*?)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s+(.*)")
FIELD = re.compile(r"(\w+=\S+)")
# A gap longer than this is the compute thread idle between steps, not a preemption.
MAX_GAP_US = 1500


def main(argv):
    if len(argv) != 1 or argv[0].startswith("-"):
        print(__doc__.strip())
        return 2
    names, switches = {}, []
    for line in open(argv[0]):
        m = LINE.match(line)
        if not m:
            continue
        comm, pid, tid, cpu, t, event, rest = m.groups()
        names[int(tid)] = (comm, int(pid))
        if event == "sched:sched_switch":
            switches.append((float(t), int(cpu), dict(f.split("=", 1) for f in FIELD.findall(rest))))
    stores = {p for n, p in names.values() if n.startswith("twin-store")}
    runs, current = collections.defaultdict(list), {}
    for t, cpu, f in switches:
        if cpu in current:
            tid, since = current[cpu]
            runs[cpu].append((since, t, tid, f.get("prev_state", "")))
        current[cpu] = (int(f["next_pid"]), t)
    label = lambda tid: names.get(tid, ("?", 0))[0] + ("*" if names.get(tid, ("", 0))[1] in stores else "")
    for cpu in sorted(runs):
        seq = runs[cpu]
        mine = {tid for _, _, tid, _ in seq if names.get(tid, ("",))[0] == "twin-stream-0"}
        total, count, gaps = collections.Counter(), collections.Counter(), []
        for i, (_, end, tid, state) in enumerate(seq):
            if tid not in mine or not state.startswith("R"):
                continue
            j, others = i + 1, set()
            while j < len(seq) and seq[j][2] not in mine:
                others.add(label(seq[j][2]))
                j += 1
            if j == len(seq):
                continue
            gap_us = (seq[j][0] - end) * 1e6
            if gap_us > MAX_GAP_US:
                continue
            gaps.append(gap_us)
            key = ", ".join(sorted(others))
            total[key] += gap_us
            count[key] += 1
        print(f"cpu {cpu}: {len(gaps)} times a compute thread waited, {sum(gaps):.0f} µs in all")
        for key, us in total.most_common(10):
            print(f"  {us:8.0f} µs {count[key]:5d} x  {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
