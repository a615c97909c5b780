"""The learnt table on disk, trained in partitions (``--strategy partitioned``), against the same table in memory, on
one featureless graph and one split, after equal training time: seconds per epoch, peak memory, test AUC/AP and the
filtered ranking beside Adamic-Adar's.

    .venv/bin/python bench/bench_partitioned.py --nodes 200000 --edges 1200000 --time-limit 120

Each run is its own ``gaescale train`` process on the same edge list (the demo's community model without its
features), with the one-hop linear encoder's ``N x 16`` table, ``--structure off`` (the table's learning alone, not
the structural part's) and the run's own split (seed 0: the same for every run).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from gaescale.data.synthetic import community_graph

COMMON = ["--encoder", "linear", "--dim", "16", "--structure", "off", "--epochs", "100000", "--eval-every", "100000",
          "--no-report", "--quiet", "--threads", "2"]


def run(edges: Path, out: Path, flags: list[str], time_limit: float) -> dict:
    subprocess.run([sys.executable, "-m", "gaescale", "train", str(edges), "--out", str(out), *COMMON,
                    "--time-limit", str(time_limit), *flags], check=True)
    return json.loads((out / "metrics.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=200_000)
    ap.add_argument("--edges", type=int, default=1_200_000)
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--parts", default="4,16", help="--table-parts of the partitioned runs")
    args = ap.parse_args()
    variants = [("table in memory, full batch", ["--strategy", "full"])]
    variants += [(f"table on disk, {p} partitions", ["--strategy", "partitioned", "--table-parts", p])
                 for p in args.parts.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        edges = Path(tmp) / "edges.npy"
        np.save(edges, community_graph(args.nodes, args.edges, seed=0).edge_index)
        rows = [(name, run(edges, Path(tmp) / f"run{k}", flags, args.time_limit))
                for k, (name, flags) in enumerate(variants)]
    print(f"\n{args.nodes:,} nodes, {args.edges:,} edges, no features; linear encoder, N x 16 table; "
          f"{args.time_limit:g} s of training each\n")
    print("| run | epochs | s/epoch | peak RSS GiB | test AUC | test AP | filtered MRR | Hits@10 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, m in rows:
        print(f"| {name} | {m['epochs']} | {m['seconds_per_epoch']:.2f} | {m['peak_rss_bytes'] / 2**30:.2f} | "
              f"{m['test_auc']:.4f} | {m['test_ap']:.4f} | {m['filtered_mrr']:.4f} | {m['filtered_hits@10']:.4f} |")
    b = rows[0][1]["baselines"]["adamic_adar"]
    print(f"| Adamic-Adar (same split) | | | | {b['auc']:.4f} | {b['ap']:.4f} | {b['filtered_mrr']:.4f} | "
          f"{b['filtered_hits@10']:.4f} |")


if __name__ == "__main__":
    main()
