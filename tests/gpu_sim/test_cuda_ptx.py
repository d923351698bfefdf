"""Compile the real CUDA kernels to PTX (no GPU needed, but NVVM is): type-checks the device code.

The simulator runs kernels as Python, so it cannot catch code that does not compile for the
device (it missed numba's CUDA ``min``, for one). When an NVVM library is found (a CUDA toolkit,
or ``pip install nvidia-cuda-nvcc-cu12`` with ``CUDA_HOME`` pointing at its ``nvidia/cuda_nvcc``
folder), this test lowers the kernels (uniform and weighted) to PTX for sm_80; else it skips.
"""

from __future__ import annotations

import types

import pytest

from mnmg_sampler.system.gpu import simulator_enabled

I64 = "int64[::1]"
_KERNEL = (f"void({I64}, {I64}, {I64}, {I64}, {I64}, {{eids}}{I64}, {I64}, boolean, "
           f"float32[::1], uint8[::1], {I64}, {{nodes_keys}}boolean, {I64}, {I64}, "
           f"int64[:, ::1], uint8[::1], uint8[::1], {{rest}})")
_COUNTS = _KERNEL.format(eids="", nodes_keys="", rest=f"{I64}, {I64}")
_FILL = _KERNEL.format(eids=f"{I64}, ", nodes_keys=f"{I64}, {I64}, ",
                       rest=f"uint64, uint64, {I64}, {I64}, float64[::1], {I64}, {I64}, {I64}, "
                            "uint8")
# the typed kernels (every kernel: homogeneous calls are their one-relation case), around the
# uniform and the weighted draws
SIGNATURES = {"counts": _COUNTS, "fill": _FILL, "weighted_counts": _COUNTS,
              "weighted_fill": _FILL}


def _nvvm_or_skip() -> None:
    if simulator_enabled():
        pytest.skip("NUMBA_ENABLE_CUDASIM is set in this process")
    try:
        from numba.cuda.cudadrv.nvvm import NVVM

        NVVM()
    except Exception as exc:  # NvvmSupportError and friends: no toolkit here
        pytest.skip(f"no NVVM library found ({type(exc).__name__})")


@pytest.mark.parametrize("which", ["counts", "fill", "weighted_counts", "weighted_fill"])
def test_kernels_compile_to_ptx(monkeypatch, which):
    _nvvm_or_skip()
    from numba import cuda
    from numba.cuda import dispatcher

    # Device functions are compiled for the "current device"; there is none, so name one.
    monkeypatch.setattr(dispatcher, "get_current_device",
                        lambda: types.SimpleNamespace(compute_capability=(8, 0)))
    from mnmg_sampler.ops import cuda as ocuda

    kernels = dict(zip(("counts", "fill"), ocuda.make_kernels(), strict=True))
    kernels.update(zip(("weighted_counts", "weighted_fill"), ocuda.make_weighted_kernels(),
                       strict=True))
    kernel = kernels[which]
    ptx, _ = cuda.compile_ptx(kernel.py_func, SIGNATURES[which], cc=(8, 0))
    assert ".visible .entry" in ptx and ".target sm_80" in ptx
