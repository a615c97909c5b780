"""--strategy partitioned through the one code path: the learnt table on disk in the run, what it refuses."""
import numpy as np
import pytest
import torch

import gaescale
from gaescale import Graph
from gaescale.cli import main
from gaescale.data.prepare import prepare
from gaescale.data.synthetic import community_graph
from gaescale.run.finished import Run


def _featureless(n=3000, e=15000, seed=1):
    g = community_graph(n, e, seed=seed)
    g.x = None
    return g


def test_the_table_is_a_file_of_the_run_and_the_embeddings_are_its_model_s(tmp_path):
    data = _featureless()
    r = gaescale.train(data=data, out=str(tmp_path / "run"), strategy="partitioned", table_parts=3, encoder="linear",
                       dim=16, epochs=15, quiet=True, report=False)
    assert r.metrics["strategy"] == "partitioned" and r.metrics["test_auc"] > 0.75
    assert r.metrics["best_epoch"] == r.metrics["epochs"] == 15  # the last epoch's model: its table trained in place
    table = np.load(tmp_path / "run" / "table.npy")
    assert table.shape == (3000, 16)
    assert (np.load(tmp_path / "run" / "table.adagrad.npy") > 0).all()  # every node's row was trained
    # the embeddings are the saved model applied to the saved table: z = A_hat T W (+ the biases' columns)
    held = np.load(tmp_path / "run" / "heldout.npz")
    out = np.concatenate([held["val_pos"], held["test_pos"]], axis=1)
    edges = np.sort(data.edge_index, axis=0)
    train = edges[:, ~np.isin(edges[0] * 3000 + edges[1], np.sort(out, axis=0)[0] * 3000 + np.sort(out, axis=0)[1])]
    graph = Graph.from_edge_index(train, 3000, canonical=True)
    model = r.model
    z = model.embed(torch.from_numpy(table), graph).numpy()
    np.testing.assert_allclose(r.embeddings, z[:, :r.embeddings.shape[1]], rtol=1e-4, atol=1e-6)
    assert model.encoder.layers[0][0].weight.numel() == 0  # the model holds no table


def test_without_out_the_table_lives_while_training_and_is_removed(tmp_path, monkeypatch):
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    r = gaescale.train(data=_featureless(1000, 5000), strategy="partitioned", encoder="linear", dim=8, epochs=3,
                       quiet=True)
    assert r.embeddings.shape == (1000, 8) and list(tmp_path.iterdir()) == []


def test_a_graph_with_features_and_a_resumed_run_are_refused(tmp_path):
    with pytest.raises(gaescale.ParameterError, match="The 'strategy' parameter of train must be another strategy "
                                                      "than 'partitioned' for a graph with features"):
        gaescale.train(data=community_graph(500, 2000), strategy="partitioned", quiet=True)
    with pytest.raises(gaescale.ParameterError, match="The 'resume' parameter of train must be False with "
                                                      "strategy='partitioned'"):
        gaescale.TrainConfig(strategy="partitioned", resume=True, out=str(tmp_path / "r"))
    with pytest.raises(gaescale.ParameterError, match="The 'table_parts' parameter of train must be left unset "
                                                      "unless strategy is 'partitioned'"):
        gaescale.TrainConfig(strategy="neighbor", table_parts=4)
    assert not (tmp_path / "r").exists()


def test_auto_s_choice_of_partitioned_is_refused_what_its_table_cannot_do():
    from gaescale.run.strategy import check_partitioned_run
    resumed = gaescale.TrainConfig(strategy="auto", resume=True, out="r", precision="bf16")
    with pytest.raises(gaescale.ParameterError, match="The 'resume' parameter of train must be False with "
                                                      "strategy='partitioned'"):
        check_partitioned_run(resumed, None, None)
    with pytest.raises(gaescale.ParameterError, match="The 'precision' parameter"):
        check_partitioned_run(gaescale.TrainConfig(strategy="auto", precision="fp16"), None, None)
    check_partitioned_run(gaescale.TrainConfig(strategy="auto", precision="bf16"), None, None)  # bf16 is fine


def test_a_prepared_featureless_graph_trains_from_the_command_line_and_cannot_embed_new_nodes(tmp_path, capsys):
    data = _featureless(2000, 10000, seed=3)
    np.save(tmp_path / "e.npy", data.edge_index)
    prepare(tmp_path / "e.npy", tmp_path / "prep")
    assert main(["train", str(tmp_path / "prep"), "--out", str(tmp_path / "run"), "--strategy", "partitioned",
                 "--table-parts", "4", "--encoder", "linear", "--dim", "16", "--epochs", "10", "--no-report"]) == 0
    err = capsys.readouterr().err
    assert "4 node partitions, 10 buckets per epoch" in err and "embedded 2,000 nodes layer by layer" in err
    np.savetxt(tmp_path / "e.txt", data.edge_index.T, fmt="%d")
    with pytest.raises(gaescale.ParameterError, match="a run trained with node features"):
        Run.open(tmp_path / "run").embed(tmp_path / "e.txt")


def test_train_and_plan_size_the_partitions_alike_from_the_graph_s_edges(tmp_path, capsys):
    """Without --table-parts, train takes the planner's partitions: the fewest whose step fits --memory-budget, with
    the largest bucket from a sample of the graph's edges; 'gaescale plan' names the same, and the run's config
    keeps them."""
    import json

    from gaescale.config import TrainConfig
    from gaescale.run.plan import plan
    from gaescale.training.buckets import EdgeSample

    data = _featureless(2000, 10000, seed=3)
    np.save(tmp_path / "e.npy", data.edge_index)
    prepare(tmp_path / "e.npy", tmp_path / "prep")
    sample = EdgeSample.of(gaescale.data.prepare.open_prepared(tmp_path / "prep").graph)
    # without the structural part: on 2,000 nodes its evaluation's fixed memory would outweigh a bucket's step
    peaks = [{p.strategy: p for p in plan(TrainConfig(strategy="partitioned", encoder="linear", dim=16, table_parts=k,
                                                      structure="off"),
                                          2000, int(json.loads((tmp_path / "prep" / "graph.json").read_text())
                                                    ["num_edges"]), None, prepared=True, sample=sample)}
             ["partitioned"].peak_bytes for k in (2, 3)]
    assert peaks[0] > peaks[1]
    budget = f"{(peaks[0] + peaks[1]) / 2 / 2**30:.9f}"  # room for three partitions, not for two
    flags = ["--encoder", "linear", "--dim", "16", "--memory-budget", budget, "--structure", "off"]
    assert main(["plan", str(tmp_path / "prep"), "--strategy", "partitioned", *flags]) == 0
    assert "3 partitions, 6 buckets (the fewest that fit the budget)" in capsys.readouterr().out
    assert main(["train", str(tmp_path / "prep"), "--out", str(tmp_path / "run"), "--strategy", "partitioned",
                 *flags, "--epochs", "2", "--no-report"]) == 0
    assert "3 node partitions, 6 buckets per epoch" in capsys.readouterr().err
    assert json.loads((tmp_path / "run" / "config.json").read_text())["table_parts"] == 3
