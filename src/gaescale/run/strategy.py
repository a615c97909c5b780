"""Which training strategy a run uses: ``--strategy auto``'s choice by the planner (:mod:`gaescale.run.plan`) and
the strategy object built from the configuration (:mod:`gaescale.training.strategies`)."""
from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import TrainConfig
from ..errors import DistributedError, ParameterError
from ..graph import Graph
from ..parallel.runtime import Local
from ..rules import check_partitioned
from ..training.buckets import DiskTable, EdgeSample, PartitionBuckets
from ..training.samplers import metis_parts
from ..training.strategies import ClusterGCN, FastGAE, FullBatch, NeighborLinks, ShardedFullBatch

if TYPE_CHECKING:
    from .plan import StrategyPlan


def choose_strategy(config: TrainConfig, num_nodes: int, num_edges: int, num_features: int | None, log, *,
                    prepared: bool = False, device=None, runtime: Local | None = None,
                    sample: EdgeSample | None = None) -> tuple[str, StrategyPlan | None]:
    """``config.strategy``, or for ``auto`` the planner's choice under ``config.memory_budget`` (see
    :func:`gaescale.plan.budget_bytes`), made by rank 0 of the ``runtime`` for every rank; with the chosen plan on
    rank 0 of ``auto`` (None elsewhere), which :func:`size_table` reuses. ``sample``: the graph's edges, which size
    ``partitioned``'s buckets (:func:`gaescale.run.plan.plan`)."""
    runtime = runtime or Local()
    if config.strategy != "auto":
        return config.strategy, None
    from .plan import AUTO_ORDER, budget_bytes, choose, plan
    chosen = failed = best = None
    if runtime.is_main:
        budget = budget_bytes(config, device)
        try:
            best = choose(plan(config, num_nodes, num_edges, num_features, prepared=prepared, budget=budget,
                               sample=sample), budget, config)
        except ParameterError as exc:  # raised below, once the other ranks know not to wait for a choice
            failed = exc
        else:
            chosen = best.strategy
            log(f"--strategy auto: {chosen} (predicted peak {best.peak_bytes / 2**30:.2f} GiB of a "
                f"{budget / 2**30:.2f} GiB budget{' per process' if runtime.world_size > 1 else ''}; 'gaescale plan' "
                "shows every strategy)")
    chosen = runtime.choice_from_main(chosen, tuple(AUTO_ORDER))
    if failed is not None:
        raise failed
    if chosen is None:
        raise DistributedError("rank 0 found no strategy that fits its memory budget (its error says more).")
    return chosen, best


def size_table(config: TrainConfig, graph: Graph, num_features: int | None, log, *, prepared: bool, device,
               sample: EdgeSample, chosen: StrategyPlan | None = None) -> TrainConfig:
    """``partitioned`` without ``table_parts``: the planner's partitions (the fewest whose step fits the memory budget,
    their buckets' edges from ``sample``, :func:`gaescale.run.plan.plan`), fixed in the config the run saves.
    ``chosen``: ``--strategy auto``'s plan of them (:func:`choose_strategy`), not planned again."""
    if config.table_parts or num_features is not None:  # features: check_partitioned_run refuses them
        return config
    budget = ""
    if chosen is None:
        from .plan import budget_bytes, plan
        limit = budget_bytes(config, device)
        planned = [p for p in plan(config, graph.num_nodes, graph.num_edges, num_features, prepared=prepared,
                                   budget=limit, sample=sample) if p.strategy == "partitioned"]
        if not planned:  # an encoder the table cannot train (check_partitioned_run refuses it)
            return config
        chosen, budget = planned[0], f" of a {limit / 2**30:.2f} GiB budget"
    log(f"--table-parts {chosen.table_parts}: predicted peak {chosen.peak_bytes / 2**30:.2f} GiB{budget} "
        f"({chosen.note})")
    return replace(config, table_parts=chosen.table_parts)


def check_partitioned_run(config: TrainConfig, num_features: int | None, custom) -> None:
    """Refuse a ``partitioned`` run (given, or ``--strategy auto``'s choice) of a graph with features, a custom encoder,
    or an option its table on disk cannot train with (:func:`gaescale.rules.check_partitioned`: ``--resume``
    would pair a checkpoint's model with a table drawn anew)."""
    if num_features is not None or custom is not None:
        raise ParameterError("strategy", "train", "another strategy than 'partitioned' for a graph with features or a "
                             "custom encoder (it learns a featureless graph's input table for gaescale's GCN)",
                             "partitioned")
    check_partitioned(config)


def learnt_table(config: TrainConfig, num_nodes: int, out: Path | None, log) -> tuple[DiskTable, Any]:
    """``--strategy partitioned``'s learnt input table ``(N, first width)``: ``OUT/table.npy`` (a file of the run, with
    its row-wise Adagrad state beside it), drawn from ``config.seed``; without ``OUT`` in a temporary directory, which
    the second value keeps (None with ``OUT``)."""
    keep = None
    if out is None:
        keep = tempfile.TemporaryDirectory(prefix="gaescale-table-")
        out = Path(keep.name)
    width = config.encoder_dims[0]
    t = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    table = DiskTable(out / "table.npy", num_nodes, width, seed=config.seed)
    log(f"learnt table: {num_nodes:,} x {width} float32 on disk ({DiskTable.nbytes(num_nodes, width) / 2**30:.2f} GiB "
        f"with its row-wise Adagrad state: {table.path.name}) [{time.perf_counter() - t:.1f}s]")
    return table, keep


def make_strategy(config: TrainConfig, name: str, graph: Graph, log, runtime: Local | None = None, train_edges=None,
                  table: DiskTable | None = None):
    """The training strategy ``name`` on the training graph, with the options of ``config`` (METIS runs
    here for Cluster-GCN, on rank 0 of the ``runtime``); on several ranks, full batch shards the
    loss and the mini-batch strategies draw their own batches (see :mod:`gaescale.strategies`).
    ``train_edges``: for Cluster-GCN, ``graph`` is the whole graph and these are its training edges.
    ``table``: the learnt table that ``partitioned`` trains (:func:`learnt_table`)."""
    opts = config.strategy_options(graph.num_nodes)
    runtime = runtime or Local()
    rank, world = runtime.rank, runtime.world_size
    if name == "partitioned":
        if world > 1:
            raise DistributedError("--strategy partitioned trains in one process (its table on disk is not shared "
                                   "between ranks yet); start it without torchrun, or choose another --strategy.")
        parts = min(opts["table_parts"], graph.num_nodes)
        log(f"partitioned table: {parts:,} node partitions, {parts * (parts + 1) // 2:,} buckets per epoch (two "
            f"partitions in memory per step), row-wise Adagrad lr {opts['table_lr']:g}")
        return PartitionBuckets(table, parts, lr=opts["table_lr"], self_loops=config.self_loops)
    if world > 1:
        log(f"data parallel: {world} processes ({runtime.backend}); " + (
            "the graph replicated, the loss sharded" if name == "full" else
            "each trains on its own METIS parts" if name == "cluster" else "each draws its own batches"))
    if name == "cluster":
        per_batch = opts["clusters_per_batch"]
        parts = max(world, min(opts["cluster_parts"], graph.num_nodes) // world * world)  # as many on every rank
        t = time.perf_counter()
        make = lambda: {"parts": metis_parts(graph, parts, seed=config.seed)}  # noqa: E731 - under torchrun, on rank 0
        membership = runtime.arrays_on_main(make, "the METIS parts")["parts"]
        log(f"Cluster-GCN: {parts:,} METIS parts [{time.perf_counter() - t:.1f}s], {per_batch} per step, "
            f"{-(-parts // (per_batch * world)):,} steps per epoch")
        return ClusterGCN(membership, per_batch, self_loops=config.self_loops, rank=rank, world_size=world,
                          num_parts=parts, train_edges=train_edges)
    if name == "fastgae":
        size, alpha = opts["fastgae_nodes"], opts["fastgae_alpha"]
        log(f"FastGAE: loss on {size:,}-node subgraphs drawn with probability ~ degree^{alpha:g}")
        return FastGAE(min(size, graph.num_nodes), alpha, self_loops=config.self_loops)
    if name == "neighbor":
        fanouts, batch = opts["fanouts"], opts["batch_size"]
        log(f"neighbour sampling: batches of {batch:,} training edges, fan-outs {','.join(map(str, fanouts))}")
        return NeighborLinks(fanouts, batch, self_loops=config.self_loops, world_size=world)
    return FullBatch() if world == 1 else ShardedFullBatch(runtime)
