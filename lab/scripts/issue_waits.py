#!/usr/bin/env python3
"""How late the host runtime issued each op after its inputs were ready, by kind of edge.

For every op of a measured trace that records its issue time (`issued_us`), the
release is the latest end among its deps and the op before it on its stream; the issue delay
is the issue time less the release. Printed per (op kind <- releasing kind) with count, median,
90th percentile, max and total over the traces given, as
docs/journal/2026-11-validation-history.md (2026-11-24) quotes them. The simulator issues an op at
its release (plus `[host] handoff_ns` across streams), so these delays are what a model of the OS
scheduler on shared cores would have to reproduce.

    cargo run --release -q -p twin-sim --example schedule_json -- scenarios/host/tp-pp.toml \\
        > /tmp/tp-pp.schedule.json
    twin verify step scenarios/host/tp-pp.toml --profile P --trace-dir /tmp/v
    lab/scripts/issue_waits.py /tmp/tp-pp.schedule.json /tmp/v [more trace dirs of the same scenario]

Kinds: C compute, K collective, S send, R receive, A allocation, F free; "str" is the op
before on the same stream. Allocations and frees that took no time are not in the Perfetto
trace, so an op whose stream predecessor is one is released by the nearest earlier op shown.
"""
import json
import statistics
import sys

KIND = {"compute": "C", "collective": "K", "send": "S", "recv": "R", "alloc": "A", "free": "F"}


def delays(schedule, trace_dir):
    """(op kind, releasing kind) -> issue delays in µs, for one trace directory."""
    t = json.load(open(trace_dir.rstrip("/") + "/measured.trace.json"))
    ev = {(e["pid"], e["args"]["op"]): e for e in t["traceEvents"] if e["ph"] == "X"}
    out = {}
    for (rank, i), e in ev.items():
        issued = e["args"].get("issued_us")
        if issued is None:
            continue
        ops = schedule["programs"][schedule["program_of"][rank]]["ops"]
        op = ops[i]
        releases = []
        for d in op["deps"]:
            if (rank, d) in ev:
                p = ev[(rank, d)]
                releases.append((p["ts"] + p["dur"], KIND.get(ops[d]["kind"]["op"], "?")))
        for j in range(i - 1, -1, -1):
            if ops[j]["stream"] == op["stream"] and (rank, j) in ev:
                p = ev[(rank, j)]
                releases.append((p["ts"] + p["dur"], "str"))
                break
        if not releases:
            continue
        at, by = max(releases)
        key = (KIND.get(op["kind"]["op"], "?"), by)
        out.setdefault(key, []).append(issued - at)
    return out


def main(argv):
    if len(argv) < 2 or any(a.startswith("-") for a in argv):
        print(__doc__.strip())
        return 2
    schedule = json.load(open(argv[0]))
    merged = {}
    for d in argv[1:]:
        for k, v in delays(schedule, d).items():
            merged.setdefault(k, []).extend(v)
    print(f"{'op <- released by':<20} {'count':>6} {'median':>9} {'p90':>9} {'max':>9} {'total':>10}  (µs)")
    for (kind, by), v in sorted(merged.items()):
        v.sort()
        p90 = v[int(0.9 * (len(v) - 1))]
        total = sum(x for x in v if x > 0)
        print(f"{kind + ' <- ' + by:<20} {len(v):>6} {statistics.median(v):>9.1f} {p90:>9.1f} "
              f"{v[-1]:>9.1f} {total:>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
