"""Link-prediction metrics against hand-checked cases and a dense reference."""
import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score

from conftest import brute_force_ranks, dense_adjacency, random_edges
from gaescale.graph import Graph
from gaescale.models import bias_metric, with_bias
from gaescale.training.evaluate import filtered_ranking, hits_at_k, link_scores, mrr, pair_scores


def test_hits_at_k_by_hand():
    pos, neg = np.array([3.0, 1.0, 0.5]), np.array([2.0, 0.0, 1.5, -1.0])
    # K-th best negative: K=1 -> 2.0 (one positive above), K=2 -> 1.5 (one), K=3 -> 0.0 (all three)
    assert hits_at_k(pos, neg, ks=(1, 2, 3, 5)) == {"hits@1": 1 / 3, "hits@2": 1 / 3, "hits@3": 1.0}


def test_mrr_matches_dense_ranking():
    rng = np.random.default_rng(0)
    n, d = 50, 3
    z = torch.from_numpy(rng.standard_normal((n, d)))
    pos = rng.integers(0, n, (2, 40))
    got = mrr(z, pos, num_negatives=7, seed=3, chunk=16)
    s = (z @ z.T).numpy()
    draw = np.random.default_rng(3)
    ranks = np.ones(40)
    for start in range(0, 40, 16):  # the same draws: 7 negatives per positive, chunk by chunk
        u, v = pos[0, start:start + 16], pos[1, start:start + 16]
        for _ in range(7):
            w = draw.integers(0, n, u.size)
            ranks[start:start + 16] += (s[u, w] > s[u, v]) + 0.5 * (s[u, w] == s[u, v])
    assert got["mrr"] == pytest.approx(np.mean(1 / ranks))
    assert got["mrr_hits@3"] == pytest.approx(np.mean(ranks <= 3))


def test_link_scores_and_pair_scores():
    z = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [-1.0, 0.0]])
    pos, neg = np.array([[0, 1], [1, 2]]), np.array([[0, 0], [2, 3]])  # scores 1, 1 and 0, -1
    np.testing.assert_allclose(pair_scores(z, pos, chunk=1), [1.0, 1.0])
    auc, ap = link_scores(z, pos, neg)
    assert auc == roc_auc_score([1, 1, 0, 0], [1.0, 1.0, 0.0, -1.0]) == 1.0 and ap == 1.0


def test_link_scores_of_overlapping_scores_by_hand():
    # node 0 has z = 1, so pair (0, k) scores z_k: positives 3, 1, 0.5; negatives 2, 0, 1 (a tie), -1
    z = torch.tensor([[1.0], [3.0], [1.0], [0.5], [2.0], [0.0], [1.0], [-1.0]])
    pos, neg = np.array([[0, 0, 0], [1, 2, 3]]), np.array([[0, 0, 0, 0], [4, 5, 6, 7]])
    auc, ap = link_scores(z, pos, neg)
    # AUC: of the 12 (positive, negative) pairs, 3 wins 4, 1 wins 2 and ties 1 (half), 0.5 wins 2
    assert auc == pytest.approx(8.5 / 12)
    # AP: precision at each recall step, by descending score: 3 (1/1), the tied 1s (2/4), 0.5 (3/5)
    assert ap == pytest.approx((1 / 1 + 2 / 4 + 3 / 5) / 3)


def test_link_scores_match_sklearn_on_random_overlapping_scores():
    rng = np.random.default_rng(4)
    z = torch.from_numpy(rng.standard_normal((60, 3)))
    pos, neg = rng.integers(0, 60, (2, 50)), rng.integers(0, 60, (2, 70))
    s = (z @ z.T).numpy()
    y, scores = np.r_[np.ones(50), np.zeros(70)], np.r_[s[pos[0], pos[1]], s[neg[0], neg[1]]]
    auc, ap = link_scores(z, pos, neg)
    assert 0.3 < auc < 0.7  # random embeddings: the classes overlap
    assert auc == pytest.approx(roc_auc_score(y, scores)) and ap == pytest.approx(average_precision_score(y, scores))


@pytest.mark.parametrize("block", [3, 4096])
def test_filtered_ranking_matches_brute_force(block):
    n = 70
    rng = np.random.default_rng(0)
    z = torch.from_numpy(rng.integers(-2, 3, (n, 3)).astype(np.float32))  # small integers: many exact ties
    edges = random_edges(n, 150, seed=1)
    train, held = Graph.from_edge_index(edges[:, :120], n), edges[:, 120:]
    known = dense_adjacency(edges, n).numpy()
    stats = {}
    got = filtered_ranking(z, held, [train, held], block=block, batch=8, ks=(1, 10), stats=stats)
    ranks = brute_force_ranks((z.double() @ z.double().T).numpy(), held, known)
    assert not np.all(ranks % 1 == 0)  # ties occurred
    assert got["filtered_mrr"] == pytest.approx(np.mean(1 / ranks))
    assert got["filtered_hits@1"] == pytest.approx(np.mean(ranks <= 1))
    assert got["filtered_hits@10"] == pytest.approx(np.mean(ranks <= 10))
    assert got["filtered_positives"] == 30
    assert 0 < stats["pairs"] <= 30 * n


def test_filtered_ranking_with_node_bias_matches_brute_force():
    n = 80
    rng = np.random.default_rng(3)
    z = torch.from_numpy(rng.standard_normal((n, 3)).astype(np.float32))
    b = torch.from_numpy(rng.integers(-3, 4, n).astype(np.float32))  # integer biases: a degree-like spread
    edges = random_edges(n, 160, seed=2)
    train, held = Graph.from_edge_index(edges[:, :130], n), edges[:, 130:]
    zb = with_bias(z, b)
    got = filtered_ranking(zb, held, [train, held], block=5, batch=8, ks=(1, 10), metric=bias_metric(zb.shape[1]))
    s = (z.double() @ z.double().T + b.double()[:, None] + b.double()[None, :]).numpy()
    ranks = brute_force_ranks(s, held, dense_adjacency(edges, n).numpy())
    assert got["filtered_mrr"] == pytest.approx(np.mean(1 / ranks))
    assert got["filtered_hits@10"] == pytest.approx(np.mean(ranks <= 10))
    neg = rng.integers(0, n, (2, 30))
    auc, _ = link_scores(zb, held, neg, metric=bias_metric(zb.shape[1]))
    assert auc == pytest.approx(roc_auc_score(np.r_[np.ones(30), np.zeros(30)],
                                              np.r_[s[held[0], held[1]], s[neg[0], neg[1]]]))


def test_filtered_ranking_skips_blocks_the_norm_bound_decides():
    rng = np.random.default_rng(2)
    z = torch.from_numpy(rng.standard_normal((400, 4)) * np.r_[np.full(40, 10.0), np.full(360, 0.01)][:, None])
    pos = np.array([np.arange(5), np.arange(5, 10)])  # big-norm queries whose targets are big too
    stats = {}
    got = filtered_ranking(z, pos, None, block=40, stats=stats)
    s = (z @ z.T).numpy()
    ranks = brute_force_ranks(s, pos, np.zeros((400, 400)))
    assert got["filtered_mrr"] == pytest.approx(np.mean(1 / ranks))
    assert stats["pairs"] < 5 * 400  # the 360 small nodes are decided by the bound, not scored


@pytest.mark.parametrize("chunk", [1 << 20, 7])
@pytest.mark.parametrize("seed", range(6))
def test_auc_ap_equal_scikit_learns_with_ties(seed, chunk):
    """The lean AUC / AP (24 bytes per score, for the 20M held-out pairs of a 100M-node graph; its sums a chunk of
    the curve at a time) give scikit-learn's numbers, ties included (integer scores, as common neighbours give, tie
    a lot)."""
    from sklearn.metrics import average_precision_score, roc_auc_score

    from gaescale.training.evaluate import auc_ap
    rng = np.random.default_rng(seed)
    p, q = rng.integers(1, 300), rng.integers(1, 300)
    pos, neg = ((rng.integers(0, 6, p) + 1, rng.integers(0, 6, q)) if seed % 2 else
                (rng.normal(0.5, 1, p), rng.normal(0, 1, q)))
    y, s = np.r_[np.ones(p), np.zeros(q)], np.r_[pos, neg]
    auc, ap = auc_ap(pos, neg, chunk=chunk)
    assert auc == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert ap == pytest.approx(average_precision_score(y, s), abs=1e-12)
    assert auc_ap([2.0], [1.0]) == (1.0, 1.0) and auc_ap([1.0], [1.0]) == (0.5, 0.5)
    with pytest.raises(ValueError, match="positive and negative"):
        auc_ap([], [1.0])
