"""Encoders: modules mapping ``(x, graph) -> z``.

Any ``nn.Module`` whose ``forward(x, graph)`` returns ``z: (N, d)`` is an encoder; ``x`` is the
``(N, F)`` feature tensor or ``None`` for a featureless graph, ``graph`` a :class:`gaescale.Graph`.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from .errors import ParameterError
from .graph import Graph
from .sparse import SparseOperator


def _check_dims(owner: str, in_dim: int | None, dims: Sequence[int]) -> list[int]:
    dims = list(dims)
    if not dims or any(not isinstance(d, int) or d < 1 for d in dims):
        raise ParameterError("dims", owner, "a non-empty list of ints >= 1", dims)
    if in_dim is not None and (not isinstance(in_dim, int) or in_dim < 1):
        raise ParameterError("in_dim", owner, "an int >= 1 or None (featureless)", in_dim)
    return dims


class _Propagated:
    """Caches ``A x`` for an input ``x`` that does not require grad (the first GCN layer's input).

    The key is the tensor's storage, shape and version counter, so an in-place change of ``x``
    invalidates it.
    """

    def __init__(self):
        self._key, self._value = None, None

    def __call__(self, op: SparseOperator, x: torch.Tensor) -> torch.Tensor:
        if x.requires_grad:
            return op @ x
        key = (id(op), x.data_ptr(), tuple(x.shape), x.dtype, x._version)
        if key != self._key:
            self._key, self._value = key, (op @ x).detach()
        return self._value


class GCN(nn.Module):
    """Graph convolutional encoder (Kipf & Welling): ``H' = A_hat H W + b`` with ReLU between layers.

    ``GCN(in_dim, [h1, ..., d])``: ``in_dim`` features per node, hidden widths, output width ``d``.
    ``in_dim=None`` with ``num_nodes`` gives a featureless encoder with identity input features,
    stored as the learnable first-layer table ``W1: (N, h1)`` (``A_hat I W1 = A_hat W1``).
    Each layer multiplies by ``W`` before propagating when that narrows the features, so every
    sparse product runs at the smaller width; ``A_hat X`` of a constant input is computed once.
    """

    def __init__(self, in_dim: int | None, dims: Sequence[int], *, num_nodes: int | None = None,
                 dropout: float = 0.0):
        super().__init__()
        dims = _check_dims("GCN", in_dim, dims)
        if in_dim is None and not (isinstance(num_nodes, int) and num_nodes >= 1):
            raise ParameterError("num_nodes", "GCN", "an int >= 1 when in_dim is None (featureless)", num_nodes)
        self.featureless = in_dim is None
        widths = [num_nodes if in_dim is None else in_dim] + dims
        self.lins = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in zip(widths[:-1], widths[1:]))
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(b)) for b in dims)
        self.dropout = float(dropout)
        self._cache = _Propagated()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in self.lins:  # Glorot uniform, as in the GAE reference implementation
            bound = math.sqrt(6.0 / (lin.in_features + lin.out_features))
            nn.init.uniform_(lin.weight, -bound, bound)
        for b in self.biases:
            nn.init.zeros_(b)

    def forward(self, x: torch.Tensor | None, graph: Graph) -> torch.Tensor:
        op = graph.gcn_operator
        h = x
        for i, (lin, b) in enumerate(zip(self.lins, self.biases)):
            if i == 0 and self.featureless:
                h = op @ lin.weight.T  # identity features: A_hat I W1
            elif i == 0 and not h.requires_grad:
                h = self._cache(op, h) @ lin.weight.T  # (A_hat X) W1 with A_hat X cached
            elif lin.in_features > lin.out_features:
                h = op @ lin(h)
            else:
                h = lin(op @ h)
            h = h.add_(b) if h.requires_grad and h.grad_fn is not None else h + b  # in place: saves an (N, w) buffer
            if i < len(self.lins) - 1:
                h = torch.relu_(h)
                if self.dropout and self.training:
                    h = nn.functional.dropout(h, self.dropout, training=True)
        return h
