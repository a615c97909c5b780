"""Node features: reading them and aligning them with the graph's node order."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import InputFileError
from .edgelist import EdgeList
from .ids import INT_PATTERN, BeyondInt64, as_ids
from .readers import (
    check_features,
    check_file,
    data_lines,
    gzip_errors,
    line_numbers,
    sniff_text,
    split_fields,
    suffix_of,
)

# The id column's name in a header line whose feature columns are named 0, 1, ... (pandas' df.to_csv() of a
# frame with default column names: the index's name, or nothing for an unnamed index).
INDEX_NAMES = {"", "id", "ids", "node", "node_id", "nodeid", "index", "unnamed: 0"}


def _is_number(token: str) -> bool:
    try:
        float(token)
        return True
    except ValueError:
        return False


def is_header(tokens: list[str], next_id: str | None) -> bool:
    """Whether the first line of a feature table, split into ``tokens``, is a header: its feature columns are not
    all numbers, or they are pandas' default names ``0, 1, ..., F-1`` (``df.to_csv()``) after the id column's name
    (``id``, nothing, ``Unnamed: 0``...) or after a non-integer above an integer id (``next_id``, the first token of
    the next line)."""
    if not all(_is_number(t) for t in tokens[1:]):
        return True
    first, names = tokens[0], tokens[1:]
    if names != [str(i) for i in range(len(names))] or INT_PATTERN.match(first):
        return False
    return first.lower() in INDEX_NAMES or (next_id is not None and bool(INT_PATTERN.match(next_id)))


def read_feature_table(path) -> tuple[np.ndarray | None, np.ndarray]:
    """``(ids or None, x: (rows, F) float32)``. ``.npy``/``.npz`` give rows in node order (ids None);
    CSV/TSV/Parquet give the id in the first column and features in the rest (a Parquet file written by pandas:
    its index, when it is not the default 0..rows-1)."""
    p = check_file(path)
    with gzip_errors(p):
        return _read_feature_table(p)


def _read_feature_table(p: Path) -> tuple[np.ndarray | None, np.ndarray]:
    ext = suffix_of(p)
    if ext in ("npy", "npz"):
        try:
            loaded = np.load(p, allow_pickle=False)
            if ext == "npz":
                with loaded as z:
                    key = "x" if "x" in z.files else (z.files[0] if len(z.files) == 1 else None)
                    if key is None:
                        raise InputFileError(p, f"expected an array named 'x'. Got arrays {sorted(z.files)}.")
                    loaded = z[key]
        except InputFileError:
            raise
        except Exception as exc:
            raise InputFileError(p, f"not a readable .{ext} array ({type(exc).__name__}: {exc}).") from None
        return None, check_features(p, loaded)
    if ext in ("parquet", "pq"):
        import pandas as pd
        import pyarrow.parquet as pq
        try:
            df = pq.read_table(p).to_pandas()
        except Exception as exc:
            raise InputFileError(p, f"not a readable Parquet file ({type(exc).__name__}: {exc}).") from None
        if not isinstance(df.index, pd.RangeIndex) or df.index.name is not None:
            df = df.reset_index()  # pandas' df.to_parquet() kept the index (the ids) apart from the columns
        line_of = None
    else:
        import pandas as pd
        sep, _ = sniff_text(p, "no")
        head = [text for _, (_, text) in zip(range(2), data_lines(p))]
        # Feature values are numbers, so a first line with a non-number among them is a header (or pandas' header).
        has_header = is_header(split_fields(head[0], sep), split_fields(head[1], sep)[0] if len(head) > 1 else None)
        lines = None

        def line_of(i):
            nonlocal lines
            lines = lines or line_numbers(p, has_header)
            return lines[i]
        try:
            df = pd.read_csv(p, sep=sep or r"\s+", header=0 if has_header else None, comment="#")
        except (pd.errors.ParserError, ValueError) as exc:
            raise InputFileError(p, f"could not parse the feature table ({exc}).") from None
        for c in df.columns[1:]:
            if df[c].dtype.kind not in "iufb":
                bad = pd.to_numeric(df[c], errors="coerce").isna() & df[c].notna()
                row = int(np.argmax(bad.to_numpy())) if bad.any() else int(np.argmax(df[c].isna().to_numpy()))
                raise InputFileError(p, f"feature values must be numbers. Got {df[c].iloc[row]!r}.",
                                     line=line_numbers(p, has_header)[row], field=str(c))
    if df.shape[1] < 2:
        raise InputFileError(p, f"expected an id column and at least one feature column. Got {df.shape[1]} column(s).")
    column, name = df.iloc[:, 0].to_numpy(), str(df.columns[0])
    hint = " (most ids in the first column are integers)"
    try:
        ids = as_ids(p, column, "auto", name, line_of, hint=hint)
    except BeyondInt64:  # integer ids beyond int64: strings
        ids = as_ids(p, column, "str", name, line_of)
    values = df.iloc[:, 1:]
    for c in values.columns:
        if values[c].dtype.kind not in "iufb":
            raise InputFileError(p, f"feature values must be numeric. Got {values[c].dtype} values.", field=str(c))
    return ids, check_features(p, values.to_numpy())


def _plain(v):
    """A NumPy scalar as the Python value (its repr ``10``, ``'a'``, not ``np.int64(10)``)."""
    return v.item() if isinstance(v, np.generic) else v


def attach_features(edges: EdgeList, path) -> EdgeList:
    """Align the features in ``path`` with ``edges``' node order; may add isolated nodes named only there.

    - ``.npy``/``.npz`` rows are node indices: with integer ids, row ``i`` is the node whose id is ``i``.
    - a keyed table (CSV/Parquet) is matched by id; every node of the edge list needs a row.
    """
    p = Path(path)
    ids, x = read_feature_table(p)
    if ids is None:
        return _attach_rows(edges, p, x)
    return _attach_keyed(edges, p, ids, x)


def _attach_rows(edges: EdgeList, p: Path, x: np.ndarray) -> EdgeList:
    rows = x.shape[0]
    if edges.node_ids is None:  # .npy/.npz edges: indices are rows
        if rows < edges.num_nodes:
            raise InputFileError(p, f"has {rows} feature rows but the graph has {edges.num_nodes} nodes "
                                    f"(node indices up to {edges.num_nodes - 1}).")
        return EdgeList(edges.edge_index, rows, None, x, edge_weight=edges.edge_weight, source=edges.source)
    if edges.node_ids.dtype == object:
        raise InputFileError(p, "a .npy/.npz feature matrix has no ids, so it cannot be matched to string node ids; "
                                "give a CSV or Parquet table whose first column is the node id.")
    ids = edges.node_ids
    if ids.min() < 0 or ids.max() >= rows:
        bad = ids[(ids < 0) | (ids >= rows)][0]
        raise InputFileError(p, f"has {rows} feature rows (row i = node id i) but the edge list names node {bad}.")
    # Node index k <- id; re-index edges so that index == id, keeping isolated nodes that only have features.
    ei = ids[edges.edge_index]
    return EdgeList(ei, rows, np.arange(rows, dtype=np.int64), x, edge_weight=edges.edge_weight, source=edges.source)


def _attach_keyed(edges: EdgeList, p: Path, ids: np.ndarray, x: np.ndarray) -> EdgeList:
    graph_ids = edges.node_ids if edges.node_ids is not None else np.arange(edges.num_nodes, dtype=np.int64)
    if graph_ids.dtype != ids.dtype:
        graph_ids, ids = graph_ids.astype(str).astype(object), ids.astype(str).astype(object)
    import pandas as pd
    uniq, counts = np.unique(ids.astype(str), return_counts=True)
    if (counts > 1).any():
        raise InputFileError(p, f"node id {_plain(uniq[counts > 1][0])!r} has more than one feature row.")
    index = pd.Index(ids)
    pos = index.get_indexer(graph_ids)
    if (pos < 0).any():
        missing = graph_ids[pos < 0]
        raise InputFileError(p, f"{missing.size} node(s) of the edge list have no feature row, e.g. id "
                                f"{_plain(missing[0])!r}.")
    extra = np.setdiff1d(np.arange(len(ids)), pos)  # feature rows for nodes without edges: isolated nodes
    node_ids = np.concatenate([graph_ids, ids[extra]]) if extra.size else graph_ids
    x_all = np.concatenate([x[pos], x[extra]]) if extra.size else x[pos]
    return EdgeList(edges.edge_index, len(node_ids), node_ids, x_all, edge_weight=edges.edge_weight,
                    source=edges.source)
