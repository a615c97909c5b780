"""Edge weights of an edge list (``--weighted``): the third column of a text or Parquet table (or the one
``--weight-column`` names), the ``edge_weight`` array of an ``.npz``.

A weight must be a finite number >= 0; anything else is refused with the file, line (text) or row (Parquet)
and field of the first bad one. A zero weight is kept here and dropped with its edge when the graph is built
(:func:`gaescale.graph.canonical_edges`): a weight of 0 is no edge.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import InputFileError
from ..rules import refuse_weight_column

EXPECTED = "expected an edge weight: a finite number >= 0"


def first_bad(w: np.ndarray) -> int | None:
    """The index of the first weight of ``w: (E,)`` float64 that is NaN (missing or not a number), infinite or
    negative; None when all are good."""
    bad = ~np.isfinite(w) | (w < 0)
    return int(np.argmax(bad)) if bad.any() else None


def text_weights(p: Path, column, field: str, line_of, token_of) -> np.ndarray:
    """A text edge list's weight ``column: (E,)`` (as pandas parsed it) as float32 weights, or the error naming
    the first bad one by its line (``line_of(i)``) and its text there (``token_of(line) -> str or None``, None
    where the line has no such column)."""
    import pandas as pd
    w = pd.to_numeric(pd.Series(column), errors="coerce").to_numpy(np.float64)
    i = first_bad(w)
    if i is not None:
        line = line_of(i)
        token = token_of(line)
        message = "missing edge weight." if token is None else f"{EXPECTED}. Got {token!r}."
        raise InputFileError(p, message, line=line, field=field)
    return w.astype(np.float32)


def text_column(p: Path, first: list[str], has_header: bool, weight_column: str | None, line: int) -> int:
    """The position of the weight column of a text edge list whose first data line (number ``line``) splits into
    ``first``: the one named ``weight_column`` in its header, else the third."""
    if weight_column is None:
        if len(first) < 3:
            raise InputFileError(p, "missing edge weight (--weighted reads the third column).", line=line,
                                 field=first[2] if has_header and len(first) > 2 else "weight")
        return 2
    if not has_header:
        raise InputFileError(p, f"has no header line, so no column is named {weight_column!r} (--weight-column); "
                                "add a header, or leave --weight-column out to read the third column.")
    if weight_column not in first:
        raise InputFileError(p, f"no column named {weight_column!r} (--weight-column). Got columns {first}.",
                             line=line)
    position = first.index(weight_column)
    if position < 2:
        raise InputFileError(p, f"column {weight_column!r} (--weight-column) is the {('source', 'target')[position]} "
                                "column; name a column after the first two.", line=line)
    return position


def parquet_weights(p: Path, table, weight_column: str | None) -> np.ndarray:
    """The weight column of a Parquet ``table`` (named, or the third) as float32 weights; a bad one is named
    by its row, counted from 0."""
    import pandas as pd
    import pyarrow as pa
    names = table.column_names
    if weight_column is None and len(names) < 3:
        raise InputFileError(p, f"expected a third column of edge weights (--weighted). Got {len(names)} columns: "
                                f"{names}.")
    if weight_column is not None and weight_column not in names:
        raise InputFileError(p, f"no column named {weight_column!r} (--weight-column). Got columns {names}.")
    name = weight_column or names[2]
    column = table.column(name).combine_chunks()
    if pa.types.is_integer(column.type) or pa.types.is_floating(column.type):
        w = column.cast(pa.float64()).fill_null(float("nan")).to_numpy(zero_copy_only=False)
    else:
        w = pd.to_numeric(pd.Series(column.to_pylist(), dtype=object), errors="coerce").to_numpy(np.float64)
    i = first_bad(w)
    if i is not None:
        value = column[i].as_py()
        message = f"missing edge weight in row {i}." if value is None else f"{EXPECTED}. Got {value!r} in row {i}."
        raise InputFileError(p, message, field=name)
    return w.astype(np.float32)


def npz_weights(p: Path, arrays: dict, num_edges: int) -> np.ndarray:
    """The ``edge_weight`` array of an ``.npz`` archive, one weight per column of its ``edge_index``."""
    if "edge_weight" not in arrays:
        raise InputFileError(p, f"expected an array named 'edge_weight' (--weighted). Got arrays {sorted(arrays)}.")
    w = arrays["edge_weight"]
    if w.ndim == 2 and 1 in w.shape:
        w = w.reshape(-1)
    if w.ndim != 1 or w.size != num_edges or w.dtype.kind not in "iuf":
        raise InputFileError(p, f"expected {num_edges} numbers, one per edge of 'edge_index'. Got shape {w.shape}, "
                                f"dtype {w.dtype}.", field="edge_weight")
    w = w.astype(np.float64)
    i = first_bad(w)
    if i is not None:
        raise InputFileError(p, f"{EXPECTED}. Got {w[i].item()!r} (edge {i}).", field="edge_weight")
    return w.astype(np.float32)


def refuse_unsupported(config, *, prepared: bool, world_size: int) -> None:
    """Refuse ``--weighted`` (or ``--weight-column`` without it) where the weights cannot go yet: a prepared
    graph (``gaescale prepare`` keeps no weights) and, under torchrun, the strategies that partition the graph
    (which the ranks read from a prepared copy of the edge list)."""
    from ..errors import ParameterError
    refuse_weight_column(config)
    if not config.weighted:
        return
    if prepared:
        raise ParameterError("weighted", "train", "False for a prepared graph ('gaescale prepare' keeps no edge "
                                                  "weights yet; train from the edge list itself)", True)
    if world_size > 1 and config.strategy not in ("full", "fastgae"):
        raise ParameterError("strategy", "train", f"'full' or 'fastgae' for a weighted graph under torchrun "
                                                  f"({world_size} processes: the other strategies read a prepared "
                                                  "copy of the edge list, which keeps no edge weights yet)",
                             config.strategy)

