"""Node ids as read: integer or string columns mapped to contiguous indices ``0..N-1``, with the original ids kept
(:class:`gaescale.data.edgelist.EdgeList`). ``ids`` is ``auto`` (integers where most ids are), ``int`` or ``str``;
an integer beyond int64 is read as a string (auto) or named as an error (int), never wrapped around."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ..errors import InputFileError
from .edgelist import EdgeList

INT_PATTERN = re.compile(r"^[+-]?\d+$")
INT64_MAX = int(np.iinfo(np.int64).max)

class BeyondInt64(Exception):
    """An integer id that does not fit in int64, met with ``ids='auto'``: the caller reads the ids again as
    strings (as with ``ids='str'``), never as wrapped-around integers."""


WIDE = ("expected an integer node id within 64 bits (-9223372036854775808 to 9223372036854775807). Got {!r}; pass "
        "ids='str' / --ids str to read the ids as strings")


def too_wide(p: Path, text, ids: str, name: str, line: int | None) -> None:
    """Raise for the integer id ``text`` beyond int64: :class:`BeyondInt64` with ``ids='auto'``, else the error."""
    if ids == "auto":
        raise BeyondInt64(text)
    raise InputFileError(p, WIDE.format(str(text)) + ".", line=line, field=name)


def map_ids(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Contiguous indices for integer ids in ``src`` and ``dst`` (sorted): ``(edge_index (2, E), node_ids (N,))``."""
    uniq, inv = np.unique(np.concatenate([src, dst]), return_inverse=True)
    return inv.reshape(2, -1).astype(np.int64), uniq


def strip_ids(s: np.ndarray) -> np.ndarray:
    """Text ids (an object array of ``str``, or of anything ``str`` names) without surrounding whitespace: ``' a '``
    and ``'a'`` are one node."""
    import pyarrow as pa
    import pyarrow.compute as pc
    try:
        a = pa.array(s, pa.large_string())
    except (pa.ArrowTypeError, pa.ArrowInvalid):  # not all str (pandas' Python ints beyond 64 bits)
        a = pa.array([str(v) for v in s], pa.large_string())
    return np.asarray(pc.utf8_trim_whitespace(a).to_numpy(zero_copy_only=False), dtype=object)


def encode_strings(p: Path, arrs: list, names=("source", "target"), line_of=None) -> EdgeList:
    """String ids (two Arrow arrays) to indices by Arrow's dictionary encoding, in order of first
    appearance: sources, then targets. Surrounding whitespace is not part of an id; nodes.tsv holds one id
    per line, so tabs and line breaks within an id are refused, and so is an id of only whitespace."""
    import pyarrow as pa
    import pyarrow.compute as pc
    arrs = [pc.utf8_trim_whitespace(a.cast(pa.large_string())) for a in arrs]
    for a, name in zip(arrs, names):
        empty = pc.equal(a, "")
        if pc.any(empty).as_py():
            i = int(np.argmax(empty.to_numpy(zero_copy_only=False)))
            raise InputFileError(p, "missing node id (only whitespace).", line=line_of(i) if line_of else None,
                                 field=name)
    enc = pa.concat_arrays(arrs).dictionary_encode()
    bad = pc.match_substring_regex(enc.dictionary, r"[\t\n\r]")
    if pc.any(bad).as_py():
        i = int(np.argmax(bad.to_numpy(zero_copy_only=False)))
        raise InputFileError(p, f"node id {enc.dictionary[i].as_py()!r} contains a tab or line break; "
                                "ids must be single-line text.")
    inv = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    node_ids = np.asarray(enc.dictionary.to_numpy(zero_copy_only=False), dtype=object)
    return EdgeList(inv.reshape(2, -1), len(node_ids), node_ids, source=str(p))


def as_ids(p: Path, col: np.ndarray, ids: str, name: str, line_of=None, hint: str | None = None) -> np.ndarray:
    """Coerce a parsed id column to int64 or str objects, following ``ids`` (auto/int/str). An integer beyond int64
    raises :class:`BeyondInt64` (auto) or the error (int); ``hint``: what to say after a non-integer id among
    integers (default: pass ids='str')."""

    def line(i):
        return line_of(i) if line_of else None
    if col.dtype.kind in "iu":
        if ids == "str":
            return col.astype(str).astype(object)
        if col.dtype.kind == "u" and col.size and int(col.max()) > INT64_MAX:
            i = int(np.argmax(col > INT64_MAX))
            too_wide(p, str(col[i]), ids, name, line(i))
        return col.astype(np.int64)
    if col.dtype.kind == "f":
        bad = ~np.isfinite(col) | (col != np.round(col)) | (np.abs(col) >= 2.0 ** 63)
        if bad.any():
            i = int(np.argmax(bad))
            raise InputFileError(p, f"node id {col[i].item()!r} is not an integer or a string id.",
                                 line=line(i), field=name)
        return col.astype(np.int64) if ids != "str" else col.astype(np.int64).astype(str).astype(object)
    s = strip_ids(np.asarray(col, dtype=object))  # parsed text (str objects), or pandas' Python ints beyond 64 bits
    if ids == "str":
        return s
    if ids == "int" or mostly_integers(s):
        if hint is None:
            hint = "" if ids == "int" else " (most ids are integers; pass ids='str' / --ids str to read all as strings)"
        return integer_ids(p, s, name, line_of, hint, ids=ids)
    return s


def mostly_integers(values: np.ndarray, head: int = 100_000) -> bool:
    """Whether most of the first ``head`` ``values`` (text) are integers: how ``ids='auto'`` decides."""
    first = values[:head]
    return bool(len(first)) and float(np.mean([bool(INT_PATTERN.match(str(v))) for v in first])) > 0.5


def integer_ids(p: Path, s: np.ndarray, name: str, line_of=None, hint: str = "", ids: str = "int") -> np.ndarray:
    """Text ids ``s`` that must all be integers, as int64; else an error naming the first that is not. One beyond
    int64 raises :class:`BeyondInt64` with ``ids='auto'``, else the error naming it."""
    full = np.fromiter((bool(INT_PATTERN.match(str(v))) for v in s), bool, len(s))
    if not full.all():
        i = int(np.argmin(full))
        raise InputFileError(p, f"expected an integer node id. Got {s[i]!r}{hint}.",
                             line=line_of(i) if line_of else None, field=name)
    try:
        return s.astype(np.int64)
    except OverflowError:
        i = next(k for k, v in enumerate(s) if not -INT64_MAX - 1 <= int(v) <= INT64_MAX)
        too_wide(p, s[i], ids, name, line_of(i) if line_of else None)


def index_ids(p: Path, cols: list[np.ndarray], names=("source", "target"), line_of=None) -> EdgeList:
    """Index an edge list whose id columns are int64 or str-object arrays (mixed columns become strings)."""
    if cols[0].dtype.kind in "iu" and cols[1].dtype.kind in "iu":
        ei, node_ids = map_ids(cols[0], cols[1])
        return EdgeList(ei, len(node_ids), node_ids, source=str(p))
    import pyarrow as pa
    return encode_strings(p, [pa.array(c.astype(str)) for c in cols], names, line_of)


def wide_ints(column) -> bool:
    """Whether pandas parsed a text id column as Python ints (an object column: integers beyond 64 bits)."""
    import pandas as pd
    return column.dtype == object and pd.api.types.infer_dtype(column, skipna=True) in ("integer", "mixed-integer")


def text_ids(p: Path, arrs: list, ids: str, names, line_of) -> EdgeList:
    """Both id columns as Arrow strings (surrounding whitespace dropped): integer ids when they all look like
    integers (``ids`` auto/int), else string ids (:func:`encode_strings`). An integer beyond int64 raises
    :class:`BeyondInt64` (auto) or the error naming it (int)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    # pandas hands long columns over as several chunks
    arrs = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrs]
    arrs = [pc.utf8_trim_whitespace(a.cast(pa.large_string())) for a in arrs]
    if ids != "str":
        is_int = [pc.match_substring_regex(a, r"^[+-]?\d+$") for a in arrs]
        share = sum(pc.sum(m).as_py() or 0 for m in is_int) / (2 * len(arrs[0]))
        if ids == "int" or share > 0.5:
            for col, m, name in zip(arrs, is_int, names):
                if not pc.all(m).as_py():
                    i = int(np.argmin(m.to_numpy(zero_copy_only=False)))
                    hint = ("" if ids == "int"
                            else " (most ids are integers; pass ids='str' / --ids str to read all as strings)")
                    raise InputFileError(p, f"expected an integer node id. Got {col[i].as_py()!r}{hint}.",
                                         line=line_of(i), field=name)
            try:
                cols = [pc.cast(a, pa.int64()).to_numpy() for a in arrs]
            except pa.ArrowInvalid:  # beyond int64, or a '+' sign Arrow does not parse: NumPy converts, or says which
                cols = [integer_ids(p, np.asarray(a.to_numpy(zero_copy_only=False), dtype=object), name, line_of,
                                    ids=ids) for a, name in zip(arrs, names)]
            return index_ids(p, cols)
    return encode_strings(p, arrs, names, line_of)
