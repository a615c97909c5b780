"""Experiment trackers: a run's per-epoch records, sent somewhere as they come (PyKEEN's result trackers).

The pipeline creates one tracker (on the main process only), feeds it the trainer's epoch records through
``fit``'s ``on_epoch`` callback and closes it at the end, also when training fails; the trainer never knows
whether a tracker listens. :class:`TensorBoardTracker` writes TensorBoard event files
(``torch.utils.tensorboard``; the ``tensorboard`` package is the optional extra ``gaescale[tensorboard]``).

The scalars, each at step = epoch (1, 2, ...): ``train/loss`` (the epoch's mean loss), ``train/seconds``
(its training seconds, evaluation excluded), ``val/auc`` and ``val/ap`` at the evaluated epochs, and at the
end ``test/auc`` and ``test/ap`` at the best epoch (whose weights they score): the ``history`` and test metrics of
``metrics.json``.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..optional import require
from ..outputs import check_out_dir

# record key -> scalar tag
EPOCH_SCALARS = {"loss": "train/loss", "seconds": "train/seconds", "val_auc": "val/auc", "val_ap": "val/ap"}
FINAL_SCALARS = {"test_auc": "test/auc", "test_ap": "test/ap"}


def _summary_writer():
    """``torch.utils.tensorboard.SummaryWriter``, or a :class:`MissingDependencyError` saying what to install."""
    return require("tensorboard", "--tensorboard", "or pass no --tensorboard",
                   module="torch.utils.tensorboard").SummaryWriter


class Tracker:
    """What the pipeline calls on a tracker; this one records nothing (no tracking asked for, or a process other
    than the main one)."""

    def start(self, history: Iterable[dict[str, Any]] = ()) -> None:
        """Before the first epoch; ``history``: the records of the epochs a resumed run has already trained."""

    def log_epoch(self, record: dict[str, Any]) -> None:
        """After every epoch, with the trainer's record of it."""

    def log_final(self, metrics: dict[str, Any]) -> None:
        """After evaluation, with the run's metrics."""

    def close(self) -> None:
        """At the end, also when training or evaluation failed."""

    def callback(self, on_epoch: Callable[[dict], None] | None = None) -> Callable[[dict], None]:
        """``fit``'s ``on_epoch``: :meth:`log_epoch`, then ``on_epoch`` (which may raise to stop the run)."""
        def each(record: dict) -> None:
            self.log_epoch(record)
            if on_epoch is not None:
                on_epoch(record)
        return each


class TensorBoardTracker(Tracker):
    """Scalars of every epoch record to TensorBoard event files in ``log_dir``.

    Constructing it only checks (before any work): the package is importable and ``log_dir`` can be a
    directory; nothing is created until :meth:`start`. ``log_dir`` holds one run's curves: :meth:`start`
    hides every earlier event there from step 1 on (TensorBoard's purge step) and writes the records of
    ``history`` again, so that a resumed run (``--resume``) shows its whole course once, continued at the
    epoch after its checkpoint, whether or not its earlier part was tracked into the same directory.
    """

    def __init__(self, log_dir):
        self.writer_class = _summary_writer()
        self.log_dir = check_out_dir(log_dir, flag="--tensorboard", what="TensorBoard directory")
        self.writer = None
        self.last_epoch = 0

    def start(self, history: Iterable[dict[str, Any]] = ()) -> None:
        """Open the event file; ``history``: the records of the epochs a resumed run has already trained."""
        self.writer = self.writer_class(log_dir=str(self.log_dir), purge_step=1, flush_secs=10)
        for record in history:
            self.log_epoch(record, flush=False)
        self.writer.flush()

    def log_epoch(self, record: dict[str, Any], *, flush: bool = True) -> None:
        """One epoch's record (``{"epoch", "loss", "seconds"[, "val_auc", "val_ap"], ...}``) at step ``epoch``;
        flushed, so that a TensorBoard watching ``log_dir`` shows it at once."""
        if self.writer is None:
            self.start()
        epoch = int(record["epoch"])
        for key, tag in EPOCH_SCALARS.items():
            if record.get(key) is not None:
                self.writer.add_scalar(tag, float(record[key]), global_step=epoch)
        self.last_epoch = max(self.last_epoch, epoch)
        if flush:
            self.writer.flush()

    def log_final(self, metrics: dict[str, Any]) -> None:
        """The run's test AUC and AP (those of ``metrics.json`` that are not None) at the step of its best epoch,
        whose weights they score (the last epoch where there is none)."""
        if self.writer is None:
            return
        step = int(metrics.get("best_epoch") or self.last_epoch)
        for key, tag in FINAL_SCALARS.items():
            if metrics.get(key) is not None:
                self.writer.add_scalar(tag, float(metrics[key]), global_step=step)
        self.writer.flush()

    def close(self) -> None:
        """Flush and close the event file (idempotent)."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def open_tracker(tensorboard: str | None, is_main: bool = True) -> Tracker:
    """The run's tracker: a :class:`TensorBoardTracker` for ``tensorboard`` (a directory) on the main process,
    else one that records nothing (no tracking asked for, or another rank of a data-parallel run)."""
    if tensorboard is None or not is_main:
        return Tracker()
    return TensorBoardTracker(Path(tensorboard))
