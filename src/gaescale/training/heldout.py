"""What a run measures on its own held-out split: the embeddings' AUC/AP, Hits@K and MRR, and the same
numbers for the link heuristics (:mod:`gaescale.heuristics`) on the same test pairs and training graph,
so that every run says whether its embeddings beat a one-line baseline."""
from __future__ import annotations

import time
from typing import Any

import torch

from ..graph import Graph
from .evaluate import auc_ap, filtered_ranking, hits_at_k, known_lookup, mrr, pair_scores, ranking_order

BASELINE_NAMES = {"adamic_adar": "Adamic-Adar", "common_neighbours": "common neighbours",
                  "degree_product": "degree product",
                  "directed_degree_product": "directed degree product",  # out(u) * in(v): --directed runs
                  "reciprocity": "reciprocity"}  # 1 where v -> u is a training edge: --directed runs


def known_edges(train_graph: Graph, split) -> list:
    """Every edge a run knows: the training graph's and the held-out positives (the filter of the ranking)."""
    return [train_graph, split.val_pos, split.test_pos]


def test_metrics(z: torch.Tensor, split, *, seed: int = 0, train_graph: Graph | None = None,
                 metric: torch.Tensor | None = None, decoder=None, structure=None,
                 embeddings_only: bool = False) -> dict[str, Any]:
    """``test_auc``, ``test_ap``, ``hits@K`` and ``mrr*`` of ``z: (N, d)`` on ``split``'s test pairs and, given
    the ``train_graph``, ``filtered_mrr`` / ``filtered_hits@K``: at most 1,000 test edges ranked against every
    node, known edges removed (:func:`gaescale.evaluate.filtered_ranking`). ``structure``: the structural part of
    the logit (:class:`gaescale.structure.StructuralScores` on the training graph). ``embeddings_only``: with a
    ``structure`` and a ``train_graph``, also ``embeddings_only``, the same ranking of the same edges by the
    embeddings' logits alone (the structural part's share), with the known edges' lookup and the nodes' norm order
    built once for both (``8 N`` bytes each; sorting 100M norms takes about a minute)."""
    out: dict[str, Any] = {}
    how = dict(metric=metric, decoder=decoder, structure=structure)
    pos, neg = pair_scores(z, split.test_pos, **how), pair_scores(z, split.test_neg, **how)  # scored once
    out["test_auc"], out["test_ap"] = auc_ap(pos, neg)
    out.update(hits_at_k(pos, neg))
    out.update(mrr(z, split.test_pos, seed=seed, **how))
    if train_graph is None:
        return out
    known, shared = known_edges(train_graph, split), {}
    twice = embeddings_only and structure is not None
    if twice:  # two rankings of the same z: the lookup and the order built once (a pair decoder scans no order)
        known = known_lookup(known, train_graph.num_nodes)
        shared = dict(by_norm=None if decoder is not None else ranking_order(z))
    out.update(filtered_ranking(z, split.test_pos, known, seed=seed, **how, **shared))
    if twice:
        out["embeddings_only"] = filtered_ranking(z, split.test_pos, known, seed=seed, **{**how, "structure": None},
                                                  **shared)
    return out


VAL_RANKED = 200  # validation edges ranked at every evaluation (--select mrr) ...
VAL_RANKED_SCORES = 20_000_000  # ... fewer on a large graph: about this many scores per evaluation, at least 100


def validation_ranking(train_graph: Graph, split, *, seed: int = 0, max_positives: int | None = None,
                       scale: int = 1, same_z: bool = False):
    """``rank(z, metric, structure) -> {"val_mrr", "val_hits@10", "val_hits@100"}``: the exact filtered ranking of
    the same (up to ``max_positives``; default :data:`VAL_RANKED`, fewer on a graph of over 100,000 nodes; ``scale``
    times as many) validation edges at
    every call, against every node, the training graph's edges and the validation edges removed. It reads the
    training graph and the validation edges only, never the test split. ``same_z``: every call ranks the same
    ``z`` (a calibration's scales): the known edges' lookup and the nodes' norm order are built once and kept by
    ``rank`` (``8 N`` bytes each and the validation edges')."""
    if max_positives is None:  # ``scale`` times as many (a ranking asked a few times, not every epoch)
        max_positives = scale * min(VAL_RANKED, max(100, VAL_RANKED_SCORES // max(train_graph.num_nodes, 1)))
    pos, known = split.val_pos, [train_graph, split.val_pos]
    kept: dict = {}

    def rank(z: torch.Tensor, *, metric=None, decoder=None, structure=None) -> dict[str, float]:
        how = {}
        if same_z:
            if "lookup" not in kept:
                kept["lookup"] = known_lookup(known, train_graph.num_nodes)
                kept["by_norm"] = ranking_order(z)
            if kept["by_norm"].z.data_ptr() != z.data_ptr():
                raise ValueError("validation_ranking(same_z=True) was asked to rank other embeddings")
            how = dict(by_norm=kept["by_norm"])
        r = filtered_ranking(z, pos, kept.get("lookup", known), max_positives=max_positives, seed=seed, ks=(10, 100),
                             metric=metric, decoder=decoder, structure=structure, **how)
        return {f"val_{k[len('filtered_'):]}": r[k] for k in ("filtered_mrr", "filtered_hits@10",
                                                               "filtered_hits@100")} if r else {}
    return rank


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


RANKING = ("filtered_mrr", "filtered_hits@10")  # what "ranking" is judged on: each at least the heuristic's


def not_beaten(metrics: dict[str, Any]) -> list[str] | None:
    """The heuristics whose test AUC or AP is at least the embeddings' (None without baselines)."""
    baselines = metrics.get("baselines")
    if not baselines or metrics.get("test_auc") is None:
        return None
    return [k for k, b in baselines.items() if b["auc"] >= metrics["test_auc"] or b["ap"] >= metrics["test_ap"]]


def ranked_higher(metrics: dict[str, Any]) -> list[str] | None:
    """The heuristics whose filtered MRR or filtered Hits@10 is at least the embeddings' (None without a filtered
    ranking of both)."""
    baselines = metrics.get("baselines")
    if not baselines or any(metrics.get(k) is None for k in RANKING):
        return None
    return [k for k, b in baselines.items() if any(b.get(m) is not None and b[m] >= metrics[m] for m in RANKING)]


def verdict(metrics: dict[str, Any]) -> dict[str, bool | None]:
    """``beats_baselines_separation`` (test AUC and AP above every heuristic's), ``beats_baselines_ranking``
    (filtered MRR and Hits@10 above every heuristic's) and ``beats_baselines``, both; None where not measured."""
    lost, ranked = not_beaten(metrics), ranked_higher(metrics)
    separation = None if lost is None else not lost
    ranking = None if ranked is None else not ranked
    both = None if separation is None else separation and (ranking is not False)
    return {"beats_baselines": both, "beats_baselines_separation": separation, "beats_baselines_ranking": ranking}


_NUMBERS = {3: "three", 4: "four", 5: "five"}


def baseline_summary(metrics: dict[str, Any]) -> str | None:
    """One line: the heuristics' test AUC / AP (and filtered MRR), and whether the embeddings beat them on separation
    (AUC/AP) and, apart, on ranking (filtered MRR and Hits@10): never "beat all" where a heuristic ranks better."""
    lost = not_beaten(metrics)
    if lost is None:
        return None
    baselines = metrics["baselines"]
    ranked = ranked_higher(metrics)
    names = lambda keys: " or ".join(BASELINE_NAMES[k] for k in keys)  # noqa: E731
    if ranked is None:
        scores = ", ".join(f"{BASELINE_NAMES[k]} {b['auc']:.4f} / {b['ap']:.4f}" for k, b in baselines.items())
        verdict = (f"the embeddings beat all {_NUMBERS.get(len(baselines), 'of them')}" if not lost else
                   f"the embeddings do NOT beat {names(lost)} on AUC or AP")
        return f"baselines on the same test split, AUC / AP: {scores}; {verdict}"
    mrr_of = lambda b: "n/a" if b.get("filtered_mrr") is None else f"{b['filtered_mrr']:.4f}"  # noqa: E731
    scores = ", ".join(f"{BASELINE_NAMES[k]} {b['auc']:.4f} / {b['ap']:.4f} / {mrr_of(b)}"
                       for k, b in baselines.items())
    count = _NUMBERS.get(len(baselines), "of them")
    separation = f"beat all {count} on AUC/AP" if not lost else f"do NOT beat {names(lost)} on AUC or AP"
    if not ranked:
        ranking = f"on ranking (filtered MRR, Hits@10) they beat all {count}{' too' if not lost else ''}"
    else:
        best = max(ranked, key=lambda k: baselines[k]["filtered_mrr"])
        # "not beaten", not "ahead": a heuristic level on Hits@10 and behind on MRR is not beaten, nor ahead
        ranking = (f"on ranking they do NOT beat {names(ranked)} on filtered MRR and Hits@10 both "
                   f"({BASELINE_NAMES[best]}'s filtered MRR {baselines[best]['filtered_mrr']:.4f} vs "
                   f"{metrics['filtered_mrr']:.4f}, Hits@10 {baselines[best]['filtered_hits@10']:.4f} vs "
                   f"{metrics['filtered_hits@10']:.4f})")
    return (f"baselines on the same test split, AUC / AP / filtered MRR: {scores}; the embeddings {separation}; "
            f"{ranking}")
