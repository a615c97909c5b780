"""Train/validation/test split of undirected edges for link prediction.

Held-out edges are removed from the graph the encoder sees. Validation and test non-edges are
sampled uniformly among node pairs that are not edges of the *full* graph, disjoint from each
other. Everything is O(E log E): membership tests are binary searches in sorted pair keys.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import GraphError, ParameterError
from .graph import Graph


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

    def train_graph(self) -> Graph:
        return Graph.from_edge_index(self.train, self.num_nodes, canonical=True)


def _keys(pairs: np.ndarray, n: int) -> np.ndarray:
    return np.minimum(pairs[0], pairs[1]) * np.int64(n) + np.maximum(pairs[0], pairs[1])


def sample_non_edges(count: int, num_nodes: int, forbidden_keys: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``count`` distinct pairs ``(2, count)``, ``u < v``, drawn uniformly among pairs whose key
    ``u * N + v`` is not in the sorted array ``forbidden_keys``."""
    total_pairs = num_nodes * (num_nodes - 1) // 2
    if count > total_pairs - forbidden_keys.size:
        raise GraphError(f"cannot sample {count:,} non-edges: the graph has only "
                         f"{total_pairs - forbidden_keys.size:,} node pairs that are not edges.")
    found = np.empty(0, np.int64)
    while found.size < count:
        need = count - found.size
        m = int(need * 1.2) + 16
        u = rng.integers(0, num_nodes, m)
        v = rng.integers(0, num_nodes, m)
        ok = u != v
        k = np.minimum(u, v)[ok] * np.int64(num_nodes) + np.maximum(u, v)[ok]
        pos = np.searchsorted(forbidden_keys, k)
        pos = np.minimum(pos, max(forbidden_keys.size - 1, 0))
        if forbidden_keys.size:
            k = k[forbidden_keys[pos] != k]
        # keep first occurrences in draw order (np.unique sorts; restore order for reproducible truncation)
        merged = np.concatenate([found, k])
        _, first = np.unique(merged, return_index=True)
        found = merged[np.sort(first)]
    found = found[:count]
    return np.stack([found // num_nodes, found % num_nodes])


def split_edges(graph: Graph, val_fraction: float = 0.05, test_fraction: float = 0.10, *, seed: int = 0) -> EdgeSplit:
    """Split the undirected edges of ``graph`` (fractions of its edges, rounded down)."""
    for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not (isinstance(value, (int, float)) and 0.0 <= value < 1.0):
            raise ParameterError(name, "split_edges", "a float in [0, 1)", value)
    graph.require_edges()
    edges = graph.edge_index()
    e = edges.shape[1]
    n_val, n_test = int(e * val_fraction), int(e * test_fraction)
    n_train = e - n_val - n_test
    if n_train <= 0:
        raise ParameterError("val_fraction + test_fraction", "split_edges",
                             f"small enough to leave training edges (the graph has {e:,} edges)",
                             round(val_fraction + test_fraction, 6))
    rng = np.random.default_rng(seed)
    perm = rng.permutation(e)
    pick = lambda idx: edges[:, np.sort(idx)]  # noqa: E731 - sorted keeps the CSR build cheap
    train, val_pos, test_pos = pick(perm[:n_train]), pick(perm[n_train:n_train + n_val]), pick(perm[n_train + n_val:])
    all_keys = _keys(edges, graph.num_nodes)  # sorted, since edges come from sorted CSR rows
    neg = sample_non_edges(n_val + n_test, graph.num_nodes, all_keys, rng)
    return EdgeSplit(train, val_pos, neg[:, :n_val], test_pos, neg[:, n_val:], graph.num_nodes)
