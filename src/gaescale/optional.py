"""The optional dependencies: packages that only one command or flag needs, each installed by an extra of gaescale
(``pip install 'gaescale[tune]'``; ``gaescale[all]`` installs every one). Each is imported through :func:`require`,
never with a bare ``import``: a missing package is then a one-line :class:`MissingDependencyError` that says what
to install, not a traceback from deep inside a run (tests/test_optional.py checks both).

==============  ==============  ===========  ====================================================
module          package         extra        needed by
==============  ==============  ===========  ====================================================
optuna          optuna          tune         ``gaescale tune``
faiss           faiss-cpu       index        ``gaescale index``, ``topk --index``
pymetis         pymetis         cluster      ``--strategy cluster`` (Cluster-GCN's METIS parts)
matplotlib      matplotlib      report       the plots of the run report and of tune's report
tensorboard     tensorboard     tensorboard  ``--tensorboard DIR``
==============  ==============  ===========  ====================================================
"""
from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingDependencyError

# top-level module -> (the package on PyPI, the extra of gaescale that installs it)
OPTIONAL = {"optuna": ("optuna", "tune"), "faiss": ("faiss-cpu", "index"), "pymetis": ("pymetis", "cluster"),
            "matplotlib": ("matplotlib", "report"), "tensorboard": ("tensorboard", "tensorboard")}


def available(name: str) -> bool:
    """Whether the optional package ``name`` (a key of :data:`OPTIONAL`) is installed, without importing it."""
    import importlib.util
    return importlib.util.find_spec(name) is not None


def install_hint(name: str) -> str:
    """``pip install 'gaescale[EXTRA]'`` for the optional package ``name`` (a key of :data:`OPTIONAL`)."""
    return f"pip install 'gaescale[{OPTIONAL[name][1]}]'"


def require(name: str, what: str, instead: str = "", *, module: str | None = None) -> ModuleType:
    """Import and return ``module`` (default: ``name``), which needs the optional package ``name`` (a key of
    :data:`OPTIONAL`: ``module`` may be another package's module that imports it, as ``torch.utils.tensorboard``
    imports ``tensorboard``).

    Without ``name`` installed, raises :class:`MissingDependencyError` (an ``ImportError``) in one line:
    ``{what} needs the {package} package, which is not installed; pip install 'gaescale[{extra}]' ({instead}).``
    Another module missing, or ``name`` installed but failing to import, is not this case: that error propagates."""
    package, _ = OPTIONAL[name]
    try:
        return importlib.import_module(module or name)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != name:
            raise
        alternative = f" ({instead})" if instead else ""
        raise MissingDependencyError(f"{what} needs the {package} package, which is not installed; "
                                     f"{install_hint(name)}{alternative}.") from None
