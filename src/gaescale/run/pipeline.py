"""The one code path behind ``gaescale train``/``demo`` and :func:`gaescale.train`:
read -> graph (CSR) -> split -> encoder -> loss -> fit -> outputs."""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from .._version import __version__
from ..training.checkpoint import Checkpointer
from ..config import TrainConfig
from ..devices import resolve_device
from ..parallel.runtime import (ShardedFullBatch, barrier, broadcast_state, choice_from_main, gather, gather_to_main,
                          peer_failures)
from ..encoders import ENCODERS
from ..errors import DistributedError, ParameterError
from ..graph import Graph, data_fingerprint
from ..data.inputs import as_array, as_tensor, read_inputs
from ..data.readers import EdgeList
from ..models import GAE, VGAE, HadamardMLP, split_bias
from ..training.evaluate import link_scores
from ..training.heldout import baseline_metrics, baseline_summary, not_beaten, test_metrics
from ..outputs import atomic_write, check_out_dir, write_ids, write_json, write_npy, write_npz, write_torch
from .memory import peak_rss_bytes, reset_peak_rss, rss_bytes
from ..training.samplers import metis_parts
from ..training.selection import selection_note
from ..parallel.shards import embed_sharded, node_bounds, partition
from ..data.split import hashed_is_train, hashed_rows, held_out_split, split_edges, split_hashed
from ..training.strategies import ClusterGCN, FastGAE, FullBatch, NeighborLinks
from ..training.trainer import fit
from ..parallel.transfer import arrays_from_main, object_from_main


LAYERWISE_BLOCK = 1 << 16  # rows of the operator per block in layer-wise inference


@dataclass
class RunResult:
    model: GAE
    embeddings: np.ndarray  # (N, d) float32, row i = node_ids[i]
    node_ids: np.ndarray
    metrics: dict[str, Any]
    out_dir: Path | None
    node_bias: np.ndarray | None = None  # (N,) float32 with decoder='bias': s_ij = z_i . z_j + b_i + b_j


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build_model(config: TrainConfig, in_dim: int | None, num_nodes: int) -> GAE:
    """The GAE (or VGAE) of ``config`` (``encoder='auto'`` resolved for ``in_dim`` features, None: a learnt
    table); a VGAE's encoder outputs ``2 * dim`` columns (mean and log std)."""
    config = config.for_graph(in_dim)
    dims = config.layer_dims
    if config.variational:
        dims = dims[:-1] + [2 * dims[-1]]
    encoder = ENCODERS["gcn" if config.encoder == "linear" else config.encoder]
    pair_decoder = HadamardMLP(config.dim) if config.decoder == "hadamard" else None
    return (VGAE if config.variational else GAE)(encoder(in_dim, dims, num_nodes=num_nodes, dropout=config.dropout),
                                                  node_bias=num_nodes if config.decoder == "bias" else None,
                                                  pair_decoder=pair_decoder)


def train(config: TrainConfig | None = None, *, data: EdgeList | None = None,
          log: Callable[[str], None] | None = None, group=None, on_epoch: Callable[[dict], None] | None = None,
          test: bool = True, **options) -> RunResult | None:
    """Train a GCN graph autoencoder and, with ``config.out``, write its outputs.

    ``train(edges="edges.csv", out="run", hidden="16,16", dim=8)`` or ``train(TrainConfig(...))``;
    ``data`` replaces reading ``config.edges`` (an :class:`EdgeList`, e.g. from :func:`community_graph`).
    ``group`` (:func:`gaescale.distributed.from_torchrun`): this process is one rank of a data-parallel
    group (see :mod:`gaescale.distributed`); only rank 0 logs, evaluates and writes, and only rank 0
    returns a result (the others return None). ``on_epoch(record)`` is called after every epoch with its loss and,
    when evaluated, its ``val_auc`` (what ``gaescale tune`` prunes on; it may raise to stop the run).
    ``test=False``: the test split is held out of training as usual but never scored, nor are the heuristics
    (``gaescale tune``, which must choose on validation alone).
    """
    if config is None:
        config = TrainConfig(**options)
    elif options:
        config = TrainConfig.from_dict({**config.to_dict(), **options})
    main = group is None or group.is_main
    log = log or ((lambda m: None) if config.quiet or not main else _stderr)
    if config.threads:
        torch.set_num_threads(config.threads)
    device = resolve_device(config.device)  # before anything is written: a missing GPU is a user error
    out = check_out_dir(config.out) if config.out else None
    if device.type == "cuda":
        log(f"device: {device} ({torch.cuda.get_device_name(device)})")
    t_start = time.perf_counter()
    if group is not None:
        _same_settings(config, group)

    inputs = read_inputs(config, data, log, out=out, group=group)
    graph, x, prepared = inputs.graph, inputs.x, inputs.prepared
    num_nodes, num_edges, num_features = graph.num_nodes, graph.num_edges, None if x is None else int(x.shape[1])
    config = _resolve(config, num_features, log)
    strategy_name = _choose_strategy(config, num_nodes, num_edges, num_features, log, prepared=prepared is not None,
                                     device=device, group=group)
    # Neighbour sampling on several ranks: each rank keeps only its shard of the training graph and of the
    # features (gaescale.shards); from a prepared graph, each reads and splits only its own rows.
    sharded = group is not None and strategy_name == "neighbor"
    t = time.perf_counter()
    split = rows = cut_by_hash = None
    if prepared is None:
        split = split_edges(graph, config.val_fraction, config.test_fraction, seed=config.seed)
    elif sharded:  # every rank splits its own rows; rank 0 joins their held-out edges and draws the non-edges
        bounds = node_bounds(graph.indptr, group.world_size)
        rows = hashed_rows(graph, int(bounds[group.rank]), int(bounds[group.rank + 1]), config.val_fraction,
                           config.test_fraction, seed=config.seed)
        held = gather_to_main((rows.val_pos, rows.test_pos), waiting=True)
        if main:
            split = held_out_split(graph, *(np.concatenate([h[k] for h in held], axis=1) for k in (0, 1)),
                                   seed=config.seed)
    elif not main and strategy_name == "cluster":  # splits nothing: cuts its partition from the whole graph,
        cut_by_hash = lambda u, v: hashed_is_train(  # noqa: E731 - keeping the edges the split trains on
            u, v, num_nodes, config.val_fraction, config.test_fraction, seed=config.seed)
    else:  # streams over the memory-mapped CSR; the training graph goes to OUT/split
        scratch = None  # another rank's training CSR: its own memory-mapped copy, removed when train returns
        if out is not None and not main:
            out.mkdir(parents=True, exist_ok=True)
            scratch = tempfile.TemporaryDirectory(prefix=f".rank{group.rank}-split-", dir=out)
        split = split_hashed(graph, config.val_fraction, config.test_fraction, seed=config.seed,
                             out_dir=None if out is None else out / "split" if main else scratch.name)
    if cut_by_hash is not None:
        train_graph = graph
    else:
        train_graph = split.train_graph() if split is not None and rows is None else None
    shards = None  # this rank's shards of the training graph and the features
    if sharded:
        shards = partition(group, graph, train_graph, x, device=device,
                           rows=None if rows is None else (rows.degree, rows.indices))
        if main and rows is not None:  # rank 0's split of the rows' held-out edges: its training graph, the shards
            split = dataclasses.replace(split, graph=shards.graph)
        rows = None
        log(f"neighbour sampling: the training graph and the features sharded over {group.world_size} processes "
            f"(rank 0 holds {shards.graph.indices.local.size:,} of {shards.graph.indices.size:,} CSR entries); "
            "each embeds its own nodes")
    if split is not None:
        log(f"split: {split.num_train:,} train / {split.val_pos.shape[1]:,} val / {split.test_pos.shape[1]:,} test "
            f"edges [{time.perf_counter() - t:.1f}s]")
    csr = (graph.indptr, graph.indices) if main else None  # for graph.npz (topk --exclude-existing, the report)
    checkpointer, resume = _checkpointing(config, strategy_name, out, csr, x, log, group, prepared=prepared is not None)
    if sharded:  # only the shards are kept (rank 0 keeps the held-out edges of the split)
        train_graph = x = None
        if not main:
            inputs = split = None
    x = as_tensor(x)  # a prepared graph's features are copied from the map here
    del graph  # from here on only the training graph is needed

    torch.manual_seed(config.seed)
    model = build_model(config, num_features, num_nodes).to(device)
    has_val = main and split.val_pos.shape[1] > 0
    model.encoder.checkpoint_activations = config.checkpoint_activations
    strategy = _strategy(config, strategy_name, train_graph if shards is None else shards.graph, log, group,
                         train_edges=cut_by_hash)
    # Full batch trains on every pair at once; the other strategies draw theirs from the training graph.
    train_pairs = _train_pairs(split, train_graph, config.self_loops) if strategy_name == "full" else None
    # A memory-mapped graph is embedded layer by layer (no operator over the whole graph) unless the
    # strategy builds that operator for training anyway; the shards always are, by every rank.
    layerwise = shards is not None or (prepared is not None and strategy_name in ("cluster", "neighbor"))
    block = LAYERWISE_BLOCK if layerwise else None
    if shards is None:
        embed = lambda: model.embed(x, train_graph, block=block)  # noqa: E731
    else:
        embed = lambda: embed_sharded(model, shards, block=block)  # noqa: E731
    setup_peak = peak_rss_bytes()  # reading, graph and split; the training phase's own peak is measured apart
    phase_measured = reset_peak_rss()
    train_start = rss_bytes()  # what training starts from: graph, split, features, model
    x = None if x is None else x.to(device)  # on the CPU: the same tensor
    sampled_graph, features = (train_graph, x) if shards is None else shards[:2]  # what the strategy reads
    with peer_failures() if group is not None else contextlib.nullcontext():
        result = fit(model, features, sampled_graph, train_pairs, val=(split.val_pos, split.val_neg) if has_val else None,
                     epochs=config.epochs, lr=config.lr, seed=config.seed, eval_every=config.eval_every,
                     patience=config.patience, warmup=config.warmup_epochs, progress=not config.quiet and main,
                     loss_kwargs=dict(kind=config.loss, dense=config.dense, weighting=config.weighting,
                                      neg_ratio=config.neg_ratio),
                     checkpointer=checkpointer if main else None, resume=resume, strategy=strategy,
                     time_limit=config.time_limit, embed=embed if main or shards is not None else None,
                     embed_collective=shards is not None, precision=config.precision, group=group,
                     on_epoch=on_epoch)
        train_peak = peak_rss_bytes() if phase_measured else None
        t = time.perf_counter()
        if shards is not None:  # every rank embeds its nodes with rank 0's (best) weights
            broadcast_state(model)
            z = embed()
    if not main:  # waits while rank 0 writes the outputs, so that all leave the group together
        barrier()
        return None
    if shards is None:
        t = time.perf_counter()
        z = model.embed(x, train_graph, block=block).cpu()
    embed_seconds = time.perf_counter() - t
    note = selection_note(result.history, result.best_epoch, config.warmup_epochs)
    if note:
        log(note)
    if block:
        log(f"embedded {num_nodes:,} nodes layer by layer, {block:,} rows at a time"
            f"{', each of the processes its own' if shards is not None else ''} [{embed_seconds:.1f}s]")
    metrics = _heldout_metrics(z, split, train_graph, has_val, config.seed, log, test=test,
                               how=dict(metric=model.metric(z), decoder=_on_cpu(model.pair_decoder)))
    metrics.update(epochs=len(result.history), best_epoch=result.best_epoch, stopped_early=result.stopped_early,
                   seconds_per_epoch=result.seconds_per_epoch, embed_seconds=embed_seconds,
                   total_seconds=time.perf_counter() - t_start,
                   peak_rss_bytes=max(setup_peak, peak_rss_bytes()), setup_peak_rss_bytes=setup_peak,
                   training_start_rss_bytes=train_start, training_peak_rss_bytes=train_peak, strategy=strategy_name,
                   processes=1 if group is None else group.world_size, device=str(device),
                   num_nodes=num_nodes, num_edges=num_edges, train_edges=split.num_train,
                   prepared=None if prepared is None else str(prepared), torch_threads=torch.get_num_threads(),
                   history=result.history)
    embeddings, bias = _embeddings_and_bias(model, z)
    node_ids = inputs.node_ids
    if out is not None:
        _write_run(out, config, model, inputs, csr, split, embeddings, bias, num_features, num_nodes)
        metrics["peak_rss_bytes"] = max(setup_peak, peak_rss_bytes())
        write_json(out / "metrics.json", metrics)
        if config.report:
            from .report import write_report
            write_report(out, log=log)
    summary = (f"test AUC {_fmt(metrics['test_auc'])}  AP {_fmt(metrics['test_ap'])}  |  val AUC {_fmt(metrics['val_auc'])}"
               f"  |  {metrics['epochs']} epochs (best {result.best_epoch}), {metrics['seconds_per_epoch']:.3f} s/epoch, "
               f"peak RSS {metrics['peak_rss_bytes'] / 2**30:.2f} GiB")
    baselines = baseline_summary(metrics)
    log(summary + (f"\n{baselines}" if baselines else "") + (f"\noutputs in {out}/" if out is not None else ""))
    if group is not None:  # the others wait here (a rank that tore the group down alone was seen to abort)
        barrier()
    return RunResult(model, embeddings, node_ids, metrics, out, bias)



def _embeddings_and_bias(model: GAE, z: torch.Tensor) -> tuple[np.ndarray, np.ndarray | None]:
    """``(embeddings: (N, d), node_bias: (N,) or None)`` float32 of the model's output ``z`` (:func:`split_bias`)."""
    bias = None
    if model.node_bias is not None:
        z, bias = split_bias(z)
        bias = bias.numpy().astype(np.float32)
    return np.ascontiguousarray(z.numpy(), dtype=np.float32), bias


def _write_run(out: Path, config: TrainConfig, model: GAE, inputs, csr, split, embeddings: np.ndarray,
               bias: np.ndarray | None, num_features: int | None, num_nodes: int) -> None:
    """The run directory's files but metrics.json and the report (layout: :mod:`gaescale.rundir`), each atomically;
    an earlier run's files into the same OUT that this run does not write are removed."""
    write_npy(out / "embeddings.npy", embeddings)
    if bias is not None:
        write_npy(out / "node_bias.npy", bias)
    else:
        (out / "node_bias.npy").unlink(missing_ok=True)
    if inputs.prepared is not None:
        with open(inputs.prepared / "nodes.tsv", "rb") as ids:
            atomic_write(out / "nodes.tsv", lambda fh: shutil.copyfileobj(ids, fh))
    else:
        write_ids(out / "nodes.tsv", inputs.node_ids)
    write_torch(out / "model.pt", {"state_dict": {k: v.cpu() for k, v in model.state_dict().items()},
                                   "config": config.to_dict(), "in_dim": num_features,
                                   "num_nodes": int(num_nodes), "gaescale_version": __version__})
    write_json(out / "config.json", config.to_dict())
    if inputs.prepared is not None:  # the graph stays where it is; the run names it (its own copy: relatively)
        own = inputs.prepared.resolve().parent == out.resolve()
        write_json(out / "graph.json", {"prepared": inputs.prepared.name if own else str(inputs.prepared.resolve())})
        (out / "graph.npz").unlink(missing_ok=True)
    else:
        write_npz(out / "graph.npz", indptr=csr[0], indices=csr[1])
        (out / "graph.json").unlink(missing_ok=True)
        shutil.rmtree(out / "split", ignore_errors=True)  # a prepared graph's split, of an earlier run
    write_npz(out / "heldout.npz", val_pos=split.val_pos, val_neg=split.val_neg, test_pos=split.test_pos,
              test_neg=split.test_neg)

def _resolve(config: TrainConfig, num_features: int | None, log) -> TrainConfig:
    """``config`` with ``encoder='auto'`` resolved for the graph (:meth:`TrainConfig.for_graph`), logged."""
    if config.resolved:
        return config
    config = config.for_graph(num_features)
    why = "no features" if num_features is None else f"{num_features:,} features per node"
    log(f"--encoder auto: {config.encoder} {'-'.join(map(str, config.layer_dims))} ({why}), lr {config.lr:g}")
    return config


def _on_cpu(module: torch.nn.Module | None) -> torch.nn.Module | None:
    """A CPU copy of ``module`` (the pair decoder scores the CPU embeddings; the model stays where it is)."""
    return None if module is None else copy.deepcopy(module).cpu()


def _heldout_metrics(z: torch.Tensor, split, train_graph: Graph | None, has_val: bool, seed: int,
                     log, *, how: dict | None = None, test: bool = True) -> dict[str, Any]:
    """Validation and test scores of ``z: (N, d)`` on ``split`` (:func:`gaescale.heldout.test_metrics`), and
    the link heuristics on the same test pairs with ``beats_baselines``; None where a split part is empty.
    ``how``: the decoder's ``metric`` and ``decoder`` (:mod:`gaescale.evaluate`)."""
    metrics: dict[str, Any] = {"val_auc": None, "val_ap": None, "test_auc": None, "test_ap": None}
    if has_val:
        metrics["val_auc"], metrics["val_ap"] = link_scores(z, split.val_pos, split.val_neg, **(how or {}))
    if test and split.test_pos.shape[1]:
        metrics.update(test_metrics(z, split, seed=seed, train_graph=train_graph, **(how or {})))
        metrics["baselines"] = _baselines(train_graph, split, log, seed)
        lost = not_beaten(metrics)
        metrics["beats_baselines"] = None if lost is None else not lost
    return metrics


def _baselines(train_graph: Graph | None, split, log, seed: int) -> dict | None:
    """The link heuristics on the test split (:func:`gaescale.heldout.baseline_metrics`), or None where rank 0
    does not hold the whole training graph (neighbour sampling over several processes: it holds its shard)."""
    if train_graph is None:
        log("baselines: not computed (the training graph is sharded over the processes)")
        return None
    return baseline_metrics(train_graph, split, seed=seed)


def _train_pairs(split, train_graph: Graph, self_loops: bool) -> torch.Tensor:
    """``(2, E)`` the training edges (plus ``(i, i)`` for every node when the target is ``A + I``)."""
    pairs = split.train if split.train is not None else train_graph.edge_index()
    if self_loops:
        loops = np.arange(train_graph.num_nodes, dtype=np.int64)
        pairs = np.concatenate([pairs, np.stack([loops, loops])], axis=1)
    return torch.from_numpy(pairs)


def _choose_strategy(config: TrainConfig, num_nodes: int, num_edges: int, num_features: int | None, log, *,
                     prepared: bool = False, device=None, group=None) -> str:
    """``config.strategy``, or for ``auto`` the planner's choice under ``config.memory_budget`` (see
    :func:`gaescale.plan.budget_bytes`), made by rank 0 of a ``group`` for every rank."""
    if config.strategy != "auto":
        return config.strategy
    from .plan import AUTO_ORDER, budget_bytes, choose, plan
    chosen = failed = None
    if group is None or group.is_main:
        budget = budget_bytes(config, device)
        try:
            best = choose(plan(config, num_nodes, num_edges, num_features, prepared=prepared), budget, config)
        except ParameterError as exc:  # raised below, once the other ranks know not to wait for a choice
            failed = exc
        else:
            chosen = best.strategy
            log(f"--strategy auto: {chosen} (predicted peak {best.peak_bytes / 2**30:.2f} GiB of a "
                f"{budget / 2**30:.2f} GiB budget{' per process' if group else ''}; 'gaescale plan' shows every "
                "strategy)")
    if group is not None:
        chosen = choice_from_main(chosen, tuple(AUTO_ORDER))
    if failed is not None:
        raise failed
    if chosen is None:
        raise DistributedError("rank 0 found no strategy that fits its memory budget (its error says more).")
    return chosen


def _strategy(config: TrainConfig, name: str, graph: Graph, log, group=None, train_edges=None):
    """The training strategy ``name`` on the training graph, with the options of ``config`` (METIS runs
    here for Cluster-GCN, on rank 0 of a ``group``); on the ranks of a ``group``, full batch shards the
    loss and the mini-batch strategies draw their own batches (see :mod:`gaescale.strategies`).
    ``train_edges``: for Cluster-GCN, ``graph`` is the whole graph and these are its training edges."""
    opts = config.strategy_options(graph.num_nodes)
    rank, world = (0, 1) if group is None else (group.rank, group.world_size)
    if group is not None:
        log(f"data parallel: {world} processes ({group.backend}); " + (
            "the graph replicated, the loss sharded" if name == "full" else
            "each trains on its own METIS parts" if name == "cluster" else "each draws its own batches"))
    if name == "cluster":
        per_batch = opts["clusters_per_batch"]
        parts = max(world, min(opts["cluster_parts"], graph.num_nodes) // world * world)  # as many on every rank
        t = time.perf_counter()
        make = lambda: {"parts": metis_parts(graph, parts, seed=config.seed)}  # noqa: E731 - under torchrun, on rank 0
        membership = (make() if group is None else arrays_from_main(make, "the METIS parts"))["parts"]
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
    return FullBatch() if group is None else ShardedFullBatch(group)


# Settings that may differ between the hosts of a data-parallel run: paths, and what only this process sees.
PER_HOST = frozenset({"edges", "features", "out", "quiet", "threads", "device", "report"})


def _same_settings(config: TrainConfig, group) -> None:
    """Refuse, on every rank, a run whose ranks were started with other settings than rank 0's (another
    ``--lr`` on one host would silently train another model there)."""
    every = gather({k: v for k, v in config.to_dict().items() if k not in PER_HOST}, waiting=True)
    for rank, theirs in enumerate(every[1:], start=1):
        changed = [f"{k} {theirs.get(k)!r} (rank 0: {v!r})" for k, v in every[0].items() if theirs.get(k) != v]
        if changed:
            raise DistributedError(f"rank {rank} was started with other settings than rank 0: {', '.join(changed)}; "
                                   "start every process with the same flags.")


def _checkpointing(config: TrainConfig, strategy: str, out: Path | None, csr, x, log, group=None, *,
                   prepared: bool = False) -> tuple[Checkpointer | None, dict | None]:
    """The run's checkpointer (None without --out or with checkpoint_every=0) and, with --resume, the state
    of its last checkpoint, checked against this configuration and graph (fingerprinted by rank 0 of a
    ``group``, the only rank that need hold it all). The hashed configuration holds the strategy actually
    used, so a resumed ``auto`` run that would choose another one is refused."""
    if config.resume and out is None:
        raise ParameterError("resume", "train", "used with an output directory (out / --out) that holds the "
                                                "checkpoints", True)
    if out is None or not (config.checkpoint_every or config.resume):
        return None, None
    main = group is None or group.is_main
    fingerprint = data_fingerprint(*csr, as_array(x)) if main else None
    if group is not None:
        fingerprint = gather(fingerprint, waiting=True)[0]
    split = "hashed" if prepared else "random"  # a prepared graph's split (gaescale.split) differs from the other
    ckpt = Checkpointer(out / "checkpoints", config.checkpoint_every, {**config.to_dict(), "strategy": strategy, "split": split},
                        fingerprint, fresh=not config.resume)
    if not config.resume:
        return ckpt, None
    # rank 0 reads it and sends it to the others, whose hosts need not see rank 0's OUT
    state = ckpt.load_latest() if group is None else object_from_main(ckpt.load_latest, "the checkpoint to resume")
    log(f"resuming from {ckpt.last} (epoch {state['epoch']}{', stopped early' if state['stopped'] else ''})")
    return ckpt, state


def _fmt(v) -> str:
    return "n/a" if v is None else f"{v:.4f}"
