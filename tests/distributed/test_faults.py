"""Faults inside one job: errors crossing ranks without pickle, a round whose collective breaks,
a service that stops answering. Real gloo ranks (harness.run_ranks), hard timeouts.

The kill trials (real processes, SIGKILL/SIGSTOP) are in ``test_faults_kill.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from mnmg_sampler.distributed.collective import _portable, _rebuild, transport_message
from mnmg_sampler.errors import PartitionError, PeerError, ServiceError, WorldSizeError
from mnmg_sampler.graph.partition import partition

from .common import small_graph
from .harness import run_ranks

PKG = Path(__file__).resolve().parents[2] / "mnmg_sampler"
GLOO_RESET = ("[/src/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:4242. "
              "This is typically caused by a remote worker crashing.")


# -- errors on the wire ----------------------------------------------------------------------
def test_no_object_collectives_or_pickle_in_the_package():
    pattern = re.compile(r"all_gather_object|broadcast_object_list|gather_object|"
                         r"scatter_object_list|send_object_list|recv_object_list|"
                         r"^\s*(import pickle|from pickle)", re.M)
    hits = [f"{p.relative_to(PKG.parent)}: {m.group(0).strip()}"
            for p in sorted(PKG.rglob("*.py")) for m in pattern.finditer(p.read_text())]
    assert hits == []


def test_error_record_is_plain_utf8_json():
    raw = _portable(WorldSizeError("3 parts for 2 ränks", "cannot start", "repartition"))
    rec = json.loads(raw.decode("utf-8"))
    assert rec == {"type": "WorldSizeError", "what": "3 parts for 2 ränks",
                   "consequence": "cannot start", "fix": "repartition"}
    e = _rebuild(1, raw)
    assert type(e) is WorldSizeError and e.what == "rank 1: 3 parts for 2 ränks"
    assert e.fix == "repartition"


@pytest.mark.parametrize("name", ["system", "os.system", "Exception", "SystemExit", "_sentence",
                                  "MnmgError.__init__", "__builtins__"])
def test_rebuild_only_makes_classes_of_mnmg_errors(name):
    raw = json.dumps({"type": name, "what": "boom", "consequence": "", "fix": ""}).encode()
    e = _rebuild(0, raw)
    assert type(e) is ServiceError and "rank 0 failed" in e.what and "boom" in e.what


def test_rebuild_survives_garbage():
    e = _rebuild(2, b"\xff\x00not json")
    assert type(e) is ServiceError and e.what.startswith("rank 2 failed")


def test_transport_message_drops_gloo_noise():
    assert transport_message(RuntimeError(GLOO_RESET)) == \
        "Connection closed by peer [127.0.0.1]:4242"


def _agree_raise(rank, world, kind):
    import torch.distributed as dist

    from mnmg_sampler.distributed.collective import agree
    from mnmg_sampler.errors import WorldSizeError

    def fn():
        if rank == world - 1:
            if kind == "typed":
                raise WorldSizeError("part 1 of 2 is missing", "no sampling", "repartition")
            raise OSError(28, "No space left on device")
        return rank

    try:
        agree(fn)
    except Exception as e:
        out = (type(e).__name__, str(e))
    else:
        out = None
    # the group still works after an agreed error: nobody is stuck in a collective
    import torch

    t = torch.ones(1)
    dist.all_reduce(t)
    return out, float(t)


def _agree_raise_both(rank, world):
    """A typed error, then another: the second agreement runs in the group the first left."""
    return [_agree_raise(rank, world, kind) for kind in ("typed", "other")]


def test_agree_raises_on_every_rank_without_pickle():
    typed, other = zip(*run_ranks(_agree_raise_both, 3, timeout=180), strict=True)
    for res in (typed, other):
        assert [t for _, t in res] == [3.0, 3.0, 3.0]
    (n0, m0), (n1, m1), (n2, m2) = (o for o, _ in typed)
    assert n0 == n1 == n2 == "WorldSizeError"
    assert m0 == m1 and m0.startswith("rank 2: part 1 of 2 is missing")
    assert m2.startswith("part 1 of 2 is missing")
    (n0, m0), (n1, m1), (n2, m2) = (o for o, _ in other)
    assert n0 == n1 == "ServiceError" and n2 == "OSError"
    assert "rank 2 failed: OSError" in m0 and "No space left on device" in m0
    assert issubclass(WorldSizeError, PartitionError)


# -- a round whose collective breaks ---------------------------------------------------------
def _broken_agreement(rank, world, d, mode):
    import torch.distributed as dist

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.errors import PeerError
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    svc = SamplingService(load_partition(d, rank, world), seed=3, mode=mode, timeout_s=20)
    loader = DistNeighborLoader(svc, np.arange(60), [3, 2], 6)
    # the service works; nothing is in flight when the collective breaks (requested directly,
    # not through a prefetching iterator)
    svc.result(svc.submit(loader.request(0, np.arange(5))))
    real = dist.all_reduce

    def broken(t, *a, **k):  # a round that took requests: gloo's error when a peer dies
        if int(t[0]) > 0:
            raise RuntimeError(GLOO_RESET)
        return real(t, *a, **k)

    dist.all_reduce = broken
    futs = [svc.submit(loader.request(g, np.arange(g, g + 5))) for g in range(4)]
    try:
        errs = []
        for f in futs:  # taken by the broken round or still queued: all fail, none hangs
            try:
                svc.result(f)
            except PeerError as e:
                errs.append(str(e))
        late = svc.submit(loader.request(0, np.arange(3)))
        late_err = type(late.exception(timeout=10)).__name__
        try:
            svc.shutdown()
        except PeerError as e:
            shut = str(e)
        else:
            shut = None
    finally:
        dist.all_reduce = real
    return errs, late_err, shut


@pytest.mark.parametrize("mode", ["thread", "inline"])
def test_broken_agreement_fails_every_taken_and_queued_request(tmp_path, mode):
    d = str(partition(small_graph(), 1, "range", tmp_path / "p"))
    ((errs, late_err, shut),) = run_ranks(_broken_agreement, 1, d, mode, timeout=120)
    assert len(errs) == 4
    for msg in errs:
        assert "the agreement all-reduce did not complete" in msg, msg
        assert "Connection closed by peer [127.0.0.1]:4242" in msg, msg
    assert late_err == "PeerError"
    assert shut is not None and "Connection closed by peer" in shut


def _stalled(rank, world, d):
    import threading
    import time

    import torch.distributed as dist

    from mnmg_sampler.distributed import service
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.errors import PeerError
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    # a margin of 1 s, not 5: the same waits, a third of the test's time (both are sleeps)
    margin, service.MARGIN_S = service.MARGIN_S, 1.0
    try:
        svc = SamplingService(load_partition(d, rank, world), seed=3, timeout_s=1)
    finally:
        margin, service.MARGIN_S = service.MARGIN_S, margin
    loader = DistNeighborLoader(svc, np.arange(30), [3], 6)
    svc.result(svc.submit(loader.request(0, np.arange(5))))  # works; nothing left in flight
    # a round that computes longer than the deadline (a kernel compiling on a loaded machine:
    # CPU, no exchange) is working, not stalled: its batch comes, no PeerError
    kernel = svc.sampler._kernel

    def slow(*a, **k):
        t = time.monotonic()
        while time.monotonic() - t < svc.deadline_s + 1:
            pass
        return kernel(*a, **k)

    svc.sampler._kernel = slow
    t0 = time.monotonic()
    busy = svc.result(svc.submit(loader.request(1, np.arange(5)))).batch_size
    busy_s = time.monotonic() - t0
    svc.sampler._kernel = kernel
    real, release = dist.all_reduce, threading.Event()

    def stuck(*a, **k):  # a collective that never returns (a transport without a timeout)
        release.wait()
        return real(*a, **k)

    dist.all_reduce = stuck
    fut = svc.submit(loader.request(2, np.arange(5, 10)))
    t0 = time.monotonic()
    try:
        svc.result(fut)
    except PeerError as e:
        msg, waited = str(e), time.monotonic() - t0
    else:
        msg, waited = None, 0.0
    dist.all_reduce = real
    release.set()
    svc.result(fut)  # the service goes on once the collective returns
    svc.shutdown()
    return msg, waited, svc.deadline_s, margin, busy, busy_s


def test_result_gives_up_after_timeout_plus_margin(tmp_path):
    d = str(partition(small_graph(), 1, "range", tmp_path / "p"))
    ((msg, waited, deadline, margin, busy, busy_s),) = run_ranks(_stalled, 1, d, timeout=120)
    assert deadline == 1 + margin
    assert busy == 5 and busy_s > deadline  # served after computing past the deadline
    assert msg is not None and "made no progress" in msg and "agreement all-reduce" in msg, msg
    assert waited >= deadline


def test_peer_error_is_a_service_error():
    assert issubclass(PeerError, ServiceError)


# -- stores on one node listen on loopback only ----------------------------------------------
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc/net/tcp (Linux)")
def test_single_node_launch_listens_on_loopback_only():
    import subprocess
    import sys

    from .torchrun import REPO, env

    cmd = [sys.executable, "-m", "mnmg_sampler.system.runtime", "--nproc-per-node", "2",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0",
           "-m", "tests.distributed.loopback_probe"]
    r = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    line = next(ln for ln in r.stdout.splitlines() if "LISTEN" in ln)
    found = json.loads(line.split("LISTEN", 1)[1])
    whos = {who for who, _, _ in found}
    assert whos == {"agent", "worker"}, found  # the rendezvous store, the job's store, gloo
    assert all(addr in ("0100007F", "0000000000000000FFFF00000100007F") for _, addr, _ in found), \
        found  # 127.0.0.1 (IPv4 or IPv4-mapped): nothing on a wildcard or external address


def _local_failure(rank, world, d, kw):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.errors import MnmgError
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.sampling.sampler import SampleRequest

    # a collective timeout far beyond the test's: a peer left waiting for it hangs the test
    svc = SamplingService(load_partition(d, rank, world), seed=1, timeout_s=600, **kw)
    real, calls = svc.sampler.sample, [0]

    def sample(*a, **k):  # rank 1's second round fails here, between its collectives
        calls[0] += 1
        if rank == 1 and calls[0] == 2:
            raise RuntimeError("a bug on rank 1")
        return real(*a, **k)

    svc.sampler.sample = sample
    got, err = [], None
    try:
        for j in range(4):
            req = SampleRequest(np.arange(10) + 10 * j + 50 * rank, [3, 2], 100 * rank + j)
            got.append(int(svc.result(svc.submit(req)).batch_size))
    except MnmgError as e:
        err = (type(e).__name__, str(e))
    try:
        svc.shutdown()
    except MnmgError:
        pass
    return got, err


@pytest.mark.parametrize("mode", ["thread", "inline"])
def test_a_local_failure_ends_the_peers_at_once_not_after_the_timeout(tmp_path, mode):
    """A round that fails on one rank (a bug, not a peer's death) closes that rank's end of the
    host channel (one host: every part mapped, rounds agree over Unix sockets): the peer
    waiting in the next agreement gets a PeerError naming the closed connection at once, long
    before the 600 s collective timeout (the harness gives the ranks 120 s)."""
    d = str(partition(small_graph(), 2, "random", tmp_path / "p", seed=4))
    out = run_ranks(_local_failure, 2, d, {"mode": mode}, timeout=120)
    (got0, err0), (got1, err1) = out
    assert got1 == [10] and err1[0] == "ServiceError" and "a bug on rank 1" in err1[1]
    assert err0 is not None and err0[0] == "PeerError", err0
    assert "rank 1 closed its connection" in err0[1], err0
    assert got0 in ([10], [10, 10])  # its second batch may complete before rank 1's failure
