"""Memory lines: CuPy and Numba allocations land in PyTorch's caching allocator, and
``expandable_segments`` is in force as configured (:mod:`mnmg_sampler.system.memory`).

:func:`setup` installs the routing before CUDA starts (as a training rank does); the lines then
allocate through Numba and CuPy and read ``torch.cuda.memory_stats`` before and after.
"""

from __future__ import annotations

import os
import warnings

import numpy as np

from .result import FAIL, PASS, Check, injected, skipped

MIB = 1 << 20
NO_DEVICE = "no CUDA device"
SIM = "Numba's CUDA simulator has no device memory"


def setup(expandable_segments: bool) -> dict:
    """:func:`mnmg_sampler.system.memory.setup_memory_pool` before CUDA starts; what it did, with
    its warnings (a conflicting allocator setting, CUDA already started) or its error."""
    from ...system.memory import setup_memory_pool

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            done: dict = setup_memory_pool(expandable_segments)
        except Exception as e:  # noqa: BLE001  reported on the memory lines
            done = {"error": f"{type(e).__name__}: {e}"}
    done["warnings"] = [str(w.message) for w in caught]
    done["expandable_segments_wanted"] = bool(expandable_segments)
    return done


def _allocated(dev) -> int:
    import torch

    torch.cuda.synchronize(dev)
    return int(torch.cuda.memory_stats(dev).get("allocated_bytes.all.current", 0))


def pool(device, sim: bool, routing: dict | None, rank: int = 0) -> Check:
    name = "memory.pool"
    if sim or device is None:
        return skipped(name, SIM if sim else NO_DEVICE)
    if routing is None or "error" in routing:
        return Check(name, FAIL, "routing into PyTorch's pool failed: "
                     f"{(routing or {}).get('error', 'not set up')}")
    import torch
    from numba import cuda

    with cuda.gpus[device.index]:
        cuda.current_context()  # Numba's own context memory is not an allocation under test
        torch.cuda.synchronize(device)
        free0, _ = torch.cuda.mem_get_info(device)
        res0 = int(torch.cuda.memory_reserved(device))
        a0 = _allocated(device)
        held = [cuda.device_array(MIB, dtype=np.uint8)]
        a1 = _allocated(device)
        data = {"numba_bytes_in_pool": a1 - a0, "cupy_routed": bool(routing.get("cupy"))}
        if routing.get("cupy"):
            import cupy

            with cupy.cuda.Device(device.index):
                held.append(cupy.empty(MIB, dtype=cupy.uint8))
            data["cupy_bytes_in_pool"] = _allocated(device) - a1
        free1, _ = torch.cuda.mem_get_info(device)
        res1 = int(torch.cuda.memory_reserved(device))
        # device memory taken while allocating that the pool's reserve does not account for
        data["outside_pool_bytes"] = int((free0 - free1) - (res1 - res0))
        del held
        cuda.current_context().deallocations.clear()  # Numba defers frees: flush them now
        data["released_bytes"] = _allocated(device) - a0
    if injected(name, rank):
        data["numba_bytes_in_pool"] = 0
    bad = []
    if data["numba_bytes_in_pool"] < MIB:
        bad.append(f"a 1 MiB Numba array added {data['numba_bytes_in_pool']} bytes to the pool")
    if data["cupy_routed"] and data["cupy_bytes_in_pool"] < MIB:
        bad.append(f"a 1 MiB CuPy array added {data['cupy_bytes_in_pool']} bytes to the pool")
    if data["released_bytes"] != 0:
        bad.append(f"{data['released_bytes']} bytes stayed allocated after the arrays were freed")
    if bad:
        return Check(name, FAIL, "; ".join(bad), data=data)
    cupy_text = ("CuPy 1 MiB -> +1 MiB" if data["cupy_routed"]
                 else "CuPy not installed: not routed")
    return Check(name, PASS, f"Numba 1 MiB -> +{data['numba_bytes_in_pool'] / MIB:.0f} MiB in "
                 f"torch's allocator, {cupy_text}; freed again; "
                 f"{data['outside_pool_bytes'] / MIB:.1f} MiB taken outside the pool", data=data)


def expandable(device, sim: bool, routing: dict | None, rank: int = 0) -> Check:
    """The allocator's segments are expandable exactly when configured (read from a memory
    snapshot; the environment variable alone when this torch's snapshot does not say)."""
    name = "memory.expandable_segments"
    if sim or device is None:
        return skipped(name, SIM if sim else NO_DEVICE)
    import torch

    from ...system.memory import effective_alloc_conf_var, split_alloc_conf

    want = bool((routing or {}).get("expandable_segments_wanted", True))
    var = effective_alloc_conf_var()
    data = {"wanted": want, "variable": var, "value": os.environ.get(var, ""),
            "warnings": (routing or {}).get("warnings", [])}
    keep = torch.empty(MIB, dtype=torch.uint8, device=device)  # at least one segment exists
    segs = [s for s in torch.cuda.memory._snapshot().get("segments", [])
            if s.get("device") == device.index and "is_expandable" in s]
    del keep
    seen = sorted({bool(s["is_expandable"]) for s in segs})
    if injected(name, rank):
        seen = [not want]
    data["segments_expandable"] = seen
    if not seen:
        have = dict(split_alloc_conf(data["value"])).get("expandable_segments", "")
        ok = have.strip().lower() == str(want).lower()
        text = f"{var}={data['value']!r} (this torch's snapshot does not report segment kinds)"
        return Check(name, PASS if ok else FAIL, text, data=data)
    if seen != [want]:
        why = "; ".join(data["warnings"]) or f"{var}={data['value']!r}"
        return Check(name, FAIL, f"configured expandable_segments:{want} but the allocator's "
                     f"segments are {'expandable' if True in seen else 'fixed'} ({why})",
                     data=data)
    return Check(name, PASS, f"segments {'expandable' if want else 'fixed'} as configured "
                 f"({var}={data['value']!r})", data=data)
