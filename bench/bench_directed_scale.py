"""Directed training at the demo's scale: seconds per epoch and peak memory of ``--directed`` (symmetric part off
and on) against the undirected default on the same graph, each in its own process.

    .venv/bin/python bench/bench_directed_scale.py [--nodes 770000] [--num-edges 4600000] [--epochs 5]
                                                   [--reciprocated 0.2]

The graph: the demo's community graph (8 features), each undirected edge given a random direction and reversed
too with probability ``--reciprocated`` (so ``auto`` would switch the symmetric part on from 0.1). The same edges,
the default encoder for 8 features (GCN 32 -> 16), sampled dense term, ``--epochs`` epochs, evaluation at the end
only. Prints one table: s/epoch (median), peak RSS, test AUC and the ratio to the undirected run.
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

CASES = {"undirected": [], "--directed --directed-symmetric off": ["--directed", "--directed-symmetric", "off"],
         "--directed --directed-symmetric on": ["--directed", "--directed-symmetric", "on"]}


def make_graph(path: Path, nodes: int, num_edges: int, reciprocated: float) -> int:
    """Write the directed edge list and features as one .npz; returns its number of directed edges."""
    import gaescale
    g = gaescale.community_graph(nodes, num_edges, seed=0)
    rng = np.random.default_rng(0)
    ei = g.edge_index
    flip = rng.random(ei.shape[1]) < 0.5
    ei = np.where(flip, ei[::-1], ei)
    back = rng.random(ei.shape[1]) < reciprocated
    ei = np.concatenate([ei, ei[::-1, back]], axis=1)
    np.savez(path, edge_index=ei, x=g.x, num_nodes=nodes)
    return int(ei.shape[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=770_000)
    ap.add_argument("--num-edges", type=int, default=4_600_000)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--reciprocated", type=float, default=0.2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        edges = Path(tmp) / "g.npz"
        e = make_graph(edges, args.nodes, args.num_edges, args.reciprocated)
        print(f"machine: {platform.machine()}, {args.threads} threads; {args.nodes:,} nodes, {e:,} directed edges "
              f"({args.reciprocated:.0%} reversed too), {args.epochs} epochs")
        rows = {}
        for name, flags in CASES.items():
            out = Path(tmp) / name.replace(" ", "_")
            cmd = [sys.executable, "-m", "gaescale", "train", str(edges), "--out", str(out), "--epochs",
                   str(args.epochs), "--eval-every", str(args.epochs), "--quiet", "--no-report", "--threads",
                   str(args.threads), "--checkpoint-every", "0", *flags]
            subprocess.run(cmd, check=True)
            rows[name] = json.loads((out / "metrics.json").read_text())
    base = rows["undirected"]
    print("\n| case | s/epoch | x undirected | peak RSS (GiB) | x undirected | test AUC |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, m in rows.items():
        print(f"| {name} | {m['seconds_per_epoch']:.3f} | {m['seconds_per_epoch'] / base['seconds_per_epoch']:.2f} | "
              f"{m['peak_rss_bytes'] / 2**30:.2f} | {m['peak_rss_bytes'] / base['peak_rss_bytes']:.2f} | "
              f"{m['test_auc']:.4f} |")


if __name__ == "__main__":
    main()
