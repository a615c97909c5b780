"""The one code path behind ``gaescale train``/``demo`` and :func:`gaescale.train`:
read -> graph (CSR) -> split -> encoder -> loss -> fit -> outputs."""
from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import logs
from ..config import TrainConfig, tagged
from ..data.inputs import as_array, as_tensor, read_inputs
from ..data.prepare import is_prepared
from ..data.readers import EdgeList
from ..data.split import warn_empty_split
from ..data.weights import refuse_unsupported
from ..devices import resolve_device
from ..encoders import ENCODERS
from ..errors import DistributedError, ParameterError
from ..graph import Graph, data_fingerprint, with_self_loops
from ..models import GAE, VGAE, HadamardMLP
from ..outputs import check_out_dir, write_json
from ..parallel.placement import Placement, place
from ..parallel.runtime import Local
from ..parallel.shards import embed_sharded
from ..pyg import as_edge_list, check_custom_encoder, custom_encoder, describe, resolve_custom
from ..structure import FEATURES, StructuralPart, StructuralScores
from ..training.checkpoint import Checkpointer
from ..training.evaluate import filtered_ranking, link_scores
from ..training.heldout import baseline_metrics, baseline_summary, known_edges, test_metrics, verdict
from ..training.selection import selection_note
from ..training.strategies import weighted_pairs
from ..training.tracker import open_tracker
from ..training.trainer import fit
from .memory import peak_rss_bytes, reset_peak_rss, rss_bytes
from .process import process_state_kept
from .ranking import calibrate_structure, ranking_parts, resolve_structure, selects
from .rundir import embeddings_and_bias, write_run
from .strategy import choose_strategy, make_strategy
from .writer import STAGING, RunWriter, output_bytes, staging_dir

LAYERWISE_BLOCK = 1 << 16  # rows of the operator per block in layer-wise inference


@dataclass
class RunResult:
    model: GAE
    embeddings: np.ndarray  # (N, d) float32, row i = node_ids[i]
    node_ids: np.ndarray
    metrics: dict[str, Any]
    out_dir: Path | None
    node_bias: np.ndarray | None = None  # (N,) float32 with decoder='bias': s_ij = z_i . z_j + b_i + b_j
    csr: tuple | None = None  # (indptr (N + 1,), indices (2E,)): the cleaned input graph, as graph.npz (to_pyg)


def build_model(config: TrainConfig, in_dim: int | None, num_nodes: int, custom=None) -> GAE:
    """The GAE (or VGAE) of ``config`` (``encoder='auto'`` resolved for ``in_dim`` features, None: a learnt
    table); a VGAE's encoder outputs ``2 * dim`` columns (mean and log std). ``custom``: the encoder given as
    ``train(encoder=module)`` (e.g. :class:`gaescale.pyg.PyGEncoder`) instead of the config's."""
    config = config.for_graph(in_dim)
    dims = config.encoder_dims
    encoder = ENCODERS["gcn" if config.encoder == "linear" else config.encoder]
    pair_decoder = HadamardMLP(config.dim) if config.decoder == "hadamard" else None
    if custom is None:
        custom = encoder(in_dim, dims, num_nodes=num_nodes, dropout=config.dropout)
    return (VGAE if config.variational else GAE)(custom,
                                                  node_bias=num_nodes if config.decoder == "bias" else None,
                                                  pair_decoder=pair_decoder,
                                                  structure=StructuralPart() if config.structure == "on" else None)


def train(config: TrainConfig | None = None, *, data: EdgeList | None = None,
          log: Callable[[str], None] | None = None, runtime: Local | None = None, group=None,
          on_epoch: Callable[[dict], None] | None = None, test: bool = True, **options) -> RunResult | None:
    """Train a GCN graph autoencoder and, with ``config.out``, write its outputs.

    ``train(edges="edges.csv", out="run", hidden="16,16", dim=8)`` or ``train(TrainConfig(...))``;
    ``data`` replaces reading ``config.edges`` (an :class:`EdgeList`, e.g. from :func:`community_graph`, or a PyG
    ``Data``: :func:`gaescale.pyg.from_pyg`). ``encoder`` may be a module (``forward(x, graph) -> z``, e.g.
    :class:`gaescale.pyg.PyGEncoder`): it is trained, in place, instead of the config's (see docs/pyg.md).
    ``runtime`` (:func:`gaescale.parallel.runtime.resolve`; ``group`` is its old name): under torchrun this
    process is one rank of a data-parallel group (see :mod:`gaescale.parallel.runtime`); only rank 0 logs,
    evaluates and writes, and only rank 0 returns a result (the others return None). ``on_epoch(record)`` is
    called after every epoch with its loss and, when evaluated, its ``val_auc`` (what ``gaescale tune`` prunes
    on; it may raise to stop the run). ``test=False``: the test split is held out of training as usual but
    never scored, nor are the heuristics (``gaescale tune``, which must choose on validation alone).

    The steps, in the order the data flows: read -> place (split, shard) -> strategy -> checkpointing -> model
    -> fit -> embed -> evaluate -> write.
    """
    custom = custom_encoder(options)  # train(encoder=module): the config's encoder is a name
    config = _config(config, options)
    rt = runtime or group or Local()
    data = as_edge_list(data)  # a PyG Data: from_pyg
    _check_custom(custom, config, rt, prepared=data is None and is_prepared(config.edges))
    log = log or ((lambda m: None) if config.quiet or not rt.is_main else logs.info)
    with process_state_kept():
        device, writer = _start(config, rt, log, data)
        try:
            if config.directed:  # its own steps around the same trainer: gaescale/directed/pipeline.py
                from ..directed.pipeline import train_directed
                return train_directed(config, data=data, log=log, runtime=rt, on_epoch=on_epoch, test=test,
                                      device=device, writer=writer)
            return _train(config, custom, data, log, rt, on_epoch, test, device, writer)
        finally:
            if writer is not None:
                writer.close()


def _train(config: TrainConfig, custom, data: EdgeList | None, log, rt: Local, on_epoch, test: bool, device,
           writer: RunWriter | None) -> RunResult | None:
    """:func:`train` of an undirected graph, once the process is settled and the output directory taken."""
    out = staging_dir(config.out, writer)
    tracker = open_tracker(config.tensorboard, rt.is_main)  # --tensorboard: checked here, before any work
    t_start = time.perf_counter()
    refuse_unsupported(config, prepared=data is None and is_prepared(config.edges), world_size=rt.world_size)
    # the run's own prepared copy of an edge list (torchrun) is a cache of the input in OUT itself, not staged
    inputs = read_inputs(config, data, log, out=None if out is None else Path(config.out), runtime=rt)
    graph, num_features = inputs.graph, None if inputs.x is None else int(inputs.x.shape[1])
    config = _resolve(config, num_features, log) if custom is None else resolve_custom(config)
    if custom is not None:
        log(f"encoder: {describe(custom)}, given to train (trained in place), lr {config.lr:g}")
    strategy_name = choose_strategy(config, graph.num_nodes, graph.num_edges, num_features, log,
                                     prepared=inputs.prepared is not None, device=device, runtime=rt)
    config = resolve_structure(config, strategy_name, rt, prepared=inputs.prepared is not None)
    placed = place(config, graph, inputs.x, strategy_name, prepared=inputs.prepared is not None, out=out, runtime=rt,
                   device=device, log=log)
    if rt.is_main:
        warn_empty_split(placed.split, log)
    csr = (graph.indptr, graph.indices) if rt.is_main else None  # for graph.npz (topk --exclude-existing, the report)
    if csr is not None and graph.data is not None:
        csr += (graph.data,)  # a weighted graph's weights: graph.npz 'data'; fingerprinted with the CSR
    checkpointer, resume = _checkpointing(config, strategy_name, out, csr, inputs.x, log, rt,
                                          prepared=inputs.prepared is not None)
    sizes = _Sizes(graph.num_nodes, graph.num_edges, num_features, strategy_name, inputs.prepared)
    model = _model(config, sizes, device, custom)
    if writer is not None:  # the outputs' room, now that their sizes are known: before training, not after
        writer.check_space(output_bytes(sizes.num_nodes, sizes.num_edges, dim=config.dim or 16, model=model,
                                        weighted=graph.weighted, prepared=sizes.prepared is not None,
                                        checkpoints=bool(config.checkpoint_every)),
                           "the run's outputs and checkpoints")
    del graph  # from here on only the training graph is needed
    x = None if placed.shards is not None else as_tensor(inputs.x)  # a prepared graph's features are copied here
    if placed.shards is not None:  # only the shards are kept (rank 0 keeps the held-out edges of the split)
        placed.train_graph = None
        if not rt.is_main:
            inputs = placed.split = None
    try:  # the tracker gets every epoch's record, the resumed ones first, and is closed even on an error
        tracker.start(resume["history"] if resume else ())
        fitted = _fit(config, model, placed, x, sizes, rt, log, checkpointer, resume, tracker.callback(on_epoch))
        if not rt.is_main:  # waits while rank 0 writes the outputs, so that all leave the group together
            rt.barrier()
            return None
        metrics = _evaluate(config, model, placed, fitted, sizes, log, test=test)
        tracker.log_final(metrics)
    finally:
        tracker.close()
    metrics.update(total_seconds=time.perf_counter() - t_start, processes=rt.world_size, device=str(device))
    result = _finish(config, model, inputs, csr, placed.split, fitted, metrics, sizes, writer, log)
    rt.barrier()  # the others wait here (a rank that tore the group down alone was seen to abort)
    return result


def _check_custom(custom, config: TrainConfig, rt: Local, *, prepared: bool) -> None:
    """Refuse, before anything is read, what a module given as ``train(encoder=...)`` cannot do."""
    if custom is None:
        return
    if config.directed:
        raise ParameterError("encoder", "train", "an encoder name with directed=True (a module given as encoder= is "
                                                 "not supported on directed graphs yet)", type(custom).__name__)
    check_custom_encoder(custom, config, rt, prepared=prepared)


@dataclass
class _Sizes:
    """What the steps after reading need to know of the graph (which is let go once it is split)."""

    num_nodes: int
    num_edges: int
    num_features: int | None
    strategy: str
    prepared: Path | None


@dataclass
class _Fitted:
    """What training left: the fit's result, ``z: (N, d)`` on the CPU, the block of layer-wise inference
    (None: one forward pass), the seconds embedding took, and the memory measured around training."""

    result: Any
    z: torch.Tensor | None
    block: int | None
    embed_seconds: float
    memory: dict[str, Any]
    features: Any = None  # the training graph's pair features (gaescale.structure) of a model with a structural part


def _config(config: TrainConfig | None, options: dict) -> TrainConfig:
    """``config``, or one made of ``options``, or ``config`` with ``options`` changed."""
    if config is not None and not isinstance(config, TrainConfig):
        raise ParameterError("config", "train", "a gaescale.TrainConfig, or the options as keywords "
                                                "(train(edges=..., out=...))", type(config).__name__)
    if config is None:
        return TrainConfig(**options)
    if options:
        return config.with_options(**options)
    return config


def _start(config: TrainConfig, runtime: Local, log, data) -> tuple[torch.device, RunWriter | None]:
    """Settle the process before any work: its threads, the device (a missing GPU is a user error, before anything
    is written), the output directory checked and taken by rank 0 (:class:`gaescale.run.writer.RunWriter`), and
    every rank started with rank 0's settings."""
    if config.threads:
        torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    writer = None
    if config.out and runtime.is_main:
        inputs = [p for p in (config.edges, config.features) if p is not None] if data is None else []
        writer = RunWriter.open(config.out, overwrite=config.overwrite, resume=config.resume, inputs=inputs, log=log)
    elif config.out:
        check_out_dir(config.out)
    try:
        if device.type == "cuda":
            log(f"device: {device} ({torch.cuda.get_device_name(device)})")
        _same_settings(config, runtime)
    except BaseException:
        if writer is not None:
            writer.close()
        raise
    return device, writer


def _model(config: TrainConfig, sizes: _Sizes, device, custom=None) -> GAE:
    """The model of ``config``, its initial weights drawn from ``config.seed``, on ``device``."""
    torch.manual_seed(config.seed)
    model = build_model(config, sizes.num_features, sizes.num_nodes, custom).to(device)
    model.encoder.checkpoint_activations = config.checkpoint_activations
    return model


def _fit(config: TrainConfig, model: GAE, placed: Placement, x, sizes: _Sizes, rt: Local, log, checkpointer, resume,
         on_epoch) -> _Fitted:
    """Train ``model`` with the strategy of ``sizes.strategy`` (:func:`gaescale.trainer.fit`), then embed every node
    with its best weights; the memory of setup and of training measured apart."""
    shards = placed.shards
    train_graph = placed.train_graph if shards is None else shards.graph
    strategy = make_strategy(config, sizes.strategy, train_graph, log, rt, train_edges=placed.cut_by_hash)
    # Full batch trains on every pair at once; the other strategies draw theirs from the training graph.
    train_pairs = _train_pairs(placed.split, train_graph, config.self_loops) if sizes.strategy == "full" else None
    # A memory-mapped graph is embedded layer by layer (no operator over the whole graph) unless the
    # strategy builds that operator for training anyway; the shards always are, by every rank.
    layerwise = shards is not None or (sizes.prepared is not None and sizes.strategy in ("cluster", "neighbor"))
    block = LAYERWISE_BLOCK if layerwise else None
    if shards is None:
        embed = lambda: model.embed(x, train_graph, block=block)  # noqa: E731
    else:
        embed = lambda: embed_sharded(model, shards, block=block)  # noqa: E731
    has_val = rt.is_main and placed.split.val_pos.shape[1] > 0
    two_hop, val_rank = ranking_parts(config, model, train_graph, placed.split, has_val)
    memory = {"setup_peak_rss_bytes": peak_rss_bytes()}  # reading, graph and split; training's own peak apart
    phase_measured = reset_peak_rss()
    memory["training_start_rss_bytes"] = rss_bytes()  # what training starts from: graph, split, features, model
    device = next(model.parameters()).device
    x = None if x is None else x.to(device)  # on the CPU: the same tensor
    with rt.guard():
        result = fit(model, x if shards is None else shards.features, train_graph, train_pairs,
                     val=(placed.split.val_pos, placed.split.val_neg) if has_val else None,
                     epochs=config.epochs, lr=config.lr, seed=config.seed, eval_every=config.eval_every,
                     patience=config.patience, warmup=config.warmup_epochs, progress=not config.quiet and rt.is_main,
                     loss_kwargs=dict(kind=config.loss, dense=config.dense, weighting=config.weighting,
                                      neg_ratio=config.neg_ratio, **({"two_hop": two_hop} if two_hop else {})),
                     checkpointer=checkpointer if rt.is_main else None, resume=resume, strategy=strategy,
                     time_limit=config.time_limit, embed=embed if rt.is_main or shards is not None else None,
                     embed_collective=shards is not None, precision=config.precision, runtime=rt, on_epoch=on_epoch,
                     select=selects(config, model), val_rank=val_rank, structure=two_hop and two_hop.features)
        memory["training_peak_rss_bytes"] = peak_rss_bytes() if phase_measured else None
        t = time.perf_counter()
        z = None
        if shards is not None:  # every rank embeds its nodes with rank 0's (best) weights
            rt.broadcast_state(model)
            z = embed()
    if shards is None and rt.is_main:
        t = time.perf_counter()
        z = model.embed(x, train_graph, block=block).cpu()
    seconds = time.perf_counter() - t
    if two_hop is not None and has_val:  # the structural part's scale, on the validation ranking
        calibrate_structure(model, z, placed.split, train_graph, two_hop.features, config.seed, log)
    return _Fitted(result, z, block, seconds, memory, two_hop and two_hop.features)


def _evaluate(config: TrainConfig, model: GAE, placed: Placement, fitted: _Fitted, sizes: _Sizes, log, *,
              test: bool) -> dict[str, Any]:
    """The run's metrics: held-out scores next to the heuristics, training's course, its time and memory."""
    result, split = fitted.result, placed.split
    note = selection_note(result.history, result.best_epoch, config.warmup_epochs, f"val_{selects(config, model)}")
    if note:
        log(note)
    if fitted.block:
        log(f"embedded {sizes.num_nodes:,} nodes layer by layer, {fitted.block:,} rows at a time"
            f"{', each of the processes its own' if placed.shards is not None else ''} [{fitted.embed_seconds:.1f}s]")
    train_graph = placed.train_graph if placed.shards is None else None
    structure = None if model.structure is None else StructuralScores(fitted.features, model.structure.weights)
    before = peak_rss_bytes()  # training's and embedding's; evaluation's own peak is measured apart
    evaluation_measured = reset_peak_rss()
    metrics = _heldout_metrics(fitted.z, split, train_graph, split.val_pos.shape[1] > 0, config.seed, log, test=test,
                               how=dict(metric=model.metric(fitted.z), decoder=_on_cpu(model.pair_decoder),
                                        structure=structure))
    if structure is not None:
        metrics["structure_weights"] = dict(zip(FEATURES, structure.weights.tolist()))
    memory = dict(fitted.memory, evaluation_peak_rss_bytes=peak_rss_bytes() if evaluation_measured else None,
                  before_evaluation_peak_rss_bytes=before)
    metrics.update(epochs=len(result.history), best_epoch=result.best_epoch, stopped_early=result.stopped_early,
                   seconds_per_epoch=result.seconds_per_epoch, embed_seconds=fitted.embed_seconds,
                   peak_rss_bytes=max(memory["setup_peak_rss_bytes"], before, peak_rss_bytes()), **memory,
                   strategy=sizes.strategy, num_nodes=sizes.num_nodes, num_edges=sizes.num_edges,
                   train_edges=split.num_train, prepared=None if sizes.prepared is None else str(sizes.prepared),
                   torch_threads=torch.get_num_threads(), history=result.history)
    return metrics


def _finish(config: TrainConfig, model: GAE, inputs, csr, split, fitted: _Fitted, metrics: dict, sizes: _Sizes,
            writer: RunWriter | None, log) -> RunResult:
    """Write the run directory (with a ``writer``: into its staging directory, then committed) and the report,
    log the summary, and return the result."""
    embeddings, bias = embeddings_and_bias(model, fitted.z)
    out = None if writer is None else writer.out
    if writer is not None:
        staged = writer.staging
        write_run(staged, config, model, inputs, csr, split, embeddings, bias, sizes.num_features, sizes.num_nodes)
        metrics["peak_rss_bytes"] = max(metrics["peak_rss_bytes"], peak_rss_bytes())
        write_json(staged / "metrics.json", metrics)
        if config.report:
            from .report import write_report
            write_report(staged, log=lambda m: log(m.replace(str(staged), str(out))))
        writer.commit()
    result = fitted.result
    summary = (f"test AUC {_fmt(metrics['test_auc'])}  AP {_fmt(metrics['test_ap'])}  |  "
               f"val AUC {_fmt(metrics['val_auc'])}  |  {metrics['epochs']} epochs (best {result.best_epoch}), "
               f"{metrics['seconds_per_epoch']:.3f} s/epoch, peak RSS {metrics['peak_rss_bytes'] / 2**30:.2f} GiB")
    baselines = baseline_summary(metrics)
    log(summary + (f"\n{baselines}" if baselines else "") + (f"\noutputs in {out}/" if out is not None else ""))
    return RunResult(model, embeddings, inputs.node_ids, metrics, out, bias, csr)


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
        if (how or {}).get("structure") is not None and train_graph is not None:  # the structural part's share
            alone = {**how, "structure": None}
            metrics["embeddings_only"] = filtered_ranking(z, split.test_pos, known_edges(train_graph, split),
                                                          seed=seed, **alone)
        metrics["baselines"] = _baselines(train_graph, split, log, seed)
        metrics.update(verdict(metrics))
    return metrics


def _baselines(train_graph: Graph | None, split, log, seed: int) -> dict | None:
    """The link heuristics on the test split (:func:`gaescale.heldout.baseline_metrics`), or None where rank 0
    does not hold the whole training graph (neighbour sampling over several processes: it holds its shard)."""
    if train_graph is None:
        log("baselines: not computed (the training graph is sharded over the processes)")
        return None
    return baseline_metrics(train_graph, split, seed=seed)


def _train_pairs(split, train_graph: Graph, self_loops: bool) -> torch.Tensor:
    """``(2, E)`` the training edges (plus ``(i, i)`` for every node when the target is ``A + I``); a weighted
    graph's as a :class:`gaescale.sparse.PairIndex` with their weights."""
    if train_graph.weighted:
        return weighted_pairs(train_graph, self_loops)
    edges = split.train if split.train is not None else train_graph.edge_index()
    return torch.from_numpy(with_self_loops(edges, train_graph.num_nodes, self_loops))


# Settings that may differ between the hosts of a data-parallel run: paths, and what only this process sees.
PER_HOST = tagged("per_host")


def _same_settings(config: TrainConfig, runtime: Local) -> None:
    """Refuse, on every rank, a run whose ranks were started with other settings than rank 0's (another
    ``--lr`` on one host would silently train another model there)."""
    every = runtime.gather({k: v for k, v in config.to_dict().items() if k not in PER_HOST}, waiting=True)
    for rank, theirs in enumerate(every[1:], start=1):
        changed = [f"{k} {theirs.get(k)!r} (rank 0: {v!r})" for k, v in every[0].items() if theirs.get(k) != v]
        if changed:
            raise DistributedError(f"rank {rank} was started with other settings than rank 0: {', '.join(changed)}; "
                                   "start every process with the same flags.")


def _checkpointing(config: TrainConfig, strategy: str, out: Path | None, csr, x, log, runtime: Local | None = None, *,
                   prepared: bool = False) -> tuple[Checkpointer | None, dict | None]:
    """The run's checkpointer (None without --out or with checkpoint_every=0) and, with --resume, the state
    of its last checkpoint, checked against this configuration and graph (fingerprinted by rank 0 of the
    ``runtime``, the only rank that need hold it all). The hashed configuration holds the strategy actually
    used, so a resumed ``auto`` run that would choose another one is refused."""
    if config.resume and out is None:
        raise ParameterError("resume", "train", "used with an output directory (out / --out) that holds the "
                                                "checkpoints", True)
    if out is None or not (config.checkpoint_every or config.resume):
        return None, None
    runtime = runtime or Local()
    fingerprint = data_fingerprint(*csr, as_array(x)) if runtime.is_main else None
    fingerprint = runtime.gather(fingerprint, waiting=True)[0]
    split = "hashed" if prepared else "random"  # a prepared graph's split (gaescale.split) differs from the other
    # a finished run's checkpoints, which a resumed run continues from (its own go to the staging directory)
    finished = [out.parent / "checkpoints"] if out.name == STAGING else []
    ckpt = Checkpointer(out / "checkpoints", config.checkpoint_every,
                        {**config.to_dict(), "strategy": strategy, "split": split},
                        fingerprint, fresh=not config.resume, also=finished)
    if not config.resume:
        return ckpt, None
    # rank 0 reads it and sends it to the others, whose hosts need not see rank 0's OUT
    state = runtime.on_main(lambda: ckpt.load_latest(log), "the checkpoint to resume")
    log(f"resuming from {ckpt.last} (epoch {state['epoch']}{', stopped early' if state['stopped'] else ''})")
    return ckpt, state


def _fmt(v) -> str:
    return "n/a" if v is None else f"{v:.4f}"
