"""Per-request deduplication and renumbering in torch ops: ``ops.dedup.dedup_hop`` on any device.

On a GPU, torch's sort replaces the CPU version's hash table, with no Python loop over requests
(docs/gpu.md#deduplication-in-torch-ops-not-used-by-the-sampler-yet): each request laid out as
``n_id so far`` then ``this hop's candidates``; the composite key ``req * U + rank`` (dense ranks
of the ids, so no id arithmetic can overflow); a **stable** sort puts each (request, node)
group's first occurrence first. A candidate that is its group's first occurrence is new, and its
local index is the request's ``n_id`` size plus its rank among the request's new nodes; every
other element takes its group's first occurrence's index.

The result is bit-identical to the hash-table version (tests compare both on random inputs,
including duplicate seeds and empty requests). Cost: one unique and one sort of
``len(nid) + len(cand)`` elements, and a few host reads of sizes (boolean masks, ``unique``).
"""

from __future__ import annotations

import torch

__all__ = ["dedup_hop", "dedup_hop_torch"]


def _as_long(t, device: torch.device | None) -> torch.Tensor:
    return torch.as_tensor(t, device=device).to(torch.int64).reshape(-1)


def dedup_hop_torch(
    nid: torch.Tensor,
    nid_off: torch.Tensor,
    cand: torch.Tensor,
    cand_off: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Deduplicate one hop for ``R`` requests given as flat tensors with ``R + 1`` offsets.

    Same contract as :func:`mnmg_sampler.ops.dedup.dedup_hop`, on ``cand``'s device.
    """
    device = cand.device if torch.is_tensor(cand) else None
    nid, nid_off = _as_long(nid, device), _as_long(nid_off, device)
    cand, cand_off = _as_long(cand, device), _as_long(cand_off, device)
    device = cand.device
    R = nid_off.numel() - 1
    n_sizes = nid_off[1:] - nid_off[:-1]
    c_sizes = cand_off[1:] - cand_off[:-1]
    if cand.numel() == 0:
        return cand.clone(), torch.zeros(R + 1, dtype=torch.int64, device=device), cand.clone()

    ar = torch.arange(R, device=device)
    sizes = n_sizes + c_sizes
    seq_off = torch.zeros(R + 1, dtype=torch.int64, device=device)
    torch.cumsum(sizes, 0, out=seq_off[1:])
    total = nid.numel() + cand.numel()
    # Flat request-major layout: request r's n_id, then its candidates.
    is_cand = torch.ones(total, dtype=torch.bool, device=device)
    nid_req = torch.repeat_interleave(ar, n_sizes, output_size=nid.numel())
    cand_req = torch.repeat_interleave(ar, c_sizes, output_size=cand.numel())
    nid_pos = torch.arange(nid.numel(), device=device) - nid_off[nid_req]
    cand_pos = torch.arange(cand.numel(), device=device) - cand_off[cand_req]
    nid_at = seq_off[nid_req] + nid_pos
    cand_at = seq_off[cand_req] + n_sizes[cand_req] + cand_pos
    vals = torch.empty(total, dtype=torch.int64, device=device)
    req = torch.empty(total, dtype=torch.int64, device=device)
    pos = torch.empty(total, dtype=torch.int64, device=device)
    vals[nid_at], vals[cand_at] = nid, cand
    req[nid_at], req[cand_at] = nid_req, cand_req
    pos[nid_at], pos[cand_at] = nid_pos, n_sizes[cand_req] + cand_pos
    is_cand[nid_at] = False

    uniq, rank = torch.unique(vals, return_inverse=True)
    key = req * uniq.numel() + rank
    _, order = torch.sort(key, stable=True)
    skey = key[order]
    head = torch.ones(total, dtype=torch.bool, device=device)
    head[1:] = skey[1:] != skey[:-1]
    # Flat index of each sorted element's group head (= first occurrence, by stability).
    group = torch.cumsum(head.to(torch.int64), 0) - 1
    first_sorted = order[head][group]
    first = torch.empty(total, dtype=torch.int64, device=device)
    first[order] = first_sorted

    is_first = first == torch.arange(total, device=device)
    is_new = is_first & is_cand
    new = vals[is_new]
    new_cnt = torch.zeros(R, dtype=torch.int64, device=device)
    new_cnt.index_add_(0, req[is_new], torch.ones_like(new))
    new_off = torch.zeros(R + 1, dtype=torch.int64, device=device)
    torch.cumsum(new_cnt, 0, out=new_off[1:])

    # Local index of every first occurrence: its position if it is in n_id, else n + new rank.
    new_rank = torch.cumsum(is_new.to(torch.int64), 0) - 1 - new_off[req]
    local_of = torch.where(is_cand, n_sizes[req] + new_rank, pos)
    local = local_of[first[cand_at]]
    return new, new_off, local


dedup_hop = dedup_hop_torch  # drop-in name, same contract as ops.dedup.dedup_hop
