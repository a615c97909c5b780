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

Before DIR or study.db is created, the configuration of every trial the search could draw is built (not
trained) with the fixed options, so that a given option which a searched value contradicts (``--hidden`` with
the linear encoder) is refused at once, naming the searched option (:func:`check_search`); so is a graph too small
to hold out a validation edge (:func:`check_validation_split`). A new search whose trials all failed (an error,
not Ctrl-C) leaves no study.db behind: the next attempt, with other options, starts afresh.
"""
from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..config import TrainConfig
from ..errors import GraphError, ParameterError, RunDirError
from ..optional import require
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
    optuna = require("optuna", "tune")
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
    from ..data.inputs import load_edges

    optuna = require("optuna", "tune")
    require("matplotlib", "tune's report")  # its plot, written at the end: checked before the search

    config = TrainConfig(**options) if config is None else config
    given = set(options) if given is None else set(given)
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ParameterError("trials", "tune", "an int >= 1", trials)
    if time_budget is not None and (isinstance(time_budget, bool) or not float(time_budget) > 0):
        raise ParameterError("time_budget", "tune", "None or a number > 0 (seconds)", time_budget)
    if config.out is None:
        raise ParameterError("out", "tune", "the directory of the search (study.db, best.json, report)", None)
    out = check_out_dir(config.out)
    log = log or (lambda m: None)
    fixed = _fixed(config, given | {"edges", "features", "ids", "header", "seed", "epochs", "val_fraction",
                                    "test_fraction"})
    check_search(fixed, given)  # before anything is read, created or trained
    if not config.val_fraction > 0:
        raise ParameterError("val_fraction", "tune", "> 0 (the search is judged on the validation split)",
                             config.val_fraction)
    data = load_edges(config) if data is None else data
    check_validation_split(data, config)
    new, made = not (out / "study.db").exists(), not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    study = _open_study(out, fixed, config.seed, config.warmup_epochs)
    finished = [t for t in study.trials if t.state.is_finished() and t.state != optuna.trial.TrialState.FAIL]
    left = trials - len(finished)
    if finished:
        log(f"resuming the search in {out}/study.db: {len(finished)} trials done, {max(left, 0)} to go")
    if left > 0:
        try:
            _optimize(study, data, fixed, left, time_budget, log, show=not config.quiet)
        except Exception:  # not KeyboardInterrupt: an interrupted search resumes from study.db
            if new and not any(t.state.is_finished() and t.state != optuna.trial.TrialState.FAIL
                               for t in study.get_trials(deepcopy=False)):
                _discard(study, out, made)  # nothing worth resuming: the next attempt starts afresh
            raise
    return _write_outputs(study, out, fixed, log)


def _discard(study, out: Path, made: bool) -> None:
    """Remove the study.db that this session created and no trial finished in (its first trials failed), and
    ``out`` itself when this session created it and it is left empty: a failed first attempt, e.g. with
    options that a trial's configuration refuses, does not block the next one with other options."""
    storage = getattr(study, "_storage", None)
    engine = getattr(getattr(storage, "_backend", storage), "engine", None)
    if engine is not None:
        engine.dispose()
    for name in ("study.db", "study.db-journal", "study.db-wal", "study.db-shm"):
        (out / name).unlink(missing_ok=True)
    if made:
        try:
            out.rmdir()
        except OSError:  # not empty: something else was written there meanwhile
            pass


class _Pick:
    """A stand-in for an Optuna trial that returns the values ``picks`` names (the first of each choice, and the
    low end of a float, by default) and records the draws :func:`suggest` asks for."""

    def __init__(self, picks: dict[str, int]):
        self.picks, self.asked = picks, []

    def suggest_categorical(self, name, choices):
        self.asked.append((name, len(choices)))
        return choices[self.picks.get(name, 0)]

    def suggest_float(self, name, low, high, log=False):
        self.asked.append((name, 2))
        return (low, high)[self.picks.get(name, 0)]


def search_points(fixed: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every combination of values :func:`suggest` can draw with ``fixed`` (a float option at both ends of its
    range): the options of each trial the search could train."""
    def walk(picks: dict[str, int]):
        trial = _Pick(picks)
        params = suggest(trial, fixed)
        name, n = next(((a, n) for a, n in trial.asked if a not in picks), (None, 0))
        if name is None:
            yield params
            return
        for i in range(n):
            yield from walk({**picks, name: i})
    yield from walk({})


def _refusal(options: dict[str, Any]) -> ParameterError | None:
    try:
        TrainConfig(**options)
    except ParameterError as exc:
        return exc
    return None


def check_search(fixed: dict[str, Any], given: set[str]) -> None:
    """Refuse, before study.db is created or anything trained, a fixed option (one given) that a value the
    search may draw contradicts: the configuration of every trial the search could train is built (not trained),
    and the first one refused names the searched option and how to fix the clash."""
    points = list(search_points(fixed))
    results = [_refusal({**fixed, **p}) for p in points]
    bad = next((i for i, r in enumerate(results) if r is not None), None)
    if bad is None:
        return
    params, exc = points[bad], results[bad]
    searched, good = _searched_culprit(params, points, results)
    user = {k for k in given if k in fixed and k not in ("edges", "out", "quiet", "report", "resume")}
    flag = exc.name if exc.name in user else next(
        (k for k in sorted(user) if _refusal({**{k2: v for k2, v in fixed.items() if k2 != k}, **params}) is None),
        exc.name)
    reason = _reason(exc)
    if searched is None:
        tried = ", ".join(f"{k}={v!r}" for k, v in params.items())
        raise ParameterError(flag, "tune", f"one that every searched value allows: the search tries {tried}, with "
                                           f"which train says {reason}; fix the searched options it depends on too, "
                                           f"or change or drop {_flag(flag)}", _shown(fixed.get(flag)))
    raise ParameterError(flag, "tune", f"one that every searched value allows: the search tries "
                                       f"{searched}={_shown(params[searched])!r}, with which train says {reason}; "
                                       f"fix {searched} too ({_cli(searched, good)}) or drop {_flag(flag)}",
                         _shown(fixed.get(flag)))


def _searched_culprit(params: dict[str, Any], points: list[dict], results: list) -> tuple[str | None, Any]:
    """The searched option whose other value (returned too) makes the refused ``params`` acceptable: a point of
    the search that differs from ``params`` in that option alone (and in ``hidden``, which the encoder decides)."""
    for name in params:
        if name == "hidden":
            continue
        same = [k for k in params if k not in (name, "hidden")] if name == "encoder" else \
            [k for k in params if k != name]
        for p, r in zip(points, results):
            if r is None and p.get(name) != params[name] and all(p.get(k) == params[k] for k in same):
                return name, p[name]
    if "hidden" in params:
        for p, r in zip(points, results):
            if r is None and all(p.get(k) == params[k] for k in params if k != "hidden"):
                return "hidden", p["hidden"]
    return None, None


def _reason(exc: ParameterError) -> str:
    """``NAME must be ...`` of a :class:`ParameterError`'s message."""
    m = re.match(r"The '(.+?)' parameter of \S+ must be (.*)\. Got .* instead\.$", str(exc))
    return f"{m.group(1)} must be {m.group(2)}" if m else str(exc)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _shown(value):
    """A value as the command line writes it: a tuple or list as ``a,b``."""
    return ",".join(map(str, value)) if isinstance(value, (tuple, list)) else value


def _cli(name: str, value) -> str:
    if value is True:
        return _flag(name)
    if value is False:
        return f"{name}=False"
    return f"{_flag(name)} {_shown(value)}"


def check_validation_split(data, config: TrainConfig) -> None:
    """Refuse, before study.db is created, a graph too small to hold out a validation edge at
    ``config.val_fraction``: every trial is judged on the validation split (the split rounds its share down)."""
    w = data.edge_weight if config.weighted else None
    if config.directed:
        from ..directed.graph import DiGraph
        graph = DiGraph.from_edge_index(data.edge_index, data.num_nodes, edge_weight=w)
    else:
        from ..graph import Graph
        graph = Graph.from_edge_index(data.edge_index, data.num_nodes, edge_weight=w)
    source = data.source or "the graph"
    graph.require_edges(source)
    e, vf, tf = graph.num_edges, config.val_fraction, config.test_fraction
    if int(e * vf) >= 1:
        return
    need = max(1, int(1 / vf))
    while int(need * vf) < 1:
        need += 1
    kind = "directed edges" if config.directed else "edges"
    raise_to = next((f for f in (round(k / 100, 2) for k in range(1, 100)) if int(e * f) >= 1), None)
    fits = raise_to is not None and raise_to + tf < 1 and e - int(e * raise_to) - int(e * tf) >= 1
    alt = f" (or --val-fraction {raise_to:g})" if fits else ""
    raise GraphError(f"{source}: too small for tune's validation split: {e:,} {kind}, of which --val-fraction "
                     f"{vf:g} holds out {int(e * vf)}, and tune judges every trial on validation edges; it needs "
                     f"at least {need:,} {kind}{alt}.")


def _objective(data, fixed: dict[str, Any]):
    from .pipeline import train

    optuna = require("optuna", "tune")

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
        if result.metrics["val_auc"] is None:  # check_validation_split refuses this before any trial
            raise GraphError(f"{data.source or 'the graph'}: trial {trial.number} has no validation AUC (an empty "
                             f"validation split at --val-fraction {fixed.get('val_fraction'):g}); tune judges every "
                             "trial on validation edges.")
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


