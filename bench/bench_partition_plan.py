"""The planner's partitions of a featureless table on disk against the measured peak: a generated graph prepared
without features, then `gaescale train --strategy partitioned --memory-budget B` (no --table-parts: the planner
picks the fewest partitions that fit), its peak anonymous memory sampled beside it.

    .venv/bin/python bench/bench_partition_plan.py --nodes 10000000 --rows 112000000 --budget 5 --work /work/big10m
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_prepare import monitored  # noqa: E402

FLAGS = ["--encoder", "linear", "--dim", "16", "--val-fraction", "0.01", "--test-fraction", "0.01",
         "--strategy", "partitioned"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=10_000_000)
    ap.add_argument("--rows", type=int, default=112_000_000, help="edge rows to generate (~11%% are repeats)")
    ap.add_argument("--budget", default="5", help="--memory-budget of plan and train")
    ap.add_argument("--time-limit", type=float, default=240.0, help="seconds of training")
    ap.add_argument("--work", type=Path, required=True, help="a new directory: graph, prepared graph and run")
    args = ap.parse_args()
    py, work = sys.executable, args.work
    graph, prep, run = work / "graph", work / "prep", work / "run"
    if not (graph / "edges.npy").exists():
        subprocess.run([py, str(Path(__file__).parent / "make_big_graph.py"), "--nodes", str(args.nodes), "--edges",
                        str(args.rows), "--out", str(graph)], check=True)
    if not prep.exists():
        subprocess.run([py, "-m", "gaescale", "prepare", str(graph / "edges.npy"), "--out", str(prep)], check=True,
                       capture_output=True)
    flags = [*FLAGS, "--memory-budget", args.budget]
    table = subprocess.run([py, "-m", "gaescale", "plan", str(prep), *flags], check=True, capture_output=True,
                           text=True).stdout
    row = next(line for line in table.splitlines() if line.startswith("| partitioned"))
    print(table, file=sys.stderr)
    cmd = [py, "-m", "gaescale", "train", str(prep), "--out", str(run), *flags, "--epochs", "1000", "--eval-every",
           "1000", "--no-report", "--threads", "2", "--time-limit", str(args.time_limit), "--overwrite"]
    wall, peaks, err = monitored(cmd, [str(prep), str(run)], None, None, every=0.5)
    chosen = re.search(r"--table-parts (\d+): predicted peak ([\d.]+) GiB", err)
    result = next((line for line in err.splitlines() if "test AUC" in line), "(no test line)")
    print("| nodes | rows | budget | partitions (planner) | predicted peak GiB | measured anonymous peak GiB "
          "| measured / predicted | peak RSS GiB | train command (s) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    parts, predicted = (chosen.group(1), float(chosen.group(2))) if chosen else ("?", float("nan"))
    anon = peaks["anon"] / 2**30
    print(f"| {args.nodes:,} | {args.rows:,} | {args.budget} | {parts} | {predicted:.2f} | {anon:.2f} | "
          f"{anon / predicted:.2f} | {peaks['rss'] / 2**30:.2f} | {wall:.0f} |")
    print(f"\nplan: {row}\n{result.strip()}")


if __name__ == "__main__":
    main()
