"""The exact top-k scan of a run's embeddings (``gaescale topk``; ``topk --index`` rescores with it).

:func:`top_k` is exact and never forms N x N. It scans the nodes in decreasing order of embedding
norm, in blocks, and stops for a query as soon as ``|q| * (largest norm left)`` cannot beat its
current k-th best score (Cauchy-Schwarz), the length bound of LEMP (Teflioudi et al., 2015). On
graph-autoencoder embeddings, whose norms grow with degree, it scans about 1% of the nodes per query.
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import ParameterError
from ..graph import Graph, neighbour_pairs
from ..models import query_side
from ..norm_order import NormOrder


def top_k(z, k: int, *, queries: np.ndarray | None = None, exclude: Graph | None = None, block: int = 2048,
          batch: int = 2048, stats: dict | None = None, metric: torch.Tensor | None = None, targets=None
          ) -> tuple[np.ndarray, np.ndarray]:
    """For each query node, the ``k`` nodes of largest inner product ``z_q . z_v``, itself excluded and,
    with ``exclude``, its neighbours in that graph too.

    ``z: (N, d)``; ``queries: (Q,)`` node indices (default: all). Returns ``scores: (Q, k)`` float32,
    best first, and ``nodes: (Q, k)`` int64; where fewer than ``k`` candidates exist, the row ends in
    ``-inf`` / ``-1``. Memory: ``O(N + batch * block)`` beside ``z``, which is never copied (the nodes' order
    by norm, :class:`gaescale.norm_order.NormOrder`, and its inverse: 16 bytes per node). ``stats["pairs"]``, if
    given, counts the inner products evaluated (a brute force evaluates ``Q * N``). ``metric: (d,)`` of signs: the
    scores are ``z_q^T diag(metric) z_v`` (the per-node bias decoder, :mod:`gaescale.models`). ``targets: (N, d)``: the
    candidates' side, scores ``z_q . targets_v`` (a directed run's ``z_s`` against ``z_t``; default ``z``).
    """
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise ParameterError("k", "top_k", "an int >= 1", k)
    z = torch.as_tensor(np.ascontiguousarray(z, dtype=np.float32))
    queries_z = z  # the query side z M is taken of each batch's rows only
    if targets is not None:
        z = torch.as_tensor(np.ascontiguousarray(targets, dtype=np.float32))
    n = z.shape[0]
    q_all = np.arange(n) if queries is None else np.asarray(queries, np.int64)
    by_norm = NormOrder(z, block)
    pos = by_norm.positions()
    scores = np.full((q_all.size, k), -np.inf, np.float32)
    nodes = np.full((q_all.size, k), -1, np.int64)
    for s in range(0, q_all.size, batch):
        q = q_all[s:s + batch]
        rows, excl = np.arange(q.size), q
        if exclude is not None:
            r2, n2 = neighbour_pairs(exclude, q)
            rows, excl = np.concatenate([rows, r2]), np.concatenate([excl, n2])
        ex_pos = pos[torch.from_numpy(excl)]
        srt = torch.argsort(ex_pos)
        ex_pos, ex_row = ex_pos[srt], torch.from_numpy(rows)[srt]
        cuts = torch.searchsorted(ex_pos, torch.arange(0, n + block, block))
        v, i = _scan(query_side(queries_z[torch.from_numpy(q)], metric), by_norm, k, ex_row, ex_pos, cuts, stats)
        scores[s:s + q.size] = v.numpy()
        nodes[s:s + q.size] = torch.where(i >= 0, by_norm.order[i.clamp(min=0)], -1).numpy()
    return scores, nodes


def with_two_hop(scores: np.ndarray, nodes: np.ndarray, z, structure, *, queries: np.ndarray | None = None,
                 exclude: Graph | None = None, metric: torch.Tensor | None = None, batch: int = 2048
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The top-k of the whole logits ``z_q^T M z_v + w . phi(q, v)`` (:mod:`gaescale.structure`) from the top-k of
    the embeddings' logits alone (``scores, nodes: (Q, k)``, as :func:`top_k` returns them for ``queries``, with the
    same ``exclude``): exact when those are, since ``w . phi >= 0`` is 0 but on each query's two-hop candidates. A
    node outside them that the embeddings' top-k leaves out is beaten by k nodes whose whole scores are at least
    their embeddings' scores; so the whole top-k lies in the embeddings' top-k and the two-hop candidates, each
    scored whole. Memory: a batch's two-hop candidates (:meth:`gaescale.structure.StructuralScores.batches`)."""
    z = torch.as_tensor(np.ascontiguousarray(z, dtype=np.float32))
    n, k = z.shape[0], scores.shape[1]
    q_all = np.arange(n) if queries is None else np.asarray(queries, np.int64)
    out_s, out_n = scores.copy(), nodes.copy()
    for part in structure.batches(q_all, batch):
        q = q_all[part]
        rows, cand, extra = structure.candidates(q)
        if exclude is not None:  # the queries' known neighbours are no candidates
            r2, n2 = neighbour_pairs(exclude, q)
            keep = ~np.isin(rows * n + cand, np.asarray(r2, np.int64) * n + n2)
            rows, cand, extra = rows[keep], cand[keep], extra[keep]
        zq = query_side(z[torch.from_numpy(q[rows])].double(), metric)
        whole = (zq * z[torch.from_numpy(cand)].double()).sum(1).numpy() + extra
        er = np.repeat(np.arange(q.size, dtype=np.int64), k)
        en, es = nodes[part].ravel(), scores[part].ravel().astype(np.float64)
        alone = (en >= 0) & ~np.isin(er * n + en, rows * n + cand)  # a candidate's whole score replaces its own
        r, c, v = np.r_[rows, er[alone]], np.r_[cand, en[alone]], np.r_[whole, es[alone]]
        order = np.lexsort((c, -v, r))  # by query, best first (ties by node index)
        r, c, v = r[order], c[order], v[order]
        rank = np.arange(r.size) - np.searchsorted(r, r)
        top = rank < k
        block_s = np.full((q.size, k), -np.inf, np.float32)
        block_n = np.full((q.size, k), -1, np.int64)
        block_s[r[top], rank[top]], block_n[r[top], rank[top]] = v[top], c[top]
        out_s[part], out_n[part] = block_s, block_n
    return out_s, out_n


def _scan(qv, by_norm: NormOrder, k, ex_row, ex_pos, cuts, stats=None):
    """Blocks of the nodes in decreasing order of norm (``by_norm``) against the queries ``qv: (b, d)``, pruned by
    the length bound; excluded ``(row, position)`` pairs get ``-inf``. Returns ``(b, k)`` values and positions."""
    b, n, block, bucket_max = qv.shape[0], by_norm.n, by_norm.block, by_norm.bucket_max
    qn = qv.norm(dim=1)
    best_v = torch.full((b, k), -float("inf"))
    best_i = torch.full((b, k), -1, dtype=torch.int64)
    slot = torch.full((b,), -1, dtype=torch.int64)
    for j in range(bucket_max.numel()):
        active = torch.nonzero(best_v[:, -1] < qn * bucket_max[j]).squeeze(1)
        if active.numel() == 0:
            break  # norms only shrink from here: no later block can enter any top-k
        lo, hi = j * block, min(j * block + block, n)
        sc = qv[active] @ by_norm.rows(j).T
        if stats is not None:
            stats["pairs"] = stats.get("pairs", 0) + sc.numel()
        e0, e1 = int(cuts[j]), int(cuts[j + 1])
        if e1 > e0:
            slot[active] = torch.arange(active.numel())
            r = slot[ex_row[e0:e1]]
            keep = r >= 0
            sc[r[keep], ex_pos[e0:e1][keep] - lo] = -float("inf")
            slot[active] = -1
        hit = (sc > best_v[active, -1:]).any(1)  # most rows have no score that enters their top-k
        if not hit.all():
            active, sc = active[hit], sc[hit]
        v, i = sc.topk(min(k, hi - lo), dim=1)
        i = torch.where(torch.isinf(v), -1, i + lo)
        allv, alli = torch.cat([best_v[active], v], 1), torch.cat([best_i[active], i], 1)
        tv, ti = allv.topk(k, dim=1)
        best_v[active], best_i[active] = tv, alli.gather(1, ti)
    return best_v, best_i
