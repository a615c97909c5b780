"""End to end through the Python API (the CLI runs the same code path)."""
import json

import numpy as np
import pytest
import torch

import gaescale
from gaescale.data.synthetic import community_graph
from gaescale.outputs import atomic_write


def test_community_graph_is_deterministic_with_exact_edge_count():
    a, b = community_graph(2000, 9000, seed=3), community_graph(2000, 9000, seed=3)
    assert np.array_equal(a.edge_index, b.edge_index) and np.array_equal(a.x, b.x)
    assert a.edge_index.shape == (2, 9000) and (a.edge_index[0] < a.edge_index[1]).all()
    assert len(np.unique(a.edge_index[0] * 2000 + a.edge_index[1])) == 9000
    assert a.x.shape == (2000, 8) and a.x.dtype == np.float32


def test_training_is_reproducible_and_learns(tmp_path):
    data = community_graph(3000, 15000, seed=1)
    kw = dict(hidden="16", dim=8, epochs=30, eval_every=5, quiet=True, seed=7)
    r1 = gaescale.train(data=data, out=str(tmp_path / "a"), **kw)
    r2 = gaescale.train(data=data, **kw)
    assert np.array_equal(r1.embeddings, r2.embeddings)
    assert r1.metrics["test_auc"] > 0.75  # communities make links predictable; chance is 0.5
    hist = r1.metrics["history"]
    assert hist[-1]["loss"] < hist[0]["loss"]
    # the best validation weights after the warm-up (default: epochs // 4 = 7) are the ones kept; with the
    # structural part (on by default here) they are selected on the validation ranking (select auto: mrr)
    assert set(r1.metrics["structure_weights"]) == {"common_neighbours", "adamic_adar", "resource_allocation"}
    assert r1.metrics["embeddings_only"]["filtered_positives"] == r1.metrics["filtered_positives"]
    # evaluation's own peak, measured after a reset, and the run's peak covers it
    assert 0 < r1.metrics["evaluation_peak_rss_bytes"] <= r1.metrics["peak_rss_bytes"]
    assert json.loads((tmp_path / "a" / "config.json").read_text())["select"] == "mrr"
    after = [h for h in hist if "val_mrr" in h and h["epoch"] > 7]
    best = max(after, key=lambda h: h["val_mrr"])
    assert r1.metrics["best_epoch"] == best["epoch"] > 7
    assert r1.metrics["val_auc"] == pytest.approx(best["val_auc"], abs=1e-9)
    assert np.array_equal(np.load(tmp_path / "a" / "embeddings.npy"), r1.embeddings)
    saved = torch.load(tmp_path / "a" / "model.pt", weights_only=True)
    assert saved["config"]["hidden"] == [16] and "state_dict" in saved


def test_data_from_a_function_is_called_once_and_not_held_through_training():
    """train(data=function): the same run as train(data=edge_list), the function called once, and the edge list it
    made let go before the first epoch (what `gaescale demo` does, so that its (2, E) edges are not held)."""
    import gc
    import weakref
    made, alive = [], []

    def make():
        data = community_graph(1500, 6000, seed=2)
        made.append(weakref.ref(data))
        return data

    def on_epoch(record):
        gc.collect()
        alive.append(made[0]() is not None)

    kw = dict(hidden="16", dim=8, epochs=3, eval_every=3, quiet=True, seed=1)
    a = gaescale.train(data=make, on_epoch=on_epoch, **kw)
    b = gaescale.train(data=community_graph(1500, 6000, seed=2), **kw)
    assert len(made) == 1 and alive == [False, False, False]
    assert np.array_equal(a.embeddings, b.embeddings)


def test_a_callable_pyg_data_is_read_as_data_not_called():
    """A PyG Data is callable (it iterates over its attributes): train(data=...) reads it as a Data, as before
    functions were accepted, and does not call it."""
    data = community_graph(1500, 6000, seed=2)

    class DataLike:  # the duck type gaescale.pyg.from_pyg reads, callable as torch_geometric's Data is
        edge_index, x, num_nodes = torch.from_numpy(data.edge_index), torch.from_numpy(data.x), data.num_nodes

        def __call__(self, *keys):
            raise AssertionError("called")

    kw = dict(hidden="16", dim=8, epochs=2, eval_every=2, quiet=True, seed=1)
    a = gaescale.train(data=DataLike(), **kw)
    b = gaescale.train(data=data, **kw)
    assert np.array_equal(a.embeddings, b.embeddings)


def test_featureless_graph_trains_with_identity_features():
    data = community_graph(1500, 6000, seed=2)
    data.x = None
    r = gaescale.train(data=data, hidden="16", dim=8, epochs=40, quiet=True)
    assert r.embeddings.shape == (1500, 8) and r.metrics["test_auc"] > 0.6


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    def boom(fh):
        fh.write(b"partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(tmp_path / "x.bin", boom)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_cora_gae_paper_setting(shared_data, tmp_path):
    """GAE paper protocol: GCN 32 -> 16, lr 0.01, 200 epochs, 85/5/10 split, Cora with its features."""
    r = gaescale.train(edges=str(shared_data / "cora.npz"), hidden="32", dim=16, lr=0.01, epochs=200, patience=0,
                       quiet=True, seed=0)
    assert r.metrics["epochs"] == 200
    assert r.metrics["test_auc"] >= 0.89, r.metrics["test_auc"]


@pytest.mark.parametrize("options", [dict(encoder="sage"), dict(encoder="linear"), dict(variational=True),
                                     dict(loss="weighted-bce", dense="exact"), dict(loss="mse"),
                                     dict(self_loops=True, variational=True)])
def test_every_model_option_trains(options):
    data = community_graph(1500, 7000, seed=4)
    r = gaescale.train(data=data, dim=8, epochs=40, quiet=True, **options)
    assert r.embeddings.shape == (1500, 8)
    assert r.metrics["test_auc"] > 0.7, (options, r.metrics["test_auc"])


def test_non_finite_loss_stops_with_a_named_error():
    from gaescale.errors import NonFiniteLossError
    data = community_graph(300, 1200, seed=5)
    data.x = data.x * 1e30  # logits overflow to inf, then nan
    with pytest.raises(NonFiniteLossError, match="the training loss became"):
        gaescale.train(data=data, epochs=3, quiet=True, loss="linear-mse")


def test_every_run_scores_the_heuristics_on_its_own_test_split():
    from gaescale.data.split import split_edges
    from gaescale.training.heuristics import heuristic_metrics

    data = community_graph(1500, 6000, seed=4)
    lines = []
    r = gaescale.train(data=data, hidden="16", dim=8, epochs=20, seed=3, log=lines.append)
    split = split_edges(gaescale.Graph.from_edge_index(data.edge_index, data.num_nodes), seed=3)
    expected = heuristic_metrics(split.train_graph(), split.test_pos, split.test_neg)
    got = r.metrics["baselines"]
    assert set(got) == {"adamic_adar", "common_neighbours", "degree_product"}
    for name, scores in expected.items():
        assert got[name]["auc"] == pytest.approx(scores["auc"]) and got[name]["ap"] == pytest.approx(scores["ap"])
    separation = all(r.metrics["test_auc"] > b["auc"] and r.metrics["test_ap"] > b["ap"] for b in got.values())
    ranking = all(r.metrics[k] > b[k] for b in got.values() for k in ("filtered_mrr", "filtered_hits@10"))
    assert (r.metrics["beats_baselines_separation"], r.metrics["beats_baselines_ranking"]) == (separation, ranking)
    assert r.metrics["beats_baselines"] is (separation and ranking)
    line = next(m for m in "\n".join(lines).splitlines() if m.startswith("baselines on the same test split"))
    assert f"Adamic-Adar {got['adamic_adar']['auc']:.4f}" in line
    assert ("the embeddings beat all three on AUC/AP" in line) is separation
    assert line.endswith("they beat all three too") is (separation and ranking)


def _scripted_validation(monkeypatch, aucs):
    """Validation during training returns ``aucs`` in turn (then their last); returns the list of the
    embeddings each evaluation scored, in order."""
    import gaescale.training.trainer as trainer_module
    seen = []

    def scripted(z, pos, neg, **kwargs):
        seen.append(z.detach().clone())
        return aucs[min(len(seen), len(aucs)) - 1], 0.5
    monkeypatch.setattr(trainer_module, "link_scores", scripted)
    return seen


def test_the_best_validation_epochs_weights_are_returned_not_the_last(monkeypatch):
    from gaescale.models import split_bias
    seen = _scripted_validation(monkeypatch, [0.6, 0.7, 0.9, 0.8, 0.7, 0.75, 0.6, 0.65])  # best: epoch 3 of 8
    r = gaescale.train(data=community_graph(400, 1600, seed=1), hidden="8", dim=4, epochs=8, warmup=0, patience=0,
                       lr=0.05, quiet=True, select="auc")
    assert len(seen) == 8 and r.metrics["best_epoch"] == 3 and not r.metrics["stopped_early"]
    best, last = split_bias(seen[2]), split_bias(seen[-1])
    assert not torch.equal(best[0], last[0])  # training moved the weights after epoch 3
    np.testing.assert_array_equal(r.embeddings, best[0].numpy())
    np.testing.assert_array_equal(r.node_bias, best[1].numpy())


# Evaluated every 2 epochs with a warm-up of 4: epochs 2 and 4 (0.99, 0.95) may neither be kept nor count;
# epoch 8 is the best after it, and 10, 12, 14 are three evaluations without a better one.
PATIENCE_RUN = dict(hidden="8", dim=4, eval_every=2, warmup=4, patience=3, quiet=True, report=False, select="auc")
PATIENCE_AUCS = [0.99, 0.95, 0.80, 0.85, 0.84, 0.83, 0.82, 0.81]


def test_patience_stops_after_that_many_evaluations_past_the_warmup_without_a_better_auc(monkeypatch):
    data = community_graph(400, 1600, seed=1)
    seen = _scripted_validation(monkeypatch, PATIENCE_AUCS)
    r = gaescale.train(data=data, epochs=40, **PATIENCE_RUN)
    assert r.metrics["stopped_early"] is True and r.metrics["epochs"] == len(r.metrics["history"]) == 14
    assert r.metrics["best_epoch"] == 8 and len(seen) == 7
    assert [h["epoch"] for h in r.metrics["history"] if "val_auc" in h] == [2, 4, 6, 8, 10, 12, 14]
    seen.clear()
    r = gaescale.train(data=data, epochs=40, **{**PATIENCE_RUN, "patience": 0})  # never stops early
    assert r.metrics["stopped_early"] is False and r.metrics["epochs"] == 40 and r.metrics["best_epoch"] == 8


def test_resuming_an_early_stopped_run_with_more_epochs_trains_no_further(tmp_path, monkeypatch):
    """fit resumes from the checkpoint written when patience stopped the run: its state says stopped, so no
    epoch is trained and the result is the stopped run's, as an uninterrupted run with more epochs gives."""
    data = community_graph(400, 1600, seed=1)
    seen = _scripted_validation(monkeypatch, PATIENCE_AUCS)
    uninterrupted = gaescale.train(data=data, epochs=40, **PATIENCE_RUN)
    seen.clear()
    stopped = gaescale.train(data=data, out=str(tmp_path), epochs=30, checkpoint_every=5, **PATIENCE_RUN)
    assert stopped.metrics["stopped_early"] and stopped.metrics["epochs"] == 14
    assert (tmp_path / "checkpoints" / "epoch-000014.pt").is_file()  # saved when it stopped
    seen.clear()
    lines = []
    resumed = gaescale.train(data=data, out=str(tmp_path), epochs=40, checkpoint_every=5, resume=True,
                             log=lines.append, **{**PATIENCE_RUN, "quiet": False})
    assert any("epoch-000014.pt (epoch 14, stopped early)" in m for m in lines), lines
    assert seen == []  # not one more evaluation
    assert resumed.metrics["epochs"] == 14 and resumed.metrics["stopped_early"] and resumed.metrics["best_epoch"] == 8
    assert resumed.metrics["history"] == stopped.metrics["history"]
    np.testing.assert_array_equal(resumed.embeddings, stopped.embeddings)
    np.testing.assert_array_equal(resumed.embeddings, uninterrupted.embeddings)


def test_a_run_stopped_by_its_time_limit_resumes_under_a_higher_one(tmp_path):
    """A run that --time-limit stopped is resumable (time_limit may change on resume): with a higher limit or none
    it trains on to its epochs; with the same limit it trains no further."""
    data = community_graph(400, 1600, seed=1)
    kw = dict(data=data, out=str(tmp_path), epochs=6, checkpoint_every=1, quiet=True, report=False, seed=3)
    cut = gaescale.train(time_limit=1e-9, **kw)  # out of time after the first step
    assert cut.metrics["epochs"] == 1 and cut.metrics["stopped_early"]
    same = gaescale.train(time_limit=1e-9, resume=True, **kw)
    assert same.metrics["epochs"] == 1
    resumed = gaescale.train(resume=True, **kw)
    assert [h["epoch"] for h in resumed.metrics["history"]] == [1, 2, 3, 4, 5, 6]
    assert resumed.metrics["history"][0] == cut.metrics["history"][0]


@pytest.mark.parametrize("strategy", ["full", "cluster", "fastgae", "neighbor"])
def test_weights_of_one_train_the_unweighted_model_and_other_weights_another(tmp_path, strategy):
    import dataclasses
    data = community_graph(400, 1600, seed=4)
    kw = dict(hidden="8", dim=4, epochs=4, quiet=True, seed=3, strategy=strategy, report=False,
              **{"full": {}, "cluster": dict(cluster_parts=4, clusters_per_batch=2),
                 "fastgae": dict(fastgae_nodes=200), "neighbor": dict(batch_size=256, fanouts="5,5")}[strategy])
    plain = gaescale.train(data=data, **kw)
    ones = gaescale.train(data=dataclasses.replace(data, edge_weight=np.ones(1600, np.float32)), weighted=True,
                          out=str(tmp_path / "run"), **kw)
    assert np.allclose(plain.embeddings, ones.embeddings, atol=1e-5)
    w = np.random.default_rng(0).uniform(0.1, 5.0, 1600).astype(np.float32)
    other = gaescale.train(data=dataclasses.replace(data, edge_weight=w), weighted=True, **kw)
    assert not np.allclose(plain.embeddings, other.embeddings, atol=1e-3)
    with np.load(tmp_path / "run" / "graph.npz") as g:  # the run records the weights; topk reads them back
        assert g["data"].shape == g["indices"].shape and np.all(g["data"] == 1)
    from gaescale import Run
    assert Run.open(tmp_path / "run").graph().weighted


def test_weighted_needs_weights():
    data = community_graph(200, 600, seed=4)
    with pytest.raises(gaescale.ParameterError, match="must be used with edges that have weights"):
        gaescale.train(data=data, weighted=True, epochs=1, quiet=True)


def test_train_leaves_the_process_as_it_found_it_and_twice_gives_the_same_run():
    """Threads and every global random state are those from before the run (issue 32); two runs of one seed in one
    process are equal, and the global state a caller set does not change a run."""
    import random
    torch.manual_seed(123)
    np.random.seed(7)
    random.seed(5)
    threads = torch.get_num_threads()
    before = (torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate())
    kw = dict(data=community_graph(300, 1200, seed=1), hidden="8", dim=4, epochs=3, dropout=0.2, quiet=True, seed=4,
              threads=1 if threads != 1 else 2)
    first = gaescale.train(**kw)
    assert torch.get_num_threads() == threads
    assert torch.equal(torch.get_rng_state(), before[0]) and np.array_equal(np.random.get_state()[1], before[1])
    assert random.getstate() == before[2]
    torch.manual_seed(999)  # another global state: the run seeds its own
    second = gaescale.train(**kw)
    assert np.array_equal(first.embeddings, second.embeddings)
    assert [h["loss"] for h in first.metrics["history"]] == [h["loss"] for h in second.metrics["history"]]
