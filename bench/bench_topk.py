"""Top-k link prediction for every node of a run: gaescale's pruned exact scan against FAISS's exact
inner-product index (IndexFlatIP) and a blocked torch brute force, in one process.

    python bench/bench_topk.py --run runs/demo          # after ./dev demo (770,000 nodes)

FAISS and the brute force run on a random sample of queries (``--sample``) and are extrapolated to
all nodes; gaescale runs on all of them (``--exclude-existing`` as in ``gaescale topk``) and on the same
sample, whose results are checked against FAISS's.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from gaescale import Run
from gaescale.run.scan import top_k


def brute(z: torch.Tensor, q: np.ndarray, k: int, rows: int = 512) -> np.ndarray:
    out = []
    for s in range(0, q.size, rows):
        sc = z[torch.from_numpy(q[s:s + rows])] @ z.T
        sc[torch.arange(sc.shape[0]), torch.from_numpy(q[s:s + rows])] = -float("inf")
        out.append(sc.topk(k, dim=1).values)
    return torch.cat(out).numpy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", default="runs/demo")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--sample", type=int, default=10000)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import faiss
    faiss.omp_set_num_threads(args.threads)
    run = Run.open(args.run)
    z = run.embeddings
    n, k = z.shape[0], args.k
    q = np.sort(np.random.default_rng(0).choice(n, min(args.sample, n), replace=False))
    rows = []

    t = time.perf_counter()
    index = faiss.IndexFlatIP(z.shape[1])
    index.add(z)
    d_faiss, i_faiss = index.search(z[q], k + 1)  # +1: the node itself (usually its own best match)
    t_faiss = time.perf_counter() - t
    rows.append(("faiss IndexFlatIP (exact)", q.size, t_faiss, t_faiss * n / q.size, q.size * n))

    t = time.perf_counter()
    brute(torch.from_numpy(z), q, k)
    t_brute = time.perf_counter() - t
    rows.append(("torch blocked brute force", q.size, t_brute, t_brute * n / q.size, q.size * n))

    stats: dict = {}
    t = time.perf_counter()
    v, _ = top_k(z, k, queries=q, stats=stats)
    t_ours = time.perf_counter() - t
    rows.append(("gaescale top_k", q.size, t_ours, t_ours * n / q.size, stats["pairs"]))
    # FAISS's list without the query itself must score the same
    mask = i_faiss != q[:, None]
    ref = np.stack([d_faiss[r][mask[r]][:k] for r in range(q.size)])
    err = float(np.abs(ref - v).max())

    graph = run.graph()
    stats = {}
    t = time.perf_counter()
    top_k(z, k, exclude=graph, stats=stats)
    t_all = time.perf_counter() - t
    rows.append(("gaescale top_k, all nodes, --exclude-existing", n, t_all, t_all, stats["pairs"]))

    print(f"\n{n:,} nodes, d = {z.shape[1]}, k = {k}, {args.threads} threads; max |score diff| vs FAISS = {err:.2e}\n")
    print(f"| method | queries | seconds | est. seconds for all {n:,} | inner products | share of N x Q |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, nq, sec, est, pairs in rows:
        print(f"| {name} | {nq:,} | {sec:.2f} | {est:.0f} | {pairs:.3e} | {pairs / (nq * n):.2%} |")
    print(f"\nspeed-up over FAISS (all nodes, estimated): {rows[0][3] / t_all:.1f}x")


if __name__ == "__main__":
    main()
