"""Graphs from disk: `gaescale prepare` (chunked conversion to a memory-mapped CSR) and training from the
prepared directory, against training from the edge list in memory with the same strategy and time.

Each stage is its own process; a thread samples its /proc status every 50 ms for the peak resident
memory split into anonymous memory (heap: what the process holds) and file-backed pages (the
memory-mapped graph, which the kernel can drop and re-read: page cache, not the process's own).

    .venv/bin/python bench/bench_prepare.py --nodes 10000000 --num-edges 60000000 --seconds 120 --memory-too

The planner's prediction (``gaescale plan``, prepared or not) is printed beside each run: for a prepared
graph it predicts the anonymous peak (file-backed pages are page cache), otherwise the training phase's
peak that metrics.json records.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from gaescale.config import TrainConfig
from gaescale.plan import plan

FLAGS = {"neighbor": ["--fanouts", "5,5,5", "--batch-size", "4096"], "cluster": []}
COMMON = ["--epochs", "100000", "--eval-every", "100000", "--patience", "0", "--no-report", "--checkpoint-every", "0",
          "--quiet", "--threads", "2"]
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
    ap.add_argument("--strategies", nargs="+", default=["neighbor"], choices=list(FLAGS))
    ap.add_argument("--memory-too", action="store_true", help="also train from the edge list in memory")
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
        shutil.rmtree(prepared)
    wall, peaks, _ = monitored([py, "-m", "gaescale", "prepare", str(work / "edges.npy"), "--features",
                                str(work / "x.npy"), "--out", str(prepared)])
    rows.append(("gaescale prepare edges.npy (+ x.npy)", wall, peaks, None, None, True))
    sources = [("prepared directory", [str(prepared)], True)]
    if args.memory_too:
        sources.append(("edges.npy in memory", [str(work / "edges.npy"), "--features", str(work / "x.npy")], False))
    for strategy in args.strategies:
        flags = ["--hidden", "16,16", "--dim", "8", "--strategy", strategy, *FLAGS[strategy]]
        config = TrainConfig.from_dict({k.lstrip("-").replace("-", "_"): v for k, v in zip(flags[::2], flags[1::2])})
        for name, source, is_prepared in sources:
            out = work / f"run-{strategy}-{'dir' if is_prepared else 'memory'}"
            if out.exists():
                shutil.rmtree(out)
            wall, peaks, _ = monitored([py, "-m", "gaescale", "train", *source, "--out", str(out), *flags, *COMMON,
                                        "--time-limit", str(args.seconds)])
            (pred,) = [q for q in plan(config, args.nodes, args.num_edges, 8, prepared=is_prepared)
                       if q.strategy == strategy]
            rows.append((f"train `{strategy}` from the {name}", wall, peaks,
                         json.loads((out / "metrics.json").read_text()), pred.peak_bytes, is_prepared))
    print(f"\n{args.nodes:,} nodes, {args.num_edges:,} edges, GCN 8-16-16-8, {args.seconds:.0f} s of training; "
          + "; ".join(f"{k}: {' '.join(v) or 'defaults'}" for k, v in FLAGS.items() if k in args.strategies) + "\n")
    print("| stage | wall (s) | peak RSS (GiB) | of it anonymous (GiB) | of it file-backed (GiB) | planner (GiB) "
          "| planner / measured | steps | test AUC |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, wall, p, m, pred, is_prepared in rows:
        steps = "" if m is None else sum(h.get("steps", 1) for h in m["history"])
        auc = "" if m is None else f"{m['test_auc']:.4f}"
        # the planner predicts the anonymous peak of a prepared run, the training-phase peak of an in-memory one
        measured = None if m is None else (p["RssAnon"] if is_prepared else m["training_peak_rss_bytes"])
        ratio = "" if measured is None else f"{pred / measured:.2f}"
        print(f"| {name} | {wall:.0f} | {p['VmRSS'] / 2**30:.2f} | {p['RssAnon'] / 2**30:.2f} | "
              f"{p['RssFile'] / 2**30:.2f} | {'' if pred is None else f'{pred / 2**30:.2f}'} | {ratio} | {steps} | {auc} |")


if __name__ == "__main__":
    main()
