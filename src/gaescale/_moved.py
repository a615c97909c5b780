"""The import paths of modules that moved into sub-packages (``gaescale.losses`` stayed; ``gaescale.pipeline`` is
now :mod:`gaescale.run.pipeline`): ``import gaescale.pipeline`` gives the very module object of its new place, so
that code and tests written against the old paths (imports, ``monkeypatch.setattr("gaescale.pipeline.fit", ...)``)
keep working. Nothing is imported until asked for. Names that moved out of a module that stayed
(``gaescale.run.rundir.Run`` is now :class:`gaescale.Run`) are found through that module's ``__getattr__``
(:func:`moved_names`), with a :class:`DeprecationWarning` naming the new place."""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED = {
    "io": "data.readers", "chunks": "data.chunks", "features": "data.features", "prepare": "data.prepare",
    "synthetic": "data.synthetic", "split": "data.split", "inputs": "data.inputs",
    "strategies": "training.strategies", "samplers": "training.samplers", "trainer": "training.trainer",
    "checkpoint": "training.checkpoint", "selection": "training.selection", "evaluate": "training.evaluate",
    "heldout": "training.heldout", "heuristics": "training.heuristics",
    "distributed": "parallel.runtime", "transfer": "parallel.transfer", "shards": "parallel.shards",
    "pipeline": "run.pipeline", "plan": "run.plan", "rundir": "run.rundir", "report": "run.report",
    "predict": "run.predict", "tune": "run.tune", "tune_report": "run.tune_report",
}

# the names that moved out of a module that stayed: {module: {name: its public place now}}
MOVED_NAMES = {
    "gaescale.run.rundir": {"Run": "gaescale.Run"},  # the reader is RunDir; Run adds the commands (run/finished.py)
    "gaescale.pyg": {"to_pyg": "gaescale.to_pyg"},  # in run/finished.py, where runs are read
}


def moved_names(module: str):
    """The ``__getattr__`` of ``module``: a name of :data:`MOVED_NAMES` from its new place, with a warning; any
    other missing name an AttributeError, as usual."""
    def __getattr__(name: str):
        target = MOVED_NAMES.get(module, {}).get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} moved: use {target}", DeprecationWarning, stacklevel=2)
        place, _, attr = target.rpartition(".")
        return getattr(importlib.import_module(place), attr)
    return __getattr__


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``gaescale.<old name>`` and loads it as the module at its new place."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.rpartition(".")
        if package == "gaescale" and name in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return importlib.import_module("gaescale." + MOVED[spec.name.rpartition(".")[2]])

    def exec_module(self, module) -> None:
        pass  # already executed at its new place


def install() -> None:
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.append(_Alias())
