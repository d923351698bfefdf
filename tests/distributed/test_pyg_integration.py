"""PyG integration on real gloo ranks: NodeLoader + ServiceSampler + our partition stores.

PyG's own ``GraphSAGE`` (``torch_geometric.nn``) is trained on Cora twice in the same run, with
the same seed, epochs and fanouts: once from our ``DistNeighborLoader``, once from
``torch_geometric.loader.NodeLoader`` driving :class:`mnmg_sampler.pyg.ServiceSampler` over the
partition's ``FeatureStore`` / ``GraphStore``. The PyG path must reach the same test accuracy
(within 1 point), and its minibatches must be the very ones our loader yields.
"""

from __future__ import annotations

import numpy as np
import pytest

from .harness import run_ranks

pytest.importorskip("torch_geometric")

EPOCHS, FANOUTS, BATCH, HIDDEN = 6, [10, 5], 128, 64
N_TRAIN = 1536  # 2 ranks x 6 batches x 128: every batch full, both paths cut the same


def _split(num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    perm = np.random.default_rng(0).permutation(num_nodes)
    return np.sort(perm[:N_TRAIN]), np.sort(perm[N_TRAIN:N_TRAIN + 600])


def _model(num_features: int, device):
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(0)
    return DDP(GraphSAGE(num_features, HIDDEN, num_layers=2, out_channels=7).to(device))


def _accuracy(counts):
    import torch
    import torch.distributed as dist

    t = torch.tensor(counts, dtype=torch.int64)
    dist.all_reduce(t)
    return float(t[0]) / float(t[1])


def _train(model, batches_per_epoch, set_epoch):
    import torch
    import torch.nn.functional as F

    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for epoch in range(EPOCHS):
        set_epoch(epoch)
        model.train()
        for b in batches_per_epoch():
            out = model(b.x, b.edge_index)[: b.batch_size]
            loss = F.cross_entropy(out, b.y[: b.batch_size])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss))
    return losses


def _evaluate(model, batches) -> float:
    import torch

    model.eval()
    right = total = 0
    with torch.no_grad():
        for b in batches:
            out = model.module(b.x, b.edge_index)[: b.batch_size]
            right += int((out.argmax(-1) == b.y[: b.batch_size]).sum())
            total += b.batch_size
    return _accuracy([right, total])


def _worker(rank, world, pdir):
    import torch
    from torch_geometric.data import Data
    from torch_geometric.loader import NodeLoader

    from mnmg_sampler import DistNeighborLoader, SamplingService, load_partition
    from mnmg_sampler.loaders.neighbor import global_batches
    from mnmg_sampler.pyg import ServiceSampler

    torch.set_num_threads(1)
    part = load_partition(pdir, rank, world)
    train_ids, test_ids = _split(part.num_nodes)
    service = SamplingService(part, seed=0)
    device = torch.device("cpu")
    try:
        # -- our loader
        ours = DistNeighborLoader(service, train_ids, FANOUTS, batch_size=BATCH, seed=0)
        model = _model(part.x.shape[1], device)
        seen_ours = []

        def our_batches():
            for b in ours:
                if ours.epoch == 0:
                    seen_ours.append(b)
                yield b

        loss_ours = _train(model, our_batches, ours.set_epoch)
        acc_ours = _evaluate(model, DistNeighborLoader(service, test_ids, [-1, -1],
                                                       batch_size=256))

        # -- PyG's NodeLoader over our sampler and stores; this rank walks the seeds our loader
        #    gives it, in the same order (shuffle=False on both sides)
        pos = global_batches(train_ids.size, BATCH, world, shuffle=False, drop_last=False,
                             seed=0, epoch=0)[rank::world]
        my_seeds = torch.from_numpy(train_ids[np.concatenate(pos)])
        sampler = ServiceSampler(service, num_neighbors=FANOUTS, seed=0)
        loader = NodeLoader(sampler.data, node_sampler=sampler, input_nodes=my_seeds,
                            batch_size=BATCH, shuffle=False)
        model = _model(part.x.shape[1], device)
        seen_pyg = []

        def pyg_batches():
            for data in loader:
                assert isinstance(data, Data)
                if sampler.epoch == 0:
                    seen_pyg.append(data)
                yield data

        loss_pyg = _train(model, pyg_batches, sampler.set_epoch)
        mine = torch.from_numpy(test_ids).tensor_split(world)[rank]
        ev = ServiceSampler(service, num_neighbors=[-1, -1])
        acc_pyg = _evaluate(model, NodeLoader(ev.data, node_sampler=ev, input_nodes=mine,
                                              batch_size=256))

        # the PyG batches are our batches, field by field
        assert len(seen_pyg) == len(seen_ours) == len(ours) == N_TRAIN // (BATCH * world)
        for d, b in zip(seen_pyg, seen_ours, strict=True):
            assert torch.equal(d.n_id, b.n_id) and torch.equal(d.edge_index, b.edge_index)
            assert torch.equal(d.e_id, b.e_id) and torch.equal(d.x, b.x)
            assert torch.equal(d.y, b.y) and d.batch_size == b.batch_size
            assert list(d.num_sampled_nodes) == b.num_sampled_nodes
        # the feature store also serves ids outside a sampled batch (fetched via the service)
        fs = sampler.feature_store
        ids = torch.tensor([5, 0, 2707, 5])
        x = fs.get_tensor(group_name=None, attr_name="x", index=ids)
        y = fs.get_tensor(group_name=None, attr_name="y", index=ids)
        assert x.shape == (4, part.x.shape[1]) and torch.equal(x[0], x[3])
        src, dst = sampler.graph_store.get_edge_index(edge_type=None, layout="coo")
        owned = set(np.asarray(part.orig_ids).tolist())
        assert set(dst.tolist()) <= owned and src.numel() == part.num_local_edges
    finally:
        service.shutdown()
    return {"acc_ours": acc_ours, "acc_pyg": acc_pyg, "loss_ours": loss_ours,
            "loss_pyg": loss_pyg, "y": y.tolist()}


def test_pyg_graphsage_through_nodeloader_matches_our_loader(tmp_path):
    from mnmg_sampler import load_graph, partition

    g = load_graph("cora")
    pdir = partition(g, 2, "random", tmp_path / "parts", seed=0)
    res = run_ranks(_worker, 2, pdir, timeout=600)
    r0 = res[0]
    print(f"test accuracy: our loader {r0['acc_ours']:.4f}, PyG NodeLoader {r0['acc_pyg']:.4f}")
    assert res[0]["acc_pyg"] == res[1]["acc_pyg"] and res[0]["acc_ours"] == res[1]["acc_ours"]
    assert abs(r0["acc_pyg"] - r0["acc_ours"]) <= 0.01, r0
    assert r0["acc_pyg"] > 0.75, r0  # it really learned (Cora GraphSAGE: ~0.85)
    assert r0["loss_pyg"][-1] < r0["loss_pyg"][0] / 2
    assert r0["y"] == g.y[[5, 0, 2707, 5]].tolist()
