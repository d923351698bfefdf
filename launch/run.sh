#!/usr/bin/env bash
# One node: NPROC ranks of `mnmg-sampler train` under torchrun; arguments are config overrides.
#   bash launch/run.sh                                    # configs/quickstart.yaml, 2 ranks
#   NPROC=4 CONFIG=configs/cora.yaml bash launch/run.sh sampler.batch_size=512 training.epochs=5
# Run from the repository root: relative paths inside configs are relative to the working dir.
#
# Environment (every knob has a default):
#   NPROC     ranks on this node (default 2); `gpu` = one per visible GPU
#   CONFIG    YAML job file (default configs/quickstart.yaml of this checkout)
#   LOG_RANK  local ranks shown on the console, comma list (default 0); lines get [rankN]: prefixes
#             (N: global rank)
#   LOG_DIR   if set, torchrun also writes every rank's stdout/stderr under this directory
#   NODE_ADDR address the rendezvous store is reached at (default 127.0.0.1: every store of the
#             job listens on loopback only; set it to this node's address to reach it from outside)
#   TORCHRUN  launcher command (default `python -m mnmg_sampler.system.runtime`, torchrun with stores
#             bound to loopback, with .venv/bin/python of this checkout, else $PY, else python3)
#   OMP_NUM_THREADS  OpenMP threads per rank (default cores / NPROC, at least 1; torchrun would
#             force 1). torch and numba threads come from runtime.threads_per_rank in the config.
#   NCCL_DEBUG       NCCL log level on GPU runs (default WARN; INFO when debugging a hang)
#   CUDA_VISIBLE_DEVICES  which GPUs the ranks see (rank i uses cuda:i of the visible ones)
# The rendezvous binds a free port ($NODE_ADDR:0), so parallel runs never collide.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NPROC=${NPROC:-2}
CONFIG=${CONFIG:-$ROOT/configs/quickstart.yaml}
LOG_RANK=${LOG_RANK:-0}
NODE_ADDR=${NODE_ADDR:-127.0.0.1}
if [ -z "${TORCHRUN:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then TORCHRUN="$ROOT/.venv/bin/python -m mnmg_sampler.system.runtime"
  else TORCHRUN="${PY:-python3} -m mnmg_sampler.system.runtime"; fi
fi
read -r -a launcher <<< "$TORCHRUN"
if [[ $NPROC =~ ^[0-9]+$ ]]; then
  cores=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
  threads=$(( cores / NPROC )); [ "$threads" -ge 1 ] || threads=1
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$threads}
fi
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
# torchrun's --tee/--role prefix every shown line with [rankN]: (global rank N), so
# mnmg-sampler adds no prefix of its own.
export MNMG_RANK_PREFIX=0 TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[rank${rank}]:'
extra=()
[ -z "${LOG_DIR:-}" ] || extra+=(--log-dir "$LOG_DIR")
exec "${launcher[@]}" --nproc-per-node "$NPROC" \
  --rdzv-backend c10d --rdzv-endpoint "$NODE_ADDR:0" \
  --local-ranks-filter "$LOG_RANK" --role rank --tee 3 ${extra[@]+"${extra[@]}"} \
  -m mnmg_sampler train --config "$CONFIG" "$@"
