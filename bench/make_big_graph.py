"""A community graph of the demo's kind at any size, written to disk block by block: never the whole graph in memory.

    .venv/bin/python bench/make_big_graph.py --nodes 100000000 --edges 1000000000 --out /work/big/graph

writes ``OUT/edges.npy`` (rows x 2, int32 node indices; self loops and repeated pairs left in, for ``gaescale
prepare`` to drop, as a real edge dump would hold them) and ``OUT/x.npy`` ((N, 8) float32 features). The model is
that of :func:`gaescale.data.synthetic.community_graph` (communities of ~100 nodes numbered in random order,
log-normal activity, 80 % of a node's links inside its community, the rest to nodes drawn by activity, features a
community centroid plus noise), drawn by source block instead of edge by edge: node ``u`` starts
``Poisson(rows * a_u / sum(a))`` rows, so nothing of size E is ever held. Memory is O(N) (about 25 bytes per node)
plus one block's rows. ``--edges`` is the number of rows drawn; the unique undirected edges ``prepare`` keeps are a
few per cent fewer (repeats inside a community).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

BLOCK = 1 << 20  # source nodes per block


def generate(num_nodes: int, rows: int, out: Path, *, num_features: int = 8, community_size: int = 100,
             p_in: float = 0.8, noise: float = 1.0, seed: int = 0) -> int:
    """Write ``out/edges.npy`` and ``out/x.npy``; returns the number of edge rows written."""
    rng = np.random.default_rng(seed)
    n_comm = max(1, num_nodes // community_size)
    comm = rng.integers(0, n_comm, num_nodes, dtype=np.int32)
    members = np.argsort(comm, kind="stable").astype(np.int32)
    start = np.zeros(n_comm + 1, np.int64)
    np.cumsum(np.bincount(comm, minlength=n_comm), out=start[1:])
    activity = rng.lognormal(0.0, 1.0, num_nodes).astype(np.float32)
    cum = np.cumsum(activity, dtype=np.float64)
    lam = activity * np.float32(rows / cum[-1])
    counts = rng.poisson(lam).astype(np.int32)
    del lam
    total = int(counts.sum(dtype=np.int64))
    edges = np.lib.format.open_memmap(out / "edges.npy.partial", "w+", np.int32, (total, 2))
    at = 0
    for b in range(0, num_nodes, BLOCK):
        c = counts[b:b + BLOCK]
        u = np.repeat(np.arange(b, b + c.size, dtype=np.int32), c)
        m = u.size
        cu = comm[u]
        lo = start[cu]
        inside = members[lo + (rng.random(m) * (start[cu + 1] - lo)).astype(np.int64)]
        draws = np.sort(rng.random(m) * cum[-1])  # sorted: searchsorted walks the table in order
        outside = np.minimum(np.searchsorted(cum, draws), num_nodes - 1).astype(np.int32)[rng.permutation(m)]
        edges[at:at + m, 0] = u
        edges[at:at + m, 1] = np.where(rng.random(m) < p_in, inside, outside)
        at += m
    edges.flush()
    del edges
    centroids = rng.normal(0.0, 1.0, (n_comm, num_features)).astype(np.float32)
    x = np.lib.format.open_memmap(out / "x.npy.partial", "w+", np.float32, (num_nodes, num_features))
    for b in range(0, num_nodes, BLOCK):
        k = min(BLOCK, num_nodes - b)
        x[b:b + k] = centroids[comm[b:b + k]] + noise * rng.normal(0.0, 1.0, (k, num_features)).astype(np.float32)
    x.flush()
    del x
    (out / "edges.npy.partial").rename(out / "edges.npy")
    (out / "x.npy.partial").rename(out / "x.npy")
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--edges", type=int, required=True, help="edge rows to draw")
    ap.add_argument("--out", type=Path, required=True, help="a new directory")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.nodes >= 2**31:
        sys.exit("--nodes must be below 2**31 (int32 indices)")
    args.out.mkdir(parents=True, exist_ok=False)
    t = time.perf_counter()
    total = generate(args.nodes, args.edges, args.out, seed=args.seed)
    print(f"{total:,} edge rows and {args.nodes:,} x 8 features written to {args.out} "
          f"[{time.perf_counter() - t:.1f}s]", file=sys.stderr)


if __name__ == "__main__":
    main()
