"""The pipeline's steps for ranking (issue 30): whether a run trains the structural part of the logit
(:mod:`gaescale.structure`), what selects its kept weights, what training needs for both, and the structural part's
scale calibrated on the validation ranking after training. :mod:`gaescale.run.pipeline` calls them in order."""
from __future__ import annotations

import time

import torch

from ..config import TrainConfig
from ..errors import ParameterError
from ..graph import Graph
from ..models import GAE
from ..parallel.runtime import Local
from ..structure import TwoHop, calibrate
from ..training.heldout import validation_ranking


def resolve_structure(config: TrainConfig, strategy: str, rt: Local, *, prepared: bool) -> TrainConfig:
    """``config`` with ``structure`` and ``select`` decided for this run: ``structure='auto'`` is on for an
    undirected graph read into memory, trained full batch by one process with a bilinear decoder (what its exact
    training and ranking need, :mod:`gaescale.structure`); ``select='auto'`` is ``mrr`` with it, else ``auc``."""
    fits = strategy == "full" and rt.world_size == 1 and not prepared and config.decoder != "hadamard"
    if config.structure == "on" and not fits:
        why = (f"strategy '{strategy}'" if strategy != "full" else f"{rt.world_size} processes" if rt.world_size > 1
               else "a prepared (memory-mapped) graph")
        raise ParameterError("structure", "train", f"'off' or 'auto' with {why} (the structural part needs one "
                                                   "process training a graph in memory full batch)", "on")
    structure = config.structure if config.structure != "auto" else ("on" if fits else "off")
    select = config.select if config.select != "auto" else ("mrr" if structure == "on" else "auc")
    if config.hard_negatives and structure == "off":
        raise ParameterError("hard_negatives", "train", "0 where the structural part is off", config.hard_negatives)
    return config.with_options(structure=structure, select=select)


def selects(config: TrainConfig, model: GAE) -> str:
    """What selects the kept weights: ``config.select``, ``auto`` read as :func:`resolve_structure` resolves it."""
    if config.select != "auto":
        return config.select
    return "mrr" if model.structure is not None else "auc"


def ranking_parts(config: TrainConfig, model: GAE, train_graph: Graph, split, has_val: bool):
    """``(two_hop, val_rank)``: what the loss needs of the training graph for a model with a structural part
    (:class:`gaescale.structure.TwoHop`: pair features, the two-hop pool, computed once; else None), and the
    validation ranking that selects the kept weights with ``select='mrr'`` (else None)."""
    two_hop = None
    if model.structure is not None:
        two_hop = TwoHop(train_graph, pool_size=split.num_train, weight=config.hard_negatives, seed=config.seed)
    val_rank = (validation_ranking(train_graph, split, seed=config.seed)
                if has_val and selects(config, model) == "mrr" else None)
    return two_hop, val_rank


def calibrate_structure(model: GAE, z: torch.Tensor, split, train_graph, features, seed: int, log) -> None:
    """:func:`gaescale.structure.calibrate` on up to 1,000 validation edges (fewer on a large graph), logged."""
    rank = validation_ranking(train_graph, split, seed=seed, max_positives=None, scale=5)
    metric = model.metric(z)
    t = time.perf_counter()
    factor, before, after = calibrate(model.structure, lambda st: rank(z, metric=metric, structure=st), features)
    log(f"structural part: weights x {factor:g} on the validation ranking (geometric mean of filtered MRR, Hits@10, "
        f"Hits@100: {before:.4f} -> {after:.4f}) "
        f"[{time.perf_counter() - t:.1f}s]")
