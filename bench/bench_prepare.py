"""Graphs from disk: `gaescale prepare` (chunked conversion to a memory-mapped CSR) and training from the
prepared directory, against training from the edge list in memory with the same strategy and time.

Each stage is its own process; a thread reads its /proc/PID/smaps every 0.1 s for the peak resident
memory, its anonymous part, and the pages of the memory-mapped graph's files (the prepared directory
and the run's split/), which the kernel can drop and read again: page cache, not the process's own.

    .venv/bin/python bench/bench_prepare.py --nodes 10000000 --num-edges 60000000 --seconds 120 --memory-too

The planner's prediction (``gaescale plan``, prepared or not) is printed beside each run, against the
training phase's peak of resident memory less the pages of the graph's mapped files (page cache the
kernel may drop and read again); for a run from an edge list nothing is mapped and that is the
resident peak.
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
from gaescale.run.plan import plan

FLAGS = {"neighbor": ["--fanouts", "5,5,5", "--batch-size", "4096"], "cluster": []}
COMMON = ["--epochs", "100000", "--eval-every", "100000", "--patience", "0", "--no-report", "--checkpoint-every", "0",
          "--threads", "2"]
GEN = """
import sys, numpy as np
from gaescale.data.synthetic import community_graph
d = community_graph({nodes}, {edges}, seed=0)
np.save(sys.argv[1] + "/edges.npy", d.edge_index.T)  # (E, 2) rows, as an edge-list file would hold them
np.save(sys.argv[1] + "/x.npy", d.x)
"""


MARKERS = {"neighbor": "neighbour sampling:", "cluster": "Cluster-GCN:"}  # the log line just before training


def _sample(pid: int, graph_dirs: list[str]) -> dict[str, int]:
    """VmRSS and, from /proc/PID/smaps, how much of it is pages of files under ``graph_dirs`` (the
    memory-mapped graph: page cache the kernel may drop), and anonymous memory."""
    out = {"rss": 0, "graph": 0, "anon": 0}
    try:
        with open(f"/proc/{pid}/smaps") as fh:
            in_graph = False
            for line in fh:
                head = line.split(None, 5)
                if "-" in head[0] and not line.endswith("kB\n"):  # a mapping's header line
                    in_graph = len(head) > 5 and any(head[5].startswith(d) for d in graph_dirs)
                elif head[0] == "Rss:":
                    out["rss"] += int(head[1]) * 1024
                    out["graph"] += int(head[1]) * 1024 if in_graph else 0
                elif head[0] == "Anonymous:":
                    out["anon"] += int(head[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return out


def monitored(cmd: list[str], graph_dirs: list[str], marker: str | None = None,
              stamps: list | None = None, every: float = 0.1) -> tuple[float, dict[str, int], str]:
    """Run ``cmd``; returns its wall time and peaks, read ``every`` seconds (reading smaps walks the page tables
    of every mapping: at tens of GiB mapped, every 0.1 s takes a whole core), of: resident memory (``rss``), of its
    anonymous part, of resident memory less the graph's mapped files (``own``), and of that during
    training only (``train_own``: from the log line ``marker`` that precedes training, after METIS), and
    its stderr; ``stamps`` gets ``(seconds since the start, line)`` of each line of it."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peaks = {"rss": 0, "anon": 0, "graph": 0, "own": 0, "train_own": 0}
    training = threading.Event()

    def poll():
        while proc.poll() is None:
            m = _sample(proc.pid, graph_dirs)
            own = m["rss"] - m["graph"]
            for k, v in (("rss", m["rss"]), ("anon", m["anon"]), ("graph", m["graph"]), ("own", own)):
                peaks[k] = max(peaks[k], v)
            if training.is_set():
                peaks["train_own"] = max(peaks["train_own"], own)
            time.sleep(every)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    err = []
    for line in proc.stderr:
        err.append(line)
        if stamps is not None:
            stamps.append((time.perf_counter() - t, line))
        if marker and line.startswith(marker):
            training.set()
    proc.wait()
    th.join()
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{''.join(err[-20:])}")
    return time.perf_counter() - t, peaks, "".join(err)


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
                                str(work / "x.npy"), "--out", str(prepared)], [])
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
            wall, peaks, err = monitored([py, "-m", "gaescale", "train", *source, "--out", str(out), *flags, *COMMON,
                                          "--time-limit", str(args.seconds)], [str(prepared), str(out / "split")],
                                         MARKERS[strategy])
            (out / "train.log").write_text(err)  # the run's log lines, each stage with its time
            (pred,) = [q for q in plan(config, args.nodes, args.num_edges, 8, prepared=is_prepared)
                       if q.strategy == strategy]
            rows.append((f"train `{strategy}` from the {name}", wall, peaks,
                         json.loads((out / "metrics.json").read_text()), pred.peak_bytes, is_prepared))
    print(f"\n{args.nodes:,} nodes, {args.num_edges:,} edges, GCN 8-16-16-8, {args.seconds:.0f} s of training; "
          + "; ".join(f"{k}: {' '.join(v) or 'defaults'}" for k, v in FLAGS.items() if k in args.strategies) + "\n")
    print("| stage | wall (s) | peak RSS (GiB) | anonymous | graph's mapped files | RSS less the graph's files "
          "| the same, training only | planner (GiB) | planner / measured | steps | test AUC |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, wall, p, m, pred, _is_prepared in rows:
        steps = "" if m is None else sum(h.get("steps", 1) for h in m["history"])
        auc = "" if m is None else f"{m['test_auc']:.4f}"
        ratio = "" if pred is None else f"{pred / p['train_own']:.2f}"
        g = lambda v: f"{v / 2**30:.2f}"  # noqa: E731
        print(f"| {name} | {wall:.0f} | {g(p['rss'])} | {g(p['anon'])} | {g(p['graph'])} | {g(p['own'])} | "
              f"{g(p['train_own']) if m is not None else ''} | {'' if pred is None else g(pred)} | {ratio} "
              f"| {steps} | {auc} |")


if __name__ == "__main__":
    main()
