"""Node orders that keep neighbours close in memory, for the random row gathers of the sparse products.

A graph is given as its symmetric CSR (``indptr: (N + 1,)``, ``indices: (2E,)``: both directions of every edge, no
self loops, as :class:`gaescale.graph.Graph` holds it). Every order is a permutation ``perm: (N,) int64``: new node
``i`` is old node ``perm[i]``. Renumber a graph with :func:`renumber` (its edges) and ``x[perm]`` (its rows); the GCN
operator of the renumbered graph is then ``P A P^T`` and its products are the old ones, rows permuted.

Costs (N nodes, E undirected edges, numpy / scipy, no Python loop over nodes):

- ``degree``: descending degree, ties by old index; one stable sort, O(N log N).
- ``bfs``: breadth-first from the highest-degree node of each connected component (ties: lowest index), components
  in scipy's label order (by their lowest node index). O(N + E) over all levels, one numpy pass per BFS level (a long
  path costs one pass per node: use ``rcm`` there), plus sorts: the roots (O(N log N) at worst) and an
  O(N log depth) merge of the levels.
- ``rcm``: scipy's reverse Cuthill-McKee (compiled, one thread): O(N log N + E + sum of (new neighbours of a node)^2).
- ``community``: synchronous label propagation, ``rounds`` at most (+ one pass for the nodes left alone), each
  O(E log E) (one sort of 2E + N keys, 16 bytes of memory per CSR entry), then a sort by (label, degree descending).
- ``metis``: METIS (``pymetis``) parts of ~``part_size`` nodes, nodes sorted by part; multilevel k-way, about
  O(E log(N / part_size)) time and ~76 bytes per CSR entry of memory.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from ..errors import Got, ParameterError
from ..optional import require

METHODS = ("degree", "bfs", "rcm", "community", "metis")


def locality_order(indptr: np.ndarray, indices: np.ndarray, num_nodes: int, method: str, *, seed: int = 0,
                   rounds: int = 5, part_size: int = 100) -> np.ndarray:
    """``perm: (N,) int64``, new node ``i`` = old node ``perm[i]``, by ``method`` (one of :data:`METHODS`, see the
    module's docstring) for the symmetric CSR ``indptr: (N + 1,)``, ``indices: (2E,)``. ``seed``: the random
    initial labels of ``community`` and METIS's seed; ``rounds``: at most this many rounds of label propagation;
    ``part_size``: the nodes per METIS part."""
    if method not in METHODS:
        raise ParameterError("method", "locality_order", "one of " + ", ".join(map(repr, METHODS)), method)
    indptr, indices = np.asarray(indptr, np.int64), np.asarray(indices)
    if indptr.shape != (num_nodes + 1,):
        raise ParameterError("indptr", "locality_order", f"an array of shape (num_nodes + 1,) = ({num_nodes + 1},)",
                             Got(f"shape {indptr.shape}"))
    if method == "degree":
        return np.argsort(-np.diff(indptr), kind="stable").astype(np.int64)
    if method == "bfs":
        return bfs_order(indptr, indices, num_nodes)
    if method == "rcm":
        return csgraph.reverse_cuthill_mckee(_adjacency(indptr, indices, num_nodes), symmetric_mode=True).astype(
            np.int64)
    if method == "community":
        labels = label_propagation(indptr, indices, num_nodes, rounds=rounds, seed=seed)
        return np.lexsort((-np.diff(indptr), labels)).astype(np.int64)
    parts = metis_parts(indptr, indices, num_nodes, max(1, -(-num_nodes // part_size)), seed=seed)
    return np.argsort(parts, kind="stable").astype(np.int64)


def inverse(perm: np.ndarray) -> np.ndarray:
    """``(N,) int64`` old -> new index of ``perm: (N,)`` (new -> old): ``inverse(perm)[perm[i]] == i``."""
    perm = np.asarray(perm, np.int64)
    inv = np.empty(perm.size, np.int64)
    inv[perm] = np.arange(perm.size, dtype=np.int64)
    return inv


def renumber(edge_index: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """``edge_index: (2, E)`` of old node indices -> ``(2, E)`` int64 of the new ones (column ``k`` stays edge ``k``;
    ``u < v`` may no longer hold)."""
    return inverse(perm)[np.asarray(edge_index, np.int64)]


def bfs_order(indptr: np.ndarray, indices: np.ndarray, num_nodes: int) -> np.ndarray:
    """``perm: (N,) int64``: each connected component in breadth-first order from its highest-degree node (ties:
    the lowest index), one component after the other. All components advance together, one numpy pass per level:
    the frontier's neighbours in frontier and CSR order, the unvisited ones kept once each (at one of their
    occurrences: the first in practice, numpy writing repeated indices in order)."""
    if num_nodes == 0:
        return np.empty(0, np.int64)
    degree = np.diff(indptr)
    _, comp = csgraph.connected_components(_adjacency(indptr, indices, num_nodes), directed=False)
    best = np.zeros(int(comp.max()) + 1, np.int64)
    np.maximum.at(best, comp, degree)
    candidates = np.flatnonzero(degree == best[comp])
    _, first = np.unique(comp[candidates], return_index=True)
    frontier = candidates[first]  # the root of component 0, 1, ...
    visited = np.zeros(num_nodes, bool)
    visited[frontier] = True
    stamp = np.empty(num_nodes, np.int64)
    levels = []
    while frontier.size:
        levels.append(frontier)
        counts = degree[frontier]
        ends = np.cumsum(counts)
        slots = np.arange(ends[-1] if ends.size else 0) + np.repeat(indptr[frontier] - (ends - counts), counts)
        reached = indices[slots].astype(np.int64)
        reached = reached[~visited[reached]]
        position = np.arange(reached.size)
        stamp[reached[::-1]] = position[::-1]
        frontier = reached[stamp[reached] == position]
        visited[frontier] = True
    order = np.concatenate(levels)
    # each level lists its components in label order: a stable sort by component merges depth sorted runs
    return order[np.argsort(comp[order], kind="stable")]


def label_propagation(indptr: np.ndarray, indices: np.ndarray, num_nodes: int, *, rounds: int = 5, seed: int = 0,
                      tol: float = 1e-3) -> np.ndarray:
    """``labels: (N,) int64`` after at most ``rounds`` rounds of synchronous label propagation, stopping early
    when fewer than ``tol * N`` labels change. Labels start as a random permutation of ``0..N-1`` (``seed``); in a
    round every node takes, at once, the most frequent label among its neighbours and itself (its own vote damps
    the two-colour oscillation of synchronous updates), ties to the smallest label (random, the labels being a
    random permutation). Then one pass without the own vote for the nodes that no neighbour shares a label with
    (a leaf whose own label won its 1:1 tie joins its neighbour). One round: one sort of ``2E + N`` int64 keys
    ``node * N + label``, O(E log E), 16 bytes per CSR entry."""
    n = int(num_nodes)
    labels = np.random.default_rng(seed).permutation(n).astype(np.int64)
    if n == 0:
        return labels
    base = np.repeat(np.arange(n, dtype=np.int64) * n, np.diff(indptr))
    for _ in range(rounds):
        new = _majority(np.concatenate([base + labels[indices], np.arange(n, dtype=np.int64) * n + labels]), labels)
        changed = int(np.count_nonzero(new != labels))
        labels = new
        if changed < tol * n:
            break
    same = labels[indices] == labels[base // n]
    lonely = (np.bincount(base[same] // n, minlength=n) == 0) & (np.diff(indptr) > 0)
    if rounds and lonely.any():
        labels = np.where(lonely, _majority(base + labels[indices], labels), labels)
    return labels


def _majority(keys: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``(N,)``: for each node with a key ``node * N + label`` in ``keys: (K,)`` (sorted here, in place), its most
    frequent label, ties to the smallest; ``labels`` for the others."""
    n = labels.size
    keys.sort()
    starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    counts = np.diff(np.append(starts, keys.size))
    row, label = np.divmod(keys[starts], n)
    score = counts * n + (n - 1 - label)  # most votes first, then the smallest label
    row_starts = np.flatnonzero(np.concatenate([[True], row[1:] != row[:-1]]))
    new = labels.copy()
    new[row[row_starts]] = n - 1 - np.maximum.reduceat(score, row_starts) % n
    return new


def metis_parts(indptr: np.ndarray, indices: np.ndarray, num_nodes: int, num_parts: int, *, seed: int = 0,
                needed_by: str = "the 'metis' node order", instead: str = "or another order") -> np.ndarray:
    """``parts: (N,) int64``, the METIS part (``0..num_parts-1``) of each node of the symmetric CSR, by ``pymetis``
    (also Cluster-GCN's, :func:`gaescale.training.samplers.metis_parts`); ``needed_by`` and ``instead`` name what
    needs pymetis and what to use without it, in the error when it is not installed."""
    if num_parts <= 1 or num_nodes <= 1:
        return np.zeros(num_nodes, np.int64)
    pymetis = require("pymetis", needed_by, instead)
    adjacency = pymetis.CSRAdjacency(np.asarray(indptr, np.int64), np.asarray(indices))
    _, parts = pymetis.part_graph(num_parts, adjacency, options=pymetis.Options(seed=seed))
    return np.asarray(parts, np.int64)


def _adjacency(indptr: np.ndarray, indices: np.ndarray, num_nodes: int) -> sp.csr_matrix:
    """The CSR pattern as a SciPy matrix (int8 ones) for scipy.sparse.csgraph."""
    return sp.csr_matrix((np.ones(indices.size, np.int8), indices, indptr), shape=(num_nodes, num_nodes))
