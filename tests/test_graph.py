import numpy as np
import pytest
import torch

from conftest import dense_adjacency, random_edges
from gaescale.errors import GraphError
from gaescale.graph import Graph, canonical_edges


def test_canonical_edges_drops_loops_duplicates_and_reverse_rows():
    ei = np.array([[0, 1, 1, 2, 2, 3], [1, 0, 1, 3, 3, 0]])
    out, stats = canonical_edges(ei, 4)
    assert out.tolist() == [[0, 0, 2], [1, 3, 3]]
    assert (stats.rows, stats.self_loops, stats.duplicates) == (6, 1, 2)


def test_csr_is_symmetric_adjacency():
    ei = random_edges(30, 60)
    g = Graph.from_edge_index(ei, 30)
    dense = torch.from_numpy(g.adjacency().toarray()).double()
    assert torch.equal(dense, dense_adjacency(ei, 30))
    assert g.num_edges == 60
    assert g.degree.tolist() == dense.sum(1).long().tolist()
    assert np.array_equal(g.edge_index(), ei)


def test_gcn_operator_matches_dense_normalisation():
    n = 25
    ei = random_edges(n, 40, seed=3)
    g = Graph.from_edge_index(ei, n)
    a = dense_adjacency(ei, n) + torch.eye(n, dtype=torch.float64)
    dinv = a.sum(1).rsqrt()
    ref = dinv[:, None] * a * dinv[None, :]
    got = torch.from_numpy(g.gcn_operator.scipy().toarray()).double()
    assert torch.allclose(got, ref, atol=1e-6)


def test_mean_operator_rows_average_neighbours():
    ei = np.array([[0, 0], [1, 2]])
    g = Graph.from_edge_index(ei, 4)  # node 3 isolated
    x = torch.tensor([[1.0], [2.0], [4.0], [8.0]])
    assert (g.mean_operator @ x).flatten().tolist() == [3.0, 1.0, 1.0, 0.0]


def test_graph_without_edges_is_refused():
    g = Graph.from_edge_index(np.array([[1, 2], [1, 2]]), 3)
    with pytest.raises(GraphError, match="no edges left after removing self loops"):
        g.require_edges("g.csv")


# ---------------------------------------------------------------- weighted graphs (--weighted)

def _weighted(n=25, e=40, seed=3):
    ei = random_edges(n, e, seed=seed)
    w = np.random.default_rng(seed).uniform(0.2, 4.0, e).astype(np.float32)
    wmat = np.zeros((n, n))
    wmat[ei[0], ei[1]] = w
    wmat[ei[1], ei[0]] = w
    return ei, w, wmat


def test_canonical_weighted_edges_average_merged_rows_and_drop_zero_weights():
    from gaescale.graph import canonical_weighted_edges
    # (0,1) both directions with 2 -> 2; (1,2) listed 1 and 3 -> 2; (2,3) weight 0 -> dropped; (3,3) a loop
    ei = np.array([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 3]])
    out, w, stats = canonical_weighted_edges(ei, 4, np.array([2.0, 2.0, 1.0, 3.0, 0.0, 5.0]))
    assert out.tolist() == [[0, 1], [1, 2]] and w.tolist() == [2.0, 2.0]
    assert (stats.rows, stats.self_loops, stats.zero_weights, stats.duplicates) == (6, 1, 1, 2)
    assert "1 rows of weight 0 dropped" in stats.describe() and "-> 2 undirected edges" in stats.describe()


def test_weighted_gcn_and_mean_operators_match_dense_references():
    n = 25
    ei, w, wmat = _weighted(n)
    g = Graph.from_edge_index(ei, n, edge_weight=w)
    assert np.allclose(g.weighted_adjacency().toarray(), wmat) and np.array_equal(g.adjacency().toarray(), wmat > 0)
    assert np.allclose(g.edge_weight(), w) and np.array_equal(g.edge_index(), ei)
    a_hat = wmat + np.eye(n)
    dinv = 1 / np.sqrt(a_hat.sum(1))  # weighted degree 1 + sum_j w_ij
    assert np.allclose(g.gcn_operator.scipy().toarray(), dinv[:, None] * a_hat * dinv[None, :], atol=1e-6)
    strength = wmat.sum(1)
    mean = np.where(strength[:, None] > 0, wmat / np.maximum(strength, 1e-30)[:, None], 0.0)
    assert np.allclose(g.mean_operator.scipy().toarray(), mean, atol=1e-6)
    # layer-wise inference's pieces: the weighted rows and the scales give the same operators
    rows = g.adjacency_block(3, 11).to_dense().numpy()
    assert np.allclose(rows, wmat[3:11])
    assert np.allclose(g.gcn_scale.numpy()[:, 0], dinv) and np.allclose(g.mean_scale.numpy()[:, 0] * strength,
                                                                        strength > 0)


def test_layer_wise_scales_keep_four_bytes_a_node_on_an_unweighted_graph():
    """What layer-wise inference leaves cached on the (training) graph: the (N, 1) float32 scales, not the float64
    steps to them (20 bytes a node, 2 GB at 100M nodes, before)."""
    n = 500
    g = Graph.from_edge_index(random_edges(n, 2000, seed=3), n)
    degree = dense_adjacency(g.edge_index(), n).numpy().sum(1)
    assert np.allclose(g.gcn_scale.numpy()[:, 0], 1 / np.sqrt(degree + 1))
    assert np.allclose(g.mean_scale.numpy()[:, 0], np.where(degree > 0, 1 / np.maximum(degree, 1), 0))
    assert np.array_equal(g.strength, degree)
    cached = {k: v.nbytes for k, v in vars(g).items() if isinstance(v, (np.ndarray, torch.Tensor)) and k not in
              ("indptr", "indices", "degree")}
    assert sum(cached.values()) == 2 * 4 * n, cached  # gcn_scale and mean_scale, float32


def test_weights_of_one_give_the_unweighted_operators():
    n = 25
    ei, _, _ = _weighted(n)
    plain = Graph.from_edge_index(ei, n)
    ones = Graph.from_edge_index(ei, n, edge_weight=np.ones(ei.shape[1], np.float32))
    for op in ("gcn_operator", "mean_operator"):
        assert np.array_equal(getattr(plain, op).scipy().toarray(), getattr(ones, op).scipy().toarray())


@pytest.mark.parametrize("encoder", ["gcn", "sage"])
def test_weighted_layerwise_inference_equals_the_forward_pass(encoder):
    from gaescale.encoders import ENCODERS
    n = 25
    ei, w, _ = _weighted(n)
    g = Graph.from_edge_index(ei, n, edge_weight=w)
    torch.manual_seed(0)
    model = ENCODERS[encoder](5, [6, 3]).eval()
    x = torch.randn(n, 5)
    with torch.no_grad():
        full = model(x, g)
    assert torch.allclose(model.layerwise(x, g, block=7), full, atol=1e-5)
    with torch.no_grad():  # and the weights matter
        assert not torch.allclose(model(x, Graph.from_edge_index(ei, n)), full, atol=1e-3)


def test_split_and_subgraphs_keep_the_weights():
    from gaescale.data.split import split_edges
    from gaescale.training.samplers import induced_subgraph
    n = 40
    ei, w, wmat = _weighted(n, 120, seed=5)
    g = Graph.from_edge_index(ei, n, edge_weight=w)
    s = split_edges(g, 0.1, 0.2, seed=1)
    assert np.allclose(s.train_weight, wmat[s.train[0], s.train[1]])
    train = s.train_graph()
    assert np.allclose(train.edge_weight(), wmat[train.edge_index()[0], train.edge_index()[1]])
    nodes = np.array([7, 3, 30, 12, 25, 0, 19, 33, 8, 21])
    sub = induced_subgraph(g, nodes)
    assert np.allclose(sub.weighted_adjacency().toarray(), wmat[np.ix_(nodes, nodes)])
