"""Environment lines: versions, GPUs and their memory, GPU-to-GPU links, torch.distributed backends.

Every optional package is imported here, inside the check, and a missing one is reported, never
raised: the point of the report is to say what this machine has.
"""

from __future__ import annotations

import importlib
import platform
import shutil
import socket
import subprocess

from .result import PASS, Check, skipped

NO_CUDA = "no CUDA device"
OPTIONAL = (("numba", "numba"), ("cupy", "cupy"))


def _version(module: str) -> str:
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name == module:
            return "not installed"
        return f"not importable (needs {e.name})"
    except Exception as e:  # noqa: BLE001  a broken wheel raises more than ImportError
        return f"not importable ({type(e).__name__}: {str(e).splitlines()[0][:80]})"
    return str(getattr(mod, "__version__", "?"))


def nvidia_smi(*args: str) -> str | None:
    """The output of ``nvidia-smi ARGS``, or ``None`` (not on the PATH, failed or silent)."""
    smi = shutil.which("nvidia-smi")
    try:
        out = smi and subprocess.run([smi, *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out and out.returncode == 0 else None


def driver_version() -> str | None:
    """The NVIDIA driver version (nvidia-smi), else the CUDA driver API version (Numba)."""
    smi = nvidia_smi("--query-gpu=driver_version", "--format=csv,noheader")
    if smi:
        return smi.splitlines()[0]
    try:
        from numba import cuda

        if cuda.is_available():
            major, minor = cuda.cudadrv.driver.driver.get_version()
            return f"CUDA driver API {major}.{minor}"
    except Exception:  # noqa: BLE001  no driver, or numba without CUDA support
        pass
    return None


def versions() -> Check:
    import torch

    from ... import __version__
    from ...system.gpu import simulator_enabled

    data = {"mnmg_sampler": __version__, "python": platform.python_version(),
            "host": socket.gethostname(), "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
            "driver": driver_version() if torch.cuda.is_available() else None,
            "numba_cuda_simulator": simulator_enabled()}
    for key, module in OPTIONAL:
        data[key] = _version(module)
    detail = (f"torch {data['torch']} (CUDA {data['torch_cuda'] or 'none'}), driver "
              f"{data['driver'] or 'none'}, numba {data['numba']}, cupy {data['cupy']}")
    if data["numba_cuda_simulator"]:
        detail += "; Numba CUDA simulator on"
    return Check("env.versions", PASS, detail, data=data)


def gpus() -> Check:
    import torch

    if not torch.cuda.is_available():
        return skipped("env.gpus", f"{NO_CUDA} (torch.cuda.is_available() is False)")
    found = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        free, total = torch.cuda.mem_get_info(i)
        found.append({"index": i, "name": p.name, "capability": f"{p.major}.{p.minor}",
                      "total_bytes": int(total), "free_bytes": int(free),
                      "multiprocessors": int(p.multi_processor_count)})
    detail = "; ".join(f"{g['index']}: {g['name']} sm_{g['capability'].replace('.', '')}, "
                       f"{g['free_bytes'] / 2**30:.1f} of {g['total_bytes'] / 2**30:.1f} GiB free"
                       for g in found)
    return Check("env.gpus", PASS, f"{len(found)} GPU(s): {detail}", data={"gpus": found})


def topology() -> Check:
    """Which GPU pairs can reach each other directly (peer access, as torch tells it), and
    ``nvidia-smi topo -m`` (NVLink or PCIe per pair) when nvidia-smi is on the PATH."""
    import torch

    if not torch.cuda.is_available():
        return skipped("env.topology", NO_CUDA)
    n = torch.cuda.device_count()
    if n < 2:
        return skipped("env.topology", f"{n} GPU: no GPU pair to link")
    peer = [[i == j or bool(torch.cuda.can_device_access_peer(i, j)) for j in range(n)]
            for i in range(n)]
    pairs = n * (n - 1)
    direct = sum(peer[i][j] for i in range(n) for j in range(n) if i != j)
    topo = nvidia_smi("topo", "-m")
    data: dict = {"peer_access": peer, "nvidia_smi_topo": topo}
    how = ("NVLink or PCIe per pair: no answer from nvidia-smi topo -m" if topo is None else
           f"nvidia-smi topo -m: {'NVLink present' if 'NV' in topo else 'no NVLink (PCIe)'}")
    return Check("env.topology", PASS,
                 f"peer access on {direct} of {pairs} ordered GPU pairs; {how}", data=data)


def backends() -> Check:
    import torch.distributed as dist

    if not dist.is_available():
        return Check("env.backends", PASS, "torch.distributed is not built into this torch",
                     data={"available": []})
    have = {name: bool(getattr(dist, f"is_{name}_available", lambda: False)())
            for name in ("gloo", "nccl", "mpi", "ucc")}
    on = [k for k, v in have.items() if v]
    return Check("env.backends", PASS, f"torch.distributed backends: {', '.join(on) or 'none'}",
                 data=have)


CHECKS = (("env.versions", versions), ("env.gpus", gpus), ("env.topology", topology),
          ("env.backends", backends))
