#!/usr/bin/env bash
# Several nodes: run this once on every node, with the same NNODES, MASTER_ADDR and MASTER_PORT;
# arguments are config overrides. Rendezvous: torchrun's c10d store on MASTER_ADDR:MASTER_PORT.
#   node0$ NNODES=2 NODE_RANK=0 MASTER_ADDR=node0 bash launch/multinode.sh
#   node1$ NNODES=2 NODE_RANK=1 MASTER_ADDR=node0 bash launch/multinode.sh
# Two "nodes" on one machine (how the project tests it): MASTER_ADDR=127.0.0.1, NPROC=1, a free
# MASTER_PORT, runtime.backend=gloo runtime.device=cpu. Guide: docs/multinode.md.
# launch/slurm.sbatch runs this script on every node of an allocation (NODE_RANK=SLURM_NODEID).
# A rank's typed error (bad config, missing file: exit code 2, or 3 when a peer died) ends the
# node's run with that line, one line of the launcher and the same exit code, as launch/run.sh;
# torchrun's failure summary is kept for real crashes (signals, tracebacks).
#
# Environment:
#   NNODES       number of nodes (default 2)
#   NODE_RANK    0 on the node at MASTER_ADDR, which then hosts the rendezvous store; 1..NNODES-1
#                elsewhere (default $SLURM_NODEID under SLURM, else 0). c10d numbers the nodes in
#                arrival order, so global ranks need not follow NODE_RANK.
#   MASTER_ADDR  address of node 0 every node can reach (default 127.0.0.1)
#   MASTER_PORT  a TCP port free on node 0 (default 29500; pick another per concurrent job)
#   NPROC        ranks per node (default `gpu` = one per visible GPU when nvidia-smi exists,
#                else 1)
#   CONFIG       YAML job file (default configs/multinode_gpu.yaml of this checkout)
#   RDZV_ID      job id, identical on every node (default mnmg-$MASTER_PORT)
#   RDZV_TIMEOUT seconds to wait for every node to join (default 900)
#   LOG_RANK     local ranks shown on the console (default 0)
#   TORCHRUN     launcher command (default `python -m mnmg_sampler.system.runtime`: torchrun that ends a
#                typed error in one line, with .venv/bin/python of this checkout, else $PY, else
#                python3)
#   OMP_NUM_THREADS     OpenMP threads per rank (default cores / NPROC, at least 1)
#   NCCL_DEBUG          NCCL log level (default WARN; INFO prints the chosen interfaces and rings)
#   NCCL_SOCKET_IFNAME  network interface for NCCL bootstrap/sockets, e.g. eth0 or ^lo,docker
#                       (unset = NCCL's choice; set it when nodes have several NICs)
#   GLOO_SOCKET_IFNAME  the same for gloo (CPU runs and the CPU side of the exchange)
#   NCCL_IB_DISABLE     1 = no InfiniBand/RoCE (use TCP); leave unset on IB clusters
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NNODES=${NNODES:-2}
NODE_RANK=${NODE_RANK:-${SLURM_NODEID:-0}}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
MASTER_PORT=${MASTER_PORT:-29500}
if [ -z "${NPROC:-}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1; then NPROC=gpu; else NPROC=1; fi
fi
CONFIG=${CONFIG:-$ROOT/configs/multinode_gpu.yaml}
RDZV_ID=${RDZV_ID:-mnmg-$MASTER_PORT}
RDZV_TIMEOUT=${RDZV_TIMEOUT:-900}
LOG_RANK=${LOG_RANK:-0}
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
if [ "$NODE_RANK" = 0 ]; then is_host=1; else is_host=0; fi
# torch's C++ warnings stay quiet in the launcher only (a store that went away prints ~40 lines
# of frames there); python -m mnmg_sampler.system.runtime gives the ranks back the user's level (with
# another TORCHRUN the ranks keep ERROR too).
export MNMG_WORKER_CPP_LOG_LEVEL=${TORCH_CPP_LOG_LEVEL:-} TORCH_CPP_LOG_LEVEL=ERROR
exec "${launcher[@]}" --nnodes "$NNODES" --nproc-per-node "$NPROC" \
  --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" --rdzv-id "$RDZV_ID" \
  --rdzv-conf "is_host=$is_host,join_timeout=$RDZV_TIMEOUT" \
  --local-ranks-filter "$LOG_RANK" --role rank --tee 3 \
  -m mnmg_sampler train --config "$CONFIG" "$@"
