"""PyTorch Geometric in and out: a PyG ``Data`` as gaescale's input (:func:`from_pyg`, ``train(data=pyg_data)``),
a PyG encoder trained under gaescale's losses and strategies (:class:`PyGEncoder`, ``train(encoder=...)``); a
run's embeddings as a PyG ``Data`` is :func:`gaescale.to_pyg` (:mod:`gaescale.run.finished`, where runs are read).

torch_geometric stays optional: it is imported only inside ``to_pyg``. :func:`from_pyg` reads any object with
``edge_index`` (and optionally ``x``, ``edge_weight`` or ``edge_attr``, ``num_nodes``, ``node_ids``) and
:class:`PyGEncoder` wraps any module whose ``forward`` takes ``(x, edge_index)`` or ``(x, edge_index,
edge_weight)``, so neither needs PyG installed.
"""
from __future__ import annotations

import dataclasses
import inspect
import math
import weakref

import numpy as np
import torch
from torch import nn

from ._moved import moved_names
from .data.readers import MAX_NODES, EdgeList
from .errors import Got, ParameterError
from .graph import Graph


def _shape(a) -> Got:
    return Got(f"shape {tuple(a.shape)}")


def _array(value, name: str, owner: str = "from_pyg") -> np.ndarray:
    """A tensor or array attribute of a Data as a NumPy array (a CPU copy of a tensor)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value
    raise ParameterError(name, owner, "a torch.Tensor or a NumPy array", Got(type(value).__name__))


def is_pyg_data(data) -> bool:
    """Whether ``data`` is to be read by :func:`from_pyg` (duck-typed: anything but an :class:`EdgeList` with an
    ``edge_index`` attribute; torch_geometric is not imported)."""
    return data is not None and not isinstance(data, EdgeList) and hasattr(data, "edge_index")


def is_edge_list_maker(data) -> bool:
    """Whether ``data`` is a function that makes the edge list (``train(data=function)``): callable, and neither an
    :class:`EdgeList` nor a PyG ``Data`` (which is callable too: it iterates over its attributes)."""
    return callable(data) and not isinstance(data, EdgeList) and not is_pyg_data(data)


def as_edge_list(data, owner: str = "train") -> EdgeList | None:
    """``data`` (``train(data=...)``, ``owner`` the function given it) as an :class:`EdgeList`: None, an
    :class:`EdgeList` checked (:func:`check_edge_list`), or :func:`from_pyg` of a PyG ``Data``; anything else is
    refused."""
    if data is None:
        return None
    if isinstance(data, EdgeList):
        return check_edge_list(data, owner)
    if is_pyg_data(data):
        return from_pyg(data)
    raise ParameterError("data", owner, "an EdgeList (e.g. gaescale.community_graph(...)) or a torch_geometric Data",
                         Got(type(data).__name__))


def check_edge_list(el: EdgeList, owner: str = "train") -> EdgeList:
    """``el`` checked as :func:`from_pyg` checks a ``Data`` (each field named ``data.<field>``): ``num_nodes`` an int
    in ``[1, MAX_NODES]``, ``edge_index: (2, E)`` node indices in ``[0, num_nodes)`` (integers, or floats holding
    whole numbers), ``x: (num_nodes, F)`` finite, ``edge_weight: (E,)`` finite and >= 0, ``node_ids: (num_nodes,)``.
    Returns ``el``, or a copy with ``edge_index`` as int64 where it was not."""
    n = el.num_nodes
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_NODES:
        raise ParameterError("data.num_nodes", owner, f"an int in [1, {MAX_NODES}]", n)
    n = int(n)
    ei = _array(_listed(el.edge_index), "data.edge_index", owner)
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise ParameterError("data.edge_index", owner, "a (2, E) array of node indices", _shape(ei))
    if np.issubdtype(ei.dtype, np.floating):
        bad = ~np.isfinite(ei) | (ei != np.round(ei))
        if bad.any():
            col = int(np.argmax(bad.any(axis=0)))
            value = ei[:, col][bad[:, col]][0]
            raise ParameterError("data.edge_index", owner, "whole-number node indices",
                                 Got(f"{float(value)!r} at column {col}"))
    elif not np.issubdtype(ei.dtype, np.integer):
        raise ParameterError("data.edge_index", owner, "a (2, E) array of integer node indices",
                             Got(f"dtype {ei.dtype}"))
    if ei.size and (ei.min() < 0 or ei.max() >= n):
        raise ParameterError("data.edge_index", owner, f"node indices in [0, num_nodes={n})",
                             Got(f"indices from {_index(ei.min())} to {_index(ei.max())}"))
    ei = np.ascontiguousarray(ei, dtype=np.int64)
    if el.x is not None:
        x = _array(_listed(el.x), "data.x", owner)
        if x.ndim != 2 or x.shape[0] != n or not (np.issubdtype(x.dtype, np.number) or x.dtype == bool):
            raise ParameterError("data.x", owner, f"(num_nodes={n}, F) numeric features, one row per node",
                                 Got(f"shape {x.shape}, dtype {x.dtype}"))
        if not np.isfinite(x).all():
            row = int(np.argwhere(~np.isfinite(x))[0, 0])
            raise ParameterError("data.x", owner, "finite features", Got(f"a non-finite value in row {row}"))
    if el.edge_weight is not None:
        w = _array(_listed(el.edge_weight), "data.edge_weight", owner)
        if w.shape != (ei.shape[1],):
            raise ParameterError("data.edge_weight", owner, f"({ei.shape[1]},) edge weights, one per column of "
                                                            "edge_index", _shape(w))
        bad = ~np.isfinite(w) | (w < 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise ParameterError("data.edge_weight", owner, "finite edge weights >= 0",
                                 Got(f"{float(w[i])!r} at column {i}"))
    if el.node_ids is not None and np.shape(el.node_ids) != (n,):
        raise ParameterError("data.node_ids", owner, f"(num_nodes={n},) ids, one per node", _shape(np.asarray(
            el.node_ids)))
    if ei is el.edge_index and n == el.num_nodes:
        return el
    return dataclasses.replace(el, edge_index=ei, num_nodes=n)


def _listed(value):
    """A list or tuple (an EdgeList built by hand) as an array; anything else as it is."""
    return np.asarray(value) if isinstance(value, (list, tuple)) else value


def _index(v) -> str:
    """A node index for a message: ``5``, not ``5.0`` (a float array's)."""
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def from_pyg(data) -> EdgeList:
    """A PyG ``Data`` (or any object with its attributes) as an :class:`EdgeList`.

    ``edge_index: (2, E)`` node indices in ``[0, num_nodes)``; ``x: (N, F)`` features, optional; ``edge_weight:
    (E,)``, or else a one-column ``edge_attr: (E,)`` or ``(E, 1)``, the weight of each column of ``edge_index``
    (finite, >= 0), optional; ``num_nodes`` (default: ``x``'s rows, else the largest index + 1); ``node_ids:
    (N,)`` the original ids (as :func:`to_pyg` writes them), optional. Both directions of an undirected edge may
    be listed: the graph is built as from an edge-list file (:meth:`gaescale.Graph.from_edge_index`)."""
    if getattr(data, "edge_index", None) is None:
        raise ParameterError("data", "from_pyg", "a torch_geometric Data (or an object) with an 'edge_index' "
                                                 "attribute", Got(type(data).__name__ + " without edge_index"))
    ei = _array(data.edge_index, "data.edge_index")
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise ParameterError("data.edge_index", "from_pyg", "a (2, E) tensor of node indices", _shape(ei))
    if not np.issubdtype(ei.dtype, np.integer):
        raise ParameterError("data.edge_index", "from_pyg", "a (2, E) tensor of integer node indices",
                             Got(f"dtype {ei.dtype}"))
    ei = ei.astype(np.int64, copy=False)
    x = _features(data)
    num_nodes = _num_nodes(data, ei, x)
    rows_of_x = getattr(data, "num_nodes", None) is None and x is not None  # num_nodes: x's rows
    if rows_of_x and ei.size and ei.min() >= 0 and ei.max() >= num_nodes:
        raise ParameterError("data.x", "from_pyg", f"(N, F) features, one row per node: at least {int(ei.max()) + 1} "
                                                   f"rows (edge_index holds node indices up to {int(ei.max())})",
                             _shape(x))
    if ei.size and (ei.min() < 0 or ei.max() >= num_nodes):
        raise ParameterError("data.edge_index", "from_pyg", f"node indices in [0, num_nodes={num_nodes})",
                             Got(f"indices from {int(ei.min())} to {int(ei.max())}"))
    if num_nodes > MAX_NODES:
        name = "data.edge_index" if getattr(data, "num_nodes", None) is None else "data.num_nodes"
        raise ParameterError(name, "from_pyg", f"at most {MAX_NODES} nodes (node pair keys u * N + v must fit in 64 "
                                               "bits)", Got(f"{num_nodes} nodes"))
    if x is not None and x.shape[0] != num_nodes:
        raise ParameterError("data.x", "from_pyg", f"(num_nodes={num_nodes}, F) features, one row per node",
                             _shape(x))
    ids = getattr(data, "node_ids", None)
    if ids is not None:
        ids = np.asarray(ids.detach().cpu().numpy() if isinstance(ids, torch.Tensor) else ids)
        if ids.shape != (num_nodes,):
            raise ParameterError("data.node_ids", "from_pyg", f"(num_nodes={num_nodes},) ids, one per node",
                                 _shape(ids))
    return EdgeList(np.ascontiguousarray(ei), num_nodes, ids, x, source="the PyG Data",
                    edge_weight=_weights(data, ei.shape[1]))


def _features(data) -> np.ndarray | None:
    x = getattr(data, "x", None)
    if x is None:
        return None
    x = _array(x, "data.x")
    if x.ndim != 2 or not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise ParameterError("data.x", "from_pyg", "a 2-D (N, F) numeric tensor", Got(f"shape {x.shape}, "
                                                                                      f"dtype {x.dtype}"))
    x = np.ascontiguousarray(x, dtype=np.float32)
    if not np.isfinite(x).all():
        row = int(np.argwhere(~np.isfinite(x))[0, 0])
        raise ParameterError("data.x", "from_pyg", "finite features", Got(f"a non-finite value in row {row}"))
    return x


def _num_nodes(data, ei: np.ndarray, x: np.ndarray | None) -> int:
    n = getattr(data, "num_nodes", None)
    if n is None:
        return int(x.shape[0]) if x is not None else int(ei.max()) + 1 if ei.size else 0
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ParameterError("data.num_nodes", "from_pyg", "an int >= 1", n)
    return int(n)


def _weights(data, num_edges: int) -> np.ndarray | None:
    """``(E,)`` float32 weights of ``edge_weight``, else of a one-column ``edge_attr``; None when neither is set."""
    name, w = "data.edge_weight", getattr(data, "edge_weight", None)
    if w is None:
        name, w = "data.edge_attr", getattr(data, "edge_attr", None)
    if w is None:
        return None
    w = _array(w, name)
    if w.ndim == 2 and w.shape[1] == 1:
        w = w[:, 0]
    if w.ndim != 1 or w.shape[0] != num_edges:
        hint = " (a multi-column edge_attr is not a weight: delete it, or set edge_weight)" if w.ndim == 2 else ""
        raise ParameterError(name, "from_pyg", f"({num_edges},) or ({num_edges}, 1) edge weights, one per column of "
                                               f"edge_index{hint}", _shape(w))
    w = w.astype(np.float32)
    bad = ~np.isfinite(w) | (w < 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise ParameterError(name, "from_pyg", "finite edge weights >= 0", Got(f"{float(w[i])!r} at column {i}"))
    return w


def csr_edge_index(indptr: np.ndarray, indices: np.ndarray) -> torch.Tensor:
    """``(2, nnz)`` int64: the ``(row, column)`` of every entry of a CSR, in CSR order (both directions of each
    edge of a symmetric :class:`gaescale.Graph`; PyG's ``edge_index`` convention, row 0 the source)."""
    indptr = np.asarray(indptr, np.int64)
    rows = np.repeat(np.arange(indptr.size - 1, dtype=np.int64), np.diff(indptr))
    return torch.from_numpy(np.stack([rows, np.asarray(indices, np.int64)]))


def graph_weights(graph: Graph) -> np.ndarray | None:
    """The graph's edge weights in CSR order (``(nnz,)``, aligned with ``graph.indices``), or None (all 1)."""
    return graph.data


def _takes_edge_weight(module: nn.Module) -> bool:
    """Whether ``module.forward`` takes a third argument (``edge_weight``) after ``(x, edge_index)``."""
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in params)


class PyGEncoder(nn.Module):
    """A PyG encoder (``forward(x, edge_index)`` or ``forward(x, edge_index, edge_weight)``, e.g. stacked
    ``GCNConv``) as a gaescale encoder: ``forward(x, graph) -> z: (N, d)``, for :class:`gaescale.GAE` and
    ``gaescale.train(encoder=PyGEncoder(net), ...)``.

    The graph's ``edge_index: (2, 2E)`` (both directions, from its CSR) is built once per :class:`gaescale.Graph`
    and device and cached (weakly: a Cluster-GCN batch's subgraph is let go with it). ``edge_weight``: pass the
    graph's edge weights as the third argument (True), never (False), or where the graph has weights and the
    module's forward takes a third argument (None; a weighted graph with a two-argument forward is then an error,
    so that weights are never dropped silently). ``num_nodes`` and ``in_dim``: for a featureless graph, a learnt
    ``(num_nodes, in_dim)`` table is the module's input ``x`` (its rows for a subgraph).

    Layer-wise inference (a memory-mapped graph embedded block by block) needs gaescale's own encoders: the
    module's layers are not known here, so :meth:`layerwise` refuses.
    """

    def __init__(self, module: nn.Module, *, edge_weight: bool | None = None, num_nodes: int | None = None,
                 in_dim: int | None = None):
        super().__init__()
        if not isinstance(module, nn.Module):
            raise ParameterError("module", "PyGEncoder", "a torch.nn.Module", Got(type(module).__name__))
        if edge_weight not in (None, True, False):
            raise ParameterError("edge_weight", "PyGEncoder", "None, True or False", edge_weight)
        self.module, self.edge_weight = module, edge_weight
        if edge_weight and not _takes_edge_weight(module):
            raise ParameterError("edge_weight", "PyGEncoder", f"False or None: {type(module).__name__}.forward takes "
                                                              "no third argument (edge_weight)", edge_weight)
        if (num_nodes is None) != (in_dim is None):
            raise ParameterError("in_dim", "PyGEncoder", "given with num_nodes (a learnt (num_nodes, in_dim) input "
                                                         "table) or neither", in_dim)
        self.table = None
        if num_nodes is not None:
            for name, v in (("num_nodes", num_nodes), ("in_dim", in_dim)):
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise ParameterError(name, "PyGEncoder", "an int >= 1", v)
            self.table = nn.Parameter(torch.empty(num_nodes, in_dim))
            bound = math.sqrt(6.0 / (num_nodes + in_dim))
            nn.init.uniform_(self.table, -bound, bound)
        self.checkpoint_activations = False  # set by the pipeline; True is refused in forward
        self._edges = weakref.WeakKeyDictionary()  # Graph -> (device, edge_index, edge_weight or None)

    @property
    def device(self) -> torch.device:
        p = next(self.parameters(), None)
        return torch.device("cpu") if p is None else p.device

    def reset_parameters(self) -> None:
        """The wrapped module's ``reset_parameters`` (PyG's layers have one), or each submodule's that has one."""
        if hasattr(self.module, "reset_parameters"):
            self.module.reset_parameters()
        else:
            for m in self.module.modules():
                if m is not self.module and hasattr(m, "reset_parameters"):
                    m.reset_parameters()

    def edges(self, graph: Graph) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(edge_index: (2, 2E) int64, edge_weight: (2E,) float32 or None)`` of ``graph`` on this encoder's
        device, built once per graph."""
        device = self.device
        hit = self._edges.get(graph)
        if hit is not None and hit[0] == device:
            return hit[1], hit[2]
        ei = csr_edge_index(graph.indptr, graph.indices).to(device)
        w = graph_weights(graph)
        if w is not None:
            if self.edge_weight is None and not _takes_edge_weight(self.module):
                raise ParameterError("edge_weight", "PyGEncoder", f"False to ignore the graph's edge weights "
                                                                  f"({type(self.module).__name__}.forward takes no "
                                                                  "third argument), or a module that takes them",
                                     None)
            w = torch.as_tensor(np.asarray(w, np.float32)).to(device) if self.edge_weight is not False else None
        self._edges[graph] = (device, ei, w)
        return ei, w

    def forward(self, x: torch.Tensor | None, graph: Graph) -> torch.Tensor:
        """``x: (N, F)`` (None: the learnt table's rows), returns the module's ``z: (N, d)``."""
        if self.checkpoint_activations:
            raise ParameterError("checkpoint_activations", "train", "False with a PyGEncoder (its module's layers "
                                                                    "are not known to gaescale)", True)
        if x is None:
            if self.table is None:
                raise ParameterError("x", "PyGEncoder", "node features, or a PyGEncoder(module, num_nodes=N, "
                                                        "in_dim=F) whose learnt table stands for them", None)
            x = self.table if graph.node_ids is None else self.table[torch.as_tensor(graph.node_ids,
                                                                                     device=self.table.device)]
        ei, w = self.edges(graph)
        return self.module(x, ei) if w is None else self.module(x, ei, w)

    def layerwise(self, x, graph: Graph, block: int = 1 << 16):
        raise ParameterError("encoder", "layer-wise inference", "one of gaescale's own encoders (gcn, sage, "
                                                                "linear): a PyGEncoder's layers are not known, so "
                                                                "it embeds in one forward pass only",
                             Got(describe(self)))


def describe(encoder: nn.Module) -> str:
    """``PyGEncoder(GcnNet)``, or the class name of another custom encoder."""
    if isinstance(encoder, PyGEncoder):
        return f"PyGEncoder({type(encoder.module).__name__})"
    return type(encoder).__name__


def custom_encoder(options: dict) -> nn.Module | None:
    """Take a module given as ``train(encoder=...)`` out of ``options`` (the config's ``encoder`` is a name);
    None when ``encoder`` is a name or unset. A bare PyG module (``forward(x, edge_index)``) is refused with the
    wrapper to use: gaescale calls ``forward(x, graph)``."""
    enc = options.get("encoder")
    if not isinstance(enc, nn.Module):
        return None
    del options["encoder"]
    try:
        names = list(inspect.signature(enc.forward).parameters)
    except (TypeError, ValueError):
        names = []
    if "edge_index" in names[1:2]:
        raise ParameterError("encoder", "train", "a gaescale encoder, forward(x, graph): wrap a PyG module as "
                                                 "gaescale.pyg.PyGEncoder(module)", Got(type(enc).__name__))
    return enc


def check_custom_encoder(encoder: nn.Module, config, runtime, *, prepared: bool) -> None:
    """Refuse, before anything is read or trained, what a custom encoder cannot do: another process group
    (torchrun), a memory-mapped graph (embedded layer by layer), ``strategy='auto'`` (the planner predicts
    gaescale's own encoders), neighbour sampling without ``fanouts`` (one per message-passing layer, which
    gaescale cannot count), ``checkpoint_activations``; and the model options that the module's own layers decide
    (``hidden``, ``dropout``; ``dim`` but as the Hadamard decoder's input width)."""
    name = Got(describe(encoder))
    if runtime.world_size > 1:
        raise ParameterError("encoder", "train", "one of gaescale's own encoders under torchrun (the sharded and "
                                                 "data-parallel paths use their layers)", name)
    if prepared:
        raise ParameterError("encoder", "train", "one of gaescale's own encoders for a prepared graph (embedded "
                                                 "layer by layer); give the edge list or a Data instead", name)
    if config.strategy == "auto":
        raise ParameterError("strategy", "train", "'full', 'cluster', 'fastgae' or 'neighbor' with a custom "
                                                  "encoder (the planner predicts gaescale's own encoders)", "auto")
    if config.strategy == "neighbor" and config.fanouts is None:
        raise ParameterError("fanouts", "train", "given with strategy='neighbor' and a custom encoder (one fan-out "
                                                 "per message-passing layer)", None)
    if config.checkpoint_activations:
        raise ParameterError("checkpoint_activations", "train", "False with a custom encoder (its layers are not "
                                                                "known to gaescale)", True)
    for name, unset in (("hidden", config.hidden is None), ("dropout", config.dropout == 0.0)):
        if not unset:  # the module's own layers decide them: a value here would be silently ignored
            raise ParameterError(name, "train", "left unset with a custom encoder (its layers are its own)",
                                 getattr(config, name))
    if (config.decoder == "hadamard") != (config.dim is not None):
        raise ParameterError("dim", "train", "given with a custom encoder if and only if decoder='hadamard' (the "
                                             "encoder's output width, the MLP decoder's input)", config.dim)


def resolve_custom(config):
    """``config`` resolved for a custom encoder. Its encoder fields do not describe the module; they are filled in
    as a GCN with one layer per fan-out (what neighbour sampling checks ``fanouts`` against; two without), so that
    the configuration validates and every default (``lr``: 0.01) is set. model.pt names the module
    (:func:`gaescale.run.rundir.custom_encoder_name`)."""
    if config.resolved:
        return config
    depth = len(config.fanouts) if config.fanouts else 2
    return dataclasses.replace(config, encoder="gcn", hidden=(16,) * (depth - 1))


__getattr__ = moved_names(__name__)  # names that moved elsewhere (gaescale._moved)
