"""The graph: one immutable undirected graph in CSR form, built once from an edge list."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import scipy.sparse as sp
import torch

from .errors import GraphError
from .sparse import SparseOperator, to_torch_csr


@dataclass(frozen=True)
class CleanStats:
    """What :func:`canonical_edges` removed from the rows it was given."""

    rows: int
    self_loops: int
    duplicates: int  # repeated rows, including the reverse direction of an edge already seen
    zero_weights: int = 0  # rows of weight 0 (a weighted graph's), dropped: a weight of 0 is no edge

    def describe(self) -> str:
        edges = self.rows - self.self_loops - self.zero_weights - self.duplicates
        zeros = f", {self.zero_weights:,} rows of weight 0 dropped" if self.zero_weights else ""
        return (f"{self.rows:,} edge rows -> {edges:,} undirected edges "
                f"({self.self_loops:,} self loops dropped{zeros}, {self.duplicates:,} duplicate or reverse rows "
                "merged)")


def sorted_unique(keys: np.ndarray) -> np.ndarray:
    """The distinct values of ``keys``, sorted. Sorts and drops repeats rather than ``np.unique``:
    NumPy 2.4's hash-based unique is ~80x slower on millions of int64 keys (10.6 s against 0.13 s for 5M)."""
    keys = np.sort(keys)
    return keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if keys.size else keys


def row_ranges(indptr: np.ndarray, max_entries: int) -> np.ndarray:
    """Row boundaries ``0 = b_0 < ... < b_k = N`` of a CSR with row pointer ``indptr: (N + 1,)``, each range
    holding at most ``max_entries`` entries (or a single row that alone holds more): the blocks in which a
    graph too large for memory is streamed."""
    ends = np.asarray(indptr[1:])
    cuts = np.searchsorted(ends, np.arange(max_entries, ends[-1] if ends.size else 0, max_entries), side="right")
    return sorted_unique(np.concatenate([[0], cuts, [ends.size]]).astype(np.int64))


def canonical_edges(edge_index: np.ndarray, num_nodes: int) -> tuple[np.ndarray, CleanStats]:
    """Undirected, loop-free, duplicate-free edges, each once as ``u < v``, sorted.

    ``edge_index: (2, E)`` integer node indices in ``[0, num_nodes)``; returns ``(2, E') int64`` and
    the counts of what was dropped. O(E log E).
    """
    ei = np.asarray(edge_index, dtype=np.int64)
    u, v = np.minimum(ei[0], ei[1]), np.maximum(ei[0], ei[1])
    loops = u == v
    u, v = u[~loops], v[~loops]
    key = sorted_unique(u * np.int64(num_nodes) + v)
    out = np.stack([key // num_nodes, key % num_nodes])
    stats = CleanStats(rows=ei.shape[1], self_loops=int(loops.sum()), duplicates=int(u.size - key.size))
    return out, stats


def mean_by_key(key: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(keys, means)``: the distinct values of ``key: (m,)``, sorted, and the mean of ``w: (m,)`` over the rows
    of each (float64). O(m log m)."""
    order = np.argsort(key, kind="stable")
    key, w = key[order], np.asarray(w, np.float64)[order]
    starts = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]])) if key.size else np.zeros(0, np.int64)
    counts = np.diff(np.concatenate([starts, [key.size]]))
    mean = np.add.reduceat(w, starts) / counts if key.size else np.zeros(0)
    return key[starts], mean


def canonical_weighted_edges(edge_index: np.ndarray, num_nodes: int,
                             edge_weight: np.ndarray) -> tuple[np.ndarray, np.ndarray, CleanStats]:
    """:func:`canonical_edges` with a weight per row, ``edge_weight: (E,)``: returns ``(edges (2, E') int64,
    weights (E',) float32, stats)``. Rows of weight 0 are dropped (no edge) before merging; the rows that merge
    into one undirected edge (duplicates, the reverse direction) give it the mean of their weights, so a
    symmetric listing (both directions, one weight) keeps that weight. O(E log E)."""
    ei = np.asarray(edge_index, dtype=np.int64)
    w = np.asarray(edge_weight, np.float64)
    u, v = np.minimum(ei[0], ei[1]), np.maximum(ei[0], ei[1])
    loops, zeros = u == v, (w == 0) & (ei[0] != ei[1])
    keep = ~loops & ~zeros
    key, mean = mean_by_key(u[keep] * np.int64(num_nodes) + v[keep], w[keep])
    stats = CleanStats(rows=ei.shape[1], self_loops=int(loops.sum()), duplicates=int(keep.sum() - key.size),
                       zero_weights=int(zeros.sum()))
    return np.stack([key // num_nodes, key % num_nodes]), mean.astype(np.float32), stats


@dataclass(frozen=True, eq=False)
class Graph:
    """An undirected graph without self loops, stored as a symmetric CSR adjacency.

    ``indptr: (N + 1,)`` int64 and ``indices: (2E,)`` (int32 when N < 2^31) hold both directions of every edge. Derived
    operators (the GCN normalisation, the mean aggregator) are computed once, on first use.
    ``data: (2E,)`` float32, aligned with ``indices``: the weight of each entry (symmetric) of a weighted graph
    (``--weighted``), or None for all 1. The operators then use the weighted adjacency ``A_w`` and the weighted
    degree ``sum_j w_ij`` (:attr:`strength`); :meth:`adjacency` stays the 0/1 pattern.
    """

    indptr: np.ndarray
    indices: np.ndarray
    num_nodes: int
    stats: CleanStats | None = field(default=None, compare=False)
    node_ids: np.ndarray | None = field(default=None, compare=False)  # of a subgraph: original node indices
    data: np.ndarray | None = field(default=None, compare=False)  # (2E,) float32 edge weights; None: all 1

    @classmethod
    def from_edge_index(cls, edge_index: np.ndarray, num_nodes: int, *, canonical: bool = False,
                        node_ids: np.ndarray | None = None, edge_weight: np.ndarray | None = None) -> Graph:
        """Build from ``edge_index: (2, E)``. Unless ``canonical`` (already ``u < v``, unique), the
        edges are made undirected and self loops and duplicates are dropped (see ``stats``).
        ``edge_weight: (E,)``: a weighted graph (:func:`canonical_weighted_edges`: weight-0 rows dropped,
        merged rows averaged)."""
        stats = None
        if not canonical:
            if edge_weight is None:
                edge_index, stats = canonical_edges(edge_index, num_nodes)
            else:
                edge_index, edge_weight, stats = canonical_weighted_edges(edge_index, num_nodes, edge_weight)
        u, v = np.asarray(edge_index[0], np.int64), np.asarray(edge_index[1], np.int64)
        rows, cols = np.concatenate([u, v]), np.concatenate([v, u])
        w = np.ones(rows.size, np.float32) if edge_weight is None else np.tile(np.asarray(edge_weight, np.float32), 2)
        adj = sp.csr_matrix((w, (rows, cols)), shape=(num_nodes, num_nodes))
        adj.sort_indices()
        data = None if edge_weight is None else np.asarray(adj.data, np.float32)
        # indices stay int32 when N allows (SciPy's choice): half the memory of int64
        return cls(adj.indptr.astype(np.int64), adj.indices, int(num_nodes), stats, node_ids, data)

    @property
    def weighted(self) -> bool:
        return self.data is not None

    @property
    def num_edges(self) -> int:
        """Undirected edges (each counted once)."""
        return int(self.indices.size // 2)

    @cached_property
    def degree(self) -> np.ndarray:
        """``(N,)`` int64 number of neighbours."""
        return np.diff(self.indptr)

    @property
    def strength(self) -> np.ndarray:
        """``(N,)`` float64 weighted degree ``sum_j w_ij``; for an unweighted graph the degree, converted at each
        call and not kept (8 bytes a node: 0.8 GB at 100M nodes, which the degrees already say)."""
        return self.degree.astype(np.float64) if self.data is None else self._weighted_strength

    @cached_property
    def _weighted_strength(self) -> np.ndarray:
        rows = np.repeat(np.arange(self.num_nodes, dtype=np.int64), self.degree)
        return np.bincount(rows, weights=np.asarray(self.data, np.float64), minlength=self.num_nodes)

    def adjacency(self) -> sp.csr_matrix:
        """The 0/1 symmetric adjacency as SciPy CSR (no self loops)."""
        return self._rows(0, self.num_nodes)

    def weighted_adjacency(self) -> sp.csr_matrix:
        """``A_w``: the adjacency with each entry's weight (the 0/1 one for an unweighted graph)."""
        return self._rows(0, self.num_nodes, weighted=True)

    def edge_weight(self) -> np.ndarray | None:
        """``(E,)`` float32: the weight of each edge of :meth:`edge_index`, in its order; None when unweighted."""
        if self.data is None:
            return None
        rows = np.repeat(np.arange(self.num_nodes, dtype=np.int64), self.degree)
        return np.asarray(self.data)[rows < self.indices]

    def has_edges(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """``(k,)`` bool: whether each ``(u[k], v[k])`` is an edge. A vectorised binary search in the sorted
        CSR rows: ``O(k log(max degree))``, reads only the rows asked about."""
        return self._find(u, v)[0]

    def weights_of(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """``(k,)`` float32: the weight of each edge ``(u[k], v[k])`` (1 in an unweighted graph), 0 for a pair
        that is not an edge; found as :meth:`has_edges` finds them."""
        found, at = self._find(u, v)
        w = np.zeros(found.size, np.float32)
        w[found] = 1.0 if self.data is None else np.asarray(self.data)[at[found]]
        return w

    def _find(self, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(found (k,) bool, slot (k,) int64)``: whether each pair is an edge, and where in ``indices``."""
        u, v = np.asarray(u, np.int64), np.asarray(v, np.int64)
        lo, end = np.asarray(self.indptr[u], np.int64), np.asarray(self.indptr[u + 1], np.int64)
        hi = end.copy()
        while True:
            act = np.flatnonzero(lo < hi)
            if not act.size:
                break
            mid = (lo[act] + hi[act]) // 2
            less = np.asarray(self.indices[mid]) < v[act]
            lo[act] = np.where(less, mid + 1, lo[act])
            hi[act] = np.where(less, hi[act], mid)
        found = lo < end
        found[found] = np.asarray(self.indices[lo[found]]) == v[found]
        return found, lo

    def edge_index(self) -> np.ndarray:
        """``(2, E)`` int64: every undirected edge once, ``u < v``."""
        rows = np.repeat(np.arange(self.num_nodes, dtype=np.int64), self.degree)
        keep = rows < self.indices
        return np.stack([rows[keep], self.indices[keep].astype(np.int64)])

    @cached_property
    def gcn_operator(self) -> SparseOperator:
        """``D^-1/2 (A_w + I) D^-1/2`` with ``D`` the (weighted) degree of ``A_w + I``, ``1 + sum_j w_ij``
        (Kipf & Welling), symmetric."""
        a = sp.csr_matrix(self.weighted_adjacency() + sp.eye(self.num_nodes, dtype=np.float32, format="csr"))
        a.sort_indices()
        dinv = self._inv_sqrt_degree()
        rows = np.repeat(np.arange(self.num_nodes), np.diff(a.indptr))
        a.data = (a.data * dinv[rows] * dinv[a.indices]).astype(np.float32)
        return SparseOperator(a, symmetric=True)

    @cached_property
    def mean_operator(self) -> SparseOperator:
        """``D^-1 A_w``: the (weighted) mean over neighbours, ``sum_j w_ij h_j / sum_j w_ij`` (GraphSAGE's mean
        aggregator); zero rows for isolated nodes."""
        a = self.weighted_adjacency()
        a.data = (a.data * np.repeat(self._inv_degree(), self.degree)).astype(np.float32)
        return SparseOperator(a, symmetric=False)

    @cached_property
    def gcn_scale(self) -> torch.Tensor:
        """``(N, 1)`` float32 ``(degree + 1)^-1/2`` (the weighted degree): the GCN normalisation as a scaling of
        the dense side (layer-wise inference multiplies the (weighted) :meth:`adjacency_block` and scales by it).
        Kept: 4 bytes a node; the float64 steps to it are not."""
        return torch.from_numpy(self._inv_sqrt_degree().astype(np.float32)[:, None])

    @cached_property
    def mean_scale(self) -> torch.Tensor:
        """``(N, 1)`` float32 ``1 / degree`` (the weighted degree; 0 for isolated nodes): the mean aggregator's
        scaling."""
        return torch.from_numpy(self._inv_degree().astype(np.float32)[:, None])

    def _inv_sqrt_degree(self) -> np.ndarray:
        """``(N,)`` float64 ``(degree + 1)^-1/2``, the (weighted) degree counted in ``A_w + I``."""
        return 1.0 / np.sqrt(self.strength + 1.0)

    def _inv_degree(self) -> np.ndarray:
        """``(N,)`` float64 ``1 / degree`` (weighted), 0 for isolated nodes."""
        d = self.strength
        return np.where(d > 0, 1.0 / np.maximum(d, 1.0), 0.0)

    def adjacency_block(self, start: int, stop: int) -> torch.Tensor:
        """Rows ``start:stop`` of the adjacency (0/1, or ``A_w`` for a weighted graph) as a torch CSR tensor
        ``(stop - start, N)``, reading only those rows of the CSR (a memory-mapped graph stays on disk)."""
        return to_torch_csr(self._rows(start, stop, weighted=True), torch.float32)

    def _rows(self, start: int, stop: int, weighted: bool = False) -> sp.csr_matrix:
        """Rows ``start:stop`` of the 0/1 adjacency (``weighted``: of ``A_w``), ``(stop - start, N)``."""
        lo, hi = int(self.indptr[start]), int(self.indptr[stop])
        indptr = np.asarray(self.indptr[start:stop + 1], np.int64) - lo
        indices = np.asarray(self.indices[lo:hi])
        values = (np.asarray(self.data[lo:hi], np.float32) if weighted and self.data is not None
                  else np.ones(hi - lo, np.float32))
        return sp.csr_matrix((values, indices, indptr), shape=(stop - start, self.num_nodes))

    def require_edges(self, what: str = "the graph") -> None:
        if self.num_edges == 0:
            raise GraphError(f"{what} has no edges left after removing self loops and duplicates; "
                             "a graph autoencoder needs at least one edge to train on.")


def neighbour_pairs(graph: Graph, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(row, node)`` for every neighbour of every query ``q[row]``, vectorised over the CSR."""
    counts = graph.degree[q]
    rows = np.repeat(np.arange(q.size), counts)
    return rows, graph.indices[_slots(graph, q, counts)].astype(np.int64)


def _slots(graph: Graph, q: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The CSR positions of the neighbours of ``q: (b,)`` (``counts`` their degrees), row after row."""
    ends = np.cumsum(counts)
    return np.arange(ends[-1] if ends.size else 0) + np.repeat(graph.indptr[q] - (ends - counts), counts)


def adjacency_rows(graph: Graph, nodes: np.ndarray, dtype=np.float64) -> sp.csr_matrix:
    """``(len(nodes), N)`` CSR: the rows of ``nodes`` of the 0/1 adjacency, read from the graph's CSR where they lie:
    never a matrix over the whole graph, so a memory-mapped graph of a billion edges costs only the rows asked for.
    ``dtype``: its values' (``np.int8`` where only the pattern is read: 1 byte an entry instead of 8)."""
    nodes = np.asarray(nodes, np.int64)
    counts = graph.degree[nodes]
    cols = graph.indices[_slots(graph, nodes, counts)]
    index = np.int32 if max(cols.size, graph.num_nodes) < 2**31 else np.int64
    indptr = np.zeros(nodes.size + 1, index)
    np.cumsum(counts, out=indptr[1:])
    return sp.csr_matrix((np.ones(cols.size, dtype), cols.astype(index, copy=False), indptr),
                         shape=(nodes.size, graph.num_nodes))


def data_fingerprint(*arrays: np.ndarray | None) -> str:
    """A hash of the graph's CSR arrays and the features (about 0.1 s per 50 MB)."""
    h = hashlib.blake2b(digest_size=16)
    for a in arrays:
        if a is None:
            h.update(b"none")
            continue
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()


def with_self_loops(edges: np.ndarray, num_nodes: int, self_loops: bool) -> np.ndarray:
    """``edges: (2, E)``, followed with ``self_loops`` by ``(i, i)`` for every node (the pairs of the ``A + I``
    target): ``(2, E + N)``."""
    if not self_loops:
        return edges
    loops = np.arange(num_nodes, dtype=np.int64)
    return np.concatenate([edges, np.stack([loops, loops])], axis=1)
