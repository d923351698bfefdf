"""The exchange helper puts its buffers on the backend's device: CUDA for NCCL, CPU for gloo.

No GPU here: a fake NCCL group drives the real selection logic, and staging is intercepted so the
test records where each buffer would live instead of allocating CUDA memory.
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


def test_exchanger_stages_buffers_on_the_backend_device(monkeypatch):
    calls: list = []
    _patch(monkeypatch, calls)
    staged: list = []
    ex = Exchanger(FakeGroup("nccl"))
    assert ex.device == torch.device("cuda", 1)
    monkeypatch.setattr(ex, "_stage", lambda t: staged.append(ex.device) or t.clone())
    back: list = []
    monkeypatch.setattr(ex, "_unstage", lambda t, d: back.append(d) or t.to(d))
    payload = torch.arange(10, dtype=torch.int64).reshape(5, 2)
    rows, counts = ex.exchange(payload, torch.tensor([3, 2]))
    assert staged == [torch.device("cuda", 1)] * 2  # counts and payload both staged on cuda:1
    assert back == [torch.device("cpu")]  # results return to the caller's device
    assert rows.device.type == "cpu" and torch.equal(rows, payload)
    assert counts.tolist() == [3, 2]
    assert calls[0]["out_splits"] is None and calls[1]["in_splits"] == [3, 2]
    assert ex.bytes_sent == 2 * 8 + 10 * 8


def test_exchanger_on_gloo_keeps_cpu(monkeypatch):
    _patch(monkeypatch, [])
    ex = Exchanger(FakeGroup("gloo"))
    assert ex.device == torch.device("cpu")
    rows, counts = ex.exchange(torch.ones(4, 3), torch.tensor([1, 3]))
    assert rows.shape == (4, 3) and counts.tolist() == [1, 3]
