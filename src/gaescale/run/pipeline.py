"""The one code path behind ``gaescale train``/``demo`` and :func:`gaescale.train`:
read -> graph (CSR) -> split -> encoder -> loss -> fit -> outputs."""
from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .. import cpu_cache, logs
from ..config import TrainConfig, tagged
from ..data.inputs import as_array, as_tensor
from ..data.prepare import is_prepared
from ..data.readers import EdgeList
from ..data.split import warn_empty_split
from ..devices import resolve_device
from ..errors import DistributedError, ParameterError
from ..graph import data_fingerprint
from ..outputs import MappedBuffers, check_out_dir, write_json
from ..parallel.placement import Placement
from ..parallel.runtime import Local
from ..parallel.shards import embed_sharded
from ..pyg import as_edge_list, custom_encoder, describe, is_edge_list_maker, resolve_custom
from ..training.buckets import BucketEdges, DiskTable
from ..training.checkpoint import Checkpointer
from ..training.heldout import baseline_summary
from ..training.selection import selection_note
from ..training.tracker import open_tracker
from ..training.trainer import fit
from .kinds import kind_of
from .memory import peak_rss_bytes, reset_peak_rss, rss_bytes
from .process import process_state_kept
from .ranking import calibrate_structure, ranking_parts, selects
from .result import Fitted, RunResult, Sizes
from .rundir import embeddings_and_bias, write_run
from .strategy import check_partitioned_run, learnt_table, make_strategy
from .writer import STAGING, RunWriter, output_bytes, staging_dir

LAYERWISE_BLOCK = 1 << 16  # rows of the operator per block in layer-wise inference


def train(config: TrainConfig | None = None, *, data: EdgeList | Callable[[], EdgeList] | None = None,
          log: Callable[[str], None] | None = None, runtime: Local | None = None, group=None,
          on_epoch: Callable[[dict], None] | None = None, test: bool = True, **options) -> RunResult | None:
    """Train a GCN graph autoencoder and, with ``config.out``, write its outputs.

    ``train(edges="edges.csv", out="run", hidden="16,16", dim=8)`` or ``train(TrainConfig(...))``;
    ``data`` replaces reading ``config.edges`` (an :class:`EdgeList`, e.g. from :func:`community_graph`, or a PyG
    ``Data``: :func:`gaescale.pyg.from_pyg`), or is a function of no arguments that returns one: called once, when
    the run reads its graph, so that the run alone holds the edge list and lets it go once the graph is built (the
    demo's ``(2, E)`` int64 edges, 70 MB at 770k nodes, are not held through training). ``encoder`` may be a
    module (``forward(x, graph) -> z``, e.g.
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
    data = data if is_edge_list_maker(data) else as_edge_list(data)  # a PyG Data: from_pyg; a function: when read
    kind = kind_of(config)  # undirected or directed (gaescale.run.kinds): what differs between them, chosen once
    prepared = data is None and is_prepared(config.edges)
    kind.check(config, rt, prepared=prepared, custom=custom)  # before anything is read
    log = log or ((lambda m: None) if config.quiet or not rt.is_main else logs.info)
    with process_state_kept():
        device, writer = _start(config, rt, log, data)
        try:
            return _train(config, kind, custom, data, log, rt, on_epoch, test, device, writer)
        finally:
            if writer is not None:
                writer.close()


def _train(config: TrainConfig, kind, custom, data: EdgeList | Callable[[], EdgeList] | None, log, rt: Local,
           on_epoch, test: bool, device, writer: RunWriter | None) -> RunResult | None:
    """:func:`train` of a graph of ``kind`` (:mod:`gaescale.run.kinds`), once the process is settled and the output
    directory taken."""
    out = staging_dir(config.out, writer)
    tracker = open_tracker(config.tensorboard, rt.is_main)  # --tensorboard: checked here, before any work
    t_start = time.perf_counter()
    # the run's own prepared copy of an edge list (torchrun) is a cache of the input in OUT itself, not staged
    inputs = kind.read(config, as_edge_list(data()) if is_edge_list_maker(data) else data, log,
                       out=None if out is None else Path(config.out), runtime=rt)
    graph, num_features = inputs.graph, None if inputs.x is None else int(inputs.x.shape[1])
    config = _resolve(config, num_features, log) if custom is None else resolve_custom(config)
    if custom is not None:
        log(f"encoder: {describe(custom)}, given to train (trained in place), lr {config.lr:g}")
    prepared = inputs.prepared is not None
    strategy_name, config = kind.choose(config, graph, num_features, log, prepared=prepared, device=device, runtime=rt)
    if strategy_name == "partitioned":  # given, or --strategy auto's choice: what its table on disk cannot do
        check_partitioned_run(config, num_features, custom)
    config, placed = kind.place(config, graph, inputs.x, strategy_name, prepared=prepared, out=out, runtime=rt,
                                device=device, log=log)
    if rt.is_main:
        warn_empty_split(placed.split, log)
    # graph.npz (topk --exclude-existing, the report): a CSR (and a weighted graph's weights), fingerprinted
    csr = kind.run_graph(graph) if rt.is_main else None
    checkpointer, resume = _checkpointing(config, strategy_name, out, csr, inputs.x, log, rt, prepared=prepared)
    sizes = Sizes(graph.num_nodes, graph.num_edges, num_features, strategy_name, inputs.prepared)
    model = _model(config, kind, sizes, device, custom)
    partitioned = strategy_name == "partitioned"
    # a learnt table on disk, and its epoch's edges in buckets beside it (at most every edge: the training graph's)
    table_bytes = (DiskTable.nbytes(sizes.num_nodes, config.encoder_dims[0])
                   + BucketEdges.nbytes(sizes.num_nodes, sizes.num_edges, graph.weighted)) if partitioned else 0
    if writer is not None:  # the outputs' room, now that their sizes are known: before training, not after
        writer.check_space(output_bytes(sizes.num_nodes, sizes.num_edges, dim=config.dim or 16, model=model,
                                        weighted=graph.weighted, prepared=sizes.prepared is not None,
                                        checkpoints=bool(config.checkpoint_every)) + table_bytes,
                           "the run's outputs and checkpoints" + (" and its learnt table and edge buckets"
                                                                   if partitioned else ""))
    del graph  # from here on only the training graph is needed
    x = None if placed.shards is not None else as_tensor(inputs.x)  # a prepared graph's features are copied here
    table, keep_table = learnt_table(config, sizes.num_nodes, out, log) if partitioned else (None, None)
    if table is not None:  # the encoder reads the table's rows as its input (GCN(table='input'))
        x = table.tensor
    if placed.shards is not None:  # only the shards are kept (rank 0 keeps the held-out edges of the split)
        placed.train_graph = None
        if not rt.is_main:
            inputs = placed.split = None
    try:  # the tracker gets every epoch's record, the resumed ones first, and is closed even on an error
        tracker.start(resume["history"] if resume else ())
        fitted = _fit(config, kind, model, placed, x, sizes, rt, log, checkpointer, resume,
                      tracker.callback(on_epoch), scratch=out, table=table)
        del keep_table  # without OUT, the table's temporary directory: the embeddings are made
        if not rt.is_main:  # waits while rank 0 writes the outputs, so that all leave the group together
            rt.barrier()
            return None
        metrics = _evaluate(config, kind, model, placed, fitted, sizes, log, test=test)
        tracker.log_final(metrics)
    finally:
        tracker.close()
    metrics.update(total_seconds=time.perf_counter() - t_start, processes=rt.world_size, device=str(device))
    result = _finish(config, model, inputs, csr, placed.split, fitted, metrics, sizes, writer, log)
    rt.barrier()  # the others wait here (a rank that tore the group down alone was seen to abort)
    return result


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


def _model(config: TrainConfig, kind, sizes: Sizes, device, custom=None) -> torch.nn.Module:
    """The model of ``config`` for the ``kind`` of graph, its initial weights drawn from ``config.seed``, on
    ``device``."""
    torch.manual_seed(config.seed)
    table = {"table": "input"} if sizes.strategy == "partitioned" else {}  # the learnt table on disk, not in the model
    model = kind.build_model(config, sizes.num_features, sizes.num_nodes, custom, **table).to(device)
    model.encoder.checkpoint_activations = config.checkpoint_activations
    return model


def _fit(config: TrainConfig, kind, model, placed: Placement, x, sizes: Sizes, rt: Local, log, checkpointer, resume,
         on_epoch, *, scratch: Path | None = None, table=None) -> Fitted:
    """Train ``model`` with the strategy of ``sizes.strategy`` (:func:`gaescale.trainer.fit`), then embed every node
    with its best weights; the memory of setup and of training measured apart. ``scratch``: where layer-wise
    inference over a memory-mapped graph maps its arrays (default: the temporary directory). ``table``: the learnt
    table of ``partitioned`` (``x`` is its rows)."""
    shards = placed.shards
    train_graph = placed.train_graph if shards is None else shards.graph
    strategy = make_strategy(config, sizes.strategy, train_graph, log, rt, train_edges=placed.cut_by_hash, table=table)
    # Full batch trains on every pair at once; the other strategies draw theirs from the training graph.
    train_pairs = kind.train_pairs(config, placed, train_graph) if sizes.strategy == "full" else None
    # A memory-mapped graph is embedded layer by layer (no operator over the whole graph) unless the
    # strategy builds that operator for training anyway; the shards always are, by every rank.
    layerwise = shards is not None or (sizes.prepared is not None
                                       and sizes.strategy in ("cluster", "neighbor", "partitioned"))
    block = LAYERWISE_BLOCK if layerwise else None
    device = next(model.parameters()).device
    # Over a memory-mapped graph, the (N, width) arrays of layer-wise inference are a file's pages too, on the CPU.
    mapped = layerwise and shards is None and sizes.prepared is not None and device.type == "cpu"
    buffers = {"buffers": MappedBuffers(scratch or tempfile.gettempdir())} if mapped else {}
    if shards is None:
        embed = lambda: model.embed(x, train_graph, block=block, **buffers)  # noqa: E731
    else:
        embed = lambda: embed_sharded(model, shards, block=block)  # noqa: E731
    has_val = rt.is_main and placed.split.val_pos.shape[1] > 0
    two_hop, val_rank = ranking_parts(config, model, train_graph, placed.split, has_val, sizes.strategy)
    memory = {"setup_peak_rss_bytes": peak_rss_bytes()}  # reading, graph and split; training's own peak apart
    phase_measured = reset_peak_rss()
    memory["training_start_rss_bytes"] = rss_bytes()  # what training starts from: graph, split, features, model
    x = None if x is None else x.to(device)  # on the CPU: the same tensor
    pooling = config.buffer_cache and device.type == "cpu"
    with rt.guard(), cpu_cache.cached_epochs(pooling) as pool:
        if pooling and pool.off is not None:
            log(f"training's large buffers are not kept between epochs: {pool.off}")
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
        memory["buffer_cache"] = pool.report()
        t = time.perf_counter()
        z = None
        if shards is not None:  # every rank embeds its nodes with rank 0's (best) weights
            rt.broadcast_state(model)
            z = embed()
    if shards is None and rt.is_main:  # the last validation's embeddings where they are of the weights kept
        t = time.perf_counter()
        z = (result.z if result.z is not None else embed()).cpu()
    seconds = time.perf_counter() - t
    if two_hop is not None and has_val:  # the structural part's scale, on the validation ranking
        calibrate_structure(model, z, placed.split, train_graph, two_hop.features, config.seed, log)
    return Fitted(result, z, block, seconds, memory, two_hop and two_hop.features)


def _evaluate(config: TrainConfig, kind, model, placed: Placement, fitted: Fitted, sizes: Sizes, log, *,
              test: bool) -> dict[str, Any]:
    """The run's metrics: held-out scores next to the heuristics, training's course, its time and memory."""
    result, split = fitted.result, placed.split
    note = selection_note(result.history, result.best_epoch, config.warmup_epochs, f"val_{selects(config, model)}")
    if note:
        log(note)
    if fitted.block and result.z is not None:
        log(f"embedded {sizes.num_nodes:,} nodes layer by layer: the last validation's embeddings, of the weights kept")
    elif fitted.block:
        log(f"embedded {sizes.num_nodes:,} nodes layer by layer, {fitted.block:,} rows at a time"
            f"{', each of the processes its own' if placed.shards is not None else ''} [{fitted.embed_seconds:.1f}s]")
    before = peak_rss_bytes()  # training's and embedding's; evaluation's own peak is measured apart
    evaluation_measured = reset_peak_rss()
    metrics = kind.heldout_metrics(config, model, fitted, placed, log, test=test)
    memory = dict(fitted.memory, evaluation_peak_rss_bytes=peak_rss_bytes() if evaluation_measured else None,
                  before_evaluation_peak_rss_bytes=before)
    metrics.update(epochs=len(result.history), best_epoch=result.best_epoch, stopped_early=result.stopped_early,
                   seconds_per_epoch=result.seconds_per_epoch, embed_seconds=fitted.embed_seconds,
                   peak_rss_bytes=max(memory["setup_peak_rss_bytes"], before, peak_rss_bytes()), **memory,
                   strategy=sizes.strategy, num_nodes=sizes.num_nodes, num_edges=sizes.num_edges,
                   train_edges=split.num_train, prepared=None if sizes.prepared is None else str(sizes.prepared),
                   torch_threads=torch.get_num_threads(), history=result.history)
    return metrics


def _finish(config: TrainConfig, model, inputs, csr, split, fitted: Fitted, metrics: dict, sizes: Sizes,
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
