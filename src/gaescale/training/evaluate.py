"""Link-prediction metrics on held-out pairs: ROC AUC and AP, OGB-style Hits@K and MRR, and the exact
filtered ranking (each held-out edge against every node, known edges removed; OGB / PyKEEN style)."""
from __future__ import annotations

import numpy as np
import torch

from ..devices import index_on
from ..graph import Graph, neighbour_pairs, sorted_unique
from ..models import decode, query_side
from ..norm_order import NormOrder


def pair_scores(z: torch.Tensor, pairs: np.ndarray, *, chunk: int = 1 << 20, metric: torch.Tensor | None = None,
                decoder=None, structure=None) -> np.ndarray:
    """Inner products ``z_u . z_v`` (logits) of ``pairs: (2, P)``, as float64 ``(P,)``, in chunks. Every function
    here takes ``metric: (d,)``, the signs of the logits of a per-node bias decoder, or ``decoder(zu, zv) -> s``,
    a pair decoder such as :class:`gaescale.models.HadamardMLP` (:mod:`gaescale.models`), and ``structure``, the
    structural part of the logit (:class:`gaescale.structure.StructuralScores`), added where given."""
    out = np.empty(pairs.shape[1], np.float64)
    with torch.no_grad():
        for s in range(0, pairs.shape[1], chunk):
            p = index_on(pairs[:, s:s + chunk], z)
            logits = decode(z, p, metric) if decoder is None else decoder(z[p[0]], z[p[1]])
            out[s:s + chunk] = logits.double().cpu().numpy()
            if structure is not None:  # chunk by chunk: its pair features are 3 float64 a pair while computed
                out[s:s + chunk] += structure.pairs(pairs[0, s:s + chunk], pairs[1, s:s + chunk])
    return out


def link_scores(z: torch.Tensor, pos: np.ndarray, neg: np.ndarray, *, metric: torch.Tensor | None = None,
                decoder=None, structure=None) -> tuple[float, float]:
    """ROC AUC and average precision of held-out ``pos: (2, P)`` edges vs ``neg: (2, Q)`` non-edges."""
    how = dict(metric=metric, decoder=decoder, structure=structure)
    return auc_ap(pair_scores(z, pos, **how), pair_scores(z, neg, **how))


def auc_ap(pos: np.ndarray, neg: np.ndarray, *, chunk: int = 1 << 18) -> tuple[float, float]:
    """ROC AUC and average precision of scores ``pos: (P,)`` (positives) against ``neg: (Q,)``, ties as
    scikit-learn counts them (the same numbers as ``roc_auc_score`` and ``average_precision_score``) in 24 bytes
    per score over the inputs (numpy's allocations, traced in tests/run/test_plan.py) and the curves' sums,
    ``chunk`` distinct scores at a time; scikit-learn's curves held 440 (8.8 GB for the 20M held-out pairs of a
    100M-node graph)."""
    p = len(pos)
    if not p or not len(neg):
        raise ValueError("AUC and AP need positive and negative scores")
    s = np.concatenate([np.asarray(pos, np.float64), np.asarray(neg, np.float64)])
    order = np.argsort(s)[::-1]  # descending; the order within a tie does not matter: ties are summed as one point
    s = s[order]
    positive = order < p
    del order
    tps = positive.astype(np.int64)
    del positive
    np.cumsum(tps, out=tps)  # positives among the first i + 1 scores
    distinct = np.empty(s.size, bool)  # the last index of each distinct score
    np.not_equal(s[1:], s[:-1], out=distinct[:-1])
    distinct[-1] = True
    del s
    last = np.flatnonzero(distinct)
    del distinct
    tps = tps[last]
    fps = last
    fps += 1
    fps -= tps  # negatives among the scores down to each distinct score
    area, precision = 0.0, 0.0
    for a in range(0, tps.size, chunk):  # trapezoids of the ROC curve, precision at each step of recall
        t, f = tps[a:a + chunk], fps[a:a + chunk]
        t0 = np.r_[tps[a - 1] if a else 0, t[:-1]]
        f0 = np.r_[fps[a - 1] if a else 0, f[:-1]]
        area += float(np.dot((f - f0).astype(np.float64), (t + t0).astype(np.float64)))
        precision += float(np.dot((t - t0).astype(np.float64), t / (t + f)))
    return float(area / (2.0 * tps[-1] * fps[-1])), float(precision / tps[-1])


def hits_at_k(pos_scores: np.ndarray, neg_scores: np.ndarray, ks=(20, 50, 100)) -> dict[str, float]:
    """OGB ``ogbl-collab`` style: the share of positives scoring above the K-th best of the shared
    negatives. A K larger than the number of negatives is left out."""
    out = {}
    for k in ks:
        if neg_scores.size >= k:
            kth = np.partition(neg_scores, neg_scores.size - k)[neg_scores.size - k]
            out[f"hits@{k}"] = float(np.mean(pos_scores > kth))
    return out


def mrr(z: torch.Tensor, pos: np.ndarray, num_negatives: int = 100, *, seed: int = 0,
        chunk: int = 65536, max_positives: int = 100_000, metric: torch.Tensor | None = None,
        decoder=None, structure=None) -> dict[str, float]:
    """OGB ``ogbl-citation2`` style: each positive ``(u, v)`` of ``pos: (2, P)`` is ranked against
    ``num_negatives`` pairs ``(u, w)`` with ``w`` uniform over all nodes (unfiltered, as in OGB); ties
    count half (OGB's mean of the optimistic and pessimistic rank). Returns the mean reciprocal rank and
    Hits@1/3/10 of those ranks, over at most ``max_positives`` positives drawn uniformly (ogbl-citation2
    ranks 86,000; a 10M-node graph's 6M test edges would take minutes for the same precision), and
    ``mrr_positives``, how many were ranked."""
    rng = np.random.default_rng(seed)
    pos = sample_positives(pos, max_positives, rng)
    n = z.shape[0]
    ranks = np.empty(pos.shape[1], np.float64)
    with torch.no_grad():
        for s in range(0, pos.shape[1], chunk):
            zu = query_side(z[index_on(pos[0, s:s + chunk], z)], metric)  # the chunk's rows: no copy of z
            score = (lambda zv, zu=zu: (zu * zv).sum(1)) if decoder is None else (lambda zv, zu=zu: decoder(zu, zv))  # noqa: E731
            u = pos[0, s:s + chunk]
            p = _plus(score(z[index_on(pos[1, s:s + chunk], z)]), structure, u, pos[1, s:s + chunk])
            above = torch.zeros(zu.shape[0], dtype=torch.float64, device=z.device)
            for _ in range(num_negatives):  # one negative per positive at a time: memory O(chunk * d)
                w = rng.integers(0, n, zu.shape[0])
                q = _plus(score(z[index_on(w, z)]), structure, u, w)
                above += (q > p).double() + 0.5 * (q == p).double()
            ranks[s:s + chunk] = (1 + above).cpu().numpy()
    res = {"mrr": float(np.mean(1.0 / ranks)), "mrr_positives": int(ranks.size)} if ranks.size else {}
    for k in (1, 3, 10):
        if ranks.size:
            res[f"mrr_hits@{k}"] = float(np.mean(ranks <= k))
    return res


def _plus(scores: torch.Tensor, structure, u: np.ndarray, v: np.ndarray, among=None) -> torch.Tensor:
    """``scores: (b,)`` in float64 plus the structural part of the pairs ``(u, v)`` (unchanged without one).
    ``among = (queries, rows)``: ``u = queries[rows]``, whose two-hop candidates are computed anyway: their values
    are looked up there (:meth:`gaescale.structure.StructuralScores.of_candidates`), not computed pair by pair."""
    if structure is None:
        return scores
    extra = structure.pairs(u, v) if among is None else structure.of_candidates(*among, v)
    return scores.double() + torch.from_numpy(extra).to(scores.device)


def sample_positives(pos: np.ndarray, max_positives: int, rng: np.random.Generator) -> np.ndarray:
    """At most ``max_positives`` columns of ``pos: (2, P)``, drawn uniformly without replacement by ``rng``
    and kept in their order (all of ``pos``, and no draw, when ``P <= max_positives``)."""
    if pos.shape[1] > max_positives:
        pos = pos[:, np.sort(rng.choice(pos.shape[1], max_positives, replace=False))]
    return pos


def known_lookup(known, num_nodes: int):
    """``known`` as a function ``q: (b,) -> (rows, nodes)``, every known neighbour ``nodes[i]`` of ``q[rows[i]]``
    (repeats allowed). ``known``: such a function, None, or a :class:`Graph`, a ``(2, K)`` array of undirected
    pairs, or a list of those (the arrays are merged into one graph, built once)."""
    if callable(known):
        return known
    items = [] if known is None else [known] if isinstance(known, (Graph, np.ndarray)) else list(known)
    graphs = [k for k in items if isinstance(k, Graph)]
    arrays = [np.asarray(k, np.int64).reshape(2, -1) for k in items if not isinstance(k, Graph)]
    if arrays:
        graphs.append(Graph.from_edge_index(np.concatenate(arrays, axis=1), num_nodes))

    def lookup(q):
        parts = [neighbour_pairs(g, q) for g in graphs]
        return (np.concatenate([np.empty(0, np.int64)] + [r for r, _ in parts]),
                np.concatenate([np.empty(0, np.int64)] + [n for _, n in parts]))
    return lookup


def filtered_pairs(lookup, u: np.ndarray, v: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, nodes)``, each pair once: the nodes left out of the ranking of query ``(u[r], v[r])`` -- ``u``
    itself, its known neighbours and the target ``v`` (which the rank counts apart)."""
    rows, nodes = lookup(u)
    r, n = np.arange(u.size, dtype=np.int64), np.int64(num_nodes)
    key = sorted_unique(np.concatenate([np.asarray(rows, np.int64) * n + np.asarray(nodes, np.int64),
                                        r * n + u, r * n + v]))
    return key // n, key % n


def filtered_ranks(above, tied, rows, scores, hi, lo) -> np.ndarray:
    """``(b,)`` float64 ranks ``1 + above + tied / 2`` of the targets, from counts ``above`` (score ``> hi``) and
    ``tied`` (``lo <= score <= hi``) over all N candidates, less those of the left-out ``(rows, scores)``."""
    b = above.size
    a = scores > hi[rows]
    t = (scores >= lo[rows]) & ~a
    return (1.0 + above - np.bincount(rows[a], minlength=b)
            + 0.5 * (tied - np.bincount(rows[t], minlength=b)))


def ranking_summary(ranks: np.ndarray, ks) -> dict[str, float]:
    """``filtered_mrr``, ``filtered_hits@K`` and ``filtered_positives`` of ``ranks: (P,)``; empty when P = 0."""
    if not ranks.size:
        return {}
    out = {"filtered_mrr": float(np.mean(1.0 / ranks))}
    out.update({f"filtered_hits@{k}": float(np.mean(ranks <= k)) for k in ks})
    out["filtered_positives"] = int(ranks.size)
    return out


RANK_BLOCK = 1024  # rows of a block of the filtered ranking's scan


def ranking_order(z: torch.Tensor, block: int = RANK_BLOCK) -> NormOrder:
    """The candidates ``z: (N, d)`` by decreasing norm, in float64, as :func:`filtered_ranking` scans them."""
    return NormOrder(z.detach(), block, dtype=torch.float64)


def filtered_ranking(z: torch.Tensor, pos: np.ndarray, known, *, max_positives: int = 1000, seed: int = 0,
                     block: int = RANK_BLOCK, ks=(1, 10, 100), batch: int = 256, stats: dict | None = None,
                     metric: torch.Tensor | None = None, decoder=None, targets: torch.Tensor | None = None,
                     structure=None, by_norm: NormOrder | None = None) -> dict[str, float]:
    """Exact filtered ranking of held-out edges ``pos: (2, P)`` by the embeddings ``z: (N, d)``.

    Each of at most ``max_positives`` edges ``(u, v)`` (drawn by :func:`sample_positives`) is ranked from ``u``:
    ``rank = 1 + #{w: s_uw > s_uv} + #{w: s_uw = s_uv} / 2`` over the candidates ``w`` other than ``u``, ``v``
    and the known neighbours of ``u`` (``known``, see :func:`known_lookup`), ``s_uw = z_u . z_w`` in float64.
    Scores within float64 rounding of ``s_uv`` (``8 d eps |z_u| max|z|``) count as tied, so that ``v`` ties
    itself however the product was summed. Returns ``filtered_mrr``, ``filtered_hits@K`` for ``K`` in ``ks``
    and ``filtered_positives``; ``{}`` without positives. Never N x N, nor a copy of ``z``: memory the sorted order of
    the nodes (:class:`gaescale.norm_order.NormOrder`; N float64 norms while it is sorted) and ``batch * block``
    scores (2 MiB score tiles by default);
    nodes are scanned by decreasing norm and blocks the length bound puts wholly above or below ``s_uv``
    are counted without being scored. ``stats["pairs"]``, if given, counts the scores computed. With a pair
    ``decoder`` every candidate is scored (no bound applies): :func:`decoder_ranking`. ``targets: (N, d)``: the
    candidates' side, ``s_uw = z_u . targets_w`` (a directed run's ``z_s`` against ``z_t``; default ``z``).

    ``structure`` (:class:`gaescale.structure.StructuralScores`): ``s_uw`` adds its ``w . phi(u, w) >= 0``, which
    is 0 but on ``u``'s two-hop candidates. The scan counts the embeddings' logits of every node against the
    target's whole score; the two-hop candidates' counts are then replaced by those of their whole scores, so the
    ranking stays exact. The queries are batched so that their candidates fit a fixed budget (hubs included).

    ``by_norm``: the candidates' :func:`ranking_order` (of ``targets`` or ``z``; its blocks then replace ``block``),
    given by a caller that ranks the same embeddings again (sorting 100M norms takes about a minute)."""
    pos = sample_positives(np.asarray(pos, np.int64), max_positives, np.random.default_rng(seed))
    if not pos.shape[1]:
        return {}
    if decoder is not None:
        return decoder_ranking(decoder, z, pos, known, block=block, ks=ks, batch=batch)
    lookup = known_lookup(known, z.shape[0])
    ranks = np.empty(pos.shape[1], np.float64)
    with torch.no_grad():
        queries = z.detach()
        z = queries if targets is None else targets.detach()  # the candidates' side, kept in its dtype: rows and
        n, d = z.shape                                        # tiles become float64 as they are scored
        by_norm = ranking_order(z, block) if by_norm is None else by_norm
        slack = 8 * d * np.finfo(np.float64).eps * by_norm.max_norm
        for part in _query_batches(pos[0], batch, structure):
            u, v = pos[0, part], pos[1, part]
            zu = query_side(queries[index_on(u, queries)].double(), metric)
            thr = _plus((zu * z[index_on(v, z)].double()).sum(1), structure, u, v, among=(u, np.arange(u.size)))
            tol = slack * zu.norm(dim=1) + (0.0 if structure is None else 1e-12 * (1.0 + thr.abs()))
            hi, lo = thr + tol, thr - tol
            above, tied = _scan_counts(zu, by_norm, hi, lo, tol, stats)
            hi, lo = hi.cpu().numpy(), lo.cpu().numpy()
            if structure is not None:
                above, tied = _two_hop_counts(structure, zu, z, u, above, tied, hi, lo)
            rows, nodes = filtered_pairs(lookup, u, v, n)
            fs = _plus((zu[index_on(rows, z)] * z[index_on(nodes, z)].double()).sum(1), structure, u[rows], nodes,
                       among=(u, rows))
            ranks[part] = filtered_ranks(above, tied, rows, fs.cpu().numpy(), hi, lo)
    return ranking_summary(ranks, ks)


def _query_batches(queries: np.ndarray, batch: int, structure=None):
    """Slices of ``queries``, ``batch`` at a time, or as :meth:`gaescale.structure.StructuralScores.batches`."""
    if structure is not None:
        yield from structure.batches(queries, batch)
        return
    for s in range(0, queries.size, batch):
        yield slice(s, s + batch)


def _two_hop_counts(structure, zu, z, u, above, tied, hi, lo) -> tuple[np.ndarray, np.ndarray]:
    """``(above, tied)`` of the embeddings' logits, with each two-hop candidate of the queries ``u`` counted by its
    whole score (the embeddings' logit plus ``w . phi``) instead."""
    rows, nodes, extra = structure.candidates(u)
    e = _entry_products(zu, z, rows, nodes)
    b = u.size
    for scores, sign in ((e, -1), (e + extra, 1)):
        a = scores > hi[rows]
        t = (scores >= lo[rows]) & ~a
        above = above + sign * np.bincount(rows[a], minlength=b)
        tied = tied + sign * np.bincount(rows[t], minlength=b)
    return above, tied


def _entry_products(zu: torch.Tensor, z: torch.Tensor, rows: np.ndarray, nodes: np.ndarray,
                    tile: int = 1 << 18) -> np.ndarray:
    """``(K,)`` float64 ``zu[rows[i]] . z[nodes[i]]``: dense products of the queries against the distinct nodes,
    ``tile`` entries at a time (BLAS, instead of gathering K rows of ``z``; never ``(queries, N)`` at once)."""
    out = np.empty(rows.size, np.float64)
    distinct, at = np.unique(nodes, return_inverse=True)
    width = max(1, tile // max(zu.shape[0], 1))
    order = np.argsort(at, kind="stable")
    cuts = np.searchsorted(at[order], np.arange(0, distinct.size + width, width))
    for j, start in enumerate(range(0, distinct.size, width)):
        sel = order[cuts[j]:cuts[j + 1]]
        block = zu @ z[index_on(distinct[start:start + width], z)].to(zu.dtype).T  # (queries, width): one tile
        out[sel] = block[index_on(rows[sel], block), index_on(at[sel] - start, block)].double().cpu().numpy()
    return out


def _scan_counts(zu, by_norm: NormOrder, hi, lo, tol, stats=None) -> tuple[np.ndarray, np.ndarray]:
    """``(above, tied)``, ``(b,)`` int64 each: how many of each query's N scores ``zu_i . z_w`` exceed ``hi`` and lie
    in ``[lo, hi]``, scored ``block`` candidates at a time. The nodes are scanned by decreasing norm (``by_norm``);
    once ``|z_u| max|z_w|`` of the nodes left is ``tol`` (the rounding margin) below ``lo`` none of them counts, once
    its negative is ``tol`` above ``hi`` all do."""
    n, b, block, bucket_max = by_norm.n, zu.shape[0], by_norm.block, by_norm.bucket_max
    qn = zu.norm(dim=1)
    above = torch.zeros(b, dtype=torch.int64, device=zu.device)
    tied = torch.zeros(b, dtype=torch.int64, device=zu.device)
    active = torch.arange(b, device=zu.device)
    for j in range(bucket_max.numel()):
        start = j * block
        bound = qn[active] * bucket_max[j]
        up = -bound > hi[active] + tol[active]  # every score left is above hi
        above[active[up]] += n - start
        active = active[~up & (bound >= lo[active] - tol[active])]  # drop rows whose remaining scores are below lo
        if not active.numel():
            break
        sc = zu[active] @ by_norm.rows(j).to(zu.dtype).T
        if stats is not None:
            stats["pairs"] = stats.get("pairs", 0) + sc.numel()
        gt = (sc > hi[active, None]).sum(1)
        above[active] += gt
        tied[active] += (sc >= lo[active, None]).sum(1) - gt
    return above.cpu().numpy(), tied.cpu().numpy()


def decoder_ranking(decoder, z: torch.Tensor, pos: np.ndarray, known, *, block: int = 1024, ks=(1, 10, 100),
                    batch: int = 256) -> dict[str, float]:
    """:func:`filtered_ranking` of the (already drawn) ``pos: (2, P)`` under a pair ``decoder(zu, zv) -> s``: every
    query scores all N candidates, ``batch x block`` pairs at a time (memory ``batch * block`` times the decoder's
    width). Scores within ``1e-5 (1 + |s_uv|)`` of the target's count as tied (float32 rounding of the MLP)."""
    lookup = known_lookup(known, z.shape[0])
    ranks = np.empty(pos.shape[1], np.float64)
    with torch.no_grad():
        z = z.detach().float()
        n = z.shape[0]
        for s in range(0, pos.shape[1], batch):
            u, v = pos[0, s:s + batch], pos[1, s:s + batch]
            zu = z[index_on(u, z)]
            thr = decoder(zu, z[index_on(v, z)]).double()
            tol = 1e-5 * (1 + thr.abs())
            hi, lo = thr + tol, thr - tol
            above = torch.zeros(u.size, dtype=torch.int64)
            tied = torch.zeros(u.size, dtype=torch.int64)
            for start in range(0, n, block):
                zc = z[start:start + block]
                sc = decoder(zu[:, None, :].expand(-1, zc.shape[0], -1), zc[None].expand(u.size, -1, -1)).double()
                gt = (sc > hi[:, None]).sum(1)
                above += gt.cpu()
                tied += ((sc >= lo[:, None]).sum(1) - gt).cpu()
            rows, nodes = filtered_pairs(lookup, u, v, n)
            fs = decoder(zu[index_on(rows, z)], z[index_on(nodes, z)]).double()
            ranks[s:s + u.size] = filtered_ranks(above.numpy(), tied.numpy(), rows, fs.cpu().numpy(),
                                                 hi.cpu().numpy(), lo.cpu().numpy())
    return ranking_summary(ranks, ks)
