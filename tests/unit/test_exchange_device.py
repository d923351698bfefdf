"""The exchange helper puts its buffers on the backend's device: CUDA for NCCL, CPU for gloo.

No GPU here: a fake NCCL group drives the real selection logic; the real staging code is run
against the meta device, and spies around it check that every collective buffer was staged.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from mnmg_sampler.distributed import collective
from mnmg_sampler.distributed.collective import Exchanger, backend_device


class FakeGroup:
    """Stands in for a ProcessGroup of 2 ranks; the backend is set by the test."""

    def __init__(self, backend: str) -> None:
        self.backend = backend


def _patch(monkeypatch, calls):
    monkeypatch.setattr(dist, "get_backend", lambda g=None: g.backend)
    monkeypatch.setattr(dist, "get_world_size", lambda g=None: 2)
    monkeypatch.setattr(dist, "get_rank", lambda g=None: 0)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)

    def fake_all_to_all(out, inp, out_splits=None, in_splits=None, group=None):
        calls.append({"group": group, "out_splits": out_splits, "in_splits": in_splits})
        if out_splits is None:  # counts: each rank sends its counts; echo them
            out.copy_(inp)
        else:  # rows: pretend the peer sent back what we sent
            out.copy_(inp[: out.shape[0]])

    monkeypatch.setattr(collective.dist, "all_to_all_single", fake_all_to_all)


def test_backend_device_nccl_is_current_cuda_device(monkeypatch):
    _patch(monkeypatch, [])
    assert backend_device(FakeGroup("nccl")) == torch.device("cuda", 1)
    assert backend_device(FakeGroup("NCCL")) == torch.device("cuda", 1)
    assert backend_device(FakeGroup("gloo")) == torch.device("cpu")
    # the group NCCL worlds are made with: CPU tensors over gloo, exchange buffers on the GPU
    assert backend_device(FakeGroup("cpu:gloo,cuda:nccl")) == torch.device("cuda", 1)
    assert Exchanger(FakeGroup("cpu:gloo,cuda:nccl")).short_receives is False
    assert Exchanger(FakeGroup("cpu:gloo")).short_receives is True


def test_nccl_worlds_take_gloo_for_cpu_tensors():
    """On the GPU machine a group of NCCL alone failed on the first CPU-tensor collective."""
    from mnmg_sampler.system.runtime import group_backend

    assert group_backend("nccl") == "cpu:gloo,cuda:nccl"
    assert group_backend("gloo") == "gloo"
    assert dist.Backend(group_backend("nccl")) == "cpu:gloo,cuda:nccl"  # torch accepts it


def test_stage_and_unstage_really_move_buffers(monkeypatch):
    """The real ``_stage``/``_unstage`` (no stand-ins) put buffers on the exchange device and
    back; the meta device stands in for the GPU this machine does not have."""
    _patch(monkeypatch, [])
    ex = Exchanger(FakeGroup("nccl"))
    assert ex.device == torch.device("cuda", 1)  # what NCCL would use
    ex.device = torch.device("meta")
    staged = ex._stage(torch.arange(6))
    assert staged.device.type == "meta" and staged.shape == (6,)
    back = ex._unstage(torch.ones(3), torch.device("meta"))
    assert back.device.type == "meta"


def test_exchange_hands_the_collective_only_staged_buffers(monkeypatch):
    """Every buffer given to all_to_all comes out of ``_stage`` and every result goes through
    ``_unstage`` to the caller's device: spies wrap the real methods and record what they
    returned, and the fake collective records what it was given."""
    calls: list = []
    _patch(monkeypatch, calls)
    ex = Exchanger(FakeGroup("nccl"))
    ex.device = torch.device("cpu")  # real data flow; the device itself is tested above
    real_stage, real_unstage = ex._stage, ex._unstage
    staged, unstaged = [], []

    def stage(t):
        out = real_stage(t).clone()  # a fresh buffer: one that bypassed _stage is detectable
        staged.append(out.data_ptr())
        return out

    def unstage(t, device):
        unstaged.append((t.data_ptr(), device))
        return real_unstage(t, device)

    monkeypatch.setattr(ex, "_stage", stage)
    monkeypatch.setattr(ex, "_unstage", unstage)
    seen = []
    fake = collective.dist.all_to_all_single

    def recording(out, inp, *a, **k):
        seen.append((inp.data_ptr(), out.data_ptr()))
        return fake(out, inp, *a, **k)

    monkeypatch.setattr(collective.dist, "all_to_all_single", recording)
    payload = torch.arange(10, dtype=torch.int64).reshape(5, 2)
    rows, counts = ex.exchange(payload, torch.tensor([3, 2]))
    assert len(seen) == 2 and len(staged) == 2 and len(unstaged) == 1
    assert [inp for inp, _ in seen] == staged  # counts, then payload: both staged
    assert unstaged == [(seen[1][1], torch.device("cpu"))]  # payload result -> caller device
    assert torch.equal(rows, payload) and counts.tolist() == [3, 2]
    assert calls[0]["out_splits"] is None and calls[1]["in_splits"] == [3, 2]
    assert ex.bytes_sent == 2 * 8 + 10 * 8 and ex.calls == 2


def test_exchanger_on_gloo_keeps_cpu(monkeypatch):
    _patch(monkeypatch, [])
    ex = Exchanger(FakeGroup("gloo"))
    assert ex.device == torch.device("cpu")
    rows, counts = ex.exchange(torch.ones(4, 3), torch.tensor([1, 3]))
    assert rows.shape == (4, 3) and counts.tolist() == [1, 3]
