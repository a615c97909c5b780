"""Issue 33, "Never lose a run": a run directory read by topk, score and report when a file is missing, cut short or
not JSON, config values and API calls that gave a traceback, a tiny split said nothing, a killed write's leftover.

Each row: the setup, the command (run in-process), the key words of its one-line message and the verdict on the
old behaviour (traceback, silent, misleading, leftover). Every row asserts exit code 2, exactly one line on stderr
holding the key words, and that nothing in the directory changed.
"""
import json
import os
import shutil

import numpy as np
import pytest

import gaescale
from conftest import FAST, RING, tree
from gaescale.cli import main


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Finished runs of the 30-node ring: undirected and directed."""
    d = tmp_path_factory.mktemp("trained")
    (d / "e.txt").write_text(RING)
    assert main(["train", str(d / "e.txt"), "--out", str(d / "run")] + FAST) == 0
    assert main(["train", str(d / "e.txt"), "--out", str(d / "drun"), "--directed"] + FAST) == 0
    return d


def _copy(t, tr, name="run", drop=None, cut=None, text=None):
    """A copy of a finished run, with ``drop`` deleted, ``cut`` cut to half its bytes, or ``text`` = (file, text)."""
    shutil.copytree(tr / name, t / name)
    if drop:
        (t / name / drop).unlink()
    if cut:
        data = (t / name / cut).read_bytes()
        (t / name / cut).write_bytes(data[:len(data) // 2])
    if text:
        (t / name / text[0]).write_text(text[1])
    return str(t / name)


def _pairs(t):
    (t / "p.tsv").write_text("1\t2\n2\t1\n")
    return str(t / "p.tsv")


def _config(t, text):
    (t / "c.json").write_text(text)
    return str(t / "c.json")


CASES = {
    "score: a directed run without config.json": (
        lambda t, tr: ["score", _copy(t, tr, "drun", drop="config.json"), _pairs(t)],
        "{t}/drun: not a finished gaescale run (config.json is missing)", "silent"),
    "topk: a run without config.json": (
        lambda t, tr: ["topk", _copy(t, tr, drop="config.json"), "--out", str(t / "k.tsv")],
        "{t}/run: not a finished gaescale run (config.json is missing)", "silent"),
    "topk: graph.npz cut short": (
        lambda t, tr: ["topk", _copy(t, tr, cut="graph.npz"), "--exclude-existing", "--out", str(t / "k.tsv")],
        "{t}/run/graph.npz: has 620 bytes, but the run's manifest.json lists 1,240", "traceback"),
    "report: graph.npz cut short": (
        lambda t, tr: ["report", _copy(t, tr, cut="graph.npz"), "--out", str(t / "rep")],
        "{t}/run/graph.npz: has 620 bytes, but the run's manifest.json lists 1,240", "traceback"),
    "topk: graph.npz cut short, an earlier version's run (no manifest)": (
        lambda t, tr: ["topk", _copy(t, tr, cut="graph.npz", drop="manifest.json"), "--exclude-existing", "--out",
                       str(t / "k.tsv")],
        "{t}/run/graph.npz: not a readable .npz file (", "traceback"),
    "report: heldout.npz cut short, an earlier version's run (no manifest)": (
        lambda t, tr: ["report", _copy(t, tr, cut="heldout.npz", drop="manifest.json"), "--out", str(t / "rep")],
        "{t}/run/heldout.npz: not a readable .npz file (", "traceback"),
    "score: config.json not JSON": (
        lambda t, tr: ["score", _copy(t, tr, text=("config.json", "{'decoder': 'inner'")), _pairs(t)],
        "{t}/run/config.json: not valid JSON", "traceback"),
    "train --config: epochs 1e400": (
        lambda t, tr: ["train", str(tr / "e.txt"), "--config", _config(t, '{"epochs": 1e400}'), "--out",
                       str(t / "o")],
        "The 'epochs' parameter of train must be an int >= 1. Got inf instead.", "traceback"),
    "tune: --fanouts of a strategy it does not use": (
        lambda t, tr: ["tune", str(tr / "e.txt"), "--out", str(t / "T"), "--fanouts", "5,5", "--trials", "2"],
        "The 'fanouts' parameter of tune must be left unset unless strategy is 'neighbor'", "misleading"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_reading_a_damaged_run_or_a_bad_value_is_one_line(tmp_path, capsys, trained, case):
    make, expected, verdict = CASES[case]
    assert verdict in {"traceback", "silent", "misleading", "leftover"}
    argv = make(tmp_path, trained)
    before = tree(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gaescale: error: ") and expected.format(t=tmp_path) in err[0], err
    assert tree(tmp_path) == before


def test_train_with_a_dict_for_its_config_is_named():  # traceback: AttributeError
    with pytest.raises(gaescale.ParameterError, match=r"^The 'config' parameter of train must be a "
                                                      r"gaescale.TrainConfig, or the options as keywords .* Got "
                                                      r"'dict' instead\.$"):
        gaescale.train({"edges": "e.txt"})


def test_a_tiny_graph_says_its_split_holds_no_validation_or_test_edges(tmp_path):  # silent: null metrics
    said = []
    r = gaescale.train(data=gaescale.EdgeList(np.array([[0, 1, 2], [1, 2, 3]]), 4, None), epochs=1, hidden="4", dim=2,
                       log=said.append)
    assert any(m.startswith("warning: the split holds no validation and no test edges (3 training edges)")
               for m in said), said
    assert r.metrics["test_auc"] is None and r.metrics["val_auc"] is None


def test_a_killed_writes_temporary_file_is_removed_by_the_next_write_there(tmp_path):  # leftover
    from gaescale.outputs import write_json
    dead = 2**22 + 4321  # above any pid this system hands out
    left = tmp_path / f".metrics.json.{dead}.abc123.tmp"
    left.write_text("half")
    mine = tmp_path / f".metrics.json.{os.getpid()}.def456.tmp"  # a live process's write in progress
    mine.write_text("going")
    write_json(tmp_path / "metrics.json", {"a": 1})
    assert not left.exists() and mine.exists() and json.loads((tmp_path / "metrics.json").read_text()) == {"a": 1}
