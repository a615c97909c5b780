"""The exact filtered ranking with the structural part (what validation, calibration, evaluation and ``topk`` run),
timed on the graphs of ``bench_defaults.py``.

    .venv/bin/python bench/bench_rank_structure.py --graphs facebook,hk-50k,enron --positives 500

Each graph is the whole training graph; ``z`` is random ``(N, 16)`` (seed 0), the structural weights fixed
(CN 2.0, AA 1.5, RA 1.0), and ``--positives`` of its edges drawn with seed 0 are ranked against every node with the
graph's edges filtered, as a run's held-out ranking. Prints seconds and the ranking's figures per graph, so that two
commits (one through ``PYTHONPATH=WORKTREE/src``) give the same ranks and their times side by side.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from bench_defaults import load
from gaescale.graph import Graph
from gaescale.structure import StructuralScores
from gaescale.training.evaluate import filtered_ranking


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--graphs", default="facebook,hk-50k,enron")
    ap.add_argument("--positives", type=int, default=500)
    args = ap.parse_args()
    print("| graph | nodes | edges | seconds | filtered MRR | Hits@10 |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in args.graphs.split(","):
        data = load(name, args.data)
        g = Graph.from_edge_index(data.edge_index, data.num_nodes, canonical=True)
        z = torch.randn(g.num_nodes, 16, generator=torch.Generator().manual_seed(0))
        st = StructuralScores(g, torch.tensor([2.0, 1.5, 1.0]))
        pick = np.random.default_rng(0).choice(data.edge_index.shape[1], args.positives, replace=False)
        t = time.perf_counter()
        r = filtered_ranking(z, data.edge_index[:, pick], [g], structure=st)
        print(f"| {name} | {g.num_nodes:,} | {g.num_edges:,} | {time.perf_counter() - t:.2f} | "
              f"{r['filtered_mrr']:.5f} | {r['filtered_hits@10']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
