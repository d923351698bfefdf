#!/usr/bin/env bash
# Installs (launch/setup.sh) and runs the test suite; arguments go to pytest.
# Slow tests (marked `slow`, each covered by a faster one) are skipped unless SLOW=1.
# The full set of kill trials (marked `faults`, 29 trials of real ranks killed mid-round) is
# skipped unless FAULTS=1; a reduced set of 6 trials always runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/setup.sh
export PYTHONHASHSEED=0
skip=()
[ -n "${SLOW:-}" ] || skip+=("not slow")
[ -n "${FAULTS:-}" ] || skip+=("not faults")
marker=""
for m in ${skip[@]+"${skip[@]}"}; do marker="${marker:+$marker and }$m"; done
exec .venv/bin/python -m pytest -q ${marker:+-m "$marker"} "$@"
