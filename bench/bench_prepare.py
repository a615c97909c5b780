"""Graphs from disk: `gaescale prepare` (chunked conversion to a memory-mapped CSR) and training from the
prepared directory, against training from the edge list in memory with the same strategy and time.

Each stage is its own process; a thread samples its /proc status every 50 ms for the peak resident
memory split into anonymous memory (heap: what the process holds) and file-backed pages (the
memory-mapped graph, which the kernel can drop and re-read: page cache, not the process's own).

    .venv/bin/python bench/bench_prepare.py --nodes 10000000 --num-edges 60000000 --seconds 120
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

GEN = """
import sys, numpy as np
from gaescale.synthetic import community_graph
d = community_graph({nodes}, {edges}, seed=0)
np.save(sys.argv[1] + "/edges.npy", d.edge_index.T)  # (E, 2) rows, as an edge-list file would hold them
np.save(sys.argv[1] + "/x.npy", d.x)
"""


def _status(pid: int) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile"):
                    out[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


def monitored(cmd: list[str]) -> tuple[float, dict[str, int], str]:
    """Run ``cmd``; returns its wall time, the peaks of VmRSS / RssAnon / RssFile, and its stderr."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peaks = {"VmRSS": 0, "RssAnon": 0, "RssFile": 0}

    def poll():
        while proc.poll() is None:
            for k, v in _status(proc.pid).items():
                peaks[k] = max(peaks[k], v)
            time.sleep(0.05)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    _, err = proc.communicate()
    th.join()
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{err}")
    return time.perf_counter() - t, peaks, err


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=10_000_000)
    ap.add_argument("--num-edges", type=int, default=60_000_000)
    ap.add_argument("--seconds", type=float, default=120.0, help="training time of each run")
    ap.add_argument("--work", default="/tmp/gaescale-bench-prepare", help="where the graph and runs go (kept: the "
                                                                          "generated graph is reused)")
    ap.add_argument("--strategy", default="neighbor")
    ap.add_argument("--flags", default="--fanouts 5,5,5 --batch-size 4096", help="strategy flags of both runs")
    args = ap.parse_args()
    work = Path(args.work) / f"{args.nodes}-{args.num_edges}"
    work.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    if not (work / "x.npy").exists():
        print(f"generating the {args.nodes:,}-node graph in {work} ...", file=sys.stderr, flush=True)
        subprocess.run([py, "-c", GEN.format(nodes=args.nodes, edges=args.num_edges), str(work)], check=True)
    rows = []
    prepared = work / "prepared"
    if prepared.exists():
        import shutil
        shutil.rmtree(prepared)
    wall, peaks, _ = monitored([py, "-m", "gaescale", "prepare", str(work / "edges.npy"), "--features",
                                str(work / "x.npy"), "--out", str(prepared)])
    rows.append(("gaescale prepare edges.npy (+ x.npy)", wall, peaks, None))
    common = ["--hidden", "16,16", "--dim", "8", "--strategy", args.strategy, *args.flags.split(), "--epochs", "100000",
              "--time-limit", str(args.seconds), "--eval-every", "100000", "--patience", "0", "--no-report",
              "--checkpoint-every", "0", "--quiet", "--threads", "2"]
    for name, source in (("train from the prepared directory", [str(prepared)]),
                         ("train from edges.npy in memory", [str(work / "edges.npy"), "--features", str(work / "x.npy")])):
        out = work / ("run-" + name.split()[-1])
        if out.exists():
            import shutil
            shutil.rmtree(out)
        wall, peaks, _ = monitored([py, "-m", "gaescale", "train", *source, "--out", str(out), *common])
        rows.append((name, wall, peaks, json.loads((out / "metrics.json").read_text())))
    print(f"\n{args.nodes:,} nodes, {args.num_edges:,} edges, GCN 8-16-16-8, --strategy {args.strategy} {args.flags}, "
          f"{args.seconds:.0f} s of training\n")
    print("| stage | wall (s) | peak RSS (GiB) | of it anonymous (GiB) | of it file-backed (GiB) | steps | test AUC |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, wall, p, m in rows:
        steps = "" if m is None else sum(h.get("steps", 1) for h in m["history"])
        auc = "" if m is None else f"{m['test_auc']:.4f}"
        print(f"| {name} | {wall:.0f} | {p['VmRSS'] / 2**30:.2f} | {p['RssAnon'] / 2**30:.2f} | "
              f"{p['RssFile'] / 2**30:.2f} | {steps} | {auc} |")


if __name__ == "__main__":
    main()
