"""Where the graph and its split live: the one place that differs by rank.

One process splits the graph it read (:func:`gaescale.split.split_edges` in memory; a memory-mapped graph by hash,
:func:`gaescale.split.split_hashed`, into ``OUT/split``). Under torchrun: neighbour sampling keeps on each rank
only its shard of the training graph and of the features (:mod:`gaescale.parallel.shards`; from a prepared graph each
rank splits only its own rows and rank 0 joins their held-out edges); Cluster-GCN ranks other than 0 split
nothing and cut their partition from the whole graph by the split's hash; the others split a memory-mapped
graph into a scratch copy of their own, removed when training returns.
"""
from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import TrainConfig
from ..data.split import hashed_is_train, hashed_rows, held_out_split, split_edges, split_hashed
from ..graph import Graph
from .shards import Shards, node_bounds, partition


@dataclass
class Placement:
    """This rank's part of the graph: the split (None on the ranks that hold no held-out edges), the training
    graph the strategy reads (the whole graph for a Cluster-GCN rank that cuts by hash; None where sharded),
    the shards (neighbour sampling on several ranks), ``cut_by_hash(u, v)`` (whether an edge is a training
    edge, for that Cluster-GCN rank), a scratch directory kept alive while training, and the whole graph where the
    held-out metrics need it beside the split (a directed run's: its ranking filter and the edges' reversals)."""

    split: Any
    train_graph: Graph | None
    shards: Shards | None = None
    cut_by_hash: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
    scratch: Any = None
    graph: Any = None


def place(config: TrainConfig, graph: Graph, x, strategy: str, *, prepared: bool, out: Path | None, runtime,
          device, log) -> Placement:
    """Split ``graph`` (and shard it where the strategy and the ranks ask for it, see the module's docstring)."""
    sharded = runtime.world_size > 1 and strategy == "neighbor"
    t = time.perf_counter()
    split = rows = cut_by_hash = scratch = None
    fractions = (config.val_fraction, config.test_fraction)
    if not prepared:
        split = split_edges(graph, *fractions, seed=config.seed)
    elif sharded:  # every rank splits its own rows; rank 0 joins their held-out edges and draws the non-edges
        bounds = node_bounds(graph.indptr, runtime.world_size)
        rows = hashed_rows(graph, int(bounds[runtime.rank]), int(bounds[runtime.rank + 1]), *fractions,
                           seed=config.seed)
        held = runtime.gather_to_main((rows.val_pos, rows.test_pos), waiting=True)
        if runtime.is_main:
            split = held_out_split(graph, *(np.concatenate([h[k] for h in held], axis=1) for k in (0, 1)),
                                   seed=config.seed)
    elif not runtime.is_main and strategy == "cluster":  # splits nothing: cuts its partition from the whole graph,
        cut_by_hash = lambda u, v: hashed_is_train(  # noqa: E731 - keeping the edges the split trains on
            u, v, graph.num_nodes, *fractions, seed=config.seed)
    else:  # streams over the memory-mapped CSR; the training graph goes to OUT/split
        if out is not None and not runtime.is_main:  # another rank's training CSR: its own memory-mapped copy
            out.mkdir(parents=True, exist_ok=True)
            scratch = tempfile.TemporaryDirectory(prefix=f".rank{runtime.rank}-split-", dir=out)
        split = split_hashed(graph, *fractions, seed=config.seed,
                             out_dir=None if out is None else out / "split" if runtime.is_main else scratch.name)
    if cut_by_hash is not None:
        train_graph = graph
    else:
        train_graph = split.train_graph() if split is not None and rows is None else None
    if train_graph is not None and split is not None and split.train is not None:
        # the training edges kept once, as the training graph's CSR: not also as (2, E) int64 (60 MB at 770k)
        split = dataclasses.replace(split, train=None, train_weight=None, graph=train_graph)
    placed = Placement(split, train_graph, cut_by_hash=cut_by_hash, scratch=scratch)
    if sharded:
        _shard(placed, runtime, graph, x, rows, device, log)
    if placed.split is not None:
        s = placed.split
        log(f"split: {s.num_train:,} train / {s.val_pos.shape[1]:,} val / {s.test_pos.shape[1]:,} test "
            f"edges [{time.perf_counter() - t:.1f}s]")
    return placed


def _shard(placed: Placement, runtime, graph: Graph, x, rows, device, log) -> None:
    """Neighbour sampling on several ranks: each keeps its shard of the training graph and the features."""
    placed.shards = partition(runtime, graph, placed.train_graph, x, device=device,
                              rows=None if rows is None else (rows.degree, rows.indices))
    if runtime.is_main and rows is not None:
        # rank 0's split of the rows' held-out edges: its training graph, the shards
        placed.split = dataclasses.replace(placed.split, graph=placed.shards.graph)
    log(f"neighbour sampling: the training graph and the features sharded over {runtime.world_size} processes "
        f"(rank 0 holds {placed.shards.graph.indices.local.size:,} of {placed.shards.graph.indices.size:,} CSR "
        "entries); each embeds its own nodes")
