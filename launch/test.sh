#!/usr/bin/env bash
# Installs (launch/setup.sh) and runs the test suite; arguments go to pytest.
# Slow tests (marked `slow`, each covered by a faster one) are skipped unless SLOW=1.
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/setup.sh
export PYTHONHASHSEED=0
marker=${SLOW:+}
if [ -z "${SLOW:-}" ]; then marker="not slow"; fi
exec .venv/bin/python -m pytest -q ${marker:+-m "$marker"} "$@"
