"""The training graph and the features stored in shards across the ranks of a data-parallel group, for
neighbour sampling on several processes (the storage of DistDGL and of PyG's distributed training, with
torch.distributed collectives in place of their RPC layer).

Rank ``r`` of ``W`` owns the nodes ``bounds[r]:bounds[r + 1]`` (:func:`node_bounds`: contiguous ranges
holding about equal shares of the graph's CSR entries): their neighbour lists, i.e. the training graph's
``indices[indptr[bounds[r]]:indptr[bounds[r + 1]]]``, and their feature rows. Every rank also keeps the
row pointer ``indptr: (N + 1,)`` (8 bytes per node), so it knows each node's degree and which rank holds
each neighbour slot. The entries and feature rows that a batch needs from other ranks come in one
exchange per read (:class:`ShardedRows`: ``all_to_all`` of the counts, of the requests, of the answers).

Sampling from a :func:`sharded_graph` draws what sampling from the whole graph would, bit for bit:
:func:`gaescale.samplers.sample_edges` and :func:`~gaescale.samplers.sample_neighbors` choose slot
positions from the degrees alone and then read only the entries at those slots. Every rank must read the
sharded arrays in step (the same number of reads, in the same order), as the ranks of neighbour sampling
do: the same number of steps, each reading the drawn edges, one set of slots per hop, and the features.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch
import torch.distributed as dist

from .distributed import Dist, gather, peer_failures
from .graph import Graph


def node_bounds(indptr: np.ndarray, world_size: int) -> np.ndarray:
    """``(W + 1,)`` int64 node boundaries ``0 = b_0 <= ... <= b_W = N`` cutting a CSR with row pointer
    ``indptr: (N + 1,)`` into ``W`` ranges of contiguous rows with about ``indptr[-1] / W`` entries each."""
    n, total = indptr.shape[0] - 1, int(indptr[-1])
    targets = np.arange(1, world_size, dtype=np.int64) * total // world_size
    cuts = np.searchsorted(np.asarray(indptr), targets, side="left")  # a binary search: reads log N entries
    return np.concatenate([[0], np.clip(cuts, 0, n), [n]]).astype(np.int64)


class ShardedRows:
    """An array of ``bounds[-1]`` rows of which this rank (``rank``) holds ``local``: the rows
    ``bounds[rank]:bounds[rank + 1]``. ``rows[index]`` (``index: (k,)`` int, NumPy or torch) returns those
    rows of the whole array, fetching the ones that other ranks hold; a collective: every rank must index
    in step. Returns NumPy for a NumPy ``local`` and a tensor on ``device`` for a tensor ``local``."""

    def __init__(self, local: np.ndarray | torch.Tensor, bounds: np.ndarray, rank: int, *, device=None):
        self.local, self.bounds, self.rank = local, np.asarray(bounds, np.int64), int(rank)
        if local.shape[0] != self.bounds[rank + 1] - self.bounds[rank]:
            raise ValueError(f"rank {rank} holds {local.shape[0]} rows, its range has "
                             f"{self.bounds[rank + 1] - self.bounds[rank]}")
        self.device = torch.device("cpu") if device is None else torch.device(device)

    @property
    def shape(self) -> tuple[int, ...]:
        return (int(self.bounds[-1]),) + tuple(self.local.shape[1:])

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def dtype(self):
        return self.local.dtype

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index):
        small = self.bounds[-1] < 2**31  # 4-byte requests where they suffice
        keys = (index.cpu().numpy() if isinstance(index, torch.Tensor) else np.asarray(index))
        keys = keys.astype(np.int32 if small else np.int64, copy=False)
        owner = np.searchsorted(self.bounds, keys, side="right") - 1
        order = np.argsort(owner.astype(np.uint16) if self.bounds.size <= 1 << 16 else owner, kind="stable")  # radix
        send = np.bincount(owner, minlength=len(self.bounds) - 1)
        recv = torch.empty(send.size, dtype=torch.int64)
        with peer_failures():
            dist.all_to_all_single(recv, torch.from_numpy(send))
            asked = torch.empty(int(recv.sum()), dtype=torch.int32 if small else torch.int64)
            dist.all_to_all_single(asked, torch.from_numpy(keys[order]), output_split_sizes=recv.tolist(),
                                   input_split_sizes=send.tolist())
            mine = asked.numpy().astype(np.int64) - self.bounds[self.rank]
            if isinstance(self.local, torch.Tensor):
                answer = self.local[torch.from_numpy(mine)].contiguous()
            else:
                answer = torch.from_numpy(np.ascontiguousarray(self.local[mine]))
            got = answer.new_empty((keys.size,) + tuple(answer.shape[1:]))
            dist.all_to_all_single(got, answer, output_split_sizes=send.tolist(), input_split_sizes=recv.tolist())
        out = torch.empty_like(got)
        out[torch.from_numpy(order)] = got
        return out.to(self.device) if isinstance(self.local, torch.Tensor) else out.numpy()


def sharded_graph(indptr: np.ndarray, local_indices: np.ndarray, bounds: np.ndarray, rank: int) -> Graph:
    """The training graph of ``N = indptr.size - 1`` nodes whose ``indices`` are a :class:`ShardedRows`: this
    rank holds ``local_indices``, the neighbour lists of its nodes ``bounds[rank]:bounds[rank + 1]``. For the
    samplers only (:func:`gaescale.samplers.neighbor_subgraph`); its operators would read every entry."""
    return Graph(indptr, ShardedRows(local_indices, np.asarray(indptr)[bounds], rank), int(indptr.size - 1))


def partition(group: Dist, graph: Graph, train: Graph | None, x, *,
              train_rows: Callable[[int, int], tuple[np.ndarray, np.ndarray]] | None = None, device=None,
              copy: bool = True) -> tuple[Graph, ShardedRows | None]:
    """This rank's shard of the training graph and of the features ``x: (N, F)`` (or None), as a
    :func:`sharded_graph` and a :class:`ShardedRows` on ``device``. Nodes are cut by ``graph`` (the whole
    graph, whose row pointer every rank has). The rank's neighbour lists come from ``train`` (the training
    graph, when this rank holds it; ``copy`` them to let it go) or from ``train_rows(start, stop) ->
    (degree, indices)`` (:func:`gaescale.split.hashed_train_rows`: computed from those rows of ``graph``
    alone); the training graph's row pointer is gathered from every rank's degrees."""
    w, r = group.world_size, group.rank
    bounds = node_bounds(graph.indptr, w)
    a, b = int(bounds[r]), int(bounds[r + 1])
    if train is not None:
        degree = np.diff(np.asarray(train.indptr[a:b + 1], np.int64))
        local = train.indices[int(train.indptr[a]):int(train.indptr[b])]
        local = np.array(local) if copy else local
    else:
        degree, local = train_rows(a, b)
    indptr = np.concatenate([[0], np.cumsum(_gather_ranges(degree))]).astype(np.int64)
    features = None
    if x is not None:
        rows = x[a:b]  # a tensor, or the memory-mapped features of a prepared graph
        if isinstance(rows, torch.Tensor):
            rows = rows.clone() if copy else rows
        else:
            rows = torch.from_numpy(np.array(rows, np.float32))
        features = ShardedRows(rows, bounds, r, device=device)
    return sharded_graph(indptr, local, bounds, r), features


def _gather_ranges(values: np.ndarray) -> np.ndarray:
    """Every rank's ``values`` (1-D), concatenated in rank order. The others may wait long here while rank 0
    splits the whole graph, so it runs among the collectives that allow that (see
    :func:`gaescale.distributed.from_torchrun`)."""
    return np.concatenate([np.asarray(v, np.int64) for v in gather(np.asarray(values, np.int64), waiting=True)])
