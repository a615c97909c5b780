"""``gaescale train --directed``: read -> directed graph (out- and in-CSR) -> directed split -> source/target
encoder -> asymmetric loss -> fit -> outputs, on one process with the full-batch strategy. The steps that do
not depend on direction (the trainer, checkpointing, the run directory, the report) are the undirected run's
(:mod:`gaescale.run.pipeline`)."""
from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from ..config import TrainConfig
from ..data.inputs import Inputs, check_not_a_plain_directory, load_edges, log_features, require_weights
from ..data.prepare import is_prepared
from ..data.split import warn_empty_split
from ..errors import ParameterError
from ..parallel.runtime import Local
from ..run.memory import peak_rss_bytes
from ..run.pipeline import RunResult, _checkpointing, _finish, _Fitted, _resolve, _Sizes
from ..run.writer import staging_dir
from ..training.evaluate import filtered_ranking, hits_at_k, link_scores, mrr, pair_scores
from ..training.heldout import baseline_metrics, verdict
from ..training.strategies import FullBatch, weighted_pairs
from ..training.tracker import open_tracker
from ..training.trainer import fit
from .graph import DiGraph, DirectedSplit, reverse_pairs, split_directed
from .model import DirectedGAE, SourceTarget, SourceTargetEncoder, halves


def build_directed_model(config: TrainConfig, in_dim: int | None, num_nodes: int) -> DirectedGAE:
    """The source/target GAE of ``config`` (``encoder`` resolved: gcn or linear, the latter one layer of width
    ``dim``), with the symmetric part for ``directed_symmetric`` and per-node source and target biases for
    ``decoder='bias'``."""
    config = config.for_graph(in_dim)
    if config.directed_symmetric not in ("on", "off"):
        raise ParameterError("directed_symmetric", "build_directed_model", "'on' or 'off' (resolve 'auto' for the "
                                                                           "training graph: resolve_symmetric)",
                             config.directed_symmetric)
    encoder = SourceTargetEncoder(in_dim, config.layer_dims, num_nodes=num_nodes, dropout=config.dropout,
                                  symmetric=config.directed_symmetric == "on")
    return DirectedGAE(encoder, num_nodes=num_nodes if config.decoder == "bias" else None)


RECIPROCITY_FOR_SYMMETRIC = 0.1  # auto: the symmetric part where at least this share of edges is reciprocated


def resolve_symmetric(config: TrainConfig, train_graph: DiGraph, log) -> TrainConfig:
    """``config`` with ``directed_symmetric='auto'`` resolved for the training graph, logged: on where at least
    :data:`RECIPROCITY_FOR_SYMMETRIC` of its edges are reciprocated (BENCHMARKS.md, "Directed graphs")."""
    if config.directed_symmetric != "auto":
        return config
    r = train_graph.reciprocity
    on = r >= RECIPROCITY_FOR_SYMMETRIC
    log(f"--directed-symmetric auto: {'on' if on else 'off'} ({100 * r:.1f}% of the training edges are "
        f"reciprocated; on from {100 * RECIPROCITY_FOR_SYMMETRIC:g}%)")
    return config.with_options(directed_symmetric="on" if on else "off")


def embeddings_layout(model: DirectedGAE, width: int) -> dict[str, Any]:
    """What embeddings.npy holds (recorded in metrics.json): its columns, and the logit of a pair."""
    half = width // 2
    sym = ", z_u" if getattr(model.encoder, "shared", None) is not None else ""
    cols = f"[z_s{sym}, b_s, 1 | z_t{sym}, 1, b_t]" if model.source_bias is not None else f"[z_s{sym} | z_t{sym}]"
    return {"columns": cols, "width": width, "half": half,
            "logit": f"s_uv = row_u[:{half}] . row_v[{half}:] (source u, target v)"}


def train_directed(config: TrainConfig, *, data=None, log, runtime: Local, on_epoch=None,
                   test: bool = True, device: torch.device, writer=None) -> RunResult:
    """:func:`gaescale.train` with ``config.directed`` (see the module's docstring), on ``device`` with the output
    directory that ``writer`` holds (:class:`gaescale.run.writer.RunWriter`; None: nothing written)."""
    if runtime.world_size > 1:
        raise ParameterError("directed", "train", "False under torchrun (several processes do not support directed "
                                                  "graphs yet)", True)
    if data is None and config.edges is not None and is_prepared(config.edges):
        raise ParameterError("directed", "train", "False with a prepared graph ('gaescale prepare' stores an "
                                                  "undirected graph; directed graphs are read from an edge list, "
                                                  "not supported prepared yet)", True)
    out = staging_dir(config.out, writer)
    tracker = open_tracker(config.tensorboard)  # --tensorboard: checked before any work
    t_start = time.perf_counter()
    check_not_a_plain_directory(config, data)
    data = data if data is not None else load_edges(config)
    require_weights(data, config.weighted)
    graph = DiGraph.from_edge_index(data.edge_index, data.num_nodes,
                                    edge_weight=data.edge_weight if config.weighted else None)
    s = graph.stats
    zeros = f", {s.zero_weights:,} rows of weight 0 dropped" if s.zero_weights else ""
    log(f"read {data.source}: {data.num_nodes:,} nodes; {s.rows:,} edge rows -> {graph.num_edges:,} directed "
        f"{'weighted ' if graph.weighted else ''}edges ({s.self_loops:,} self loops dropped{zeros}, "
        f"{s.duplicates:,} duplicates merged) [{time.perf_counter() - t_start:.1f}s]")
    graph.require_edges(data.source or "the graph")
    x = None if data.x is None else torch.from_numpy(np.ascontiguousarray(data.x, dtype=np.float32))
    log_features(x, log)
    ids = data.node_ids if data.node_ids is not None else np.arange(data.num_nodes, dtype=np.int64)
    num_features, n = None if x is None else int(x.shape[1]), graph.num_nodes
    config = _resolve(config, num_features, log)
    split = split_directed(graph, config.val_fraction, config.test_fraction, seed=config.seed)
    train_graph = split.train_graph()
    config = resolve_symmetric(config, train_graph, log)
    warn_empty_split(split, log)
    log(f"directed split: {split.num_train:,} training, {split.val_pos.shape[1]:,} validation and "
        f"{split.test_pos.shape[1]:,} test edges, as many ordered non-edges")
    csr = (graph.out.indptr, graph.out.indices)  # graph.npz: the out-CSR of the full graph (and its weights)
    csr = csr if graph.weights is None else (*csr, graph.weights)
    checkpointer, resume = _checkpointing(config, "full", out, csr, x, log, runtime)
    torch.manual_seed(config.seed)
    model = build_directed_model(config, num_features, n).to(device)
    try:  # the tracker gets every epoch's record, the resumed ones first, and is closed even on an error
        tracker.start(resume["history"] if resume else ())
        fitted = _fit_directed(config, model, x, split, train_graph, checkpointer, resume, runtime,
                               tracker.callback(on_epoch))
        metrics = _directed_run_metrics(config, model, fitted, graph, split, train_graph, log, test=test)
        tracker.log_final(metrics)
    finally:
        tracker.close()
    metrics.update(total_seconds=time.perf_counter() - t_start, device=str(device))
    return _finish(config, model, Inputs(None, x, ids), csr, split, fitted, metrics,
                   _Sizes(n, graph.num_edges, num_features, "full", None), writer, log)


def _fit_directed(config: TrainConfig, model: DirectedGAE, x, split: DirectedSplit, train_graph: DiGraph,
                  checkpointer, resume, runtime: Local, on_epoch) -> _Fitted:
    """Full-batch training of ``model`` on the directed training edges, then ``z = [z_s | z_t]`` of every node."""
    device = next(model.parameters()).device
    pairs = weighted_pairs(train_graph, config.self_loops, split.train, split.train_weight)
    has_val = split.val_pos.shape[1] > 0
    xd = None if x is None else x.to(device)
    result = fit(model, xd, train_graph, pairs, val=(split.val_pos, split.val_neg) if has_val else None,
                 epochs=config.epochs, lr=config.lr, seed=config.seed, eval_every=config.eval_every,
                 patience=config.patience, warmup=config.warmup_epochs, progress=not config.quiet,
                 loss_kwargs=dict(kind=config.loss, dense=config.dense, weighting=config.weighting,
                                  neg_ratio=config.neg_ratio),
                 checkpointer=checkpointer, resume=resume, strategy=FullBatch(), time_limit=config.time_limit,
                 precision=config.precision, runtime=runtime, on_epoch=on_epoch)
    t = time.perf_counter()
    z = model.embed(xd, train_graph).cpu()
    return _Fitted(result, z, None, time.perf_counter() - t, {"setup_peak_rss_bytes": peak_rss_bytes()})


def _directed_run_metrics(config: TrainConfig, model: DirectedGAE, fitted: _Fitted, graph: DiGraph,
                          split: DirectedSplit, train_graph: DiGraph, log, *, test: bool) -> dict[str, Any]:
    """metrics.json of a directed run: :func:`directed_metrics` and training's course, time and memory."""
    z, result, n = fitted.z, fitted.result, graph.num_nodes
    metrics = directed_metrics(z, graph, split, train_graph, split.val_pos.shape[1] > 0, config.seed, test=test)
    if metrics["reverse_auc"] is not None:
        log(f"reverse AUC {metrics['reverse_auc']:.4f} on {metrics['reverse_pairs']:,} test edges (u, v) against "
            "(v, u), where (v, u) is not an edge (0.5: direction not learnt)")
    metrics.update(epochs=len(result.history), best_epoch=result.best_epoch, stopped_early=result.stopped_early,
                   seconds_per_epoch=result.seconds_per_epoch, embed_seconds=fitted.embed_seconds,
                   peak_rss_bytes=peak_rss_bytes(), setup_peak_rss_bytes=fitted.memory["setup_peak_rss_bytes"],
                   strategy="full", num_nodes=n, num_edges=graph.num_edges, train_edges=split.num_train,
                   prepared=None, torch_threads=torch.get_num_threads(), history=result.history,
                   directed=embeddings_layout(model, int(z.shape[1])), processes=1)
    return metrics


def reverse_auc(scores, graph: DiGraph, pos: np.ndarray) -> tuple[float | None, int]:
    """``(AUC, R)``: the held-out edges ``(u, v)`` of ``pos: (2, P)`` whose reversal is not an edge of ``graph``
    (:func:`gaescale.directed.graph.reverse_pairs`, ``R`` of them), scored by ``scores(pairs: (2, R)) -> (R,)``
    against their reversals ``(v, u)``; ties count half (a symmetric decoder scores 0.5). None when ``R = 0``."""
    from sklearn.metrics import roc_auc_score
    rev = reverse_pairs(graph, pos)
    if not rev.shape[1]:
        return None, 0
    s = np.concatenate([scores(rev), scores(np.ascontiguousarray(rev[::-1]))])
    y = np.concatenate([np.ones(rev.shape[1]), np.zeros(rev.shape[1])])
    return float(roc_auc_score(y, s)), int(rev.shape[1])


def directed_metrics(z: torch.Tensor, graph: DiGraph, split: DirectedSplit, train_graph: DiGraph, has_val: bool,
                     seed: int, *, test: bool = True) -> dict[str, Any]:
    """Validation and test AUC/AP, Hits@K, MRR and the filtered ranking (known out-edges of the full graph
    removed) of ``z = [z_s | z_t]: (N, 2h)`` on the directed split, ``reverse_auc``, and the heuristics."""
    how = dict(decoder=SourceTarget())
    m: dict[str, Any] = {"val_auc": None, "val_ap": None, "test_auc": None, "test_ap": None, "reverse_auc": None,
                         "reverse_pairs": 0}
    if has_val:
        m["val_auc"], m["val_ap"] = link_scores(z, split.val_pos, split.val_neg, **how)
    if not (test and split.test_pos.shape[1]):
        return m
    m["test_auc"], m["test_ap"] = link_scores(z, split.test_pos, split.test_neg, **how)
    m.update(hits_at_k(pair_scores(z, split.test_pos, **how), pair_scores(z, split.test_neg, **how)))
    m.update(mrr(z, split.test_pos, seed=seed, **how))
    zs, zt = halves(z)  # the bilinear form: the length-bound scan of z_s queries against z_t candidates
    m.update(filtered_ranking(zs, split.test_pos, [graph.out], seed=seed, targets=zt))
    m["reverse_auc"], m["reverse_pairs"] = reverse_auc(lambda p: pair_scores(z, p, **how), graph, split.test_pos)
    m["baselines"] = directed_baselines(train_graph, graph, split, seed)
    m.update(verdict(m))
    return m


def directed_baselines(train_graph: DiGraph, graph: DiGraph, split: DirectedSplit, seed: int) -> dict:
    """The undirected heuristics (:func:`gaescale.training.heldout.baseline_metrics`) on the symmetrised training
    graph and two directed ones on the training graph, each with its ``reverse_auc``: ``directed_degree_product``,
    ``out(u) * in(v)``, and ``reciprocity``, 1 where the reversal ``v -> u`` is a training edge, else 0."""
    out = baseline_metrics(train_graph.symmetrised(), split, seed=seed)
    od, ind = train_graph.out_degree.astype(np.float64), train_graph.in_degree.astype(np.float64)
    out["directed_degree_product"] = _pair_heuristic(lambda p: od[p[0]] * ind[p[1]], graph, split)
    out["reciprocity"] = _pair_heuristic(lambda p: train_graph.has_edges(p[1], p[0]).astype(np.float64), graph, split)
    return out


def _pair_heuristic(score, graph: DiGraph, split: DirectedSplit) -> dict:
    """Test AUC/AP and ``reverse_auc`` of ``score(pairs: (2, P)) -> (P,)`` on the directed split."""
    from sklearn.metrics import average_precision_score, roc_auc_score
    t = time.perf_counter()
    s = np.concatenate([score(split.test_pos), score(split.test_neg)])
    y = np.concatenate([np.ones(split.test_pos.shape[1]), np.zeros(split.test_neg.shape[1])])
    rev, _ = reverse_auc(score, graph, split.test_pos)
    return {"auc": float(roc_auc_score(y, s)), "ap": float(average_precision_score(y, s)), "reverse_auc": rev,
            "seconds": time.perf_counter() - t}
