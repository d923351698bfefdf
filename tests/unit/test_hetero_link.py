"""Link batches of a typed graph in one process: PyG's hetero LinkNeighborLoader semantics
(seeds of both endpoint types first in their n_id, negatives on the relation's types), the
exclusion of seed edges and their reverses, typed errors, and ``to_pyg()`` laid out as PyG's own
``LinkLoader`` lays it out."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mnmg_sampler.errors import SamplingInputError
from mnmg_sampler.graph.typed import typed_graph
from mnmg_sampler.loaders.neighbor import global_batches
from mnmg_sampler.ops.negative import (
    NEG_SRC_HOP,
    NegativeSampling,
    negative_candidates,
    typed_has_edges,
)
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.batch import HeteroLinkMiniBatch
from mnmg_sampler.sampling.link import build_link_request, finish_link_batch, reverse_relation
from mnmg_sampler.sampling.sampler import HeteroSampler

from ..typed_graphs import hetero_data, link_spec, take_all

RATES = ("user", "rates", "movie")
REV = ("movie", "rev_rates", "user")
FOLLOWS = ("user", "follows", "user")
# hop 1 takes every rates / rev_rates neighbor, so seed edges and their reverses are sampled
FAN = {RATES: [-1, 2], REV: [-1, 2], FOLLOWS: [2, 1]}
SEED, BATCH = 5, 8


def seed_edges(spec: dict, et=RATES, count: int = 40) -> np.ndarray:
    ei = spec["edge_index"][et]
    return ei[:, np.random.default_rng(1).choice(ei.shape[1], count, replace=False)]


def reference(spec, et, eli, label, opts, epoch: int, world: int, *, fan=FAN, seed=SEED,
              batch=BATCH) -> list[HeteroLinkMiniBatch]:
    """One epoch's typed link batches in global order, sampled in this process."""
    g = typed_graph(spec)
    neg = NegativeSampling.cast(opts.get("neg_sampling"))
    lab = None if label is None else (label + 1 if neg is not None and label.min() == 0
                                      else label)
    rev = reverse_relation(et, g.edge_types, opts.get("reverse_edge_type", "auto"))
    r = list(g.edge_types).index(et)
    off_s, off_d = (int(g.node_type_offset[g.type_index(t)]) for t in (et[0], et[2]))
    sampler = HeteroSampler(g, seed)
    out = []
    for gi, pos in enumerate(global_batches(eli.shape[1], batch, world,
                                            shuffle=opts.get("shuffle", False),
                                            drop_last=False, seed=seed, epoch=epoch)):
        plan = build_link_request(eli, lab, pos, g=gi, epoch=epoch, seed=seed,
                                  num_neighbors=fan, replace=False, edge_type=et,
                                  num_nodes=(g.num_nodes_of(et[0]), g.num_nodes_of(et[2])),
                                  neg=neg, known=lambda s, d: typed_has_edges(g, r, d + off_d,
                                                                              s + off_s))
        mb = sampler.sample([plan.request])[0]
        out.append(finish_link_batch(mb, plan,
                                     exclude_seed_edges=opts.get("exclude_seed_edges", False),
                                     reverse_edge_type=rev))
    return out


def check_invariants(spec, et, eli, batches, opts, rev=REV, rev_excluded: bool = True) -> dict:
    """PyG's hetero link invariants on every batch of an epoch; returns counts of seed edges
    and their reverses in relation ``rev`` seen in the sampled subgraphs (zero with exclusion,
    the reverses when ``rev_excluded``)."""
    s_t, _, d_t = et
    n = spec["num_nodes"]
    neg = NegativeSampling.cast(opts.get("neg_sampling"))
    used = np.concatenate([b.input_id.numpy() for b in batches])
    assert np.array_equal(np.sort(used), np.arange(eli.shape[1]))  # every seed edge once
    seen = {"seed": 0, "reverse": 0, "negative_edges": 0}
    edges = set(zip(*spec["edge_index"][et].tolist(), strict=True))
    for b in batches:
        nid = {t: v.numpy() for t, v in b.n_id.items()}
        for r, ei in b.edge_index.items():  # every sampled edge exists in its relation
            ei = ei.numpy()
            cols = spec["edge_index"][r][:, b.e_id[r].numpy()]
            assert np.array_equal(cols, np.stack([nid[r[0]][ei[0]], nid[r[2]][ei[1]]])), r
            assert sum(b.num_sampled_edges[r]) == ei.shape[1]
        for t, x in b.x.items():
            assert np.array_equal(x.numpy(), spec["x"][t][nid[t]])
        P = b.input_id.numel()
        eli_loc = b.edge_label_index.numpy()
        src, dst = nid[s_t][eli_loc[0]], nid[d_t][eli_loc[1]]
        assert np.array_equal(src[:P], eli[0, b.input_id.numpy()])
        assert np.array_equal(dst[:P], eli[1, b.input_id.numpy()])
        # seeds: the distinct endpoints, ascending, first in n_id of their types
        if neg is not None and neg.mode == "triplet":
            assert b.src_index.shape == (P,) and torch.equal(b.src_index, b.edge_label_index[0])
            dn = b.dst_neg_index.reshape(P, -1)
            assert dn.shape[1] == neg.amount
            srcs, dsts = src, np.concatenate([dst, nid[d_t][dn.numpy()].ravel()])
            negs = zip(np.repeat(src, neg.amount).tolist(), dsts[P:].tolist(), strict=True)
        else:
            srcs, dsts = src, dst
            if neg is not None:
                assert src.size == dst.size == P * (1 + neg.amount)
                assert torch.equal(b.edge_label[P:], torch.zeros(P * neg.amount))
                negs = zip(src[P:].tolist(), dst[P:].tolist(), strict=True)
        if s_t != d_t:
            for t, ends in ((s_t, srcs), (d_t, dsts)):
                k = b.num_sampled_nodes[t][0]
                assert np.array_equal(nid[t][:k], np.unique(ends)), t
        else:
            k = b.num_sampled_nodes[s_t][0]
            assert np.array_equal(nid[s_t][:k], np.unique(np.concatenate([srcs, dsts])))
        assert ((dsts >= 0) & (dsts < n[d_t])).all()  # negatives: of the destination type
        if neg is not None:
            seen["negative_edges"] += sum(e in edges for e in negs)
        got = set(zip(nid[s_t][b.edge_index[et][0].numpy()].tolist(),
                      nid[d_t][b.edge_index[et][1].numpy()].tolist(), strict=True))
        back = set() if rev is None else set(zip(
            nid[rev[0]][b.edge_index[rev][0].numpy()].tolist(),
            nid[rev[2]][b.edge_index[rev][1].numpy()].tolist(), strict=True))
        for s, d in zip(src[:P].tolist(), dst[:P].tolist(), strict=True):
            seen["seed"] += (s, d) in got
            seen["reverse"] += (d, s) in back
    if opts.get("exclude_seed_edges"):
        assert seen["seed"] == 0 and (not rev_excluded or seen["reverse"] == 0)
    if neg is not None and neg.reject_known:  # no negative is an edge of the relation
        assert seen["negative_edges"] == 0
    return seen


CASES = {
    "none": {},
    "binary": {"neg_sampling": {"mode": "binary", "amount": 2}, "shuffle": True},
    "triplet_exclude": {"neg_sampling": {"mode": "triplet", "amount": 3, "reject_known": True},
                        "exclude_seed_edges": True},
    "binary_exclude": {"neg_sampling": {"mode": "binary", "reject_known": True},
                       "exclude_seed_edges": True, "shuffle": True},
}


@pytest.mark.parametrize("case", list(CASES))
def test_invariants_in_one_process(case):
    spec = link_spec()
    eli = seed_edges(spec)
    opts = CASES[case]
    label = (np.arange(eli.shape[1]) % 2) if case == "binary" else None
    batches = reference(spec, RATES, eli, label, opts, epoch=1, world=2)
    seen = check_invariants(spec, RATES, eli, batches, opts)
    if not opts.get("exclude_seed_edges"):  # exclusion is not vacuous: they are sampled
        assert seen["seed"] > 0 and seen["reverse"] > 0
    if case in ("binary", "triplet_exclude", "binary_exclude"):  # rejection is not vacuous:
        # the same draws without it hit edges of the relation (about 20% of the pairs)
        plain = {k: v for k, v in opts.items()}
        plain["neg_sampling"] = NegativeSampling.cast(opts["neg_sampling"]).__dict__ | {
            "reject_known": False}
        free = reference(spec, RATES, eli, label, plain, epoch=1, world=2)
        assert check_invariants(spec, RATES, eli, free, plain)["negative_edges"] > 0
    if case == "binary":  # labels 0/1 become 1/2, negatives 0
        lab = np.concatenate([b.edge_label.numpy()[:b.input_id.numel()] for b in batches])
        ids = np.concatenate([b.input_id.numpy() for b in batches])
        assert np.array_equal(lab, label[ids] + 1)


def test_negatives_follow_the_counter_rng_on_their_types():
    """Binary negatives: source of type S from the NEG_SRC_HOP stream, destination of type D
    from the homogeneous negative stream, keyed on the positive's index; triplet: destinations
    only, the positive's source kept."""
    spec = link_spec()
    eli = seed_edges(spec)
    n = spec["num_nodes"]
    for mode in ("binary", "triplet"):
        b = reference(spec, RATES, eli, None, {"neg_sampling": {"mode": mode, "amount": 2}},
                      epoch=0, world=1)[1]
        key = request_key(SEED, 0, 1)
        pos = np.repeat(b.input_id.numpy(), 2)
        slot = np.tile([0, 1], b.input_id.numel())
        want_d = negative_candidates(SEED, key, pos, slot, n["movie"])
        P = b.input_id.numel()
        if mode == "binary":
            got_s = b.n_id["user"].numpy()[b.edge_label_index[0, P:].numpy()]
            got_d = b.n_id["movie"].numpy()[b.edge_label_index[1, P:].numpy()]
            want_s = negative_candidates(SEED, key, pos, slot, n["user"], NEG_SRC_HOP)
            assert np.array_equal(got_s, want_s)
            assert not np.array_equal(want_s, negative_candidates(SEED, key, pos, slot,
                                                                  n["user"]))
        else:
            got_d = b.n_id["movie"].numpy()[b.dst_neg_index.numpy()].ravel()
        assert np.array_equal(got_d, want_d)


def test_one_type_relation_and_explicit_reverse():
    """user -follows-> user: one sorted seed list; no rev_ relation, so 'auto' finds none, and
    the relation itself can be named as its own reverse (stored both ways)."""
    spec = link_spec()
    eli = seed_edges(spec, FOLLOWS, 30)
    g = typed_graph(spec)
    assert reverse_relation(FOLLOWS, g.edge_types) is None
    assert reverse_relation(RATES, g.edge_types) == REV
    assert reverse_relation(REV, g.edge_types) == RATES
    for rev in (None, FOLLOWS):
        opts = {"neg_sampling": "binary", "exclude_seed_edges": True, "reverse_edge_type": rev}
        batches = reference(spec, FOLLOWS, eli, None, opts, epoch=0, world=1,
                            fan={RATES: [1, 1], REV: [1, 1], FOLLOWS: [-1, 2]})
        seen = check_invariants(spec, FOLLOWS, eli, batches, opts, rev=FOLLOWS,
                                rev_excluded=rev is not None)
        assert (seen["reverse"] == 0) == (rev is not None)


def test_link_requests_grow_one_tree_per_seed_of_either_type():
    """Seeds of two types (a link batch's) are sampled disjoint as PyG's seed_dict: trees
    numbered over the input type's seeds, then the other type's; each as its seed alone."""
    from mnmg_sampler.sampling.sampler import HeteroSampleRequest

    g = typed_graph(link_spec())
    req = HeteroSampleRequest("user", [1, 2], [2], 0, other_seeds={"movie": [3]})
    assert HeteroSampler(g).sample([req])[0].num_sampled_nodes["movie"][0] == 1
    b = HeteroSampler(g, disjoint=True).sample([req])[0]
    assert b.n_id["movie"][0] == 3 and b.batch["movie"][0] == 2
    assert b.batch["user"][:2].tolist() == [0, 1]
    alone = HeteroSampler(g, disjoint=True).sample(
        [HeteroSampleRequest("movie", [3], [2], 0)])[0]
    for t in alone.n_id:  # tree 2 is the movie seed sampled alone
        assert np.array_equal(alone.n_id[t].numpy(), b.n_id[t].numpy()[b.batch[t] == 2])
    with pytest.raises(SamplingInputError, match="repeats the input type"):
        HeteroSampleRequest("user", [1], [2], 0, other_seeds={"user": [3]})


def test_reverse_relation_errors():
    g = typed_graph(link_spec())
    with pytest.raises(SamplingInputError, match="not a relation"):
        reverse_relation(RATES, g.edge_types, ("movie", "rev_likes", "user"))
    with pytest.raises(SamplingInputError, match="does not go from"):
        reverse_relation(RATES, g.edge_types, FOLLOWS)
    with pytest.raises(SamplingInputError, match="not an edge type"):
        reverse_relation(RATES, g.edge_types, "movie__user")


# --- PyG's own LinkLoader around a take-all sampler: the layout PyG's hetero loader gives ---

pyg = pytest.importorskip("torch_geometric")

from .test_hetero_sampler import _attrs, _edges  # noqa: E402


def _full_link_sampler(data, hops):
    """PyG's ``edge_sample`` (negatives, seed_dict, link metadata) around a sampler taking
    every neighbor for ``hops`` hops (PyG's own needs pyg-lib or torch-sparse)."""
    from torch_geometric.sampler import BaseSampler
    from torch_geometric.sampler.neighbor_sampler import edge_sample

    class FullLink(BaseSampler):
        def sample_from_nodes(self, inputs, **kw):
            raise NotImplementedError

        def sample_from_edges(self, inputs, neg_sampling=None):
            return edge_sample(inputs, lambda seeds, _time: take_all(data, seeds, hops),
                               dict(data.num_nodes_dict), False, None, neg_sampling)

    return FullLink()


@pytest.mark.parametrize("mode", [None, "binary", "triplet"])
def test_to_pyg_matches_pyg_link_loader_layout(mode):
    from torch_geometric.loader import LinkLoader
    from torch_geometric.sampler import NegativeSampling as PygNeg

    spec = link_spec()
    data = hetero_data(spec)
    eli = seed_edges(spec)[:, :BATCH]
    loader = LinkLoader(data, link_sampler=_full_link_sampler(data, 2),
                        edge_label_index=(RATES, torch.from_numpy(eli)), batch_size=BATCH,
                        neg_sampling=None if mode is None else PygNeg(mode, 1))
    ref = next(iter(loader))
    opts = {} if mode is None else {"neg_sampling": mode}
    ours = reference(spec, RATES, eli, None, opts, 0, 1, fan=[-1, -1])[0].to_pyg()
    assert sorted(ours.node_types) == sorted(ref.node_types)
    assert sorted(ours.edge_types) == sorted(ref.edge_types)
    for key in (*ref.node_types, *ref.edge_types):
        assert _attrs(ours[key]) == _attrs(ref[key]), key
        for name, v in ref[key].items():
            if torch.is_tensor(v):
                assert ours[key][name].shape == v.shape or mode is not None, (key, name)
    P = eli.shape[1]
    assert torch.equal(ours[RATES].input_id, ref[RATES].input_id)
    if mode != "triplet":
        for b in (ours, ref):  # positives first, in input order, as (user, movie) ids
            lab = b[RATES].edge_label_index
            assert np.array_equal(b["user"].n_id[lab[0, :P]].numpy(), eli[0])
            assert np.array_equal(b["movie"].n_id[lab[1, :P]].numpy(), eli[1])
        if mode == "binary":
            assert torch.equal(ours[RATES].edge_label, ref[RATES].edge_label)
    else:
        for b in (ours, ref):
            assert np.array_equal(b["user"].n_id[b["user"].src_index].numpy(), eli[0])
            assert np.array_equal(b["movie"].n_id[b["movie"].dst_pos_index].numpy(), eli[1])
            assert b["movie"].dst_neg_index.shape == (P,)
    if mode is None:  # the same seeds: the same take-all subgraph, seeds first in both
        for t in ref.node_types:
            k = ref[t].num_sampled_nodes[0]
            assert ours[t].num_sampled_nodes == ref[t].num_sampled_nodes
            assert torch.equal(ours[t].n_id[:k], ref[t].n_id[:k])
            assert set(ours[t].n_id.tolist()) == set(ref[t].n_id.tolist())
        for et in ref.edge_types:
            assert _edges(ours, et) == _edges(ref, et)
            assert ours[et].num_sampled_edges == ref[et].num_sampled_edges


def test_to_hetero_graphsage_and_dot_head_run_on_to_pyg():
    from torch_geometric.nn import GraphSAGE, to_hetero

    spec = link_spec()
    b = reference(spec, RATES, seed_edges(spec), None, CASES["binary_exclude"], 0, 1)[0]
    data = b.to_pyg()
    model = to_hetero(GraphSAGE((-1, -1), 16, num_layers=2, out_channels=8), data.metadata(),
                      aggr="sum")
    h = model(data.x_dict, data.edge_index_dict)
    s, d = data[RATES].edge_label_index
    logits = (h["user"][s] * h["movie"][d]).sum(-1)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, data[RATES].edge_label)
    loss.backward()
    assert logits.shape == data[RATES].edge_label.shape and torch.isfinite(loss)
