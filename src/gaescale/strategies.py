"""What one epoch of training computes: the whole graph at once, Cluster-GCN batches, FastGAE, or
neighbour-sampled link batches.

A strategy's :meth:`steps` yields one loss per optimizer step; the trainer backpropagates and steps
after each. All randomness comes from the trainer's ``generator`` (saved in checkpoints).
"""
from __future__ import annotations

from typing import Iterator

import numpy as np
import torch

from .errors import GraphError, ParameterError
from .graph import Graph
from .losses import full_precision, minibatch_loss
from .samplers import cluster_batches, degree_sampled_nodes, induced_subgraph, neighbor_subgraph, sample_edges
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


class NeighborLinks:
    """Link mini-batches with neighbour sampling (GraphSAGE; PyG's LinkNeighborLoader): each step takes
    ``batch_size`` training edges drawn uniformly (a random slot of the training graph's CSR picks an
    edge, so a memory-mapped graph is never read whole; ``self_loops`` adds every ``(i, i)`` to the items
    drawn) and ``neg_ratio`` times as many ordered pairs drawn uniformly from all ``N^2``; an epoch is as
    many steps as cover the training edges once in expectation. The encoder runs on the sampled
    computation graph of the pairs' endpoints only (``fanouts[h]`` neighbours per node at hop ``h``, see
    :func:`gaescale.samplers.neighbor_subgraph`), and the step's loss is the unbiased estimate of the
    full-graph loss from these pairs (:func:`gaescale.losses.minibatch_loss`; the dense term must be
    ``sampled``). A VGAE adds its KL term over the computation graph's nodes, divided by ``N``.
    """

    name = "neighbor"

    def __init__(self, fanouts: list[int], batch_size: int, *, self_loops: bool = False):
        self.fanouts, self.batch_size, self.self_loops = list(fanouts), int(batch_size), self_loops

    def steps(self, model, x, graph: Graph, pairs, generator, loss_kwargs: dict) -> Iterator[torch.Tensor]:
        """``pairs`` is not read: the training edges are the edges of ``graph``."""
        if loss_kwargs.get("dense", "sampled") != "sampled":
            raise ParameterError("dense", "NeighborLinks", "'sampled' (a link mini-batch sees only its own nodes' "
                                                           "embeddings)", loss_kwargs["dense"])
        n, slots = graph.num_nodes, int(graph.indices.size)
        items = slots // 2 + (n if self.self_loops else 0)
        weights = dict(kind=loss_kwargs.get("kind", "bce"), weighting=loss_kwargs.get("weighting"),
                       num_nodes=n, num_edge_pairs=slots + (n if self.self_loops else 0))
        neg_ratio = float(loss_kwargs.get("neg_ratio", 1.0))
        for _ in range(-(-items // self.batch_size)):
            pos, loops = sample_edges(graph, self.batch_size, generator, self_loops=self.self_loops)
            b = pos.shape[1]
            neg = torch.randint(0, n, (2, max(1, round(neg_ratio * b))), generator=generator)
            ends = torch.cat([torch.from_numpy(pos), neg], dim=1)
            seeds, where = torch.unique(ends, return_inverse=True)
            sub, _ = neighbor_subgraph(graph, seeds.numpy(), self.fanouts, generator)
            z = full_precision(model(None if x is None else x[torch.from_numpy(sub.node_ids)], sub))
            s = (z[where[0]] * z[where[1]]).sum(-1)
            loss = minibatch_loss(s[:b], s[b:], edge_fraction=b / items, pos_loops=torch.from_numpy(loops), **weights)
            if hasattr(model, "kl"):
                loss = loss + model.kl() / n
            yield loss
