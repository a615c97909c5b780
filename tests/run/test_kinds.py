"""The kinds of graph (gaescale.run.kinds): one pipeline trains both, and what the pipeline measures and refuses is
the same for each (issue 32: the directed run had drifted from the undirected one)."""
import itertools
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import gaescale
from gaescale.config import TrainConfig
from gaescale.data.readers import EdgeList
from gaescale.data.synthetic import community_graph
from gaescale.directed.graph import DiGraph
from gaescale.directed.kind import Directed
from gaescale.errors import ParameterError
from gaescale.graph import Graph
from gaescale.run import pipeline
from gaescale.run.kinds import Undirected, kind_of

FAST = dict(dim=4, epochs=4, eval_every=2, warmup=0, patience=0, quiet=True, report=False, checkpoint_every=0)
MEMORY = {"setup_peak_rss_bytes", "training_start_rss_bytes", "training_peak_rss_bytes",
          "before_evaluation_peak_rss_bytes", "evaluation_peak_rss_bytes", "peak_rss_bytes"}


def _graph() -> EdgeList:
    return community_graph(200, 800, seed=0)


def test_kind_of_chooses_by_the_directed_option():
    assert isinstance(kind_of(TrainConfig()), Undirected)
    assert isinstance(kind_of(TrainConfig(directed=True, strategy="full")), Directed)


@pytest.mark.parametrize("directed", [False, True])
def test_both_kinds_measure_setup_training_and_evaluation_memory_apart(monkeypatch, directed):
    ticks = itertools.count(1)
    monkeypatch.setattr(pipeline, "peak_rss_bytes", lambda: next(ticks))  # a peak that rises with every reading
    monkeypatch.setattr(pipeline, "reset_peak_rss", lambda: True)
    fitted_at = []
    real_fit = pipeline.fit
    monkeypatch.setattr(pipeline, "fit", lambda *a, **k: (fitted_at.append(next(ticks)), real_fit(*a, **k))[1])
    m = gaescale.train(data=_graph(), directed=directed, **({"strategy": "full"} if directed else {}), **FAST).metrics
    assert MEMORY <= set(m) and all(m[k] is not None for k in MEMORY)
    # the setup's peak is read before training starts, training's after it ends, evaluation's after that
    assert m["setup_peak_rss_bytes"] < fitted_at[0] < m["training_peak_rss_bytes"]
    assert m["training_peak_rss_bytes"] < m["before_evaluation_peak_rss_bytes"] < m["evaluation_peak_rss_bytes"]


def test_both_kinds_write_the_same_metrics_but_their_own_scores():
    und = gaescale.train(data=_graph(), **FAST).metrics
    dire = gaescale.train(data=_graph(), directed=True, strategy="full", **FAST).metrics
    directed_only = {"reverse_auc", "reverse_pairs", "directed"}
    undirected_only = {"structure_weights", "embeddings_only"}  # the structural part: undirected graphs only
    assert set(dire) - directed_only == set(und) - undirected_only
    assert dire["num_edges"] == und["num_edges"] == 800  # u < v: one directed edge each


def test_the_run_graph_is_the_kinds_csr():
    data = _graph()
    g = Graph.from_edge_index(data.edge_index, data.num_nodes)
    d = DiGraph.from_edge_index(data.edge_index, data.num_nodes)
    indptr, indices = Undirected().run_graph(g)
    assert indices.size == 2 * 800 and np.array_equal(indptr, g.indptr)
    indptr, indices = Directed().run_graph(d)
    assert indices.size == 800 and np.array_equal(np.diff(indptr), np.bincount(data.edge_index[0], minlength=200))


def test_the_directed_kind_refuses_what_it_cannot_do_before_anything_is_read(tmp_path):
    config = TrainConfig(edges=str(tmp_path / "missing.txt"), directed=True, strategy="full")
    one = SimpleNamespace(world_size=1, is_main=True)
    with pytest.raises(ParameterError, match="'encoder' parameter of train must be an encoder name with "
                                             "directed=True .* Got 'Linear'"):
        Directed().check(config, one, prepared=False, custom=torch.nn.Linear(2, 2))
    with pytest.raises(ParameterError, match="'directed' parameter of train must be False with a prepared graph"):
        Directed().check(config, one, prepared=True, custom=None)
    with pytest.raises(ParameterError, match="'directed' parameter of train must be False under torchrun"):
        gaescale.train(config, runtime=SimpleNamespace(world_size=2, is_main=True))
    with pytest.raises(ParameterError, match="'select' parameter of train must be 'auto' or 'auc' with directed"):
        TrainConfig(directed=True, strategy="full", select="mrr")
