"""DDP GraphSAGE on the embedded Cora, with the sampler inside every trainer process.

    torchrun --nproc-per-node 2 examples/ddp_graphsage.py --epochs 10

Rank 0 partitions Cora into one part per rank (once; reused later), every rank serves its part
through a SamplingService and draws its share of each epoch's seeds from a DistNeighborLoader.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

from mnmg_sampler import (
    DistNeighborLoader,
    GraphSAGE,
    SamplingService,
    init_distributed,
    load_graph,
    load_partition,
    num_correct,
    partition,
    random_node_split,
    set_threads,
)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--fanouts", default="10,5", help="neighbors per hop, hop 1 first")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--parts-dir", default="runs/example", help="where partitions are kept")
    p.add_argument("--timeout-s", type=float, default=600.0,
                   help="collective timeout: a dead or stuck peer fails every rank after this")
    return p.parse_args()


def evaluate(model: torch.nn.Module, loader: DistNeighborLoader, dev: torch.device) -> float:
    """Accuracy over the loader's seeds on every rank together (same value on all ranks)."""
    model.eval()
    counts = torch.zeros(2, dtype=torch.int64, device=dev)
    with torch.no_grad():
        for b in loader:
            b = b.to(dev)
            out = model(b.x, b.edge_index, b.num_sampled_nodes, b.num_sampled_edges)
            counts[0] += num_correct(out[: b.batch_size], b.y[: b.batch_size])
            counts[1] += b.batch_size
    dist.all_reduce(counts)  # sum of correct and of seen over ranks
    return counts[0].item() / max(1, counts[1].item())


@record
def main() -> None:
    args = parse_args()
    # gloo + CPU without a GPU, NCCL + local GPU with one; the sampling service's group gets
    # the same timeout
    env, dev = init_distributed(timeout_s=args.timeout_s)
    set_threads(None)  # cores / local ranks: ranks on one machine do not oversubscribe it
    rank, world = env.rank, env.world_size

    parts = Path(args.parts_dir) / f"cora-{world}parts"
    if rank == 0 and not parts.exists():  # written atomically: present means complete
        partition(load_graph("cora"), world, "random", parts, seed=args.seed)
    dist.barrier()
    part = load_partition(parts, rank, world)
    service = SamplingService(part, seed=args.seed)

    # the same random 60/20/20 split on every rank, held as a rule (no array of num_nodes)
    split = random_node_split(part.num_nodes, [0.6, 0.2, 0.2], seed=args.seed)
    train, val, test = split["train"], split["val"], split["test"]
    fanouts = [int(f) for f in args.fanouts.split(",")]
    train_loader = DistNeighborLoader(service, train, fanouts, args.batch_size, shuffle=True,
                                      seed=args.seed)
    val_loader = DistNeighborLoader(service, val, fanouts, args.batch_size)
    test_loader = DistNeighborLoader(service, test, fanouts, args.batch_size)

    num_classes = torch.tensor(int(part.y.max()) + 1 if part.y.size else 0, device=dev)
    dist.all_reduce(num_classes, op=dist.ReduceOp.MAX)  # each rank holds only its part's labels
    torch.manual_seed(args.seed)
    model = GraphSAGE(part.x.shape[1], args.hidden, int(num_classes), layers=len(fanouts)).to(dev)
    model = DDP(model, device_ids=[dev] if dev.type == "cuda" else None)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
    if rank == 0:
        print(f"world size {world}, {model.module.backend} layers, {len(train_loader)} train "
              f"batches per rank per epoch", flush=True)

    val_acc = float("nan")
    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        model.train()
        train_loader.set_epoch(epoch)  # a new shuffle (and new samples) each epoch
        loss_sum = torch.zeros(2, dtype=torch.float64, device=dev)
        for b in train_loader:  # the service samples the next batches while this one trains
            b = b.to(dev)
            out = model(b.x, b.edge_index, b.num_sampled_nodes, b.num_sampled_edges)
            loss = F.cross_entropy(out[: b.batch_size], b.y[: b.batch_size])
            opt.zero_grad()
            loss.backward()  # DDP all-reduces gradients on the default group
            opt.step()
            loss_sum += torch.tensor([loss.item() * b.batch_size, b.batch_size], device=dev)
        dist.all_reduce(loss_sum)
        val_acc = evaluate(model.module, val_loader, dev)
        if rank == 0:
            print(f"epoch {epoch:3d}  loss {(loss_sum[0] / loss_sum[1]).item():.4f}  "
                  f"val_acc {val_acc:.4f}  ({time.perf_counter() - t0:.1f}s)", flush=True)

    test_acc = evaluate(model.module, test_loader, dev)
    if rank == 0:
        print(f"final  val_acc {val_acc:.4f}  test_acc {test_acc:.4f}", flush=True)
        st = service.stats()
        print(f"sampler (rank 0): {st['requests']} requests in {st['rounds']} rounds, "
              f"{st['kernel_calls']} kernel calls, {st['bytes_exchanged'] / 1e6:.0f} MB "
              f"exchanged", flush=True)
    service.shutdown()  # collective: every rank calls it, before the process group goes
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
