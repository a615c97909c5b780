"""A directed graph as two CSRs (out-edges and in-edges) and its train/validation/test split.

Edges ``(u, v)`` are kept as given: self loops are dropped and exact duplicates merged, but ``(u, v)`` and
``(v, u)`` are two edges. Held-out positives are directed edges; negatives are ordered pairs ``(u, v)``,
``u != v``, that are not edges of the full graph (``(v, u)`` may be one).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from ..data.split import check_fractions, permuted_parts
from ..errors import GraphError
from ..graph import CleanStats, Graph, mean_by_key, sorted_unique
from ..sparse import SparseOperator


def directed_edges(edge_index: np.ndarray, num_nodes: int) -> tuple[np.ndarray, CleanStats]:
    """Loop-free, duplicate-free directed edges ``(2, E') int64``, sorted by ``(u, v)``, from
    ``edge_index: (2, E)`` node indices in ``[0, num_nodes)``; and the counts of what was dropped."""
    ei = np.asarray(edge_index, dtype=np.int64)
    loops = ei[0] == ei[1]
    u, v = ei[0][~loops], ei[1][~loops]
    key = sorted_unique(u * np.int64(num_nodes) + v)
    stats = CleanStats(rows=ei.shape[1], self_loops=int(loops.sum()), duplicates=int(u.size - key.size))
    return np.stack([key // num_nodes, key % num_nodes]), stats


def directed_weighted_edges(edge_index: np.ndarray, num_nodes: int,
                            edge_weight: np.ndarray) -> tuple[np.ndarray, np.ndarray, CleanStats]:
    """:func:`directed_edges` with a weight per row, ``edge_weight: (E,)``: ``(edges (2, E') int64, weights (E',)
    float32, stats)``. Rows of weight 0 are dropped (no edge); repeated rows ``(u, v)`` give their edge the mean of
    their weights (``(v, u)`` is another edge, with its own)."""
    ei = np.asarray(edge_index, dtype=np.int64)
    w = np.asarray(edge_weight, np.float64)
    loops = ei[0] == ei[1]
    zeros = (w == 0) & ~loops
    keep = ~loops & ~zeros
    key, mean = mean_by_key(ei[0][keep] * np.int64(num_nodes) + ei[1][keep], w[keep])
    stats = CleanStats(rows=ei.shape[1], self_loops=int(loops.sum()), duplicates=int(keep.sum() - key.size),
                       zero_weights=int(zeros.sum()))
    return np.stack([key // num_nodes, key % num_nodes]), mean.astype(np.float32), stats


def _csr(rows: np.ndarray, cols: np.ndarray, num_nodes: int, weights: np.ndarray | None = None) -> Graph:
    """The CSR of ``(rows, cols)`` (unique pairs), rows sorted, as a :class:`Graph` container (``data``: the
    ``weights`` in CSR order, None for all 1): its ``indptr``/``indices`` serve :meth:`Graph.has_edges` and
    :func:`gaescale.graph.neighbour_pairs`, which read any sorted CSR (it is not symmetric: ``num_edges`` and the
    operators of ``Graph`` do not apply)."""
    w = np.ones(rows.size, np.float32) if weights is None else np.asarray(weights, np.float32)
    adj = sp.csr_matrix((w, (rows, cols)), shape=(num_nodes, num_nodes))
    adj.sort_indices()
    data = None if weights is None else np.asarray(adj.data, np.float32)
    return Graph(adj.indptr.astype(np.int64), adj.indices, int(num_nodes), data=data)


@dataclass(frozen=True, eq=False)
class DiGraph:
    """A directed graph without self loops: ``out`` the CSR of ``A`` (row ``u`` holds the targets of ``u``'s
    out-edges), ``inn`` the CSR of ``A^T`` (row ``v`` holds the sources of ``v``'s in-edges); ``E`` edges. A weighted
    graph (``--weighted``) carries each edge's weight in both CSRs' ``data``; the operators then use ``A_w`` and the
    weighted out- and in-degrees."""

    out: Graph
    inn: Graph
    num_nodes: int
    stats: CleanStats | None = field(default=None, compare=False)
    node_ids = None  # the whole graph, never a subgraph (what the encoders' featureless tables read)

    @classmethod
    def from_edge_index(cls, edge_index: np.ndarray, num_nodes: int, *, clean: bool = True,
                        edge_weight: np.ndarray | None = None) -> DiGraph:
        """From ``edge_index: (2, E)``; with ``clean``, self loops and exact duplicates dropped (see ``stats``;
        ``edge_weight: (E,)``: :func:`directed_weighted_edges`)."""
        stats = None
        if clean and edge_weight is None:
            edge_index, stats = directed_edges(edge_index, num_nodes)
        elif clean:
            edge_index, edge_weight, stats = directed_weighted_edges(edge_index, num_nodes, edge_weight)
        u, v = np.asarray(edge_index[0], np.int64), np.asarray(edge_index[1], np.int64)
        return cls(_csr(u, v, num_nodes, edge_weight), _csr(v, u, num_nodes, edge_weight), int(num_nodes), stats)

    @property
    def weighted(self) -> bool:
        return self.out.data is not None

    @property
    def weights(self) -> np.ndarray | None:
        """``(E,)`` float32: the weight of each edge of :meth:`edge_index`, in its order; None when unweighted."""
        return self.out.data

    @property
    def num_edges(self) -> int:
        """Directed edges (``(u, v)`` and ``(v, u)`` count as two)."""
        return int(self.out.indices.size)

    @cached_property
    def out_degree(self) -> np.ndarray:
        """``(N,)`` int64."""
        return np.diff(self.out.indptr)

    @cached_property
    def in_degree(self) -> np.ndarray:
        """``(N,)`` int64."""
        return np.diff(self.inn.indptr)

    def edge_index(self) -> np.ndarray:
        """``(2, E)`` int64: every directed edge once, sorted by ``(u, v)``."""
        rows = np.repeat(np.arange(self.num_nodes, dtype=np.int64), self.out_degree)
        return np.stack([rows, self.out.indices.astype(np.int64)])

    def has_edges(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """``(k,)`` bool: whether each ``(u[k], v[k])`` is a directed edge (binary search in the out-CSR)."""
        return self.out.has_edges(u, v)

    def symmetrised(self) -> Graph:
        """The undirected graph of the same edges (``{u, v}`` for each ``(u, v)``; weighted: the mean weight of
        ``(u, v)`` and ``(v, u)`` where both are edges): what the heuristics score and the symmetric part
        propagates over (built once)."""
        return self._symmetrised

    @cached_property
    def _symmetrised(self) -> Graph:
        return Graph.from_edge_index(self.edge_index(), self.num_nodes, edge_weight=self.weights)

    @cached_property
    def operator(self) -> SparseOperator:
        """``A_hat = (D_out + I)^-1/2 (A_w + I) (D_in + I)^-1/2`` (DiGAE's normalisation with alpha = beta = 1/2;
        weighted: ``A_w`` and the weighted degrees), ``(N, N)`` sparse: row ``i`` averages over ``i`` and its
        out-neighbours."""
        return SparseOperator(self._normalised(self.out, self.out.strength, self.inn.strength))

    @cached_property
    def operator_t(self) -> SparseOperator:
        """``A_hat^T``, ``(N, N)`` sparse: row ``j`` averages over ``j`` and its in-neighbours."""
        return SparseOperator(self._normalised(self.inn, self.inn.strength, self.out.strength))

    @property
    def reciprocity(self) -> float:
        """The share of the edges ``(u, v)`` whose reversal ``(v, u)`` is an edge too (0 for a DAG)."""
        if self.num_edges == 0:
            return 0.0
        u, v = self.edge_index()
        return float(self.has_edges(v, u).mean())

    @cached_property
    def operator_sym(self) -> SparseOperator:
        """The GCN operator of the symmetrised graph, ``D^-1/2 (A_sym + I) D^-1/2``, ``(N, N)`` sparse."""
        return self.symmetrised().gcn_operator

    def _normalised(self, csr: Graph, row_degree: np.ndarray, col_degree: np.ndarray) -> sp.csr_matrix:
        n = self.num_nodes
        w = np.ones(csr.indices.size, np.float32) if csr.data is None else csr.data
        a = sp.csr_matrix((w, csr.indices, csr.indptr), shape=(n, n))
        a = sp.csr_matrix(a + sp.eye(n, dtype=np.float32, format="csr"))
        a.sort_indices()
        r, c = 1.0 / np.sqrt(row_degree + 1.0), 1.0 / np.sqrt(col_degree + 1.0)
        a.data = (a.data * r[np.repeat(np.arange(n), np.diff(a.indptr))] * c[a.indices]).astype(np.float32)
        return a

    def require_edges(self, what: str = "the graph") -> None:
        if self.num_edges == 0:
            raise GraphError(f"{what} has no edges left after removing self loops and duplicates; "
                             "a graph autoencoder needs at least one edge to train on.")


@dataclass(frozen=True)
class DirectedSplit:
    """Ordered node-index pairs, each ``(2, k)`` int64: ``train`` the edges the encoder and the loss see,
    ``val_pos``/``test_pos`` held-out directed edges, ``val_neg``/``test_neg`` ordered non-edges of the full
    graph (as many as the positives)."""

    train: np.ndarray
    val_pos: np.ndarray
    val_neg: np.ndarray
    test_pos: np.ndarray
    test_neg: np.ndarray
    num_nodes: int
    train_weight: np.ndarray | None = None  # (E_train,) float32: a weighted graph's training edges' weights
    graph = None  # the interface of gaescale.data.split.EdgeSplit

    def train_graph(self) -> DiGraph:
        return DiGraph.from_edge_index(self.train, self.num_nodes, clean=False, edge_weight=self.train_weight)

    @property
    def num_train(self) -> int:
        return int(self.train.shape[1])


def sample_ordered_non_edges(count: int, graph: DiGraph, rng: np.random.Generator) -> np.ndarray:
    """``count`` distinct ordered pairs ``(2, count)``, ``u != v``, uniform among those that are not edges."""
    n = graph.num_nodes
    if count > n * (n - 1) - graph.num_edges:
        raise GraphError(f"cannot sample {count:,} non-edges: the graph has only "
                         f"{n * (n - 1) - graph.num_edges:,} ordered node pairs that are not edges.")
    found = np.empty(0, np.int64)
    while found.size < count:
        m = int((count - found.size) * 1.2) + 16
        u, v = rng.integers(0, n, m), rng.integers(0, n, m)
        ok = u != v
        u, v = u[ok], v[ok]
        merged = np.concatenate([found, (u * np.int64(n) + v)[~graph.has_edges(u, v)]])
        _, first = np.unique(merged, return_index=True)  # first draws kept, in draw order (reproducible)
        found = merged[np.sort(first)]
    found = found[:count]
    return np.stack([found // n, found % n])


def split_directed(graph: DiGraph, val_fraction: float = 0.05, test_fraction: float = 0.10, *,
                   seed: int = 0) -> DirectedSplit:
    """Split the directed edges of ``graph`` (fractions of its edges, rounded down), as
    :func:`gaescale.data.split.split_edges` splits undirected ones: a random permutation of the edges."""
    check_fractions("split_directed", val_fraction, test_fraction)
    graph.require_edges()
    edges = graph.edge_index()
    rng = np.random.default_rng(seed)
    train_at, val_at, test_at = permuted_parts("split_directed", edges.shape[1], val_fraction, test_fraction, rng)
    n_val = val_at.size
    neg = sample_ordered_non_edges(n_val + test_at.size, graph, rng)
    return DirectedSplit(edges[:, train_at], edges[:, val_at], neg[:, :n_val], edges[:, test_at], neg[:, n_val:],
                         graph.num_nodes, None if graph.weights is None else graph.weights[train_at])


def reverse_pairs(graph: DiGraph, pos: np.ndarray) -> np.ndarray:
    """The held-out edges ``(u, v)`` of ``pos: (2, P)`` whose reversal ``(v, u)`` is not an edge of ``graph`` (the
    full graph): ``(2, R)``, what ``reverse_auc`` scores against ``(v, u)``."""
    pos = np.asarray(pos, np.int64)
    return pos[:, ~graph.has_edges(pos[1], pos[0])]
