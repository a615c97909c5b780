"""Reading an edge list chunk by chunk, for ``gaescale prepare``: memory bounded by the chunk, not the file.

:class:`EdgeChunks` yields ``(src, dst)`` pairs of at most ``rows`` edge rows each, in file order, from
text (pandas' chunked C parser), Parquet (row batches), ``.npy`` (memory-mapped) or ``.npz`` (read whole:
its arrays may be compressed). Its ``kind`` says what the columns hold:

- ``index``: ``.npy``/``.npz`` node indices (int64 arrays), used as they are;
- ``int``: integer ids (int64 arrays), to be mapped to ``0..N-1``;
- ``str``: string ids (object arrays of ``str``), to be mapped to ``0..N-1``.

The kind is decided on the first chunk (``ids='auto'``: integers when most ids of that chunk are and all fit
in int64, else strings) and held for the whole file; a later chunk that does not fit it is an error naming
its line or row. String ids lose their surrounding whitespace.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..errors import InputFileError
from .ids import BeyondInt64, as_ids, integer_ids, mostly_integers, strip_ids
from .readers import (
    as_indices,
    check_file,
    check_index_dtype,
    data_lines,
    diagnose_text,
    gzip_errors,
    read_npz,
    sniff_text,
    suffix_of,
)

Columns = tuple[np.ndarray, np.ndarray]


class EdgeChunks:
    """The edge rows of ``path`` in chunks of at most ``rows``; iterate it once per pass over the file."""

    def __init__(self, path, *, ids: str = "auto", header: str = "auto", rows: int = 1 << 22):
        self.path = check_file(path)
        self.ids, self.header, self.rows = ids, header, int(rows)
        self.ext = suffix_of(self.path)
        self.x = None  # features stored with the graph (.npz 'x')
        self.num_nodes = None  # .npz 'num_nodes'
        if self.ext in ("npy", "npz"):
            self.kind = "index"
        elif self.ids in ("int", "str"):
            self.kind = self.ids
        else:
            self.kind = None
            first = next(iter(self._chunks()), None)  # decides self.kind
            if first is None:
                raise InputFileError(self.path, "the edge list has no edges.")

    def __iter__(self) -> Iterator[Columns]:
        return self._chunks()

    def _chunks(self) -> Iterator[Columns]:
        if self.ext == "npy":
            return self._npy()
        if self.ext == "npz":
            return self._npz()
        if self.ext in ("parquet", "pq"):
            return self._parquet()
        return self._text()

    # ------------------------------------------------------------ binary: node indices

    def _npy(self) -> Iterator[Columns]:
        try:
            a = np.load(self.path, mmap_mode="r", allow_pickle=False)
        except Exception as exc:
            raise InputFileError(self.path, f"not a readable .npy array ({type(exc).__name__}: {exc}).") from None
        check_index_dtype(self.path, a)
        if a.ndim != 2 or 2 not in a.shape or a.size == 0:
            raise InputFileError(self.path, f"expected shape (2, E) or (E, 2) with E >= 1. Got {a.shape}.")
        ei = a if a.shape[0] == 2 else a.T
        for start in range(0, ei.shape[1], self.rows):
            yield self._checked_indices(as_indices(self.path, np.asarray(ei[:, start:start + self.rows])), start)

    def _npz(self) -> Iterator[Columns]:
        el = read_npz(self.path)  # validated whole, num_nodes and x included
        self.x, self.num_nodes = el.x, el.num_nodes
        for start in range(0, el.edge_index.shape[1], self.rows):
            chunk = el.edge_index[:, start:start + self.rows]
            yield chunk[0], chunk[1]

    def _checked_indices(self, ei: np.ndarray, start: int) -> Columns:
        if ei.size and ei.min() < 0:
            col = int(np.argmax((ei < 0).any(axis=0)))
            raise InputFileError(self.path, f"node indices must be >= 0. Got {int(ei.min())} (edge {start + col}).")
        return ei[0], ei[1]

    # ------------------------------------------------------------ tables: ids

    def _parquet(self) -> Iterator[Columns]:
        import pyarrow as pa
        import pyarrow.parquet as pq
        try:
            f = pq.ParquetFile(self.path)
        except Exception as exc:
            raise InputFileError(self.path, f"not a readable Parquet file ({type(exc).__name__}: {exc}).") from None
        names = f.schema_arrow.names[:2]
        if len(names) < 2:
            raise InputFileError(self.path, f"expected 2 columns (source, target). Got {len(names)}: {names}.")
        start = 0
        for batch in f.iter_batches(batch_size=self.rows, columns=names):
            cols = []
            for name, c in zip(names, batch.columns):
                if c.null_count:
                    i = int(np.argmax(c.is_null().to_numpy(zero_copy_only=False)))
                    raise InputFileError(self.path, f"missing node id in row {start + i}.", field=name)
                is_text = pa.types.is_string(c.type) or pa.types.is_large_string(c.type)
                cols.append(np.asarray(c.to_numpy(zero_copy_only=False), dtype=object) if is_text
                            else c.to_numpy(zero_copy_only=False))
            yield self._typed(cols, names, lambda i: None)
            start += batch.num_rows

    def _text(self) -> Iterator[Columns]:
        with gzip_errors(self.path):
            yield from self._text_chunks()

    def _text_chunks(self) -> Iterator[Columns]:
        import pandas as pd
        sep, has_header = sniff_text(self.path, self.header)
        start = 0
        reader = pd.read_csv(self.path, sep=sep if sep else r"\s+", header=0 if has_header else None, comment="#",
                             skip_blank_lines=True, usecols=[0, 1], engine="c", chunksize=self.rows,
                             dtype=str if self.kind == "str" else None)
        try:
            for df in reader:
                if df.isna().any(axis=None):
                    diagnose_text(self.path, sep, has_header)
                    row = int(np.argmax(df.isna().any(axis=1).to_numpy()))
                    raise InputFileError(self.path, "missing node id.", line=self._line(has_header, start + row))
                cols = [df.iloc[:, k].to_numpy() for k in (0, 1)]
                yield self._typed(cols, ("source", "target"), lambda i, first=start: self._line(has_header, first + i))
                start += len(df)
        except (pd.errors.ParserError, ValueError, UnicodeDecodeError) as exc:
            diagnose_text(self.path, sep, has_header)
            raise InputFileError(self.path, f"could not parse the edge list ({exc}).") from None

    def _typed(self, cols: list[np.ndarray], names, line_of) -> Columns:
        """The chunk's two columns as int64 (kind int) or str objects (kind str); the first chunk of
        ``ids='auto'`` decides the kind (strings where an integer id is beyond int64: the passes after this one
        read them as written)."""
        if self.kind is None:
            numeric = all(c.dtype.kind in "iuf" for c in cols)
            if numeric:
                kind = "int"
            else:
                sample = np.concatenate([strip_ids(c[:100_000]) for c in cols])  # the first rows of both columns
                kind = "int" if mostly_integers(sample, head=sample.size) else "str"
            if kind == "int":
                try:
                    out = self._ints(cols, names, line_of, "auto")
                except BeyondInt64:
                    kind = "str"
                else:
                    self.kind = kind
                    return out
            self.kind = kind
        if self.kind == "str":
            return tuple(strip_ids(np.asarray(c.astype(str), dtype=object) if c.dtype.kind != "O" else c)
                         for c in cols)
        return self._ints(cols, names, line_of, "int")

    def _ints(self, cols: list[np.ndarray], names, line_of, ids: str) -> Columns:
        """The chunk's two columns as int64 ids; an id beyond int64 raises :class:`BeyondInt64` (``ids='auto'``)
        or the error naming its line."""
        out = []
        for c, name in zip(cols, names):
            if c.dtype.kind == "O":
                hint = ("" if self.ids == "int"
                        else " (the first rows hold integer ids; pass --ids str to read all as strings)")
                c = integer_ids(self.path, strip_ids(c), name, line_of, hint, ids=ids)
            out.append(as_ids(self.path, c, ids, name, line_of))
        return out[0], out[1]

    def _line(self, has_header: bool, row: int) -> int | None:
        """The file line of data row ``row`` (0-based), counted by streaming the file (error paths only)."""
        lines = data_lines(self.path)
        if has_header:
            next(lines, None)
        for k, (no, _) in enumerate(lines):
            if k == row:
                return no
        return None
