"""``--tensorboard DIR`` end to end: the event files hold exactly the history and test metrics of metrics.json,
also for a resumed run; the flag; the error without the package; the tracker closed when training fails."""
import json
import shutil

import numpy as np
import pytest

import gaescale
from conftest import as_earlier_run, hide_tensorboard
from conftest import tensorboard_scalars as scalars
from gaescale.cli import build_parser, main
from gaescale.data.synthetic import community_graph
from gaescale.training import tracker as tracker_module

pytest.importorskip("tensorboard")

FAST = ["--quiet", "--hidden", "8", "--dim", "4", "--no-report", "--eval-every", "2", "--warmup", "0"]


@pytest.fixture(scope="module")
def edges(tmp_path_factory):
    path = tmp_path_factory.mktemp("graph") / "e.txt"
    g = community_graph(300, 1500, seed=4)
    path.write_text("".join(f"{u} {v}\n" for u, v in g.edge_index.T))
    return path


def f32(v: float) -> float:
    return float(np.float32(v))


def expected_scalars(run) -> dict[str, list[tuple[int, float]]]:
    """What the event files must hold: metrics.json's history and test metrics, as TensorBoard's float32."""
    m = json.loads((run / "metrics.json").read_text())
    h = m["history"]
    out = {"train/loss": [(r["epoch"], f32(r["loss"])) for r in h],
           "train/seconds": [(r["epoch"], f32(r["seconds"])) for r in h],
           "val/auc": [(r["epoch"], f32(r["val_auc"])) for r in h if "val_auc" in r],
           "val/ap": [(r["epoch"], f32(r["val_ap"])) for r in h if "val_ap" in r],
           "test/auc": [(m["best_epoch"], f32(m["test_auc"]))], "test/ap": [(m["best_epoch"], f32(m["test_ap"]))]}
    assert [r["epoch"] for r in h] == list(range(1, len(h) + 1)) and out["val/auc"]  # the premise: a real history
    return out


def test_cli_tensorboard_writes_exactly_the_history_of_metrics_json(tmp_path, edges):
    assert main(["train", str(edges), "--out", str(tmp_path / "run"), "--epochs", "5",
                 "--tensorboard", str(tmp_path / "tb")] + FAST) == 0
    got = scalars(tmp_path / "tb")
    assert got == expected_scalars(tmp_path / "run")
    assert [s for s, _ in got["val/auc"]] == [2, 4, 5]  # every second epoch and the last
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert "tensorboard" not in config  # where this process logs is its own, not the model's (--config reuses it)


def test_a_resumed_run_continues_the_curves_at_the_epoch_after_its_checkpoint(tmp_path, edges):
    """Trained to epoch 6 with checkpoints every 2, its last checkpoint removed (as if killed after epoch 5):
    the resumed run (from epoch 4) shows epochs 1-6 once each, into the directory the killed run wrote as into a
    fresh one, equal to its metrics.json (whose epochs 1-4 are the checkpoint's, seconds included)."""
    run = tmp_path / "run"
    common = ["--epochs", "6", "--checkpoint-every", "2"] + FAST
    assert main(["train", str(edges), "--out", str(run), "--tensorboard", str(tmp_path / "tb")] + common) == 0
    (run / "checkpoints" / "epoch-000006.pt").unlink()
    as_earlier_run(tmp_path / "tb")
    shutil.copytree(run, tmp_path / "run2")
    for out, tb in ((run, tmp_path / "tb"), (tmp_path / "run2", tmp_path / "fresh")):
        assert main(["train", str(edges), "--out", str(out), "--tensorboard", str(tb), "--resume"] + common) == 0
        assert scalars(tb) == expected_scalars(out), tb


def test_train_and_demo_have_the_flag_and_tune_does_not():
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices
    for command in ("train", "demo"):
        assert "--tensorboard DIR" in sub[command].format_help()
    assert "--tensorboard" not in sub["tune"].format_help()  # its trials would write over each other


def test_without_the_package_the_run_stops_before_any_work(tmp_path, edges, monkeypatch, capsys):
    hide_tensorboard(monkeypatch)
    code = main(["train", str(edges), "--out", str(tmp_path / "run"), "--tensorboard", str(tmp_path / "tb")] + FAST)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["gaescale: error: --tensorboard needs the tensorboard package, which is not "
                                 "installed; pip install 'gaescale[tensorboard]' (or pass no --tensorboard)."]
    assert list(tmp_path.iterdir()) == []
    assert main(["train", str(edges), "--out", str(tmp_path / "run"), "--epochs", "1"] + FAST) == 0  # without: fine


def test_the_tracker_is_closed_with_every_epoch_so_far_when_training_fails(tmp_path, monkeypatch):
    closed = []
    close = tracker_module.TensorBoardTracker.close
    monkeypatch.setattr(tracker_module.TensorBoardTracker, "close", lambda self: closed.append(1) or close(self))

    def stop(record):
        if record["epoch"] == 3:
            raise RuntimeError("stopped by on_epoch")

    with pytest.raises(RuntimeError, match="stopped by on_epoch"):
        gaescale.train(data=community_graph(200, 800, seed=1), tensorboard=str(tmp_path / "tb"), epochs=10,
                       quiet=True, report=False, hidden="4", dim=2, on_epoch=stop)
    assert closed == [1]
    assert [s for s, _ in scalars(tmp_path / "tb")["train/loss"]] == [1, 2, 3]
