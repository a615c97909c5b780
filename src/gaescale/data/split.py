"""Train/validation/test split of undirected edges for link prediction.

Held-out edges are removed from the graph the encoder sees. Validation and test non-edges are
sampled uniformly among node pairs that are not edges of the *full* graph, disjoint from each
other.

- :func:`split_edges` (a graph in memory): exact counts from a random permutation of the edges;
  O(E log E).
- :func:`split_hashed` (a prepared, memory-mapped graph): each edge goes to test, validation or training
  by a keyed hash of its endpoints, so the split streams over the CSR in row blocks with O(N + block)
  memory and the training graph is written to disk; the held-out shares are the fractions in
  expectation (binomial counts). :func:`hashed_rows` computes one row range's part of that split from
  those rows alone (each process of a sharded run its own), :func:`held_out_split` joins the parts.

Both check sampled non-edges against the graph's CSR by binary search (:meth:`Graph.has_edges`).
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..errors import GraphError, ParameterError
from ..graph import Graph, row_ranges


@dataclass(frozen=True)
class EdgeSplit:
    """Node-index pairs, each ``(2, k)`` int64 with ``u < v``.

    ``train`` are the edges the encoder and the loss see; ``val_pos``/``test_pos`` are held-out
    edges, ``val_neg``/``test_neg`` sampled non-edges of the full graph (as many as the positives).
    """

    train: np.ndarray
    val_pos: np.ndarray
    val_neg: np.ndarray
    test_pos: np.ndarray
    test_neg: np.ndarray
    num_nodes: int
    graph: Graph | None = None  # the training graph, where it is built already; train is then None
    train_weight: np.ndarray | None = None  # (k,) float32 the weight of each train edge (a weighted graph's)

    def train_graph(self) -> Graph:
        if self.graph is not None:
            return self.graph
        return Graph.from_edge_index(self.train, self.num_nodes, canonical=True, edge_weight=self.train_weight)

    @property
    def num_train(self) -> int:
        return self.graph.num_edges if self.graph is not None else int(self.train.shape[1])


def sample_non_edges(count: int, num_nodes: int, num_edges: int, is_edge, rng: np.random.Generator) -> np.ndarray:
    """``count`` distinct pairs ``(2, count)``, ``u < v``, drawn uniformly among the pairs that are not
    edges: ``is_edge(u, v)`` answers for arrays of pairs; the graph has ``num_edges`` undirected edges."""
    total_pairs = num_nodes * (num_nodes - 1) // 2
    if count > total_pairs - num_edges:
        raise GraphError(f"cannot sample {count:,} non-edges: the graph has only "
                         f"{total_pairs - num_edges:,} node pairs that are not edges.")
    found = np.empty(0, np.int64)
    while found.size < count:
        need = count - found.size
        m = int(need * 1.2) + 16
        u = rng.integers(0, num_nodes, m)
        v = rng.integers(0, num_nodes, m)
        ok = u != v
        u, v = np.minimum(u, v)[ok], np.maximum(u, v)[ok]
        k = (u * np.int64(num_nodes) + v)[~is_edge(u, v)]
        # keep first occurrences in draw order (np.unique sorts; restore order for reproducible truncation)
        merged = np.concatenate([found, k])
        _, first = np.unique(merged, return_index=True)
        found = merged[np.sort(first)]
    found = found[:count]
    return np.stack([found // num_nodes, found % num_nodes])


def check_fractions(owner: str, val_fraction, test_fraction) -> None:
    for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not (isinstance(value, (int, float)) and 0.0 <= value < 1.0):
            raise ParameterError(name, owner, "a float in [0, 1)", value)


def _check_hashed_fractions(owner: str, val_fraction, test_fraction) -> None:
    check_fractions(owner, val_fraction, test_fraction)
    if val_fraction + test_fraction >= 1.0:
        raise ParameterError("val_fraction + test_fraction", owner, "below 1 to leave training edges",
                             round(val_fraction + test_fraction, 6))


def permuted_parts(owner: str, num_edges: int, val_fraction: float, test_fraction: float,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted edge positions of the training, validation and test parts: a random permutation of
    ``range(num_edges)`` cut by the fractions (rounded down), checked to leave training edges."""
    check_fractions(owner, val_fraction, test_fraction)
    n_val, n_test = int(num_edges * val_fraction), int(num_edges * test_fraction)
    n_train = num_edges - n_val - n_test
    if n_train <= 0:
        raise ParameterError("val_fraction + test_fraction", owner,
                             f"small enough to leave training edges (the graph has {num_edges:,} edges)",
                             round(val_fraction + test_fraction, 6))
    perm = rng.permutation(num_edges)
    return np.sort(perm[:n_train]), np.sort(perm[n_train:n_train + n_val]), np.sort(perm[n_train + n_val:])


def split_edges(graph: Graph, val_fraction: float = 0.05, test_fraction: float = 0.10, *, seed: int = 0) -> EdgeSplit:
    """Split the undirected edges of ``graph`` (fractions of its edges, rounded down); the training edges of a
    weighted graph keep their weights (``train_weight``)."""
    check_fractions("split_edges", val_fraction, test_fraction)
    graph.require_edges()
    edges = graph.edge_index()
    e = edges.shape[1]
    rng = np.random.default_rng(seed)
    train_at, val_at, test_at = permuted_parts("split_edges", e, val_fraction, test_fraction, rng)
    # sorted positions: the parts stay sorted by (u, v), which keeps the CSR build cheap
    n_val = val_at.size
    neg = sample_non_edges(n_val + test_at.size, graph.num_nodes, e, graph.has_edges, rng)
    weights = graph.edge_weight()
    train_weight = None if weights is None else weights[train_at]
    return EdgeSplit(edges[:, train_at], edges[:, val_at], neg[:, :n_val], edges[:, test_at], neg[:, n_val:],
                     graph.num_nodes, train_weight=train_weight)


def _edge_hash(u: np.ndarray, v: np.ndarray, num_nodes: int, seed: int) -> np.ndarray:
    """Uniform ``[0, 1)`` values, one per pair, symmetric in ``(u, v)``: splitmix64 of the pair's key and
    the seed."""
    k = (np.minimum(u, v) * np.int64(num_nodes) + np.maximum(u, v)).astype(np.uint64)
    k = k + np.uint64((0x9E3779B97F4A7C15 * (seed + 1)) % 2**64)
    k = (k ^ (k >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    k = (k ^ (k >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    k = k ^ (k >> np.uint64(31))
    return (k >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


class _Block(NamedTuple):
    """The CSR entries of rows ``start:stop``: ``rows``, ``cols``, and where :func:`split_hashed` sends each
    (``is_val``, ``is_test``; both directions of an edge go the same way), each ``(k,)``."""

    start: int
    stop: int
    rows: np.ndarray
    cols: np.ndarray
    is_val: np.ndarray
    is_test: np.ndarray

    def train(self) -> tuple[np.ndarray, np.ndarray]:
        """The training graph's part of these rows: ``(degree: (stop - start,), indices)``."""
        keep = ~(self.is_test | self.is_val)
        return np.bincount(self.rows[keep] - self.start, minlength=self.stop - self.start), self.cols[keep]

    def held(self, mask: np.ndarray) -> np.ndarray:
        """``(2, k)`` int64: the held-out edges ``mask`` picks (``is_val`` or ``is_test``), each once as ``u < v``."""
        mask = mask & (self.rows < self.cols)
        return np.stack([self.rows[mask], self.cols[mask].astype(np.int64)])


class HashedRows(NamedTuple):
    """What :func:`hashed_rows` computes for rows ``start:stop``: their training ``degree: (stop - start,)``
    and ``indices``, and their held-out edges ``val_pos``, ``test_pos`` (``(2, k)``, ``start <= u < v``)."""

    degree: np.ndarray
    indices: np.ndarray
    val_pos: np.ndarray
    test_pos: np.ndarray


def _hashed_blocks(graph: Graph, start: int, stop: int, val_fraction: float, test_fraction: float, seed: int,
                   block: int) -> Iterator[_Block]:
    """Rows ``start:stop`` of ``graph`` split by :func:`_edge_hash`, ``block`` entries at a time."""
    first = np.asarray(graph.indptr[start:stop + 1], np.int64)
    cuts = row_ranges(first - first[0], block) + start
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        lo, hi = int(graph.indptr[a]), int(graph.indptr[b])
        cols = np.asarray(graph.indices[lo:hi])
        rows = np.repeat(np.arange(a, b, dtype=np.int64), np.diff(np.asarray(graph.indptr[a:b + 1])))
        yield _Block(a, b, rows, cols, *_held_out(rows, cols, graph.num_nodes, val_fraction, test_fraction, seed))


def _held_out(u: np.ndarray, v: np.ndarray, num_nodes: int, val_fraction: float, test_fraction: float,
              seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(is_val, is_test)``, each ``(k,)`` bool: where the hashed split sends each edge ``(u[k], v[k])``."""
    h = _edge_hash(u, v, num_nodes, seed)
    return (h >= test_fraction) & (h < test_fraction + val_fraction), h < test_fraction


def hashed_is_train(u: np.ndarray, v: np.ndarray, num_nodes: int, val_fraction: float = 0.05,
                    test_fraction: float = 0.10, *, seed: int = 0) -> np.ndarray:
    """``(k,)`` bool: whether :func:`split_hashed` (same fractions and seed) keeps each edge ``(u[k], v[k])``
    of the graph for training; any edges, from anywhere in the graph (a rank cuts its partition with it)."""
    is_val, is_test = _held_out(np.asarray(u, np.int64), np.asarray(v, np.int64), num_nodes, val_fraction,
                                test_fraction, seed)
    return ~(is_val | is_test)


def hashed_rows(graph: Graph, start: int, stop: int, val_fraction: float = 0.05, test_fraction: float = 0.10,
                *, seed: int = 0, block: int = 1 << 23) -> HashedRows:
    """Rows ``start:stop`` of :func:`split_hashed`'s split (same fractions and seed), computed from those
    rows of ``graph`` alone, ``block`` entries at a time: the training graph's rows, and the held-out edges
    whose smaller end is in the range (in :func:`split_hashed`'s order). What one rank of a partitioned run
    reads and splits (:mod:`gaescale.shards`); :func:`held_out_split` joins the ranges' held-out edges."""
    _check_hashed_fractions("hashed_rows", val_fraction, test_fraction)
    kept = [np.zeros(0, graph.indices.dtype)]
    deg, val_pos, test_pos = _split_rows(graph, start, stop, val_fraction, test_fraction, seed, block, kept.append)
    return HashedRows(deg, np.concatenate(kept), val_pos, test_pos)


def _split_rows(graph: Graph, start: int, stop: int, val_fraction: float, test_fraction: float, seed: int,
                block: int, train_entries) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One pass of the hashed split over rows ``start:stop``, ``block`` entries at a time: hands each block's
    training entries, in row order, to ``train_entries(indices)`` and returns the rows' training
    ``degree: (stop - start,)`` and their held-out ``val_pos``, ``test_pos`` (``(2, k)``, ``u < v``)."""
    deg = np.zeros(stop - start, np.int64)
    held: dict[str, list[np.ndarray]] = {"val": [np.zeros((2, 0), np.int64)], "test": [np.zeros((2, 0), np.int64)]}
    for blk in _hashed_blocks(graph, start, stop, val_fraction, test_fraction, seed, block):
        held["val"].append(blk.held(blk.is_val))
        held["test"].append(blk.held(blk.is_test))
        deg[blk.start - start:blk.stop - start], cols = blk.train()
        train_entries(cols)
    return deg, np.concatenate(held["val"], axis=1), np.concatenate(held["test"], axis=1)


def held_out_split(graph: Graph, val_pos: np.ndarray, test_pos: np.ndarray, *, seed: int = 0,
                   train: Graph | None = None) -> EdgeSplit:
    """The split of ``graph`` with these held-out edges (``(2, k)``, ``u < v``) and ``train``, the training
    graph (or None where it is held elsewhere, in shards): non-edges drawn as :func:`split_hashed` draws them,
    as many as the positives."""
    rng = np.random.default_rng(seed)
    n = graph.num_nodes
    neg = sample_non_edges(val_pos.shape[1] + test_pos.shape[1], n, graph.num_edges, graph.has_edges, rng)
    return EdgeSplit(None, val_pos, neg[:, :val_pos.shape[1]], test_pos, neg[:, val_pos.shape[1]:], n, train)


def split_hashed(graph: Graph, val_fraction: float = 0.05, test_fraction: float = 0.10, *, seed: int = 0,
                 out_dir=None, block: int = 1 << 23) -> EdgeSplit:
    """Split a (memory-mapped) graph in one pass over its CSR, ``block`` entries at a time: edge ``{u, v}``
    is a test edge when its hash (:func:`_edge_hash`) is below ``test_fraction``, a validation edge below
    ``test_fraction + val_fraction``, else a training edge. The training graph's CSR goes to ``out_dir``
    (``train_indices.bin``, memory-mapped; its ``(N + 1,)`` indptr stays in memory) or stays in memory when
    it is None.
    Non-edges: as many as the positives, as in :func:`split_edges`."""
    _check_hashed_fractions("split_hashed", val_fraction, test_fraction)
    graph.require_edges()
    n = graph.num_nodes
    kept = []
    path = None if out_dir is None else Path(out_dir) / "train_indices.bin"  # raw, read back as np.memmap
    if path is None:
        deg, val_pos, test_pos = _split_rows(graph, 0, n, val_fraction, test_fraction, seed, block, kept.append)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        try:  # written under a temporary name, renamed once complete; closed and removed on any error
            with open(tmp, "wb") as fh:
                deg, val_pos, test_pos = _split_rows(graph, 0, n, val_fraction, test_fraction, seed, block,
                                                     lambda cols: cols.tofile(fh))
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    train_indptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    if path is None:
        train = Graph(train_indptr, np.concatenate(kept), n)
    else:
        indices = np.memmap(path, graph.indices.dtype, "r") if train_indptr[-1] else np.zeros(0, graph.indices.dtype)
        train = Graph(train_indptr, indices, n)
    return held_out_split(graph, val_pos, test_pos, seed=seed, train=train)


def warn_empty_split(split, log) -> None:
    """Say so where the split holds no validation or no test edges (a tiny graph): their metrics are then n/a."""
    empty = [name for name, pos in (("validation", split.val_pos), ("test", split.test_pos)) if not pos.shape[1]]
    if empty:
        log(f"warning: the split holds no {' and no '.join(empty)} edges ({split.num_train:,} training edges): "
            f"{' and '.join(empty)} metrics will be n/a; raise --val-fraction / --test-fraction or use a larger "
            "graph")
