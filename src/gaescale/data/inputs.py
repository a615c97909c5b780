"""What training reads, before anything is split: an edge list (and its features) read into memory, or a
directory of ``gaescale prepare``, memory-mapped.

Under torchrun only rank 0 reads an edge list (and its features), once. With a strategy that partitions
the graph (``neighbor`` and ``cluster``, and ``auto``, which may choose one) and an output directory, it
prepares it into the run's own copy, ``OUT/prepared``; a host that does not see rank 0's copy (its own
disk) receives it from rank 0 over the process group. Each process then reads only the rows it needs of
the memory-mapped graph, as when it is given a prepared graph. Such a run splits as a prepared graph's
does (by hash, :func:`gaescale.split.split_hashed`), so a resumed run, with any number of processes,
trains from that same copy while the files it was made from are unchanged
(:func:`gaescale.prepare.origin`); a fresh run that reads the edge list into memory removes it. Otherwise
(full batch and FastGAE, which replicate the graph in memory, or a run without an output directory) rank
0 sends the others the graph's CSR and the features (:func:`gaescale.parallel.reading.read_on_ranks`), and
every rank splits it alike, as one process does.

A directory of ``gaescale prepare`` that rank 0 maps and a host does not see at the path given is sent to
that host the same way, into its own ``OUT/prepared``. The ranks' reading is in :mod:`gaescale.parallel.reading`.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..config import TrainConfig
from ..errors import InputFileError, ParameterError
from ..graph import Graph
from .features import attach_features
from .prepare import is_prepared, open_prepared, origin
from .readers import EdgeList, read_edges

RUN_COPY = "prepared"  # the run's own prepared copy of its edge list: OUT/prepared


@dataclass
class Inputs:
    """What training reads: the graph (memory-mapped when ``prepared``), the features, the original ids."""

    graph: Graph
    x: torch.Tensor | np.ndarray | None  # a prepared graph's: its memory-mapped (N, F) array
    node_ids: np.ndarray | None  # None for a prepared graph: its nodes.tsv is copied
    prepared: Path | None = None


def load_edges(config: TrainConfig) -> EdgeList:
    """Read ``config.edges`` and, if given, ``config.features``."""
    if config.edges is None:
        raise ParameterError("edges", "train", "the path of an edge list", None)
    data = read_edges(config.edges, ids=config.ids, header=config.header, weighted=config.weighted,
                      weight_column=config.weight_column)
    if config.features is not None:
        data = attach_features(data, config.features)
    return data


def read_inputs(config: TrainConfig, data: EdgeList | None, log, *, out: Path | None = None) -> Inputs:
    """One process: read the edge list (and features) into a graph, or map a prepared directory: the one given, or
    the run's own copy of the edge list (see the module's docstring). The ranks of a torchrun group read as
    :func:`gaescale.parallel.reading.read_on_ranks` says."""
    t = time.perf_counter()
    if data is None and is_prepared(config.edges):
        check_prepared_features(config)
        return mapped(config.edges, log, t)
    check_not_a_plain_directory(config, data)
    copy = _run_copy(config, out, log) if data is None else None
    if copy is not None:
        return mapped(copy, log, t)
    inputs = in_memory(data if data is not None else load_edges(config), log, t, weighted=config.weighted)
    log_features(inputs.x, log)
    return inputs


def check_prepared_features(config: TrainConfig) -> None:
    """A prepared graph's features were given to 'gaescale prepare': refuse them given again."""
    if config.features is not None:
        raise ParameterError("features", "train", "unset for a prepared graph (give the features to "
                                                  "'gaescale prepare --features')", config.features)


def check_not_a_plain_directory(config: TrainConfig, data: EdgeList | None) -> None:
    if data is None and config.edges is not None and Path(config.edges).is_dir():
        raise InputFileError(config.edges, "is a directory but not a prepared graph (no graph.json); pass an "
                                           "edge-list file, or a directory written by 'gaescale prepare'.")


def _run_copy(config: TrainConfig, out: Path | None, log) -> Path | None:
    """One process: ``OUT/prepared`` where a resumed run trained from the run's own copy of these same files
    (made under torchrun, :func:`gaescale.parallel.reading.run_copy`); otherwise None, and a fresh run removes the
    copy an earlier run left in the same OUT."""
    if config.edges is None or out is None:
        return None
    target = out / RUN_COPY
    made_from = origin(config.edges, config.features, ids=config.ids, header=config.header)
    if config.resume and is_copy(target, made_from):  # the run being resumed trained from it
        log(f"resuming from the run's own prepared copy of {config.edges}, {target}")
        return target
    if not config.resume and is_copy(target):
        shutil.rmtree(target)
    return None


def require_weights(data: EdgeList, weighted: bool) -> None:
    """Refuse ``weighted`` for edges without weights (an EdgeList given as data)."""
    if weighted and data.edge_weight is None:
        raise ParameterError("weighted", "train", "used with edges that have weights (an EdgeList given as data "
                                                  "without edge_weight)", True)


def in_memory(data: EdgeList, log, t: float, *, weighted: bool = False) -> Inputs:
    """The graph of ``data`` (read since ``t``), checked to have edges, and its features as a tensor;
    ``weighted``: with the weights of ``data.edge_weight`` (else they are not used)."""
    require_weights(data, weighted)
    graph = Graph.from_edge_index(data.edge_index, data.num_nodes, edge_weight=data.edge_weight if weighted else None)
    log(f"read {data.source}: {data.num_nodes:,} nodes; {graph.stats.describe()} [{time.perf_counter() - t:.1f}s]")
    graph.require_edges(data.source or "the graph")
    return Inputs(graph, *features_and_ids(data))


def features_and_ids(data: EdgeList) -> tuple[torch.Tensor | None, np.ndarray]:
    """``(x, ids)`` of ``data``: its features as a float32 tensor (None without), and its original ids (the node
    indices where it has none)."""
    x = None if data.x is None else torch.from_numpy(np.ascontiguousarray(data.x, dtype=np.float32))
    ids = data.node_ids if data.node_ids is not None else np.arange(data.num_nodes, dtype=np.int64)
    return x, ids


def mapped(path, log, t: float) -> Inputs:
    p = open_prepared(path)
    log(f"opened {p.path}: {p.graph.num_nodes:,} nodes, {p.graph.num_edges:,} edges, memory-mapped "
        f"(prepared from {p.manifest['source']}) [{time.perf_counter() - t:.1f}s]")
    log_features(p.x, log)
    return Inputs(p.graph, p.x, None, p.path)  # the features stay mapped until train knows which rows it needs


def clear_copy(target: Path) -> None:
    """Make way for a new copy at ``target``, removing an earlier copy (of other files, or of these, changed
    since), never anything else."""
    if target.exists():
        if not is_copy(target):
            raise InputFileError(target, "exists but is not a copy gaescale made; remove it or choose another --out.")
        shutil.rmtree(target)


def is_copy(path: Path, made_from: dict | None = None) -> bool:
    """Whether ``path`` is a run's own prepared copy of an edge list (made from ``made_from``, if given)."""
    if not is_prepared(path):
        return False
    try:
        found = open_prepared(path).manifest.get("origin")
    except InputFileError:
        return False
    return found is not None and (made_from is None or found == made_from)


def as_tensor(x) -> torch.Tensor | None:
    """The features as a float32 tensor: a prepared graph's memory-mapped ``(N, F)`` array is copied (the map
    is read-only)."""
    return torch.from_numpy(np.array(x, dtype=np.float32)) if isinstance(x, np.ndarray) else x


def as_array(x) -> np.ndarray | None:
    """The features as a float32 array, without a copy where they are one (a prepared graph's map)."""
    return x.cpu().numpy() if isinstance(x, torch.Tensor) else None if x is None else np.asarray(x, np.float32)


def log_features(x, log) -> None:
    log(f"features: "
        f"{f'{x.shape[1]} per node' if x is not None else 'none; learnable identity features (N x h1 table)'}")
