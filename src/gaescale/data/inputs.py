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
0 sends the others the graph's CSR and the features (:func:`_graph_from_main`), and every rank splits it
alike, as one process does.

A directory of ``gaescale prepare`` that rank 0 maps and a host does not see at the path given is sent to
that host the same way, into its own ``OUT/prepared`` (:func:`_rank_0s_directory`).
"""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..config import TrainConfig
from ..parallel.runtime import Local
from ..errors import DistributedError, InputFileError, ParameterError
from .features import attach_features
from ..graph import Graph, data_fingerprint
from .readers import EdgeList, read_edges
from .prepare import is_prepared, open_prepared, origin, prepare
from ..parallel.transfer import once_per_filesystem

PARTITIONING = ("neighbor", "cluster", "auto")  # the strategies under which ranks prepare an edge list once
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
    data = read_edges(config.edges, ids=config.ids, header=config.header)
    if config.features is not None:
        data = attach_features(data, config.features)
    return data


def read_inputs(config: TrainConfig, data: EdgeList | None, log, *, out: Path | None = None,
                runtime: Local | None = None) -> Inputs:
    """Read the edge list (and features) into a graph, or map a prepared directory: the one given, or the
    run's own copy of the edge list (see the module's docstring); ``runtime``: this process's
    (:mod:`gaescale.parallel.runtime`), of several ranks under torchrun."""
    group = runtime if runtime is not None and runtime.world_size > 1 else None  # the ranks' own ways to read
    t = time.perf_counter()
    mapped = data is None and is_prepared(config.edges)
    path = _rank_0s_directory(config, out, group, mapped, log) if group is not None and data is None else None
    if mapped or path is not None:
        if config.features is not None:
            raise ParameterError("features", "train", "unset for a prepared graph (give the features to "
                                                      "'gaescale prepare --features')", config.features)
        return _mapped(path or config.edges, log, t)
    if data is None and config.edges is not None and Path(config.edges).is_dir():
        raise InputFileError(config.edges, "is a directory but not a prepared graph (no graph.json); pass an "
                                           "edge-list file, or a directory written by 'gaescale prepare'.")
    copy = _run_copy(config, out, group, log) if data is None else None
    if copy is not None:
        return _mapped(copy, log, t)
    if data is None and group is not None:
        return _graph_from_main(config, group, log, t)
    inputs = _in_memory(data if data is not None else load_edges(config), log, t)
    log_features(inputs.x, log)
    return inputs


def _in_memory(data: EdgeList, log, t: float) -> Inputs:
    """The graph of ``data`` (read since ``t``), checked to have edges, and its features as a tensor."""
    graph = Graph.from_edge_index(data.edge_index, data.num_nodes)
    log(f"read {data.source}: {data.num_nodes:,} nodes; {graph.stats.describe()} [{time.perf_counter() - t:.1f}s]")
    graph.require_edges(data.source or "the graph")
    x = None if data.x is None else torch.from_numpy(np.ascontiguousarray(data.x, dtype=np.float32))
    ids = data.node_ids if data.node_ids is not None else np.arange(data.num_nodes, dtype=np.int64)
    return Inputs(graph, x, ids)


def _graph_from_main(config: TrainConfig, group, log, t: float) -> Inputs:
    """Under torchrun, an edge list read into memory (full batch and FastGAE, which replicate the graph, or a
    run without an output directory): rank 0 alone reads it (and the features), and sends the others the
    graph's CSR and the features, so that only rank 0's host needs the files; the others hold neither the ids
    nor anything the reading needed on the way."""
    mine: list[Inputs] = []
    read_at: list[float] = []

    def read() -> dict[str, np.ndarray]:
        mine.append(_in_memory(load_edges(config), log, t))
        read_at.append(time.perf_counter())
        g, x = mine[0].graph, mine[0].x
        return {"indptr": g.indptr, "indices": g.indices, **({} if x is None else {"x": x.numpy()})}

    arrays = group.arrays_on_main(read, f"the graph of {config.edges}")
    if group.is_main:
        log(f"sent the graph{' and the features' if 'x' in arrays else ''} to the other processes "
            f"({group.world_size - 1}), which do not read {config.edges} [{time.perf_counter() - read_at[0]:.1f}s]")
        inputs = mine[0]
    else:
        indptr = arrays["indptr"]
        x = arrays.get("x")
        inputs = Inputs(Graph(indptr, arrays["indices"], indptr.size - 1), None if x is None else torch.from_numpy(x), None)
    log_features(inputs.x, log)
    return inputs


def _rank_0s_directory(config: TrainConfig, out: Path | None, group, mapped: bool, log) -> Path | None:
    """Where this rank maps rank 0's directory of 'gaescale prepare' (None where rank 0 reads an edge list):
    ``config.edges``, or on a host that does not see it there, ``OUT/prepared``, a copy that rank 0 sends."""
    kinds = group.gather(mapped, waiting=True)
    if not kinds[0]:
        if any(kinds):  # the ranks would take different ways in, and wait on different collectives
            bad = kinds.index(True)
            if mapped:
                raise InputFileError(config.edges, "is a directory of 'gaescale prepare' on this host, where rank "
                                                   "0's is an edge list; give every host the same input at this path.")
            raise DistributedError(f"rank {bad} sees a directory of 'gaescale prepare' at {config.edges}, where rank "
                                   "0 sees an edge list (its error says more).")
        return None
    if all(kinds):
        _same_graph(Path(config.edges), group)
        return Path(config.edges)
    source = Path(config.edges).resolve() if group.is_main else None
    made_from = {"prepared": str(source), "manifest": open_prepared(source).manifest} if group.is_main else None
    made_from = group.gather(made_from, waiting=True)[0]
    target = None if out is None else out / RUN_COPY

    def clear():
        if target is None:
            raise InputFileError(config.edges, "is not a directory of 'gaescale prepare' on this host, where rank "
                                               "0's is; give an output directory to receive a copy of it.")
        _clear(target)

    overrides = None
    if group.is_main:  # the copy's manifest names what it copies, as a run's own copy of an edge list does
        overrides = {"graph.json": (json.dumps({**made_from["manifest"], "origin": made_from}, indent=2) + "\n").encode()}
    sent = once_per_filesystem(group, target, lambda: None, lambda: mapped or _is_copy(target, made_from), clear,
                               f"a copy of {config.edges}", source=source, overrides=overrides)
    _same_graph(Path(config.edges) if mapped else target, group)
    if sent:
        log(f"sent {config.edges} to ranks {sent}, whose hosts do not see it: each host maps its copy in its own "
            f"--out, {RUN_COPY}/")
    return Path(config.edges) if mapped else target


def _mapped(path, log, t: float) -> Inputs:
    p = open_prepared(path)
    log(f"opened {p.path}: {p.graph.num_nodes:,} nodes, {p.graph.num_edges:,} edges, memory-mapped "
        f"(prepared from {p.manifest['source']}) [{time.perf_counter() - t:.1f}s]")
    log_features(p.x, log)
    return Inputs(p.graph, p.x, None, p.path)  # the features stay mapped until train knows which rows it needs


def _run_copy(config: TrainConfig, out: Path | None, group, log) -> Path | None:
    """``OUT/prepared``, made or reused, where training reads the edge list through it; None where it is
    read into memory (a fresh run then removes the copy an earlier run left in the same OUT). Under torchrun
    only rank 0 reads the edge list."""
    partitioned = group is not None and config.strategy in PARTITIONING
    if config.edges is None or out is None:
        return None
    target = out / RUN_COPY
    main = group is None or group.is_main
    made_from = origin(config.edges, config.features, ids=config.ids, header=config.header) if main else None
    resumed = main and config.resume and _is_copy(target, made_from)  # the run being resumed trained from it
    if group is not None and config.resume and not partitioned:
        resumed = group.from_main(resumed, waiting=True)  # as rank 0 sees it, on every rank
    if group is None or not (partitioned or resumed):
        if resumed:
            log(f"resuming from the run's own prepared copy of {config.edges}, {target}")
            return target
        if not config.resume and main and _is_copy(target):
            shutil.rmtree(target)
        return None
    made_from = group.gather(made_from, waiting=True)[0]  # rank 0's files: the others need not have them
    reused = False

    def make():
        nonlocal reused
        reused = _is_copy(target, made_from)  # an earlier run's, of these same files
        if not reused:
            _clear(target)
            prepare(config.edges, target, ids=config.ids, header=config.header, features=config.features,
                    made_from=made_from)

    t = time.perf_counter()
    sent = once_per_filesystem(group, target, make, lambda: _is_copy(target, made_from), lambda: _clear(target),
                               f"{target} (the edge list prepared)")
    _same_graph(target, group)
    sent_to = f"; sent to ranks {sent}, whose hosts do not see it" if sent else ""
    log(f"{'reusing' if reused else 'prepared'} {target}, the run's own copy of {config.edges}, for the "
        f"{group.world_size} processes: each reads only the rows it needs{sent_to} [{time.perf_counter() - t:.1f}s]")
    return target


def _same_graph(path: Path, group) -> None:
    """Refuse, on every rank, a run whose ranks map different graphs (each rank its ``path``): their numbers of
    nodes and edges, and a hash of the row pointer (the degrees), must be rank 0's."""
    g = open_prepared(path).graph
    every = group.gather((g.num_nodes, g.num_edges, data_fingerprint(g.indptr), str(path)), waiting=True)
    bad = next((r for r, s in enumerate(every) if s[:3] != every[0][:3]), None)
    if bad is not None:
        (n, e, _, at), (n0, e0, _, at0) = every[bad], every[0]
        raise DistributedError(f"rank {bad} maps a graph at {at} that is not rank 0's at {at0} ({n:,} nodes and {e:,} "
                               f"edges, against {n0:,} and {e0:,}, or other degrees); give every host the same graph "
                               "(or remove a stale copy) and run again.")


def _clear(target: Path) -> None:
    """Make way for a new copy at ``target``, removing an earlier copy (of other files, or of these, changed
    since), never anything else."""
    if target.exists():
        if not _is_copy(target):
            raise InputFileError(target, "exists but is not a copy gaescale made; remove it or choose another --out.")
        shutil.rmtree(target)


def _is_copy(path: Path, made_from: dict | None = None) -> bool:
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
    log(f"features: {'%d per node' % x.shape[1] if x is not None else 'none; learnable identity features (N x h1 table)'}")
