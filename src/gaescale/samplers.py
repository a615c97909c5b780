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

from typing import Iterator

import numpy as np
import torch

from .errors import ParameterError
from .graph import Graph


def induced_subgraph(graph: Graph, nodes: np.ndarray) -> Graph:
    """The subgraph of ``graph`` induced by ``nodes: (n,)`` (distinct node indices), relabelled ``0..n-1`` in
    the given order; ``node_ids`` keeps the original indices. O(sum of the nodes' degrees), vectorised."""
    nodes = np.asarray(nodes, np.int64)
    local = np.full(graph.num_nodes, -1, np.int64)
    local[nodes] = np.arange(nodes.size)
    counts = graph.degree[nodes]
    rows = np.repeat(np.arange(nodes.size), counts)
    starts = np.repeat(graph.indptr[nodes], counts)
    cols = local[graph.indices[starts + np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)]]
    keep = (cols >= 0) & (rows < cols)
    return Graph.from_edge_index(np.stack([rows[keep], cols[keep]]), nodes.size, canonical=True, node_ids=nodes)


def metis_parts(graph: Graph, num_parts: int, *, seed: int = 0) -> np.ndarray:
    """``(N,)`` int64 part of each node, from METIS (``pymetis``) with ``num_parts`` parts."""
    if not isinstance(num_parts, int) or num_parts < 1:
        raise ParameterError("num_parts", "metis_parts", "an int >= 1", num_parts)
    if num_parts == 1:
        return np.zeros(graph.num_nodes, np.int64)
    import pymetis
    adjacency = pymetis.CSRAdjacency(graph.indptr, graph.indices)
    _, parts = pymetis.part_graph(num_parts, adjacency, options=pymetis.Options(seed=seed))
    return np.asarray(parts, np.int64)


def cluster_batches(parts: np.ndarray, clusters_per_batch: int, generator: torch.Generator) -> Iterator[np.ndarray]:
    """One epoch of Cluster-GCN batches: the parts in a random order, ``clusters_per_batch`` at a time;
    yields the sorted node indices ``(n,)`` of each batch. Every node lands in exactly one batch."""
    num_parts = int(parts.max()) + 1 if parts.size else 0
    order = np.argsort(parts, kind="stable")
    bounds = np.searchsorted(parts[order], np.arange(num_parts + 1))
    perm = torch.randperm(num_parts, generator=generator).numpy()
    for s in range(0, num_parts, clusters_per_batch):
        chosen = perm[s:s + clusters_per_batch]
        nodes = np.concatenate([order[bounds[p]:bounds[p + 1]] for p in chosen])
        if nodes.size:
            yield np.sort(nodes)


def degree_sampled_nodes(degree: np.ndarray, size: int, alpha: float, generator: torch.Generator) -> np.ndarray:
    """FastGAE's node sampling: ``size`` distinct nodes, drawn with probability proportional to
    ``degree^alpha`` (``alpha = 0``: uniform), sorted. Isolated nodes are drawn only when ``alpha = 0``."""
    w = torch.from_numpy(np.asarray(degree, np.float64)) ** float(alpha)
    size = min(int(size), int((w > 0).sum()))
    return np.sort(torch.multinomial(w, size, replacement=False, generator=generator).numpy())
