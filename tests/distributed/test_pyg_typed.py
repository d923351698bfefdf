"""PyG's own ``NodeLoader`` and ``LinkLoader`` over :class:`mnmg_sampler.pyg.ServiceSampler` on
typed parts, 2 real gloo ranks (one spawn for everything).

* Each rank's loader walks the global batches our loaders give it (``sampler=`` order into the
  same seeds on every rank), so batch ``g`` of the PyG path equals the one-process sampling of
  global batch ``g`` (``HeteroSampler``; for links the reference of
  ``tests/unit/test_hetero_link.py``): the ``HeteroData`` of both, field by field, for node
  batches over two epochs and link batches with no, binary and triplet negatives.
* With every neighbor (``-1``), a batch has PyG's own layout: the same stores, attributes and
  dtypes as PyG's ``NodeLoader`` / ``LinkLoader`` on the ``HeteroData`` around a take-all
  sampler, the same subgraph (node sets, edges, counts per hop), seeds and positives first.
* ``to_hetero(GraphSAGE)`` in DDP trains a few steps on those batches (node labels, then links
  with binary negatives): losses finite, parameters moved and equal on both ranks.
* The stores (features of any ids, each rank's edges of every relation) and the typed errors
  (on every rank; a bad argument on one rank only included).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ..typed_graphs import hetero_data, link_spec, take_all
from .harness import run_ranks

pytest.importorskip("torch_geometric")

RATES = ("user", "rates", "movie")
REV = ("movie", "rev_rates", "user")
FOLLOWS = ("user", "follows", "user")
FAN = {RATES: [2, 2], REV: [3, 1], FOLLOWS: [2, 0]}
SEED, WORLD = 5, 2
USERS = np.arange(24)  # 6 global batches of 4 users: 3 per rank
NODE_BATCH, LINK_BATCH = 4, 5  # 40 seed edges: 8 global batches of 5
MODES = {"none": None, "binary": ("binary", 2), "triplet": ("triplet", 2)}


def _seed_edges(spec) -> np.ndarray:
    ei = spec["edge_index"][RATES]
    return ei[:, np.random.default_rng(1).choice(ei.shape[1], 40, replace=False)]


def _labels(mode: str, n: int):
    return None if mode == "triplet" else np.arange(n) % 2


def _flat(data) -> dict:
    """A ``HeteroData`` as plain values: ``{store key: {attribute: numpy array or value}}``."""
    return {key: {k: (v.numpy() if torch.is_tensor(v) else v) for k, v in data[key].items()}
            for key in (*data.node_types, *data.edge_types)}


def _my_order(n: int, batch: int, rank: int, world: int) -> list[int]:
    """Positions of this rank's global batches (``g = rank, rank + world, ...``), in order."""
    from mnmg_sampler.loaders.neighbor import global_batches

    pos = global_batches(n, batch, world, shuffle=False, drop_last=False, seed=SEED, epoch=0)
    assert len({p.size for p in pos}) == 1  # equal batches: the DataLoader cuts them the same
    return np.concatenate(pos[rank::world]).tolist()


def _errors(service, rank):
    """Each bad argument's typed error (``None`` if nothing was raised)."""
    from torch_geometric.loader import LinkLoader, NodeLoader
    from torch_geometric.sampler import NegativeSampling as PygNeg

    from mnmg_sampler.errors import SamplingInputError
    from mnmg_sampler.pyg import ServiceSampler

    def ctor(fan):
        return lambda: ServiceSampler(service, fan, seed=SEED)

    ok = ServiceSampler(service, FAN, seed=SEED)
    eli = torch.tensor([[0, 1], [0, 1]])

    def node_batch(node_type):
        return lambda: next(iter(NodeLoader(ok.data, node_sampler=ok,
                                            input_nodes=(node_type, torch.arange(2)))))

    def link_batch(edge_type, neg=None):
        return lambda: next(iter(LinkLoader(ok.data, link_sampler=ok,
                                            edge_label_index=(edge_type, eli),
                                            neg_sampling=neg)))

    cases = {  # collective: ServiceSampler's construction; per rank: the batches
        "relation": ctor({**FAN, ("user", "likes", "movie"): [1, 1]}),
        "missing": ctor({RATES: [1, 1]}),
        "one_rank": ctor({RATES: [1]} if rank == 1 else FAN),
        "node_type": node_batch("venue"),
        "edge_type": link_batch(("user", "likes", "movie")),
        "out_of_range": lambda: next(iter(NodeLoader(ok.data, node_sampler=ok,
                                                     input_nodes=("movie", torch.tensor([19]))))),
        "amount": link_batch(RATES, PygNeg("binary", 0.5)),
        "weights": link_batch(RATES, PygNeg("binary", 1, src_weight=torch.ones(27))),
        "time": lambda: next(iter(NodeLoader(ok.data, node_sampler=ok,
                                             input_nodes=("user", torch.arange(2)),
                                             input_time=torch.zeros(2, dtype=torch.long)))),
    }
    got = {}
    for name, fn in cases.items():
        try:
            fn()
            got[name] = None
        except SamplingInputError as e:
            got[name] = str(e)
    return got


def _train(model_fn, batches, step):
    """A few DDP steps of ``to_hetero(GraphSAGE)``: ``(losses, parameter change, checksum)``."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    first = next(iter(batches()))
    torch.manual_seed(0)
    model = model_fn(first)
    with torch.no_grad():  # PyG's lazy (-1) sizes are set by a first forward, before DDP
        model(first.x_dict, first.edge_index_dict)
    before = [p.detach().clone() for p in model.parameters()]
    ddp = DDP(model, find_unused_parameters=True)
    opt = torch.optim.Adam(ddp.parameters(), lr=0.02)
    losses = []
    for _ in range(3):
        for data in batches():
            loss = step(ddp, data)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    moved = sum(float((p.detach() - b).abs().sum()) for p, b in
                zip(model.parameters(), before, strict=True))
    checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
    return losses, moved, checksum


def _worker(rank, world, pdir, spec):
    import torch.nn.functional as F
    from torch_geometric.data import HeteroData
    from torch_geometric.loader import LinkLoader, NodeLoader
    from torch_geometric.nn import GraphSAGE, to_hetero
    from torch_geometric.sampler import NegativeSampling as PygNeg

    from mnmg_sampler import SamplingService, load_partition
    from mnmg_sampler.pyg import ServiceSampler

    torch.set_num_threads(1)
    part = load_partition(pdir, rank, world)
    service = SamplingService(part, seed=SEED)
    eli = torch.from_numpy(_seed_edges(spec))
    out = {"link": {}}
    try:
        out["errors"] = _errors(service, rank)

        # -- NodeLoader: this rank's global batches of the users, two epochs
        sampler = ServiceSampler(service, FAN, seed=SEED)
        users = torch.from_numpy(USERS)

        def node_loader(s, order=None, batch=NODE_BATCH):
            return NodeLoader(s.data, node_sampler=s, input_nodes=("user", users),
                              batch_size=batch,
                              sampler=order or _my_order(USERS.size, batch, rank, world))

        loader = node_loader(sampler)
        out["nodes"] = []
        for epoch in (0, 1):
            sampler.set_epoch(epoch)
            for data in loader:
                assert isinstance(data, HeteroData)
                out["nodes"].append(_flat(data))

        # -- LinkLoader: no, binary and triplet negatives
        order = _my_order(eli.shape[1], LINK_BATCH, rank, world)
        for mode, neg in MODES.items():
            s = ServiceSampler(service, FAN, seed=SEED)
            lab = _labels(mode, eli.shape[1])
            link = LinkLoader(s.data, link_sampler=s, edge_label_index=(RATES, eli),
                              edge_label=None if lab is None else torch.from_numpy(lab),
                              neg_sampling=None if neg is None else PygNeg(*neg),
                              batch_size=LINK_BATCH, sampler=order)
            out["link"][mode] = [_flat(d) for d in link]

        # -- every neighbor: one node batch and one link batch per mode, for the layout
        full = ServiceSampler(service, [-1, -1], seed=SEED)
        out["full_nodes"] = _flat(next(iter(node_loader(full, order=[0, 1, 2], batch=3))))
        out["full_link"] = {}
        for mode, neg in MODES.items():
            link = LinkLoader(full.data, link_sampler=full, edge_label_index=(RATES, eli[:, :8]),
                              neg_sampling=None if neg is None else PygNeg(neg[0], 1),
                              batch_size=8)
            out["full_link"][mode] = _flat(next(iter(link)))

        # -- the stores
        fs, gs = sampler.data
        ids = torch.tensor([5, 0, 18, 5])
        out["x_movie"] = fs.get_tensor(group_name="movie", attr_name="x", index=ids).numpy()
        out["y_user"] = fs.get_tensor(group_name="user", attr_name="y", index=None).numpy()
        out["attrs"] = sorted((a.group_name, a.attr_name) for a in fs.get_all_tensor_attrs())
        out["edges"] = {et: torch.stack(gs.get_edge_index(edge_type=et, layout="coo")).numpy()
                        for et in FAN}
        tp = part.typed
        t = tp.node_types.index("movie")
        out["own_movies"] = (np.asarray(part.orig_ids)[tp.type_offset[t]:tp.type_offset[t + 1]]
                             - tp.node_type_offset[t])
        # an edge type alone: PyG's LinkLoader takes this rank's edges of it from the graph store
        own = LinkLoader(sampler.data, link_sampler=sampler, edge_label_index=RATES,
                         batch_size=1000)
        d = next(iter(own))
        lab = d[RATES].edge_label_index
        out["own_link"] = np.stack([d["user"].n_id[lab[0]].numpy(),
                                    d["movie"].n_id[lab[1]].numpy()])

        # -- to_hetero(GraphSAGE) on PyG's batches: node classification, then links
        def sage(first, out_channels):
            return to_hetero(GraphSAGE((-1, -1), 16, num_layers=2, out_channels=out_channels),
                             first.metadata(), aggr="sum")

        def node_step(model, data):
            n = data["user"].batch_size
            logits = model(data.x_dict, data.edge_index_dict)["user"][:n]
            return F.cross_entropy(logits, data["user"].y[:n])

        def node_batches():
            sampler.set_epoch(0)
            return iter(loader)

        out["train_nodes"] = _train(lambda b: sage(b, 2), node_batches, node_step)

        ls = ServiceSampler(service, FAN, seed=SEED)
        link = LinkLoader(ls.data, link_sampler=ls, edge_label_index=(RATES, eli),
                          neg_sampling=PygNeg("binary", 1), batch_size=LINK_BATCH, sampler=order)

        def link_step(model, data):
            h = model(data.x_dict, data.edge_index_dict)
            s, d = data[RATES].edge_label_index
            logits = (h["user"][s] * h["movie"][d]).sum(-1)
            return F.binary_cross_entropy_with_logits(logits, data[RATES].edge_label)

        def link_batches():
            ls.set_epoch(0)
            return iter(link)

        out["train_link"] = _train(lambda b: sage(b, 8), link_batches, link_step)
    finally:
        service.shutdown()
    return out


# -- the references, in this process ----------------------------------------------------------


def _node_reference(spec, epoch: int) -> list[dict]:
    from mnmg_sampler.graph.typed import typed_graph
    from mnmg_sampler.loaders.neighbor import global_batches
    from mnmg_sampler.ops.rng import request_key
    from mnmg_sampler.sampling.sampler import HeteroSampler, HeteroSampleRequest

    sampler = HeteroSampler(typed_graph(spec), SEED)
    pos = global_batches(USERS.size, NODE_BATCH, WORLD, shuffle=False, drop_last=False,
                         seed=SEED, epoch=epoch)
    return [_flat(sampler.sample([HeteroSampleRequest(
        "user", USERS[p], FAN, request_key(SEED, epoch, g), input_id=p)])[0].to_pyg())
        for g, p in enumerate(pos)]


def _link_reference(spec, mode: str) -> list[dict]:
    from ..unit.test_hetero_link import reference

    neg = MODES[mode]
    opts = {} if neg is None else {"neg_sampling": {"mode": neg[0], "amount": neg[1]}}
    eli = _seed_edges(spec)
    return [_flat(b.to_pyg()) for b in reference(spec, RATES, eli, _labels(mode, eli.shape[1]),
                                                 opts, 0, WORLD, fan=FAN, seed=SEED,
                                                 batch=LINK_BATCH)]


def _pyg_loaders(spec) -> tuple[dict, dict]:
    """PyG's own loaders on the ``HeteroData`` around a take-all sampler (every neighbor)."""
    from torch_geometric.loader import LinkLoader, NodeLoader
    from torch_geometric.sampler import BaseSampler
    from torch_geometric.sampler import NegativeSampling as PygNeg
    from torch_geometric.sampler.neighbor_sampler import edge_sample

    data = hetero_data(spec)

    class Full(BaseSampler):
        def sample_from_nodes(self, inputs, **kw):
            out = take_all(data, {inputs.input_type: inputs.node}, 2)
            out.metadata = (inputs.input_id, inputs.time)
            return out

        def sample_from_edges(self, inputs, neg_sampling=None):
            return edge_sample(inputs, lambda seeds, _t: take_all(data, seeds, 2),
                               dict(data.num_nodes_dict), False, None, neg_sampling)

    nodes = NodeLoader(data, node_sampler=Full(), input_nodes=("user", torch.arange(3)),
                       batch_size=3)
    eli = torch.from_numpy(_seed_edges(spec)[:, :8])
    links = {mode: _flat(next(iter(LinkLoader(
        data, link_sampler=Full(), edge_label_index=(RATES, eli), batch_size=8,
        neg_sampling=None if neg is None else PygNeg(neg[0], 1))))) for mode, neg in MODES.items()}
    return _flat(next(iter(nodes))), links


# -- checks -------------------------------------------------------------------------------------
def _assert_equal(got: dict, want: dict, what: str) -> None:
    """Every attribute of ``want`` in ``got``, equal (arrays by value and dtype)."""
    assert list(got) == list(want), what
    for key, attrs in want.items():
        for name, v in attrs.items():
            assert name in got[key], (what, key, name)
            g = got[key][name]
            if isinstance(v, np.ndarray):
                assert g.dtype == v.dtype and np.array_equal(g, v), (what, key, name)
            else:
                assert g == v, (what, key, name)


def _layout(data: dict) -> dict:
    """Attribute names and dtypes (or types) per store."""
    return {key: {k: getattr(v, "dtype", type(v)) for k, v in attrs.items()}
            for key, attrs in data.items()}


def _edges(data: dict, et) -> set:
    s, _, d = et
    ei = data[et]["edge_index"]
    return set(zip(data[s]["n_id"][ei[0]].tolist(), data[d]["n_id"][ei[1]].tolist(),
                   data[et]["e_id"].tolist(), strict=True))


def _same_subgraph(got: dict, want: dict, what: str) -> None:
    for key, attrs in want.items():
        if "n_id" in attrs:
            k = attrs["num_sampled_nodes"][0]
            assert np.array_equal(got[key]["n_id"][:k], attrs["n_id"][:k]), (what, key)
            assert set(got[key]["n_id"].tolist()) == set(attrs["n_id"].tolist()), (what, key)
            assert got[key]["num_sampled_nodes"] == attrs["num_sampled_nodes"], (what, key)
        else:
            assert _edges(got, key) == _edges(want, key), (what, key)
            assert got[key]["num_sampled_edges"] == attrs["num_sampled_edges"], (what, key)


def test_pyg_loaders_over_service_sampler_on_typed_parts(tmp_path):
    from mnmg_sampler.graph.api import partition_graph

    spec = link_spec()
    pdir = str(partition_graph(spec, num_parts=WORLD, out=tmp_path / "p", method="random",
                               seed=3))
    res = run_ranks(_worker, WORLD, pdir, spec, timeout=240)

    # typed errors on every rank, a bad argument on rank 1 alone included
    match = {"relation": "not a relation", "missing": "no fanouts", "one_rank": "rank 1|no fanouts",
             "node_type": "not a node type", "edge_type": "not a relation",
             "out_of_range": "out of range", "amount": "not a positive integer",
             "weights": "node weights", "time": "input_time"}
    for r in res:
        for name, want in match.items():
            msg = r["errors"][name]
            assert msg is not None and any(m in msg for m in want.split("|")), (name, msg)

    # node batches: batch g of epoch e equals the one-process sampling of global batch g
    per = len(res[0]["nodes"]) // 2
    for epoch in (0, 1):
        want = _node_reference(spec, epoch)
        assert len(want) == per * WORLD
        for g, w in enumerate(want):
            _assert_equal(res[g % WORLD]["nodes"][epoch * per + g // WORLD], w, f"node {g}")
    # link batches, for each negative sampling mode
    for mode in MODES:
        want = _link_reference(spec, mode)
        got = [res[g % WORLD]["link"][mode][g // WORLD] for g in range(len(want))]
        assert len(want) == 8 and sum(len(r["link"][mode]) for r in res) == 8
        for g, (a, w) in enumerate(zip(got, want, strict=True)):
            _assert_equal(a, w, f"{mode} link {g}")
            assert np.array_equal(a[RATES]["input_id"], np.arange(g * 5, g * 5 + 5))

    # PyG's layout: its own loaders on the HeteroData around a take-all sampler
    ref_nodes, ref_links = _pyg_loaders(spec)
    for r in res:
        assert _layout(r["full_nodes"]) == _layout(ref_nodes)
        _same_subgraph(r["full_nodes"], ref_nodes, "nodes")
        assert np.array_equal(r["full_nodes"]["user"]["input_id"], [0, 1, 2])
        for mode, ref in ref_links.items():
            got = r["full_link"][mode]
            assert _layout(got) == _layout(ref), mode
            if mode == "none":  # the same seeds: the same subgraph
                _same_subgraph(got, ref, mode)
            assert np.array_equal(got[RATES]["input_id"], ref[RATES]["input_id"])
            for b in (got, ref):  # positives first: (user, movie) ids of the seed edges
                eli = _seed_edges(spec)[:, :8]
                if mode == "triplet":
                    assert np.array_equal(b["user"]["n_id"][b["user"]["src_index"]], eli[0])
                    assert np.array_equal(b["movie"]["n_id"][b["movie"]["dst_pos_index"]],
                                          eli[1])
                    assert b["movie"]["dst_neg_index"].shape == (8,)
                else:
                    lab = b[RATES]["edge_label_index"]
                    assert np.array_equal(b["user"]["n_id"][lab[0, :8]], eli[0])
                    assert np.array_equal(b["movie"]["n_id"][lab[1, :8]], eli[1])
            if mode == "binary":
                assert np.array_equal(got[RATES]["edge_label"], ref[RATES]["edge_label"])

    # the stores
    for r in res:
        assert np.array_equal(r["x_movie"], spec["x"]["movie"][[5, 0, 18, 5]])
        assert np.array_equal(r["y_user"], spec["y"]["user"])
        assert r["attrs"] == [("movie", "x"), ("user", "x"), ("user", "y")]
    for et in FAN:
        pairs = [tuple(p) for r in res for p in r["edges"][et].T.tolist()]
        assert sorted(pairs) == sorted(map(tuple, spec["edge_index"][et].T.tolist())), et
    for r in res:  # each rank's movies' in-edges, also the seed edges of a LinkLoader
        assert set(r["edges"][RATES][1].tolist()) <= set(r["own_movies"].tolist())
        assert np.array_equal(r["own_link"], r["edges"][RATES])

    # to_hetero(GraphSAGE) trained in DDP on PyG's batches
    for name in ("train_nodes", "train_link"):
        losses = [r[name][0] for r in res]
        assert len(losses[0]) == len(losses[1]) > 0, name
        assert all(np.isfinite(v).all() for v in losses), name
        assert all(r[name][1] > 0 for r in res), name  # parameters moved
        assert res[0][name][2] == res[1][name][2], name  # and agree over ranks (DDP)
