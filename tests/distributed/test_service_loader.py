"""SamplingService + DistNeighborLoader on real gloo ranks: merging, seeds, features, resume."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from mnmg_sampler.graph.partition import partition
from mnmg_sampler.loaders.neighbor import global_batches
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import MultiHopSampler, SampleRequest, local_hop_fn

from .common import as_arrays, assert_same, small_graph
from .harness import run_ranks

SEED = 5
TRAIN_FAN, VAL_FAN = [4, 3], [6, 2]


def _no_cuda():
    """Make any CUDA initialisation in this process fail loudly."""
    import torch

    def boom(*a, **k):
        raise RuntimeError("CUDA was initialised in CPU mode")

    torch.cuda._lazy_init = boom
    torch.cuda.init = boom


def _two_loaders(rank, world, d, train, val, mode="thread"):
    _no_cuda()
    import torch

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    svc = SamplingService(load_partition(d, rank, world), seed=SEED, mode=mode)
    tl = DistNeighborLoader(svc, train, TRAIN_FAN, 8, shuffle=True, seed=1, prefetch=3)
    vl = DistNeighborLoader(svc, val, VAL_FAN, 8, shuffle=False, seed=2, prefetch=3)
    out = {"train": [], "val": []}

    def run(name, loader):
        loader.set_epoch(1)
        out[name] = [as_arrays(b) | {"input_id": b.input_id.numpy()} for b in loader]

    th = threading.Thread(target=run, args=("val", vl))
    th.start()
    run("train", tl)
    th.join()
    svc.shutdown()
    st = svc.stats()
    return out, st, len(tl), len(vl), torch.cuda.is_initialized()


@pytest.mark.parametrize("world, mode", [(2, "thread"), (3, "thread"), (2, "inline")])
def test_two_concurrent_loaders_one_kernel_call_per_hop_per_round(tmp_path, world, mode):
    g = small_graph()
    d = str(partition(g, world, "random", tmp_path / "p", seed=world))
    train, val = np.arange(0, 101), np.arange(150, 190)
    res = run_ranks(_two_loaders, world, d, train, val, mode, timeout=180)
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    for name, nodes, fan, seed, shuffle in (("train", train, TRAIN_FAN, 1, True),
                                            ("val", val, VAL_FAN, 2, False)):
        gb = global_batches(nodes.size, 8, world, shuffle=shuffle, drop_last=False, seed=seed,
                            epoch=1)
        for rank, (out, *_rest) in enumerate(res):
            mine = list(range(rank, len(gb), world))
            assert len(out[name]) == len(mine)
            for gidx, got in zip(mine, out[name], strict=True):
                want = ref.sample([SampleRequest(nodes[gb[gidx]], fan,
                                                 request_key(seed, 1, gidx))])[0]
                assert_same(got, as_arrays(want))
                assert np.array_equal(got["input_id"], gb[gidx])
                # features and labels are those of n_id in the original graph
                assert np.array_equal(got["x"], g.x[got["n_id"]])
                assert np.array_equal(got["y"], g.y[got["n_id"]])
    for _out, st, n_train, n_val, cuda in res:
        assert not cuda
        # both loaders have 2 hops: exactly one kernel call per hop per round, however merged
        assert st["kernel_calls"] == 2 * st["rounds"]
        assert st["requests"] == n_train + n_val
    # rounds are collective (the same count on every rank), each with a request of some rank
    assert len({st["rounds"] for _, st, *_ in res}) == 1
    assert res[0][1]["rounds"] <= sum(st["requests"] for _, st, *_ in res)
    assert len({r[2] for r in res}) == 1 and len({r[3] for r in res}) == 1  # same len()


def _seeds_once(rank, world, d, n, shuffle, drop_last):
    import torch
    import torch.distributed as dist

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    svc = SamplingService(load_partition(d, rank, world), seed=SEED, features=False)
    loader = DistNeighborLoader(svc, np.arange(n), [2], 6, shuffle=shuffle, drop_last=drop_last,
                                seed=9, prefetch=2)
    counts = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        c = torch.zeros(n, dtype=torch.int64)
        nb = 0
        for b in loader:
            c[b.n_id[: b.batch_size]] += 1
            nb += 1
            if drop_last:
                assert b.batch_size == 6
        assert nb == len(loader)
        dist.all_reduce(c)  # global check: every seed's count summed over ranks
        counts.append(c.numpy())
    svc.shutdown()
    return counts


SHUFFLE_DROP_LAST = [(False, False), (True, False), (False, True), (True, True)]


def _seeds_once_each(rank, world, d, n):
    """``_seeds_once`` for every (shuffle, drop_last) on the same ranks (one spawn for four)."""
    return [_seeds_once(rank, world, d, n, shuffle, drop_last)
            for shuffle, drop_last in SHUFFLE_DROP_LAST]


def test_every_seed_once_per_epoch(tmp_path):
    world, n = 3, 41  # 41 seeds: not divisible by the world size nor by batch * world
    d = str(partition(small_graph(), world, "range", tmp_path / "p"))
    res = run_ranks(_seeds_once_each, world, d, n, timeout=240)
    for i, (shuffle, drop_last) in enumerate(SHUFFLE_DROP_LAST):
        for by_rank in res:
            for c in by_rank[i]:
                if drop_last:
                    assert set(np.unique(c)) <= {0, 1} and c.sum() == (n // 18) * 18
                else:
                    assert np.array_equal(c, np.ones(n, np.int64)), (shuffle, drop_last)
        if drop_last and shuffle:  # a different tail is skipped in each epoch
            assert not np.array_equal(res[0][i][0], res[0][i][1])


def _resume(rank, world, d, stop_after):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    part = load_partition(d, rank, world)

    def make():
        svc = SamplingService(part, seed=SEED)
        return svc, DistNeighborLoader(svc, np.arange(90), [3, 2], 7, shuffle=True, seed=4)

    svc, full = make()
    full.set_epoch(2)
    uninterrupted = [as_arrays(b) for b in full]
    svc.shutdown()

    svc, first = make()
    first.set_epoch(2)
    it = iter(first)
    for _ in range(stop_after):
        next(it)
    state = first.state_dict()
    svc.shutdown()

    svc, resumed = make()
    resumed.load_state_dict(state)
    rest = [as_arrays(b) for b in resumed]
    svc.shutdown()
    return uninterrupted, rest


def test_resume_mid_epoch(tmp_path):
    d = str(partition(small_graph(), 2, "random", tmp_path / "p"))
    for full, rest in run_ranks(_resume, 2, d, 2, timeout=120):
        assert len(rest) == len(full) - 2 > 0
        for a, b in zip(rest, full[2:], strict=True):
            assert_same(a, b, keys=("n_id", "edge_index", "e_id", "x", "y"))


def _ddp(rank, world, d):
    _no_cuda()
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    svc = SamplingService(load_partition(d, rank, world), seed=SEED)
    loader = DistNeighborLoader(svc, np.arange(120), [3, 3], 10, shuffle=True, prefetch=4)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(5, 7))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = 0
    for epoch in range(2):
        loader.set_epoch(epoch)
        for b in loader:  # the service thread samples ahead while DDP all-reduces gradients
            loss = torch.nn.functional.cross_entropy(model(b.x), b.y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
    svc.shutdown()
    return steps, [p.detach().numpy().copy() for p in model.parameters()], \
        torch.cuda.is_initialized()


def test_ddp_steps_between_batches_no_deadlock(tmp_path):
    d = str(partition(small_graph(), 2, "random", tmp_path / "p"))
    (s0, p0, c0), (s1, p1, c1) = run_ranks(_ddp, 2, d, timeout=150)
    assert s0 == s1 > 0 and not c0 and not c1
    # DDP kept the replicas in sync
    assert all(np.array_equal(a, b) for a, b in zip(p0, p1, strict=True))


def _post(b):
    import torch
    import torch.distributed as dist

    # what a worker may do: CPU post-processing; it must not see CUDA or the process group
    deg = torch.bincount(b.edge_index[1], minlength=b.num_nodes)
    return deg, torch.cuda.is_initialized(), dist.is_initialized() and dist.get_world_size()


def _workers(rank, world, d, ctx):
    _no_cuda()
    import torch

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    svc = SamplingService(load_partition(d, rank, world), seed=SEED)
    loader = DistNeighborLoader(svc, np.arange(60), [3, 2], 10, prefetch=2)
    batches = list(loader)
    dl = torch.utils.data.DataLoader(batches, batch_size=None, num_workers=2,
                                     multiprocessing_context=ctx, collate_fn=_post)
    out = list(dl)
    svc.shutdown()
    rows = [(o[0].sum().item(), b.edge_index.shape[1], o[1])
            for o, b in zip(out, batches, strict=True)]
    return rows, \
        torch.cuda.is_initialized()


@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_dataloader_workers_cpu_mode(tmp_path, ctx):
    d = str(partition(small_graph(), 2, "range", tmp_path / "p"))
    for rows, cuda in run_ranks(_workers, 2, d, ctx, timeout=150):
        assert not cuda and rows
        for edges_counted, edges, worker_cuda in rows:
            assert edges_counted == edges and worker_cuda is False


def _fork_mid_round(rank, world, d):
    import os
    import time

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition

    svc = SamplingService(load_partition(d, rank, world), seed=SEED, features=False)
    started = threading.Event()
    sample = svc.sampler.sample

    def slow(*a, **k):  # a round that is still running when the fork comes
        started.set()
        time.sleep(0.5)
        return sample(*a, **k)

    svc.sampler.sample = slow
    fut = svc.submit(SampleRequest(np.arange(rank, 40, world), [3, 2], request_key(SEED, 0, rank)))
    assert started.wait(60)
    pid = os.fork()
    if pid == 0:  # the child: a copy taken between rounds; it leaves at once
        os._exit(0 if fut.done() else 7)
    done_at_fork = fut.done()  # the parent resumes only after the round ended
    _, status = os.waitpid(pid, 0)
    svc.sampler.sample = sample
    n = svc.result(fut).edge_index.shape[1]
    svc.shutdown()
    return done_at_fork, os.waitstatus_to_exitcode(status), n


def test_fork_waits_for_the_round_in_progress(tmp_path):
    d = str(partition(small_graph(), 2, "random", tmp_path / "p", seed=1))
    for done_at_fork, child_code, edges in run_ranks(_fork_mid_round, 2, d, timeout=150):
        assert done_at_fork and child_code == 0 and edges > 0


def _round_fails(rank, world, d):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.errors import ServiceError
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    svc = SamplingService(load_partition(d, rank, world), seed=SEED)

    def broken(*a, **k):
        raise RuntimeError("simulated broken collective")

    svc.sampler.sample = broken
    loader = DistNeighborLoader(svc, np.arange(40), [2], 8, prefetch=3)
    try:
        next(iter(loader))
    except ServiceError as e:
        msg = str(e)
    else:
        msg = None
    late = svc.submit(loader.request(0, np.arange(3)))  # after the failure: fails at once
    late_err = type(late.exception(timeout=10)).__name__
    try:
        svc.shutdown(timeout=30)
    except ServiceError:
        pass
    return msg, late_err


def test_failed_round_reaches_waiting_callers(tmp_path):
    d = str(partition(small_graph(), 1, "range", tmp_path / "p"))
    ((msg, late_err),) = run_ranks(_round_fails, 1, d, timeout=90)
    assert msg is not None and "simulated broken collective" in msg
    assert late_err == "ServiceError"

