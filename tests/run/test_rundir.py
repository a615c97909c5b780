"""Reading a run directory back: the run's whole graph, directed or not, as the run counted it."""
import numpy as np
import pytest

import gaescale
from gaescale import Run
from gaescale.data.readers import EdgeList
from gaescale.directed.graph import DiGraph
from gaescale.graph import Graph

FAST = dict(dim=4, epochs=2, quiet=True, report=False, checkpoint_every=0)


def _directed_edges(n: int = 60, e: int = 300, seed: int = 0) -> EdgeList:
    """Random directed edges, a third of them reciprocated, with loops and repeats for the reader to drop."""
    rng = np.random.default_rng(seed)
    ei = rng.integers(0, n, (2, e))
    back = ei[::-1, : e // 3]
    return EdgeList(np.concatenate([ei, back, ei[:, :10]], axis=1), n, None, source="directed")


@pytest.mark.parametrize("weighted", [False, True])
def test_the_graph_of_a_directed_run_is_a_digraph_of_all_its_directed_edges(tmp_path, weighted):
    data = _directed_edges()
    if weighted:
        data.edge_weight = np.random.default_rng(1).uniform(0.5, 2.0, data.edge_index.shape[1]).astype(np.float32)
    gaescale.train(data=data, directed=True, weighted=weighted, out=str(tmp_path / "run"), **FAST)
    run = Run.open(tmp_path / "run")
    graph = run.graph()
    assert isinstance(graph, DiGraph)
    assert graph.num_edges == run.metrics()["num_edges"]  # was half: an undirected Graph over the out-edges
    expect = DiGraph.from_edge_index(data.edge_index, data.num_nodes,
                                     edge_weight=data.edge_weight if weighted else None)
    assert graph.num_nodes == data.num_nodes and graph.num_edges == expect.num_edges
    assert np.array_equal(graph.edge_index(), expect.edge_index())
    assert np.array_equal(graph.in_degree, expect.in_degree) and np.array_equal(graph.out_degree, expect.out_degree)
    if weighted:
        np.testing.assert_allclose(graph.weights, expect.weights, rtol=1e-6)
    with np.load(tmp_path / "run" / "graph.npz") as g:  # graph.npz holds its out-CSR
        assert np.array_equal(graph.out.indptr, g["indptr"]) and np.array_equal(graph.out.indices, g["indices"])


def test_the_graph_of_an_undirected_run_is_a_graph_of_its_edges(tmp_path):
    data = _directed_edges()
    gaescale.train(data=data, out=str(tmp_path / "run"), **FAST)
    run = Run.open(tmp_path / "run")
    graph = run.graph()
    assert type(graph) is Graph and graph.num_edges == run.metrics()["num_edges"]
    assert graph.num_edges == Graph.from_edge_index(data.edge_index, data.num_nodes).num_edges


def test_the_report_of_a_directed_run_still_reads_its_graph(tmp_path):
    from gaescale.run.report import write_report
    gaescale.train(data=_directed_edges(), directed=True, out=str(tmp_path / "run"), **FAST)
    assert write_report(tmp_path / "run", tmp_path / "report").is_file()
