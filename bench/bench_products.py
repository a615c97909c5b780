"""The pair and graph products of one full-batch epoch, each against the alternative it replaced or was tried against.

    .venv/bin/python bench/bench_products.py [--nodes 770000,3080000] [--repeats 3]

For each size, the demo's graph (``round(N * 4.6M / 770k)`` edges, nodes numbered as generated) and as many uniform
pairs as an epoch of bench_growth.py draws (``~5.07 N``), in this one process, each timing the fastest of
``--repeats`` after one warm-up:

- the 16-wide GCN product ``A_hat x``: ``torch.sparse.mm`` (zero-fills a result, copies into it) against
  :func:`gaescale.sparse.csr_mm` (``addmm`` straight into a new buffer);
- the pair gradient's column term ``G^T z`` (``z: (N, 10)``): SciPy in one thread against the row ranges on torch's
  threads (what ``_PairDot`` runs);
- the pair logits ``sampled_addmm`` over all pairs at once against the same pairs cut into K column blocks of ``z``.

Prints a Markdown table of seconds; raw results go to bench/results/products-<timestamp>.json.
"""
# ruff: noqa: I001
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import gaescale  # noqa: F401  (before torch: its allocator settings, as in a gaescale run; hence no import sorting)
import torch
from gaescale.cli import demo_edges
from gaescale.data.synthetic import community_graph
from gaescale.graph import Graph
from gaescale.sparse import PairIndex, columns_scipy, csr_mm

BENCH = Path(__file__).resolve().parent


def best(f, repeats: int) -> float:
    f()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


@torch.no_grad()
def logits(p: PairIndex, z: torch.Tensor) -> torch.Tensor:
    return p.logits(z)  # one sampled_addmm


def column_blocks(p: PairIndex, k: int) -> list[PairIndex]:
    """The pairs of ``p`` cut by the column's block of ``N / k`` nodes (each part still sorted by row)."""
    rows, cols = p.rows(), p.cols
    block = cols * k // p.num_nodes
    return [PairIndex.from_pairs(torch.stack([rows[block == b], cols[block == b]]), p.num_nodes) for b in range(k)]


def one(n: int, repeats: int) -> list[tuple[str, float]]:
    g = Graph.from_edge_index(community_graph(n, demo_edges(n), seed=0).edge_index, n)
    a, x = g.gcn_operator.csr, torch.randn(n, 16)
    m = round(5.07 * n)
    pairs = PairIndex.uniform(n, m, torch.Generator().manual_seed(0))
    z, grad = torch.randn(n, 10), torch.randn(m)
    rows = [("A_hat x (16 wide): torch.sparse.mm", best(lambda: torch.sparse.mm(a, x), repeats)),
            ("A_hat x (16 wide): csr_mm", best(lambda: csr_mm(a, x), repeats)),
            ("G^T z (5.07 N pairs): SciPy, 1 thread", best(lambda: columns_scipy(pairs, grad, z, 1), repeats)),
            (f"G^T z: SciPy, {torch.get_num_threads()} row ranges in threads",
             best(lambda: columns_scipy(pairs, grad, z), repeats)),
            ("pair logits (sampled_addmm): all pairs", best(lambda: logits(pairs, z), repeats))]
    for k in (4, 8, 16):
        parts = column_blocks(pairs, k)
        seconds = best(lambda parts=parts: [logits(q, z) for q in parts], repeats)
        rows.append((f"pair logits: {k} column blocks of z", seconds))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", default="770000,3080000", help="comma-separated node counts")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.nodes.split(",")]
    results = {n: one(n, args.repeats) for n in sizes}
    print("| step | " + " | ".join(f"{n:,} nodes, s" for n in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for i, (name, _) in enumerate(results[sizes[0]]):
        print(f"| {name} | " + " | ".join(f"{results[n][i][1]:.3f}" for n in sizes) + " |")
    out = BENCH / "results" / f"products-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({str(n): r for n, r in results.items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
