"""The directed graph and its split keep direction: (u, v) and (v, u) are two edges, held-out positives are
directed edges absent from the training graph, negatives ordered non-edges."""
import numpy as np
import pytest

from gaescale.directed.graph import DiGraph, directed_edges, reverse_pairs, sample_ordered_non_edges, split_directed
from gaescale.errors import GraphError


def test_cleaning_keeps_both_directions_and_merges_exact_duplicates():
    ei = np.array([[0, 1, 0, 2, 1, 3], [1, 0, 1, 2, 2, 1]])
    edges, stats = directed_edges(ei, 4)
    assert edges.tolist() == [[0, 1, 1, 3], [1, 0, 2, 1]]
    assert (stats.rows, stats.self_loops, stats.duplicates) == (6, 1, 1)
    g = DiGraph.from_edge_index(ei, 4)
    assert g.num_edges == 4
    assert g.out_degree.tolist() == [1, 2, 0, 1] and g.in_degree.tolist() == [1, 2, 1, 0]
    assert g.has_edges(np.array([0, 1, 2, 1, 3]), np.array([1, 0, 1, 3, 1])).tolist() == [True, True, False, False,
                                                                                        True]
    assert g.edge_index().tolist() == edges.tolist()
    assert g.symmetrised().num_edges == 3  # {0,1}, {1,2}, {1,3}


def test_operators_against_a_dense_reference():
    rng = np.random.default_rng(1)
    n = 7
    ei = rng.integers(0, n, (2, 20))
    g = DiGraph.from_edge_index(ei, n)
    a = np.zeros((n, n))
    a[ei[0], ei[1]] = 1
    np.fill_diagonal(a, 0)
    dout, din = a.sum(1), a.sum(0)
    ref = np.diag((dout + 1) ** -0.5) @ (a + np.eye(n)) @ np.diag((din + 1) ** -0.5)
    assert np.allclose(g.operator.csr.to_dense().numpy(), ref, atol=1e-6)
    assert np.allclose(g.operator_t.csr.to_dense().numpy(), ref.T, atol=1e-6)
    assert not np.allclose(ref, ref.T)  # the test graph is not symmetric


def _keys(pairs, n):
    return set((pairs[0] * n + pairs[1]).tolist())


def test_split_keeps_direction():
    rng = np.random.default_rng(0)
    n = 60
    ei = rng.integers(0, n, (2, 600))
    ei = np.concatenate([ei, ei[::-1, :200]], axis=1)  # many reciprocal pairs
    g = DiGraph.from_edge_index(ei, n)
    sp = split_directed(g, 0.1, 0.2, seed=3)
    train, val, test = (_keys(p, n) for p in (sp.train, sp.val_pos, sp.test_pos))
    assert len(train) + len(val) + len(test) == g.num_edges  # every directed edge once, in one part
    assert train | val | test == _keys(g.edge_index(), n)
    assert not (train & val or train & test or val & test)
    assert (sp.val_pos.shape[1], sp.test_pos.shape[1]) == (int(g.num_edges * 0.1), int(g.num_edges * 0.2))
    tg = sp.train_graph()
    assert not tg.has_edges(sp.test_pos[0], sp.test_pos[1]).any()  # no held-out edge in the training graph
    assert tg.has_edges(sp.test_pos[1], sp.test_pos[0]).any()  # (u, v) held out while (v, u) trains: allowed
    for neg in (sp.val_neg, sp.test_neg):
        assert neg.shape == (2, len(val) if neg is sp.val_neg else len(test))
        assert not g.has_edges(neg[0], neg[1]).any() and (neg[0] != neg[1]).all()
    negs = np.concatenate([sp.val_neg, sp.test_neg], axis=1)
    assert len(_keys(negs, n)) == negs.shape[1]  # distinct
    assert g.has_edges(negs[1], negs[0]).any()  # ordered: the reversal of an edge is a non-edge


def test_reverse_pairs_keep_the_edges_whose_reversal_is_no_edge():
    g = DiGraph.from_edge_index(np.array([[0, 1, 1, 2], [1, 0, 2, 3]]), 4)
    pos = np.array([[0, 1, 2], [1, 2, 3]])
    assert reverse_pairs(g, pos).tolist() == [[1, 2], [2, 3]]


def test_too_many_non_edges_is_a_graph_error():
    g = DiGraph.from_edge_index(np.array([[0, 1], [1, 0]]), 3)  # 6 ordered pairs, 2 edges
    assert sample_ordered_non_edges(4, g, np.random.default_rng(0)).shape == (2, 4)
    with pytest.raises(GraphError, match="only 4 ordered node pairs"):
        sample_ordered_non_edges(5, g, np.random.default_rng(0))


def test_weighted_cleaning_merges_by_mean_drops_zero_weights_and_keeps_directions_apart():
    from gaescale.directed.graph import directed_weighted_edges
    ei = np.array([[0, 0, 1, 2, 2, 3, 1], [1, 1, 0, 2, 3, 0, 3]])
    w = np.array([1.0, 3.0, 5.0, 7.0, 0.0, 0.5, 2.0])  # 0 -> 1 twice (mean 2), 1 -> 0 apart, a loop, a zero
    edges, weights, stats = directed_weighted_edges(ei, 4, w)
    assert edges.tolist() == [[0, 1, 1, 3], [1, 0, 3, 0]] and weights.tolist() == [2.0, 5.0, 2.0, 0.5]
    assert (stats.self_loops, stats.duplicates, stats.zero_weights) == (1, 1, 1)
    g = DiGraph.from_edge_index(ei, 4, edge_weight=w)
    assert g.weighted and g.weights.tolist() == [2.0, 5.0, 2.0, 0.5]
    assert g.inn.data.tolist() == [5.0, 0.5, 2.0, 2.0]  # rows of A^T: 0 <- 1, 0 <- 3, 1 <- 0, 3 <- 1
    sym = g.symmetrised()  # {0, 1} the mean of 2 and 5, {1, 3} 2, {0, 3} 0.5
    assert sym.edge_index().tolist() == [[0, 0, 1], [1, 3, 3]] and sym.edge_weight().tolist() == [3.5, 0.5, 2.0]


def test_weighted_operators_against_a_dense_reference_and_ones_equal_unweighted():
    rng = np.random.default_rng(3)
    n = 8
    ei = rng.integers(0, n, (2, 25))
    w = rng.uniform(0.2, 3.0, 25)
    g = DiGraph.from_edge_index(ei, n, edge_weight=w)
    total, count = np.zeros((n, n)), np.zeros((n, n))
    np.add.at(total, (ei[0], ei[1]), w)  # repeated rows of one edge: the mean of their weights
    np.add.at(count, (ei[0], ei[1]), 1)
    a = np.where(count > 0, total / np.maximum(count, 1), 0) * (1 - np.eye(n))  # no self loops
    d_out, d_in = a.sum(1) + 1, a.sum(0) + 1
    want = (a + np.eye(n)) / np.sqrt(d_out)[:, None] / np.sqrt(d_in)[None, :]
    np.testing.assert_allclose(g.operator.csr.to_dense().numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g.operator_t.csr.to_dense().numpy(), want.T, rtol=1e-5, atol=1e-6)
    s = (a + a.T) / np.maximum((a > 0).astype(float) + (a.T > 0), 1)  # the mean where both directions are edges
    ds = s.sum(1) + 1
    np.testing.assert_allclose(g.operator_sym.csr.to_dense().numpy(), (s + np.eye(n)) / np.sqrt(np.outer(ds, ds)),
                               rtol=1e-5, atol=1e-6)
    ones, plain = DiGraph.from_edge_index(ei, n, edge_weight=np.ones(25)), DiGraph.from_edge_index(ei, n)
    for op in ("operator", "operator_t", "operator_sym"):
        np.testing.assert_allclose(getattr(ones, op).csr.to_dense().numpy(), getattr(plain, op).csr.to_dense().numpy(),
                                   rtol=1e-6)


def test_the_split_keeps_each_training_edge_with_its_weight():
    rng = np.random.default_rng(4)
    n = 40
    g = DiGraph.from_edge_index(rng.integers(0, n, (2, 300)), n, edge_weight=rng.uniform(0.1, 2, 300))
    split = split_directed(g, 0.1, 0.1, seed=0)
    weight_of = dict(zip(map(tuple, g.edge_index().T), g.weights))
    assert split.train_weight.tolist() == [weight_of[tuple(e)] for e in split.train.T]
    t = split.train_graph()
    assert dict(zip(map(tuple, t.edge_index().T), t.weights)) == {tuple(e): weight_of[tuple(e)] for e in split.train.T}
