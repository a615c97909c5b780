"""Data-parallel training: 1 vs 2 vs 4 processes on this machine (torchrun, gloo), same graph and
epochs; each process gets cores / processes torch threads. For each strategy it prints s/epoch (an
epoch covers the training edges once, over all processes together), the peak memory of rank 0, of the
largest other rank and of all together, the test AUC, and the seconds rank 0 spent outside epochs and the
final embedding (reading, splitting, building the model; validation and writing the outputs).

    .venv/bin/python bench/bench_distributed.py --nodes 770000 --num-edges 4600000 --epochs 10
    .venv/bin/python bench/bench_distributed.py --strategies full cluster neighbor --prepared --epochs 3
    .venv/bin/python bench/bench_distributed.py --strategies full fastgae --processes 1 2 --text --epochs 1
    .venv/bin/python bench/bench_distributed.py --nodes 50000 --num-edges 300000 --epochs 3 \
        --train-flags "--loss weighted-bce --dense exact"

Memory is read from /proc/PID/smaps every 0.2 s: resident memory less the pages of the memory-mapped
graph's files (the prepared directory and the runs' split files: page cache, shared by the processes
of a host, which the kernel may drop and read again), and apart, how much of the graph's files each
process has read: the sum over the files of the peak of each one's pages resident in it. The torchrun launcher
itself is not counted.
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


def run(cmd: list[str], graph_dirs: list[str]) -> tuple[float, dict[int, int], dict[int, int], int]:
    """Wall time; per rank, the peak own memory (resident less mapped graph files; see the module's
    docstring) and how much of the graph files it has read (the sum over the files of the peak of each
    one's resident pages); and the peak of all workers' own memory summed; sampled every 0.2 s."""
    from bench_prepare import _sample
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    peak = {"all": 0}
    own_peak: dict[int, int] = {}
    file_peak: dict[tuple[int, str], int] = {}

    def poll():
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                workers = [p for p in [root, *root.children(recursive=True)]
                           if "gaescale" in " ".join(p.cmdline())
                           and "torch.distributed.run" not in " ".join(p.cmdline())]
                total = 0
                for p in workers:
                    m, rank = _sample(p.pid, graph_dirs), int(p.environ().get("RANK", "0"))
                    own_peak[rank] = max(own_peak.get(rank, 0), m["rss"] - m["graph"])
                    for name, size in _mapped_files(p.pid, graph_dirs).items():
                        file_peak[rank, name] = max(file_peak.get((rank, name), 0), size)
                    total += m["rss"] - m["graph"]
                peak["all"] = max(peak["all"], total)
            except psutil.Error:
                pass
            time.sleep(0.2)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    _, err = proc.communicate()
    th.join()
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{err[-3000:]}")
    mapped_peak: dict[int, int] = {}
    for (rank, _), size in file_peak.items():
        mapped_peak[rank] = mapped_peak.get(rank, 0) + size
    return time.perf_counter() - t, own_peak, mapped_peak, peak["all"]


def _mapped_files(pid: int, graph_dirs: list[str]) -> dict[str, int]:
    """The resident pages of each mapped file under ``graph_dirs`` in process ``pid`` (from its smaps)."""
    out: dict[str, int] = {}
    name = None
    try:
        with open(f"/proc/{pid}/smaps") as fh:
            for line in fh:
                head = line.split(None, 5)
                if "-" in head[0] and not line.endswith("kB\n"):
                    name = head[5].strip() if len(head) > 5 and any(head[5].startswith(d) for d in graph_dirs) else None
                elif head[0] == "Rss:" and name:
                    out[name] = out.get(name, 0) + int(head[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return out


FLAGS = {"full": [], "cluster": [], "fastgae": [], "neighbor": ["--fanouts", "5,5,5"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=770_000)
    ap.add_argument("--num-edges", type=int, default=4_600_000)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--strategies", nargs="+", default=["full"], choices=sorted(FLAGS))
    ap.add_argument("--prepared", action="store_true", help="train from a directory of 'gaescale prepare'")
    ap.add_argument("--text", action="store_true", help="an edge list in CSV (integer ids), the features in .npy, "
                                                        "instead of one .npz")
    ap.add_argument("--train-flags", default="",
                    help="more flags for every run, e.g. '--loss weighted-bce --dense exact'")
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    rows = []
    with tempfile.TemporaryDirectory(prefix="gaescale-ddp-") as tmp:
        from gaescale.data.synthetic import community_graph
        data = community_graph(args.nodes, args.num_edges, seed=0)
        edges = Path(tmp) / "edges.npz"
        features = []
        if args.text:
            edges = Path(tmp) / "edges.csv"
            np.savetxt(edges, data.edge_index.T, fmt="%d", delimiter=",")
            np.save(Path(tmp) / "x.npy", data.x)
            features = ["--features", str(Path(tmp) / "x.npy")]
        else:
            np.savez(edges, edge_index=data.edge_index, x=data.x)
        del data
        if args.prepared:
            subprocess.run([sys.executable, "-m", "gaescale", "prepare", str(edges), *features, "--out",
                            f"{tmp}/graph"], check=True, capture_output=True)
            edges, features = Path(tmp) / "graph", []
        for strategy in args.strategies:
            for k in args.processes:
                out = Path(tmp) / f"run-{strategy}-{k}"
                launcher = [sys.executable] if k == 1 else [sys.executable, "-m", "torch.distributed.run",
                                                            "--nproc-per-node", str(k), "--master-port", str(_port())]
                wall, own, mapped, together = run(
                    [*launcher, "-m", "gaescale", "train", str(edges), *features, "--out", str(out),
                     "--hidden", "16,16", "--dim", "8", "--epochs", str(args.epochs),
                     "--eval-every", str(args.epochs), "--no-report",
                     "--checkpoint-every", "0", "--quiet", "--threads", str(max(1, cores // k)),
                     "--strategy", strategy, *FLAGS[strategy], *args.train_flags.split()], [tmp])
                m = json.loads((out / "metrics.json").read_text())
                others = [r for r in own if r > 0]
                other_own = max((own[r] for r in others), default=0)
                other_mapped = max((mapped.get(r, 0) for r in others), default=0)
                setup = (m["total_seconds"] - sum(h["seconds"] for h in m["history"])
                         - (m.get("embed_seconds") or 0))
                rows.append((strategy, k, max(1, cores // k), m["seconds_per_epoch"], own.get(0, 0), other_own,
                             mapped.get(0, 0), other_mapped, together, m["test_auc"], m["history"][0]["steps"], wall,
                             m.get("embed_seconds"), setup))
                print(f"{strategy}, {k} processes: {m['seconds_per_epoch']:.3f} s/epoch, "
                      f"rank 0 {own.get(0, 0) / 2**30:.2f} GiB, others {other_own / 2**30:.2f} GiB "
                      f"(+ {other_mapped / 2**30:.2f} GiB of the graph's "
                      f"files read), {together / 2**30:.2f} GiB in all, AUC {m['test_auc']:.4f}",
                      file=sys.stderr, flush=True)
    print(f"\n{args.nodes:,} nodes, {args.num_edges:,} edges, GCN 8-16-16-8, {args.epochs} epochs, {cores} cores, "
          f"{'from a prepared directory' if args.prepared else 'from an edge list'}"
          f"{' in CSV, the features in .npy' if args.text else ''} {args.train_flags}\n")
    print("| strategy | processes | threads each | steps per epoch, each | s/epoch | speed-up | rank 0: own memory "
          "(GiB) | graph files read (GiB) | largest other rank: own memory (GiB) | graph files read (GiB) | "
          "all processes' own memory (GiB) | test AUC | final embedding (s) | rank 0 outside epochs "
          "and the final embedding (s) | wall (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    base = {}
    gib = lambda b: f"{b / 2**30:.2f}"  # noqa: E731
    for strategy, k, threads, spe, own0, other, mapped0, other_mapped, together, auc, steps, wall, embed, setup in rows:
        base.setdefault(strategy, spe)
        print(f"| {strategy} | {k} | {threads} | {steps} | {spe:.3f} | {base[strategy] / spe:.2f}x | {gib(own0)} | "
              f"{gib(mapped0)} | {gib(other) if k > 1 else '-'} | {gib(other_mapped) if k > 1 else '-'} | "
              f"{gib(together)} | {auc:.4f} | {'-' if embed is None else f'{embed:.1f}'} | {setup:.1f} | {wall:.0f} |")

if __name__ == "__main__":
    main()
