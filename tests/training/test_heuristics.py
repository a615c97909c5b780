"""Link heuristics and their filtered ranking against dense computations on small graphs."""
import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from conftest import brute_force_ranks, dense_adjacency, random_edges
from gaescale.graph import Graph
from gaescale.training.heuristics import heuristic_metrics, heuristic_ranking, heuristic_scores


def _dense_scores(a: np.ndarray) -> dict[str, np.ndarray]:
    """The three heuristics of every pair, from the dense adjacency (the reference)."""
    k = a.sum(1)
    inv_log = np.where(k > 1, 1 / np.log(np.maximum(k, 2)), 0.0)
    return {"adamic_adar": a @ np.diag(inv_log) @ a, "common_neighbours": a @ a, "degree_product": np.outer(k, k)}


def _graph(n=40, e=120, seed=0):
    edges = random_edges(n, e, seed)
    return Graph.from_edge_index(edges, n), dense_adjacency(edges, n).numpy()


def test_heuristic_scores_match_dense_products():
    g, a = _graph()
    rng = np.random.default_rng(1)
    pairs = rng.integers(0, 40, (2, 300))
    got = heuristic_scores(g, pairs, chunk=17)  # several chunks
    for name, dense in _dense_scores(a).items():
        np.testing.assert_allclose(got[name], dense[pairs[0], pairs[1]], rtol=1e-12, err_msg=name)
    assert got["common_neighbours"].max() >= 2  # the graph is dense enough for the products to matter


def test_heuristic_scores_by_hand():
    # path 0-1-2 and a triangle 2-3-4: pair (0, 2) shares node 1 (degree 2),
    # pair (3, 4) shares node 2 (neighbours 1, 3, 4)
    g = Graph.from_edge_index(np.array([[0, 1, 2, 2, 3], [1, 2, 3, 4, 4]]), 5)
    got = heuristic_scores(g, np.array([[0, 3, 0], [2, 4, 4]]))
    np.testing.assert_allclose(got["common_neighbours"], [1, 1, 0])
    np.testing.assert_allclose(got["adamic_adar"], [1 / np.log(2), 1 / np.log(3), 0])
    np.testing.assert_allclose(got["degree_product"], [1 * 3, 2 * 2, 1 * 2])


def test_heuristic_metrics_are_sklearn_on_the_dense_scores():
    g, a = _graph(seed=2)
    rng = np.random.default_rng(3)
    pos, neg = rng.integers(0, 40, (2, 30)), rng.integers(0, 40, (2, 50))
    got = heuristic_metrics(g, pos, neg)
    y = np.r_[np.ones(30), np.zeros(50)]
    for name, dense in _dense_scores(a).items():
        s = np.r_[dense[pos[0], pos[1]], dense[neg[0], neg[1]]]
        assert got[name]["auc"] == pytest.approx(roc_auc_score(y, s))
        assert got[name]["ap"] == pytest.approx(average_precision_score(y, s))


def test_heuristic_ranking_matches_brute_force_with_known_edges_removed():
    n = 60
    edges = random_edges(n, 200, seed=4)
    train, held = edges[:, :170], edges[:, 170:]
    g = Graph.from_edge_index(train, n)
    a = dense_adjacency(train, n).numpy()
    known = dense_adjacency(edges, n).numpy()  # the filter: every known edge, held-out ones included
    got = heuristic_ranking(g, held, [g, held], batch=7, ks=(1, 10))
    for name, dense in _dense_scores(a).items():
        ranks = brute_force_ranks(dense, held, known)
        assert got[name]["filtered_mrr"] == pytest.approx(np.mean(1 / ranks)), name
        assert got[name]["filtered_hits@10"] == pytest.approx(np.mean(ranks <= 10)), name
        assert got[name]["filtered_positives"] == held.shape[1]
    # integer heuristics tie a lot: ranks with halves must have occurred for the test to check tie handling
    assert not np.all(brute_force_ranks(_dense_scores(a)["common_neighbours"], held, known) % 1 == 0)


def test_heuristic_ranking_samples_the_same_positives_as_the_embeddings():
    g, _ = _graph(seed=5)
    pos = random_edges(40, 50, seed=6)
    few = heuristic_ranking(g, pos, g, max_positives=10, seed=8)
    assert few["degree_product"]["filtered_positives"] == 10
    assert heuristic_ranking(g, pos[:, :0], g) == {}


def test_heuristics_read_only_the_rows_they_need(monkeypatch):
    """A memory-mapped graph of a billion edges cannot be one SciPy matrix: the scores and the ranking read rows of
    the CSR, never the whole adjacency, and still equal the dense references."""
    g, a = _graph(60, 300, seed=8)
    monkeypatch.setattr(Graph, "adjacency", lambda self, *args, **kw: pytest.fail("built the whole adjacency"))
    pairs = np.array([[0, 1, 5, 7, 9], [3, 2, 11, 40, 59]])
    got = heuristic_scores(g, pairs)
    for name, dense in _dense_scores(a).items():
        np.testing.assert_allclose(got[name], dense[pairs[0], pairs[1]], rtol=1e-12, err_msg=name)
    held = np.array([[0, 4, 6], [1, 30, 50]])
    ranked = heuristic_ranking(g, held, [g, held], batch=2, ks=(1, 10))
    known = a.copy()
    known[held[0], held[1]] = known[held[1], held[0]] = 1
    for name, dense in _dense_scores(a).items():
        assert ranked[name]["filtered_mrr"] == pytest.approx(np.mean(1 / brute_force_ranks(dense, held, known)))
