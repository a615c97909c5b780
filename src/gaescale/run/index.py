"""An approximate-nearest-neighbour index of a run's embeddings (FAISS): ``gaescale index`` builds it,
``gaescale topk --index`` answers from it.

The logit of ``(i, j)`` is ``z_i . z_j`` (``--decoder inner``) or ``z_i . z_j + b_i + b_j`` (``--decoder bias``).
For the latter the index holds ``x_j = [z_j, b_j, 1]`` and a query is ``q_i = [z_i, 1, b_i]``, so that
``q_i . x_j`` is the logit itself: the ranking is a maximum-inner-product search (MIPS). Two kinds:

- ``hnsw``: FAISS ``IndexHNSWFlat`` under the inner product directly (graph search on the raw vectors).
- ``ivf``: FAISS ``IndexIVFFlat`` on the vectors made a Euclidean search (Bachrach et al. 2014): the index
  holds ``[x_j, sqrt(R^2 - |x_j|^2)]`` with ``R = max |x_j|``, a query ``[q_i, 0]``; then
  ``|q - x|^2 = |q|^2 + R^2 - 2 q . x`` and the nearest is the largest inner product. k-means cells under
  L2 partition these vectors better than under the inner product (higher recall at the same ``nprobe``).

A directed run (``--directed``) holds ``[z_s | z_t]`` (biases already among the columns): the index holds the
target halves ``z_t_j`` and a query is the source half ``z_s_i``, so a search ranks a node's out-links, as the
exact ``topk`` does, and ``--exclude-existing`` leaves out its out-neighbours.

The candidates the index returns are rescored exactly (the run's own logits), so a returned score is never
approximate: only a missed candidate is. ``exclude`` (``--exclude-existing``) asks the index for ``k + 1 +
degree`` candidates of each query and drops the node itself and its neighbours; a query whose degree makes
that more than :data:`EXACT_ABOVE` goes through the exact scan (:func:`gaescale.run.scan.top_k`) instead.
"""
from __future__ import annotations

import json
import os
import time
import zipfile
import zlib
from pathlib import Path

import numpy as np

from .._version import __version__
from ..errors import InputFileError, OutputError, ParameterError
from ..graph import Graph, data_fingerprint, neighbour_pairs
from ..optional import require
from ..outputs import atomic_write, refused_write
from .rundir import RunDir
from .scan import top_k

KINDS = ("auto", "hnsw", "ivf")
FORMAT = "gaescale-ann-index"
EXACT_ABOVE = 1024  # candidates per query above which the exact scan answers that query


def index_params(n: int, d: int, kind: str = "auto") -> dict:
    """The index chosen for ``n`` vectors of width ``d`` (the embedding width, plus 2 with a bias decoder).

    ivf: ``nlist`` = 4 sqrt(n) k-means cells (at most n / 39: 39 training points each), trained on at most
    64 nlist vectors; ``nprobe`` = max(32, nlist / 100) of them searched (a wider share of the cells for
    ``d > 16``: 64). hnsw: ``M`` = 32 links per node, ``efConstruction`` 100, ``efSearch`` 64 + 16 log2(n / 10^4)
    clamped to [64, 256] (a larger graph needs a wider beam for the same recall), doubled for ``d > 16``.
    ``auto`` is ivf: on the 770,000-node demo run it built 12x faster than hnsw, at a higher recall and query speed
    (BENCHMARKS.md, "Approximate top-k")."""
    if kind not in KINDS:
        raise ParameterError("kind", "index", f"one of {list(KINDS)}", kind)
    wide = 2 if d > 16 else 1
    if kind == "hnsw":
        ef = int(np.clip(64 + 16 * np.log2(max(n, 1) / 1e4), 64, 256))
        return {"kind": "hnsw", "M": 32, "ef_construction": 100, "ef_search": ef * wide}
    nlist = int(max(1, min(4 * np.sqrt(n), n // 39)))
    return {"kind": "ivf", "nlist": nlist, "nprobe": int(min(nlist, max(32 * wide, round(nlist / 100)))),
            "train_size": min(n, 64 * nlist)}


def _faiss():
    """The ``faiss`` module, or a :class:`MissingDependencyError` naming the extra to install."""
    return require("faiss", "a FAISS index (gaescale index, topk --index)")


def _sides(z: np.ndarray, bias: np.ndarray | None, directed: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(x: (N, w), q: (N, w))`` float32 with ``q_i . x_j`` the logit of ``(i, j)``: ``w = d`` or ``d + 2``
    (``directed``: ``z = [z_s | z_t]: (N, 2w)``, ``x = z_t``, ``q = z_s``)."""
    z = np.ascontiguousarray(z, dtype=np.float32)
    if directed:
        h = z.shape[1] // 2
        return np.ascontiguousarray(z[:, h:]), np.ascontiguousarray(z[:, :h])
    if bias is None:
        return z, z
    b, one = bias.astype(np.float32)[:, None], np.ones((z.shape[0], 1), np.float32)
    return np.hstack([z, b, one]), np.hstack([z, one, b])


def _l2_lift(x: np.ndarray, radius2: float) -> np.ndarray:
    """``[x, sqrt(R^2 - |x|^2)]: (N, w + 1)``, every row of length ``R``."""
    return np.hstack([x, np.sqrt(np.maximum(radius2 - (x.astype(np.float64) ** 2).sum(1), 0))[:, None]
                      ]).astype(np.float32)


def fingerprint(run) -> str:
    """A hash of the run's embeddings and node biases (about 0.1 s per 50 MB)."""
    return data_fingerprint(run.embeddings, run.node_bias)


def _check_out(path) -> Path:
    p = Path(path)
    if p.is_dir():
        raise OutputError(f"{p}: is a directory; --out names the index file to write.")
    parent = next((a for a in p.absolute().parents if a.exists()), Path("."))
    if not parent.is_dir():
        raise OutputError(f"{p}: cannot create the file: {parent} is not a directory.")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"{p}: cannot create the file under {parent} (no write permission).")
    exc = refused_write(parent)  # a file system that refuses files is found before the index is built
    if exc is not None:
        raise OutputError(f"{p}: cannot create the file: {parent} refused a test file ({exc.strerror or exc}).")
    return p


def _decoder_of(run) -> str:
    if run.directed:
        return "directed"
    if run.decoder == "hadamard":
        raise ParameterError("decoder", "index", "'bias' or 'inner' (a bilinear decoder, which an inner-product index "
                                                 "ranks); score candidate pairs of this hadamard run with "
                                                 "'gaescale score'", "hadamard")
    return "inner" if run.node_bias is None else "bias"


def build_index(run, out, *, kind: str = "auto", log=None) -> dict:
    """``gaescale index``: a FAISS index of the run's embeddings (module docstring), written atomically to ``out``
    with what :func:`load_index` checks it against: the run's node count, width, decoder and :func:`fingerprint`.
    Returns the file's metadata (with ``build_seconds``)."""
    from .writer import refuse_run_file
    faiss = _faiss()  # before anything is read or written
    run = RunDir.of(run)
    out = _check_out(out)
    refuse_run_file(out, inputs=(run.path,))
    decoder = _decoder_of(run)
    x, _ = _sides(run.embeddings, run.node_bias, run.directed)
    n, d = run.embeddings.shape
    params = index_params(n, x.shape[1], kind)
    t = time.perf_counter()
    if params["kind"] == "hnsw":
        index = faiss.IndexHNSWFlat(x.shape[1], params["M"], faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = params["ef_construction"]
        index.add(x)
    else:
        radius2 = float((x.astype(np.float64) ** 2).sum(1).max()) if n else 0.0
        params["radius2"] = radius2
        xl = _l2_lift(x, radius2)
        index = faiss.IndexIVFFlat(faiss.IndexFlatL2(xl.shape[1]), xl.shape[1], params["nlist"], faiss.METRIC_L2)
        sample = np.random.default_rng(0).choice(n, params["train_size"], replace=False)
        index.cp.min_points_per_centroid = 1  # nlist <= n / 39 already; FAISS would warn below 39 per cell
        index.train(xl[np.sort(sample)])
        index.add(xl)
    seconds = time.perf_counter() - t
    meta = {"format": FORMAT, "version": 1, "num_nodes": int(n), "dim": int(d), "decoder": decoder,
            "fingerprint": fingerprint(run), "run": str(run.path.resolve()), "params": params,
            "build_seconds": round(seconds, 3), "faiss_version": faiss.__version__, "gaescale_version": __version__}
    blob = faiss.serialize_index(index)
    head = json.dumps(meta).encode()
    atomic_write(out, lambda fh: np.savez(fh, meta=np.frombuffer(head, np.uint8), index=blob))
    if log:
        log(f"wrote {out}: {params['kind']} index of {n:,} nodes (d = {d}, decoder {decoder}) in {seconds:.1f}s")
        if (run.path / "config.json").is_file() and run.config().get("structure") == "on":
            log("the index approximates the embeddings' part of the logit; topk --index adds the structural part "
                "(common neighbours, Adamic-Adar, resource allocation) of each node's two-hop candidates exactly")
    return meta


def load_index(path, run):
    """``(faiss index, metadata)`` of an index file, refused unless it was built from ``run``'s embeddings now."""
    p = Path(path)
    if not p.is_file():
        raise InputFileError(p, "no such file." if not p.exists() else "is a directory, expected an index file.")
    not_index = "not a gaescale index (expected a file written by 'gaescale index RUN --out FILE')"
    rebuild = f"rebuild it with 'gaescale index {run.path} --out {p}'"
    try:
        f = np.load(p, allow_pickle=False)
        if not isinstance(f, np.lib.npyio.NpzFile):  # an .npy array
            raise ValueError(p)
        with f:
            meta, blob = json.loads(f["meta"].tobytes()), f["index"]
    except (zipfile.BadZipFile, zlib.error):  # a zip archive, cut short (a copy that stopped) or damaged
        raise InputFileError(p, f"not a readable gaescale index (truncated or damaged): {rebuild}.") from None
    except (ValueError, OSError, EOFError, KeyError, UnicodeDecodeError, AttributeError):
        raise InputFileError(p, f"{not_index}.") from None
    keys = {"format", "num_nodes", "dim", "decoder", "fingerprint", "run", "params"}
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or not keys <= meta.keys() or blob.dtype != np.uint8:
        raise InputFileError(p, f"{not_index}.")
    n, d = run.embeddings.shape
    if (meta["num_nodes"], meta["dim"]) != (n, d) or meta["decoder"] != _decoder_of(run):
        raise InputFileError(p, f"is the index of another run ({meta['num_nodes']:,} nodes, d = {meta['dim']}, "
                                f"decoder {meta['decoder']}, built from {meta['run']}); {run.path} has {n:,} nodes, "
                                f"d = {d}, decoder {_decoder_of(run)}: {rebuild}.")
    if meta["fingerprint"] != fingerprint(run):
        raise InputFileError(p, f"was built from other embeddings than {run.path / 'embeddings.npy'} holds now (the "
                                f"run was retrained since, or the index is of another run, {meta['run']}): {rebuild}.")
    try:
        index = _faiss().deserialize_index(blob)
    except RuntimeError:
        raise InputFileError(p, f"{not_index}: its FAISS part does not load.") from None
    return index, meta


def _search(index, params: dict, q: np.ndarray, kk: int) -> np.ndarray:
    """Up to ``kk`` candidates ``(Q, kk)`` int64 (-1 where none) of the query vectors ``q: (Q, w)``."""
    faiss = _faiss()
    if params["kind"] == "hnsw":
        sp = faiss.SearchParametersHNSW(efSearch=max(params["ef_search"], kk))
    else:
        q = np.hstack([q, np.zeros((q.shape[0], 1), np.float32)])
        sp = faiss.SearchParametersIVF(nprobe=params["nprobe"])
    return index.search(np.ascontiguousarray(q), kk, params=sp)[1]


def _rescore(zl, zq, q: np.ndarray, cand: np.ndarray, k: int, exclude: Graph | None, n: int):
    """The ``k`` best of the candidates ``cand: (Q, c)`` of the queries ``q: (Q,)`` by their exact logits
    ``zq[q] . zl[cand]``, without the query itself and (``exclude``) its neighbours: ``(Q, k)`` scores, nodes."""
    bad = (cand < 0) | (cand == q[:, None])
    if exclude is not None:
        rows, nbr = neighbour_pairs(exclude, q)
        bad |= np.isin(np.arange(q.size)[:, None] * n + cand, rows * n + nbr)
    c = np.where(bad, 0, cand)
    s = (zq[q][:, None, :] * zl[c]).sum(-1)
    s[bad] = -np.inf
    top = np.argsort(-s, axis=1, kind="stable")[:, :k]
    v, i = np.take_along_axis(s, top, 1), np.take_along_axis(c, top, 1)
    i[np.isneginf(v)] = -1
    if v.shape[1] < k:
        pad = k - v.shape[1]
        v, i = np.pad(v, ((0, 0), (0, pad)), constant_values=-np.inf), np.pad(i, ((0, 0), (0, pad)), constant_values=-1)
    return v.astype(np.float32), i.astype(np.int64)


def indexed_top_k(run, index_file, k: int, *, queries: np.ndarray | None = None, exclude: Graph | None = None,
                  stats: dict | None = None, breadth: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`gaescale.run.scan.top_k` of the run's logits through the index in ``index_file``: ``scores: (Q, k)``
    float32 (exact logits of the candidates found), ``nodes: (Q, k)`` int64, best first, ``-inf`` / ``-1`` padded.
    ``queries: (Q,)`` node indices (default: all). ``breadth`` replaces the file's ``nprobe`` (ivf) or ``efSearch``
    (hnsw): higher is slower and finds more. ``stats["exact"]`` counts the queries the exact scan answered."""
    _faiss()  # before the run is read
    run = RunDir.of(run)
    index, meta = load_index(index_file, run)
    params = dict(meta["params"])
    if breadth is not None:
        if not isinstance(breadth, (int, np.integer)) or isinstance(breadth, bool) or breadth < 1:
            raise ParameterError("breadth", "indexed_top_k", "an int >= 1", breadth)
        params["nprobe" if params["kind"] == "ivf" else "ef_search"] = int(breadth)
    n = run.embeddings.shape[0]
    x, qside = _sides(run.embeddings, run.node_bias, run.directed)
    q_all = np.arange(n) if queries is None else np.asarray(queries, np.int64)
    need = k + 1 + (exclude.degree[q_all] if exclude is not None else 0)
    need = np.broadcast_to(need, q_all.shape)
    scores = np.full((q_all.size, k), -np.inf, np.float32)
    nodes = np.full((q_all.size, k), -1, np.int64)
    exact = need > EXACT_ABOVE
    if exact.any():
        zl, metric, targets = run.ranking_form()
        scores[exact], nodes[exact] = top_k(zl, k, queries=q_all[exact], exclude=exclude, metric=metric,
                                            targets=targets)
    kk = np.maximum(16, 2 ** np.ceil(np.log2(np.maximum(need, 1))).astype(np.int64))
    for width in np.unique(kk[~exact]):
        sel = np.nonzero((kk == width) & ~exact)[0]
        step = max(1, (1 << 21) // int(width))  # queries per batch: about 2M candidates rescored at once
        for s in range(0, sel.size, step):
            r = sel[s:s + step]
            cand = _search(index, params, qside[q_all[r]], int(min(width, n)))
            scores[r], nodes[r] = _rescore(x, qside, q_all[r], cand, k, exclude, n)
    if stats is not None:
        stats["exact"] = stats.get("exact", 0) + int(exact.sum())
    return scores, nodes
