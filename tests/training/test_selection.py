"""Model selection on scripted validation curves: the early peak of an untrained model is never kept."""
import pytest
import torch

from gaescale.errors import ParameterError
from gaescale.rules import default_warmup
from gaescale.training.selection import EarlyStopping, selection_note

# The shape measured on email-enron: high at epoch 1 (the propagated random initialisation), a dip, a
# slow climb past the start, then a plateau.
CURVE = [0.914, 0.909, 0.90, 0.88, 0.863, 0.866, 0.87, 0.876, 0.89, 0.905, 0.92, 0.93, 0.936, 0.935, 0.934, 0.933]


def _run(curve, patience, warmup):
    """Feed ``curve`` to a stopper; the model's weight holds the epoch, so what is restored names the epoch."""
    model = torch.nn.Linear(1, 1, bias=False)
    stopper = EarlyStopping(patience, warmup)
    last = 0
    for epoch, auc in enumerate(curve, start=1):
        with torch.no_grad():
            model.weight.fill_(epoch)
        stopper.update(epoch, auc, model)
        last = epoch
        if stopper.stop:
            break
    stopper.restore(model)
    return stopper, int(model.weight.item()), last


def test_without_warmup_the_untrained_epoch_wins_and_patience_stops_in_the_dip():
    stopper, kept, last = _run(CURVE, patience=4, warmup=0)
    assert (stopper.best_epoch, kept, last) == (1, 1, 5)  # the behaviour the warm-up exists to avoid


def test_warmup_skips_the_early_peak_and_patience_waits_for_it():
    stopper, kept, last = _run(CURVE, patience=4, warmup=4)
    assert stopper.best_epoch == kept == 13  # the top of the climb, not epoch 1
    assert last == 16  # patience counted only from epoch 5 on: the dip (epochs 5-9) did not stop it
    assert stopper.best_auc == pytest.approx(0.936)


def test_the_warmup_ends_early_once_validation_beats_its_first_evaluation():
    # beats epoch 1 at epoch 4 (before the 10-epoch floor: noise, ignored) and again from epoch 13 on
    curve = [0.90, 0.85, 0.88, 0.91] + [0.86] * 8 + [0.91, 0.95, 0.94, 0.93, 0.92, 0.97]
    stopper, kept, last = _run(curve, patience=3, warmup=50)
    assert stopper.best_epoch == kept == 14 and last == 17  # patience counted from epoch 13 on


def test_warmup_longer_than_the_run_keeps_the_last_weights():
    stopper, kept, last = _run([0.9, 0.8, 0.85], patience=2, warmup=10)
    assert stopper.best_state is None and kept == last == 3


def test_state_round_trip_selects_alike_after_a_resume():
    first, _, _ = _run(CURVE[:8], patience=0, warmup=4)
    resumed = EarlyStopping(0, 4)
    resumed.load_state_dict(first.state_dict())
    model = torch.nn.Linear(1, 1, bias=False)
    for epoch, auc in enumerate(CURVE[8:], start=9):
        with torch.no_grad():
            model.weight.fill_(epoch)
        resumed.update(epoch, auc, model)
    resumed.restore(model)
    assert resumed.best_epoch == int(model.weight.item()) == 13


@pytest.mark.parametrize("name, value", [("patience", -1), ("warmup", 1.5), ("warmup", True)])
def test_bad_arguments_are_refused(name, value):
    with pytest.raises(ParameterError, match=f"'{name}' parameter of EarlyStopping must be an int >= 0"):
        EarlyStopping(**{name: value})


def test_default_warmup():
    assert [default_warmup(e) for e in (1, 3, 20, 200, 1000)] == [0, 0, 5, 50, 50]


def _history(curve):
    return [{"epoch": e, "loss": 1.0, "val_auc": a} for e, a in enumerate(curve, start=1)]


def test_selection_note_says_when_training_did_not_beat_the_initialisation():
    curve = [0.92, 0.85, 0.86, 0.87, 0.88, 0.89]
    note = selection_note(_history(curve), best_epoch=6, warmup=2)
    assert "below the untrained model's 0.9200 at epoch 1" in note and "kept epoch 6" in note
    assert selection_note(_history(CURVE), best_epoch=13, warmup=4) is None  # a healthy run says nothing


def test_selection_note_says_when_the_kept_epoch_is_the_first_after_the_warmup():
    curve = [0.97, 0.90, 0.98, 0.94, 0.93, 0.92]  # the warm-up ends at its cap (epoch 3), not by recovery
    note = selection_note(_history(curve), best_epoch=3, warmup=2)
    recovered = [0.80] + [0.78] * 10 + [0.95, 0.94, 0.93]  # the warm-up ends at epoch 12, by recovery
    assert selection_note(_history(recovered), best_epoch=12, warmup=50) is None
    assert "kept epoch 3 is the first evaluated after the warm-up (2 epochs)" in note


def test_selection_note_says_when_no_epoch_passed_the_warmup():
    note = selection_note(_history([0.9, 0.8]), best_epoch=2, warmup=5)
    assert "no evaluation ended the warm-up (5 epochs)" in note
