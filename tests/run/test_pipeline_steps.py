"""The steps of gaescale.run.pipeline.train, each on its own (train itself is tested end to end in test_pipeline)."""
import numpy as np
import pytest
import torch

from gaescale.config import TrainConfig
from gaescale.data.synthetic import community_graph
from gaescale.errors import OutputError
from gaescale.graph import Graph
from gaescale.parallel.placement import place
from gaescale.parallel.runtime import Local
from gaescale.run import pipeline
from gaescale.run.kinds import Undirected
from gaescale.run.result import Sizes


def test_start_refuses_an_output_path_that_is_a_file_before_any_work(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(OutputError, match="existing file"):
        pipeline._start(TrainConfig(out=str(tmp_path / "f")), Local(), lambda m: None, None)
    device, writer = pipeline._start(TrainConfig(out=str(tmp_path / "new")), Local(), lambda m: None, None)
    assert device.type == "cpu" and writer.out == tmp_path / "new"  # taken: its lock and staging directory
    assert (writer.out / ".lock").is_file() and writer.staging.is_dir()
    writer.close()
    assert not (tmp_path / "new").exists()  # a run that wrote nothing leaves nothing


def test_model_draws_its_weights_from_the_seed_alone():
    sizes = Sizes(50, 100, 8, "full", None)
    config = TrainConfig(seed=3).for_graph(8)
    torch.manual_seed(123)  # whatever the global stream was
    a = pipeline._model(config, Undirected(), sizes, torch.device("cpu"))
    torch.rand(7)
    b = pipeline._model(config, Undirected(), sizes, torch.device("cpu"))
    for (k, va), vb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(va, vb), k
    other = pipeline._model(TrainConfig(seed=4).for_graph(8), Undirected(), sizes, torch.device("cpu"))
    assert any(not torch.equal(p, q) for p, q in zip(other.parameters(), a.parameters()))


def test_fit_then_evaluate_give_the_embeddings_and_metrics_of_the_best_epoch():
    data = community_graph(400, 2000, seed=0)
    graph = Graph.from_edge_index(data.edge_index, data.num_nodes)
    x = torch.from_numpy(data.x)
    config = TrainConfig(epochs=6, quiet=True, warmup=0, patience=0).for_graph(8)
    placed = place(config, graph, x, "full", prepared=False, out=None, runtime=Local(), device=None, log=lambda m: None)
    sizes = Sizes(graph.num_nodes, graph.num_edges, 8, "full", None)
    model = pipeline._model(config, Undirected(), sizes, torch.device("cpu"))
    fitted = pipeline._fit(config, Undirected(), model, placed, x, sizes, Local(), lambda m: None, None, None, None)
    assert fitted.z.shape == (400, config.dim + 2)  # the bias decoder's two extra columns
    assert len(fitted.result.history) == 6 and fitted.block is None
    assert fitted.memory["setup_peak_rss_bytes"] > 0
    with torch.no_grad():  # the weights kept are the best epoch's: z is their forward pass
        model.eval()
        assert torch.allclose(fitted.z, model(x, placed.train_graph), atol=1e-6)
    metrics = pipeline._evaluate(config, Undirected(), model, placed, fitted, sizes, lambda m: None, test=True)
    best = max(fitted.result.history, key=lambda h: h["val_auc"])
    assert metrics["val_auc"] == pytest.approx(best["val_auc"], abs=1e-9)
    assert metrics["epochs"] == 6 and metrics["train_edges"] == placed.split.num_train
    assert set(metrics["baselines"]) >= {"adamic_adar", "common_neighbours"}
    assert np.isfinite(metrics["test_auc"])
