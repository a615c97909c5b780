"""The embedded default graph: a deterministic community graph at the user's scale.

Nodes belong to communities; most edges join members of one community, the rest are random, and
node activity is heavy-tailed (log-normal), so degrees vary. Each node's features are its
community's random centroid plus noise, so both the structure and the features predict links.
Node numbering is a random permutation of the communities: no locality a real graph would lack.
"""
from __future__ import annotations

import numpy as np

from ..errors import ParameterError
from .readers import EdgeList


def community_graph(num_nodes: int = 770_000, num_edges: int = 4_600_000, *, num_features: int = 8,
                    community_size: int = 100, p_in: float = 0.8, noise: float = 1.0, seed: int = 0) -> EdgeList:
    """An :class:`EdgeList` with exactly ``num_edges`` undirected edges (``u < v``, unique, no loops)
    and features ``x: (num_nodes, num_features)`` float32."""
    if not isinstance(num_nodes, int) or num_nodes < 4:
        raise ParameterError("num_nodes", "community_graph", "an int >= 4", num_nodes)
    max_edges = num_nodes * (num_nodes - 1) // 2
    if not isinstance(num_edges, int) or not 1 <= num_edges <= max_edges // 2:
        raise ParameterError("num_edges", "community_graph", f"an int in [1, {max_edges // 2}] for {num_nodes} nodes",
                             num_edges)
    rng = np.random.default_rng(seed)
    n_comm = max(1, num_nodes // community_size)
    comm = rng.integers(0, n_comm, num_nodes)
    members = np.argsort(comm, kind="stable")
    start = np.concatenate([[0], np.cumsum(np.bincount(comm, minlength=n_comm))])
    activity = rng.lognormal(0.0, 1.0, num_nodes)
    cum = np.cumsum(activity)
    keys = np.empty(0, np.int64)
    while keys.size < num_edges:
        m = int((num_edges - keys.size) * 1.25) + 64
        u = np.minimum(np.searchsorted(cum, rng.random(m) * cum[-1]), num_nodes - 1)
        c = comm[u]
        size = start[c + 1] - start[c]
        inside = members[start[c] + (rng.random(m) * size).astype(np.int64)]
        outside = np.minimum(np.searchsorted(cum, rng.random(m) * cum[-1]), num_nodes - 1)
        v = np.where(rng.random(m) < p_in, inside, outside)
        ok = u != v
        new = np.minimum(u, v)[ok] * np.int64(num_nodes) + np.maximum(u, v)[ok]
        merged = np.concatenate([keys, new])
        _, first = np.unique(merged, return_index=True)
        keys = merged[np.sort(first)]
    keys = np.sort(keys[:num_edges])
    edge_index = np.stack([keys // num_nodes, keys % num_nodes])
    centroids = rng.normal(0.0, 1.0, (n_comm, num_features))
    x = (centroids[comm] + noise * rng.normal(0.0, 1.0, (num_nodes, num_features))).astype(np.float32)
    return EdgeList(edge_index, num_nodes, None, x,
                    source=f"community_graph(N={num_nodes}, E={num_edges}, seed={seed})")
