"""memory.py on a CPU-only machine: allocator settings, CuPy/Numba routing objects, the report.

CUDA calls are mocked (monkeypatched ``torch.cuda`` functions). CuPy is not installed here, so the
CuPy routing is checked against a fake ``cupy`` module: that verifies our malloc/free wiring, not
CuPy's own API. The Numba plugin is the real class, built and instantiated without a GPU.
"""

from __future__ import annotations

import os
import sys
import types
import warnings

import pytest
import torch

from mnmg_sampler.system import memory


@pytest.fixture
def env(monkeypatch):
    """A clean allocator environment, CUDA not initialised."""
    for var in memory.ALLOC_CONF_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    return monkeypatch


def _no_warnings(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn(*args)


# ---------------------------------------------------------------- expandable_segments

def test_unset_is_written_before_cuda_starts(env):
    assert _no_warnings(memory.configure_expandable_segments, True) is True
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert "PYTORCH_ALLOC_CONF" not in os.environ


def test_user_options_are_kept_and_merged(env):
    user = "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2]"
    env.setenv("PYTORCH_CUDA_ALLOC_CONF", user)
    assert _no_warnings(memory.configure_expandable_segments, True) is True
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == user + ",expandable_segments:True"


def test_newer_variable_wins_when_the_user_set_it(env):
    # torch >= 2.9 reads PYTORCH_ALLOC_CONF first; writing the other one would be ignored.
    env.setenv("PYTORCH_ALLOC_CONF", "garbage_collection_threshold:0.6")
    env.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64")
    assert memory.configure_expandable_segments(True) is True
    assert os.environ["PYTORCH_ALLOC_CONF"] == (
        "garbage_collection_threshold:0.6,expandable_segments:True")
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:64"


def test_user_explicit_value_wins_with_a_warning(env):
    env.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False")
    with pytest.warns(RuntimeWarning, match="expandable_segments:False.*not applied"):
        assert memory.configure_expandable_segments(True) is False
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:False"


def test_user_same_value_is_quiet(env):
    env.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    assert _no_warnings(memory.configure_expandable_segments, True) is True


def test_cuda_already_initialised_warns_with_export_line(env):
    env.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128")
    env.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.warns(RuntimeWarning) as rec:
        assert memory.configure_expandable_segments(True) is False
    msg = str(rec[0].message)
    assert "cannot take effect" in msg
    assert "export PYTORCH_CUDA_ALLOC_CONF='max_split_size_mb:128,expandable_segments:True'" in msg
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:128"  # untouched


def test_cuda_initialised_but_already_requested_is_quiet(env):
    env.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    env.setattr(torch.cuda, "is_initialized", lambda: True)
    assert _no_warnings(memory.configure_expandable_segments, True) is True


def test_disable(env):
    assert memory.configure_expandable_segments(False) is True
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:False"


def test_split_alloc_conf_handles_brackets_and_spaces():
    items = memory.split_alloc_conf(" a:1, roundup_power2_divisions:[256:1,>:8] ,b:x,")
    assert items == [("a", "1"), ("roundup_power2_divisions", "[256:1,>:8]"), ("b", "x")]
    assert memory.join_alloc_conf(items) == "a:1,roundup_power2_divisions:[256:1,>:8],b:x"


# ---------------------------------------------------------------- torch pool mocks

@pytest.fixture
def fake_pool(monkeypatch):
    calls: list[tuple] = []

    def alloc(size, device=None, stream=None):
        ptr = 0x7F0000001000 + 256 * len(calls)
        calls.append(("alloc", size, device, ptr))
        return ptr

    monkeypatch.setattr(torch.cuda, "caching_allocator_alloc", alloc)
    monkeypatch.setattr(torch.cuda, "caching_allocator_delete",
                        lambda ptr: calls.append(("delete", ptr)))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (3 << 30, 16 << 30))
    return calls


# ---------------------------------------------------------------- CuPy routing (fake cupy)

def test_cupy_allocator_routes_into_torch_pool(monkeypatch, fake_pool):
    installed = {}

    class PythonFunctionAllocator:  # the two-callable API of cupy.cuda.memory
        def __init__(self, malloc_func, free_func):
            self.malloc_func, self.free_func = malloc_func, free_func

        def malloc(self, size):
            return self.malloc_func(size, 0)

    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(
        memory=types.SimpleNamespace(PythonFunctionAllocator=PythonFunctionAllocator),
        set_allocator=lambda f: installed.setdefault("malloc", f),
    )
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    allocator = memory.route_cupy()
    assert installed["malloc"] == allocator.malloc
    ptr = installed["malloc"](1024)
    allocator.free_func(ptr, 0)
    allocator.free_func(0, 0)  # freeing a zero-size allocation's null pointer is a no-op
    assert allocator.malloc_func(0, 0) == 0  # zero bytes never reach the pool
    assert fake_pool == [("alloc", 1024, 0, ptr), ("delete", ptr)]


def test_setup_without_cupy_skips_it(monkeypatch, env):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import fails as if not installed
    monkeypatch.setattr(memory, "route_numba", lambda: object)
    done = memory.setup_memory_pool()
    assert done == {"expandable_segments": True, "numba": True, "cupy": False}


# ---------------------------------------------------------------- Numba EMM plugin (real class)

def test_numba_plugin_builds_without_gpu(fake_pool):
    from numba import cuda
    from numba.cuda.cudadrv import driver

    cls = memory.numba_memory_manager_class()
    assert issubclass(cls, cuda.HostOnlyCUDAMemoryManager)
    mgr = cls(context=None)  # what numba.cuda.set_memory_manager does to check the version
    assert mgr.interface_version == driver._SUPPORTED_EMM_INTERFACE_VERSION
    assert memory.numba_memory_manager_class() is cls  # built once
    # NUMBA_CUDA_MEMORY_MANAGER=mnmg_sampler.system.memory reads this attribute:
    assert memory._numba_memory_manager is cls

    mp = mgr.memalloc(4096)
    ptr = mp.device_pointer_value
    mp.free()  # before any assertion, so the finalizer never runs on the real torch.cuda
    assert mp.size == 4096
    assert fake_pool == [("alloc", 4096, 0, ptr), ("delete", ptr)]
    info = mgr.get_memory_info()
    assert (info.free, info.total) == (3 << 30, 16 << 30)
    with pytest.raises(NotImplementedError, match="torch.multiprocessing"):
        mgr.get_ipc_handle(mp)


def test_route_numba_installs_plugin(monkeypatch):
    from numba.cuda.cudadrv import driver

    monkeypatch.setattr(driver, "_memory_manager", driver._memory_manager)  # restored after
    cls = memory.route_numba()
    assert driver._memory_manager is cls

