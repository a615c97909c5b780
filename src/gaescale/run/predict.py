"""Using trained embeddings: the top-k most likely new links of each node (the exact scan of
:mod:`gaescale.run.scan`, or an ANN index's candidates), and scores of given pairs."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from ..data.readers import HEADER_WORDS
from ..errors import InputFileError, OutputError, ParameterError
from ..outputs import atomic_write
from .rundir import RunDir
from .scan import top_k, with_two_hop

TABLE_SUFFIXES = (".tsv", ".csv", ".parquet")


def write_table(path, columns: dict[str, np.ndarray]) -> Path:
    """A TSV, CSV or Parquet file (by suffix) of ``columns``, written atomically through Arrow's
    multi-threaded writers. TSV is unquoted (node ids hold no tabs or line breaks: the readers refuse
    them); CSV quotes text fields."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq
    path = Path(path)
    table = pa.table({k: pa.array(v) for k, v in columns.items()})
    if path.suffix.lower() == ".parquet":
        return atomic_write(path, lambda fh: pq.write_table(table, fh))
    csv = path.suffix.lower() == ".csv"
    sep = "," if csv else "\t"
    options = pcsv.WriteOptions(delimiter=sep, quoting_style="needed" if csv else "none", include_header=False)

    def write(fh):
        fh.write((sep.join(columns) + "\n").encode())  # Arrow would quote the header's names
        pcsv.write_csv(table, fh, options)
    return atomic_write(path, write)


def check_table_path(path, owner: str, *, inputs=()) -> Path:
    """``path`` as the output table of ``owner``, refused before any work: an unknown suffix, a directory, one of
    the ``inputs``, a run's own file (:func:`gaescale.run.writer.refuse_run_file`)."""
    from .writer import refuse_run_file
    p = Path(path)
    if p.suffix.lower() not in TABLE_SUFFIXES:
        raise ParameterError("out", owner, f"a file name ending in one of {list(TABLE_SUFFIXES)}", str(path))
    if p.is_dir():
        raise OutputError(f"{p}: is a directory; --out names the file to write.")
    refuse_run_file(p, inputs=inputs)
    return p


def read_pairs(path: str) -> tuple[list[str], list[str], list[int], str]:
    """Pairs of ids from a text file (or ``-`` for stdin): two columns, comma, tab or whitespace separated;
    ``#`` comments and blank lines skipped; an optional header. Returns ``(sources, targets, line numbers, name)``."""
    name = "<stdin>" if path == "-" else str(path)
    if path == "-":
        text = sys.stdin.read()
    else:
        p = Path(path)
        if not p.is_file():
            raise InputFileError(p, "no such file." if not p.exists() else "is a directory, expected a file.")
        text = p.read_text(errors="replace")
    src, dst, lines = [], [], []
    sep = None
    for no, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if sep is None:
            sep = "," if "," in line else "\t" if "\t" in line else " "
        toks = [t.strip() for t in line.split(sep)] if sep != " " else line.split()
        if len(toks) < 2 or not toks[0] or not toks[1]:
            raise InputFileError(name, f"expected 2 node ids (source, target). Got {len(toks)}: {line!r}.", line=no)
        if not lines and not src and toks[0].lower() in HEADER_WORDS and toks[1].lower() in HEADER_WORDS:
            lines.append(-no)  # a header line: remembered only to be skipped
            continue
        src.append(toks[0])
        dst.append(toks[1])
        lines.append(no)
    lines = [x for x in lines if x > 0]
    if not src:
        raise InputFileError(name, "no pairs to score (the input is empty or only comments).")
    return src, dst, lines, name


def topk_links(run, k: int = 10, *, nodes=None, exclude_existing: bool = False, out=None, log=None,
               index=None) -> dict:
    """``gaescale topk``: the ``k`` most likely new links of every node of a run (or of ``nodes``: their original ids,
    a list or a 1-D array, or one id; ``--node-ids``), keyed by the original ids. With ``out`` (.tsv/.csv/.parquet)
    the table is written atomically. Returns the columns ``node, rank, candidate, score`` (the logit),
    ``probability``. ``index``: a file of ``gaescale index`` to search instead of the exact scan
    (:mod:`gaescale.run.index`). ``exclude_existing``: leave out the graph's edges (a directed run's out-links)."""
    run = RunDir.of(run)
    if out is not None:
        out = check_table_path(out, "topk", inputs=(run.path, index))
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise ParameterError("k", "topk", "an int >= 1", k)
    if run.decoder == "hadamard":
        raise ParameterError("decoder", "topk", "'bias' or 'inner' (a bilinear decoder, whose exact top-k scan prunes "
                                               "by length); score candidate pairs of this hadamard run with "
                                               "'gaescale score'", "hadamard")
    queries = None if nodes is None else run.rows(_ids(nodes), "--node-ids")
    graph = run.graph() if exclude_existing else None
    exclude = graph.out if run.directed and graph is not None else graph  # a directed run: its out-links
    if index is not None:
        from .index import indexed_top_k
        scores, cand = indexed_top_k(run, index, int(k), queries=queries, exclude=exclude)
    else:
        z, metric, targets = run.ranking_form()  # directed: z_s of the queries against z_t of the candidates
        scores, cand = top_k(z, int(k), queries=queries, exclude=exclude, metric=metric, targets=targets)
    structure = run.structure_scores(graph=graph)  # graph.npz read once, where --exclude-existing read it
    if structure is not None:  # the structural part: its two-hop candidates, merged (exact when the scan was)
        z, metric = run.logits_form()
        scores, cand = with_two_hop(scores, cand, z, structure, queries=queries, exclude=graph, metric=metric)
    q = np.arange(run.embeddings.shape[0]) if queries is None else queries
    ok = cand >= 0
    ids = run.node_ids
    table = {"node": ids[np.repeat(q, ok.sum(1))], "rank": np.nonzero(ok)[1] + 1, "candidate": ids[cand[ok]],
             "score": scores[ok], "probability": 1.0 / (1.0 + np.exp(-scores[ok].astype(np.float64)))}
    if out is not None:
        write_table(out, table)
        if log:
            log(f"wrote {ok.sum():,} links of {q.size:,} nodes to {out}")
    return table


def _ids(nodes) -> list:
    """The node ids of ``topk_links(nodes=...)``: a list, a 1-D array, or one id."""
    if isinstance(nodes, (str, bytes)) or np.ndim(nodes) == 0:
        return [nodes]
    if np.ndim(nodes) != 1:
        raise ParameterError("nodes", "topk", "node ids: a list, a 1-D array or one id", nodes)
    return list(nodes)


def score_pairs(run, pairs, *, out=None) -> dict:
    """``gaescale score``: the probabilities ``sigmoid(s_uv)`` of id pairs, ``s_uv`` the logit of the run's own
    decoder (``z_u . z_v``; plus ``b_u + b_v`` with ``--decoder bias``; the trained MLP of ``z_u * z_v`` with
    ``hadamard``; ``z_s_u . z_t_v`` for a directed run, ``u`` the source; plus the structural part where the run has
    it). ``pairs``: a file of id pairs (a path; ``-``: stdin; :func:`read_pairs`), or the ids themselves, a ``(P, 2)``
    array (one pair per row; a list of ``(source, target)`` tuples) or ``(2, P)`` (sources, then targets), of the
    original ids; a 2 x 2 array is read as two rows. Returns the table ``source, target, score, probability`` (the
    ids as given), and writes it to ``out`` (.tsv/.csv/.parquet) if given."""
    from ..training.evaluate import pair_scores
    run = RunDir.of(run)
    is_file = isinstance(pairs, (str, os.PathLike))
    if out is not None:
        out = check_table_path(out, "score", inputs=(run.path, pairs) if is_file else (run.path,))
    if is_file:
        src, dst, lines, name = read_pairs(pairs)
        line_of = lines.__getitem__
    else:
        (src, dst), name, line_of = _pair_ids(pairs), "pairs", None
    rows = np.stack([run.rows(src, name, line_of=line_of, field="source"),
                     run.rows(dst, name, line_of=line_of, field="target")])
    z, metric = run.logits_form()
    s = pair_scores(z, rows, metric=metric, decoder=run.pair_decoder(), structure=run.structure_scores())
    table = {"source": np.array(src, dtype=object), "target": np.array(dst, dtype=object), "score": s,
             "probability": 1.0 / (1.0 + np.exp(-s))}
    if out is not None:
        write_table(out, table)
    return table


def _pair_ids(pairs) -> tuple[np.ndarray, np.ndarray]:
    """``(sources, targets)`` of an array of id pairs, ``(P, 2)`` or ``(2, P)`` (a 2 x 2 array: two rows)."""
    try:
        a = np.asarray(pairs, dtype=object)
    except ValueError:  # ragged
        a = np.empty(0, dtype=object)
    if a.ndim != 2 or 2 not in a.shape or a.size == 0:
        raise ParameterError("pairs", "score", "a file of id pairs, or a (P, 2) or (2, P) array of node ids", pairs)
    return (a[:, 0], a[:, 1]) if a.shape[1] == 2 else (a[0], a[1])
