"""gaescale tune: a small search that runs, resumes after an interruption, and never scores a test pair."""
import json
import subprocess
import sys

import numpy as np
import pytest

import gaescale
import gaescale.run.pipeline
import gaescale.training.evaluate
import gaescale.training.heldout
from gaescale.config import TrainConfig
from gaescale.data.split import split_edges
from gaescale.errors import ParameterError, RunDirError
from gaescale.graph import Graph
from gaescale.run.tune import SEARCH_SPACE, tune

OPTS = dict(epochs=12, eval_every=2, warmup=4, patience=3)


@pytest.fixture(scope="module")
def edges(tmp_path_factory):
    data = gaescale.community_graph(600, 2400, seed=1)
    p = tmp_path_factory.mktemp("g") / "edges.npy"
    np.save(p, data.edge_index)
    return p, data


def _pairs(a: np.ndarray) -> set:
    return set(zip(*np.sort(a, axis=0).tolist()))


@pytest.mark.slow
def test_three_trials_never_score_a_test_pair_and_best_json_trains(edges, tmp_path, monkeypatch):
    path, _ = edges
    scored = []
    real = gaescale.training.evaluate.pair_scores

    def spy(z, pairs, **kw):
        scored.append(np.asarray(pairs).copy())
        return real(z, pairs, **kw)

    def forbidden(*a, **k):
        raise AssertionError("tune scored the test split")
    monkeypatch.setattr(gaescale.training.evaluate, "pair_scores", spy)
    for name in ("test_metrics", "baseline_metrics"):
        monkeypatch.setattr(gaescale.run.kinds, name, forbidden)
        monkeypatch.setattr(gaescale.training.heldout, name, forbidden)
    result = tune(edges=str(path), out=str(tmp_path / "search"), trials=3, **OPTS)
    assert len(result["trials"]) == 3 and result["best_value"] is not None
    graph = Graph.from_edge_index(np.load(path), 600)
    split = split_edges(graph, seed=0)  # the split every trial trains on (the default seed and fractions)
    test = _pairs(split.test_pos) | _pairs(split.test_neg)
    val = _pairs(split.val_pos) | _pairs(split.val_neg)
    assert scored and all(_pairs(p) <= val for p in scored) and not any(_pairs(p) & test for p in scored)
    best = json.loads((tmp_path / "search" / "best.json").read_text())
    assert best["epochs"] == 12 and set(SEARCH_SPACE) - {"hidden"} <= set(best)
    for name in ("study.db", "trials.csv", "report.html", "trials.png"):
        assert (tmp_path / "search" / name).is_file()
    assert len((tmp_path / "search" / "trials.csv").read_text().splitlines()) == 4
    monkeypatch.undo()
    run = gaescale.train(TrainConfig.from_file(tmp_path / "search" / "best.json", edges=str(path),
                                               out=str(tmp_path / "run"), quiet=True, report=False))
    assert run.metrics["val_auc"] == pytest.approx(result["best_value"], abs=1e-9)  # the same run, now on test too
    assert run.metrics["test_auc"] is not None


def test_interrupted_search_resumes_and_reruns_the_interrupted_trial(edges, tmp_path, monkeypatch):
    path, data = edges
    out = tmp_path / "search"
    real, calls = gaescale.run.pipeline.train, []

    def flaky(config, **kw):
        calls.append(config)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(config, **kw)
    monkeypatch.setattr(gaescale.run.pipeline, "train", flaky)
    with pytest.raises(KeyboardInterrupt):
        tune(data=data, out=str(out), trials=3, **OPTS)
    monkeypatch.undo()
    result = tune(data=data, out=str(out), trials=3, **OPTS)
    states = [r["state"] for r in result["trials"]]
    assert states.count("fail") == 1 and len(states) - 1 == 3  # 3 finished, the interrupted one failed
    failed = next(r for r in result["trials"] if r["state"] == "fail")
    assert result["trials"][failed["number"] + 1]["params"] == failed["params"]  # queued again, first
    again = tune(data=data, out=str(out), trials=3, **OPTS)  # nothing left to do: no new trial
    assert len(again["trials"]) == len(result["trials"])
    with pytest.raises(RunDirError, match="other fixed options"):
        tune(data=data, out=str(out), trials=3, **{**OPTS, "dim": 16})


def test_given_options_are_not_searched(edges, tmp_path):
    _, data = edges
    result = tune(data=data, out=str(tmp_path / "s"), trials=2, encoder="linear", dim=16, **OPTS)
    assert all("encoder" not in r["params"] and "dim" not in r["params"] and "hidden" not in r["params"]
               for r in result["trials"])
    assert result["best_config"]["encoder"] == "linear" and result["best_config"]["dim"] == 16


@pytest.mark.parametrize("kwargs,match", [({"trials": 0}, "'trials'"), ({"time_budget": -1}, "'time_budget'")])
def test_bad_search_parameters_have_named_messages(edges, tmp_path, kwargs, match):
    _, data = edges
    with pytest.raises(ParameterError, match=match):
        tune(data=data, out=str(tmp_path / "s"), **kwargs)


@pytest.mark.slow
def test_cli_tune_writes_best_json(edges, tmp_path):
    path, _ = edges
    r = subprocess.run([sys.executable, "-m", "gaescale", "tune", str(path), "--out", str(tmp_path / "s"),
                        "--trials", "1", "--epochs", "4", "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "s" / "best.json").read_text())["epochs"] == 4
    r = subprocess.run([sys.executable, "-m", "gaescale", "tune", str(path), "--out", str(tmp_path / "s"),
                        "--trials", "x"], capture_output=True, text=True)
    assert r.returncode == 2 and "The 'trials' parameter of tune must be" in r.stderr


def test_hadamard_is_searched_only_with_the_sampled_dense_term_and_undirected():
    import optuna

    from gaescale.run.tune import suggest
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    exact = {suggest(study.ask(), {"dense": "exact"})["decoder"] for _ in range(40)}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    sampled = {suggest(study.ask(), {})["decoder"] for _ in range(40)}
    assert exact == {"bias", "inner"} and sampled == {"bias", "inner", "hadamard"}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))  # --directed refuses hadamard
    assert {suggest(study.ask(), {"directed": True})["decoder"] for _ in range(40)} == {"bias", "inner"}
