#!/usr/bin/env bash
# One measurement set of the host model (docs/validation.md): calibrate on this machine from
# microbenchmarks only, then verify the five bundled host scenarios, 5 runs x 10 steps each, and
# keep what re-predicting them later needs. Takes about a minute on a 2-core machine; stop
# every other heavy process first, the machine's speed is part of what is measured.
#
#   lab/scripts/host_set.sh OUTDIR [PROFILE]
#
# OUTDIR gets profile.toml (unless PROFILE is given, which is then used as is),
# calibrate.log, and SCENARIO.json (`twin verify step --format json`) with SCENARIO/ (both traces)
# for each scenario. Re-predict stored sets with lab/scripts/repredict.py.
set -euo pipefail
if [ $# -lt 1 ]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
twin=${TWIN:-$root/target/release/twin}
out=$1
mkdir -p "$out"
if [ $# -ge 2 ]; then
  profile=$2
else
  profile=$out/profile.toml
  "$twin" calibrate host --scenario "$root/scenarios/host/tp-pp.toml" \
    -o "$profile" --no-progress >"$out/calibrate.log" 2>&1
fi
for s in single pp tp-pp dp-pp-zero pp-wide; do
  # verify exits 1 when a threshold is exceeded; none is given here, so a failure is real.
  "$twin" verify "$root/scenarios/host/$s.toml" --profile "$profile" --repeat 5 \
    --format json --trace-dir "$out/$s" >"$out/$s.json"
done
python3 "$root/lab/scripts/repredict.py" --measured-only "$out"
