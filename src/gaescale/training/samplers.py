"""Subgraph training strategies: Cluster-GCN batches of METIS partitions and FastGAE's degree-sampled
decoding. Every draw comes from the trainer's torch generator, so a resumed run repeats it exactly.

- **Cluster-GCN** (Chiang et al. 2019): the graph is cut into ``num_parts`` parts by METIS (``pymetis``);
  each epoch shuffles them into batches of ``clusters_per_batch``; the encoder runs on the subgraph
  induced by a batch (its own GCN normalisation) and the loss covers the pairs inside the batch: its
  edges plus its dense term over ``|S|^2`` pairs, with the weights of the loss (balanced or GAE)
  computed for that subgraph, i.e. each batch is a small graph autoencoder problem of its own.
- **FastGAE** (Salha et al. 2021): the encoder runs on the full graph; the loss is the reconstruction of
  the subgraph induced by ``size`` nodes drawn without replacement with probability proportional to
  ``degree^alpha``, with the loss weights re-estimated on that subgraph (``pos_weight = (n_S^2 - |E_S|) /
  |E_S|``, ``norm = n_S^2 / (2 (n_S^2 - |E_S|))`` for ``weighting='gae'``, with ``|E_S|`` ordered pairs).
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from ..data import order
from ..errors import ParameterError
from ..graph import Graph, sorted_unique


def induced_subgraph(graph: Graph, nodes: np.ndarray, *, edges=None) -> Graph:
    """The subgraph of ``graph`` induced by ``nodes: (n,)`` (distinct node indices), relabelled ``0..n-1`` in
    the given order; ``node_ids`` keeps the original indices. O(sum of the nodes' degrees), vectorised.
    ``edges(u, v) -> (k,) bool``: keep only the edges it accepts (of ``graph``'s node indices), e.g. the
    training edges of a split of ``graph`` (:func:`gaescale.split.hashed_is_train`). A weighted graph's subgraph
    keeps the weights of its edges."""
    nodes = np.asarray(nodes, np.int64)
    local = np.full(graph.num_nodes, -1, np.int64)
    local[nodes] = np.arange(nodes.size)
    rows, slots = _adjacency_slots(graph, nodes)
    cols = local[graph.indices[slots]]
    keep = (cols >= 0) & (rows < cols)
    if edges is not None:
        keep[keep] = edges(nodes[rows[keep]], nodes[cols[keep]])
    weight = None if graph.data is None else np.asarray(graph.data)[slots[keep]]
    return Graph.from_edge_index(np.stack([rows[keep], cols[keep]]), nodes.size, canonical=True, node_ids=nodes,
                                 edge_weight=weight)


def _adjacency_slots(graph: Graph, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every neighbour slot of ``nodes: (n,)``: ``(rows, slots)``, both ``(sum of degrees,)``, with
    ``graph.indices[slots[k]]`` a neighbour of ``nodes[rows[k]]``. Vectorised, no loop over nodes."""
    counts = graph.degree[nodes]
    rows = np.repeat(np.arange(nodes.size), counts)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return rows, np.repeat(graph.indptr[nodes], counts) + offsets


def metis_parts(graph: Graph, num_parts: int, *, seed: int = 0) -> np.ndarray:
    """``(N,)`` int64 part of each node, from METIS (``pymetis``) with ``num_parts`` parts."""
    if not isinstance(num_parts, int) or num_parts < 1:
        raise ParameterError("num_parts", "metis_parts", "an int >= 1", num_parts)
    return order.metis_parts(graph.indptr, graph.indices, graph.num_nodes, num_parts, seed=seed,
                             needed_by="--strategy cluster", instead="or another --strategy")


def cluster_batches(parts: np.ndarray, clusters_per_batch: int, generator: torch.Generator,
                    num_parts: int | None = None) -> Iterator[np.ndarray]:
    """One epoch of Cluster-GCN batches: the parts ``0..num_parts-1`` (default: up to the largest in
    ``parts``) in a random order, ``clusters_per_batch`` at a time; yields the sorted node indices ``(n,)``
    of each batch (empty if all its parts are). Every node lands in exactly one batch."""
    num_parts = (int(parts.max()) + 1 if parts.size else 0) if num_parts is None else num_parts
    order = np.argsort(parts, kind="stable")
    bounds = np.searchsorted(parts[order], np.arange(num_parts + 1))
    perm = torch.randperm(num_parts, generator=generator).numpy()
    for s in range(0, num_parts, clusters_per_batch):
        chosen = perm[s:s + clusters_per_batch]
        yield np.sort(np.concatenate([order[bounds[p]:bounds[p + 1]] for p in chosen]))


def degree_sampled_nodes(degree: np.ndarray, size: int, alpha: float, generator: torch.Generator) -> np.ndarray:
    """FastGAE's node sampling: ``size`` distinct nodes, drawn with probability proportional to
    ``degree^alpha`` (``alpha = 0``: uniform), sorted. Isolated nodes are drawn only when ``alpha = 0``."""
    w = torch.from_numpy(np.asarray(degree, np.float64)) ** float(alpha)
    size = min(int(size), int((w > 0).sum()))
    return np.sort(torch.multinomial(w, size, replacement=False, generator=generator).numpy())


def sample_edges(graph: Graph, count: int, generator: torch.Generator, *,
                 self_loops: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``count`` undirected edges drawn uniformly with replacement: a uniform slot of the CSR (each edge
    has two) names a row by binary search in ``indptr`` and a column; with ``self_loops`` every ``(i, i)``
    is drawn as often as an edge. Returns ``pairs: (2, count)`` int64 and ``loops: (count,)`` bool.
    Reads ``count`` entries of the CSR, never the whole of it."""
    slots = int(graph.indices.size)
    r = torch.randint(0, slots + (2 * graph.num_nodes if self_loops else 0), (count,), generator=generator).numpy()
    loops = r >= slots
    pairs = np.empty((2, count), np.int64)
    e = r[~loops]
    pairs[0, ~loops] = np.searchsorted(graph.indptr, e, side="right") - 1
    pairs[1, ~loops] = graph.indices[e]
    pairs[:, loops] = (r[loops] - slots) // 2
    return pairs, loops


def sample_neighbors(graph: Graph, nodes: np.ndarray, fanout: int,
                     generator: torch.Generator) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``nodes: (n,)``, ``min(degree, fanout)`` distinct neighbours drawn uniformly without
    replacement. Returns ``(rows, cols)``, both ``(m,)`` int64: ``nodes[rows[k]]`` is linked to
    ``cols[k]`` (a node index of ``graph``).

    Vectorised over nodes: a node with at most ``fanout`` neighbours keeps them all; the others run
    Floyd's algorithm in lockstep (``fanout`` rounds, each drawing one slot per node and replacing a
    repeat by the round's new top slot), so the Python loop is over the fanout, never over nodes.
    """
    nodes = np.asarray(nodes, np.int64)
    deg = graph.degree[nodes]
    small = np.flatnonzero(deg <= fanout)
    rows_all, slots_all = _adjacency_slots(graph, nodes[small])
    rows_all = small[rows_all]
    big = np.flatnonzero(deg > fanout)
    chosen = np.empty((big.size, fanout), np.int64)
    if big.size:
        top = deg[big] - fanout  # round t draws from slots [0, top + t]
        u = torch.rand((fanout, big.size), generator=generator, dtype=torch.float64).numpy()
        for t in range(fanout):
            j = top + t
            r = np.minimum((u[t] * (j + 1)).astype(np.int64), j)
            seen = (chosen[:, :t] == r[:, None]).any(axis=1)
            chosen[:, t] = np.where(seen, j, r)
    rows = np.concatenate([rows_all, np.repeat(big, fanout)])
    slots = np.concatenate([slots_all, (graph.indptr[nodes[big]][:, None] + chosen).ravel()])
    return rows, graph.indices[slots].astype(np.int64)


def neighbor_subgraph(graph: Graph, seeds: np.ndarray, fanouts: list[int],
                      generator: torch.Generator) -> tuple[Graph, dict[str, list[np.ndarray]]]:
    """The computation graph of ``seeds: (S,)`` (distinct node indices) for a ``len(fanouts)``-layer
    encoder, GraphSAGE / PyG NeighborLoader style: hop ``h`` samples ``fanouts[h]`` neighbours of each node
    first reached at hop ``h`` (the seeds at hop 0). Returns the undirected graph of the sampled edges on
    the reached nodes, relabelled with the seeds first, in order (``node_ids`` holds the original
    indices), and the sampled edges per hop as ``{"targets": [...], "neighbors": [...]}`` (original
    indices), for inspection. Every edge of the result is an edge of ``graph``.
    """
    seeds = np.asarray(seeds, np.int64)
    local = np.full(graph.num_nodes, -1, np.int64)
    local[seeds] = np.arange(seeds.size)
    order, frontier = [seeds], seeds
    hops: dict[str, list[np.ndarray]] = {"targets": [], "neighbors": []}
    for fanout in fanouts:
        rows, cols = sample_neighbors(graph, frontier, fanout, generator)
        hops["targets"].append(frontier[rows])
        hops["neighbors"].append(cols)
        fresh = np.zeros(graph.num_nodes, bool)  # a mask, not np.unique: O(N) beats hashing millions of ids
        fresh[cols[local[cols] < 0]] = True
        new = np.flatnonzero(fresh)
        local[new] = sum(o.size for o in order) + np.arange(new.size)
        order.append(new)
        frontier = new
    nodes = np.concatenate(order)
    u = local[np.concatenate(hops["targets"])] if fanouts else np.zeros(0, np.int64)
    v = local[np.concatenate(hops["neighbors"])] if fanouts else np.zeros(0, np.int64)
    # The symmetric CSR straight from sorted keys: both directions, repeats (u-v and v-u) dropped.
    nc = np.int64(nodes.size)
    keys = sorted_unique(np.concatenate([u * nc + v, v * nc + u]))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(keys // nc, minlength=nodes.size))]).astype(np.int64)
    indices = (keys % nc).astype(np.int32 if nodes.size < 2**31 else np.int64)
    # a weighted graph's sampled edges keep their weights (looked up by binary search in its CSR)
    data = None if graph.data is None else graph.weights_of(nodes[keys // nc], nodes[keys % nc])
    return Graph(indptr, indices, int(nodes.size), None, nodes, data), hops
