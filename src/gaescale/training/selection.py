"""Model selection: which epoch's weights a run keeps, and when it stops.

A propagated random initialisation already scores well: ``z = A_hat W`` with a random ``W`` is a random
projection of the rows of ``A_hat``, and ``z_u . z_v`` approximates a normalised count of common
neighbours. Its validation AUC is high at epoch 1, dips while training reshapes the embeddings, then
climbs back, often for tens of epochs. Selecting the best validation AUC from epoch 1 on (with a patience
shorter than the dip) hands back the untrained model. So the weights are selected, and patience counted,
only after a warm-up: from the first evaluation after epoch ``MIN_WARMUP`` (10) that beats the first
evaluation's AUC (the dip is over), and at the latest after ``warmup`` epochs (a run whose training never
beats its start still ends with trained weights, and says so: :func:`selection_note`). The epochs before are
trained and logged, never kept. Measured on email-enron (linear encoder, d = 64, lr 0.05): a fixed 50-epoch warm-up
kept epoch 51 (test AUC 0.946); the dip ended at epoch 15 and the best epoch after it was 30 (0.954).
Without the 10-epoch floor, a noisy epoch 2 that beat epoch 1 by a hair ended the warm-up on a
Holme-Kim graph of 50,000 nodes, and patience then kept epoch 3.
"""
from __future__ import annotations

import copy
from typing import Any

import torch

from ..errors import ParameterError

MIN_WARMUP = 10  # epochs before a recovered validation AUC may end the warm-up (never beyond ``warmup``)


def _ends_warmup(epoch: int, val_auc: float, first_auc: float, warmup: int) -> bool:
    return epoch > warmup or (epoch > min(MIN_WARMUP, warmup) and val_auc > first_auc)


class EarlyStopping:
    """Keeps the weights of the best validation AUC among the epochs after ``warmup`` and stops after
    ``patience`` evaluations past the warm-up without a better one (``patience=0``: never stops early).

    ``update(epoch, val_auc, model)`` after each evaluation; ``stop`` says whether to stop;
    ``restore(model)`` loads the kept weights (a run that never evaluated past the warm-up keeps its
    last weights). Its state (``state_dict``) is part of a checkpoint, so a resumed run selects alike.
    """

    def __init__(self, patience: int = 20, warmup: int = 0):
        for name, value in (("patience", patience), ("warmup", warmup)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ParameterError(name, "EarlyStopping", "an int >= 0", value)
        self.patience, self.warmup = patience, warmup
        self.best_auc, self.best_epoch, self.best_state, self.waited = -1.0, 0, None, 0
        self.first_auc, self.selecting = None, False  # the first evaluation's AUC; whether the warm-up is over

    def update(self, epoch: int, val_auc: float, model: torch.nn.Module) -> bool:
        """Record the validation AUC of ``epoch``; True when its weights are now the kept ones."""
        if self.first_auc is None:
            self.first_auc = val_auc
            self.selecting = epoch > self.warmup
        elif not self.selecting:
            self.selecting = _ends_warmup(epoch, val_auc, self.first_auc, self.warmup)
        if not self.selecting:
            return False
        if val_auc > self.best_auc:
            self.best_auc, self.best_epoch, self.waited = val_auc, epoch, 0
            self.best_state = copy.deepcopy(model.state_dict())
            return True
        self.waited += 1
        return False

    @property
    def stop(self) -> bool:
        return bool(self.patience and self.waited >= self.patience)

    def restore(self, model: torch.nn.Module) -> None:
        if self.best_state is not None:
            model.load_state_dict(self.best_state)

    KEYS = ("best_auc", "best_epoch", "best_state", "waited", "first_auc", "selecting")

    def state_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.KEYS}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k in self.KEYS:
            setattr(self, k, state[k])


LABELS = {"val_auc": "validation AUC", "val_mrr": "validation filtered MRR"}


def selection_start(history: list[dict], warmup: int, key: str = "val_auc") -> int | None:
    """The epoch from which :class:`EarlyStopping` selects, read back from a run's ``history`` (None when no
    evaluated epoch ended the warm-up); ``key``: the record's score it selected on."""
    evaluated = [h for h in history if key in h]
    for h in evaluated:
        if h["epoch"] > warmup or (h is not evaluated[0] and _ends_warmup(h["epoch"], h[key],
                                                                           evaluated[0][key], warmup)):
            return h["epoch"]
    return None


def selection_note(history: list[dict], best_epoch: int, warmup: int, key: str = "val_auc") -> str | None:
    """A line for the log when the kept weights deserve a second look: no evaluation ended the warm-up, the
    warm-up ended at its cap and the kept epoch is the first after it, or the kept epoch scores below the
    untrained model's first evaluation (training did not help)."""
    evaluated = [h for h in history if key in h]
    if not evaluated:
        return None
    start, label = selection_start(history, warmup, key), LABELS.get(key, key)
    if start is None:
        return (f"model selection: no evaluation ended the warm-up ({warmup} epochs); the last weights are kept. "
                "Train more epochs or lower --warmup.")
    first, kept = evaluated[0], next((h for h in evaluated if h["epoch"] == best_epoch), None)
    if kept is not None and kept[key] < first[key]:
        return (f"model selection: the kept epoch {best_epoch} scores {label} {kept[key]:.4f}, below the "
                f"untrained model's {first[key]:.4f} at epoch {first['epoch']}: training did not improve on its "
                "initialisation. Try --encoder linear, a wider --dim or another --lr.")
    if best_epoch == start and start > warmup and sum(h["epoch"] > start for h in evaluated):
        return (f"model selection: the kept epoch {best_epoch} is the first evaluated after the warm-up ({warmup} "
                f"epochs); {label} only fell after it. The best weights may lie inside the warm-up: try a "
                "lower --warmup or --lr.")
    return None
