"""What one epoch of training computes: the whole graph at once, Cluster-GCN batches, FastGAE, or
neighbour-sampled link batches.

A strategy's :meth:`steps` yields one loss per optimizer step; the trainer backpropagates and steps
after each. All randomness comes from the trainer's ``generator`` (saved in checkpoints).

Data parallel (``rank`` of ``world_size`` processes, :mod:`gaescale.distributed`): the mini-batch
strategies draw their own batches on each rank, from the rank's own generator
(:func:`gaescale.distributed.rank_seed`), and every rank takes the same number of steps per epoch, as
DDP needs: Cluster-GCN trains each rank on its own share of the METIS parts (its partition: the
subgraph those parts induce, the only part of the graph it reads), neighbour sampling and FastGAE draw
independent batches, an epoch of neighbour sampling being ``1 / world_size`` as many steps (its
``graph`` and ``x`` may be sharded over the ranks, :mod:`gaescale.shards`: it reads them alike). A step's
gradient is the mean of the ranks' batch gradients (DDP's average): a ``world_size`` times larger batch.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import torch

from ..devices import index_on
from ..errors import GraphError, ParameterError
from ..graph import Graph, with_self_loops
from ..losses import default_num_samples, dense_term, full_precision, minibatch_loss, pair_weights, resolve_kind
from ..shifts import PermutedPairs, ShiftedPairs
from ..sparse import PairIndex
from ..structure import sampled_two_hop
from .samplers import cluster_batches, degree_sampled_nodes, induced_subgraph, neighbor_subgraph, sample_edges


class FullBatch:
    """The encoder on the whole training graph and the loss on all training edges: one step per epoch. The sampled
    all-pairs term draws its pairs as shifts of a random node order, into the same arrays every epoch
    (:class:`gaescale.shifts.ShiftedPairs`): an epoch is done with its draw before the next one draws. The training
    edges are the same every epoch, so their transpose is kept for their gradient's column products
    (:meth:`gaescale.sparse.PairIndex.keep_transpose`)."""

    name = "full"

    def __init__(self):
        self.uniform = ShiftedPairs()

    def steps(self, model, x, graph: Graph, pairs: PairIndex, generator, loss_kwargs: dict) -> Iterator[torch.Tensor]:
        yield model.loss(model(x, graph), pairs.keep_transpose(), generator=generator, uniform=self.uniform,
                         **loss_kwargs)


def _sub_pairs(sub: Graph, self_loops: bool) -> PairIndex | None:
    """The training pairs of a subgraph (its edges, plus ``(i, i)`` for the A + I target), with their weights
    when it is weighted (:func:`weighted_pairs`); None if it has none."""
    if sub.num_edges == 0 and not (self_loops and sub.num_nodes):
        return None
    return weighted_pairs(sub, self_loops)


def weighted_pairs(graph: Graph, self_loops: bool, edges: np.ndarray | None = None,
                   weights: np.ndarray | None = None) -> PairIndex:
    """The training pairs of ``graph``: ``edges: (2, E)`` (default its own, each once) plus ``(i, i)`` for every
    node with ``self_loops``, with their weights (``weights: (E,)``, default the graph's; a self loop weighs 1)
    when the graph is weighted."""
    if edges is None:
        edges, weights = graph.edge_index(), graph.edge_weight()
    pairs = torch.from_numpy(with_self_loops(edges, graph.num_nodes, self_loops))
    if weights is None:
        return PairIndex.from_pairs(pairs, graph.num_nodes)
    w = np.concatenate([weights, np.ones(pairs.shape[1] - weights.size, np.float32)])
    return PairIndex.from_pairs(pairs, graph.num_nodes, torch.from_numpy(w))


def _kl_nodes(model, graph: Graph) -> dict:
    """A VGAE's loss on a subgraph weighs its KL per node of the whole ``graph`` (``kl / N``), as full batch and
    neighbour sampling do, not per node of the subgraph (``N / n_S`` times more)."""
    return {"kl_nodes": graph.num_nodes} if hasattr(model, "kl") else {}


class ClusterGCN:
    """Cluster-GCN: ``parts: (N,)`` (METIS; ``num_parts`` parts, by default up to the largest in ``parts``),
    ``clusters_per_batch`` parts per step; the encoder and the loss
    see only the subgraph induced by a batch (see :mod:`gaescale.samplers`). Batches without an edge are
    skipped (on several ranks they take a step with a zero loss, so that every rank steps alike).

    ``rank`` of ``world_size``: this rank trains on parts ``p`` with ``p * world_size // num_parts == rank``
    (the number of parts must be a multiple of ``world_size``, so every rank has as many batches); it reads
    only the CSR rows of its own nodes, once, to build its partition. ``train_edges(u, v) -> (k,) bool``:
    the graph it is given is the whole graph, whose training edges are those this accepts (a rank that did
    not split a prepared graph: :func:`gaescale.split.hashed_is_train`)."""

    name = "cluster"

    def __init__(self, parts: np.ndarray, clusters_per_batch: int, *, self_loops: bool = False, rank: int = 0,
                 world_size: int = 1, num_parts: int | None = None, train_edges=None):
        num_parts = (int(parts.max()) + 1 if parts.size else 0) if num_parts is None else num_parts
        if num_parts % world_size:
            raise ParameterError("parts", "ClusterGCN", f"a multiple of world_size={world_size} parts", num_parts)
        self.parts, self.clusters_per_batch, self.self_loops = parts, clusters_per_batch, self_loops
        self.rank, self.world_size, self.num_parts = rank, world_size, num_parts
        self.train_edges = train_edges
        if train_edges is not None and world_size == 1:
            raise ParameterError("train_edges", "ClusterGCN", "None with world_size=1 (the graph given is then the "
                                 "training graph)", train_edges)
        self._partition = None  # (the graph it was cut from, the partition, its nodes' local parts)

    def partition(self, graph: Graph) -> tuple[Graph, np.ndarray]:
        """This rank's subgraph (``node_ids``: indices in ``graph``) and the local part of each of its nodes."""
        if self.world_size == 1:
            return graph, self.parts
        if self._partition is None or self._partition[0] is not graph:
            share = self.num_parts // self.world_size
            own = np.flatnonzero(self.parts * self.world_size // self.num_parts == self.rank)
            self._partition = (graph, induced_subgraph(graph, own, edges=self.train_edges),
                               self.parts[own] - self.rank * share)
        return self._partition[1], self._partition[2]

    def steps(self, model, x, graph: Graph, pairs: PairIndex, generator, loss_kwargs: dict) -> Iterator[torch.Tensor]:
        part, parts = self.partition(graph)
        for local in cluster_batches(parts, self.clusters_per_batch, generator, self.num_parts // self.world_size):
            sub = induced_subgraph(part, local)
            if part is not graph:  # the partition's own indices -> the graph's
                sub = dataclasses.replace(sub, node_ids=part.node_ids[local])
            nodes = sub.node_ids
            sub_pairs = _sub_pairs(sub, self.self_loops)
            if sub_pairs is None and self.world_size == 1:
                continue
            z = model(None if x is None else x[index_on(nodes, x)], sub)
            yield z.sum() * 0.0 if sub_pairs is None else model.loss(z, sub_pairs, generator=generator, **loss_kwargs,
                                                                     **_kl_nodes(model, graph))


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
                yield model.loss(z[index_on(nodes, z)], sub_pairs, generator=generator, **loss_kwargs,
                                 **_kl_nodes(model, graph))
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
    On ``world_size`` ranks each draws its own batches, and an epoch is ``1 / world_size`` as many steps.
    """

    name = "neighbor"

    def __init__(self, fanouts: list[int], batch_size: int, *, self_loops: bool = False, world_size: int = 1):
        self.fanouts, self.batch_size, self.self_loops = list(fanouts), int(batch_size), self_loops
        self.world_size = world_size

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
        two_hop = sampled_two_hop(model, loss_kwargs)  # the structural part's draws, or None
        for _ in range(-(-items // (self.batch_size * self.world_size))):
            pos, loops = sample_edges(graph, self.batch_size, generator, self_loops=self.self_loops)
            b = pos.shape[1]
            neg = torch.randint(0, n, (2, max(1, round(neg_ratio * b))), generator=generator)
            wedges = two_hop.draw(b, generator) if two_hop is not None else None
            ends = torch.cat([torch.from_numpy(pos), neg] + ([] if wedges is None else [torch.from_numpy(wedges[0])]),
                             dim=1)
            seeds, where = torch.unique(ends, return_inverse=True)
            sub, _ = neighbor_subgraph(graph, seeds.numpy(), self.fanouts, generator)
            z = full_precision(model(None if x is None else x[index_on(sub.node_ids, x)], sub))
            where = where.to(z.device)
            s = model.logits(z, where)
            s_pos, s_neg, offset = s[:b], s[b:b + neg.shape[1]], None
            if wedges is not None:  # the whole logits: the edges' with w . phi, the two-hop pairs' correction
                s_pos = s_pos + model.structure(two_hop.phi(pos).to(z.device))
                offset = (s[b + neg.shape[1]:], model.structure(wedges[1].to(z.device)), wedges[2].to(z.device))
            loss = minibatch_loss(s_pos, s_neg, edge_fraction=b / items, pos_loops=torch.from_numpy(loops).to(z.device),
                                  pos_weight=_pos_weights(graph, pos, loops, z.device), dense_offset=offset, **weights)
            if hasattr(model, "kl"):
                loss = loss + model.kl() / n
            yield loss


def _pos_weights(graph: Graph, pos: np.ndarray, loops: np.ndarray, device) -> torch.Tensor | None:
    """``(B,)`` the weights of a weighted graph's drawn training edges ``pos: (2, B)`` (a self loop of the
    ``A + I`` target, ``loops``, weighs 1); None for an unweighted graph."""
    if graph.data is None:
        return None
    w = graph.weights_of(pos[0], pos[1])
    w[loops] = 1.0
    return torch.from_numpy(w).to(device)


class ShardedFullBatch:
    """Full batch over the ``W`` ranks of a ``runtime`` with the graph replicated (see
    :mod:`gaescale.parallel.runtime`): one step per epoch; the loss of rank ``r`` covers its shard of the training
    pairs and of the dense term: of the sampled pairs (``m`` rounded up to a multiple of ``W``), of the exact term's
    tiles (row blocks ``r, r + W, ...``: each rank forms about ``1/W`` of the ``N^2 / 2`` pair evaluations), or
    ``1/W`` of the closed form."""

    name = "full"
    shared_draws = True  # every rank draws the same pairs and keeps its share

    def __init__(self, runtime):
        self.runtime = runtime
        # every rank draws the pairs one process draws (FullBatch) and scores a contiguous share of them, a view of
        # the draw: no transpose is written, and the share's rows stay in the draw's sequential order
        self.uniform = ShiftedPairs(transpose=False)
        self._shard = None  # (the pairs it was cut from, this rank's PairIndex, their count, self loops)

    def steps(self, model, x, graph: Graph, pairs, generator, loss_kwargs: dict) -> Iterator[torch.Tensor]:
        w, r, n = self.runtime.world_size, self.runtime.rank, graph.num_nodes
        if self._shard is None or self._shard[0] is not pairs:  # cut once, reused every epoch
            every = pairs.pairs() if isinstance(pairs, PairIndex) else torch.as_tensor(pairs)
            weights = pairs.weights if isinstance(pairs, PairIndex) else None  # a weighted graph's, in that order
            self._shard = (pairs, PairIndex.from_pairs(every[:, r::w], n, None if weights is None else weights[r::w]),
                           every.shape[1], int((every[0] == every[1]).sum()))
        z = full_precision(model(x, graph))  # the loss in float32 under mixed precision, as one process's
        with torch.autocast(z.device.type, enabled=False):
            loss = self._loss(z, generator, loss_kwargs, model)
        if hasattr(model, "kl"):
            loss = loss + model.kl() / n
        yield loss

    def _loss(self, z: torch.Tensor, generator, loss_kwargs: dict, model) -> torch.Tensor:
        """``W`` times this rank's additive share of the reconstruction loss of ``z: (N, d)`` under ``model``'s
        decoder."""
        metric = model.metric(z)

        def logits(pidx: PairIndex | PermutedPairs) -> torch.Tensor:
            return pidx.logits(z, metric) if model.pair_decoder is None else model.logits(z, pidx.pairs())
        w, r, n = self.runtime.world_size, self.runtime.rank, z.shape[0]
        _, mine, count, loops = self._shard
        dense, kind, weighting = (loss_kwargs.get("dense", "sampled"), loss_kwargs.get("kind", "bce"),
                                  loss_kwargs.get("weighting"))
        num_edge_pairs = 2 * count - loops
        if dense == "sampled":
            m = default_num_samples(num_edge_pairs, float(loss_kwargs.get("neg_ratio", 1.0)))  # as one process draws
            m = -(-m // w) * w
            share = m // w  # every rank draws the same m pairs and scores pairs [r m / W, (r + 1) m / W) of them
            s_neg = logits(self.uniform.draw(n, m, generator).share(r * share, (r + 1) * share).to(z.device))
        else:
            s_neg = z.new_zeros(0)  # no sampled pairs: the dense term's share is added below
        loss = minibatch_loss(logits(mine), s_neg, num_nodes=n, num_edge_pairs=num_edge_pairs, edge_fraction=1.0 / w,
                              pos_loops=mine.self_pair_mask(), kind=kind, weighting=weighting, pos_weight=mine.weights)
        if dense == "sampled":
            return loss
        # exact: this rank's tiles; closed (O(N d^2)): the whole term, of which a 1/W share
        pair_loss, weighting = resolve_kind(kind, weighting)
        w0, _ = pair_weights(weighting, n, num_edge_pairs)
        share = (dense_term(z, pair_loss, dense, shard=(r, w), metric=metric) if dense == "exact"
                 else dense_term(z, pair_loss, dense, metric=metric) / w)
        return loss + w * w0 * share  # W times this rank's share, as the edge term above
