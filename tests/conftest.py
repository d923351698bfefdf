"""Settings of every test process."""

from __future__ import annotations

import torch

# One intra-op thread in the pytest process: the suite's ranks and subprocesses share its cores,
# and an OpenMP region that waits for a descheduled thread turns a tiny op into milliseconds (a
# 40-step GraphSAGE fit on 200 nodes: 4 s on 2 threads beside one busy core, 0.07 s on one).
# Tests of thread counts set their own (and the ranks and subprocesses theirs).
torch.set_num_threads(1)
