import numpy as np
import pytest
import torch
from scipy.sparse import csgraph

from conftest import random_edges
from gaescale.data.order import METHODS, bfs_order, inverse, label_propagation, locality_order, renumber
from gaescale.errors import ParameterError
from gaescale.graph import Graph
from gaescale.optional import available

NEEDS_METIS = pytest.mark.skipif(not available("pymetis"), reason="pymetis is not installed")


def _methods():
    return [pytest.param(m, marks=NEEDS_METIS) if m == "metis" else m for m in METHODS]


def _order(graph: Graph, method: str, **kw) -> np.ndarray:
    return locality_order(graph.indptr, graph.indices, graph.num_nodes, method, **kw)


def _two_cliques(sizes=(5, 7), seed=0, bridge=False, pendant=False) -> tuple[Graph, list[set[int]]]:
    """Two cliques whose node ids are shuffled together (no clique holds a contiguous range), optionally joined by
    one edge between them, and each with a pendant node (degree 1) counted as one of its ``sizes``."""
    ids = np.random.default_rng(seed).permutation(sum(sizes))
    cliques = [ids[:sizes[0]], ids[sizes[0]:]]
    edges = [(u, v) for c in cliques for i, u in enumerate(c[:len(c) - pendant]) for v in c[i + 1:len(c) - pendant]]
    edges += [(c[-1], c[1]) for c in cliques] if pendant else []
    edges += [(cliques[0][0], cliques[1][0])] if bridge else []
    return Graph.from_edge_index(np.array(edges).T, sum(sizes)), [set(c.tolist()) for c in cliques]


def _contiguous(perm: np.ndarray, cliques: list[set[int]]) -> bool:
    """Whether ``perm`` lists one clique's nodes, then the other's."""
    first = cliques[0] if perm[0] in cliques[0] else cliques[1]
    return set(perm[:len(first)].tolist()) == first


@pytest.mark.parametrize("method", _methods())
@pytest.mark.parametrize("n, e, seed", [(1, 0, 0), (2, 1, 0), (40, 30, 1), (200, 150, 2), (300, 2000, 3),
                                         (500, 4000, 4)])
def test_every_method_returns_a_permutation_of_the_nodes(method, n, e, seed):
    # sparse ones leave isolated nodes and many components; dense ones one giant component
    edges = random_edges(n, e, seed) if e else np.zeros((2, 0), np.int64)
    perm = _order(Graph.from_edge_index(edges, n), method, seed=seed)
    assert perm.dtype == np.int64 and perm.shape == (n,)
    assert np.array_equal(np.sort(perm), np.arange(n))


@pytest.mark.parametrize("seed", range(4))
def test_bfs_and_community_put_each_of_two_disjoint_cliques_contiguously(seed):
    graph, cliques = _two_cliques(seed=seed)
    assert not _contiguous(np.arange(graph.num_nodes), cliques)  # the ids interleave
    assert _contiguous(_order(graph, "bfs"), cliques)
    assert _contiguous(_order(graph, "community", seed=seed), cliques)


@pytest.mark.parametrize("seed", range(8))
def test_community_separates_two_cliques_joined_by_one_edge_with_their_pendant_nodes(seed):
    # equal sizes: sorting by degree alone would put both pendants (degree 1) last, together
    graph, cliques = _two_cliques(sizes=(8, 8), seed=seed, bridge=True, pendant=True)
    labels = label_propagation(graph.indptr, graph.indices, graph.num_nodes, seed=seed)
    assert [len(set(labels[sorted(c)].tolist())) for c in cliques] == [1, 1]
    assert _contiguous(_order(graph, "community", seed=seed), cliques)


@NEEDS_METIS
def test_metis_puts_each_of_two_bridged_cliques_in_its_part():
    graph, cliques = _two_cliques(sizes=(8, 8), seed=1, bridge=True)
    assert _contiguous(_order(graph, "metis", part_size=8), cliques)


def test_degree_order_is_descending_with_ties_by_old_index():
    graph = Graph.from_edge_index(random_edges(300, 900, seed=5), 300)
    perm = _order(graph, "degree")
    d = graph.degree[perm]
    assert np.all(d[:-1] >= d[1:]) and d[0] > d[-1]
    ties = d[:-1] == d[1:]
    assert ties.any() and np.all(perm[:-1][ties] < perm[1:][ties])


@pytest.mark.parametrize("seed", range(3))
def test_bfs_visits_each_component_level_by_level_from_its_highest_degree_node(seed):
    graph = Graph.from_edge_index(random_edges(400, 330, seed), 400)  # many components, some isolated nodes
    perm = bfs_order(graph.indptr, graph.indices, graph.num_nodes)
    _, comp = csgraph.connected_components(graph.adjacency(), directed=False)
    c = comp[perm]
    assert np.all(c[:-1] <= c[1:])  # components one after the other
    for k in np.unique(c):
        nodes = perm[c == k]
        assert graph.degree[nodes[0]] == graph.degree[comp == k].max()
        dist = csgraph.shortest_path(graph.adjacency(), indices=nodes[0], unweighted=True)[nodes]
        assert np.all(dist[:-1] <= dist[1:])  # level by level
        # breadth-first proper: each node comes after the nodes found before it, i.e. the position of the first
        # node of the previous level that reaches it never decreases
        level, at = dict(zip(nodes.tolist(), dist.tolist())), {v: i for i, v in enumerate(nodes.tolist())}
        found_by = [min(at[u] for u in graph.indices[graph.indptr[v]:graph.indptr[v + 1]].tolist()
                        if level[u] == level[v] - 1) for v in nodes[1:].tolist()]
        assert found_by == sorted(found_by)


def test_inverse_maps_old_indices_to_new():
    perm = np.random.default_rng(0).permutation(50)
    inv = inverse(perm)
    assert np.array_equal(inv[perm], np.arange(50)) and np.array_equal(perm[inv], np.arange(50))


@pytest.mark.parametrize("method", _methods() + ["random"])
def test_renumbering_keeps_the_edge_set_and_the_gcn_products_up_to_the_permutation(method):
    n = 300
    edges = random_edges(n, 1200, seed=7)
    graph = Graph.from_edge_index(edges, n)
    perm = np.random.default_rng(3).permutation(n) if method == "random" else _order(graph, method)
    assert not np.array_equal(inverse(perm), perm)  # not an involution: renumbering by perm itself would differ
    new = renumber(edges, perm)
    assert new.shape == edges.shape and new.dtype == np.int64
    expected = np.sort(inverse(perm)[edges], axis=0)
    assert _edge_set(np.sort(new, axis=0)) == _edge_set(expected)
    assert _edge_set(np.sort(perm[new], axis=0)) == _edge_set(edges)
    renumbered = Graph.from_edge_index(new, n)
    x = torch.randn(n, 16, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(renumbered.gcn_operator @ x[perm], (graph.gcn_operator @ x)[perm])


def _edge_set(edge_index: np.ndarray) -> set[tuple[int, int]]:
    return set(map(tuple, edge_index.T.tolist()))


def test_an_unknown_method_is_a_parameter_error():
    graph = Graph.from_edge_index(random_edges(10, 12), 10)
    with pytest.raises(ParameterError, match=r"The 'method' parameter of locality_order must be one of 'degree', "
                                             r"'bfs', 'rcm', 'community', 'metis'. Got 'spectral' instead."):
        _order(graph, "spectral")
    with pytest.raises(ParameterError, match=r"'indptr' .* Got shape \(11,\) instead"):
        locality_order(graph.indptr, graph.indices, 11, "bfs")


def _label_propagation(graph: Graph, rounds: int, seed: int) -> list[int]:
    """The reference, node by node: ``rounds`` synchronous rounds (most frequent label among a node's neighbours and
    itself, ties to the smallest), then the nodes that share their label with no neighbour take their neighbours'
    most frequent label."""
    labels = np.random.default_rng(seed).permutation(graph.num_nodes).tolist()
    nbrs = [graph.indices[graph.indptr[i]:graph.indptr[i + 1]].tolist() for i in range(graph.num_nodes)]

    def vote(i, own):
        votes = [labels[j] for j in nbrs[i]] + ([labels[i]] if own else [])
        return min(votes, key=lambda a: (-votes.count(a), a)) if votes else labels[i]

    for _ in range(rounds):
        labels = [vote(i, True) for i in range(graph.num_nodes)]
    lonely = [bool(nbrs[i]) and all(labels[j] != labels[i] for j in nbrs[i]) for i in range(graph.num_nodes)]
    return [vote(i, False) if lonely[i] else labels[i] for i in range(graph.num_nodes)]


@pytest.mark.parametrize("n, e, seed", [(60, 50, 0), (200, 400, 1), (300, 1500, 2)])
@pytest.mark.parametrize("rounds", [1, 2, 4])
def test_label_propagation_is_the_node_by_node_reference(n, e, seed, rounds):
    graph = Graph.from_edge_index(random_edges(n, e, seed), n)
    got = label_propagation(graph.indptr, graph.indices, n, rounds=rounds, seed=seed, tol=0)
    assert got.tolist() == _label_propagation(graph, rounds, seed)


def test_label_propagation_stops_when_labels_settle():
    graph = Graph.from_edge_index(random_edges(400, 1600, seed=8), 400)
    settled = label_propagation(graph.indptr, graph.indices, 400, rounds=100, seed=2)
    assert np.array_equal(label_propagation(graph.indptr, graph.indices, 400, rounds=101, seed=2), settled)
    assert np.unique(settled).size < 400 / 4
