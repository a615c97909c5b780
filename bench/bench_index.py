"""Approximate top-k through ``gaescale index`` (FAISS IVF and HNSW) against gaescale's exact scan, in one process.

    python bench/bench_index.py --run runs/demo            # after ./dev demo (770,000 nodes, d = 8)
    python bench/bench_index.py --run runs/demo --full     # and every node, --exclude-existing, both ways

For each run and index kind: the build seconds and file size; on ``--sample`` random query nodes (k = 10) the
recall@10 against the exact ``top_k`` and the queries per second of both, without and with
``--exclude-existing``, at the chosen search breadth and at half and twice it. ``--full`` also times
``topk --exclude-existing`` for all N nodes (``--first M``: the first M) through the index and the exact scan.
The sample's rows include loading and checking the index file at each call (as ``topk --index`` does).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from gaescale import Run
from gaescale.run.index import build_index, indexed_top_k
from gaescale.run.predict import top_k


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    """Mean share of each exact top-k row found: ``(Q, k)`` node indices, ``-1`` padded."""
    return float(np.mean([np.intersect1d(f[f >= 0], e[e >= 0]).size / max(1, (e >= 0).sum())
                          for f, e in zip(found, exact)]))


def timed(f):
    t = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t


def bench_run(path: str, args, tmp: Path) -> list[tuple]:
    run = Run.open(path)
    n, d = run.embeddings.shape
    k = args.k
    q = np.sort(np.random.default_rng(0).choice(n, min(args.sample, n), replace=False))
    graph = run.graph()
    z, metric = run.logits_form()
    label = f"{n:,} x {d}"
    first = np.arange(min(n, args.first or n))  # what topk does: every node, in batches of consecutive nodes
    span = "all nodes" if first.size == n else f"first {first.size:,} nodes"
    rows = []
    exact = {}
    for ex in (False, True):
        (_, exact[ex]), sec = timed(lambda ex=ex: top_k(z, k, queries=q, metric=metric, exclude=graph if ex else None))
        rows.append((label, "exact top_k", "", ex, "", 1.0, q.size / sec))
    for kind in args.kinds.split(","):
        f = tmp / f"{kind}.idx"
        meta, build = timed(lambda kind=kind, f=f: build_index(run, f, kind=kind))
        p = meta["params"]
        chosen = p["nprobe"] if kind == "ivf" else p["ef_search"]
        what = (f"nlist {p['nlist']}" if kind == "ivf" else f"M {p['M']}, efC {p['ef_construction']}")
        name = f"{kind} ({what}; {f.stat().st_size / 2**20:.0f} MiB, built in {build:.1f} s)"
        for breadth in sorted({max(1, chosen // 2), chosen, chosen * 2}):
            for ex in (False, True):
                (_, i), sec = timed(lambda ex=ex, breadth=breadth, f=f: indexed_top_k(
                    run, f, k, queries=q, exclude=graph if ex else None, breadth=breadth))
                tag = ("nprobe " if kind == "ivf" else "efSearch ") + str(breadth) + (" *" if breadth == chosen else "")
                rows.append((label, name, tag, ex, build, recall(i, exact[ex]), q.size / sec))
        if args.full:
            _, sec = timed(lambda f=f: indexed_top_k(run, f, k, queries=first, exclude=graph))
            rows.append((label, name, span, True, build, float("nan"), first.size / sec))
    if args.full:
        _, sec = timed(lambda: top_k(z, k, queries=first, metric=metric, exclude=graph))
        rows.append((label, "exact top_k", span, True, "", 1.0, first.size / sec))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", action="append", help="a run directory (repeat for several); default runs/demo")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--sample", type=int, default=2000, help="random query nodes (default: 2000)")
    ap.add_argument("--kinds", default="ivf,hnsw")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--full", action="store_true", help="also all nodes with --exclude-existing, both ways")
    ap.add_argument("--first", type=int, help="with --full: only the first FIRST nodes (default: all)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import faiss
    faiss.omp_set_num_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in args.run or ["runs/demo"]:
            rows += bench_run(path, args, Path(tmp))
    print(f"\nk = {args.k}, {args.sample:,} random queries, {args.threads} threads; * = the breadth the index chose\n")
    print("| run (N x d) | method | search breadth | --exclude-existing | recall@10 | queries/s | vs exact |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: |")
    base = {(r[0], "nodes" in r[2], r[3]): r[6] for r in rows if r[1] == "exact top_k"}
    for label, name, tag, ex, _, rec, qps in rows:
        ratio = qps / base[(label, "nodes" in tag, ex)]
        shown = "-" if rec != rec else f"{rec:.4f}"
        print(f"| {label} | {name} | {tag} | {'yes' if ex else 'no'} | {shown} | {qps:,.0f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
