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
from ..structure import SCALES, SampledTwoHop, TwoHop, calibrate
from ..training.heldout import VAL_RANKED, VAL_RANKED_SCORES, validation_ranking

STRUCTURE_STRATEGIES = ("full", "neighbor", "partitioned")  # the strategies that train the structural part (its loss
# needs the training graph's two-hop pairs: all of them or a fixed pool in full batch, each step's own draw with
# neighbours, each bucket's own draw within its block with the table on disk)


def resolve_structure(config: TrainConfig, strategy: str, rt: Local) -> TrainConfig:
    """``config`` with ``structure`` and ``select`` decided for this run: ``structure='auto'`` is on for an
    undirected graph trained full batch, by neighbour sampling or in partitions (:data:`STRUCTURE_STRATEGIES`) by one
    process with a bilinear decoder, in memory or memory-mapped (what its training and exact ranking need,
    :mod:`gaescale.structure`); ``select='auto'`` is ``mrr`` with it, else ``auc``."""
    fits = strategy in STRUCTURE_STRATEGIES and rt.world_size == 1 and config.decoder != "hadamard"
    if config.structure == "on" and not fits:
        why = f"strategy '{strategy}'" if strategy not in STRUCTURE_STRATEGIES else f"{rt.world_size} processes"
        raise ParameterError("structure", "train", f"'off' or 'auto' with {why} (the structural part needs one "
                                                   "process training full batch, by neighbour sampling or in "
                                                   "partitions)", "on")
    structure = config.structure if config.structure != "auto" else ("on" if fits else "off")
    select = config.select if config.select != "auto" else ("mrr" if structure == "on" else "auc")
    if config.hard_negatives and (structure == "off" or strategy != "full"):
        raise ParameterError("hard_negatives", "train", "0 where the structural part is off or the strategy is not "
                             "'full' (the hard negatives are a fixed pool of the whole graph)", config.hard_negatives)
    if config.pool_ratio is not None and (structure == "off" or strategy != "full"):
        raise ParameterError("pool_ratio", "train", "None (unset) where the structural part is off or the strategy is "
                             "not 'full' (the pool is full batch's; the other strategies draw two-hop pairs every "
                             "step)", config.pool_ratio)
    return config.with_options(structure=structure, select=select)


def selects(config: TrainConfig, model: GAE) -> str:
    """What selects the kept weights: ``config.select``, ``auto`` read as :func:`resolve_structure` resolves it."""
    if config.select != "auto":
        return config.select
    return "mrr" if model.structure is not None else "auc"


def ranking_parts(config: TrainConfig, model: GAE, train_graph: Graph, split, has_val: bool, strategy: str):
    """``(two_hop, val_rank)``: what the loss needs of the training graph for a model with a structural part (full
    batch: :class:`gaescale.structure.TwoHop`, pair features and a two-hop pool computed once; neighbour sampling
    and partitions: :class:`gaescale.structure.SampledTwoHop`, drawn every step; else None), and the validation
    ranking that selects the kept weights with ``select='mrr'`` (else None)."""
    two_hop = None
    if model.structure is not None and strategy == "full":
        two_hop = TwoHop(train_graph, pool_size=config.pool_size(split.num_train), weight=config.hard_negatives,
                         seed=config.seed)
    elif model.structure is not None:
        two_hop = SampledTwoHop(train_graph)
    val_rank = (validation_ranking(train_graph, split, seed=config.seed)
                if has_val and selects(config, model) == "mrr" else None)
    return two_hop, val_rank


CALIBRATION_SCORES = 4 * 10**10  # candidates scored by calibration's rankings in all (one per scale of SCALES)


def calibration_positives(num_nodes: int) -> int:
    """How many validation edges :func:`calibrate_structure` ranks at each scale: 5 times as many as every
    validation (:func:`gaescale.training.heldout.validation_ranking`; 500 on the 770,000-node demo graph), fewer where
    the rankings at every scale of :data:`gaescale.structure.SCALES` would score more than :data:`CALIBRATION_SCORES`
    candidates (on 100M nodes, 50: about 5 minutes on 2 cores), at least 50."""
    usual = 5 * min(VAL_RANKED, max(100, VAL_RANKED_SCORES // max(num_nodes, 1)))
    return max(50, min(usual, CALIBRATION_SCORES // (len(SCALES) * max(num_nodes, 1))))


def calibrate_structure(model: GAE, z: torch.Tensor, split, train_graph, features, seed: int, log) -> None:
    """:func:`gaescale.structure.calibrate` on :func:`calibration_positives` validation edges, logged."""
    rank = validation_ranking(train_graph, split, seed=seed, max_positives=calibration_positives(z.shape[0]),
                              same_z=True)
    metric = model.metric(z)
    t = time.perf_counter()
    factor, before, after = calibrate(model.structure, lambda st: rank(z, metric=metric, structure=st), features)
    log(f"structural part: weights x {factor:g} on the validation ranking (geometric mean of filtered MRR, Hits@10, "
        f"Hits@100: {before:.4f} -> {after:.4f}) "
        f"[{time.perf_counter() - t:.1f}s]")
