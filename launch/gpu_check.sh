#!/usr/bin/env bash
# Every GPU claim checked and measured in one run, on the GPU machine, from the repository root:
#   bash launch/gpu_check.sh --out "$OUT"            # a GPU: about 5 minutes, never over 6
#   bash launch/gpu_check.sh --out gc-sim --simulate    # no GPU: tiny sizes, Numba's simulator
# Writes OUT/gpu_check.json and OUT/gpu_check.md (docs/gpu.md says what each step proves).
# Needs nothing from the network: the package comes from this tree (PYTHONPATH), the rest from
# what the machine has installed (torch, numba, numba-cuda, cupy, pytest, ...).
#
# Environment (every knob has a default):
#   PY       python to run (default .venv/bin/python of this checkout, else python3)
#   BUDGET   whole seconds for every step together (default 345); each step runs in its own
#            process with its own limit inside it, and a hung step is stopped and recorded;
#            the whole script is stopped 10 s after the budget in any case
# Exit code 0 when no step failed or timed out, 1 otherwise; the report is written either way.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -z "${PY:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"; else PY=python3; fi
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"
BUDGET=${BUDGET:-345}
exec timeout -k 5 $(( BUDGET + 10 )) "$PY" -m mnmg_sampler.commands.selfcheck.gpu_check \
  --budget "$BUDGET" "$@"
