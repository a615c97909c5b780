"""A featureless graph's learnt input table kept on disk and trained in partitions, PyTorch-BigGraph's way.

The table ``T: (N, h1)`` of a featureless GCN's first layer (:class:`gaescale.encoders.GCN` with ``table='input'``:
the same model as with the table in memory, ``A_hat T`` first) lives in a memory-mapped ``.npy`` file, and beside it
PyTorch-BigGraph's row-wise Adagrad state, one float per row (4 bytes per node, where Adam holds 8 per entry). The
nodes are cut into ``P`` contiguous partitions (a prepared graph's node order keeps communities together; the
planner takes the fewest whose step fits the memory budget, :class:`EdgeSample` estimating its edges). An epoch
visits every bucket ``(i, j)``, ``i <= j``, once (:func:`bucket_order`), so that at most two partitions' rows are in
memory. A bucket's step runs the encoder on the subgraph its partitions induce (Cluster-GCN's approximation: messages
from other partitions are dropped; its edges read from the epoch's edge buckets on disk, :class:`BucketEdges`),
scores the training edges between ``i`` and ``j`` (within ``i`` when ``i == j``) and ``neg_ratio`` times as many
ordered pairs drawn uniformly from the block ``i x j``, and its loss is the block's share of the full loss
(:func:`gaescale.losses.minibatch_loss` with ``num_pairs``): over an epoch the shares add up to an unbiased estimate
of the full loss, every training edge scored once. The other parameters (the later layers,
the per-node biases) train with the trainer's Adam; the table's rows with row-wise Adagrad, applied once the step's
backward is done.
"""
from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from ..errors import ParameterError
from ..graph import Graph, row_ranges, with_self_loops
from ..losses import full_precision, minibatch_loss
from ..sparse import ordered_pair_logits
from ..structure import MEMO_BYTES, sampled_two_hop

ADAGRAD_EPS = 1e-10
PREFIX = ".table-buckets-"  # BucketEdges' directories beside the table


def part_bounds(num_nodes: int, num_parts: int) -> np.ndarray:
    """``(P + 1,)`` int64: partition ``p`` holds the nodes ``bounds[p]:bounds[p + 1]``, as equal as integers allow."""
    return np.arange(num_parts + 1, dtype=np.int64) * num_nodes // num_parts


def bucket_order(num_parts: int) -> list[tuple[int, int]]:
    """Every bucket ``(i, j)``, ``0 <= i <= j < P``, once: the diagonal first (in a locality order most edges lie
    within partitions, so every node's row is trained early in an epoch, one partition in memory), then row ``i``
    of the rest with ``j`` ascending for even ``i`` and descending for odd, so that most consecutive buckets share
    a partition (one swap per step)."""
    order = [(i, i) for i in range(num_parts)]
    for i in range(num_parts):
        js = range(i + 1, num_parts) if i % 2 == 0 else range(num_parts - 1, i, -1)
        order += [(i, j) for j in js]
    return order


def row_adagrad_(rows: torch.Tensor, state: torch.Tensor, grad: torch.Tensor, lr: float,
                 eps: float = ADAGRAD_EPS) -> None:
    """PyTorch-BigGraph's row-wise Adagrad, in place: ``state: (n,) += mean over each row of grad^2``, then
    ``rows: (n, w) -= lr * grad / (sqrt(state) + eps)`` (``grad: (n, w)``)."""
    state.add_(grad.square().mean(1))
    rows.addcdiv_(grad, state.sqrt().add_(eps).unsqueeze(1), value=-lr)


class EdgeSample:
    """``size`` slots of a CSR ``(indptr, indices)`` drawn uniformly with their rows (each undirected edge is two
    slots), from which :meth:`largest_share` estimates how many edges the largest bucket's subgraph holds for any
    number of partitions without a pass over the graph: a graph in a locality order keeps most edges within
    partitions, one in a random order spreads them evenly (``~4 / P^2`` of them a bucket). A memory-mapped CSR is read
    at the sampled slots only."""

    def __init__(self, indptr, indices, *, size: int = 200_000, seed: int = 0):
        slots = int(indptr[-1])
        self.num_nodes = len(indptr) - 1
        k = np.sort(np.random.default_rng(seed).integers(0, max(slots, 1), min(size, slots)))
        self.rows = np.searchsorted(indptr, k, side="right") - 1
        self.cols = np.asarray(indices[k], np.int64)

    @classmethod
    def of(cls, graph: Graph, **kwargs) -> EdgeSample:
        return cls(graph.indptr, graph.indices, **kwargs)

    def largest_share(self, num_parts: int) -> float:
        """The largest fraction of the edges that one bucket's subgraph holds (:meth:`BucketEdges.subgraph`: the
        edges within its partitions and between them) with ``num_parts`` partitions: the sample's, plus three
        standard errors and one slot, so that a sample's noise errs towards more memory."""
        size = self.rows.size
        if num_parts < 2 or size == 0:
            return 1.0
        bounds = part_bounds(self.num_nodes, num_parts)
        p = np.searchsorted(bounds, self.rows, side="right") - 1
        q = np.searchsorted(bounds, self.cols, side="right") - 1
        counts = np.bincount(p * num_parts + q, minlength=num_parts ** 2).reshape(num_parts, num_parts) / size
        within = np.diag(counts)
        shares = within[:, None] + within[None, :] + counts + counts.T  # bucket (i, j): within i, within j, between
        share = float(shares[np.triu_indices(num_parts, 1)].max())
        return min(1.0, share + 3 * math.sqrt(share * (1 - share) / size) + 1 / size)


class BucketEdges:
    """The edges of ``graph`` (each once, ``u < v``) grouped by bucket on disk, PyTorch-BigGraph's edge buckets: those
    from partition ``p`` to partition ``q >= p`` of ``bounds`` (:func:`part_bounds`) are ``edges[:, offsets[k]:
    offsets[k + 1]]``, ``k = p P + q``, in CSR order. A bucket's subgraph then reads its own edges, where cutting it
    from the CSR reads every edge of its two partitions' nodes: at 100M nodes in 48 partitions, each node's edges 48
    times an epoch. Built in two passes over the CSR (counts, then the edges), ``chunk`` CSR slots at a time; the
    arrays are ``.npy`` files in ``directory`` (``4 E`` bytes of 32-bit node indices each, ``8 E`` of 64-bit beyond
    2^31 nodes, and a weighted graph's weights), which :meth:`close` removes."""

    def __init__(self, graph: Graph, bounds: np.ndarray, directory: str | Path, *, chunk: int = 1 << 22):
        self.bounds, self.num_parts = np.asarray(bounds, np.int64), len(bounds) - 1
        self.directory = Path(tempfile.mkdtemp(prefix=PREFIX, dir=directory))
        try:
            self._build(graph, chunk)
        except BaseException:  # a full disk, an interrupt: no half-written buckets left behind
            self.close()
            raise

    def _build(self, graph: Graph, chunk: int) -> None:
        index = np.int32 if graph.num_nodes < 2**31 - 1 else np.int64
        counts = np.zeros(self.num_parts ** 2, np.int64)
        for _, _, key, _ in self._chunks(graph, chunk):
            counts += np.bincount(key, minlength=counts.size)
        self.offsets = np.concatenate([[0], np.cumsum(counts)])
        total = int(self.offsets[-1])
        self.edges = np.lib.format.open_memmap(self.directory / "edges.npy", "w+", index, (2, total))
        self.weights = None if graph.data is None else np.lib.format.open_memmap(
            self.directory / "weights.npy", "w+", np.float32, (total,))
        cursor = self.offsets[:-1].copy()
        for u, v, key, w in self._chunks(graph, chunk):
            # CSR order within each bucket; 16-bit keys where they fit, which numpy sorts by radix (6x faster)
            order = np.argsort(key.astype(np.int16) if key.size and self.num_parts ** 2 < 2**15 else key, kind="stable")
            u, v, key = u[order], v[order], key[order]
            w = None if w is None else w[order]
            starts = np.flatnonzero(np.diff(key, prepend=-1))
            for a, b in zip(starts, [*starts[1:], key.size]):
                k, at = key[a], cursor[key[a]]
                self.edges[0, at:at + b - a], self.edges[1, at:at + b - a] = u[a:b], v[a:b]
                if w is not None:
                    self.weights[at:at + b - a] = w[a:b]
                cursor[k] += b - a

    @staticmethod
    def nbytes(num_nodes: int, num_edges: int, weighted: bool = False) -> int:
        """Bytes of the files for ``num_edges`` undirected edges (their .npy headers aside)."""
        return num_edges * ((8 if num_nodes < 2**31 - 1 else 16) + (4 if weighted else 0))

    def _chunks(self, graph: Graph, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """``(u, v, bucket, weight)`` of the edges ``u < v`` of rows of ``graph`` holding about ``chunk`` CSR slots."""
        indptr = graph.indptr
        cuts = row_ranges(indptr, chunk)
        for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
            lo, hi = int(indptr[a]), int(indptr[b])
            v = np.asarray(graph.indices[lo:hi], np.int64)
            u = np.repeat(np.arange(a, b, dtype=np.int64), np.diff(np.asarray(indptr[a:b + 1])))
            keep = u < v
            u, v = u[keep], v[keep]
            pu = np.searchsorted(self.bounds, u, side="right") - 1
            pv = np.searchsorted(self.bounds, v, side="right") - 1
            yield u, v, pu * self.num_parts + pv, None if graph.data is None else np.asarray(graph.data[lo:hi])[keep]

    def bucket(self, p: int, q: int) -> tuple[np.ndarray, np.ndarray | None]:
        """``(edges: (2, E_pq) int64, weights: (E_pq,) or None)`` of the bucket ``p <= q``, global node indices."""
        k = p * self.num_parts + q
        a, b = int(self.offsets[k]), int(self.offsets[k + 1])
        return np.asarray(self.edges[:, a:b], np.int64), None if self.weights is None else np.array(self.weights[a:b])

    def subgraph(self, parts: list[int]) -> Graph:
        """The subgraph induced by the partitions ``parts`` (one, or two ascending), their nodes numbered in that
        order (what :func:`gaescale.training.samplers.induced_subgraph` cuts from the CSR), from the buckets ``(p, q)``,
        ``p <= q`` in ``parts``."""
        starts = [int(self.bounds[p]) for p in parts]
        offsets = np.cumsum([0] + [int(self.bounds[p + 1]) - a for p, a in zip(parts, starts)])
        local = dict(zip(parts, zip(starts, offsets)))
        edges, weights = [], []
        for a, p in enumerate(parts):
            for q in parts[a:]:
                e, w = self.bucket(p, q)
                edges.append(np.stack([e[0] - local[p][0] + local[p][1], e[1] - local[q][0] + local[q][1]]))
                weights.append(w)
        node_ids = np.concatenate([np.arange(a, a + offsets[k + 1] - offsets[k]) for k, a in enumerate(starts)])
        return Graph.from_edge_index(np.concatenate(edges, 1), int(offsets[-1]), canonical=True, node_ids=node_ids,
                                     edge_weight=None if self.weights is None else np.concatenate(weights))

    def close(self) -> None:
        """Remove the files."""
        self.edges = self.weights = None
        shutil.rmtree(self.directory, ignore_errors=True)


class DiskTable:
    """A learnt ``(N, width)`` float32 table in the ``.npy`` file ``path`` (memory-mapped, never read whole), with
    its row-wise Adagrad state ``(N,)`` in ``<path stem>.adagrad.npy`` beside it. A new table is drawn as the
    in-memory one is (Glorot uniform over ``N + width``), ``chunk`` rows at a time from ``seed``."""

    def __init__(self, path: str | Path, num_nodes: int, width: int, *, seed: int = 0, chunk: int = 1 << 20):
        self.path = Path(path)
        self.state_path = self.path.with_name(self.path.stem + ".adagrad.npy")
        self.num_nodes, self.width = int(num_nodes), int(width)
        self.rows = np.lib.format.open_memmap(self.path, mode="w+", dtype=np.float32, shape=(num_nodes, width))
        self.state = np.lib.format.open_memmap(self.state_path, mode="w+", dtype=np.float32, shape=(num_nodes,))
        bound = math.sqrt(6.0 / (num_nodes + width))
        gen = torch.Generator().manual_seed(seed)
        for a in range(0, num_nodes, chunk):
            b = min(num_nodes, a + chunk)
            self.rows[a:b] = ((torch.rand((b - a, width), generator=gen) * 2 - 1) * bound).numpy()
        self.flush()  # the state starts at 0: a new file's zeros

    @staticmethod
    def nbytes(num_nodes: int, width: int) -> int:
        """Bytes of the two files (their .npy headers aside)."""
        return 4 * num_nodes * (width + 1)

    @property
    def tensor(self) -> torch.Tensor:
        """The whole table ``(N, width)``, the file's pages (what layer-wise inference reads a block at a time)."""
        return torch.from_numpy(self.rows)

    def load(self, a: int, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Copies of rows ``a:b`` and their Adagrad state, in memory."""
        return torch.from_numpy(np.array(self.rows[a:b])), torch.from_numpy(np.array(self.state[a:b]))

    def store(self, a: int, b: int, rows: torch.Tensor, state: torch.Tensor) -> None:
        self.rows[a:b] = rows.detach().numpy()
        self.state[a:b] = state.numpy()

    def flush(self) -> None:
        self.rows.flush()
        self.state.flush()


class PartitionBuckets:
    """One epoch over the buckets of ``num_parts`` partitions of ``table`` (see the module's docstring), its rows
    updated with row-wise Adagrad at ``lr``. ``self_loops``: the ``A + I`` target's ``(i, i)`` pairs are scored in
    the diagonal buckets. The trainer's model must be a featureless GCN with ``table='input'``."""

    name = "partitioned"
    keeps_last = True  # the table trains in place: fit keeps the last weights, not a copy of a best epoch's

    def __init__(self, table: DiskTable, num_parts: int, *, lr: float, self_loops: bool = False):
        if not isinstance(num_parts, int) or not 1 <= num_parts <= table.num_nodes:
            raise ParameterError("num_parts", "PartitionBuckets", f"an int in [1, {table.num_nodes}]", num_parts)
        self.table, self.num_parts, self.lr, self.self_loops = table, num_parts, float(lr), self_loops
        self.bounds = part_bounds(table.num_nodes, num_parts)
        self._phi: tuple[object, dict] = (None, {})  # (the graph, each bucket's edges' pair features) across epochs

    @staticmethod
    def keeps_phi(num_nodes: int, slots: int) -> bool:
        """Whether the structural part's pair features of every bucket's edges are kept from the first epoch for the
        next (``slots``: the training graph's CSR slots, two an edge): 12 bytes an edge and a self pair, kept within
        :data:`gaescale.structure.MEMO_BYTES` (22M edges); a larger graph computes them again each epoch."""
        return 12 * (slots // 2 + num_nodes) <= MEMO_BYTES

    def steps(self, model, x, graph: Graph, pairs, generator, loss_kwargs: dict) -> Iterator[torch.Tensor]:
        """``x`` and ``pairs`` are not read: the rows come from the table, the pairs from ``graph``'s edges."""
        if loss_kwargs.get("dense", "sampled") != "sampled":
            raise ParameterError("dense", "PartitionBuckets", "'sampled' (a bucket sees only its partitions' rows)",
                                 loss_kwargs["dense"])
        sampled_two_hop(model, loss_kwargs)  # a structural part and its draws go together
        held: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        pending = None  # the step whose rows wait for their update: applied after the trainer's backward
        for stale in self.table.path.parent.glob(PREFIX + "*"):  # a killed process's epoch (one process a run)
            shutil.rmtree(stale, ignore_errors=True)
        buckets = BucketEdges(graph, self.bounds, self.table.path.parent)  # this epoch's, removed at its end
        try:
            for i, j in bucket_order(self.num_parts):
                self._hold(held, {i, j})
                parts = [i] if i == j else [i, j]
                rows = torch.cat([held[p][0] for p in parts]).requires_grad_()
                loss = self._bucket_loss(model, rows, graph, parts, buckets.subgraph(parts), generator, loss_kwargs)
                if loss is None:
                    continue
                pending = (rows, parts)
                yield loss
                self._update(held, *pending)
                pending = None
        finally:  # also when the trainer stops mid-epoch (its time limit) after the last step's backward
            if pending is not None and pending[0].grad is not None:
                self._update(held, *pending)
            self._hold(held, set())
            self.table.flush()
            buckets.close()

    def _bucket_loss(self, model, rows: torch.Tensor, graph: Graph, parts: list[int], sub: Graph, generator,
                     loss_kwargs: dict) -> torch.Tensor | None:
        """The loss of the block ``parts[0] x parts[-1]`` from the rows of its partitions ``rows: (n_b, h1)`` and the
        subgraph ``sub`` they induce in ``graph`` (:meth:`BucketEdges.subgraph`); None for a block without a training
        edge or self pair."""
        n = graph.num_nodes
        first = int(self.bounds[parts[0] + 1] - self.bounds[parts[0]])
        edges, weight = sub.edge_index(), sub.edge_weight()
        if len(parts) == 2:  # the edges between the two partitions only: those within are the diagonal buckets'
            between = (edges[0] < first) & (edges[1] >= first)
            edges, weight = edges[:, between], None if weight is None else weight[between]
        diagonal_loops = self.self_loops and len(parts) == 1  # the A + I target's (i, i), in the diagonal buckets
        pos = torch.from_numpy(with_self_loops(edges, first, diagonal_loops))
        loops = torch.arange(pos.shape[1]) >= edges.shape[1]
        if weight is not None:
            weight = torch.from_numpy(np.concatenate([weight, np.ones(pos.shape[1] - weight.size, np.float32)]))
        b = pos.shape[1]
        if b == 0:
            return None
        second = (first, sub.num_nodes) if len(parts) == 2 else (0, first)  # the block's second partition
        neg = self.negatives(first, second, max(1, round(float(loss_kwargs.get("neg_ratio", 1.0)) * b)), generator)
        two_hop, m = loss_kwargs.get("two_hop"), neg.shape[1]  # checked by steps; m uniform pairs
        if two_hop is not None:  # the pair features of the block's edges, and two-hop pairs drawn in the block
            ranges = [(int(self.bounds[p]), int(self.bounds[p + 1])) for p in parts]
            pos_phi = self._edge_phi(two_hop, graph, tuple(parts), sub.node_ids[pos.numpy()])
            wedges = two_hop.draw(b, generator, ranges=ranges)
            local = wedges[0] - np.where(wedges[0] < ranges[0][1], ranges[0][0], ranges[-1][0] - first)
            neg = torch.cat([neg, torch.from_numpy(local)], 1)
        z = full_precision(model(rows.to(next(model.parameters()).device), sub))
        pairs = torch.cat([pos, neg], 1).to(z.device)
        # a bilinear decoder's logits through the pairs' CSR (the gathers of model.logits were most of a bucket's time)
        s = model.logits(z, pairs) if model.pair_decoder is not None else ordered_pair_logits(z, pairs, model.metric(z))
        s_pos, s_neg, offset = s[:b], s[b:], None
        if two_hop is not None:  # the whole logits: the edges' with w . phi, the two-hop pairs' correction
            s_pos, s_neg = s_pos + model.structure(pos_phi.to(z.device)), s[b:b + m]
            offset = (s[b + m:], model.structure(wedges[1].to(z.device)), wedges[2].to(z.device))
        block = first * (sub.num_nodes - first) * 2 if len(parts) == 2 else first * first
        slots = int(graph.indices.size)
        loss = minibatch_loss(s_pos, s_neg, num_nodes=n, num_edge_pairs=slots + (n if self.self_loops else 0),
                              edge_fraction=1.0, kind=loss_kwargs.get("kind", "bce"),
                              weighting=loss_kwargs.get("weighting"), pos_loops=loops.to(z.device),
                              pos_weight=None if weight is None else weight.to(z.device), num_pairs=block,
                              dense_offset=offset)
        return loss + model.kl() / n if hasattr(model, "kl") else loss

    def _edge_phi(self, two_hop, graph: Graph, key: tuple, pairs: np.ndarray) -> torch.Tensor:
        """``phi: (b, 3)`` of a bucket's scored pairs ``pairs: (2, b)`` (global), the first epoch's where
        :meth:`keeps_phi` (a bucket's edges are the same, in the same order, every epoch)."""
        if self._phi[0] is not graph:
            self._phi = (graph, {})
        kept = self._phi[1].get(key)
        if kept is not None and kept.shape[0] == pairs.shape[1]:
            return kept
        phi = two_hop.phi(pairs)
        if self.keeps_phi(graph.num_nodes, int(graph.indices.size)):
            self._phi[1][key] = phi
        return phi

    @staticmethod
    def negatives(first: int, second: tuple[int, int], m: int, generator) -> torch.Tensor:
        """``(2, m)`` pairs ``(u, v)`` drawn uniformly from a bucket's block: ``u`` among the subgraph's first ``first``
        nodes (its first partition), ``v`` in ``range(*second)`` (its second; the first again on the diagonal). The
        dense term scales their sum to the whole block, so any set of pairs covering it uniformly will do."""
        return torch.stack([torch.randint(0, first, (m,), generator=generator),
                            torch.randint(*second, (m,), generator=generator)])

    def _hold(self, held: dict, parts: set[int]) -> None:
        """Keep exactly the partitions ``parts`` in memory: the others written back to the table, the missing read."""
        for p in [p for p in held if p not in parts]:
            self.table.store(int(self.bounds[p]), int(self.bounds[p + 1]), *held.pop(p))
        for p in sorted(parts - held.keys()):
            held[p] = self.table.load(int(self.bounds[p]), int(self.bounds[p + 1]))

    def _update(self, held: dict, rows: torch.Tensor, parts: list[int]) -> None:
        """Row-wise Adagrad on the held partitions ``parts`` from the gradient of their rows ``rows``."""
        if rows.grad is None:
            return
        start = 0
        for p in parts:
            table_rows, state = held[p]
            stop = start + table_rows.shape[0]
            row_adagrad_(table_rows, state, rows.grad[start:stop].to(table_rows.device), self.lr)
            start = stop
