"""Placing the graph and its split (gaescale.parallel.placement) in one process: the split that the data's own
functions give, nothing sharded."""
import numpy as np

from conftest import random_edges
from gaescale.config import TrainConfig
from gaescale.data.prepare import open_prepared, prepare
from gaescale.data.split import split_edges, split_hashed
from gaescale.graph import Graph
from gaescale.parallel.placement import place
from gaescale.parallel.runtime import Local


def _logged():
    lines = []
    return lines, lines.append


def test_one_process_places_an_in_memory_graph_as_split_edges_does():
    graph = Graph.from_edge_index(random_edges(300, 1500, seed=4), 300)
    config = TrainConfig(val_fraction=0.1, test_fraction=0.2, seed=5)
    lines, log = _logged()
    placed = place(config, graph, None, "full", prepared=False, out=None, runtime=Local(), device=None, log=log)
    expected = split_edges(graph, 0.1, 0.2, seed=5)
    for name in ("val_pos", "val_neg", "test_pos", "test_neg"):
        assert np.array_equal(getattr(placed.split, name), getattr(expected, name)), name
    assert np.array_equal(placed.train_graph.indices, expected.train_graph().indices)
    assert placed.shards is None and placed.cut_by_hash is None
    assert lines[0].startswith(f"split: {expected.num_train:,} train / {expected.val_pos.shape[1]:,} val")


def test_one_process_splits_a_prepared_graph_by_hash_into_out_split(tmp_path):
    edges = tmp_path / "edges.txt"
    np.savetxt(edges, random_edges(400, 2000, seed=1).T, fmt="%d")
    graph = open_prepared(prepare(edges, tmp_path / "prep").path).graph
    config = TrainConfig(seed=3)
    out = tmp_path / "run"
    placed = place(config, graph, None, "cluster", prepared=True, out=out, runtime=Local(), device=None,
                   log=lambda m: None)
    expected = split_hashed(graph, config.val_fraction, config.test_fraction, seed=3)
    assert np.array_equal(placed.split.test_pos, expected.test_pos)
    assert np.array_equal(placed.train_graph.indptr, expected.train_graph().indptr)
    assert (out / "split").is_dir() and placed.scratch is None
