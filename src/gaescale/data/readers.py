"""Reading edge lists: text (CSV/TSV/whitespace, optional header, '#' comments, .gz), .npy, .npz, Parquet.

Parsing is vectorised (pandas' C parser, pyarrow); a slow line-by-line scan runs only after a
failure, to name the first bad line. Node ids may be integers or strings; they are mapped to
contiguous indices ``0..N-1`` and the original ids kept in :class:`EdgeList.node_ids`.
"""
from __future__ import annotations

import gzip
import math
import stat
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ..errors import InputFileError
from . import weights
from .edgelist import EdgeList
from .ids import INT64_MAX, INT_PATTERN, BeyondInt64, as_ids, index_ids, text_ids, wide_ints

HEADER_WORDS = {"src", "dst", "source", "target", "from", "to", "node1", "node2", "head", "tail", "id1", "id2",
                "source_id", "target_id", "src_id", "dst_id", "node", "neighbor", "neighbour", "u", "v"}
# The largest node count: the pair keys u * N + v that deduplicate edges (graph.canonical_edges, prepare) fit in int64.
MAX_NODES = math.isqrt(INT64_MAX)
# An .npy/.npz edge list whose largest index makes more than SPARSE_NODES nodes and more than SPARSE_RATIO nodes per
# edge (most of them without an edge) holds ids, not indices 0..N-1: refused (check_node_count) rather than
# allocating O(N) for nodes that do not exist.
SPARSE_NODES, SPARSE_RATIO = 1 << 24, 32


def check_file(path) -> Path:
    """``path`` as a Path, or the error that says why it cannot be read as an input file: missing, a directory, a
    pipe (read only once, and gaescale reads its inputs more than once), empty, or a ``.gz`` that is not gzip."""
    p = Path(path)
    if not p.exists():
        raise InputFileError(p, "no such file.")
    if p.is_dir():
        raise InputFileError(p, "is a directory, expected a file.")
    st = p.stat()
    if stat.S_ISFIFO(st.st_mode):
        raise InputFileError(p, "is a pipe (e.g. <(...) or a named pipe), which can be read only once, and gaescale "
                                "reads an input file more than once: write it to a file first.")
    if st.st_size == 0:
        raise InputFileError(p, "the file is empty.")
    if _is_gz(p):
        with open(p, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b":
                raise InputFileError(p, "not a valid gzip file (its name ends in .gz but it is not gzip-compressed); "
                                        "rename it without .gz if it is plain text.")
    return p


def _is_gz(p: Path) -> bool:
    return p.name.lower().endswith(".gz")


@contextmanager
def gzip_errors(p: Path) -> Iterator[None]:
    """Reading ``p``: a ``.gz`` file found truncated or corrupt while it is decompressed (by pandas or
    :func:`_open_text`) is an :class:`InputFileError`, not a traceback."""
    try:
        yield
    except EOFError:
        if not _is_gz(p):
            raise
        raise InputFileError(p, "truncated gzip file: the compressed data ends before the end of its stream (an "
                                "interrupted download or copy?); compress or fetch it again.") from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        if not _is_gz(p):
            raise
        raise InputFileError(p, f"not a valid gzip file ({exc}); compress or fetch it again.") from None


def suffix_of(p: Path) -> str:
    s = p.name.lower()
    return s[:-3].rsplit(".", 1)[-1] if s.endswith(".gz") else s.rsplit(".", 1)[-1]


def read_edges(path, *, ids: str = "auto", header: str = "auto", weighted: bool = False,
               weight_column: str | None = None) -> EdgeList:
    """Read an edge list; the format follows the file's extension (text for anything unrecognised).
    ``weighted``: read each edge's weight too (:mod:`gaescale.data.weights`) into ``edge_weight``: the third
    column of a text or Parquet table (or the one named ``weight_column``), an ``.npz``'s ``edge_weight``."""
    p = check_file(path)
    ext = suffix_of(p)
    if weight_column is not None and ext in ("npy", "npz"):
        raise InputFileError(p, f"a .{ext} edge list has no named columns (--weight-column {weight_column}); an .npz "
                                "holds its weights in the array 'edge_weight'.")
    if ext == "npy":
        if weighted:
            raise InputFileError(p, "a .npy edge list holds no edge weights (--weighted); use an .npz with "
                                    "'edge_index' and 'edge_weight', or a text or Parquet table with a weight column.")
        return _from_index_array(p, _load_npy(p), None)
    if ext == "npz":
        return read_npz(p, weighted)
    if ext in ("parquet", "pq"):
        def read(ids_):
            return _read_parquet(p, ids_, weighted, weight_column)
    else:
        def read(ids_):
            return _read_text(p, ids_, header, weighted, weight_column)
    with gzip_errors(p):
        try:
            return read(ids)
        except BeyondInt64:  # ids='auto' met an integer id beyond int64: all ids are strings, as written
            return read("str")


# ---------------------------------------------------------------- binary formats (ids are indices)

def _load_npy(p: Path) -> np.ndarray:
    try:
        return np.load(p, allow_pickle=False)
    except Exception as exc:  # numpy raises ValueError/OSError/EOFError variously for non-npy data
        raise InputFileError(p, f"not a readable .npy array ({type(exc).__name__}: {exc}).") from None


def read_npz(p: Path, weighted: bool = False) -> EdgeList:
    try:
        with np.load(p, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as exc:
        raise InputFileError(p, f"not a readable .npz archive ({type(exc).__name__}: {exc}).") from None
    if "edge_index" not in arrays:
        raise InputFileError(p, f"expected an array named 'edge_index'. Got arrays {sorted(arrays)}.")
    n = None
    if "num_nodes" in arrays:
        nn_ = arrays["num_nodes"]
        if nn_.size != 1 or not np.issubdtype(nn_.dtype, np.integer) or int(nn_.reshape(-1)[0]) < 1:
            raise InputFileError(p, f"'num_nodes' must be one integer >= 1. Got {nn_.tolist()!r}.", field="num_nodes")
        n = int(nn_.reshape(-1)[0])
        if n > MAX_NODES:
            raise InputFileError(p, f"'num_nodes' is {n:,}, more than the {MAX_NODES:,} nodes gaescale can index "
                                    "(node pair keys u * N + v must fit in 64 bits).", field="num_nodes")
    x = arrays.get("x")
    if x is not None:
        x = check_features(p, x, field="x")
    x_rows = n is None and x is not None  # the graph has one node per row of 'x'
    if x_rows:
        n = x.shape[0]
    el = _from_index_array(p, arrays["edge_index"], n, field="edge_index", x_rows=x_rows)
    if x is not None and x.shape[0] != el.num_nodes:
        raise InputFileError(p, f"'x' has {x.shape[0]} rows but the graph has {el.num_nodes} nodes.", field="x")
    el.x = x
    if weighted:
        el.edge_weight = weights.npz_weights(p, arrays, el.edge_index.shape[1])
    return el


def check_features(p: Path, a: np.ndarray, field: str | None = None) -> np.ndarray:
    """A finite ``(N, F)`` float32 feature matrix, or an error naming the first bad row and column."""
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2 or not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
        raise InputFileError(p, f"expected a 2-D numeric array of features. Got shape {a.shape}, dtype {a.dtype}.",
                             field=field)
    a = a.astype(np.float32)
    bad = ~np.isfinite(a)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise InputFileError(p, f"features must be finite. Got {a[r, c]} at row {r}, column {c}.", field=field)
    return a


def check_index_dtype(p: Path, a: np.ndarray, field: str | None = None) -> None:
    """Node indices come as integers, or as floats holding whole numbers (checked by :func:`as_indices`)."""
    if not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)):
        raise InputFileError(p, f"expected an integer array of node indices. Got dtype {a.dtype}.", field=field)


def as_indices(p: Path, a: np.ndarray, field: str | None = None) -> np.ndarray:
    """``a`` (integer, or float holding whole numbers) as int64 node indices, or the error that says why not."""
    if np.issubdtype(a.dtype, np.floating) and (not np.all(np.isfinite(a)) or np.any(a != np.round(a))):
        raise InputFileError(p, "node indices must be whole numbers; found a fractional, NaN or infinite value.",
                             field=field)
    return np.asarray(a, np.int64)


def _from_index_array(p: Path, a: np.ndarray, num_nodes: int | None, field: str | None = None,
                      x_rows: bool = False) -> EdgeList:
    """``a``: ``(2, E)`` or ``(E, 2)`` node indices; ``num_nodes``: given (``x_rows``: the rows of the .npz's 'x'),
    or None for the largest index + 1."""
    check_index_dtype(p, a, field)
    if a.ndim != 2 or 2 not in a.shape:
        raise InputFileError(p, f"expected shape (2, E) or (E, 2). Got {a.shape}.", field=field)
    ei = as_indices(p, a if a.shape[0] == 2 else a.T, field)
    if ei.size == 0:
        raise InputFileError(p, "the edge list has no edges.", field=field)
    lo, hi = int(ei.min()), int(ei.max())
    if lo < 0:
        col = int(np.argmax((ei < 0).any(axis=0)))
        raise InputFileError(p, f"node indices must be >= 0. Got {lo} (edge {col}).", field=field)
    n = hi + 1 if num_nodes is None else num_nodes
    if hi >= n and x_rows:
        raise InputFileError(p, f"expected one feature row per node: at least {hi + 1} rows ('edge_index' holds node "
                                f"indices up to {hi}). Got {n} rows.", field="x")
    if hi >= n:
        col = int(np.argmax((ei >= n).any(axis=0)))
        raise InputFileError(p, f"node index {hi} (edge {col}) is out of range for num_nodes={n}.", field=field)
    check_node_count(p, n, ei.shape[1], inferred=num_nodes is None, field=field)
    return EdgeList(np.ascontiguousarray(ei), n, None, source=str(p))


def check_node_count(p: Path, n: int, num_edges: int, *, inferred: bool, field: str | None = None) -> None:
    """Refuse ``n`` nodes of an .npy/.npz edge list (indices ``0..n-1``) that gaescale cannot index, or, ``inferred``
    from the largest index, that are mostly not nodes at all (sparse ids in an index array)."""
    advice = ("(.npy/.npz edges are node indices 0..N-1): if they are ids, write the edges as text (ids are then "
              "kept as ids and mapped to indices 0..N-1)")
    if n > MAX_NODES:
        raise InputFileError(p, f"node indices up to {n - 1} make {n:,} nodes, more than the {MAX_NODES:,} gaescale "
                                f"can index {advice}.", field=field)
    if inferred and n > SPARSE_NODES and n > SPARSE_RATIO * num_edges:
        raise InputFileError(p, f"node indices up to {n - 1} make {n:,} nodes for {num_edges:,} edges, most of them "
                                f"without an edge {advice}; or store num_nodes in an .npz to keep them all.",
                             field=field)


def _read_parquet(p: Path, ids: str, weighted: bool = False, weight_column: str | None = None) -> EdgeList:
    import pyarrow.parquet as pq
    try:
        table = pq.read_table(p)
    except Exception as exc:
        raise InputFileError(p, f"not a readable Parquet file ({type(exc).__name__}: {exc}).") from None
    if table.num_columns < 2:
        raise InputFileError(p, f"expected 2 columns (source, target). Got {table.num_columns}: {table.column_names}.")
    if table.num_rows == 0:
        raise InputFileError(p, "the edge list has no edges.")
    import pyarrow as pa
    names = table.column_names[:2]
    columns = [table.column(name).combine_chunks() for name in names]
    for name, c in zip(names, columns):
        if c.null_count:
            i = int(np.argmax(c.is_null().to_numpy(zero_copy_only=False)))
            raise InputFileError(p, f"missing node id in row {i}.", field=name)
    w = weights.parquet_weights(p, table, weight_column) if weighted else None
    if all(pa.types.is_string(c.type) or pa.types.is_large_string(c.type) for c in columns):
        el = text_ids(p, columns, ids, names, lambda i: None)
    else:
        el = index_ids(p, [as_ids(p, c.to_numpy(zero_copy_only=False), ids, name) for name, c in zip(names, columns)])
    el.edge_weight = w
    return el


# ---------------------------------------------------------------- text

def _open_text(p: Path):
    return gzip.open(p, "rt", errors="replace") if _is_gz(p) else open(p, errors="replace")


def data_lines(p: Path):
    """Yield ``(line_number, tokens_line)`` for non-blank lines with comments stripped."""
    with gzip_errors(p), _open_text(p) as fh:
        for no, line in enumerate(fh, 1):
            line = line.split("#", 1)[0].strip()
            if line:
                yield no, line


def split_fields(line: str, sep: str | None) -> list[str]:
    return [t.strip() for t in line.split(sep)] if sep else line.split()


def sniff_text(p: Path, header: str) -> tuple[str | None, bool]:
    """``(separator or None for whitespace, has_header)`` from the first data lines."""
    head = []
    for item in data_lines(p):
        head.append(item)
        if len(head) == 2:
            break
    if not head:
        raise InputFileError(p, "no data lines (only blank lines or '#' comments).")
    first = head[0][1]
    ext = suffix_of(p)
    # Commas win; a .tsv splits on tabs only (ids may hold spaces); otherwise any run of whitespace.
    sep = "," if "," in first else "\t" if ext == "tsv" else None
    toks = split_fields(first, sep)
    if header == "auto":
        second_numeric = len(head) > 1 and all(INT_PATTERN.match(t) for t in split_fields(head[1][1], sep)[:2])
        has_header = (any(t.lower() in HEADER_WORDS for t in toks[:2])
                      or (not all(INT_PATTERN.match(t) for t in toks[:2]) and second_numeric))
    else:
        has_header = header == "yes"
    if len(toks) < 2:
        raise InputFileError(p, f"expected at least 2 columns (source, target). Got 1: {first!r}.", line=head[0][0])
    return sep, has_header


def diagnose_text(p: Path, sep, has_header: bool) -> None:
    """Scan line by line for the first line without two ids and raise an error naming it."""
    items = data_lines(p)
    if has_header:
        next(items, None)
    for no, line in items:
        toks = split_fields(line, sep)
        if len(toks) < 2 or any(t == "" for t in toks[:2]):
            raise InputFileError(p, f"expected at least 2 columns (source, target). Got {len(toks)}: {line!r}.",
                                 line=no)


def line_numbers(p: Path, has_header: bool) -> list[int]:
    nums = [no for no, _ in data_lines(p)]
    return nums[1:] if has_header else nums


def _read_text(p: Path, ids: str, header: str, weighted: bool = False, weight_column: str | None = None) -> EdgeList:
    import pandas as pd
    sep, has_header = sniff_text(p, header)
    # Columns after the first two (weights, timestamps) are not read, but for the weight column with --weighted.
    wcol = _weight_column(p, sep, has_header, weight_column) if weighted else None
    try:
        df = pd.read_csv(p, sep=sep if sep else r"\s+", header=0 if has_header else None, comment="#",
                         skip_blank_lines=True, usecols=[0, 1] if wcol is None else [0, 1, wcol], engine="c",
                         dtype=str if ids == "str" else None)
    except (pd.errors.ParserError, ValueError, UnicodeDecodeError) as exc:
        diagnose_text(p, sep, has_header)
        raise InputFileError(p, f"could not parse the edge list ({exc}).") from None
    w_raw = None
    if wcol is not None:
        w_raw = df.iloc[:, 2].to_numpy()
        df = df.iloc[:, :2]
    df.columns = [0, 1]
    if len(df) == 0:
        raise InputFileError(p, "the edge list has no edges (only a header, blank lines or comments).")
    if df.isna().any(axis=None):
        diagnose_text(p, sep, has_header)
        row = int(np.argmax(df.isna().any(axis=1).to_numpy()))
        raise InputFileError(p, "missing node id.", line=line_numbers(p, has_header)[row])
    lines = None

    def line_of(i):
        nonlocal lines
        lines = lines or line_numbers(p, has_header)
        return lines[i]

    w = None if wcol is None else _text_weights(p, w_raw, sep, has_header, wcol, weight_column, line_of)
    names = ("source", "target")
    if all(df[c].dtype.kind not in "iuf" for c in (0, 1)) and not any(wide_ints(df[c]) for c in (0, 1)):
        import pyarrow as pa
        el = text_ids(p, [pa.array(df[c]) for c in (0, 1)], ids, names, line_of)
    else:
        el = index_ids(p, [as_ids(p, df[c].to_numpy(), ids, names[c], line_of) for c in (0, 1)], names, line_of)
    el.edge_weight = w
    return el


def _weight_column(p: Path, sep, has_header: bool, weight_column: str | None) -> int:
    """Where the weight column is in a text edge list (:func:`gaescale.data.weights.text_column`)."""
    no, first = next(data_lines(p))
    return weights.text_column(p, split_fields(first, sep), has_header, weight_column, no)


def _text_weights(p: Path, raw: np.ndarray, sep, has_header: bool, wcol: int, weight_column, line_of) -> np.ndarray:
    """The parsed weight column ``raw: (E,)`` checked (:func:`gaescale.data.weights.text_weights`); a bad value is
    named by its line and its text there, read back by a scan of the file up to that line."""
    field = weight_column or "weight"
    if has_header and weight_column is None:
        field = split_fields(next(data_lines(p))[1], sep)[wcol]

    def token_of(line: int):
        for no, text in data_lines(p):
            if no == line:
                toks = split_fields(text, sep)
                return toks[wcol] if len(toks) > wcol and toks[wcol] != "" else None
        return None
    return weights.text_weights(p, raw, field, line_of, token_of)


