#!/usr/bin/env python3
"""The predicted and measured critical paths of a `twin verify step --format json` report, op by op.

`twin verify`'s JSON carries each side's path as `critical_path.{predicted,measured}.steps`
(docs/validation.md, "Critical path"): every op on it in time order, the time it counts on the
path, and the wait before the next op on the path, split into the executor issuing it late
("issue") and what it then waited for. This prints both, one line per op, and the waits of
WAIT_US or more flagged, so where a measured step lost its time reads at a glance:

    twin verify step scenarios/host/pp.toml --profile P --format json > /tmp/v.json
    lab/scripts/critical_steps.py /tmp/v.json [WAIT_US]
"""
import json
import sys


def show(side, path, flag_us):
    steps = path.get("steps", [])
    print(f"{side}: span {path['span_s'] * 1e3:.3f} ms, {len(steps)} ops")
    for s in steps:
        wait_us = (s["issue_wait_s"] + s["wait_s"]) * 1e6
        mark = " <--" if wait_us >= flag_us else ""
        then = (f"then issue {s['issue_wait_s'] * 1e6:7.1f} + {s['waited_on'] or '-':<10} "
                f"{s['wait_s'] * 1e6:7.1f} us{mark}") if s["waited_on"] else ""
        print(f"  {s['start_s'] * 1e6:9.1f} us  r{s['rank']:<2} #{s['op']:<4} {s['name'][:40]:<40} "
              f"{s['on_path_s'] * 1e6:8.1f} us  {then}")


def main(argv):
    if not argv or argv[0].startswith("-") or len(argv) > 2:
        print(__doc__.strip())
        return 2
    report = json.load(open(argv[0]))
    flag_us = float(argv[1]) if len(argv) > 1 else 20.0
    paths = report.get("critical_path") or {}
    for side in ("predicted", "measured"):
        if paths.get(side):
            show(side, paths[side], flag_us)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
