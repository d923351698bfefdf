"""A PyG ``Data`` with edge ``time`` on real gloo ranks (issue 30, item 3): its parts are the
one-type typed parts, and every capability serves it with the homogeneous arguments (plain ids,
a plain ``[2, E]`` ``edge_label_index``): temporal and disjoint node batches and temporal link
batches through our loaders, and PyG's own ``NodeLoader`` / ``LinkLoader`` over
:class:`mnmg_sampler.pyg.ServiceSampler` with ``input_time`` / ``edge_label_time``, giving
``Data`` batches. Every batch equals the one-process sampler's (so W = 1 and 2 agree), every
sampled edge is an edge of the graph, with its own id, and none is later than its tree's seed
(edge). A homogeneous part without time serves ``LinkLoader`` too (``sample_from_edges``): its
batches equal ``DistLinkNeighborLoader``'s. ``edge_ids=False`` leaves a typed batch's ``e_id``
empty, as a homogeneous one's."""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np
import pytest
import torch

from mnmg_sampler.graph.api import partition_graph
from mnmg_sampler.graph.temporal import temporal_graph_from_data
from mnmg_sampler.loaders.neighbor import global_batches
from mnmg_sampler.ops.negative import NegativeSampling
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.batch import MiniBatch
from mnmg_sampler.sampling.link import build_link_request, finish_link_batch
from mnmg_sampler.sampling.sampler import HeteroSampler, SampleRequest

from .harness import run_ranks
from .test_hetero_link_loader import _batch, _plain
from .test_pyg_typed import _my_order

pytest.importorskip("torch_geometric")

SEED, EPOCH, N, E = 7, 1, 40, 300
FAN, B, LB = [3, 2], 4, 5
HOMO = ("node", "to", "node")
SEEDS = np.arange(0, 32)  # 8 global batches of 4 nodes
NODE_OPTS = {"temporal": {"time_attr": "time"}, "disjoint": {"disjoint": True}}
PYG_FIELDS = ("n_id", "e_id", "edge_index", "batch", "x", "input_id", "batch_size",
              "num_sampled_nodes", "num_sampled_edges")


def _data():
    from torch_geometric.data import Data

    g = np.random.default_rng(30)
    return Data(edge_index=torch.from_numpy(np.stack([g.integers(0, N, E), g.integers(0, N, E)])),
                time=torch.from_numpy(g.integers(0, 100, E)), num_nodes=N,
                x=torch.from_numpy(g.random((N, 3), dtype=np.float32)))


def _seed_times() -> np.ndarray:
    return np.random.default_rng(31).integers(20, 110, SEEDS.size)


def _seed_edges() -> tuple[np.ndarray, np.ndarray]:
    """30 edges of the graph, each at its own time or up to 14 later."""
    d = _data()
    pick = np.random.default_rng(32).choice(E, 30, replace=False)
    return d.edge_index.numpy()[:, pick], d.time.numpy()[pick] + np.arange(30) % 3 * 7


def _node_reference(kind: str, world: int) -> list:
    g = temporal_graph_from_data(_data())
    sampler = HeteroSampler(g, SEED, **NODE_OPTS[kind])
    t = _seed_times()
    return [sampler.sample([SampleRequest(SEEDS[p], FAN, request_key(SEED, EPOCH, gi),
                                          input_id=p, input_type="node",
                                          input_time=t[p] if kind == "temporal" else None)])[0]
            for gi, p in enumerate(global_batches(SEEDS.size, B, world, shuffle=False,
                                                  drop_last=False, seed=SEED, epoch=EPOCH))]


def _link_reference(world: int, exclude: bool) -> list:
    g = temporal_graph_from_data(_data())
    sampler = HeteroSampler(g, SEED, time_attr="time")
    eli, times = _seed_edges()
    out = []
    for gi, pos in enumerate(global_batches(eli.shape[1], LB, world, shuffle=False,
                                            drop_last=False, seed=SEED, epoch=EPOCH)):
        plan = build_link_request(eli, None, pos, g=gi, epoch=EPOCH, seed=SEED,
                                  num_neighbors=FAN, replace=False, num_nodes=(N, N),
                                  neg=NegativeSampling("binary", 1), edge_type=HOMO,
                                  edge_label_time=times, time_attr="time")
        mb = sampler.sample([replace(plan.request, time_attr=None, disjoint=None)])[0]
        out.append(finish_link_batch(mb, plan, exclude_seed_edges=exclude,
                                     reverse_edge_type=HOMO if exclude else None))
    return out


def _fields(b) -> dict:
    return {f.name: _plain(getattr(b, f.name)) for f in fields(b)}


def _pyg(data) -> dict:
    return {k: _plain(v) for k, v in data.items()}


def _run(rank, world, timed_dir, plain_dir):
    from torch_geometric.loader import LinkLoader, NodeLoader
    from torch_geometric.sampler import NegativeSampling as PygNeg

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.link import DistLinkNeighborLoader
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader
    from mnmg_sampler.pyg import ServiceSampler

    torch.set_num_threads(1)
    out = {}
    eli, times = _seed_edges()
    svc = SamplingService(load_partition(timed_dir, rank, world), seed=SEED)
    for kind, opts in NODE_OPTS.items():  # plain ids, as on a Data
        extra = {"input_time": torch.from_numpy(_seed_times())} if kind == "temporal" else {}
        loader = DistNeighborLoader(svc, torch.from_numpy(SEEDS), FAN, batch_size=B, seed=SEED,
                                    **opts, **extra)
        loader.set_epoch(EPOCH)
        out[kind] = [_fields(b) for b in loader]
    # edge_ids=False on a typed part, as on a homogeneous one: e_id empty, the rest the same
    loader = DistNeighborLoader(svc, torch.from_numpy(SEEDS), FAN, batch_size=B, seed=SEED,
                                time_attr="time", input_time=torch.from_numpy(_seed_times()),
                                edge_ids=False)
    loader.set_epoch(EPOCH)
    out["no_eids"] = [_fields(b) for b in loader]
    link = DistLinkNeighborLoader(svc, FAN, torch.from_numpy(eli), batch_size=LB, seed=SEED,
                                  neg_sampling="binary", exclude_seed_edges=True,
                                  exclude_reverse_edges=True, time_attr="time",
                                  edge_label_time=torch.from_numpy(times))
    link.set_epoch(EPOCH)
    out["link"] = [_fields(b) for b in link]
    # PyG's loaders: this rank's global batches, in its order
    s = ServiceSampler(svc, FAN, seed=SEED, time_attr="time")
    s.set_epoch(EPOCH)
    nodes = NodeLoader(s.data, node_sampler=s, input_nodes=torch.from_numpy(SEEDS),
                       input_time=torch.from_numpy(_seed_times()), batch_size=B,
                       sampler=_my_order(SEEDS.size, B, rank, world))
    out["pyg_nodes"] = [_pyg(d) for d in nodes]
    s.set_epoch(EPOCH)
    links = LinkLoader(s.data, link_sampler=s, edge_label_index=(None, torch.from_numpy(eli)),
                       edge_label_time=torch.from_numpy(times), neg_sampling=PygNeg("binary", 1),
                       batch_size=LB, sampler=_my_order(eli.shape[1], LB, rank, world))
    out["pyg_link"] = [_pyg(d) for d in links]
    svc.shutdown()
    # a homogeneous part without time: LinkLoader over ServiceSampler = our link loader
    svc = SamplingService(load_partition(plain_dir, rank, world), seed=SEED)
    ours = DistLinkNeighborLoader(svc, FAN, torch.from_numpy(eli), batch_size=LB, seed=SEED,
                                  neg_sampling="binary")
    out["plain_ours"] = [b.to_pyg() for b in ours]
    s = ServiceSampler(svc, FAN, seed=SEED)
    out["plain_pyg"] = list(LinkLoader(s.data, link_sampler=s,
                                       edge_label_index=(None, torch.from_numpy(eli)),
                                       neg_sampling=PygNeg("binary", 1), batch_size=LB,
                                       sampler=_my_order(eli.shape[1], LB, rank, world)))
    same = [all(torch.equal(a[k], b[k]) for k in ("n_id", "e_id", "edge_index", "x",
                                                   "edge_label_index", "edge_label", "input_id"))
            for a, b in zip(out.pop("plain_ours"), out.pop("plain_pyg"), strict=True)]
    out["plain_same"] = (len(same), all(same))
    svc.shutdown()
    return out


def _in_order(res: list, key: str, world: int) -> list:
    """Every rank's batches of ``key`` in global order (batch g on rank g % world)."""
    n = sum(len(r[key]) for r in res)
    return [res[g % world][key][g // world] for g in range(n)]


def _check_edges(b, seed_time: np.ndarray) -> int:
    """Every sampled edge an edge of the graph (its e_id's endpoints), none later than the
    time of its tree (``seed_time[batch[dst]]``); returns the edges checked."""
    d = _data()
    ei, t = d.edge_index.numpy(), d.time.numpy()
    n_id, e = b.n_id.numpy(), b.edge_index.numpy()
    eid = b.e_id.numpy()
    assert np.array_equal(ei[:, eid], np.stack([n_id[e[0]], n_id[e[1]]]))
    assert (t[eid] <= seed_time[b.batch.numpy()[e[1]]]).all()
    return eid.size


@pytest.mark.parametrize("world", [1, 2])
def test_timed_data_through_loaders_and_pyg_equals_one_process(tmp_path, world):
    data = _data()
    timed = str(partition_graph(data, num_parts=world, out=tmp_path / "t", method="random",
                                seed=3))
    plain = str(partition_graph(data, num_parts=world, out=tmp_path / "p", method="random",
                                seed=3, time_attr=None))
    res = run_ranks(_run, world, timed, plain, timeout=400)
    t_seeds = _seed_times()
    checked = 0
    names = {f.name for f in fields(MiniBatch)}
    for kind in NODE_OPTS:
        want = _node_reference(kind, world)
        got = [MiniBatch(**{k: v for k, v in vars(_batch(b)).items() if k in names})
               for b in _in_order(res, kind, world)]
        assert len(got) == len(want) == SEEDS.size // B
        for a, w in zip(got, want, strict=True):
            assert a.equal(w), kind
            flat = a.to_homogeneous()  # a Data with time reads as one type
            assert torch.equal(flat.n_id[:B], torch.from_numpy(SEEDS[a.input_id.numpy()]))
            if kind == "temporal":
                checked += _check_edges(flat, t_seeds[a.input_id.numpy()])
    for a, w in zip(_in_order(res, "no_eids", world), _in_order(res, "temporal", world),
                    strict=True):
        assert all(v.size == 0 for v in a["e_id"].values())
        assert any(v.size for v in w["e_id"].values())
        assert _batch({**a, "e_id": w["e_id"]}).equal(_batch(w))
    want = _link_reference(world, exclude=True)
    got = [_batch(b) for b in _in_order(res, "link", world)]
    assert len(got) == len(want) == 6
    _, times = _seed_edges()
    for a, w in zip(got, want, strict=True):
        assert a.equal(w)
        checked += _check_edges(a.to_homogeneous(), times[a.input_id.numpy()])
    # PyG's loaders: the one-process batches, as Data
    for key, want in (("pyg_nodes", _node_reference("temporal", world)),
                      ("pyg_link", _link_reference(world, exclude=False))):
        got = _in_order(res, key, world)
        assert len(got) == len(want)
        for a, w in zip(got, want, strict=True):
            flat = w.to_homogeneous()
            ref = _pyg(flat.to_pyg())
            names = PYG_FIELDS + (("edge_label_index", "edge_label", "edge_label_time")
                                  if key == "pyg_link" else ("seed_time",))
            for k in names:
                if k == "batch_size" and key == "pyg_link":
                    continue
                assert np.array_equal(np.asarray(a[k]), np.asarray(ref[k])), (key, k)
            pos_time = (t_seeds if key == "pyg_nodes" else times)[np.asarray(a["input_id"])]
            checked += _check_edges(flat, pos_time)
    assert checked > 100  # the checks saw edges
    assert [r["plain_same"] for r in res] == [(6 // world, True)] * world
