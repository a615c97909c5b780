"""The training graph and the features stored in shards across the ranks of a data-parallel group, for
neighbour sampling on several processes (the storage of DistDGL and of PyG's distributed training, with
torch.distributed collectives in place of their RPC layer).

Rank ``r`` of ``W`` owns the nodes ``bounds[r]:bounds[r + 1]`` (:func:`node_bounds`: contiguous ranges
holding about equal shares of the graph's CSR entries): their neighbour lists, i.e. the training graph's
``indices[indptr[bounds[r]]:indptr[bounds[r + 1]]]``, and their feature rows. Every rank also keeps the
row pointer ``indptr: (N + 1,)`` (8 bytes per node), so it knows each node's degree and which rank holds
each neighbour slot. The entries and feature rows that a batch needs from other ranks come in one
exchange per read (:class:`ShardedRows`: ``all_to_all`` of the counts, of the requests, of the answers).

Evaluation runs on the shards too (:func:`embed_sharded`): each rank embeds its own nodes layer by layer,
fetching the previous layer's rows of their neighbours from the ranks that own them (the halo), and rank 0
gathers the ``(N, d)`` embeddings it scores. With a prepared graph, each rank also splits only its own rows
(:func:`gaescale.split.hashed_rows`), so no rank holds or reads the whole training graph or all the features.

Sampling from a :func:`sharded_graph` draws what sampling from the whole graph would, bit for bit:
:func:`gaescale.samplers.sample_edges` and :func:`~gaescale.samplers.sample_neighbors` choose slot
positions from the degrees alone and then read only the entries at those slots. Every rank must read the
sharded arrays in step (the same number of reads, in the same order), as the ranks of neighbour sampling
do: the same number of steps, each reading the drawn edges, one set of slots per hop, and the features.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
import torch
import torch.distributed as dist

from ..graph import Graph
from ..sparse import to_torch_csr
from .runtime import peer_failures


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
        order = None  # keys already grouped by owner (sorted ones: a halo, every node) are sent as they are
        if keys.size > 1 and np.any(owner[1:] < owner[:-1]):
            order = np.argsort(owner.astype(np.uint16) if self.bounds.size <= 1 << 16 else owner,
                               kind="stable")  # radix
        send = np.bincount(owner, minlength=len(self.bounds) - 1)
        recv = torch.empty(send.size, dtype=torch.int64)
        with peer_failures():
            dist.all_to_all_single(recv, torch.from_numpy(send))
            asked = torch.empty(int(recv.sum()), dtype=torch.int32 if small else torch.int64)
            dist.all_to_all_single(asked,
                                   torch.from_numpy(np.ascontiguousarray(keys if order is None else keys[order])),
                                   output_split_sizes=recv.tolist(),
                                   input_split_sizes=send.tolist())
            mine = asked.numpy().astype(np.int64) - self.bounds[self.rank]
            if isinstance(self.local, torch.Tensor):
                answer = self.local[torch.from_numpy(mine)].contiguous()
            else:
                answer = torch.from_numpy(np.ascontiguousarray(self.local[mine]))
            got = answer.new_empty((keys.size,) + tuple(answer.shape[1:]))
            dist.all_to_all_single(got, answer, output_split_sizes=send.tolist(), input_split_sizes=recv.tolist())
        out = got
        if order is not None:
            out = torch.empty_like(got)
            out[torch.from_numpy(order)] = got
        return out.to(self.device) if isinstance(self.local, torch.Tensor) else out.numpy()


def sharded_graph(indptr: np.ndarray, local_indices: np.ndarray, bounds: np.ndarray, rank: int) -> Graph:
    """The training graph of ``N = indptr.size - 1`` nodes whose ``indices`` are a :class:`ShardedRows`: this
    rank holds ``local_indices``, the neighbour lists of its nodes ``bounds[rank]:bounds[rank + 1]``. For the
    samplers only (:func:`gaescale.samplers.neighbor_subgraph`); its operators would read every entry."""
    return Graph(indptr, ShardedRows(local_indices, np.asarray(indptr)[bounds], rank), int(indptr.size - 1))


class Shards(NamedTuple):
    """This rank's shards: the training ``graph`` (a :func:`sharded_graph`), the ``features`` (a
    :class:`ShardedRows`, or None for a featureless graph), and the node ``bounds: (W + 1,)`` of every rank."""

    graph: Graph
    features: ShardedRows | None
    bounds: np.ndarray
    rank: int


def partition(group, graph: Graph, train: Graph | None, x, *,
              rows: tuple[np.ndarray, np.ndarray] | None = None, device=None) -> Shards:
    """This rank's (of the runtime ``group``) shard of the training graph and of the features ``x: (N, F)`` (or
    None), the features on ``device``. Nodes are cut by ``graph`` (the whole graph, whose row pointer every rank
    has: :func:`node_bounds`). The rank's neighbour lists are copied from ``train`` (the training graph, when
    this rank holds it) or given as ``rows = (degree, indices)`` of its range (from
    :func:`gaescale.split.hashed_rows`: computed from those rows of ``graph`` alone); the training graph's
    row pointer is gathered from every rank's degrees. Nothing returned refers to ``train`` or ``x``: they
    can be let go."""
    w, r = group.world_size, group.rank
    bounds = node_bounds(graph.indptr, w)
    a, b = int(bounds[r]), int(bounds[r + 1])
    if train is not None:
        degree = np.diff(np.asarray(train.indptr[a:b + 1], np.int64))
        local = np.array(train.indices[int(train.indptr[a]):int(train.indptr[b])])
    else:
        degree, local = rows
    indptr = np.concatenate([[0], np.cumsum(_gather_ranges(group, degree))]).astype(np.int64)
    features = None
    if x is not None:
        rows = x[a:b]  # a tensor, or the memory-mapped features of a prepared graph
        rows = rows.clone() if isinstance(rows, torch.Tensor) else torch.from_numpy(np.array(rows, np.float32))
        features = ShardedRows(rows, bounds, r, device=device)
    return Shards(sharded_graph(indptr, local, bounds, r), features, bounds, r)


@torch.no_grad()
def embed_sharded(model: torch.nn.Module, shards: Shards, *, block: int = 1 << 16) -> torch.Tensor | None:
    """The evaluation-mode embeddings ``z: (N, d)`` of ``model`` (a GAE or VGAE whose encoder has
    ``layerwise``: gaescale's GCN and SAGE) on the sharded training graph, on rank 0's CPU; None on the
    other ranks. A collective: every rank calls it with the same weights.

    Layer-wise inference over the shards (as :meth:`gaescale.encoders.GCN.layerwise` over the whole graph):
    for each layer, each rank computes what the operator multiplies (``D^-1/2 h W`` for GCN) for its own
    nodes, fetches the rows of its halo (the other ranks' nodes adjacent to its own) in one exchange, and
    multiplies ``block`` of its rows of the operator at a time. Memory per rank: its nodes' input and output
    of a layer, its nodes' and its halo's rows of what the operator multiplies, one block, and its neighbour
    lists numbered as rows of that table (while they are numbered, two ``(N,)`` arrays)."""
    encoder, bounds, rank = model.encoder, shards.bounds, shards.rank
    a, b = int(bounds[rank]), int(bounds[rank + 1])
    indptr = np.asarray(shards.graph.indptr[a:b + 1], np.int64)
    own = Graph(indptr - indptr[0], shards.graph.indices.local, b - a, node_ids=np.arange(a, b, dtype=np.int64))
    halo, column = _halo(own, a, int(bounds[-1]))
    device = encoder.device
    h = None if shards.features is None else shards.features.local.to(device)
    was = model.training
    model.eval()
    try:
        def extend(source, k):  # the part the operator multiplies gets its halo's rows
            source = list(source)
            source[k] = torch.cat([source[k], ShardedRows(source[k].cpu(), bounds, rank, device=device)[halo]])
            return tuple(source)

        def adjacency_rows(start, stop):
            lo, hi = int(own.indptr[start]), int(own.indptr[stop])
            rows = sp.csr_matrix((np.ones(hi - lo, np.float32), column[lo:hi], own.indptr[start:stop + 1] - lo),
                                 shape=(stop - start, b - a + halo.size))
            return to_torch_csr(rows, torch.float32)

        h = encoder.run_layers(h, own, adjacency_rows, block=block, extend=extend)
        z = model.eval_output(h).float().cpu()
    finally:
        model.train(was)
    everything = np.arange(int(bounds[-1]), dtype=np.int64) if rank == 0 else np.empty(0, np.int64)
    z = ShardedRows(z, bounds, rank)[everything]
    return model.add_bias(z) if rank == 0 else None


def _halo(own: Graph, first: int, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """``(halo, column)``: the nodes outside ``first:first + own.num_nodes`` adjacent to ``own``'s (whose
    neighbour lists hold global ids), sorted; and each of ``own``'s entries as a column of a table of rows
    that holds ``own``'s nodes, then the halo. O(entries + N) with an ``(N,)`` mark, no sort."""
    last = first + own.num_nodes
    cols = np.asarray(own.indices)
    mark = np.zeros(num_nodes, bool)
    mark[cols] = True
    mark[first:last] = False
    halo = np.flatnonzero(mark)
    small = last - first + halo.size < 2**31
    position = np.empty(num_nodes, np.int32 if small else np.int64)
    position[first:last] = np.arange(last - first)
    position[halo] = np.arange(last - first, last - first + halo.size)
    return halo, position[cols]


def _gather_ranges(group, values: np.ndarray) -> np.ndarray:
    """Every rank's ``values`` (1-D), concatenated in rank order. The others may wait long here while rank 0
    works alone (splits the whole graph, or draws the held-out non-edges), so it runs among the collectives
    that allow that (see :func:`gaescale.parallel.runtime.from_torchrun`)."""
    return np.concatenate([np.asarray(v, np.int64) for v in group.gather(np.asarray(values, np.int64), waiting=True)])
