"""What a run measures on its own held-out split: the embeddings' AUC/AP, Hits@K and MRR, and the same
numbers for the link heuristics (:mod:`gaescale.heuristics`) on the same test pairs and training graph,
so that every run says whether its embeddings beat a one-line baseline."""
from __future__ import annotations

import time
from typing import Any

import torch

from ..graph import Graph
from .evaluate import filtered_ranking, hits_at_k, link_scores, mrr, pair_scores

BASELINE_NAMES = {"adamic_adar": "Adamic-Adar", "common_neighbours": "common neighbours",
                  "degree_product": "degree product",
                  "directed_degree_product": "directed degree product",  # out(u) * in(v): --directed runs
                  "reciprocity": "reciprocity"}  # 1 where v -> u is a training edge: --directed runs


def known_edges(train_graph: Graph, split) -> list:
    """Every edge a run knows: the training graph's and the held-out positives (the filter of the ranking)."""
    return [train_graph, split.val_pos, split.test_pos]


def test_metrics(z: torch.Tensor, split, *, seed: int = 0, train_graph: Graph | None = None,
                 metric: torch.Tensor | None = None, decoder=None) -> dict[str, Any]:
    """``test_auc``, ``test_ap``, ``hits@K`` and ``mrr*`` of ``z: (N, d)`` on ``split``'s test pairs and, given
    the ``train_graph``, ``filtered_mrr`` / ``filtered_hits@K``: at most 1,000 test edges ranked against every
    node, known edges removed (:func:`gaescale.evaluate.filtered_ranking`)."""
    out: dict[str, Any] = {}
    how = dict(metric=metric, decoder=decoder)
    out["test_auc"], out["test_ap"] = link_scores(z, split.test_pos, split.test_neg, **how)
    out.update(hits_at_k(pair_scores(z, split.test_pos, **how), pair_scores(z, split.test_neg, **how)))
    out.update(mrr(z, split.test_pos, seed=seed, **how))
    if train_graph is not None:
        out.update(filtered_ranking(z, split.test_pos, known_edges(train_graph, split), seed=seed, **how))
    return out


def baseline_metrics(train_graph: Graph, split, *, seed: int = 0) -> dict[str, dict[str, float]]:
    """``{heuristic: {"auc", "ap", "filtered_mrr", "filtered_hits@K", "seconds"}}`` on the test pairs of
    ``split``, scored on ``train_graph`` (which holds none of the held-out edges); the filtered ranking ranks
    the same test edges as :func:`test_metrics` for the same ``seed``."""
    from .heuristics import heuristic_metrics, heuristic_ranking

    t = time.perf_counter()
    out = heuristic_metrics(train_graph, split.test_pos, split.test_neg)
    ranking = heuristic_ranking(train_graph, split.test_pos, known_edges(train_graph, split), seed=seed)
    seconds = time.perf_counter() - t
    for name, scores in out.items():
        scores.update(ranking.get(name, {}), seconds=seconds)
    return out


def not_beaten(metrics: dict[str, Any]) -> list[str] | None:
    """The heuristics whose test AUC or AP is at least the embeddings' (None without baselines)."""
    baselines = metrics.get("baselines")
    if not baselines or metrics.get("test_auc") is None:
        return None
    return [k for k, b in baselines.items() if b["auc"] >= metrics["test_auc"] or b["ap"] >= metrics["test_ap"]]


_NUMBERS = {3: "three", 4: "four", 5: "five"}


def baseline_summary(metrics: dict[str, Any]) -> str | None:
    """One line: the heuristics' test AUC / AP and whether the embeddings beat them."""
    lost = not_beaten(metrics)
    if lost is None:
        return None
    scores = ", ".join(f"{BASELINE_NAMES[k]} {b['auc']:.4f} / {b['ap']:.4f}" for k, b in metrics["baselines"].items())
    verdict = (f"the embeddings beat all {_NUMBERS.get(len(metrics['baselines']), 'of them')}" if not lost else
               f"the embeddings do NOT beat {' or '.join(BASELINE_NAMES[k] for k in lost)} on AUC or AP")
    return f"baselines on the same test split, AUC / AP: {scores}; {verdict}"
