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
