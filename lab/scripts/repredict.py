#!/usr/bin/env python3
"""Re-predict stored host measurement sets with the current binary (docs/validation.md).

A set is a directory holding profile.toml (what `twin calibrate host` wrote) and
SCENARIO.json (`twin verify step --format json`) for some of the five host scenarios, as
lab/scripts/host_set.sh writes them. They are stored as xz archives of set directories:
docs/measurements/raw/2026-11-23-host-sets.tar.xz holds one hundred and fifty-nine from an Intel
VM; docs/measurements/raw/2026-11-24-amd-sets.tar.xz (one hundred and five) and
2026-11-25-amd-sets.tar.xz (ten) come from an AMD one. An archive given as an argument stands
for every set in it (unpacked into a temporary directory). The measured side is kept; the
prediction is redone by `twin simulate --profile` with this checkout's model, so a model
change can be judged on real runs in seconds:

    lab/scripts/repredict.py docs/measurements/raw/2026-11-23-host-sets.tar.xz

prints step error (%) / bubble error (points) per set and scenario, then the medians, and, for
sets whose verify JSON has `core_activity` (newer sets), each core's median idle time between
ops and holes, measured against the stored prediction. Errors
are (measured - predicted) / measured, as `twin verify` reports them. --measured-only prints
the stored comparison instead of re-predicting. TWIN names the binary (default
target/release/twin).
"""
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile

SCENARIOS = ["single", "pp", "tp-pp", "dp-pp-zero", "pp-wide"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def predict(twin, scenario, profile):
    out = subprocess.run(
        [twin, "simulate", os.path.join(ROOT, "scenarios", "host", scenario + ".toml"),
         "--profile", profile, "--format", "json"],
        capture_output=True, text=True, check=True)
    r = json.loads(out.stdout)
    return r["step_time_s"], r["bubble_fraction"]


def main(argv):
    measured_only = "--measured-only" in argv
    dirs = [a for a in argv if a != "--measured-only"]
    if not dirs or any(a.startswith("-") for a in dirs):
        print(__doc__.strip())
        return 2
    dirs = expand(dirs, tempfile.mkdtemp(prefix="repredict-"))
    twin = os.environ.get("TWIN", os.path.join(ROOT, "target", "release", "twin"))
    errors = {s: [] for s in SCENARIOS}
    for d in dirs:
        row = []
        for s in SCENARIOS:
            f = os.path.join(d, s + ".json")
            if not os.path.exists(f):
                continue
            v = json.load(open(f))
            m, mb = v["step_time_measured_s"], v["bubble_fraction_measured"]
            if measured_only:
                p, pb = v["step_time_predicted_s"], v["bubble_fraction_predicted"]
            else:
                p, pb = predict(twin, s, os.path.join(d, "profile.toml"))
            e, eb = (m - p) / m * 100, (mb - pb) * 100
            errors[s].append((e, eb))
            row.append(f"{s} {e:+5.1f}%/{eb:+5.1f}")
        print(f"{os.path.basename(os.path.normpath(d)):12} " + "  ".join(row))
    if len(dirs) > 1:
        med = [f"{s} {statistics.median(x[0] for x in errors[s]):+5.1f}%/"
               f"{statistics.median(x[1] for x in errors[s]):+5.1f}"
               for s in SCENARIOS if errors[s]]
        print(f"{'median':12} " + "  ".join(med))
    holes(dirs)
    return 0


def expand(args, scratch):
    """Directories as given; an archive (.tar.xz) becomes the set directories it holds."""
    dirs = []
    for a in args:
        if not a.endswith(".tar.xz"):
            dirs.append(a)
            continue
        with tarfile.open(a) as t:
            t.extractall(scratch, filter="data")
        top = os.path.join(scratch, os.path.basename(a)[: -len(".tar.xz")])
        dirs += sorted(os.path.join(top, d) for d in os.listdir(top)
                       if os.path.isdir(os.path.join(top, d)))
    return dirs


def holes(dirs):
    """Median per-core idle time between ops (ms) and holes per core, measured against
    predicted, from the sets whose verify JSON has `core_activity` (newer sets): the
    stored prediction's, not a re-prediction (that needs the predicted trace)."""
    rows = {s: [] for s in SCENARIOS}
    for d in dirs:
        for s in SCENARIOS:
            f = os.path.join(d, s + ".json")
            if not os.path.exists(f):
                continue
            c = json.load(open(f)).get("core_activity")
            if c:
                m, p = c["measured"], c["predicted"]
                rows[s].append((m["idle_between_ops_s"] * 1e3, m["holes_per_core"],
                                p["idle_between_ops_s"] * 1e3, p["holes_per_core"]))
    out = []
    for s in SCENARIOS:
        if rows[s]:
            med = [statistics.median(r[i] for r in rows[s]) for i in range(4)]
            out.append(f"{s} {med[0]:.2f} ms/{med[1]:.0f} vs {med[2]:.2f}/{med[3]:.0f}")
    if out:
        print(f"{'core holes':12} " + "  ".join(out)
              + "  (measured vs stored prediction: idle between ops per core, holes per core)")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
