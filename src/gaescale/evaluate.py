"""Link-prediction metrics on held-out pairs: ROC AUC and AP, and OGB-style Hits@K and MRR."""
from __future__ import annotations

import numpy as np
import torch

from .devices import index_on
from .models import decode


def pair_scores(z: torch.Tensor, pairs: np.ndarray, *, chunk: int = 1 << 20) -> np.ndarray:
    """Inner products ``z_u . z_v`` (logits) of ``pairs: (2, P)``, as float64 ``(P,)``, in chunks."""
    out = np.empty(pairs.shape[1], np.float64)
    with torch.no_grad():
        for s in range(0, pairs.shape[1], chunk):
            out[s:s + chunk] = decode(z, index_on(pairs[:, s:s + chunk], z)).double().cpu().numpy()
    return out


def link_scores(z: torch.Tensor, pos: np.ndarray, neg: np.ndarray) -> tuple[float, float]:
    """ROC AUC and average precision of held-out ``pos: (2, P)`` edges vs ``neg: (2, Q)`` non-edges."""
    # imported here, not at the top: scikit-learn (scipy.stats, pandas) takes ~3 s to import, which every
    # process of every command paid, though only the one that evaluates needs it
    from sklearn.metrics import average_precision_score, roc_auc_score

    s = np.concatenate([pair_scores(z, pos), pair_scores(z, neg)])
    y = np.concatenate([np.ones(pos.shape[1]), np.zeros(neg.shape[1])])
    return float(roc_auc_score(y, s)), float(average_precision_score(y, s))


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
        chunk: int = 65536, max_positives: int = 100_000) -> dict[str, float]:
    """OGB ``ogbl-citation2`` style: each positive ``(u, v)`` of ``pos: (2, P)`` is ranked against
    ``num_negatives`` pairs ``(u, w)`` with ``w`` uniform over all nodes (unfiltered, as in OGB); ties
    count half (OGB's mean of the optimistic and pessimistic rank). Returns the mean reciprocal rank and
    Hits@1/3/10 of those ranks, over at most ``max_positives`` positives drawn uniformly (ogbl-citation2
    ranks 86,000; a 10M-node graph's 6M test edges would take minutes for the same precision), and
    ``mrr_positives``, how many were ranked."""
    rng = np.random.default_rng(seed)
    if pos.shape[1] > max_positives:
        pos = pos[:, np.sort(rng.choice(pos.shape[1], max_positives, replace=False))]
    n = z.shape[0]
    ranks = np.empty(pos.shape[1], np.float64)
    with torch.no_grad():
        for s in range(0, pos.shape[1], chunk):
            zu = z[index_on(pos[0, s:s + chunk], z)]
            p = (zu * z[index_on(pos[1, s:s + chunk], z)]).sum(1)
            above = torch.zeros(zu.shape[0], dtype=torch.float64, device=z.device)
            for _ in range(num_negatives):  # one negative per positive at a time: memory O(chunk * d)
                q = (zu * z[index_on(rng.integers(0, n, zu.shape[0]), z)]).sum(1)
                above += (q > p).double() + 0.5 * (q == p).double()
            ranks[s:s + chunk] = (1 + above).cpu().numpy()
    res = {"mrr": float(np.mean(1.0 / ranks)), "mrr_positives": int(ranks.size)} if ranks.size else {}
    for k in (1, 3, 10):
        if ranks.size:
            res[f"mrr_hits@{k}"] = float(np.mean(ranks <= k))
    return res
