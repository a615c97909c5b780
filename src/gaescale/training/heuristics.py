"""Link-prediction heuristics on a training graph, the baselines every run is measured against.

For a pair ``(u, v)`` of a graph with neighbourhoods ``N(.)`` and degrees ``k(.)``:

- common neighbours: ``|N(u) & N(v)|``;
- Adamic-Adar (Adamic & Adar 2003): ``sum over w in N(u) & N(v) of 1 / log k(w)``;
- degree product (preferential attachment): ``k(u) * k(v)``.

Computed on the given pairs only, from the CSR rows of their endpoints (sparse, never N x N): a chunk of
pairs costs the sum of its endpoints' degrees.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..graph import Graph, adjacency_rows
from ..structure import batches_by_paths, inv_log_degree, two_hop_paths, two_hop_rows
from .evaluate import auc_ap, filtered_pairs, filtered_ranks, known_lookup, ranking_summary, sample_positives

HEURISTICS = ("adamic_adar", "common_neighbours", "degree_product")


def heuristic_scores(graph: Graph, pairs: np.ndarray, *, chunk: int = 1 << 16) -> dict[str, np.ndarray]:
    """``{name: (P,) float64}`` the three heuristics of ``pairs: (2, P)`` on ``graph`` (the training graph:
    held-out edges must not be in it); each chunk reads its endpoints' rows only (:func:`adjacency_rows`)."""
    pairs = np.asarray(pairs, np.int64)
    degree = graph.degree
    cn = np.empty(pairs.shape[1], np.float64)
    aa = np.empty(pairs.shape[1], np.float64)
    for s in range(0, pairs.shape[1], chunk):
        u, v = pairs[0, s:s + chunk], pairs[1, s:s + chunk]
        rows_u, rows_v = adjacency_rows(graph, u), adjacency_rows(graph, v)
        cn[s:s + chunk] = np.asarray(rows_u.multiply(rows_v).sum(1)).ravel()
        rows_u.data = inv_log_degree(degree[rows_u.indices])  # the same rows, each neighbour w weighted 1 / log k(w)
        aa[s:s + chunk] = np.asarray(rows_u.multiply(rows_v).sum(1)).ravel()
    product = degree[pairs[0]].astype(np.float64) * degree[pairs[1]]
    return {"adamic_adar": aa, "common_neighbours": cn, "degree_product": product}


def heuristic_metrics(graph: Graph, pos: np.ndarray, neg: np.ndarray) -> dict[str, dict[str, float]]:
    """``{name: {"auc", "ap"}}`` of each heuristic on held-out ``pos: (2, P)`` edges against ``neg: (2, Q)``
    non-edges, scored on the training ``graph``."""
    p = pos.shape[1]
    out = {}
    for name, s in heuristic_scores(graph, np.concatenate([pos, neg], axis=1)).items():
        auc, ap = auc_ap(s[:p], s[p:])
        out[name] = {"auc": auc, "ap": ap}
    return out


def heuristic_ranking(graph: Graph, pos: np.ndarray, known, *, max_positives: int = 1000, seed: int = 0,
                      ks=(1, 10, 100), batch: int = 256) -> dict[str, dict[str, float]]:
    """``{name: {"filtered_mrr", "filtered_hits@K", "filtered_positives"}}``: the exact filtered ranking of
    :func:`gaescale.evaluate.filtered_ranking` (the same positives of ``pos: (2, P)`` for the same ``seed``,
    the same candidates left out, ties counting half) with each heuristic on the training ``graph`` as the score.

    Common neighbours and Adamic-Adar of a batch of queries ``u`` against all nodes are the sparse rows
    ``A[u] @ A`` and ``A[u] diag(1/log k) @ A`` (a batch costs its queries' two-hop neighbourhoods); the
    nodes outside a row score 0 and are counted as such. Adamic-Adar scores within float64 rounding of the
    target's (relative ``4 eps (k(u) + 2)``) tie; the other two are integers, compared exactly. The degree
    product ``k(u) k(w)`` is counted on the sorted degrees. ``{}`` without positives. A batch holds at most
    ``batch`` queries and, past the first, at most :data:`gaescale.structure.CANDIDATE_BUDGET` two-hop paths
    (a hub of degree 18,000 no longer multiplies 255 other queries' rows with it)."""
    pos = sample_positives(np.asarray(pos, np.int64), max_positives, np.random.default_rng(seed))
    if not pos.shape[1]:
        return {}
    n = graph.num_nodes
    lookup = known_lookup(known, n)
    degree = graph.degree  # int64; float64 where a product needs it (no second (N,) array)
    sorted_degree = np.sort(degree)
    ranks = {name: np.empty(pos.shape[1], np.float64) for name in HEURISTICS}
    eps = np.finfo(np.float64).eps
    paths = two_hop_paths(graph, pos[0])  # a batch's products store at most its queries' two-hop paths
    for part in batches_by_paths(paths, np.arange(pos.shape[1]), batch=batch):
        u, v = pos[0, part], pos[1, part]
        rows, nodes = filtered_pairs(lookup, u, v, n)
        first = np.arange(u.size)
        for name, weight, rtol in (("adamic_adar", inv_log_degree, 4 * eps * (degree[u] + 2)),
                                   ("common_neighbours", None, 0.0)):
            m = two_hop_rows(graph, u, weight)
            thr = _entries(m, first, v)
            hi, lo = thr * (1 + rtol), thr * (1 - rtol)
            above, tied = _sparse_counts(m, hi, lo, n)
            ranks[name][part] = filtered_ranks(above, tied, rows, _entries(m, rows, nodes), hi, lo)
        ku, kv = degree[u].astype(np.float64), degree[v].astype(np.float64)
        left_of, right_of = np.searchsorted(sorted_degree, kv), np.searchsorted(sorted_degree, kv, side="right")
        # k(u) k(w) > k(u) k(v) iff k(w) > k(v) when k(u) > 0; all N scores are 0 and tie when k(u) = 0
        above = np.where(ku > 0, n - right_of, 0)
        tied = np.where(ku > 0, right_of - left_of, n)
        thr = ku * kv
        ranks["degree_product"][part] = filtered_ranks(above, tied, rows, ku[rows] * degree[nodes], thr, thr)
    return {name: ranking_summary(r, ks) for name, r in ranks.items()}


def _entries(m: sp.csr_matrix, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``m[rows[i], cols[i]]`` as ``(k,)`` float64, 0 where not stored; ``m: (b, N)`` with sorted indices."""
    n = np.int64(m.shape[1])
    key = np.repeat(np.arange(m.shape[0], dtype=np.int64), np.diff(m.indptr)) * n + m.indices  # sorted
    want = np.asarray(rows, np.int64) * n + cols
    at = np.minimum(np.searchsorted(key, want), max(key.size - 1, 0))
    out = np.zeros(want.size, np.float64)
    hit = key[at] == want if key.size else np.zeros(want.size, bool)
    out[hit] = m.data[at[hit]]
    return out


def _sparse_counts(m: sp.csr_matrix, hi: np.ndarray, lo: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``m: (b, n)``, how many of its n entries, the implicit zeros included, exceed ``hi`` and lie
    in ``[lo, hi]``."""
    b = m.shape[0]
    nnz = np.diff(m.indptr)
    rows = np.repeat(np.arange(b), nnz)
    a = m.data > hi[rows]
    t = (m.data >= lo[rows]) & ~a
    zero_above = 0.0 > hi
    zero_tied = (0.0 >= lo) & ~zero_above
    return (np.bincount(rows[a], minlength=b) + zero_above * (n - nnz),
            np.bincount(rows[t], minlength=b) + zero_tied * (n - nnz))
