"""Graphs larger than memory: ``gaescale prepare EDGES --out DIR`` converts an edge list, chunk by chunk,
into a directory that :func:`open_prepared` maps back without reading it::

    graph.json    format, version, num_nodes, num_edges, source, cleaning counts, features
    indptr.npy    (N + 1,) int64    } the undirected graph as a symmetric CSR (both directions, rows
    indices.npy   (2E,) int32/int64 } sorted, no self loops, no duplicates): memory-mapped when trained
    nodes.tsv     the original id of each node index, one per line
    x.npy         (N, F) float32 features (with --features, or an .npz's 'x')

Memory while converting is O(N) for the id map and degrees plus O(chunk) for the edges in flight; the
edges themselves go through temporary files in DIR: (1) read the ids (sorted integers, or sorted strings);
(2) map each chunk to indices, drop self loops, append the ``u < v`` pair keys to a file and count the
degrees; (3) scatter both directions into row-range buckets of at most ``chunk`` entries (ranges from
the degrees); (4) sort and deduplicate each bucket; (5) copy the buckets, in row order, into
``indices.npy``. The directory appears (by rename) only when complete.

The work happens in a staging directory beside DIR, ``.DIR.<random>.partial``, whose ``owner`` file names the
process (host, pid, start time); a prepare killed outright (SIGKILL, a lost machine) leaves it behind, and the
next ``prepare`` of the same DIR removes it once that process is gone (never one of a live process).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import GraphError, InputFileError, OutputError, ParameterError
from ..graph import CleanStats, Graph, row_ranges, sorted_unique
from ..outputs import owner_alive, this_process, write_ids
from .chunks import EdgeChunks
from .order import METHODS, inverse, locality_order
from .readers import EdgeList, check_file, check_node_count

FORMAT, VERSION = "gaescale-csr", 1


@dataclass
class Prepared:
    """A prepared graph directory, memory-mapped: ``graph`` (its arrays are ``np.memmap``), ``x`` (``(N, F)``
    float32 memmap or None), and the manifest."""

    path: Path
    graph: Graph
    x: np.ndarray | None
    manifest: dict

    @property
    def ids_file(self) -> Path:
        return self.path / "nodes.tsv"


def is_prepared(path) -> bool:
    return path is not None and Path(path).is_dir() and (Path(path) / "graph.json").is_file()


def open_prepared(path) -> Prepared:
    """Map a directory written by :func:`prepare`; reads only its manifest."""
    p = Path(path)
    try:
        manifest = json.loads((p / "graph.json").read_text())
    except (OSError, ValueError) as exc:
        raise InputFileError(p / "graph.json",
                             f"not a prepared graph's manifest ({exc}); run 'gaescale prepare'.") from None
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise InputFileError(p / "graph.json", f"expected format {FORMAT!r} version {VERSION}. Got "
                             f"{manifest.get('format')!r} version {manifest.get('version')!r}; prepare the graph "
                             "again.")
    arrays = {}
    for name in ("indptr", "indices"):
        try:
            arrays[name] = np.load(p / f"{name}.npy", mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise InputFileError(p / f"{name}.npy",
                                 f"missing or unreadable ({exc}); prepare the graph again.") from None
    n = int(manifest["num_nodes"])
    if arrays["indptr"].shape != (n + 1,) or arrays["indices"].shape != (int(arrays["indptr"][-1]),):
        raise InputFileError(p, f"indptr.npy/indices.npy do not match graph.json ({n:,} nodes); "
                                "prepare the graph again.")
    s = manifest.get("stats")
    stats = CleanStats(**s) if s else None
    x = np.load(p / "x.npy", mmap_mode="r") if (p / "x.npy").is_file() else None
    return Prepared(p, Graph(arrays["indptr"], arrays["indices"], n, stats), x, manifest)


def origin(edges, features=None, *, ids: str = "auto", header: str = "auto") -> dict:
    """What a run's own prepared copy of an edge list was made from (see :mod:`gaescale.inputs`): each file's
    resolved path, size and modification time, and the options that read them."""
    def stat(path):
        s = check_file(path).resolve().stat()
        return [str(Path(path).resolve()), s.st_size, s.st_mtime_ns]
    return {"edges": stat(edges), "features": None if features is None else stat(features), "ids": ids,
            "header": header}


def prepare(edges, out, *, ids: str = "auto", header: str = "auto", features=None, chunk: int = 1 << 24,
            order: str | None = None, log: Callable[[str], None] | None = None,
            made_from: dict | None = None) -> Prepared:
    """Convert the edge list ``edges`` into the prepared directory ``out`` (see the module's docstring).
    ``chunk``: edge rows read at once, and entries per bucket; memory is about ``40 * chunk`` bytes
    plus ``O(N)``. ``order``: number the nodes in this locality order (:func:`gaescale.data.order.locality_order`;
    None: by id), so that neighbours lie close in memory; ``nodes.tsv`` then lists the ids in that order, and
    the order's own memory comes on top (``community``: 16 bytes per CSR entry). ``made_from`` (:func:`origin`),
    kept in the manifest, marks a run's own copy."""
    log = log or (lambda m: None)
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ParameterError("chunk", "prepare", "an int >= 1", chunk)
    if order is not None and order not in METHODS:
        raise ParameterError("order", "prepare", "None or one of " + ", ".join(map(repr, METHODS)), order)
    out = Path(out)
    if out.exists():
        raise OutputError(f"{out}: already exists; 'gaescale prepare' writes a new directory (remove it or "
                          "choose another --out).")
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(out, log)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    try:
        (work / OWNER).write_text(json.dumps(this_process()) + "\n")
        t = time.perf_counter()
        reader = EdgeChunks(edges, ids=ids, header=header, rows=chunk)
        node_ids, n = _node_ids(reader)
        x = None
        if features is not None or reader.x is not None:
            node_ids, n, x = _features(reader, node_ids, n, features)
        log(f"read the ids of {reader.path}: {n:,} nodes ({reader.kind} ids) [{time.perf_counter() - t:.1f}s]")
        t = time.perf_counter()
        rows, loops, raw_deg = _pair_keys(reader, node_ids, n, work / "keys.bin")
        bounds = row_ranges(np.concatenate([[0], np.cumsum(raw_deg)]), chunk)  # buckets of <= chunk entries
        del raw_deg
        _scatter(work / "keys.bin", n, bounds, work, chunk)
        deg = _dedup_buckets(work, n, bounds)
        indices = _concat_buckets(work, n, bounds, deg)
        unique = int(indices.size // 2)
        stats = CleanStats(rows=rows, self_loops=loops, duplicates=rows - loops - unique)
        log(f"built the CSR: {stats.describe()} [{time.perf_counter() - t:.1f}s]")
        if unique == 0:
            raise GraphError(f"{reader.path} has no edges left after removing self loops and duplicates.")
        indptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
        node_ids = np.arange(n) if node_ids is None else node_ids
        if order is not None:
            t = time.perf_counter()
            perm = locality_order(indptr, indices, n, order)
            del indices
            indptr = renumber_csr(work, indptr, perm, chunk)
            node_ids, x = node_ids[perm], None if x is None else x[perm]
            log(f"numbered the nodes in {order} order [{time.perf_counter() - t:.1f}s]")
        np.save(work / "indptr.npy", indptr)
        write_ids(work / "nodes.tsv", node_ids)
        if x is not None:
            np.save(work / "x.npy", x)
        manifest = dict(format=FORMAT, version=VERSION, num_nodes=n, num_edges=unique, source=str(reader.path),
                        ids=reader.kind, features=None if x is None else int(x.shape[1]), order=order,
                        stats=dict(rows=stats.rows, self_loops=stats.self_loops, duplicates=stats.duplicates),
                        **({} if made_from is None else {"origin": made_from}))
        (work / "graph.json").write_text(json.dumps(manifest, indent=2) + "\n")
        (work / OWNER).unlink()
        os.replace(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return open_prepared(out)


OWNER = "owner"  # in a staging directory: the process writing it (this_process)
STALE_UNOWNED_S = 60  # a staging directory without an owner file this old was left by a process killed at once


def remove_stale(out: Path, log: Callable[[str], None]) -> None:
    """Remove the staging directories of ``out`` left by a ``prepare`` that was killed (SIGKILL, a lost machine):
    those whose owner process is gone, never one of a live process."""
    prefix = f".{out.name}."
    for work in sorted(out.parent.iterdir()):  # not glob: a name may hold '[' or '*'
        if not (work.name.startswith(prefix) and work.name.endswith(".partial") and work.is_dir()):
            continue
        try:
            owner = json.loads((work / OWNER).read_text())
        except FileNotFoundError:  # killed between creating it and naming itself, or an older version's
            owner = None
            if time.time() - work.stat().st_mtime < STALE_UNOWNED_S:
                continue
        except (OSError, ValueError):
            continue
        if owner is not None and owner_alive(owner):
            continue
        shutil.rmtree(work, ignore_errors=True)
        who = f"process {owner['pid']}" if owner is not None else "a process"
        log(f"removed {work}, left by an unfinished 'gaescale prepare' ({who}, no longer running)")


def _node_ids(reader: EdgeChunks) -> tuple[np.ndarray | None, int]:
    """Pass 1: the sorted distinct ids (None for node indices) and the node count."""
    if reader.kind == "index":
        hi, rows = -1, 0
        for u, v in reader:
            hi, rows = max(hi, int(u.max()), int(v.max())), rows + u.size
        n = reader.num_nodes if reader.num_nodes is not None else hi + 1
        if hi >= n:
            raise InputFileError(reader.path, f"node index {hi} is out of range for num_nodes={n}.")
        check_node_count(reader.path, n, rows, inferred=reader.num_nodes is None)
        return None, n
    parts, size, uniq = [], 0, None
    for u, v in reader:
        parts.append(_distinct(np.concatenate([u, v])))
        size += parts[-1].size
        if uniq is None or size > 2 * uniq.size + (1 << 20):  # merge now and then: memory stays O(N)
            uniq = _distinct(np.concatenate(([uniq] if uniq is not None else []) + parts))
            parts, size = [], 0
    uniq = _distinct(np.concatenate([uniq] + parts))
    if reader.kind == "str":
        if uniq.size and uniq[0] == "":  # sorted: an empty id (only whitespace) comes first
            raise InputFileError(reader.path, "missing node id (only whitespace).")
        bad = next((s for s in uniq if "\t" in s or "\n" in s or "\r" in s), None)
        if bad is not None:
            raise InputFileError(reader.path, f"node id {bad!r} contains a tab or line break; ids must be "
                                              "single-line text.")
    return uniq, int(uniq.size)


def _distinct(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values of int64 ids, or of str ids (object arrays, through Arrow's hashing)."""
    if a.dtype != object:
        return sorted_unique(a)
    import pyarrow as pa
    import pyarrow.compute as pc
    u = pc.unique(pa.array(a, pa.large_string()))
    return np.asarray(u.take(pc.sort_indices(u)).to_numpy(zero_copy_only=False), dtype=object)


def _features(reader: EdgeChunks, node_ids, n: int, path) -> tuple[np.ndarray | None, int, np.ndarray]:
    """Align features with the nodes: feature rows for ids without edges add isolated nodes at the end
    (a .npy matrix with integer ids makes index == id, as 'gaescale train' does)."""
    if path is None:
        return node_ids, n, np.ascontiguousarray(reader.x, np.float32)
    from .features import attach_features
    el = attach_features(EdgeList(np.zeros((2, 0), np.int64), n, node_ids, source=str(reader.path)), path)
    return el.node_ids, el.num_nodes, np.ascontiguousarray(el.x, np.float32)


def _pair_keys(reader: EdgeChunks, node_ids, n: int, path: Path) -> tuple[int, int, np.ndarray]:
    """Pass 2: each chunk mapped to indices; the ``u * N + v`` keys (``u < v``) of its non-loop rows appended
    to ``path`` as int64. Returns the rows read, the self loops and the degree of each node counting repeats."""
    import pandas as pd
    index = None if node_ids is None else pd.Index(node_ids)
    rows = loops = 0
    deg = np.zeros(n, np.int64)
    with open(path, "wb") as fh:
        for u, v in reader:
            if index is not None:
                u, v = index.get_indexer(u), index.get_indexer(v)
                if min(u.min(initial=0), v.min(initial=0)) < 0:
                    raise InputFileError(reader.path, "an id appeared that the first pass did not see; was the "
                                                      "file changed while it was being prepared?")
            rows += u.size
            keep = u != v
            loops += int(u.size - keep.sum())
            u, v = u[keep].astype(np.int64), v[keep].astype(np.int64)
            deg += np.bincount(u, minlength=n) + np.bincount(v, minlength=n)
            (np.minimum(u, v) * np.int64(n) + np.maximum(u, v)).tofile(fh)
    return rows, loops, deg


def _bucket(work: Path, b: int) -> Path:
    return work / f"bucket-{b:05d}.bin"


def _scatter(keys_path: Path, n: int, bounds: np.ndarray, work: Path, chunk: int) -> None:
    """Pass 3: both directions of every key into the bucket file of its row range (keys ``row * N + col``)."""
    keys = np.memmap(keys_path, np.int64, "r") if keys_path.stat().st_size else np.zeros(0, np.int64)
    files = [open(_bucket(work, b), "wb") for b in range(bounds.size - 1)]
    try:
        nn = np.int64(n)
        for start in range(0, keys.size, max(1, chunk // 2)):
            k = np.asarray(keys[start:start + max(1, chunk // 2)])
            u, v = k // nn, k % nn
            rows, both = np.concatenate([u, v]), np.concatenate([k, v * nn + u])
            which = np.searchsorted(bounds, rows, side="right") - 1
            order = np.argsort(which, kind="stable")
            cuts = np.searchsorted(which[order], np.arange(bounds.size))
            for b in np.flatnonzero(np.diff(cuts)):
                both[order[cuts[b]:cuts[b + 1]]].tofile(files[b])
    finally:
        for f in files:
            f.close()
    del keys
    keys_path.unlink()


def _dedup_buckets(work: Path, n: int, bounds: np.ndarray) -> np.ndarray:
    """Pass 4: each bucket sorted and deduplicated, rewritten as its column indices; returns the degrees."""
    deg = np.zeros(n, np.int64)
    dtype = np.int32 if n < 2**31 else np.int64
    for b in range(bounds.size - 1):
        keys = sorted_unique(np.fromfile(_bucket(work, b), np.int64))
        deg[bounds[b]:bounds[b + 1]] = np.bincount(keys // n - bounds[b], minlength=int(bounds[b + 1] - bounds[b]))
        (keys % n).astype(dtype).tofile(_bucket(work, b))
    return deg


def _concat_buckets(work: Path, n: int, bounds: np.ndarray, deg: np.ndarray) -> np.ndarray:
    """Pass 5: the buckets, in row order, into ``indices.npy`` (returned memory-mapped)."""
    dtype = np.int32 if n < 2**31 else np.int64
    indices = np.lib.format.open_memmap(work / "indices.npy", "w+", dtype, (int(deg.sum()),))
    pos = 0
    for b in range(bounds.size - 1):
        cols = np.fromfile(_bucket(work, b), dtype)
        indices[pos:pos + cols.size] = cols
        pos += cols.size
        _bucket(work, b).unlink()
    indices.flush()
    return indices


def renumber_csr(work: Path, indptr: np.ndarray, perm: np.ndarray, chunk: int) -> np.ndarray:
    """Rewrite ``work/indices.npy`` (the CSR of row pointer ``indptr: (N + 1,)``) with node ``i`` renamed
    ``inverse(perm)[i]`` (new node ``j`` is old node ``perm[j]``), rows sorted; returns the new row pointer.
    Streams ``chunk`` entries of new rows at a time: memory O(chunk) plus 24 bytes per node."""
    old = np.load(work / "indices.npy", mmap_mode="r")
    inv = inverse(perm)
    deg = np.diff(indptr)[perm]
    new_indptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    new = np.lib.format.open_memmap(work / "indices.new.npy", "w+", old.dtype, old.shape)
    bounds = row_ranges(new_indptr, chunk)
    for a, b in zip(bounds[:-1], bounds[1:]):
        lengths = deg[a:b]
        total = int(lengths.sum())
        offsets = np.repeat(indptr[perm[a:b]] - (new_indptr[a:b] - new_indptr[a]), lengths)
        cols = inv[np.asarray(old[offsets + np.arange(total)])]
        rows = np.repeat(np.arange(b - a), lengths)
        new[new_indptr[a]:new_indptr[b]] = cols[np.lexsort((cols, rows))].astype(old.dtype)
    new.flush()
    del new, old
    os.replace(work / "indices.new.npy", work / "indices.npy")
    return new_indptr
