"""The TensorBoard tracker on hand-written records, read back with TensorBoard's own EventAccumulator."""
import numpy as np
import pytest

from conftest import as_earlier_run, hide_tensorboard
from conftest import tensorboard_scalars as scalars
from gaescale.errors import MissingDependencyError, OutputError
from gaescale.training.tracker import TensorBoardTracker, Tracker, open_tracker

pytest.importorskip("tensorboard")  # the optional extra; the test extra (CI) installs it


def f32(v: float) -> float:
    """TensorBoard keeps a scalar as float32."""
    return float(np.float32(v))


RECORDS = [{"epoch": 1, "loss": 1.25, "seconds": 0.5, "steps": 1},
           {"epoch": 2, "loss": 0.875, "seconds": 0.25, "steps": 1, "val_auc": 0.6, "val_ap": 0.65},
           {"epoch": 3, "loss": 0.7, "seconds": 0.125, "steps": 1},
           {"epoch": 4, "loss": 0.6, "seconds": 0.3, "steps": 1, "val_auc": 0.8, "val_ap": 0.7}]


def test_each_record_becomes_scalars_at_its_epoch_and_validation_only_where_evaluated(tmp_path):
    tracker = TensorBoardTracker(tmp_path / "tb")
    assert not (tmp_path / "tb").exists()  # constructing only checks
    tracker.start()
    for rec in RECORDS:
        tracker.log_epoch(rec)
    tracker.log_final({"test_auc": 0.75, "test_ap": None, "best_epoch": 2})
    tracker.close()
    tracker.close()  # idempotent
    got = scalars(tmp_path / "tb")
    assert got == {"train/loss": [(1, 1.25), (2, 0.875), (3, f32(0.7)), (4, f32(0.6))],
                   "train/seconds": [(1, 0.5), (2, 0.25), (3, 0.125), (4, f32(0.3))],
                   "val/auc": [(2, f32(0.6)), (4, f32(0.8))], "val/ap": [(2, f32(0.65)), (4, f32(0.7))],
                   "test/auc": [(2, 0.75)]}  # at the best epoch; test AP None: not written


def test_each_epoch_is_on_disk_before_the_next_and_before_close(tmp_path):
    tracker = TensorBoardTracker(tmp_path)
    tracker.log_epoch(RECORDS[0])  # opens the event file on first use
    assert scalars(tmp_path)["train/loss"] == [(1, 1.25)]  # flushed: a watching TensorBoard shows it now
    tracker.close()


def test_a_resumed_run_replaces_the_curves_from_step_1_whatever_the_directory_held(tmp_path):
    """A run tracked to epoch 4, killed, and resumed from its checkpoint of epoch 2 (whose history holds epochs
    1-2): the directory shows epochs 1-4 once each, the checkpoint's 1-2 and the resumed run's own 3-4, not the
    killed run's; a directory the first part never wrote to gets the whole course as well."""
    first = TensorBoardTracker(tmp_path / "same")
    for rec in RECORDS:
        first.log_epoch({**rec, "loss": rec["loss"] + 10})  # the killed run's values, different from the resumed
    first.close()
    as_earlier_run(tmp_path / "same")
    resumed_own = [{**r, "loss": r["loss"] + 1} for r in RECORDS[2:]]
    for log_dir in (tmp_path / "same", tmp_path / "fresh"):
        tracker = TensorBoardTracker(log_dir)
        tracker.start(RECORDS[:2])
        for rec in resumed_own:
            tracker.log_epoch(rec)
        tracker.close()
        got = scalars(log_dir)
        assert got["train/loss"] == [(1, 1.25), (2, 0.875), (3, f32(1.7)), (4, f32(1.6))], log_dir
        assert got["val/auc"] == [(2, f32(0.6)), (4, f32(0.8))], log_dir


def test_an_existing_file_as_directory_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "tb").write_text("x")
    with pytest.raises(OutputError) as info:
        TensorBoardTracker(tmp_path / "tb")
    assert str(info.value) == f"{tmp_path}/tb: the TensorBoard directory is an existing file; choose another " \
                              "--tensorboard."
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tb"]


def test_without_the_package_the_tracker_names_the_extra_to_install(tmp_path, monkeypatch):
    hide_tensorboard(monkeypatch)
    with pytest.raises(ImportError):  # the premise: torch's module cannot be imported
        __import__("torch.utils.tensorboard")
    with pytest.raises(MissingDependencyError) as info:
        TensorBoardTracker(tmp_path / "tb")
    assert str(info.value) == ("--tensorboard needs the tensorboard package, which is not installed; pip install "
                               "'gaescale[tensorboard]' (or pass no --tensorboard).")
    assert isinstance(info.value, ImportError) and not (tmp_path / "tb").exists()


def test_no_tracking_and_other_ranks_get_a_tracker_that_records_nothing(tmp_path, monkeypatch):
    hide_tensorboard(monkeypatch)  # nor does it need the package
    for tracker in (open_tracker(None), open_tracker(str(tmp_path / "tb"), is_main=False)):
        assert type(tracker) is Tracker
        tracker.start(RECORDS[:1])
        tracker.log_epoch(RECORDS[1])
        tracker.log_final({"test_auc": 0.5})
        tracker.close()
    assert not (tmp_path / "tb").exists()


def test_the_callback_logs_the_record_then_calls_on_epoch_which_may_stop_the_run(tmp_path):
    seen = []

    class Spy(Tracker):
        def log_epoch(self, record):
            seen.append(("tracker", record["epoch"]))

    def stop(record):
        seen.append(("on_epoch", record["epoch"]))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Spy().callback(stop)(RECORDS[0])
    assert seen == [("tracker", 1), ("on_epoch", 1)]
    Spy().callback(None)(RECORDS[1])
    assert seen[-1] == ("tracker", 2)
