"""What a run hands between its steps and returns: the graph's sizes once it is let go, what training left, and the
:class:`RunResult` that :func:`gaescale.train` returns."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch


@dataclass
class RunResult:
    model: torch.nn.Module  # a GAE (or VGAE), or a directed run's DirectedGAE
    embeddings: np.ndarray  # (N, d) float32, row i = node_ids[i]
    node_ids: np.ndarray
    metrics: dict[str, Any]
    out_dir: Path | None
    node_bias: np.ndarray | None = None  # (N,) float32 with decoder='bias': s_ij = z_i . z_j + b_i + b_j
    csr: tuple | None = None  # (indptr (N + 1,), indices (2E,)): the cleaned input graph, as graph.npz (to_pyg)


@dataclass
class Sizes:
    """What the steps after reading need to know of the graph (which is let go once it is split)."""

    num_nodes: int
    num_edges: int
    num_features: int | None
    strategy: str
    prepared: Path | None


@dataclass
class Fitted:
    """What training left: the fit's result, ``z: (N, d)`` on the CPU, the block of layer-wise inference
    (None: one forward pass), the seconds embedding took, and the memory measured around training."""

    result: Any
    z: torch.Tensor | None
    block: int | None
    embed_seconds: float
    memory: dict[str, Any]
    features: Any = None  # the training graph's pair features (gaescale.structure) of a model with a structural part
