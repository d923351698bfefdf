"""A torchrun worker for test_launch_errors.py: rank 1 fails in the way named by argv[1].

``exit2`` / ``exit3``: prints one error line and exits with that code, as ``cli.main`` does for
a typed error or a ``PeerError``; ``kill``: SIGKILLs itself; ``raise``: an uncaught exception.
Rank 0 waits to be stopped by torchrun.
"""

from __future__ import annotations

import os
import signal
import sys
import time

if __name__ == "__main__":
    mode = sys.argv[1]
    if int(os.environ["RANK"]) == 1:
        time.sleep(1.0)
        if mode.startswith("exit"):
            print(f"mnmg-sampler train: error: victim {mode}", file=sys.stderr, flush=True)
            sys.exit(int(mode[4:]))
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError("victim raised")
    time.sleep(120)
