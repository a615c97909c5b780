"""Using trained embeddings: the top-k most likely new links of each node, and scores of given pairs.

:func:`top_k` is exact and never forms N x N. It scans the nodes in decreasing order of embedding
norm, in blocks, and stops for a query as soon as ``|q| * (largest norm left)`` cannot beat its
current k-th best score (Cauchy-Schwarz), the length bound of LEMP (Teflioudi et al., 2015). On
graph-autoencoder embeddings, whose norms grow with degree, it scans about 1% of the nodes per query.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import torch

from ..data.readers import HEADER_WORDS
from ..errors import InputFileError, OutputError, ParameterError
from ..graph import Graph, neighbour_pairs
from ..models import query_side
from ..outputs import atomic_write

TABLE_SUFFIXES = (".tsv", ".csv", ".parquet")


def top_k(z, k: int, *, queries: np.ndarray | None = None, exclude: Graph | None = None, block: int = 2048,
          batch: int = 2048, stats: dict | None = None, metric: torch.Tensor | None = None, targets=None
          ) -> tuple[np.ndarray, np.ndarray]:
    """For each query node, the ``k`` nodes of largest inner product ``z_q . z_v``, itself excluded and,
    with ``exclude``, its neighbours in that graph too.

    ``z: (N, d)``; ``queries: (Q,)`` node indices (default: all). Returns ``scores: (Q, k)`` float32,
    best first, and ``nodes: (Q, k)`` int64; where fewer than ``k`` candidates exist, the row ends in
    ``-inf`` / ``-1``. Memory: ``O(N d + batch * block)``. ``stats["pairs"]``, if given, counts the
    inner products evaluated (a brute force evaluates ``Q * N``). ``metric: (d,)`` of signs: the scores are
    ``z_q^T diag(metric) z_v`` (the per-node bias decoder, :mod:`gaescale.models`). ``targets: (N, d)``: the
    candidates' side, scores ``z_q . targets_v`` (a directed run's ``z_s`` against ``z_t``; default ``z``).
    """
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise ParameterError("k", "top_k", "an int >= 1", k)
    z = torch.as_tensor(np.ascontiguousarray(z, dtype=np.float32))
    zq = query_side(z, metric)
    if targets is not None:
        z = torch.as_tensor(np.ascontiguousarray(targets, dtype=np.float32))
    n = z.shape[0]
    q_all = np.arange(n) if queries is None else np.asarray(queries, np.int64)
    norms = z.norm(dim=1)
    order = torch.argsort(norms, descending=True, stable=True)
    zs, bucket_max = z[order], norms[order][::block]
    pos = torch.empty_like(order)
    pos[order] = torch.arange(n)
    scores = np.full((q_all.size, k), -np.inf, np.float32)
    nodes = np.full((q_all.size, k), -1, np.int64)
    for s in range(0, q_all.size, batch):
        q = q_all[s:s + batch]
        rows, excl = np.arange(q.size), q
        if exclude is not None:
            r2, n2 = neighbour_pairs(exclude, q)
            rows, excl = np.concatenate([rows, r2]), np.concatenate([excl, n2])
        ex_pos = pos[torch.from_numpy(excl)]
        srt = torch.argsort(ex_pos)
        ex_pos, ex_row = ex_pos[srt], torch.from_numpy(rows)[srt]
        cuts = torch.searchsorted(ex_pos, torch.arange(0, n + block, block))
        v, i = _scan(zq[torch.from_numpy(q)], zs, bucket_max, block, k, ex_row, ex_pos, cuts, stats)
        scores[s:s + q.size] = v.numpy()
        nodes[s:s + q.size] = torch.where(i >= 0, order[i.clamp(min=0)], -1).numpy()
    return scores, nodes


def with_two_hop(scores: np.ndarray, nodes: np.ndarray, z, structure, *, queries: np.ndarray | None = None,
                 exclude: Graph | None = None, metric: torch.Tensor | None = None, batch: int = 2048
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The top-k of the whole logits ``z_q^T M z_v + w . phi(q, v)`` (:mod:`gaescale.structure`) from the top-k of
    the embeddings' logits alone (``scores, nodes: (Q, k)``, as :func:`top_k` returns them for ``queries``, with the
    same ``exclude``): exact when those are, since ``w . phi >= 0`` is 0 but on each query's two-hop candidates. A
    node outside them that the embeddings' top-k leaves out is beaten by k nodes whose whole scores are at least
    their embeddings' scores; so the whole top-k lies in the embeddings' top-k and the two-hop candidates, each
    scored whole. Memory: a batch's two-hop candidates (:meth:`gaescale.structure.StructuralScores.batches`)."""
    z = torch.as_tensor(np.ascontiguousarray(z, dtype=np.float32))
    zq = query_side(z, metric)
    n, k = z.shape[0], scores.shape[1]
    q_all = np.arange(n) if queries is None else np.asarray(queries, np.int64)
    out_s, out_n = scores.copy(), nodes.copy()
    for part in structure.batches(q_all, batch):
        q = q_all[part]
        rows, cand, extra = structure.candidates(q)
        if exclude is not None:  # the queries' known neighbours are no candidates
            r2, n2 = neighbour_pairs(exclude, q)
            keep = ~np.isin(rows * n + cand, np.asarray(r2, np.int64) * n + n2)
            rows, cand, extra = rows[keep], cand[keep], extra[keep]
        whole = (zq[torch.from_numpy(q[rows])].double() * z[torch.from_numpy(cand)].double()).sum(1).numpy() + extra
        er = np.repeat(np.arange(q.size, dtype=np.int64), k)
        en, es = nodes[part].ravel(), scores[part].ravel().astype(np.float64)
        alone = (en >= 0) & ~np.isin(er * n + en, rows * n + cand)  # a candidate's whole score replaces its own
        r, c, v = np.r_[rows, er[alone]], np.r_[cand, en[alone]], np.r_[whole, es[alone]]
        order = np.lexsort((c, -v, r))  # by query, best first (ties by node index)
        r, c, v = r[order], c[order], v[order]
        rank = np.arange(r.size) - np.searchsorted(r, r)
        top = rank < k
        block_s = np.full((q.size, k), -np.inf, np.float32)
        block_n = np.full((q.size, k), -1, np.int64)
        block_s[r[top], rank[top]], block_n[r[top], rank[top]] = v[top], c[top]
        out_s[part], out_n[part] = block_s, block_n
    return out_s, out_n


def _scan(qv, zs, bucket_max, block, k, ex_row, ex_pos, cuts, stats=None):
    """Blocks of ``zs`` (sorted by decreasing norm) against the queries ``qv: (b, d)``, pruned by the
    length bound; excluded ``(row, position)`` pairs get ``-inf``. Returns ``(b, k)`` values and positions."""
    b, n = qv.shape[0], zs.shape[0]
    qn = qv.norm(dim=1)
    best_v = torch.full((b, k), -float("inf"))
    best_i = torch.full((b, k), -1, dtype=torch.int64)
    slot = torch.full((b,), -1, dtype=torch.int64)
    for j in range(bucket_max.numel()):
        active = torch.nonzero(best_v[:, -1] < qn * bucket_max[j]).squeeze(1)
        if active.numel() == 0:
            break  # norms only shrink from here: no later block can enter any top-k
        lo, hi = j * block, min(j * block + block, n)
        sc = qv[active] @ zs[lo:hi].T
        if stats is not None:
            stats["pairs"] = stats.get("pairs", 0) + sc.numel()
        e0, e1 = int(cuts[j]), int(cuts[j + 1])
        if e1 > e0:
            slot[active] = torch.arange(active.numel())
            r = slot[ex_row[e0:e1]]
            keep = r >= 0
            sc[r[keep], ex_pos[e0:e1][keep] - lo] = -float("inf")
            slot[active] = -1
        hit = (sc > best_v[active, -1:]).any(1)  # most rows have no score that enters their top-k
        if not hit.all():
            active, sc = active[hit], sc[hit]
        v, i = sc.topk(min(k, hi - lo), dim=1)
        i = torch.where(torch.isinf(v), -1, i + lo)
        allv, alli = torch.cat([best_v[active], v], 1), torch.cat([best_i[active], i], 1)
        tv, ti = allv.topk(k, dim=1)
        best_v[active], best_i[active] = tv, alli.gather(1, ti)
    return best_v, best_i


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
    from .rundir import Run
    run = run if isinstance(run, Run) else Run.open(run)
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
    from .rundir import Run
    run = run if isinstance(run, Run) else Run.open(run)
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
