"""Data-parallel full batch: 1 vs 2 vs 4 processes on this machine (torchrun, gloo), same graph and
epochs; each process gets cores / processes torch threads. Prints s/epoch, the summed peak memory of
all processes and the test AUC.

    .venv/bin/python bench/bench_distributed.py --nodes 770000 --num-edges 4600000 --epochs 10
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd: list[str]) -> tuple[float, int]:
    """Wall time and the peak of the summed RSS of ``cmd`` and all its descendants (sampled every 0.2 s)."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    peak = [0]

    def poll():
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                peak[0] = max(peak[0], sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]
                                           if "gaescale" in " ".join(p.cmdline())))
            except psutil.Error:
                pass
            time.sleep(0.2)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    _, err = proc.communicate()
    th.join()
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{err[-3000:]}")
    return time.perf_counter() - t, peak[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=770_000)
    ap.add_argument("--num-edges", type=int, default=4_600_000)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    rows = []
    with tempfile.TemporaryDirectory(prefix="gaescale-ddp-") as tmp:
        from gaescale.synthetic import community_graph
        data = community_graph(args.nodes, args.num_edges, seed=0)
        edges = Path(tmp) / "edges.npz"
        np.savez(edges, edge_index=data.edge_index, x=data.x)
        del data
        for k in args.processes:
            out = Path(tmp) / f"run-{k}"
            launcher = [sys.executable] if k == 1 else [sys.executable, "-m", "torch.distributed.run",
                                                        "--nproc-per-node", str(k), "--master-port", str(_port())]
            wall, peak = run([*launcher, "-m", "gaescale", "train", str(edges), "--out", str(out), "--hidden", "16,16",
                              "--dim", "8", "--epochs", str(args.epochs), "--eval-every", str(args.epochs),
                              "--no-report", "--checkpoint-every", "0", "--quiet",
                              "--threads", str(max(1, cores // k))])
            m = json.loads((out / "metrics.json").read_text())
            rows.append((k, max(1, cores // k), m["seconds_per_epoch"], peak, m["test_auc"], wall))
            print(f"{k} processes: {m['seconds_per_epoch']:.3f} s/epoch, {peak / 2**30:.2f} GiB in all, "
                  f"AUC {m['test_auc']:.4f}", file=sys.stderr, flush=True)
    print(f"\n{args.nodes:,} nodes, {args.num_edges:,} edges, GCN 8-16-16-8, full batch, {args.epochs} epochs, "
          f"{cores} cores\n")
    print("| processes | threads each | s/epoch | speed-up | peak RSS, all processes (GiB) | test AUC | wall (s) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for k, threads, spe, peak, auc, wall in rows:
        print(f"| {k} | {threads} | {spe:.3f} | {rows[0][2] / spe:.2f}x | {peak / 2**30:.2f} | {auc:.4f} | {wall:.0f} |")


if __name__ == "__main__":
    main()
