"""Named exceptions. Every message is one line that says what was expected and what was got.

Messages follow one form, borrowed from scikit-learn:
``The 'lr' parameter of train must be a float > 0. Got -1.0 instead.``
and for files: ``edges.csv, line 7: expected 2 columns (source, target). Got 1: '42'.``
"""
from __future__ import annotations


class GaescaleError(Exception):
    """Base class of every error gaescale raises on purpose; the CLI prints it as one line."""


class InputFileError(GaescaleError):
    """An input file is missing, unreadable, or holds something that is not a valid graph or feature table."""

    def __init__(self, path, message: str, line: int | None = None, field: str | None = None):
        where = str(path)
        if line is not None:
            where += f", line {line}"
        if field is not None:
            where += f", field '{field}'"
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.field = str(path), line, field


class GraphError(GaescaleError):
    """The graph is valid as a file but unusable for training (no edges, nothing to train on)."""


class ParameterError(GaescaleError, ValueError):
    """A parameter of a function, config or command has an invalid value."""

    def __init__(self, name: str, owner: str, expected: str, got):
        super().__init__(f"The '{name}' parameter of {owner} must be {expected}. Got {_short(got)} instead.")
        self.name, self.owner, self.expected, self.got = name, owner, expected, got

    def of(self, owner: str) -> ParameterError:
        """The same error, said of ``owner`` (``tune`` builds ``train``'s configuration)."""
        return ParameterError(self.name, owner, self.expected, self.got)


class Got:
    """What :class:`ParameterError` shows after "Got": a description (``Got("shape (3, 2)")``), without the quotes of
    a string's repr."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _short(got, limit: int = 120) -> str:
    """``repr(got)``, or for a long one (a list of 10,000 features) its type and size: a message stays one line."""
    text = repr(got)
    if len(text) <= limit and "\n" not in text:
        return text
    size = f" of {len(got):,} items" if hasattr(got, "__len__") else ""
    shape = getattr(got, "shape", None)
    return f"a {type(got).__name__}" + (f" of shape {tuple(shape)}" if shape is not None else size)


class OutputError(GaescaleError):
    """The output location cannot be used (an existing file, not writable)."""


class NonFiniteLossError(GaescaleError):
    """Training produced a NaN or infinite loss."""


class RunDirError(GaescaleError):
    """A run directory (the ``--out`` of ``gaescale train``) is missing, incomplete or inconsistent."""


class CheckpointError(GaescaleError):
    """A checkpoint is missing, unreadable, or belongs to a different configuration or graph."""


class DistributedError(GaescaleError):
    """A process group could not be formed, or a peer process failed or stopped answering."""


class MissingDependencyError(GaescaleError, ImportError):
    """An optional package that a flag needs is not installed; the message says what to install."""
