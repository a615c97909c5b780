"""How the ranks of a torchrun group read their input (the single-process reading is :mod:`gaescale.data.inputs`,
whose docstring tells the whole story): rank 0 alone reads an edge list and sends the others its CSR, or, with a
strategy that partitions the graph and an output directory, prepares it once into the run's own copy that each
rank maps (a host that does not see it receives it from rank 0); a prepared directory that a host does not see
is sent to it the same way."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from ..config import TrainConfig
from ..data.inputs import (
    RUN_COPY,
    Inputs,
    check_not_a_plain_directory,
    check_prepared_features,
    clear_copy,
    in_memory,
    is_copy,
    load_edges,
    log_features,
    mapped,
)
from ..data.prepare import is_prepared, open_prepared, origin, prepare
from ..errors import DistributedError, InputFileError
from ..graph import Graph, data_fingerprint
from .transfer import once_per_filesystem

PARTITIONING = ("neighbor", "cluster", "auto")  # the strategies under which ranks prepare an edge list once


def read_on_ranks(config: TrainConfig, log, out: Path | None, group) -> Inputs:
    """This rank's inputs: rank 0's prepared directory mapped (or the copy of it this host received), the run's
    own prepared copy of the edge list, or the graph rank 0 read and sent (see the module's docstring)."""
    t = time.perf_counter()
    is_mapped = is_prepared(config.edges)
    path = _rank_0s_directory(config, out, group, is_mapped, log)
    if is_mapped or path is not None:
        check_prepared_features(config)
        return mapped(path or config.edges, log, t)
    check_not_a_plain_directory(config, None)
    copy = run_copy(config, out, group, log)
    if copy is not None:
        return mapped(copy, log, t)
    return _graph_from_main(config, group, log, t)


def _graph_from_main(config: TrainConfig, group, log, t: float) -> Inputs:
    """Under torchrun, an edge list read into memory (full batch and FastGAE, which replicate the graph, or a
    run without an output directory): rank 0 alone reads it (and the features), and sends the others the
    graph's CSR (with a weighted graph's weights) and the features, so that only rank 0's host needs the files;
    the others hold neither the ids nor anything the reading needed on the way."""
    mine: list[Inputs] = []
    read_at: list[float] = []

    def read() -> dict[str, np.ndarray]:
        mine.append(in_memory(load_edges(config), log, t, weighted=config.weighted))
        read_at.append(time.perf_counter())
        g, x = mine[0].graph, mine[0].x
        return {"indptr": g.indptr, "indices": g.indices, **({} if g.data is None else {"data": g.data}),
                **({} if x is None else {"x": x.numpy()})}

    arrays = group.arrays_on_main(read, f"the graph of {config.edges}")
    if group.is_main:
        log(f"sent the graph{' and the features' if 'x' in arrays else ''} to the other processes "
            f"({group.world_size - 1}), which do not read {config.edges} [{time.perf_counter() - read_at[0]:.1f}s]")
        inputs = mine[0]
    else:
        indptr = arrays["indptr"]
        x = arrays.get("x")
        inputs = Inputs(Graph(indptr, arrays["indices"], indptr.size - 1, data=arrays.get("data")),
                        None if x is None else torch.from_numpy(x), None)
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
        clear_copy(target)

    overrides = None
    if group.is_main:  # the copy's manifest names what it copies, as a run's own copy of an edge list does
        overrides = {"graph.json":
                     (json.dumps({**made_from["manifest"], "origin": made_from}, indent=2) + "\n").encode()}
    sent = once_per_filesystem(group, target, lambda: None, lambda: mapped or is_copy(target, made_from), clear,
                               f"a copy of {config.edges}", source=source, overrides=overrides)
    _same_graph(Path(config.edges) if mapped else target, group)
    if sent:
        log(f"sent {config.edges} to ranks {sent}, whose hosts do not see it: each host maps its copy in its own "
            f"--out, {RUN_COPY}/")
    return Path(config.edges) if mapped else target


def run_copy(config: TrainConfig, out: Path | None, group, log) -> Path | None:
    """``OUT/prepared``, made or reused, where training reads the edge list through it; None where it is
    read into memory (a fresh run then removes the copy an earlier run left in the same OUT). Only rank 0
    reads the edge list."""
    partitioned = config.strategy in PARTITIONING
    if config.edges is None or out is None:
        return None
    target = out / RUN_COPY
    main = group.is_main
    made_from = origin(config.edges, config.features, ids=config.ids, header=config.header) if main else None
    resumed = main and config.resume and is_copy(target, made_from)  # the run being resumed trained from it
    if config.resume and not partitioned:
        resumed = group.from_main(resumed, waiting=True)  # as rank 0 sees it, on every rank
    if not (partitioned or resumed):  # read into memory; a resumed run's copy is reused below
        if not config.resume and main and is_copy(target):
            shutil.rmtree(target)
        return None
    made_from = group.gather(made_from, waiting=True)[0]  # rank 0's files: the others need not have them
    reused = False

    def make():
        nonlocal reused
        reused = is_copy(target, made_from)  # an earlier run's, of these same files
        if not reused:
            clear_copy(target)
            prepare(config.edges, target, ids=config.ids, header=config.header, features=config.features,
                    made_from=made_from)

    t = time.perf_counter()
    sent = once_per_filesystem(group, target, make, lambda: is_copy(target, made_from), lambda: clear_copy(target),
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
