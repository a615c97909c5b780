"""``gaescale embed``: embeddings of every node of a (new) graph with a finished run's trained encoder, without
retraining, keyed by the graph's ids (old and new alike).

The encoder is rebuilt from ``RUN/model.pt`` and run in evaluation mode on the given graph, layer by layer over
row blocks of the CSR (:meth:`gaescale.encoders.GCN.layerwise`: no operator over the whole graph is built, and a
memory-mapped ``gaescale prepare`` directory stays on disk), so the graph may be as large as training's; at
770,000 nodes this was also faster than one forward pass (BENCHMARKS.md, "gaescale embed"). Only
an inductive encoder can do this: one with node features (GCN, SAGE, linear). A featureless run's first layer is a
learnt table with one row per training node, which has no row for a node it never saw: it is refused. So is a
run of a custom encoder (``train(encoder=module)``, e.g. a :class:`gaescale.pyg.PyGEncoder`): model.pt holds its
weights, not its code. A weighted run (``--weighted``) reads the edge list's weights as training did (its
``weight_column`` too), so the encoder's normalisation is the weighted one. A directed run (``--directed``) reads
the edges as directed and its source/target encoder embeds them in one forward pass (as training did); its rows
have the layout of its embeddings.npy, ``[z_s | z_t]`` or, with the bias decoder, ``[z_s, b_s, 1 | z_t, 1, b_t]``
(with the symmetric part, ``z_u`` after ``z_s`` and after ``z_t``).

Output (``out``, by suffix, each file written atomically)::

    FILE.npy        (N, d) float32, row i = line i + 1 of FILE.nodes.tsv (the ids, one per line); with the bias
                    decoder also FILE.bias.npy (N,) float32
    FILE.tsv/.csv   a header line, then one row per node: id, z0 ... z{d-1} [, bias]
    FILE.parquet    columns id, z0 ... z{d-1} [, bias]

With ``--decoder bias`` a node the run knew (same id, compared as text) keeps its learnt bias ``b_i``; a new node
gets the mean of the learnt biases (the bias of a typical node: the table is learnt per training node, and a new
node has no entry). The embeddings ``z`` of an undirected run never include the bias (as embeddings.npy); a
directed run's carry the source and target biases in their columns, a new node the mean of each.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..config import TrainConfig
from ..errors import InputFileError, OutputError, ParameterError, RunDirError
from ..graph import Graph
from ..outputs import write_ids, write_npy
from .rundir import RunDir

OUT_SUFFIXES = (".npy", ".tsv", ".csv", ".parquet")
BLOCK = 1 << 16  # rows of the operator per block of layer-wise inference (as the pipeline's)


@dataclass
class Embedded:
    """What :func:`embed` computed: ``node_ids: (N,)`` the graph's ids (int64 or str objects), ``embeddings:
    (N, d)`` float32 (row i = node_ids[i]), ``node_bias: (N,)`` float32 with the bias decoder (else None) and
    ``known: (N,)`` bool, whether the run knew the id."""

    node_ids: np.ndarray
    embeddings: np.ndarray
    node_bias: np.ndarray | None
    known: np.ndarray

    @property
    def num_new(self) -> int:
        return int((~self.known).sum())


def embed(run, edges, features=None, *, out=None, ids: str | None = None, header: str | None = None,
          block: int | str | None = "auto", log=None) -> Embedded:
    """Embed every node of the edge list ``edges`` (any format ``train`` reads, or a ``gaescale prepare``
    directory) with the trained encoder of ``run`` (a :class:`gaescale.Run` or its directory), and with ``out``
    write them (module docstring). ``features``: the node features, as ``train --features`` reads them (required: the
    encoder was trained with them; an ``.npz`` edge list's own ``x`` serves too). ``ids``/``header``: how to read
    a text edge list, by default the run's own settings (its config.json). ``block``: rows per block of
    layer-wise inference, None: one forward pass, ``"auto"``: layer by layer (65,536 rows; a directed run: one
    pass). Every check runs before the first write."""
    log = log or (lambda m: None)
    if block not in (None, "auto") and (not isinstance(block, int) or isinstance(block, bool) or block < 1):
        raise ParameterError("block", "embed", "an int >= 1, None or 'auto'", block)
    run = RunDir.of(run)
    out = None if out is None else check_out_path(out, inputs=(run.path, edges, features))
    state = _load_model_file(run)
    config = TrainConfig.from_dict(state["config"])
    if config.directed and isinstance(block, int):
        raise ParameterError("block", "embed", "None or 'auto' for a directed run (its source/target encoder embeds "
                                               "in one forward pass)", block)
    _refuse_custom_encoder(run, state)
    in_dim = state.get("in_dim")
    if in_dim is None:
        raise ParameterError("run", "embed", "a run trained with node features (train --features): this run is "
                             "featureless, its first layer a learnt table with one row per training node and none "
                             "for a node it never saw; to embed new nodes without retraining, train with --features "
                             "(node attributes, or e.g. each node's degree)", str(run.path))
    t = time.perf_counter()
    graph, x, node_ids = _read_graph(edges, features, ids or config.ids, header or config.header, in_dim,
                                     weighted=config.weighted, weight_column=config.weight_column,
                                     directed=config.directed)
    kind = "directed " if config.directed else "weighted " if graph.weighted else ""
    log(f"read {edges}: {graph.num_nodes:,} nodes, {graph.num_edges:,} {kind}edges, {in_dim} features per node "
        f"[{time.perf_counter() - t:.1f}s]")
    model = _rebuild(run, config, state)
    if block == "auto":
        block = None if config.directed else BLOCK
    t = time.perf_counter()
    rows = _known_rows(run, node_ids)
    if config.directed:
        result = Embedded(node_ids, _encode_directed(model, x, graph, rows), None, rows >= 0)
    else:
        result = Embedded(node_ids, encode(model, x, graph, block=block), _bias(model, rows), rows >= 0)
    how = "layer by layer" if block is not None else "in one pass"
    log(f"embedded {graph.num_nodes:,} nodes ({result.num_new:,} new to the run) {how} "
        f"[{time.perf_counter() - t:.1f}s]")
    if out is not None:
        try:
            write_embedded(out, result)
        except OSError as exc:  # a disk full or a file system that refuses files (each write left nothing behind)
            raise OutputError(f"{out}: could not be written ({exc.strerror or exc}).") from None
        log(f"wrote {out}")
    return result


def check_out_path(path, *, inputs=()) -> Path:
    """``path`` as the output file, refused before any work: an unknown suffix, a directory, an unwritable place,
    one of the ``inputs``, a run's own file (:func:`gaescale.run.writer.refuse_run_file`)."""
    from .writer import refuse_run_file
    p = Path(path)
    if p.suffix.lower() not in OUT_SUFFIXES:
        raise ParameterError("out", "embed", f"a file name ending in one of {list(OUT_SUFFIXES)}", str(path))
    if p.is_dir():
        raise OutputError(f"{p}: is a directory; --out names the file to write.")
    parent = next((q for q in p.parents if q.exists()), Path("."))
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise OutputError(f"{p}: cannot create files under {parent} (not a writable directory).")
    refuse_run_file(p, inputs=inputs)
    return p


def _load_model_file(run: RunDir) -> dict:
    path = run._file("model.pt")
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as exc:  # torch raises many kinds for a file that is not a checkpoint
        raise RunDirError(f"{path}: not a readable model file ({type(exc).__name__}); train again.") from None
    if not isinstance(state, dict) or not {"state_dict", "config", "num_nodes"} <= set(state):
        raise RunDirError(f"{path}: not a gaescale model file (expected state_dict, config, in_dim, num_nodes); "
                          "train again.")
    return state


def _refuse_custom_encoder(run: RunDir, state: dict) -> None:
    """A run trained with ``train(encoder=module)`` (model.pt's ``custom_encoder``, e.g. a PyGEncoder) holds the
    module's weights but not its code, so no model can be rebuilt here: refused, saying how to embed instead."""
    name = state.get("custom_encoder")
    if name is not None:
        raise ParameterError("run", "embed", f"a run of one of gaescale's own encoders: this run's, {name}, was "
                             "given to train(encoder=...) and the module itself is not saved in the run (model.pt "
                             "holds its weights only); to embed a new graph, call the module in Python: load "
                             "model.pt's state_dict entries under 'encoder.' (the prefix removed) into e.g. "
                             "PyGEncoder(net), then enc.eval()(x, gaescale.Graph.from_edge_index(edge_index, N))",
                             str(run.path))


def _read_graph(edges, features, ids: str, header: str, in_dim: int, *, weighted: bool = False,
                weight_column: str | None = None, directed: bool = False) -> tuple[Graph, torch.Tensor, np.ndarray]:
    """``(graph, x: (N, in_dim) float32, node_ids: (N,))`` of the edge list and its features, read as ``train``
    reads them (``weighted``/``weight_column``: the run's, a weighted run's graph carries the weights the encoder's
    normalisation uses; ``directed``: a :class:`gaescale.directed.graph.DiGraph`); features of another width than
    the run's are refused."""
    from ..data.features import attach_features
    from ..data.prepare import is_prepared, open_prepared
    from ..data.readers import read_edges
    if is_prepared(edges):
        if features is not None:
            raise ParameterError("features", "embed", "unset for a prepared graph (its features were given to "
                                                      "'gaescale prepare --features')", str(features))
        if weighted or directed:
            what = "the edge weights for a weighted run" if weighted else "the directed edges for a directed run"
            raise ParameterError("edges", "embed", f"an edge-list file with {what} ('gaescale prepare' keeps an "
                                                   "undirected, unweighted graph)", str(edges))
        prepared = open_prepared(edges)
        graph, x, node_ids, source = prepared.graph, prepared.x, RunDir(prepared.path).node_ids, prepared.path / "x.npy"
    else:
        if edges is not None and Path(edges).is_dir():
            raise InputFileError(edges, "is a directory but not a prepared graph (no graph.json); pass an edge-list "
                                        "file, or a directory written by 'gaescale prepare'.")
        data = read_edges(edges, ids=ids, header=header, weighted=weighted, weight_column=weight_column)
        if features is not None:
            data = attach_features(data, features)
        source = features if features is not None else edges
        if directed:
            from ..directed.graph import DiGraph
            graph = DiGraph.from_edge_index(data.edge_index, data.num_nodes,
                                            edge_weight=data.edge_weight if weighted else None)
        else:
            graph = Graph.from_edge_index(data.edge_index, data.num_nodes,
                                          edge_weight=data.edge_weight if weighted else None)
        x = data.x
        node_ids = data.node_ids if data.node_ids is not None else np.arange(data.num_nodes, dtype=np.int64)
    if x is None:
        raise ParameterError("features", "embed", f"the path of the node features ({in_dim} per node, as the run "
                                                  "was trained with; the same formats as train --features)", None)
    if x.shape[1] != in_dim:
        raise InputFileError(source, f"expected {in_dim} features per node, as the run was trained with. "
                                     f"Got {x.shape[1]}.")
    return graph, torch.from_numpy(np.array(x, dtype=np.float32)), node_ids


def _rebuild(run: RunDir, config: TrainConfig, state: dict):
    """The trained model of ``model.pt`` (the build_model of the run's kind, :mod:`gaescale.run.kinds`), in
    evaluation mode."""
    from .kinds import kind_of
    model = kind_of(config).build_model(config, state["in_dim"], int(state["num_nodes"]))
    try:
        model.load_state_dict(state["state_dict"])
    except (RuntimeError, KeyError) as exc:
        raise RunDirError(f"{run.path / 'model.pt'}: its weights do not fit the model of its own config "
                          f"({str(exc).splitlines()[0]}); the run directory is inconsistent.") from None
    return model.eval()


@torch.no_grad()
def encode(model, x: torch.Tensor, graph: Graph, *, block: int | None = BLOCK) -> np.ndarray:
    """Evaluation-mode embeddings ``z: (N, d)`` float32 of ``x: (N, F)`` on ``graph`` without the per-node bias
    (a VGAE's: the mean), layer by layer over ``block`` rows (None: one forward pass)."""
    model.eval()
    encoder = model.encoder
    out = encoder.layerwise(x, graph, block) if block is not None else encoder(x, graph)
    return np.ascontiguousarray(model.eval_output(out).numpy(), dtype=np.float32)


@torch.no_grad()
def _encode_directed(model, x: torch.Tensor, graph, rows: np.ndarray) -> np.ndarray:
    """A directed run's ``(N, 2h)`` rows in its embeddings.npy layout (``[z_s | z_t]``, or ``[z_s, b_s, 1 | z_t, 1,
    b_t]`` with the bias decoder, the biases of :func:`_spread`), one forward pass of the source/target encoder."""
    from ..directed.model import with_biases
    z = model.eval().encoder(x, graph)
    if model.source_bias is not None:
        bs, bt = (torch.from_numpy(_spread(b, rows)) for b in (model.source_bias, model.target_bias))
        z = with_biases(z, bs, bt)
    return np.ascontiguousarray(z.numpy(), dtype=np.float32)


def _known_rows(run: RunDir, node_ids: np.ndarray) -> np.ndarray:
    """``(N,)`` int64: the run's row of each id (compared as text where either side holds text), -1 for a new one."""
    import pandas as pd
    theirs, ours = run.node_ids, np.asarray(node_ids)
    if theirs.dtype == object or ours.dtype == object:  # integers as text only where one side holds text
        theirs, ours = theirs.astype(str), ours.astype(str)
    return pd.Index(theirs).get_indexer(ours).astype(np.int64)


def _spread(learnt: torch.Tensor, rows: np.ndarray) -> np.ndarray:
    """``(N,)`` float32: the learnt per-node values ``learnt: (N_run,)`` of the known rows, their mean for the new
    (-1) ones."""
    learnt = learnt.detach().numpy().astype(np.float32)
    out = np.full(rows.size, learnt.mean(), np.float32)
    out[rows >= 0] = learnt[rows[rows >= 0]]
    return out


def _bias(model, rows: np.ndarray) -> np.ndarray | None:
    """With the bias decoder, ``(N,)`` float32: the learnt biases of the known nodes, the mean one for the new."""
    return None if model.node_bias is None else _spread(model.node_bias, rows)


def write_embedded(out: Path, result: Embedded) -> None:
    """``result`` into ``out`` by its suffix (module docstring), each file atomically; for ``.npy`` the ids and
    the biases go first, the array last."""
    from .predict import write_table
    z = result.embeddings
    if out.suffix.lower() == ".npy":
        write_ids(out.with_suffix(".nodes.tsv"), result.node_ids)
        if result.node_bias is not None:
            write_npy(out.with_suffix(".bias.npy"), result.node_bias)
        else:
            out.with_suffix(".bias.npy").unlink(missing_ok=True)
        write_npy(out, z)
        return
    columns = {"id": result.node_ids, **{f"z{c}": z[:, c] for c in range(z.shape[1])}}
    if result.node_bias is not None:
        columns["bias"] = result.node_bias
    write_table(out, columns)
