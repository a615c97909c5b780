"""Does node order matter for the sparse products? The GCN operator of the demo graph (nodes numbered
by a random permutation) against the same graph renumbered by reverse Cuthill-McKee, one 16-wide
product each, in one process.

    .venv/bin/python bench/bench_order.py --nodes 2000000 --num-edges 12000000
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from scipy.sparse.csgraph import reverse_cuthill_mckee

from gaescale.data.synthetic import community_graph
from gaescale.graph import Graph


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=2_000_000)
    ap.add_argument("--num-edges", type=int, default=12_000_000)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    d = community_graph(args.nodes, args.num_edges, seed=0)
    g = Graph.from_edge_index(d.edge_index, d.num_nodes)
    t = time.perf_counter()
    perm = reverse_cuthill_mckee(g.adjacency(), symmetric_mode=True)
    rcm_seconds = time.perf_counter() - t
    inverse = np.empty(d.num_nodes, np.int64)
    inverse[perm] = np.arange(d.num_nodes)
    reordered = Graph.from_edge_index(inverse[d.edge_index], d.num_nodes)
    x = torch.randn(d.num_nodes, args.width)
    rows = []
    for name, graph in (("random (as generated)", g), ("reverse Cuthill-McKee", reordered)):
        op = graph.gcn_operator
        op @ x  # warm up
        t = time.perf_counter()
        for _ in range(args.repeats):
            op @ x
        rows.append((name, (time.perf_counter() - t) / args.repeats))
    print(f"\n{args.nodes:,} nodes, {args.num_edges:,} edges, width {args.width}; RCM took {rcm_seconds:.1f} s\n")
    print("| node order | s per product | speed-up |\n|---|---:|---:|")
    for name, sec in rows:
        print(f"| {name} | {sec:.3f} | {rows[0][1] / sec:.2f}x |")


if __name__ == "__main__":
    main()
