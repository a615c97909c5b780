"""The edge list every reader returns (:mod:`gaescale.data.readers`) and every later step takes."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class EdgeList:
    """Edges as node indices. ``edge_index: (2, E)`` int64 in ``[0, num_nodes)``; ``node_ids: (N,)`` the
    original id of each index (int64 or str objects), or None when indices are the ids (``.npy``/``.npz``)."""

    edge_index: np.ndarray
    num_nodes: int
    node_ids: np.ndarray | None
    x: np.ndarray | None = None  # features stored with the graph (.npz 'x')
    edge_weight: np.ndarray | None = None  # (E,) float32, the weight of each edge_index column; None: all 1
    source: str = ""
