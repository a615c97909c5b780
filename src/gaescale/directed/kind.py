"""``train --directed``: the kind of graph (:mod:`gaescale.run.kinds`) that keeps edge direction. It reads a
directed graph (out- and in-CSR), splits its directed edges, trains a source/target encoder with the asymmetric
loss, and scores ``z = [z_s | z_t]`` with ``reverse_auc`` and directed heuristics; the pipeline's other steps (the
trainer, checkpointing, memory, the run directory, the report) are every kind's. One process, full batch."""
from __future__ import annotations

import time
from typing import Any

import torch

from ..config import TrainConfig
from ..data.inputs import (
    Inputs,
    check_not_a_plain_directory,
    features_and_ids,
    load_edges,
    log_features,
    require_weights,
)
from ..errors import ParameterError
from ..parallel.placement import Placement
from ..training.strategies import weighted_pairs
from .graph import DiGraph, split_directed
from .metrics import directed_metrics
from .model import DirectedGAE, SourceTargetEncoder

RECIPROCITY_FOR_SYMMETRIC = 0.1  # auto: the symmetric part where at least this share of edges is reciprocated


def build_directed_model(config: TrainConfig, in_dim: int | None, num_nodes: int, custom=None) -> DirectedGAE:
    """The source/target GAE of ``config`` (``encoder`` resolved: gcn or linear, the latter one layer of width
    ``dim``), with the symmetric part for ``directed_symmetric`` and per-node source and target biases for
    ``decoder='bias'``. ``custom`` must be None (:meth:`Directed.check` refuses a module before anything is read)."""
    if custom is not None:
        raise ParameterError("encoder", "build_directed_model", "an encoder name (a module given as encoder= is not "
                                                                "supported on directed graphs yet)",
                             type(custom).__name__)
    config = config.for_graph(in_dim)
    if config.directed_symmetric not in ("on", "off"):
        raise ParameterError("directed_symmetric", "build_directed_model", "'on' or 'off' (resolve 'auto' for the "
                                                                           "training graph: resolve_symmetric)",
                             config.directed_symmetric)
    encoder = SourceTargetEncoder(in_dim, config.layer_dims, num_nodes=num_nodes, dropout=config.dropout,
                                  symmetric=config.directed_symmetric == "on")
    return DirectedGAE(encoder, num_nodes=num_nodes if config.decoder == "bias" else None)


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


class Directed:
    """A directed graph: ``(u, v)`` and ``(v, u)`` are two edges. One process, an edge list read into memory,
    full batch (the options it does not support yet are refused when the configuration is built,
    :func:`gaescale.rules.check_directed`, and by :meth:`check`)."""

    name = "directed"

    def check(self, config: TrainConfig, runtime, *, prepared: bool, custom: torch.nn.Module | None) -> None:
        if custom is not None:
            raise ParameterError("encoder", "train", "an encoder name with directed=True (a module given as encoder= "
                                                     "is not supported on directed graphs yet)", type(custom).__name__)
        if runtime.world_size > 1:
            raise ParameterError("directed", "train", "False under torchrun (several processes do not support "
                                                      "directed graphs yet)", True)
        if prepared:
            raise ParameterError("directed", "train", "False with a prepared graph ('gaescale prepare' stores an "
                                                      "undirected graph; directed graphs are read from an edge list, "
                                                      "not supported prepared yet)", True)

    def read(self, config: TrainConfig, data, log, *, out, runtime) -> Inputs:
        """The directed graph of the edge list (or ``data``), its features as a tensor, its ids."""
        t = time.perf_counter()
        check_not_a_plain_directory(config, data)
        data = data if data is not None else load_edges(config)
        require_weights(data, config.weighted)
        graph = DiGraph.from_edge_index(data.edge_index, data.num_nodes,
                                        edge_weight=data.edge_weight if config.weighted else None)
        s = graph.stats
        zeros = f", {s.zero_weights:,} rows of weight 0 dropped" if s.zero_weights else ""
        log(f"read {data.source}: {data.num_nodes:,} nodes; {s.rows:,} edge rows -> {graph.num_edges:,} directed "
            f"{'weighted ' if graph.weighted else ''}edges ({s.self_loops:,} self loops dropped{zeros}, "
            f"{s.duplicates:,} duplicates merged) [{time.perf_counter() - t:.1f}s]")
        graph.require_edges(data.source or "the graph")
        x, ids = features_and_ids(data)
        log_features(x, log)
        return Inputs(graph, x, ids)

    def choose(self, config: TrainConfig, graph: DiGraph, num_features: int | None, log, *, prepared: bool, device,
               runtime) -> tuple[str, TrainConfig]:
        return "full", config  # check_directed refuses every other strategy; no structural part

    def place(self, config: TrainConfig, graph: DiGraph, x, strategy: str, *, prepared: bool, out, runtime, device,
              log) -> tuple[TrainConfig, Placement]:
        """The directed split (:func:`gaescale.directed.graph.split_directed`) and ``directed_symmetric`` resolved
        for its training graph; the placement keeps the full graph, which the held-out ranking filters against."""
        split = split_directed(graph, config.val_fraction, config.test_fraction, seed=config.seed)
        train_graph = split.train_graph()
        config = resolve_symmetric(config, train_graph, log)
        log(f"directed split: {split.num_train:,} training, {split.val_pos.shape[1]:,} validation and "
            f"{split.test_pos.shape[1]:,} test edges, as many ordered non-edges")
        return config, Placement(split, train_graph, graph=graph)

    def run_graph(self, graph: DiGraph) -> tuple:
        """graph.npz: the out-CSR of the full graph (and its weights)."""
        csr = (graph.out.indptr, graph.out.indices)
        return csr if graph.weights is None else (*csr, graph.weights)

    build_model = staticmethod(build_directed_model)

    def train_pairs(self, config: TrainConfig, placed: Placement, train_graph: DiGraph):
        split = placed.split
        return weighted_pairs(train_graph, config.self_loops, split.train, split.train_weight)

    def heldout_metrics(self, config: TrainConfig, model: DirectedGAE, fitted, placed: Placement, log, *,
                        test: bool) -> dict[str, Any]:
        """:func:`gaescale.directed.metrics.directed_metrics`, the reverse AUC logged, and the layout of
        embeddings.npy."""
        z, split = fitted.z, placed.split
        metrics = directed_metrics(z, placed.graph, split, placed.train_graph, split.val_pos.shape[1] > 0,
                                   config.seed, test=test)
        if metrics["reverse_auc"] is not None:
            log(f"reverse AUC {metrics['reverse_auc']:.4f} on {metrics['reverse_pairs']:,} test edges (u, v) "
                "against (v, u), where (v, u) is not an edge (0.5: direction not learnt)")
        metrics["directed"] = embeddings_layout(model, int(z.shape[1]))
        return metrics
