"""Training strategies on the 770,000-node demo graph after the same training time: full batch (the
reference), full batch with activation checkpointing or mixed precision, Cluster-GCN, FastGAE and neighbour-sampled link
batches. Each in its own process; an epoch that starts within the time runs to its end.

    .venv/bin/python bench/bench_strategies.py --seconds 120
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = {
    "full batch": [],
    "full batch + --checkpoint-activations": ["--checkpoint-activations"],
    "full batch + --precision bf16": ["--precision", "bf16"],
    "full batch + --precision fp16": ["--precision", "fp16"],
    "Cluster-GCN (770 METIS parts, 20 per step)": ["--strategy", "cluster"],
    "FastGAE (77,000-node subgraphs, alpha 1)": ["--strategy", "fastgae"],
    "neighbour sampling (65,536 edges per step, fan-outs 10,10,10)": ["--strategy", "neighbor"],
    "neighbour sampling (4,096 edges per step, fan-outs 5,5,5)": ["--strategy", "neighbor", "--batch-size", "4096",
                                                                  "--fanouts", "5,5,5"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=120.0, help="training time of each strategy")
    ap.add_argument("--nodes", type=int, default=770_000)
    ap.add_argument("--num-edges", type=int, default=4_600_000)
    ap.add_argument("--only", nargs="*", help="run only variants whose name starts with one of these")
    args = ap.parse_args()
    rows = []
    for name, flags in VARIANTS.items():
        if args.only and not any(name.startswith(o) for o in args.only):
            continue
        with tempfile.TemporaryDirectory(prefix="gaescale-strategies-") as tmp:
            cmd = [sys.executable, "-m", "gaescale", "demo", "--nodes", str(args.nodes), "--num-edges",
                   str(args.num_edges), "--epochs", "100000", "--time-limit", str(args.seconds), "--eval-every", "5",
                   "--patience", "0", "--no-report", "--checkpoint-every", "0", "--quiet", "--out", tmp, *flags]
            t = time.perf_counter()
            r = subprocess.run(cmd, capture_output=True, text=True)
            wall = time.perf_counter() - t
            if r.returncode:
                sys.exit(f"{name} failed:\n{r.stderr}")
            m = json.loads((Path(tmp) / "metrics.json").read_text())
        steps = sum(h.get("steps", 1) for h in m["history"])
        rows.append((name, m["epochs"], steps, m["seconds_per_epoch"], m["peak_rss_bytes"] / 2**30,
                     (m.get("training_peak_rss_bytes") or 0) / 2**30, m["test_auc"], m["test_ap"], wall))
        print(f"{name}: {m['epochs']} epochs, {m['seconds_per_epoch']:.3f} s/epoch, "
              f"{m['peak_rss_bytes'] / 2**30:.2f} GiB, AUC {m['test_auc']:.4f}", file=sys.stderr, flush=True)
    ref = rows[0]
    print(f"\n{args.nodes:,} nodes, {args.num_edges:,} edges, GCN 8-16-16-8, {args.seconds:.0f} s of training each\n")
    print("| strategy | epochs | steps | s/epoch | peak RSS (GiB) | training peak (GiB) | test AUC | test AP "
          "| AUC - full | wall (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, ep, st, spe, rss, train_rss, auc, ap_, wall in rows:
        print(f"| {name} | {ep} | {st} | {spe:.3f} | {rss:.2f} | {train_rss:.2f} | {auc:.4f} | {ap_:.4f} "
              f"| {auc - ref[6]:+.4f} | {wall:.0f} |")


if __name__ == "__main__":
    main()
