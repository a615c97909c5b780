"""Under torchrun, what it costs to have rank 0 alone read an edge list (``gaescale.data.inputs``): two "hosts" on
127.0.0.1 (two torchrun launchers, ``--nnodes 2``, one process each), host 1 given no file. First both write
to one ``--out``: rank 0 prepares ``OUT/prepared`` and host 1 maps it. Then host 1 writes to its own
``--out``, as on its own disk: rank 0 reuses its copy and sends it to host 1. Each run trains 5 s of one
epoch of neighbour sampling. The times are those of the run's log line (the copy made or reused, sent,
and every process's check of it).

    .venv/bin/python bench/bench_copy.py --nodes 1000000 --num-edges 30000000
"""
from __future__ import annotations

import argparse
import filecmp
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench_distributed import _port  # bench/ is on the path when run as a script


def two_hosts(tmp: Path, edges: Path, outs: tuple[Path, Path]) -> tuple[float, str]:
    """Wall seconds and rank 0's log line about the copy."""
    endpoint = f"127.0.0.1:{_port()}"
    t = time.perf_counter()
    procs = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(host), "--nproc-per-node",
         "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "bench-copy", "-m", "gaescale",
         "train", str(edges if host == 0 else tmp / "missing.npz"), "--out", str(outs[host]), "--strategy", "neighbor",
         "--hidden", "16,16", "--dim", "8", "--epochs", "1", "--time-limit", "5", "--no-report", "--threads", "1",
         "--checkpoint-every", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"}) for host in (0, 1)]
    errs = [p.communicate()[1] for p in procs]
    if any(p.returncode for p in procs):
        sys.exit("\n".join(e[-3000:] for e in errs))
    line = next(ln for ln in errs[0].splitlines() if "the run's own copy" in ln)
    return time.perf_counter() - t, line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--num-edges", type=int, default=30_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gaescale-copy-") as d:
        tmp = Path(d)
        from gaescale.data.synthetic import community_graph
        data = community_graph(args.nodes, args.num_edges, seed=0)
        edges = tmp / "edges.npz"
        np.savez(edges, edge_index=data.edge_index, x=data.x)
        del data
        rows = []
        for case, outs in (("shared --out: rank 0 prepares, host 1 maps it", (tmp / "h0", tmp / "h0")),
                           ("own --out: rank 0 reuses its copy and sends it", (tmp / "h0", tmp / "h1"))):
            wall, line = two_hosts(tmp, edges, outs)
            seconds = float(re.search(r"\[([\d.]+)s\]$", line).group(1))
            rows.append((case, seconds, wall, "sent to" in line))
            print(line, file=sys.stderr, flush=True)
        copy = sorted((tmp / "h0" / "prepared").iterdir())
        size = sum(p.stat().st_size for p in copy)
        same = all(filecmp.cmp(p, tmp / "h1" / "prepared" / p.name, shallow=False) for p in copy)
    print(f"\n{args.nodes:,} nodes, {args.num_edges:,} edges, an .npz edge list with 8 features; "
          f"the copy is {size / 2**20:,.0f} MiB; host 1's copy equals rank 0's byte for byte: {same}\n")
    print("| case | copy made or reused, sent, checked (s) | sent | wall of the run (s) |")
    print("|---|---:|:---:|---:|")
    for case, seconds, wall, sent in rows:
        print(f"| {case} | {seconds:.1f} | {'yes' if sent else 'no'} | {wall:.0f} |")


if __name__ == "__main__":
    main()
