"""How a directed run is scored: validation and test AUC/AP, Hits@K, MRR and the filtered ranking of
``z = [z_s | z_t]``, ``reverse_auc`` (each held-out edge against its reversal), and the heuristics on the same
split, two of them directed."""
from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from ..training.evaluate import auc_ap, filtered_ranking, hits_at_k, link_scores, mrr, pair_scores
from ..training.heldout import baseline_metrics, verdict
from .graph import DiGraph, DirectedSplit, reverse_pairs
from .model import SourceTarget, halves


def reverse_auc(scores, graph: DiGraph, pos: np.ndarray) -> tuple[float | None, int]:
    """``(AUC, R)``: the held-out edges ``(u, v)`` of ``pos: (2, P)`` whose reversal is not an edge of ``graph``
    (:func:`gaescale.directed.graph.reverse_pairs`, ``R`` of them), scored by ``scores(pairs: (2, R)) -> (R,)``
    against their reversals ``(v, u)``; ties count half (a symmetric decoder scores 0.5). None when ``R = 0``."""
    rev = reverse_pairs(graph, pos)
    if not rev.shape[1]:
        return None, 0
    return auc_ap(scores(rev), scores(np.ascontiguousarray(rev[::-1])))[0], int(rev.shape[1])


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
    t = time.perf_counter()
    auc, ap = auc_ap(score(split.test_pos), score(split.test_neg))
    rev, _ = reverse_auc(score, graph, split.test_pos)
    return {"auc": auc, "ap": ap, "reverse_auc": rev, "seconds": time.perf_counter() - t}
