"""What one epoch of training computes: the whole graph at once, Cluster-GCN batches, or FastGAE.

A strategy's :meth:`steps` yields one loss per optimizer step; the trainer backpropagates and steps
after each. All randomness comes from the trainer's ``generator`` (saved in checkpoints).
"""
from __future__ import annotations

from typing import Iterator

import numpy as np
import torch

from .errors import GraphError
from .graph import Graph
from .samplers import cluster_batches, degree_sampled_nodes, induced_subgraph
from .sparse import PairIndex


class FullBatch:
    """The encoder on the whole training graph and the loss on all training edges: one step per epoch."""

    name = "full"

    def steps(self, model, x, graph: Graph, pairs: PairIndex, generator, loss_kwargs: dict) -> Iterator[torch.Tensor]:
        yield model.loss(model(x, graph), pairs, generator=generator, **loss_kwargs)


def _sub_pairs(sub: Graph, self_loops: bool) -> PairIndex | None:
    """The training pairs of a subgraph (its edges, plus ``(i, i)`` for the A + I target); None if it has none."""
    edges = sub.edge_index()
    if self_loops:
        loops = np.arange(sub.num_nodes, dtype=np.int64)
        edges = np.concatenate([edges, np.stack([loops, loops])], axis=1)
    if edges.shape[1] == 0:
        return None
    return PairIndex.from_pairs(torch.from_numpy(edges), sub.num_nodes)


class ClusterGCN:
    """Cluster-GCN: ``parts: (N,)`` (METIS), ``clusters_per_batch`` parts per step; the encoder and the loss
    see only the subgraph induced by a batch (see :mod:`gaescale.samplers`). Batches without an edge are
    skipped."""

    name = "cluster"

    def __init__(self, parts: np.ndarray, clusters_per_batch: int, *, self_loops: bool = False):
        self.parts, self.clusters_per_batch, self.self_loops = parts, clusters_per_batch, self_loops

    def steps(self, model, x, graph: Graph, pairs: PairIndex, generator, loss_kwargs: dict) -> Iterator[torch.Tensor]:
        for nodes in cluster_batches(self.parts, self.clusters_per_batch, generator):
            sub = induced_subgraph(graph, nodes)
            sub_pairs = _sub_pairs(sub, self.self_loops)
            if sub_pairs is None:
                continue
            z = model(None if x is None else x[torch.from_numpy(nodes)], sub)
            yield model.loss(z, sub_pairs, generator=generator, **loss_kwargs)


class FastGAE:
    """FastGAE: the encoder on the whole graph, the loss on the subgraph induced by ``size`` nodes drawn
    with probability proportional to ``degree^alpha``, its weights computed for that subgraph."""

    name = "fastgae"

    def __init__(self, size: int, alpha: float, *, self_loops: bool = False):
        self.size, self.alpha, self.self_loops = size, alpha, self_loops

    def steps(self, model, x, graph: Graph, pairs: PairIndex, generator, loss_kwargs: dict) -> Iterator[torch.Tensor]:
        z = model(x, graph)
        for _ in range(8):  # a draw without an edge (a tiny subgraph of a sparse graph) is drawn again
            nodes = degree_sampled_nodes(graph.degree, self.size, self.alpha, generator)
            sub_pairs = _sub_pairs(induced_subgraph(graph, nodes), self.self_loops)
            if sub_pairs is not None:
                yield model.loss(z[torch.from_numpy(nodes)], sub_pairs, generator=generator, **loss_kwargs)
                return
        raise GraphError(f"FastGAE drew 8 subsets of {self.size} nodes without an edge between them; "
                         "raise --fastgae-nodes.")
