"""``gaescale tune``: hyperparameter search on the validation split, with Optuna.

Each trial trains the default pipeline (:func:`gaescale.pipeline.train`) with one configuration drawn by the
TPE sampler and reports its validation AUC after every evaluated epoch; the median pruner stops a trial whose
validation AUC falls below the median of earlier trials at the same epoch, once the warm-up is over (before it,
the early peak of an untrained model would mislead it, :mod:`gaescale.selection`). A trial's value is the
validation AUC of the weights its run keeps. Every trial trains on the same split (``--seed``): the test edges
are held out of training as in ``gaescale train`` and are never scored (``train(..., test=False)``), nor are the
heuristics; ``gaescale train --config DIR/best.json`` then scores the chosen configuration on test once.

The search space (:data:`SEARCH_SPACE`; an option given on the command line is fixed, not searched):

- ``encoder``: linear (one-hop, no hidden layer) or gcn; ``hidden`` (gcn): 32, 64 or 128 (one hidden layer)
- ``dim``: 32, 64 or 128; ``lr``: log-uniform in [0.002, 0.05]
- ``decoder``: bias, inner or hadamard (with ``--dense sampled``, the default); ``loss``: bce or weighted-bce;
  ``self_loops``: on or off
- ``neg_ratio``: 1, 2 or 4 sampled pairs per training edge

DIR holds ``study.db`` (SQLite: an interrupted search resumes where it stopped, the trial that was running is
run again), ``best.json`` (the best configuration so far, the fixed options included), ``trials.csv`` and
``report.html`` with ``trials.png``. The search stops after ``trials`` finished trials in all (those of earlier
sessions count) or once ``time_budget`` seconds have passed in this session.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import TrainConfig
from ..errors import ParameterError, RunDirError
from ..outputs import atomic_write, check_out_dir, write_json

SEARCH_SPACE: dict[str, tuple] = {
    "encoder": ("linear", "gcn"),
    "hidden": (32, 64, 128),  # gcn only: one hidden layer of this width
    "dim": (32, 64, 128),
    "lr": (0.002, 0.05),  # log-uniform
    "decoder": ("bias", "inner", "hadamard"),  # hadamard only with the sampled dense term (the default), undirected
    "loss": ("bce", "weighted-bce"),
    "self_loops": (False, True),
    "neg_ratio": (1.0, 2.0, 4.0),
}
STUDY = "gaescale"


def suggest(trial, fixed: dict[str, Any]) -> dict[str, Any]:
    """The options of one trial: each of :data:`SEARCH_SPACE` not in ``fixed``, drawn from ``trial``."""
    out: dict[str, Any] = {}
    for name, choices in SEARCH_SPACE.items():
        if name in fixed or name == "hidden":
            continue
        if name == "lr":
            out[name] = trial.suggest_float(name, *choices, log=True)
        elif name == "decoder" and (fixed.get("dense", "sampled") != "sampled" or fixed.get("directed")):
            out[name] = trial.suggest_categorical(name, [c for c in choices if c != "hadamard"])
        else:
            out[name] = trial.suggest_categorical(name, list(choices))
    if fixed.get("encoder", out.get("encoder")) == "gcn" and "hidden" not in fixed:
        out["hidden"] = (trial.suggest_categorical("hidden", list(SEARCH_SPACE["hidden"])),)
    return out


def _fixed(config: TrainConfig, given: set[str]) -> dict[str, Any]:
    """The options every trial shares: those given (never searched) and the run settings a trial needs."""
    d = config.to_dict()
    fixed = {k: d[k] for k in given if k in d and k not in ("out", "resume", "tensorboard")}
    return {**fixed, "out": None, "report": False, "checkpoint_every": 0, "quiet": True, "resume": False}


def _open_study(out: Path, fixed: dict[str, Any], seed: int, warmup: int):
    """The study in ``out/study.db``: created, or resumed when it searched the same graph with the same fixed
    options. A trial that an interrupted search left failed (Ctrl-C) or running (a killed process; one search per
    DIR at a time) is queued again, once."""
    import optuna
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # an interrupted trial is reported by the CLI, in one line
    storage = optuna.storages.RDBStorage(f"sqlite:///{(out / 'study.db').resolve()}")
    key = json.dumps({k: v for k, v in fixed.items() if k != "quiet"}, sort_keys=True, default=str)
    try:
        study = optuna.load_study(study_name=STUDY, storage=storage)
    except KeyError:  # a new search
        study = None
    if study is not None and study.user_attrs.get("fixed") != key:
        raise RunDirError(f"{out / 'study.db'}: holds a search with other fixed options "
                          f"({study.user_attrs.get('fixed')}); use another --out, or the same options to resume it.")
    done = 0 if study is None else len(study.trials)
    sampler = optuna.samplers.TPESampler(seed=seed + done)  # a resumed search draws new startup trials
    pruner = optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=warmup)
    study = optuna.create_study(study_name=STUDY, storage=storage, direction="maximize", sampler=sampler,
                                pruner=pruner, load_if_exists=True)
    study.set_user_attr("fixed", key)
    state, retried = optuna.trial.TrialState, set(study.user_attrs.get("retried", []))
    for t in study.get_trials(deepcopy=False, states=(state.RUNNING, state.FAIL)):
        if t.state == state.RUNNING:
            study_id = storage.get_study_id_from_name(STUDY)
            storage.set_trial_state_values(storage.get_trial_id_from_study_id_trial_number(study_id, t.number),
                                           state.FAIL)
        if t.number not in retried:
            study.enqueue_trial(t.params)
            retried.add(t.number)
    study.set_user_attr("retried", sorted(retried))
    return study


def tune(config: TrainConfig | None = None, *, data=None, trials: int = 20, time_budget: float | None = None,
         given: set[str] | None = None, log: Callable[[str], None] | None = None, **options) -> dict[str, Any]:
    """Search the configuration of ``gaescale train`` on ``config.edges`` (or ``data``, an :class:`EdgeList`) by
    validation AUC; writes ``config.out`` (see the module's docstring). ``given``: the options the user set,
    which stay fixed (default: ``options``). Returns ``{"best_value", "best_config", "trials"}``."""
    import optuna

    from ..data.inputs import load_edges

    config = TrainConfig(**options) if config is None else config
    given = set(options) if given is None else set(given)
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ParameterError("trials", "tune", "an int >= 1", trials)
    if time_budget is not None and (isinstance(time_budget, bool) or not float(time_budget) > 0):
        raise ParameterError("time_budget", "tune", "None or a number > 0 (seconds)", time_budget)
    if config.out is None:
        raise ParameterError("out", "tune", "the directory of the search (study.db, best.json, report)", None)
    out = check_out_dir(config.out)
    out.mkdir(parents=True, exist_ok=True)
    log = log or (lambda m: None)
    data = load_edges(config) if data is None else data
    fixed = _fixed(config, given | {"edges", "features", "ids", "header", "seed", "epochs", "val_fraction",
                                    "test_fraction"})
    study = _open_study(out, fixed, config.seed, config.warmup_epochs)
    finished = [t for t in study.trials if t.state.is_finished() and t.state != optuna.trial.TrialState.FAIL]
    left = trials - len(finished)
    if finished:
        log(f"resuming the search in {out}/study.db: {len(finished)} trials done, {max(left, 0)} to go")
    if left > 0:
        _optimize(study, data, fixed, left, time_budget, log, show=not config.quiet)
    return _write_outputs(study, out, fixed, log)


def _objective(data, fixed: dict[str, Any]):
    import optuna

    from .pipeline import train

    def objective(trial) -> float:
        params = suggest(trial, fixed)

        def report(rec: dict) -> None:
            if rec.get("val_auc") is not None:
                trial.report(rec["val_auc"], rec["epoch"])
                if trial.should_prune():
                    raise optuna.TrialPruned(f"validation AUC {rec['val_auc']:.4f} at epoch {rec['epoch']}")

        t = time.perf_counter()
        result = train(TrainConfig(**{**fixed, **params}), data=data, test=False, on_epoch=report)
        trial.set_user_attr("seconds", time.perf_counter() - t)
        trial.set_user_attr("best_epoch", result.metrics["best_epoch"])
        if result.metrics["val_auc"] is None:
            raise ParameterError("val_fraction", "tune", "> 0 (the search is judged on the validation split)",
                                 fixed.get("val_fraction"))
        return float(result.metrics["val_auc"])
    return objective


def _optimize(study, data, fixed: dict[str, Any], n: int, time_budget, log, show: bool) -> None:
    from tqdm.auto import tqdm
    bar = tqdm(total=n, desc="trials", unit="trial", disable=not show, dynamic_ncols=True)

    def after(study, trial) -> None:
        bar.update(1)
        value = "pruned" if trial.value is None else f"val AUC {trial.value:.4f}"
        try:
            bar.set_postfix(best=f"{study.best_value:.4f}")
        except ValueError:  # no trial completed yet
            pass
        (bar.write if show else log)(f"trial {trial.number}: {value}  {json.dumps(trial.params)}")

    try:
        study.optimize(_objective(data, fixed), n_trials=n, timeout=time_budget, callbacks=[after],
                       catch=())
    finally:
        bar.close()


def best_config(study, fixed: dict[str, Any]) -> dict[str, Any]:
    """The best trial's configuration as ``gaescale train --config`` reads it: its options and the fixed ones,
    without the input files and the run settings of a trial."""
    params = dict(study.best_trial.params)
    if "hidden" in params:
        params["hidden"] = [params["hidden"]]
    skip = {"edges", "features", "out", "report", "checkpoint_every", "quiet", "resume"}
    cfg = {k: v for k, v in {**fixed, **params}.items() if k not in skip}
    TrainConfig.from_dict(cfg)  # what train --config will build: refused here, not there
    return cfg


def _write_outputs(study, out: Path, fixed: dict[str, Any], log) -> dict[str, Any]:
    from .tune_report import trials_table, write_tune_report
    table = trials_table(study)
    done = [t for t in study.trials if t.value is not None]
    result: dict[str, Any] = {"best_value": None, "best_config": None, "trials": table}
    if done:
        result["best_value"], result["best_config"] = float(study.best_value), best_config(study, fixed)
        write_json(out / "best.json", result["best_config"])
        log(f"best: trial {study.best_trial.number}, val AUC {study.best_value:.4f}; "
            f"train it with: gaescale train EDGES --config {out}/best.json --out RUN")
    atomic_write(out / "trials.csv", lambda fh: fh.write(_csv(table).encode()))
    write_tune_report(out, table, result["best_value"])
    return result


def _csv(table: list[dict[str, Any]]) -> str:
    cols = ["number", "state", "val_auc", "best_epoch", "seconds", "params"]
    rows = [",".join(cols)]
    for r in table:
        rows.append(",".join(_cell(r.get(c)) for c in cols))
    return "\n".join(rows) + "\n"


def _cell(v) -> str:
    if isinstance(v, dict):
        return '"' + json.dumps(v, sort_keys=True).replace('"', '""') + '"'
    return "" if v is None else (f"{v:.6g}" if isinstance(v, float) else str(v))


