"""PyG's ``NodeLoader`` and ``LinkLoader`` over :class:`mnmg_sampler.pyg.ServiceSampler` with
``time_attr`` on timed typed parts (two node types, three relations, Unix-second edge times, a
reverse relation with its edges' times), 2 real gloo ranks: each global batch equals the
one-process temporal ``HeteroSampler``'s, and no sampled edge is later than its tree's seed
time (``input_time`` / ``edge_label_time``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from ..typed_graphs import link_spec
from .harness import run_ranks
from .test_pyg_typed import _assert_equal, _flat, _my_order

pytest.importorskip("torch_geometric")

RATES = ("user", "rates", "movie")
REV = ("movie", "rev_rates", "user")
FOLLOWS = ("user", "follows", "user")
FAN = {RATES: [2, 2], REV: [3, 1], FOLLOWS: [2, 1]}
SEED, WORLD, B = 5, 2, 4
USERS = np.arange(24)  # 6 global batches of 4 users: 3 per rank
T0 = 1_600_000_000  # Unix seconds


def _spec() -> dict:
    spec = link_spec(3)
    g = np.random.default_rng(4)
    ei = spec["edge_index"]
    rates = T0 + g.integers(0, 10**6, ei[RATES].shape[1])
    spec["edge_time"] = {RATES: rates, REV: rates.copy(),
                         FOLLOWS: T0 + g.integers(0, 10**6, ei[FOLLOWS].shape[1])}
    return spec


def _seed_times() -> np.ndarray:
    return T0 + np.random.default_rng(6).integers(2 * 10**5, 10**6, USERS.size)


def _seed_edges(spec) -> tuple[np.ndarray, np.ndarray]:
    """20 rated edges, each at its own time or up to a day later."""
    pick = np.random.default_rng(7).choice(spec["edge_index"][RATES].shape[1], 20, replace=False)
    return (spec["edge_index"][RATES][:, pick],
            spec["edge_time"][RATES][pick] + np.arange(20) % 3 * 43_200)


def _worker(rank, world, pdir, spec):
    from torch_geometric.loader import LinkLoader, NodeLoader

    from mnmg_sampler import SamplingService, load_partition
    from mnmg_sampler.pyg import ServiceSampler

    torch.set_num_threads(1)
    service = SamplingService(load_partition(pdir, rank, world), seed=SEED)
    try:
        s = ServiceSampler(service, FAN, seed=SEED, time_attr="time")
        s.set_epoch(0)
        nodes = NodeLoader(s.data, node_sampler=s, input_nodes=("user", torch.from_numpy(USERS)),
                           input_time=torch.from_numpy(_seed_times()), batch_size=B,
                           sampler=_my_order(USERS.size, B, rank, world))
        node_batches = [_flat(d) for d in nodes]
        eli, times = _seed_edges(spec)
        s.set_epoch(0)  # batch numbers from 0 again (a sampler counts its batches per epoch)
        links = LinkLoader(s.data, link_sampler=s, edge_label_index=(RATES, torch.from_numpy(eli)),
                           edge_label_time=torch.from_numpy(times), batch_size=5,
                           sampler=_my_order(eli.shape[1], 5, rank, world))
        return node_batches, [_flat(d) for d in links]
    finally:
        service.shutdown()


def _references(spec) -> tuple[list, list]:
    from mnmg_sampler.graph.typed import typed_graph
    from mnmg_sampler.loaders.neighbor import global_batches
    from mnmg_sampler.ops.rng import request_key
    from mnmg_sampler.sampling.link import build_link_request, finish_link_batch
    from mnmg_sampler.sampling.sampler import HeteroSampler, HeteroSampleRequest

    graph = typed_graph(spec)
    sampler = HeteroSampler(graph, SEED, time_attr="time")
    t = _seed_times()
    pos = global_batches(USERS.size, B, WORLD, shuffle=False, drop_last=False, seed=SEED, epoch=0)
    nodes = [_flat(sampler.sample([HeteroSampleRequest(
        "user", USERS[p], FAN, request_key(SEED, 0, g), input_id=p, input_time=t[p])])[0]
        .to_pyg()) for g, p in enumerate(pos)]
    eli, times = _seed_edges(spec)
    links = []
    for g, p in enumerate(global_batches(eli.shape[1], 5, WORLD, shuffle=False,
                                         drop_last=False, seed=SEED, epoch=0)):
        plan = build_link_request(eli, None, p, g=g, epoch=0, seed=SEED, num_neighbors=FAN,
                                  replace=False, edge_type=RATES, neg=None,
                                  num_nodes=tuple(graph.num_nodes_of(t) for t in RATES[::2]),
                                  edge_label_time=times, time_attr="time")
        mb = sampler.sample([replace(plan.request, time_attr=None, disjoint=None)])[0]
        links.append(_flat(finish_link_batch(mb, plan, exclude_seed_edges=False,
                                             reverse_edge_type=None).to_pyg()))
    return nodes, links


def _check_times(spec, data: dict, seed_time: np.ndarray) -> int:
    """Every sampled edge one of the graph's, none later than its tree's seed time."""
    n = 0
    for et, (ei, t) in ((et, (spec["edge_index"][et], spec["edge_time"][et])) for et in FAN):
        if et not in data or not data[et]["e_id"].size:
            continue
        s, _, d = et
        e, eid = data[et]["edge_index"], data[et]["e_id"]
        assert np.array_equal(ei[:, eid], np.stack([data[s]["n_id"][e[0]],
                                                     data[d]["n_id"][e[1]]])), et
        assert (t[eid] <= seed_time[data[d]["batch"][e[1]]]).all(), et
        n += eid.size
    return n


def test_pyg_loaders_over_service_sampler_on_timed_typed_parts(tmp_path):
    from mnmg_sampler.graph.api import partition_graph

    spec = _spec()
    pdir = str(partition_graph(spec, num_parts=WORLD, out=tmp_path / "p", method="random",
                               seed=2))
    res = run_ranks(_worker, WORLD, pdir, spec, timeout=240)
    want_nodes, want_links = _references(spec)
    nodes = [res[g % WORLD][0][g // WORLD] for g in range(len(want_nodes))]
    links = [res[g % WORLD][1][g // WORLD] for g in range(len(want_links))]
    assert sum(len(r[0]) for r in res) == len(want_nodes) == 6
    assert sum(len(r[1]) for r in res) == len(want_links) == 4
    t, (_, times) = _seed_times(), _seed_edges(spec)
    checked = 0
    for g, (got, want) in enumerate(zip(nodes, want_nodes, strict=True)):
        _assert_equal(got, want, f"node batch {g}")
        checked += _check_times(spec, got, t[got["user"]["input_id"]])
    for g, (got, want) in enumerate(zip(links, want_links, strict=True)):
        _assert_equal(got, want, f"link batch {g}")
        seed_t = times[got[RATES]["input_id"]]  # tree b: positive b % P (sources, destinations)
        checked += _check_times(spec, got, np.tile(seed_t, 2))
    assert checked > 100  # the checks saw edges
