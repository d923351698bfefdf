#!/usr/bin/env bash
# Creates ./.venv with mnmg-sampler and its test tools (idempotent, quiet).
#   VENV   where the virtual environment goes (default .venv)
#   TORCH  the torch requirement (default torch==2.13.0: the CPU build; any other spec may
#          pull a multi-GB CUDA build)
#   EXTRAS pip extras to install (default test)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
TORCH=${TORCH:-torch==2.13.0}
EXTRAS=${EXTRAS:-test}
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "$TORCH"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[$EXTRAS]"
