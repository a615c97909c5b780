"""Encoders: modules mapping ``(x, graph) -> z``.

Any ``nn.Module`` whose ``forward(x, graph)`` returns ``z: (N, d)`` is an encoder; ``x`` is the
``(N, F)`` feature tensor or ``None`` for a featureless graph, ``graph`` a :class:`gaescale.Graph`.
"""
from __future__ import annotations

import math
import warnings
import weakref
from collections.abc import Sequence

import torch
from torch import nn

from .devices import index_on
from .errors import ParameterError
from .graph import Graph
from .sparse import SparseOperator, csr_mm


def _check_dims(owner: str, in_dim: int | None, dims: Sequence[int]) -> list[int]:
    dims = list(dims)
    if not dims or any(not isinstance(d, int) or d < 1 for d in dims):
        raise ParameterError("dims", owner, "a non-empty list of ints >= 1", dims)
    if in_dim is not None and (not isinstance(in_dim, int) or in_dim < 1):
        raise ParameterError("in_dim", owner, "an int >= 1 or None (featureless)", in_dim)
    return dims


class _Propagated:
    """Caches ``A x`` for an input ``x`` that does not require grad (the first GCN layer's input).

    A hit needs the very same operator and tensor objects (held by weak references, so an object that
    died cannot be mistaken for a new one at the same address: each Cluster-GCN batch builds a new
    subgraph and a new feature slice, often of the same shape) and an unchanged version counter, so an
    in-place change of ``x`` invalidates it.
    """

    def __init__(self):
        self._op, self._x, self._version, self._value = None, None, None, None

    def __call__(self, op: SparseOperator, x: torch.Tensor) -> torch.Tensor:
        if x.requires_grad:
            return op @ x
        hit = (self._op is not None and self._op() is op and self._x() is x and self._version == x._version)
        if not hit:
            self._op, self._x, self._version = weakref.ref(op), weakref.ref(x), x._version
            self._value = (op @ x).detach()
        return self._value


class _Stacked(nn.Module):
    """Layers of widths ``in_dim -> dims[0] -> ... -> dims[-1]`` with bias, ReLU and dropout between them.
    ``in_dim=None`` (featureless): identity input features, i.e. each first-layer weight is an ``(N, h1)`` table."""

    def __init__(self, owner: str, in_dim: int | None, dims: Sequence[int], num_nodes: int | None, dropout: float,
                 weights_per_layer: int, table: str = "weights"):
        super().__init__()
        dims = _check_dims(owner, in_dim, dims)
        if in_dim is None and not (isinstance(num_nodes, int) and num_nodes >= 1):
            raise ParameterError("num_nodes", owner, "an int >= 1 when in_dim is None (featureless)", num_nodes)
        if not 0.0 <= float(dropout) < 1.0:
            raise ParameterError("dropout", owner, "a float in [0, 1)", dropout)
        if table not in ("weights", "input") or (table == "input" and (in_dim is not None or weights_per_layer != 1)):
            raise ParameterError("table", owner, "'weights', or 'input' for a featureless GCN (in_dim=None)", table)
        self.featureless = in_dim is None
        # table='input': the featureless table lives outside the module (gaescale.training.buckets.DiskTable), and
        # forward's x holds its rows for the graph's nodes; the first layer's weight is then empty, (h1, 0)
        self.table_in_input = table == "input"
        widths = [(0 if self.table_in_input else num_nodes) if in_dim is None else in_dim] + dims
        with warnings.catch_warnings():  # table='input': the empty first weight's "zero-element tensor" warning
            warnings.filterwarnings("ignore", "Initializing zero-element tensors")
            self.layers = nn.ModuleList(
                nn.ModuleList(nn.Linear(a, b, bias=False) for _ in range(weights_per_layer))
                for a, b in zip(widths[:-1], widths[1:]))
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(b)) for b in dims)
        self.dropout = float(dropout)
        self.checkpoint_activations = False  # recompute each hidden layer in backward (torch.utils.checkpoint)
        self._cache = _Propagated()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for layer in self.layers:  # Glorot uniform, as in the GAE reference implementation
            for lin in layer:
                bound = math.sqrt(6.0 / (lin.in_features + lin.out_features))
                nn.init.uniform_(lin.weight, -bound, bound)
        for b in self.biases:
            nn.init.zeros_(b)

    @property
    def device(self) -> torch.device:
        """Where the parameters are, and so where the graph's operators (built on the CPU) are used."""
        return self.biases[0].device

    def _on_device(self, op: SparseOperator) -> SparseOperator:
        return op.on(self.device)

    @staticmethod
    def _propagate(op: SparseOperator, lin: nn.Linear, h: torch.Tensor) -> torch.Tensor:
        """``A h W^T``, multiplying by ``W`` first unless that widens the sparse product. At equal widths ``W`` goes
        first too: the linear map then keeps ``h`` for its gradient (alive anyway, as the ReLU's output) and the
        sparse product keeps nothing, where ``W (A h)`` keeps ``A h``: one ``(N, width)`` activation less."""
        return op @ lin(h) if lin.in_features >= lin.out_features else lin(op @ h)

    @staticmethod
    def _table(lin: nn.Linear, graph: Graph) -> torch.Tensor:
        """A featureless first layer's ``I W^T``: the ``(N, h1)`` table, or its rows for a subgraph."""
        if graph.node_ids is None:
            return lin.weight.T
        return lin.weight.T[index_on(graph.node_ids, lin.weight)]

    def _first(self, op: SparseOperator, lin: nn.Linear, x: torch.Tensor | None, graph: Graph) -> torch.Tensor | None:
        """``A X W^T`` for the first layer: a table product when featureless, cached ``A X`` for constant x."""
        if self.featureless:
            return op @ (x if self.table_in_input else self._table(lin, graph))  # A I W^T
        if not x.requires_grad:
            return self._cache(op, x) @ lin.weight.T
        return None

    def forward(self, x: torch.Tensor | None, graph: Graph) -> torch.Tensor:
        """``x: (N, F)`` or None, returns ``z: (N, d)``. With ``checkpoint_activations``, layers after the
        first keep only their input for backward and recompute the rest (dropout masks included)."""
        h = x
        for i in range(len(self.layers)):
            if i and self.checkpoint_activations and self.training and torch.is_grad_enabled():
                from torch.utils.checkpoint import checkpoint
                h = checkpoint(self._layer, i, h, graph, use_reentrant=False)
            else:
                h = self._layer(i, h, graph)
        return h

    @torch.no_grad()
    def layerwise(self, x: torch.Tensor | None, graph: Graph, block: int = 1 << 16, *, buffers=None) -> torch.Tensor:
        """The evaluation-mode output ``(N, d)``, computed layer by layer over ``block`` rows of the graph's
        operator at a time (PyG's layer-wise inference): each layer reads the CSR one row block at a time
        (:meth:`Graph.adjacency_block`, the 0/1 rows; the normalisation is applied to the dense side), so a
        memory-mapped graph stays on disk and no operator over the whole graph is built. Memory: the
        layer's input and output for all nodes, its input times ``W`` when that is narrower, one block;
        ``buffers(shape) -> Tensor`` gives those ``(N, width)`` arrays (default: fresh tensors;
        :class:`gaescale.outputs.MappedBuffers`: a file's pages, so that only a block is anonymous memory).
        Equals ``forward`` in eval mode up to float rounding."""
        return self.run_layers(x, graph, lambda start, stop: graph.adjacency_block(start, stop), block=block,
                               buffers=buffers)

    @torch.no_grad()
    def run_layers(self, x: torch.Tensor | None, graph: Graph, adjacency_rows, *, block: int,
                   extend=None, buffers=None) -> torch.Tensor:
        """The layer loop of layer-wise inference over the ``graph.num_nodes`` rows of ``graph``: for each layer,
        its source once (what every block multiplies, :meth:`_layer_source`), then ``block`` rows at a time,
        ``adjacency_rows(start, stop)`` giving those rows' 0/1 adjacency (a sparse ``(stop - start, C)`` matrix).
        ``extend(source, k)``: the source with rows appended to its ``k``-th part, the one the operator multiplies
        (a shard's halo, :func:`gaescale.parallel.shards.embed_sharded`, whose ``C`` columns number them).
        ``buffers(shape)``: where the ``(N, width)`` arrays of each layer go (see :meth:`layerwise`)."""
        h, device = x, self.device
        for i in range(len(self.layers)):
            source = self._layer_source(i, h, graph, buffers, block)
            if extend is not None:
                source = extend(source, self._propagated)
            out = None
            for start in range(0, graph.num_nodes, block):
                stop = min(graph.num_nodes, start + block)
                rows = self._layer_block(i, h, source, adjacency_rows(start, stop).to(device), start, stop)
                if out is None:
                    out = (buffers or rows.new_empty)((graph.num_nodes, rows.shape[1]))
                out[start:stop] = rows
            h = out if out is not None else torch.empty((0, self.lins[i].out_features), device=device)  # no rows here
        return h

    def _source(self, i: int, lin: nn.Linear, h: torch.Tensor | None, graph: Graph, buffers=None,
                block: int = 1 << 16):
        """``(src, post)``: what the layer's operator multiplies (the featureless table, ``h W^T`` when that
        is narrower, else ``h``) and the linear map still to apply after it (or None). With ``buffers``
        (layer-wise inference), ``h W^T`` is computed ``block`` rows at a time into one."""
        if i == 0 and self.featureless:
            return (h if self.table_in_input else self._table(lin, graph)), None
        if lin.in_features <= lin.out_features:
            return h, lin
        if buffers is None:
            return lin(h), None
        return by_rows(lambda a, b: lin(h[a:b]), (h.shape[0], lin.out_features), buffers, block), None

    def _finish(self, h: torch.Tensor, i: int) -> torch.Tensor:
        b = self.biases[i]
        h = h.add_(b) if h.grad_fn is not None else h + b  # in place when h is a fresh result: one buffer less
        if i < len(self.layers) - 1:
            h = torch.relu_(h)
            if self.dropout and self.training:
                h = nn.functional.dropout(h, self.dropout, training=True)
        return h

    @property
    def lins(self) -> list[nn.Linear]:
        """The first weight of each layer (the only one for GCN)."""
        return [layer[0] for layer in self.layers]


class GCN(_Stacked):
    """Graph convolutional encoder (Kipf & Welling): ``H' = A_hat H W + b`` with ReLU between layers.

    ``GCN(in_dim, [h1, ..., d])``: ``in_dim`` features per node, hidden widths, output width ``d``.
    ``in_dim=None`` with ``num_nodes`` gives a featureless encoder with identity input features,
    stored as the learnable first-layer table ``W1: (N, h1)`` (``A_hat I W1 = A_hat W1``).
    ``table='input'`` (featureless only) keeps that table outside the module: ``forward(x, graph)`` is then given
    its rows for the graph's nodes, ``x: (n, h1)`` (a table on disk trained in partitions,
    :class:`gaescale.training.buckets.PartitionBuckets`); the model is the same.
    ``GCN(in_dim, [d])`` is the linear one-hop encoder ``A_hat X W`` (see :func:`linear_encoder`).
    Each layer multiplies by ``W`` before propagating when that narrows the features, so every
    sparse product runs at the smaller width; ``A_hat X`` of a constant input is computed once.
    """

    def __init__(self, in_dim: int | None, dims: Sequence[int], *, num_nodes: int | None = None,
                 dropout: float = 0.0, table: str = "weights"):
        super().__init__("GCN", in_dim, dims, num_nodes, dropout, weights_per_layer=1, table=table)

    def _layer(self, i: int, h: torch.Tensor | None, graph: Graph) -> torch.Tensor:
        op, lin = self._on_device(graph.gcn_operator), self.layers[i][0]
        out = self._first(op, lin, h, graph) if i == 0 else None
        return self._finish(out if out is not None else self._propagate(op, lin, h), i)

    _propagated = 1  # which part of _layer_source's tuple the operator multiplies (the rest is read by row)

    def _layer_source(self, i: int, h: torch.Tensor | None, graph: Graph, buffers=None, block: int = 1 << 16):
        src, post = self._source(i, self.layers[i][0], h, graph, buffers, block)
        scale = graph.gcn_scale.to(self.device)
        # D^-1/2 (A + I) D^-1/2 src = s * (A (s * src) + s * src)
        if buffers is None:
            return scale, scale * src, post
        return scale, by_rows(lambda a, b: scale[a:b] * src[a:b], tuple(src.shape), buffers, block), post

    def _layer_block(self, i: int, h, source, rows: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        scale, scaled, post = source
        y = scale[start:stop] * (csr_mm(rows, scaled) + scaled[start:stop])
        return self._finish(post(y) if post is not None else y, i)


def by_rows(rows, shape: tuple[int, int], buffers, block: int) -> torch.Tensor:
    """The ``shape`` array ``buffers(shape)`` filled ``block`` rows at a time with ``rows(start, stop)``."""
    out = buffers(shape)
    for start in range(0, shape[0], block):
        out[start:start + block] = rows(start, min(shape[0], start + block))
    return out


def linear_encoder(in_dim: int | None, dim: int, *, num_nodes: int | None = None) -> GCN:
    """The linear one-hop encoder ``Z = A_hat X W`` (Salha et al. 2020): one GCN layer, no activation."""
    return GCN(in_dim, [dim], num_nodes=num_nodes)


class SAGE(_Stacked):
    """GraphSAGE encoder with the mean aggregator (Hamilton et al. 2017):
    ``H' = H W_self + mean_{j in N(i)} h_j W_neigh + b``, ReLU between layers.

    Same arguments as :class:`GCN`; featureless graphs get identity features (two ``(N, h1)`` tables).
    """

    def __init__(self, in_dim: int | None, dims: Sequence[int], *, num_nodes: int | None = None,
                 dropout: float = 0.0):
        super().__init__("SAGE", in_dim, dims, num_nodes, dropout, weights_per_layer=2)

    def _layer(self, i: int, h: torch.Tensor | None, graph: Graph) -> torch.Tensor:
        op, (lin_self, lin_neigh) = self._on_device(graph.mean_operator), self.layers[i]
        neigh = self._first(op, lin_neigh, h, graph) if i == 0 else None
        if neigh is None:
            neigh = self._propagate(op, lin_neigh, h)
        own = self._table(lin_self, graph) if (i == 0 and self.featureless) else lin_self(h)
        return self._finish(neigh.add_(own) if neigh.grad_fn is not None else neigh + own, i)

    _propagated = 0

    def _layer_source(self, i: int, h: torch.Tensor | None, graph: Graph, buffers=None, block: int = 1 << 16):
        src, post = self._source(i, self.layers[i][1], h, graph, buffers, block)
        own = self._table(self.layers[i][0], graph) if (i == 0 and self.featureless) else None
        return src, post, own, graph.mean_scale.to(self.device)

    def _layer_block(self, i: int, h, source, rows: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        src, post, table, inv_degree = source
        neigh = inv_degree[start:stop] * csr_mm(rows, src)
        own = table[start:stop] if table is not None else self.layers[i][0](h[start:stop])
        return self._finish((post(neigh) if post is not None else neigh) + own, i)


ENCODERS = {"gcn": GCN, "sage": SAGE}
