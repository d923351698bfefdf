"""A torchrun worker that reports the listening TCP sockets of itself and of its agent.

Rank 0 prints ``LISTEN [[who, hex address, port], ...]`` (addresses as in /proc/net/tcp*).
"""

from __future__ import annotations

import json
import os


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(link[8:-1])
    return out


def _listening() -> list[tuple[str, int, str]]:
    rows = []
    for name in ("tcp", "tcp6"):
        for line in open(f"/proc/net/{name}").read().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A":  # LISTEN
                addr, port = f[1].split(":")
                rows.append((addr, int(port, 16), f[9]))
    return rows


def main() -> None:
    import torch.distributed as dist

    from mnmg_sampler.system.runtime import init_distributed

    init_distributed("gloo", "cpu", 60)
    mine, agent = _socket_inodes(os.getpid()), _socket_inodes(os.getppid())
    found = sorted(("worker" if ino in mine else "agent", addr, port)
                   for addr, port, ino in _listening() if ino in mine | agent)
    dist.barrier()
    if dist.get_rank() == 0:
        print("LISTEN", json.dumps(found), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
